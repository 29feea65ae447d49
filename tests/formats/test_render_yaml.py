"""Plan changes written back into YAML/JSON configs: the format's own spelling, minimal edits, comments,
quotes and indentation kept; applying the edits and parsing again gives the new values."""

from __future__ import annotations

import difflib
import json

import pytest
from vramlens.formats import parse_document
from vramlens.formats.render import render_change
from vramlens.text import apply_edits

FILE = "/ws/cfg.yaml"


def change(text: str, changes: dict, path: str = FILE):
    plan = parse_document(text, path).plan
    result = render_change(text, plan, changes)
    assert result is not None
    new = apply_edits(text, result.edits, path)
    return new, parse_document(new, path).plan, result


def changed_lines(old: str, new: str) -> tuple[list[str], list[str]]:
    removed, added = [], []
    for line in difflib.ndiff(old.splitlines(), new.splitlines()):
        if line.startswith("- "):
            removed.append(line[2:])
        elif line.startswith("+ "):
            added.append(line[2:])
    return removed, added


AXOLOTL = """\
base_model: NousResearch/Meta-Llama-3.1-8B   # the model

sequence_len: 8192
sample_packing: true

gradient_accumulation_steps: 8
micro_batch_size: 4  # per GPU
num_epochs: 1
optimizer: adamw_torch_fused
learning_rate: 2e-5

bf16: auto
flash_attention: true
"""


def test_axolotl_batch_and_optimizer_in_place():
    new, p, r = change(AXOLOTL, {"micro_batch": 2, "grad_accum": 16, "optimizer": "paged_adamw_8bit"})
    assert (p.micro_batch.value, p.grad_accum.value, p.optimizer.value) == (2, 16, "paged_adamw_8bit")
    assert changed_lines(AXOLOTL, new) == (
        ["gradient_accumulation_steps: 8", "micro_batch_size: 4  # per GPU", "optimizer: adamw_torch_fused"],
        ["gradient_accumulation_steps: 16", "micro_batch_size: 2  # per GPU", "optimizer: paged_adamw_8bit"],
    )
    assert r.note is None


def test_axolotl_adds_missing_keys_next_to_related_ones():
    new, p, _ = change(AXOLOTL, {"grad_checkpointing": True})
    assert p.grad_checkpointing.value is True
    assert "gradient_accumulation_steps: 8\ngradient_checkpointing: true\nmicro_batch_size" in new


def test_axolotl_lora_and_qlora():
    new, p, _ = change(AXOLOTL, {"peft_method": "lora", "lora_r": 16, "lora_targets": ["all-linear"]})
    assert (p.peft_method.value, p.lora_r.value, p.lora_targets.value) == ("lora", 16, ["all-linear"])
    new, p, _ = change(AXOLOTL, {"peft_method": "qlora", "quant_bits": 4})
    assert (p.peft_method.value, p.quant_bits.value) == ("qlora", 4)
    assert "adapter: qlora" in new and "load_in_4bit: true" in new


def test_axolotl_legacy_attention_flag_is_replaced_not_duplicated():
    new, p, _ = change(AXOLOTL, {"attn_impl": "sdpa"})
    assert "flash_attention" not in new and "attn_implementation: sdpa" in new
    assert p.attn_impl.value == "sdpa" and not [i for i in p.issues if i.severity.value == "error"]


def test_axolotl_fused_loss_adds_the_plugin():
    new, p, _ = change(AXOLOTL, {"loss_impl": "fused"})
    assert p.loss_impl.value == "fused"
    with_list = AXOLOTL + "plugins:\n  - axolotl.integrations.liger.LigerPlugin\n"
    new, p, _ = change(with_list, {"loss_impl": "fused"})
    assert "liger_fused_linear_cross_entropy: true" in new and p.loss_impl.value == "fused"


def test_expandable_segments_where_the_format_has_no_environment():
    new, _, r = change(AXOLOTL, {"alloc_conf": "expandable_segments:True"})
    assert new == AXOLOTL and "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in r.note


TRL = """\
# Model arguments
model_name_or_path: mistralai/Mistral-7B-v0.1
torch_dtype: bfloat16
use_peft: true
lora_target_modules:
- q_proj
- v_proj

# Training
bf16: true
gradient_accumulation_steps: 2
gradient_checkpointing: false
max_seq_length: 2048
per_device_train_batch_size: 4
save_strategy: "steps"
"""


def test_trl_env_block_for_the_allocator():
    new, p, r = change(TRL, {"alloc_conf": "expandable_segments:True"})
    assert p.alloc_conf.value == "expandable_segments:True" and r.note is None
    assert new.startswith(TRL) and new.endswith("env:\n  PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True\n")
    again, p2, _ = change(new, {"alloc_conf": "expandable_segments:True,max_split_size_mb:128"})
    assert p2.alloc_conf.value == "expandable_segments:True,max_split_size_mb:128"
    assert again.count("env:") == 1


def test_trl_spellings():
    new, p, _ = change(
        TRL,
        {
            "grad_checkpointing": True,
            "optimizer": "paged_adamw_8bit",
            "seq_len": 1024,
            "lora_targets": ["all-linear"],
            "loss_impl": "fused",
        },
    )
    assert "gradient_checkpointing: true" in new and "optim: paged_adamw_8bit" in new
    assert "max_seq_length: 1024" in new and "lora_target_modules: all-linear" in new
    assert "use_liger_kernel: true" in new
    assert (p.seq_len.value, p.lora_targets.value, p.loss_impl.value) == (1024, ["all-linear"], "fused")


def test_plain_training_arguments_say_where_instead():
    text = "output_dir: out\nper_device_train_batch_size: 8\nlearning_rate: 1e-5\n"
    new, p, r = change(text, {"alloc_conf": "expandable_segments:True", "micro_batch": 4})
    assert p.micro_batch.value == 4 and "launch script" in r.note


LF = """\
### model
model_name_or_path: Qwen/Qwen3-4B-Instruct-2507

### method
stage: sft
finetuning_type: full

### dataset
cutoff_len: 2048

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
bf16: true
"""


def test_llamafactory_gradient_checkpointing_is_spelled_as_its_negation():
    off, p, _ = change(LF, {"grad_checkpointing": False})
    assert "disable_gradient_checkpointing: true" in off and p.grad_checkpointing.value is False
    on, p, r = change(off, {"grad_checkpointing": True})
    assert "disable_gradient_checkpointing: false" in on and p.grad_checkpointing.value is True
    same, _, _ = change(LF, {"grad_checkpointing": True})  # on by default: nothing to write
    assert same == LF


def test_llamafactory_lora_and_quantization():
    new, p, _ = change(LF, {"peft_method": "qlora", "quant_bits": 4, "lora_r": 16, "lora_targets": ["all-linear"]})
    assert "finetuning_type: lora" in new and "quantization_bit: 4" in new and "lora_rank: 16" in new
    assert (p.peft_method.value, p.quant_bits.value, p.lora_r.value, p.lora_targets.value) == (
        "lora",
        4,
        16,
        ["all-linear"],
    )


TORCHTUNE = """\
model:
  _component_: torchtune.models.llama3_1.llama3_1_8b

batch_size: 2
optimizer:
  _component_: torch.optim.AdamW
  fused: True
  lr: 2e-5
loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss
gradient_accumulation_steps: 1  # Use to increase effective batch size
enable_activation_checkpointing: False  # True reduces memory
dtype: bf16
"""


def test_torchtune_optimizer_component_drops_fused():
    new, p, _ = change(TORCHTUNE, {"optimizer": "paged_adamw_8bit"})
    assert p.optimizer.value == "bitsandbytes.optim.PagedAdamW8bit"
    assert changed_lines(TORCHTUNE, new) == (
        ["  _component_: torch.optim.AdamW", "  fused: True"],
        ["  _component_: bitsandbytes.optim.PagedAdamW8bit"],
    )
    assert not [i for i in p.issues if "does not accept" in i.message]


def test_torchtune_booleans_keep_the_documents_spelling():
    new, p, _ = change(TORCHTUNE, {"grad_checkpointing": True, "loss_impl": "fused"})
    assert "enable_activation_checkpointing: True  # True reduces memory" in new
    assert "torchtune.modules.loss.LinearCrossEntropyLoss" in new and p.loss_impl.value == "fused"


def test_torchtune_lora_and_qlora_rename_the_builder():
    new, p, r = change(TORCHTUNE, {"peft_method": "lora", "lora_r": 16, "lora_targets": ["all-linear"]})
    assert "_component_: torchtune.models.llama3_1.lora_llama3_1_8b" in new
    assert (p.peft_method.value, p.lora_r.value) == ("lora", 16) and "lora_finetune" in r.note
    new, p, _ = change(new, {"quant_bits": 4, "peft_method": "qlora"})
    assert (p.peft_method.value, p.quant_bits.value) == ("qlora", 4) and "qlora_llama3_1_8b" in new


DS = """{
  "bf16": {"enabled": "auto"},
  "zero_optimization": {
    "stage": 2,
    "overlap_comm": true
  },
  "train_micro_batch_size_per_gpu": "auto"
}
"""


def test_deepspeed_json_stays_json():
    new, p, _ = change(DS, {"zero_stage": 3, "offload_optimizer": True, "grad_accum": 4}, "/ws/ds.json")
    data = json.loads(new)
    assert data["zero_optimization"]["stage"] == 3
    assert data["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert data["gradient_accumulation_steps"] == 4
    assert (p.zero_stage.value, p.offload_optimizer.value, p.grad_accum.value) == (3, True, 4)


def test_a_value_from_a_referenced_deepspeed_file_is_edited_there(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(DS)
    cfg = tmp_path / "cfg.yaml"
    text = "base_model: m/x\nmicro_batch_size: 1\nsequence_len: 512\nnum_epochs: 1\ndeepspeed: ds.json\n"
    plan = parse_document(text, str(cfg)).plan
    result = render_change(text, plan, {"zero_stage": 3})
    [edit] = result.edits
    assert edit.span.file == str(ds.resolve())
    assert json.loads(apply_edits(DS, [edit]))["zero_optimization"]["stage"] == 3


def test_accelerate_sharding_and_processes():
    text = (
        "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nfsdp_config:\n"
        "  fsdp_offload_params: false\n  fsdp_sharding_strategy: FULL_SHARD\nmixed_precision: bf16\n"
        "num_processes: 8\n"
    )
    new, p, _ = change(text, {"offload_params": True, "zero_stage": 2, "world_size": 4})
    assert (p.offload_params.value, p.zero_stage.value, p.world_size.value) == (True, 2, 4)
    assert "fsdp_sharding_strategy: SHARD_GRAD_OP" in new


def test_litgpt_keeps_the_global_batch_consistent():
    text = (
        "checkpoint_dir: checkpoints/m/x\nprecision: bf16-mixed\ndevices: 2\nnum_nodes: 1\n"
        "train:\n  global_batch_size: 64\n  micro_batch_size: 4\n"
    )
    new, p, _ = change(text, {"micro_batch": 2, "grad_accum": 16, "quant_bits": 4})
    assert (p.micro_batch.value, p.global_batch.value) == (2, 64)
    assert "quantize: bnb.nf4" in new and "precision: bf16-true" in new  # -mixed is refused with quantize


def test_neox_flow_mapping_stays_valid():
    text = (
        '{\n  "train-micro-batch-size-per-gpu": 4,\n  "num-layers": 2,\n  "hidden-size": 64,\n'
        '  "seq-length": 128,\n  "pipe-parallel-size": 0,\n}\n'
    )
    new, p, _ = change(text, {"micro_batch": 2, "grad_checkpointing": True}, "/ws/neox.yml")
    assert (p.micro_batch.value, p.grad_checkpointing.value) == (2, True)
    assert '"checkpoint-activations": true' in new


def test_quoted_values_keep_their_quotes():
    text = "model_name_or_path: \"m/x\"\noptim: 'adamw_torch'\nper_device_train_batch_size: 1\n"
    new, p, _ = change(text, {"optimizer": "adamw_bnb_8bit"})
    assert "optim: 'adamw_bnb_8bit'" in new


def test_crlf_documents_get_crlf_lines():
    text = AXOLOTL.replace("\n", "\r\n")
    new, p, _ = change(text, {"grad_checkpointing": True})
    assert "\r\ngradient_checkpointing: true\r\n" in new and "\n" not in new.replace("\r\n", "")


def test_a_document_without_a_final_newline():
    text = AXOLOTL.rstrip("\n")
    new, p, _ = change(text, {"eval_batch": 2})
    assert p.eval_batch.value == 2


CHANGES = [
    {"micro_batch": 3, "grad_accum": 5},
    {"grad_checkpointing": True},
    {"optimizer": "paged_adamw_8bit"},
    {"alloc_conf": "expandable_segments:True"},
    {"loss_impl": "fused"},
    {"peft_method": "lora", "lora_r": 16, "lora_targets": ["all-linear"]},
    {"peft_method": "qlora", "quant_bits": 4},
    {"seq_len": 1536},
]
SAME = {"bitsandbytes.optim.PagedAdamW8bit": "paged_adamw_8bit"}


@pytest.mark.parametrize("changes", CHANGES, ids=lambda c: ",".join(c))
def test_every_corpus_config_round_trips(corpus, changes):
    """Apply the edits to every real config, parse again: the new values are there, nothing else moved."""
    checked = 0
    for path in sorted(corpus.rglob("*")):
        if path.suffix not in (".yaml", ".yml", ".json") or "cloud__" in path.name:
            continue
        text = path.read_text(encoding="utf-8")
        plan = parse_document(text, str(path)).plan
        result = render_change(text, plan, changes)
        assert result is not None, path.name
        new = apply_edits(text, result.edits, str(path))
        after = parse_document(new, str(path)).plan
        assert after is not None and after.format == plan.format, path.name
        for concept, value in changes.items():
            got = getattr(after, concept)
            got = got.value if got is not None else None
            got = SAME.get(got, got) if isinstance(got, str) else got
            if concept == "grad_accum" and plan.format == "litgpt":
                world = after.world_size.value if after.world_size is not None else 1
                got = after.global_batch.value // (after.micro_batch.value * world)
            if got == value or result.note:
                continue
            if concept == "peft_method" and value == "qlora" and got == "lora" and after.quant_bits.value == 4:
                continue
            if concept == "lora_targets" and got and len(got) >= 6:  # all linear layers, spelled out
                continue
            if concept == "optimizer" and plan.format == "gpt-neox" and got == "adamw_bnb_8bit":
                continue
            if concept == "grad_checkpointing" and got is None and plan.framework == "llamafactory":
                continue  # on by default
            raise AssertionError(f"{path.name}: {concept} = {got!r}, wanted {value!r}")
        removed, added = changed_lines(text, new)
        assert len(removed) <= 8 * len(changes) and len(added) <= 8 * len(changes), path.name
        checked += 1
    assert checked >= 150
