"""Megatron-SWIFT's `megatron sft|pt|rlhf` held to its own argument classes (dumped from the ms-swift wheels into
frameworks/schemas/megatron-swift/): its tuner arguments read (Megatron-core module names included), a flag it does
not define pointed out, the fixes written in its own spelling, and no Megatron run offered a 4-bit base model. The
launch scripts are ms-swift's own examples (tests/fixtures/ms-swift/main-3602360a/megatron/, see SOURCE)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens.frameworks import schemas

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ms-swift" / "main-3602360a" / "megatron"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The CLI as a user runs it from the script's folder (its workspace: a requirements.txt there pins the
    release)."""
    return subprocess.run(
        [sys.executable, "-m", "vramlens", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=_offline(),
        cwd=cwd,
    )


def _offline() -> dict:
    import os

    return {**os.environ, "HF_HUB_OFFLINE": "1"}


def estimate(path: Path) -> dict:
    out = cli("estimate", "--format", "json", "--offline", str(path), cwd=path.parent)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    return data[0] if isinstance(data, list) else data


def check(path: Path, *flags: str) -> dict:
    out = cli("check", "--format", "json", "--offline", *flags, str(path), cwd=path.parent)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)["files"][0]


def source(d: dict, concept: str):
    s = d["sources"].get(concept)
    return None if s is None else s["value"] if isinstance(s, dict) else s


def findings(d: dict) -> list[dict]:
    return d["findings"]


def launch(tmp_path: Path, *flags: str) -> Path:
    path = tmp_path / "train.sh"
    path.write_text(
        "NPROC_PER_NODE=2 megatron sft \\\n    --model Qwen/Qwen2.5-7B \\\n    " + " \\\n    ".join(flags) + "\n"
    )
    return path


def test_megatron_swift_is_dumped_at_every_minor_from_3_3():
    have = schemas.versions("megatron-swift")
    assert {"3.3.1", "3.12.6", "4.0.4", "4.6.0"} <= set(have)
    # its LoRA arguments arrive in 3.7 and `train_type` becomes `tuner_type` in 4.0
    assert schemas.argument("megatron-swift", "target_modules", "3.3.1") is None
    assert schemas.argument("megatron-swift", "target_modules", "3.12.6")["default"] == ["all-linear"]
    assert schemas.argument("megatron-swift", "tuner_type", "3.12.6") is None
    assert schemas.argument("megatron-swift", "tuner_type", "4.6.0")["default"] == "full"
    assert schemas.argument("megatron-swift", "cross_entropy_loss_fusion", "3.12.6")["default"] is False
    assert schemas.argument("megatron-swift", "cross_entropy_loss_fusion", "4.6.0")["default"] is True


def test_modules_to_save_trains_the_embeddings_and_output_layer_in_full():
    """ms-swift's examples/megatron/lora/new_special_tokens.sh: `--modules_to_save word_embeddings output_layer` (the
    new tokens' rows train) — Qwen3-30B-A3B's 151,936 × 2,048 embedding and untied output layer, 0.62 B more
    trainable parameters than the adapters alone."""
    path = FIXTURES / "lora_new_special_tokens.sh"
    d = estimate(path)
    assert source(d, "modules_to_save") == ["word_embeddings", "output_layer"]
    assert source(d, "lora_targets") == ["all-linear"]
    without = path.read_text().replace("    --modules_to_save word_embeddings output_layer \\\n", "")
    assert without != path.read_text()
    other = path.with_name("no_save.sh")
    try:
        other.write_text(without)
        adapters_only = estimate(other)["params_trainable"]
    finally:
        other.unlink()
    assert d["params_trainable"] - adapters_only == pytest.approx(2 * 151_936 * 2_048, rel=0.01)


def test_megatron_core_module_names_are_lora_targets():
    """ms-swift's examples/megatron/lora/mtp.sh: `--target_modules linear_qkv linear_proj` adapts the attention only
    (Megatron-core's fused q|k|v linear and its output projection), fewer adapters than all-linear."""
    path = FIXTURES / "lora_mtp.sh"
    d = estimate(path)
    assert source(d, "lora_targets") == ["linear_qkv", "linear_proj"]
    assert source(d, "lora_alpha") == 64
    every = path.with_name("every.sh")
    try:
        every.write_text(
            path.read_text().replace("--target_modules linear_qkv linear_proj", "--target_modules all-linear")
        )
        assert d["params_trainable"] < estimate(every)["params_trainable"]
    finally:
        every.unlink()
    assert not any("not recognised" in a for a in d["approximate_reasons"])


def test_a_target_beside_all_linear_that_is_no_linear_is_said_to_be_ignored():
    """ms-swift's examples/megatron/seq_cls/lora/train.sh: `--target_modules all-linear all-router` — the router's
    adapters are not counted, and the estimate says so instead of dropping the name."""
    d = estimate(FIXTURES / "seq_cls_lora_train.sh")
    assert source(d, "lora_targets") == ["all-linear", "all-router"]
    assert d["approximate"] and any("all-router" in a for a in d["approximate_reasons"])


def test_a_flag_megatron_swift_does_not_define_is_pointed_out(tmp_path):
    """`megatron sft` parses with ms-swift's HfArgumentParser and stops on an argument it does not define: the
    `swift sft` spelling of the micro batch is one."""
    path = launch(tmp_path, "--tuner_type lora", "--per_device_train_batch_size 2", "--micro_batch_size 1")
    d = check(path)
    messages = [f["message"] for f in findings(d)]
    assert any("`per_device_train_batch_size` is not an argument of Megatron-SWIFT" in m for m in messages), messages
    assert not any("micro_batch_size" in m and "not an argument" in m for m in messages)


def test_train_type_is_read_and_its_rename_pointed_out_under_a_4x_pin(tmp_path):
    (tmp_path / "requirements.txt").write_text("ms-swift==4.1.0\n")
    path = launch(tmp_path, "--train_type lora", "--micro_batch_size 1")
    d = check(path)
    assert any("renamed" in f["message"] and "tuner_type" in f["message"] for f in findings(d))
    assert source(estimate(path), "peft_method") == "lora"
    # under a 3.x pin `train_type` is the release's own argument: nothing to point out
    (tmp_path / "requirements.txt").write_text("ms-swift==3.12.6\n")
    assert not any("tuner_type" in f["message"] for f in findings(check(path)))


def test_lora_llm_trains_the_language_model_s_adapters(tmp_path):
    path = launch(tmp_path, "--tuner_type lora_llm", "--micro_batch_size 1")
    assert source(estimate(path), "peft_method") == "lora"


def test_the_lora_fix_is_written_with_megatron_swift_s_own_flags_and_no_qlora_is_offered(tmp_path):
    path = launch(
        tmp_path,
        "--micro_batch_size 1",
        "--max_length 8192",
        "--recompute_granularity full",
        "--recompute_method uniform",
        "--recompute_num_layers 1",
    )
    d = check(path, "--gpu", "A100-40GB")
    titles = [f.get("title", "") for x in findings(d) for f in x.get("fixes", [])]
    assert any("LoRA" in t for t in titles), titles
    assert not any("QLoRA" in t for t in titles), titles
    out = cli("check", "--offline", "--gpu", "A100-40GB", "--fix", "--unsafe-fixes", str(path))
    assert out.returncode in (0, 1), out.stderr
    text = path.read_text()
    assert "--tuner_type lora" in text and "--lora_rank 16" in text and "--target_modules all-linear" in text


def test_megatron_packing_is_not_told_to_build_a_mask(tmp_path):
    """Megatron-core packs by cumulative sequence lengths (THD): no block-diagonal mask warning (VL012)."""
    path = launch(
        tmp_path, "--micro_batch_size 1", "--packing true", "--max_length 32768", "--tensor_model_parallel_size 2"
    )
    assert not any(f["rule"] == "VL012" or "block-diagonal" in f["message"] for f in findings(check(path)))


@pytest.mark.parametrize("release,etp,peak_order", [("3.8.3", None, "lower"), ("4.6.0", 1, "higher")])
def test_experts_split_over_tensor_parallel_ranks_before_3_9_and_whole_after(tmp_path, release, etp, peak_order):
    """`expert_tensor_parallel_size` is None up to 3.8 (Megatron-LM's own: the TP size, each expert split over
    the tensor-parallel ranks) and 1 from 3.9 (each expert whole on a rank): the release's own dump decides it,
    and with TP 2 × EP 4 a whole expert per rank holds more weights."""
    (tmp_path / "requirements.txt").write_text(f"ms-swift=={release}\n")
    path = tmp_path / "moe.sh"
    path.write_text(
        "NPROC_PER_NODE=8 megatron sft \\\n    --model Qwen/Qwen3-30B-A3B \\\n    --tensor_model_parallel_size 2 \\\n"
        "    --expert_model_parallel_size 4 \\\n    --micro_batch_size 1 \\\n    --max_length 2048\n"
    )
    d = estimate(path)
    assert source(d, "expert_tensor_parallel") == etp
    if etp is not None:
        assert f"Megatron-SWIFT {release}" in d["sources"]["expert_tensor_parallel"]["from"]
    (tmp_path / "requirements.txt").write_text("ms-swift==4.6.0\n" if release == "3.8.3" else "ms-swift==3.8.3\n")
    other = estimate(path)
    assert (d["peak"]["allocated_gib"] < other["peak"]["allocated_gib"]) == (peak_order == "lower")


def test_lora_on_megatron_s_fused_qkv_is_one_adapter(tmp_path):
    """Megatron-core computes q|k|v with one `linear_qkv` and Megatron-SWIFT's LoraParallelLinear puts one lora_A
    and one lora_B over it (ms-swift v4.0.0 swift/megatron/tuners/lora.py): Qwen2.5-7B's 28 layers, hidden 3,584,
    q 3,584 + k, v 512 each, at rank 8 — 28 × 8 × (3,584 + 4,608) adapter weights, not three A matrices a layer."""
    path = launch(tmp_path, "--tuner_type lora", "--lora_rank 8", "--target_modules linear_qkv", "--micro_batch_size 1")
    assert estimate(path)["params_trainable"] == 28 * 8 * (3_584 + 4_608)


def test_load_and_save_point_to_their_4x_names(tmp_path):
    """ms-swift 4.0 loads an mcore checkpoint by `--mcore_model` and saves to `--output_dir`: a 3.x line's `--load`
    and `--save` are pointed to them under a 4.x pin, and kept without a word under a 3.x one."""
    (tmp_path / "requirements.txt").write_text("ms-swift==4.1.0\n")
    path = launch(tmp_path, "--load Qwen2.5-7B-mcore", "--save out", "--micro_batch_size 1")
    messages = [f["message"] for f in findings(check(path))]
    assert any("`load` → `mcore_model`" in m for m in messages), messages
    assert any("`save` → `output_dir`" in m for m in messages), messages
    (tmp_path / "requirements.txt").write_text("ms-swift==3.12.6\n")
    assert not any("mcore_model" in f["message"] or "output_dir" in f["message"] for f in findings(check(path)))
