"""Vision stage: a vision-language model's tower — frozen or trained, images per sequence, the image size a pixel
budget allows — as changes to the plan."""

from __future__ import annotations

import re
from typing import Any

from vramlens.frameworks.hooks import FrameworkHooks
from vramlens.knowledge import versions
from vramlens.knowledge.schema import ModelArch
from vramlens.plan import TrainingPlan
from vramlens.resolve.common import Context, _whole
from vramlens.resolve.versions import VersionsPart


def vision_fields(ctx: Context, arch: ModelArch, peft: str, v: VersionsPart) -> dict:
    """The ResolvedPlan fields the vision tower changes (none for a text-only model)."""
    if not arch.vision_params:
        return {}
    plan, sources = ctx.plan, ctx.sources
    out: dict = {}
    frozen = peft != "none" or ctx.hooks.freezes_vision
    told = plan.extra.get("freeze_vision_tower") or plan.extra.get("freeze_vit")  # LLaMA-Factory / ms-swift
    if told is not None and peft == "none" and str(told.value).strip().lower() in ("false", "0", "no"):
        frozen = False
        sources["vision_frozen"] = told
    full_beside = tower_trains_in_full(plan, peft)
    if full_beside is not None:
        frozen = False
        out["vision_full"] = True
        sources["vision_frozen"] = full_beside
    images, why, said = images_per_sequence(plan, arch)
    if said is not None:
        sources["images_per_sequence"] = said
    budget, patches = _image_budget(plan, arch, ctx.hooks)
    if images and patches and arch.family in DYNAMIC_RESOLUTION:
        arch = arch.model_copy(update={"image_patches": patches, "image_tokens": patches // 4})
        out["arch"] = arch
        sources["image_patches"] = budget
    out.update(vision_frozen=frozen, images_per_sequence=images)
    attn = v.run.attention
    if images and arch.family == "gemma3_text" and not v.masked and attn == "sdpa":
        # Gemma-3's image batches carry token_type_ids, from which the model builds explicit masks for every layer
        # (estimate/components.py `image_block_mask`): grouped K/V as under a padding mask
        out["repeat_kv"] = versions.as_run(
            arch.family, attn, v.tv, hf_model=v.hf_model, masked=True, loss_impl=v.loss_impl
        ).repeat_kv
    if images:
        batches = f"one image of {arch.image_patches:,} patches per sequence ({why})"
    else:
        batches = (
            f"text-only batches ({why}): the tower runs on no image, so its weights get no gradient or "
            f"optimizer state and it saves no activations"
        )
    ctx.assumptions.append(
        f"vision tower: {arch.vision_params / 1e9:.2f} B parameters, "
        + ("frozen" if frozen else "trained in full beside the LoRA adapters" if full_beside else "trained")
        + f"; {batches}"
    )
    return out


def tower_trains_in_full(plan: TrainingPlan, peft: str) -> Any:
    """The setting that trains a VLM's vision tower and aligner in full beside LoRA on the language model (ms-swift
    `--tuner_type lora_llm`: swift/tuner_plugin/lora_llm.py `LoRALLMTuner.prepare_model`, v4.0.0, sets
    `requires_grad_(True)` on `model_arch.vision_tower + model_arch.aligner`), or None."""
    tuner = plan.extra.get("tuner_type") or plan.extra.get("train_type")
    if tuner is not None and peft == "lora" and str(tuner.value).strip().lower() == "lora_llm":
        return tuner
    return None


# Vision-language families whose model is also what a text fine-tune loads: transformers 5.24
# models/auto/modeling_auto.py maps `gemma3` in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES to Gemma3ForConditionalGeneration, so
# AutoModelForCausalLM (TRL's SFTTrainer, axolotl, run_clm) builds the vision tower of a Gemma-3 4B/12B/27B checkpoint
# and trains it on text. The other VLMs in the catalog (Qwen-VL, LLaVA) have no causal-LM mapping: they are loaded as
# image-text-to-text models, for image data.
TEXT_PATH_VLM_FAMILIES = frozenset({"gemma3_text"})
# VLMs whose image processor resizes to a pixel budget instead of a fixed size (Qwen2-VL, Qwen2.5-VL, Qwen3-VL:
# transformers 5.24 models/qwen2_vl/image_processing_qwen2_vl.py `smart_resize`, `max_pixels`)
DYNAMIC_RESOLUTION = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl_text"})


def _image_budget(plan: TrainingPlan, arch: ModelArch, hooks: FrameworkHooks) -> tuple[Any, int | None]:
    """The setting that caps a Qwen-VL image and the patches it allows, or (None, None). Qwen-VL resizes each image to
    at most a pixel budget (LLaMA-Factory `image_max_pixels`; ms-swift `--max_pixels`, which rescales before the
    processor, and `MAX_PIXELS` in the environment) cut into patches of vision_patch², 2 × 2 of them merged into one
    token; ms-swift's `IMAGE_MAX_TOKEN_NUM` caps those tokens (qwen-vl-utils 0.0.14 vision_process.py: max_pixels =
    IMAGE_MAX_TOKEN_NUM × (patch × merge)²). Where several are set, the tightest holds."""
    if not arch.vision_patch:
        return None, None
    pixel_keys = ("image_max_pixels", "max_pixels") + hooks.image_pixel_env
    token_keys = hooks.image_token_env
    caps = []
    for key in pixel_keys + token_keys:
        said = plan.extra.get(key)
        n = _whole(said.value) if said is not None else None
        if n:
            caps.append((4 * n if key in token_keys else max(1, n // arch.vision_patch**2), said))
    if not caps:
        return None, None
    patches, said = min(caps, key=lambda c: c[0])
    return said, patches


# LLaMA-Factory templates of multimodal models (src/llamafactory/data/template.py: templates registered with an
# `mm_plugin`) that only vision-language checkpoints use; `gemma3`, `llama4` and `mistral_small` also format those
# families' text fine-tunes, so they say nothing about images
MLLM_TEMPLATES = frozenset(
    {
        "qwen2_vl",
        "qwen3_vl",
        "qwen3_vl_nothink",
        "llava",
        "llava_next",
        "llava_next_video",
        "mllama",
        "paligemma",
        "pixtral",
        "minicpm_v",
        "intern_vl",
        "glm4v",
        "kimi_vl",
        "video_llava",
        "qwen2_omni",
    }
)
IMAGE_KEYS = (
    "image_max_pixels",
    "image_min_pixels",
    "image_resolution",
    "processor_type",
    "image_size",
    "image_resize_algorithm",
    "max_pixels",
    "min_pixels",
    "MAX_PIXELS",
    "IMAGE_MAX_TOKEN_NUM",
)
IMAGE_TEXT_LOADERS = ("AutoModelForImageTextToText", "AutoModelForVision2Seq", "FastVisionModel")
_SKIP_PREPARE = re.compile(r"skip_prepare_dataset['\"]?\s*[:=]\s*(?:True|true|1)\b")


def images_per_sequence(plan: TrainingPlan, arch: ModelArch) -> tuple[int, str, Any]:
    """Images per sequence in a VLM's batches (0 or 1), why, and the setting that says so (or None). One image where
    the config shows image data: LLaMA-Factory's image resolution keys or a multimodal template (`template:
    qwen2_vl`), axolotl's `processor_type` / `image_size`, ms-swift's `max_pixels` (flag or environment) and
    `IMAGE_MAX_TOKEN_NUM`, TRL's VLM recipe
    (`dataset_kwargs: {skip_prepare_dataset: true}`, AutoModelForImageTextToText in its vision scripts); none where a
    Gemma-3 checkpoint is fine-tuned through the text path (AutoModelForCausalLM on a text dataset); one for the VLMs
    loaded only as image-text-to-text models."""
    for key in IMAGE_KEYS:
        said = plan.extra.get(key)
        if said is not None and said.value not in (None, "", False):
            return 1, f"`{key}` sets up the image processor", said
    said = plan.extra.get("template")
    if said is not None and str(said.value).strip().lower() in MLLM_TEMPLATES:
        return 1, f"the multimodal template `{said.value}`", said
    said = plan.extra.get("model_class")
    if said is not None and str(said.value) in IMAGE_TEXT_LOADERS:
        return 1, f"the model is loaded with `{said.value}` for image-text data", said
    said = plan.extra.get("dataset_kwargs")
    if said is not None and _SKIP_PREPARE.search(str(said.value)):
        return 1, "`skip_prepare_dataset`: the vision collator builds the batches", said
    if arch.family in TEXT_PATH_VLM_FAMILIES:
        return (
            0,
            (
                "a Gemma-3 multimodal checkpoint fine-tuned as a causal LM with nothing in the config pointing "
                "at image data"
            ),
            None,
        )
    return 1, f"a {arch.family} vision-language model is trained on image data", None
