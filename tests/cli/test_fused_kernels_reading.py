"""Speed kernels a config switches on reach the speed estimate (CLI as a subprocess, as a user runs it): Liger's
kernels (transformers' `use_liger_kernel`, axolotl's Liger plugin), unsloth (LLaMA-Factory's `use_unsloth`) and
float8 linears (NeMo AutoModel's `fp8`) make the step faster than the same config without them, and nothing the
run prints calls their speed not modelled — only what is still not modelled (unsloth's kernels' memory) is named;
Liger's kernels' memory is modelled from Liger's source and named as not traced."""

import json
import subprocess
import sys
from pathlib import Path

import pytest


def estimate(path: Path, gpu: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", "--format", "json", "--offline", "--gpu", gpu, path.name],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=path.parent,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    return data[0] if isinstance(data, list) else data


HF = "model_name_or_path: Qwen/Qwen2.5-1.5B\nper_device_train_batch_size: 4\nmax_length: 2048\nbf16: true\n"
AXOLOTL = (
    "base_model: Qwen/Qwen2.5-1.5B\nmicro_batch_size: 4\nsequence_len: 2048\nbf16: true\n"
    "plugins:\n  - axolotl.integrations.liger.LigerPlugin\n"
)
LLAMAFACTORY = (
    "model_name_or_path: Qwen/Qwen2.5-1.5B\nstage: sft\nfinetuning_type: lora\ncutoff_len: 2048\n"
    "per_device_train_batch_size: 4\nbf16: true\ntemplate: qwen\n"
)
NEMO = (
    "model:\n  _target_: nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained\n"
    "  pretrained_model_name_or_path: meta-llama/Llama-3.1-8B\nstep_scheduler:\n  local_batch_size: 1\n"
    "dataset:\n  seq_length: 4096\ndistributed:\n  _target_: nemo_automodel.components.distributed.fsdp2.FSDP2Manager\n"
    "  dp_size: 8\n"
)

CASES = {
    # (config without, the lines that switch the kernels on, the word naming them, GPU)
    "hf-liger": (HF, "use_liger_kernel: true\n", "Liger", "H100"),
    "hf-liger-flag-off-loss": (HF, "use_liger_kernel: true\ngradient_checkpointing: true\n", "Liger", "A100"),
    "axolotl-liger-plugin": (
        AXOLOTL,
        "liger_rms_norm: true\nliger_glu_activation: true\nliger_rope: true\nliger_layer_norm: true\n",
        "Liger",
        "H100",
    ),
    "llamafactory-unsloth": (LLAMAFACTORY, "use_unsloth: true\n", "unsloth", "A100"),
    "nemo-fp8": (NEMO, "fp8:\n  enabled: true\n", "fp8", "H100"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_kernels_switched_on_are_faster_and_not_named_unmodelled_for_speed(tmp_path, case):
    base, on, word, gpu = CASES[case]
    plain, fused = tmp_path / "plain.yaml", tmp_path / "fused.yaml"
    plain.write_text(base)
    fused.write_text(base + on)
    without, with_ = estimate(plain, gpu), estimate(fused, gpu)
    assert with_["throughput"]["tokens_per_s"] > without["throughput"]["tokens_per_s"] * 1.005, (without, with_)
    named = [u for u in with_["unmodelled"] if word.lower() in u["what"].lower()]
    if word == "Liger":  # what Liger's kernels save: estimate/components/liger.py, read from its source
        assert not named and with_["approximate"], with_["unmodelled"]
        assert any(r.startswith("Liger kernels' saved tensors read from") for r in with_["approximate_reasons"])
        return
    if word == "fp8":  # float8 linears keep a bf16 linear's saved tensors (tests/trace/test_float8_linears.py)
        assert not named and with_["approximate"], with_["unmodelled"]
        assert any(r.startswith("float8 linears (torchao)") for r in with_["approximate_reasons"])
        return
    assert named, with_["unmodelled"]  # the memory side is still named …
    for u in named:  # … and only the memory side
        assert u["what"].startswith("the memory of"), u
        assert "run time" in u["consequence"], u
