"""Every model_type of the installed transformers, read as a user's config.json would be: the parameter count and the
layer kinds vramlens gives (`knowledge.models.arch_from_hf_config`, then `param_count`) equal what transformers' own
classes build from that config on the meta device.

The default run checks a fixed sample (the language models vramlens is most used for, and a deterministic slice of
the rest); `VRAMLENS_ALL_MODEL_TYPES=1` checks every model_type with an inventory. A model_type that cannot be built
is recorded with its reason in the inventories' "skipped" (scripts/dump_model_inventories.py); any other model_type
with a model class must have an inventory.
"""

from __future__ import annotations

import json

import pytest
from test_inventory import ALL, _meta_build, _variant, dump, sample  # noqa: F401  (the fixture)
from vramlens.knowledge import inventory
from vramlens.knowledge.models import arch_from_hf_config, param_count


def _selected() -> list[str]:
    return sample(inventory._data()["models"])


# model_types where what vramlens reports from a config.json is not yet what transformers builds from it, and why
# (from a VRAMLENS_ALL_MODEL_TYPES=1 run); the list may only shrink: a model_type that comes out exact fails here
# until it is taken off
KNOWN = {
    # models without a vocabulary, counted from their inventories (labelled approximate) where a shape is not a sum of
    # products of size fields
    "audio-spectrogram-transformer": "position embeddings of ((num_mel_bins - patch_size) // frequency_stride + 1)"
    " x ((max_length - patch_size) // time_stride + 1) + 2 rows (transformers 5.24 models/audio_spectrogram_transformer"
    "/modeling_audio_spectrogram_transformer.py `ASTEmbeddings.get_shape`): floor divisions, no product of fields",
    "dac": "its blocks differ in width by index (encoder_hidden_size * 2**i, decoder_hidden_size // 2**(i + 1)) and in"
    " kernel by the lists `downsampling_ratios` / `upsampling_ratios` (transformers 5.24 models/dac/modeling_dac.py"
    " `DacEncoderBlock`, `DacDecoderBlock`): one pattern for every block has no one shape",
    "superpoint": "its conv blocks are as wide as the list `encoder_hidden_sizes` says, one width per block"
    " (transformers 5.24 models/superpoint/modeling_superpoint.py `SuperPointEncoder`): one pattern for every block"
    " has no one shape, and a list is no size field",
    "deimv2": "its HGNet-V2 backbone's stages are sized by per-stage lists (`stage_in_channels`, `stage_mid_channels`,"
    " `stage_out_channels`: transformers 5.24 models/hgnet_v2/modeling_hgnet_v2.py) and the last layer of each"
    " `Deimv2MLP` head differs from the others (models/deimv2/modeling_deimv2.py): one pattern has no one shape",
    # its language model (`ernie4_5_vl_moe_text`) has no class in transformers 5.24's auto mappings
    # (`Ernie4_5_VLMoeTextModel` is named by none), so no inventory, and its text config writes moe_intermediate_size
    # as a list (text experts, vision experts: models/ernie4_5_vl_moe/configuration_ernie4_5_vl_moe.py)
    "ernie4_5_vl_moe": "its language model has no class in the auto mappings and moe_intermediate_size is a list",
    # vision-language composites whose inventory holds a shape that is no sum of products of the size fields
    "step3p7": "its dense and MoE layers are those text_config.mlp_layer_types names (transformers 5.24"
    " models/step3p7/modeling_step3p7.py `Step3p7DecoderLayer`), a list inside the sub-config the inventory does not"
    " read, and its vision MLP is int(hidden_size * mlp_ratio) wide",
    "idefics": "its gated cross-attention layers are num_hidden_layers // cross_layer_interval (transformers 5.24"
    " models/idefics/modeling_idefics.py `IdeficsModel`), a floor division the inventory does not fit",
    "evolla": "its protein adapters sit in the layers where (i + 1) % max(num_hidden_layers // aligner_num_add_layers,"
    " 1) == 0 (transformers 5.24 models/evolla/modeling_evolla.py `EvollaDecoderLayer`): no rule the inventory reads",
    **dict.fromkeys(
        ("chameleon", "emu3"),
        "its VQ-VAE image tokenizer's convolutions are base_channels * channel_multiplier[i] wide, one width per"
        " resolution level (transformers 5.24 models/chameleon/modeling_chameleon.py `ChameleonVQVAEEncoder`,"
        " models/emu3/modeling_emu3.py `Emu3VQVAEEncoder`): one pattern for every level has no one shape",
    ),
    # config.json not read: no reading of its sizes (encoder-decoders, audio, Nemotron-H)
    **dict.fromkeys(
        (),
        "config.json not read",
    ),
    # labelled approximate: a quantity of the inventory does not follow its formula
    # transformers 5.24 models/dots3_note/configuration_dots3_note.py `Dots3NoteTextConfig.__post_init__`: the
    # sliding-window layers take their attention sizes from `per_layer_config` (its `swa_*` sizes, one dict per layer
    # index), and `validate_architecture` requires num_key_value_heads == num_attention_heads and one such dict for
    # every layer of a type, so that the reference build (full widths) varies no layer count nor head size
    **dict.fromkeys(
        ("dots3_note", "dots3_note_text"),
        "sliding layers sized by a per-layer-index per_layer_config dict: layers and heads not varied",
    ),
    # transformers 5.24 models/zamba2/modeling_zamba2.py `Zamba2Model.get_layers`, `Zamba2MLP`: the hybrid layers
    # share num_mem_blocks tied attention blocks, each holding an adapter list with one entry per hybrid layer (a
    # count of listed layers inside a shared block, which no layer rule of the inventory expresses; that list, longer
    # than the layer stack in the reference build, is taken for the stack)
    "zamba2": "shared attention blocks with one adapter per hybrid layer: not a per-layer count",
    # a dedicated formula is kept where the inventory differs from it by more than 5 %
    **dict.fromkeys(
        (),
        "a dedicated formula is kept where the inventory differs from it by more than 5 %",
    ),
    # encoder: the family formula (its head depends on the task)
    # composite whose language model's model_type has no inventory: sized from the config's sizes
    # transformers 5.24 models/mistral_large4/modeling_mistral_large4.py `MistralLarge4TextAttention.__init__`:
    # kv_a_proj_with_mqa and kv_a_layernorm exist only in the layers that own their KV cache (`kv_source_layers[i]
    # == i`), kv_a_proj_with_mqa one RoPE slice wider where `no_rope_layers[i]` is 1: a count over two per-layer
    # lists at once, which no layer rule of the inventory expresses
    **dict.fromkeys(
        ("mistral_large4", "mistral_large4_text"),
        "KV-owning layers (kv_source_layers) sized by no_rope_layers: a rule on two per-layer lists",
    ),
    # its audio codec (transformers 5.24 models/encodec/modeling_encodec.py `EncodecEncoder`, `EncodecDecoder`): one
    # pattern (`layers.{i}.conv`) holds the first convolution (audio_channels → num_filters), one per ratio of
    # `upsampling_ratios` (num_filters·2^i → num_filters·2^(i+1), kernel 2·ratio) and the last (→ hidden_size,
    # last_kernel_size): a sum of products the inventory does not fit; its quantizer's codebooks (`num_quantizers`,
    # from target_bandwidths and the ratios) are the longest ModuleList
    **dict.fromkeys(
        ("musicgen", "musicgen_melody"), "its EnCodec audio codec's convolutions: not a formula of the fields"
    ),
    # models built around a VLM whose config is `vlm_config` (transformers 5.24 models/colpali/modeling_colpali.py
    # `ColPaliForRetrieval`, models/colqwen2, models/colmodernvbert, models/pi0 `PI0Model`): read and counted as that
    # VLM; their own inventories were measured at one set of the VLM's sizes (scripts/dump_model_inventories.py varies
    # one level of sub-configs, the language model's sizes are under vlm_config.text_config), so they cannot scale it
    **dict.fromkeys(
        ("colmodernvbert", "colpali", "colqwen2", "pi0"),
        "counted as its vlm_config's VLM: the sizes under vlm_config.text_config are not varied in its inventory",
    ),
    # config.json not read as save_pretrained writes it (VRAMLENS_ALL_MODEL_TYPES=1): audio and vision composites
    # whose sub-configs write a vocabulary (so they are not counted as models without one) and whose inventories are
    # not exact either: convolutions (EnCodec's in Bark, the subsampling stacks of Canary's and Parakeet-TDT's
    # encoders, HGNet-V2 stages in PP-DocLayout-V2), relative position tables (ZoeDepth's BEiT backbone, CLAP's
    # Swin audio encoder), position embeddings (BridgeTower's vision tower) or layers not counted exactly (Dia)
    **dict.fromkeys(
        (
            "bark",
            "bridgetower",
            "canary",
            "clap",
            "dia",
            "parakeet_tdt",
            "pp_doclayout_v2",
            "zoedepth",
        ),
        "config.json not read: sub-configs with a vocabulary, an inventory that is not exact",
    ),
    # counted from the inventory, labelled approximate (VRAMLENS_ALL_MODEL_TYPES=1): a quantity of the inventory that
    # does not follow its formula
    # position tables whose rows are floor divisions of sizes: (image_size // patch_size)**2 (+ 1) vision position
    # embeddings (transformers 5.24 models/chinese_clip/modeling_chinese_clip.py `ChineseCLIPVisionEmbeddings`,
    # models/paddleocr_vl/modeling_paddleocr_vl.py `PaddleOCRVisionEmbeddings`), 2 * (image_size // patch_size) - 1
    # relative position rows in the global-attention layers of a SAM-style encoder (models/pp_formulanet/
    # modeling_pp_formulanet.py `PPFormulaNetVisionAttention`, models/slanext/modeling_slanext.py
    # `SLANeXtVisionAttention`), and DepthPro's two DINOv2 encoders' position embeddings beside a feature projection
    # per entry of scaled_images_feature_dims + intermediate_feature_dims, the last one an nn.Identity where its
    # width is fusion_hidden_size (models/depth_pro/modeling_depth_pro.py `DepthProFeatureProjection`)
    **dict.fromkeys(
        ("chinese_clip", "depth_pro", "paddleocr_vl", "pp_formulanet", "slanext"),
        "position tables of (image_size // patch_size) rows: a floor division, no product of fields",
    ),
    # SEANet convolutions as in EnCodec and Mimi above (transformers 5.24 models/mimi/modeling_mimi.py `MimiEncoder`,
    # `MimiDecoder`; models/pocket_tts_audio_tokenizer/modeling_pocket_tts_audio_tokenizer.py
    # `PocketTTSAudioTokenizerDecoder`): num_filters * 2**i wide, kernel 2 * ratio, one per entry of
    # upsampling_ratios, under one pattern
    **dict.fromkeys(
        ("mimi_decoder", "mimi_encoder", "pocket_tts_audio_tokenizer_decoder"),
        "SEANet convolutions num_filters * 2**i wide, kernel 2 * ratio: one pattern for every convolution",
    ),
    # transformers 5.24 models/vitpose_backbone/modeling_vitpose_backbone.py `VitPoseBackboneLayer`: the MLP is
    # `VitPoseBackboneMoeMLP` (fc2 hidden_size - part_features wide, num_experts expert heads) only where
    # num_experts > 1, else `VitPoseBackboneMLP`, and the reference build has the other one
    **dict.fromkeys(
        ("vitpose", "vitpose_backbone"),
        "its MLP class depends on num_experts > 1 (VitPoseBackboneMoeMLP or VitPoseBackboneMLP)",
    ),
    # transformers 5.24 models/embedding_gemma2/modeling_embedding_gemma2.py `EmbeddingGemma2Attention`: head_dim and
    # num_key_value_heads of each layer from `config.per_layer_config[layer_idx]`, one dict per layer index
    "embedding_gemma2_text": "k/v projections sized by a per-layer-index per_layer_config dict: no size field",
    # transformers 5.24 models/chmv2/modeling_chmv2.py `CHMv2UpsampleConvHead`: a ModuleList of three Conv2d of
    # different shapes (features → features // 2 → head_hidden_size → number_output_channels) under one pattern
    "chmv2": "its head's convolutions are one ModuleList of three shapes: one pattern has no one shape",
    # transformers 5.24 models/d_fine/modeling_d_fine.py: `DFineMLP` layers of different shapes under one pattern
    # (input → hidden → output: `DFineLQE.reg_conf`, `DFineEncoderLayer.mlp`), and `DFineModel.decoder_input_proj`,
    # an nn.Identity per feature level where hidden_size == decoder_in_channels[-1], else a convolution (1x1 per
    # backbone output, 3x3 per further level)
    "d_fine": "DFineMLP layers of different shapes, input projections built only where two sizes differ",
    # transformers 5.24 models/pp_lcnet/modeling_pp_lcnet.py `PPLCNetBlock`: each block's channels are
    # make_divisible(block_configs[stage][block][1 or 2] * scale, divisor), nested lists and a rounding
    "pp_lcnet": "its blocks are sized by the nested lists block_configs times scale, rounded: no size field",
    # its longest stack is the 24-layer CLIP vision encoder (transformers 5.24 models/unlimited_ocr/
    # modeling_unlimited_ocr.py `UnlimitedOcrEncoder`), whose attention layers are told sliding or full by the
    # text_config.layer_types entry of their index (trace/inventory.py `_layer_kind`): 24 - num_hidden_layers of
    # them full, a difference the inventory does not fit
    "unlimited_ocr": "vision layers typed by the text model's layer_types by index: 24 - num_hidden_layers full",
    # an omni config.json is read as its thinker (`knowledge.models.arch_from_hf_config`: the decoder that is trained);
    # transformers 5.24 models/qwen2_5_omni/modeling_qwen2_5_omni.py `Qwen2_5OmniForConditionalGeneration.__init__`
    # builds the talker and the token2wav vocoder beside it (`enable_talker()` when `enable_audio_output`, True by
    # default), which the reference build counts
    "qwen2_5_omni": "read as its thinker; transformers builds the talker and token2wav beside it",
    # transformers 5.24 models/mask2former/modeling_mask2former.py `Mask2FormerTransformerModule.__init__`: its three
    # input projections are Conv2d(feature_size, hidden_dim) only where `in_features != hidden_dim` (else an empty
    # Sequential), and the reference build has feature_size == hidden_dim (256), so the inventory holds none of them
    # (scripts/dump_model_inventories.py `adds`: a config with another hidden_dim is labelled approximate)
    "mask2former": "input projections built only where feature_size != hidden_dim, equal in the reference build",
    # backbones whose stages are sized by per-stage lists, or whose blocks differ from stage to stage
    "mobilevitv2": "its stage widths are make_divisible(base_width * width_multiplier) per stage (transformers 5.24"
    " models/mobilevitv2/modeling_mobilevitv2.py `MobileViTV2Encoder`): roundings, no product of fields",
    "levit": "its attention biases have len(attention_offsets) rows, the distinct offsets between the resolution**2"
    " positions of each stage (transformers 5.24 models/levit/modeling_levit.py `LevitAttention`,"
    " `LevitAttentionSubsample`): a count of distinct offsets, no product of fields",
    "sapiens2": "its key/value projections are sized per layer by the list num_key_value_heads_per_layer"
    " (transformers 5.24 models/sapiens2/modeling_sapiens2.py `Sapiens2Attention`): a list is no size field",
    # detection heads: an MLP whose last layer differs from the others (`…MLPPredictionHead`: hidden_dim wide, then
    # 4 box coordinates), input projections per feature level from a list of channels, and the backbones above
    **dict.fromkeys(
        ("pp_doclayout_v3", "pp_doclayout_v4"),
        "an input projection per entry of a list of channels (`PPDocLayoutV3Model.decoder_input_proj`, transformers"
        " 5.24 models/pp_doclayout_v3/modeling_pp_doclayout_v3.py; V4 likewise) and MLP heads of different shapes",
    ),
    "rf_detr": "its DINOv2 backbone's position embeddings are (image_size // patch_size)**2 + 1 rows and"
    " `RfDetrMLPPredictionHead`'s last layer is 4 wide (transformers 5.24 models/rf_detr/modeling_rf_detr.py)",
    # the total of occurrences of different shapes fitted as a formula that does not hold at other sizes
    "lw_detr": "enc_out_bbox_embed is group_detr copies of a 3-layer `LwDetrMLPPredictionHead(d_model, d_model, 4)`"
    " (transformers 5.24 models/lw_detr/modeling_lw_detr.py `LwDetrModel.__init__`): layers of different shapes whose"
    " total the inventory fits linearly in d_model, and group_detr is not varied",
    # audio: convolution stacks whose channels double per downsampling ratio, kernels from lists
    **dict.fromkeys(
        ("encodec", "mimi"),
        "SEANet convolutions num_filters * 2**i wide, kernel 2 * ratio, one per entry of upsampling_ratios"
        " (transformers 5.24 models/encodec/modeling_encodec.py `EncodecEncoder`, models/mimi/modeling_mimi.py"
        " `MimiEncoder`): one pattern for every convolution has no one shape",
    ),
    "muse_spark_audio": "its layers are as wide as the list hidden_sizes says and depths[i] conv blocks deep"
    " (transformers 5.24 models/muse_spark/modeling_muse_spark.py `MuseSparkAudioLayer`,"
    " `MuseSparkAudioPatchEmbedding`): lists are no size fields",
    "parakeet_encoder": "its subsampling stack's output linear is subsampling_conv_channels * (num_mel_bins //"
    " 2**k) wide (transformers 5.24 models/parakeet/modeling_parakeet.py `ParakeetEncoderSubsamplingConv2D`): a"
    " floor division, no product of fields",
    "fastspeech2_conformer": "its variance predictors' first convolution reads hidden_size, the others the"
    " predictor's channels (transformers 5.24 models/fastspeech2_conformer/modeling_fastspeech2_conformer.py"
    " `FastSpeech2ConformerVariancePredictor`), and their kernel sizes could not be varied",
    # position tables whose rows are floor divisions of sizes
    "patchtst": "its position table has (max(context_length, patch_length) - patch_length) // patch_stride + 1 rows"
    " (transformers 5.24 models/patchtst/modeling_patchtst.py `PatchTSTPositionalEncoding`): a floor division",
    "xclip": "its vision position embeddings are (image_size // patch_size)**2 + 1 rows (transformers 5.24"
    " models/x_clip/modeling_x_clip.py `XCLIPVisionEmbeddings`): a floor division",
    **dict.fromkeys(
        ("sam", "sam_vision_model", "sam_hq", "sam_hq_vision_model"),
        "relative position tables of 2 * (image_size // patch_size) - 1 rows in its global-attention layers and"
        " 2 * window_size - 1 in the others (transformers 5.24 models/sam/modeling_sam.py `SamVisionAttention`,"
        " models/sam_hq): a floor division, per layer by global_attn_indexes",
    ),
    # SAM-2 mask decoders: the two-way transformer's MLP has num_hidden_layers - 2 hidden layers (transformers 5.24
    # models/sam2/modeling_sam2.py `Sam2TwoWayAttentionBlock`: `Sam2FeedForward(..., num_layers=
    # config.num_hidden_layers)`), none in the reference build's 2 layers, so the inventory has no pattern for them
    **dict.fromkeys(
        ("sam2", "sam2_video", "sam3_tracker", "sam3_tracker_video", "edgetam_video"),
        "its mask decoder's MLPs hold num_hidden_layers - 2 hidden layers, none in the reference build",
    ),
    # encoder-decoder MoE: per-expert ModuleDicts (`expert_{i}`, one pattern each: num_experts scales no count) in
    # every sparse_step-th layer of each stack; transformers 5.24
    # models/switch_transformers/modeling_switch_transformers.py `SwitchTransformersStack` (layer i sparse where
    # i % sparse_step == 1, sparse_step = num_layers // num_sparse_encoder_layers), models/nllb_moe/modeling_nllb_moe.py
    # `NllbMoeEncoder`, `NllbMoeDecoder` (layer i sparse where (i + 1) % sparse_step == 0)
    **dict.fromkeys(
        ("switch_transformers", "nllb-moe"),
        "expert_{i} modules in every sparse_step-th layer of the encoder and of the decoder: no layer rule read",
    ),
    # config.json not read: it writes a vocabulary, and its sizes under names or in sub-configs `_arch_from_sizes`
    # does not read
    **dict.fromkeys(
        (
            "granite_speech5_ctc",
            "lasr_ctc",
            "nemotron3_5_asr",
            "nemotron_asr_streaming",
            "parakeet_ctc",
            "parakeet_rnnt",
        ),
        "config.json not read: a CTC / RNN-T head's vocab_size beside the encoder's sizes in encoder_config",
    ),
    "omniasr_ctc": "config.json not read: a CTC head's vocab_size beside the encoder's sizes in audio_config",
    "funnel": "config.json not read: its depth is the list block_sizes (transformers 5.24"
    " models/funnel/configuration_funnel.py `FunnelConfig.num_hidden_layers` is sum(block_sizes))",
    "moonshine": "config.json not read: heads and depth as encoder_/decoder_num_attention_heads and"
    " encoder_/decoder_num_hidden_layers (transformers 5.24 models/moonshine/configuration_moonshine.py)",
    "gemma3n_audio": "config.json not read: heads and depth as conf_num_attention_heads and conf_num_hidden_layers"
    " (transformers 5.24 models/gemma3n/configuration_gemma3n.py `Gemma3nAudioConfig`)",
    "perceiver": "config.json not read: heads as num_self_attention_heads / num_cross_attention_heads, depth as"
    " num_blocks * num_self_attends_per_block (transformers 5.24 models/perceiver/configuration_perceiver.py)",
    "lxmert": "config.json not read: depth as l_layers, x_layers and r_layers, three encoders (transformers 5.24"
    " models/lxmert/configuration_lxmert.py `LxmertConfig`: num_hidden_layers is a dict of them)",
    "oneformer": "config.json not read: text_encoder_vocab_size (its task-token text encoder) beside sizes under"
    " hidden_dim and backbone_config (transformers 5.24 models/oneformer/configuration_oneformer.py)",
    "fastspeech2_conformer_with_hifigan": "config.json not read: its sizes are in model_config and vocoder_config"
    " (transformers 5.24 models/fastspeech2_conformer/configuration_fastspeech2_conformer.py)",
    "xcodec": "config.json not read: its sizes are in acoustic_model_config and semantic_model_config, the latter"
    " writing a vocab_size (transformers 5.24 models/xcodec/configuration_xcodec.py `XcodecConfig`)",
    # a VLM whose language model is an encoder: transformers 5.24 models/modernvbert/modeling_modernvbert.py
    # `ModernVBertForMaskedLM` builds a projection_head and an lm_head with a bias (decoder_bias), untied by its
    # tie_word_embeddings (False); vramlens counts ModernBertModel without a head, the reference adds a plain one
    "modernvbert": "its masked-LM head (projection_head, lm_head with a bias) is neither counted nor the reference's",
}


def _user_config(cfg, model_type: str) -> dict:
    """What save_pretrained writes: the values that differ from the config class's defaults, and the model_type."""
    return {**json.loads(cfg.to_json_string(use_diff=True)), "model_type": model_type}


def test_every_model_type_with_a_class_is_inventoried_or_skipped_with_a_reason(dump):  # noqa: F811
    """No model_type of the installed transformers is left out silently: each language model (a causal-LM or
    image-text-to-text class; with VRAMLENS_ALL_MODEL_TYPES=1 every model_type with a model class) has an
    inventory, or is recorded as not building, with the error."""
    from transformers.models.auto import modeling_auto as ma
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from vramlens.trace.inventory import model_class

    data = inventory._data()
    language = {*ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, *ma.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES}
    types = sorted(CONFIG_MAPPING_NAMES) if ALL else sorted(language & set(CONFIG_MAPPING_NAMES))
    missing = [t for t in types if t not in data["models"] and t not in data["skipped"] and model_class(t)]
    assert not missing, f"{len(missing)} model_types neither inventoried nor skipped: {missing[:20]}"
    assert all(isinstance(r, str) and r for r in data["skipped"].values())
    assert not set(data["models"]) & set(data["skipped"])


@pytest.mark.parametrize("model_type", _selected())
def test_config_json_counts_as_transformers_builds_it(dump, model_type):  # noqa: F811
    """0 % error on the parameter count and the same layer kinds, for a config of other sizes than the inventory
    was measured on (sizes doubled in turn, an odd layer count); a model_type with an inventory is never reported
    as "every layer sized as attention"."""
    with dump.quiet_and_quick():
        for config in _variant(dump, model_type):
            try:
                cfg, expected, kinds = _meta_build(dump, model_type, config)
            except Exception as error:  # this variant does not build: the next one
                reason = f"{type(error).__name__}: {error}"
                continue
            break
        else:
            pytest.fail(f"{model_type} has an inventory and no longer builds: {reason}")
    written = _user_config(cfg, model_type)
    arch = arch_from_hf_config(written, f"org/{model_type}")
    text = getattr(cfg, "text_config", None)
    if isinstance(written.get("vision_config"), dict) and text is not None and arch is not None:
        # a VLM: its language model is counted from text_config (the vision tower is sized apart, `vision_params`),
        # so the reference is transformers' build of that text_config alone
        with dump.quiet_and_quick():
            try:
                text_cfg, text_model = dump.build(type(text), text.to_dict())
            except Exception:  # a text_config no class builds alone: the whole build is the reference
                text_cfg = text_model = None
            if text_model is not None:
                quantities = dump.measure(text_model, text_cfg)[0]
                kinds = {k[1]: v for k, v in quantities.items() if k[0] == "k" and k[1] != "other"}
                expected = sum(p.numel() for p in text_model.parameters())
                tied = getattr(cfg, "tie_word_embeddings", getattr(text, "tie_word_embeddings", True))
                head = text_model.get_output_embeddings()
                if (head is None or head.weight is text_model.get_input_embeddings().weight) and tied is False:
                    # a base text model, or a causal LM tied by its text_config: the untied head is the outer
                    # model's (`…ForConditionalGeneration.lm_head`, text hidden × vocabulary, no bias), tied or not
                    # by the outer config's flag (transformers 5.24 modeling_utils.py `get_expanded_tied_weights_keys`
                    # reads `self.config` of the outer model: models/cohere_compass
                    # `CohereCompassForConditionalGeneration` builds an untied head where its `CohereCompassForCausalLM`
                    # alone ties)
                    expected += text.hidden_size * text.vocab_size
            elif arch.vision_params:
                # counted whole (`knowledge.models._by_construction`: a composite whose text_config builds no language
                # model of its own, `AlignModel`'s BERT text encoder), its vision tower is in the count already
                expected = -1
    exact = (
        arch is not None
        and "every layer sized as attention" not in arch.approximate
        and (param_count(arch), dict(arch.layer_kinds)) == (expected, kinds)
    )
    if model_type in KNOWN:
        if not exact:
            pytest.xfail(KNOWN[model_type])
        pytest.fail(f"{model_type} is exact now: take it off KNOWN")
    assert arch is not None, f"{model_type}: config.json not read"
    assert "every layer sized as attention" not in arch.approximate
    assert (param_count(arch), dict(arch.layer_kinds)) == (expected, kinds)


@pytest.mark.parametrize("model_type", ["wav2vec2-bert", "wav2vec2-conformer"])
def test_a_null_vocabulary_is_no_vocabulary(dump, model_type):  # noqa: F811
    """A config.json whose vocab_size is null (transformers 5.24 models/wav2vec2_bert/configuration_wav2vec2_bert.py
    `vocab_size: int | None = None`, the size of a CTC head the base model does not build) is a model without a
    vocabulary: counted from its inventory as transformers builds it, not left unread."""
    from transformers import AutoConfig

    with dump.quiet_and_quick():
        _, expected, _ = _meta_build(dump, model_type, AutoConfig.for_model(model_type).to_dict())
    arch = arch_from_hf_config({"model_type": model_type, "vocab_size": None}, f"org/{model_type}")
    assert arch is not None, f"{model_type}: config.json not read"
    assert param_count(arch) == expected
