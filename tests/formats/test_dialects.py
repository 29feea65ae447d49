"""What each YAML/JSON dialect reads: the concept, its value and the exact text it came from."""

from __future__ import annotations

import pytest
from vramlens.formats import parse_document
from vramlens.formats.settings import Unknown
from vramlens.frameworks.torchtune.readers import interpolate, model_id_for_builder
from vramlens.plan import IssueKind


def parse(text: str, path: str = "/ws/cfg.yaml"):
    result = parse_document(text, path)
    assert result.plan is not None, result.issues
    return result.plan


def at(text: str, sourced) -> str:
    span = sourced.value_span
    lines = text.split("\n")
    if span.start_line == span.end_line:
        return lines[span.start_line][span.start_col : span.end_col]
    return "\n".join(
        [
            lines[span.start_line][span.start_col :],
            *lines[span.start_line + 1 : span.end_line],
            lines[span.end_line][: span.end_col],
        ]
    )


# --- axolotl --------------------------------------------------------------------------------------

AXOLOTL = """\
base_model: NousResearch/Meta-Llama-3.1-8B
load_in_4bit: true
adapter: qlora
sequence_len: 500_000
sample_packing: true
micro_batch_size: 2
gradient_accumulation_steps: 4
optimizer: paged_adamw_8bit
learning_rate: 2e-5
bf16: auto
gradient_checkpointing: offload
lora_r: 32
lora_alpha: 16
lora_target_linear: true
plugins:
  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin
deepspeed:
fsdp:
"""


def test_axolotl():
    p = parse(AXOLOTL)
    assert (p.format, p.framework) == ("axolotl", "axolotl")
    assert p.model_id.value == "NousResearch/Meta-Llama-3.1-8B"
    assert (p.peft_method.value, p.quant_bits.value, p.quant_type.value) == ("qlora", 4, "nf4")
    assert p.seq_len.value == 500_000 and at(AXOLOTL, p.seq_len) == "500_000"
    assert (p.micro_batch.value, p.grad_accum.value, p.packing.value) == (2, 4, True)
    assert p.optimizer.value == "paged_adamw_8bit" and p.optimizer.key == "optimizer"
    assert p.amp_dtype.value == "bf16" and "auto" in p.amp_dtype.note
    assert p.grad_checkpointing.value is True and p.activation_offload.value is True
    assert p.lora_targets.value == ["all-linear"] and p.lora_r.value == 32
    assert p.loss_impl.value == "fused"
    # empty `deepspeed:` / `fsdp:` mean "not used", not an error
    assert p.dist_strategy is None and not [
        i for i in p.issues if i.kind in (IssueKind.REFERENCE, IssueKind.UNKNOWN_VALUE, IssueKind.INVALID_VALUE)
    ]


def test_axolotl_legacy_keys():
    text = (
        "base_model: meta-llama/Llama-2-7b-hf\nbase_model_config: meta-llama/Llama-2-7b-hf\n"
        "is_llama_derived_model: true\nmicro_batch_size: 1\nsequence_len: 4096\nnum_epochs: 1\n"
        "xformers_attention:\nflash_attention: true\nfsdp:\n  - full_shard\n  - auto_wrap\n"
        "fsdp_config:\n  fsdp_offload_params: true\n  fsdp_state_dict_type: FULL_STATE_DICT\n"
    )
    p = parse(text)
    assert p.attn_impl.value == "flash_attention_2" and p.attn_impl.key == "flash_attention"
    assert (p.dist_strategy.value, p.zero_stage.value, p.offload_params.value) == ("fsdp", 3, True)
    assert p.fsdp_state_dict_type.value == "FULL_STATE_DICT"
    assert p.model_id.key == "base_model"


def test_axolotl_legacy_flag_together_with_attn_implementation_is_an_error():
    p = parse(
        "base_model: x/y\nmicro_batch_size: 1\nsequence_len: 512\nnum_epochs: 1\n"
        "attn_implementation: sdpa\nflash_attention: true\n"
    )
    assert p.attn_impl.value == "sdpa"
    assert any("refuses both" in i.message and i.severity.value == "error" for i in p.issues)


def test_axolotl_fsdp2_unprefixed_keys():
    p = parse(
        "base_model: Qwen/Qwen3-8B\nmicro_batch_size: 1\nsequence_len: 8192\nnum_epochs: 1\nfsdp_version: 2\n"
        "fsdp_config:\n  offload_params: false\n  reshard_after_forward: false\n  activation_checkpointing: true\n"
    )
    assert (p.dist_strategy.value, p.zero_stage.value) == ("fsdp", 2)
    assert p.grad_checkpointing.value is True and p.offload_params.value is False


def test_axolotl_cloud_config_gives_the_gpu():
    p = parse("provider: baseten\nproject_name:\nsecrets:\n  - HF_TOKEN\ngpu: h100\ngpu_count: 8\nnode_count: 1\n")
    assert p.format == "axolotl-cloud"
    assert p.gpu_name.value.startswith("H100") and p.gpu_count.value == 8


# --- LLaMA-Factory ----------------------------------------------------------------------------------

LF = """\
### model
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
quantization_bit: 4

### method
stage: sft
do_train: true
finetuning_type: lora
lora_rank: 8
lora_target: q_proj,v_proj
flash_attn: fa2
deepspeed: examples/deepspeed/ds_z3_config.json

### dataset
template: llama3
cutoff_len: 1024

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
bf16: true
"""


def test_llamafactory_classic():
    p = parse(LF)
    assert (p.format, p.framework) == ("llamafactory", "llamafactory")
    assert (p.peft_method.value, p.lora_r.value) == ("lora", 8)
    assert p.lora_alpha.value == 16 and p.lora_alpha.origin.value == "derived"  # None → 2 × rank
    assert p.lora_targets.value == ["q_proj", "v_proj"]
    assert (p.quant_bits.value, p.quant_type.value) == (4, "nf4")
    assert p.attn_impl.value == "flash_attention_2" and at(LF, p.attn_impl) == "fa2"
    assert (p.seq_len.value, p.micro_batch.value, p.grad_accum.value) == (1024, 1, 8)
    # the referenced DeepSpeed file is not in this workspace: LLaMA-Factory's packaged contents are used
    assert (p.dist_strategy.value, p.zero_stage.value) == ("deepspeed", 3)
    assert any(i.kind == IssueKind.REFERENCE and i.severity.value == "warning" for i in p.issues)
    # gradient checkpointing is LLaMA-Factory's default; the file does not say it
    assert p.grad_checkpointing is None


def test_llamafactory_disable_gradient_checkpointing_is_inverted():
    text = LF + "disable_gradient_checkpointing: true\n"
    p = parse(text)
    assert p.grad_checkpointing.value is False and p.grad_checkpointing.key == "disable_gradient_checkpointing"


def test_llamafactory_optimizer_switches_and_pure_bf16():
    text = (
        "model_name_or_path: m/x\nstage: sft\nfinetuning_type: full\nuse_galore: true\ngalore_layerwise: true\n"
        "cutoff_len: 2048\npure_bf16: true\noptim: adamw_torch\n"
    )
    p = parse(text)
    assert p.optimizer.value == "galore_adamw_layerwise"
    assert (p.weight_dtype.value, p.amp_dtype.value, p.peft_method.value) == ("bf16", "none", "none")


def test_llamafactory_v1_schema():
    text = (
        "model: Qwen/Qwen3-0.6B\nmodel_class: llm\npeft_config:\n  name: lora\n  r: 16\n  target_modules: all\n"
        "quant_config:\n  name: bnb\n  quantization_bit: 4\ndist_config:\n  name: fsdp2\n"
        "kernel_config:\n  name: liger_kernel\nmicro_batch_size: 1\ncutoff_len: 2048\n"
    )
    p = parse(text)
    assert p.format == "llamafactory-v1"
    assert (p.peft_method.value, p.lora_r.value, p.lora_targets.value) == ("lora", 16, ["all-linear"])
    assert (p.quant_bits.value, p.dist_strategy.value, p.loss_impl.value) == (4, "fsdp", "fused")
    assert (p.micro_batch.value, p.seq_len.value) == (1, 2048)
    assert at(text, p.lora_r) == "16"


# --- torchtune ---------------------------------------------------------------------------------------

TT = """\
# Config for single device QLoRA with lora_finetune_single_device.py
#
#   tune run --nproc_per_node 2 lora_finetune_distributed --config llama3_1/8B_qlora
#
# This config has been tested on an A100 80GB.

output_dir: /tmp/out
model:
  _component_: torchtune.models.llama3_1.qlora_llama3_1_8b
  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']
  apply_lora_to_mlp: True
  lora_rank: 8
  lora_alpha: 16
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  max_seq_len: 4096
dataset:
  packed: True
batch_size: 2
batch_size_val: ${batch_size}
gradient_accumulation_steps: 8
optimizer:
  _component_: torch.optim.AdamW
  fused: True
  lr: 3e-4
loss:
  _component_: torchtune.modules.loss.LinearCrossEntropyLoss
enable_activation_checkpointing: True
dtype: bf16
"""


def test_torchtune():
    p = parse(TT)
    assert (p.format, p.framework) == ("torchtune", "torchtune")
    assert p.model_id.value == "meta-llama/Llama-3.1-8B"
    assert at(TT, p.model_id) == "torchtune.models.llama3_1.qlora_llama3_1_8b"
    assert (p.peft_method.value, p.quant_bits.value, p.quant_type.value) == ("qlora", 4, "nf4")
    assert p.lora_targets.value == ["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert (p.micro_batch.value, p.grad_accum.value, p.seq_len.value, p.packing.value) == (2, 8, 4096, True)
    assert p.eval_batch.value == 2 and "${batch_size}" in p.eval_batch.note and at(TT, p.eval_batch) == "${batch_size}"
    assert (p.optimizer.value, p.optimizer_impl.value) == ("torch.optim.AdamW", "fused")
    assert (p.loss_impl.value, p.grad_checkpointing.value) == ("fused", True)
    assert (p.weight_dtype.value, p.amp_dtype.value) == ("bf16", "none")
    # the header says how it is launched and where it was tested
    assert (p.dist_strategy.value, p.zero_stage.value) == ("fsdp", 3)
    assert p.gpu_count.value == 2 and p.gpu_name.value == "A100-80GB"


def test_torchtune_multinode_header_described_in_words():
    """torchtune's multi-node configs describe the launch instead of showing a `tune run` line (llama3_3
    70B_full_multinode.yaml): the distributed recipe file and "N nodes w/ M devices" give FSDP over N × M GPUs."""
    header = (
        "# Config for multi-node full finetuning in full_finetune_distributed.py\n"
        "# using a Llama3.3 70B Instruct model\n#\n"
        "# To launch on 2 nodes w/ 8 devices on a SLURM cluster, run the following command:\n"
        "#   sbatch full_finetune_multinode.slurm\n#\n"
    )
    body = TT.split("\n\n", 1)[1]
    text = header + "\n" + body
    p = parse(text)
    assert (p.dist_strategy.value, p.zero_stage.value) == ("fsdp", 3)
    assert p.gpu_count.value == 16 and at(text, p.gpu_count) == "2 nodes w/ 8 devices"
    # a single-device recipe named in words shards nothing and counts no GPUs
    p = parse(header.replace("full_finetune_distributed.py", "full_finetune_single_device.py") + "\n" + body)
    assert p.dist_strategy is None and p.gpu_count is None


@pytest.mark.parametrize(
    "builder,model,peft",
    [
        ("torchtune.models.llama3_1.lora_llama3_1_8b", "meta-llama/Llama-3.1-8B", "lora"),
        ("torchtune.models.llama3_1.qlora_llama3_1_405b", "meta-llama/Llama-3.1-405B", "qlora"),
        ("torchtune.models.llama2.llama2_7b", "meta-llama/Llama-2-7b-hf", None),
        ("torchtune.models.qwen2_5.lora_qwen2_5_7b_instruct", "Qwen/Qwen2.5-7B-Instruct", "lora"),
        ("torchtune.models.qwen2_5.qwen2_5_1_5b_instruct", "Qwen/Qwen2.5-1.5B-Instruct", None),
        ("torchtune.models.qwen3.qwen3_8b_instruct", "Qwen/Qwen3-8B", None),
        ("torchtune.models.gemma2.lora_gemma2_27b", "google/gemma-2-27b", "lora"),
        ("torchtune.models.llama4.llama4_scout_17b_16e", "meta-llama/Llama-4-Scout-17B-16E", None),
        ("torchtune.models.phi4.phi4_14b", "microsoft/phi-4", None),
        ("my.models.custom_builder", None, None),
    ],
)
def test_torchtune_builders(builder, model, peft):
    assert model_id_for_builder(builder) == (model, peft)


def test_torchtune_interpolation():
    root = {"output_dir": "/tmp/x", "batch_size": 4, "inference": {"group_size": 16}, "a": "${b}", "b": "${a}"}
    assert interpolate("${batch_size}", root) == 4
    assert interpolate("${output_dir}/logs", root) == "/tmp/x/logs"
    assert interpolate("${inference.group_size}", root) == 16
    assert isinstance(interpolate("${eval:'${batch_size} * 2'}", root), Unknown)
    assert isinstance(interpolate("${missing}", root), Unknown)
    assert isinstance(interpolate("${a}", root), Unknown)  # a cycle stops


def test_torchtune_null_max_seq_len_is_a_notice_not_a_value():
    p = parse(TT.replace("max_seq_len: 4096", "max_seq_len: null"))
    assert p.seq_len is None
    assert any("not truncated" in i.message for i in p.issues)


def test_torchtune_bitsandbytes_optimizer_with_fused_is_flagged():
    p = parse(TT.replace("torch.optim.AdamW", "bitsandbytes.optim.PagedAdamW8bit"))
    assert p.optimizer.value == "bitsandbytes.optim.PagedAdamW8bit"
    assert any("does not accept" in i.message for i in p.issues)


# --- accelerate / DeepSpeed ---------------------------------------------------------------------------


def test_accelerate_deepspeed_and_fsdp():
    p = parse(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
        "  zero_stage: 3\n  offload_optimizer_device: cpu\n  offload_param_device: none\n"
        "mixed_precision: bf16\nnum_processes: 8\n"
    )
    assert (p.format, p.dist_strategy.value, p.zero_stage.value) == ("accelerate", "deepspeed", 3)
    assert (p.offload_optimizer.value, p.offload_params.value) == (True, False)
    assert (p.amp_dtype.value, p.world_size.value) == ("bf16", 8)
    p = parse(
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 2\n  fsdp_offload_params: true\n"
        "mixed_precision: 'no'\nnum_processes: 2\n"
    )
    assert (p.dist_strategy.value, p.zero_stage.value, p.offload_params.value, p.amp_dtype.value) == (
        "fsdp",
        2,
        True,
        "none",
    )


def test_accelerate_json_config():
    p = parse('{"distributed_type": "MULTI_GPU", "num_processes": 4, "mixed_precision": "fp16"}', "/ws/acc.json")
    assert (p.format, p.dist_strategy.value, p.world_size.value, p.amp_dtype.value) == ("accelerate", "ddp", 4, "fp16")


def test_deepspeed_json():
    text = (
        '{\n  "bf16": {"enabled": "auto"},\n  "zero_optimization": {\n    "stage": 2,\n'
        '    "offload_optimizer": {"device": "cpu", "pin_memory": true}\n  },\n'
        '  "train_micro_batch_size_per_gpu": "auto",\n  "gradient_accumulation_steps": 4\n}\n'
    )
    p = parse(text, "/ws/ds.json")
    assert (p.format, p.zero_stage.value, p.offload_optimizer.value, p.grad_accum.value) == ("deepspeed", 2, True, 4)
    assert p.amp_dtype is None and p.micro_batch is None  # "auto": the training arguments decide
    assert at(text, p.zero_stage) == "2"


# --- litgpt / GPT-NeoX / custom --------------------------------------------------------------------------


def test_litgpt():
    text = (
        "checkpoint_dir: checkpoints/meta-llama/Meta-Llama-3.1-8B\nprecision: bf16-true\nquantize: bnb.nf4\n"
        "devices: 1\nnum_nodes: 1\nlora_r: 32\nlora_alpha: 16\nlora_query: true\nlora_key: false\n"
        "lora_value: true\nlora_projection: false\nlora_mlp: false\nlora_head: false\n"
        "train:\n  global_batch_size: 8\n  micro_batch_size: 2\n  max_seq_length: 512\n"
        "optimizer:\n  class_path: torch.optim.AdamW\n"
    )
    p = parse(text)
    assert (p.format, p.framework, p.model_id.value) == ("litgpt", "litgpt", "meta-llama/Meta-Llama-3.1-8B")
    assert (p.weight_dtype.value, p.amp_dtype.value, p.quant_bits.value) == ("bf16", "none", 4)
    assert (p.peft_method.value, p.lora_targets.value) == ("qlora", ["q_proj", "v_proj"])
    assert (p.micro_batch.value, p.global_batch.value, p.seq_len.value) == (2, 8, 512)


def test_litgpt_full_finetune_on_several_devices_uses_fsdp_and_checkpointing():
    p = parse(
        "checkpoint_dir: checkpoints/google/gemma-2b\nprecision: bf16-true\ndevices: 4\nnum_nodes: 1\n"
        "train:\n  micro_batch_size: 1\n  global_batch_size: 16\n"
    )
    assert (p.dist_strategy.value, p.zero_stage.value, p.grad_checkpointing.value) == ("fsdp", 3, True)
    assert p.grad_checkpointing.origin.value == "derived" and p.world_size.value == 4


def test_gpt_neox_flow_yaml_with_hyphenated_keys():
    text = (
        '# comment\n{\n  "pipe-parallel-size": 1,\n  "model-parallel-size": 2,\n  "num-layers": 32,\n'
        '  "hidden-size": 4096,\n  "seq-length": 2048,\n  "attention-config": [[["flash"], 32]],\n'
        '  "train_micro_batch_size_per_gpu": 8,\n  "checkpoint-activations": True,\n'
        '  "zero_optimization": {"stage": 1, "cpu_offload": False,},\n  "fp16": {"enabled": true},\n}\n'
    )
    p = parse(text, "/ws/neox.yml")
    assert (p.format, p.micro_batch.value, p.seq_len.value, p.tensor_parallel.value) == ("gpt-neox", 8, 2048, 2)
    assert (p.grad_checkpointing.value, p.attn_impl.value, p.zero_stage.value, p.amp_dtype.value) == (
        True,
        "flash_attention_2",
        1,
        "fp16",
    )
    assert p.extra["arch.num_layers"].value == 32


def test_custom_trainer_config():
    text = "model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 4\nmax_seq_len: 2048\ngrad_accum: 8\ndtype: bfloat16\n"
    p = parse(text)
    assert (p.format, p.framework) == ("custom", "custom")
    assert (p.model_id.value, p.micro_batch.value, p.seq_len.value, p.grad_accum.value, p.weight_dtype.value) == (
        "meta-llama/Llama-3.2-1B",
        4,
        2048,
        8,
        "bf16",
    )


def test_nanogpt_style_keys_in_a_training_block():
    p = parse(
        "train:\n  batch_size: 12\n  block_size: 1024\n  gradient_accumulation_steps: 40\n"
        "model:\n  n_layer: 12\n  n_head: 12\n  n_embd: 768\n"
    )
    assert p.format == "custom" and (p.micro_batch.value, p.seq_len.value, p.grad_accum.value) == (12, 1024, 40)
    assert p.extra["arch.n_layer"].value == 12


# --- HF / TRL ----------------------------------------------------------------------------------------


def test_trl_recipe_with_renamed_keys():
    text = (
        "model_name_or_path: mistralai/Mistral-7B-v0.1\ntorch_dtype: bfloat16\ndtype: float16\n"
        "use_peft: true\nload_in_4bit: true\nlora_target_modules:\n- q_proj\n- v_proj\n"
        "max_seq_length: 2048\nmax_length: 4096\nper_device_train_batch_size: 4\nbf16: true\n"
        "env:\n  PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True\n"
    )
    p = parse(text)
    assert (p.format, p.framework) == ("trl", "trl")
    assert p.seq_len.value == 4096 and p.seq_len.key == "max_length"  # the current name wins
    assert p.weight_dtype.value == "fp16" and p.weight_dtype.key == "dtype"
    assert any("old name of `max_length`" in i.message for i in p.issues)
    assert (p.peft_method.value, p.quant_bits.value) == ("lora", 4)
    assert p.alloc_conf.value == "expandable_segments:True" and p.alloc_conf.key == "PYTORCH_CUDA_ALLOC_CONF"


def test_hf_fsdp_string_and_inline_deepspeed():
    text = (
        "per_device_train_batch_size: 2\ngradient_accumulation_steps: 4\noutput_dir: out\n"
        "deepspeed:\n  zero_optimization:\n    stage: 3\n    offload_param:\n      device: cpu\n"
    )
    p = parse(text)
    assert (p.format, p.dist_strategy.value, p.zero_stage.value, p.offload_params.value) == ("hf", "deepspeed", 3, True)
    assert at(text, p.zero_stage) == "3"
    p = parse("per_device_train_batch_size: 2\noutput_dir: out\nfsdp: shard_grad_op offload\n")
    assert (p.dist_strategy.value, p.zero_stage.value, p.offload_optimizer.value) == ("fsdp", 2, True)
