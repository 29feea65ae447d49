"""Never silent: a setting vramlens reads and does not model is named in every view ("not modelled: tiled_mlp (…) —
estimated with …"), an estimate that rests on an approximation says so beside its peak and in JSON (`approximate`,
`approximate_reasons`, one list for every view), and a launch whose model cannot be used says which value it found
and why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens.estimate import estimate
from vramlens.formats import parse_document
from vramlens.resolve import resolve
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "never_silent"


def vramlens(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "VRAMLENS_CALIBRATION": "off"}
    return subprocess.run(
        [sys.executable, "-m", "vramlens", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
    )


def estimate_json(path: Path, *flags: str, cwd: Path | None = None) -> dict:
    out = vramlens("estimate", path, "--format", "json", "--gpu", "H100", *flags, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def estimate_of(path: Path, **settings):
    plan = parse_document(path.read_text(), str(path)).plan
    rp = resolve(plan, Settings(gpu="H100", **settings)).resolved
    return rp, estimate(rp)


# -- unmodelled settings, in every view ---------------------------------------------------------------------------

UNMODELLED = [
    # (fixture, {key: line}, a word of each `what`)
    (
        "axolotl_kernels.yaml",
        {"tiled_mlp": 10, "lora_qkv_kernel": 12},
        ("TiledMLP", "fused LoRA kernel `lora_qkv_kernel` on some of the linears only"),
    ),
    (
        "hf_zero_plus_plus.yaml",
        {"zero_optimization.zero_hpz_partition_size": 9},  # reduce_bucket_size (line 10) is modelled
        ("ZeRO++",),
    ),
]


@pytest.mark.parametrize("fixture,lines,words", UNMODELLED, ids=[c[0] for c in UNMODELLED])
def test_unmodelled_settings_are_named_in_json_text_and_check(fixture, lines, words):
    path = FIXTURES / fixture
    data = estimate_json(path)
    assert {u["key"]: u["line"] for u in data["unmodelled"]} == lines, data["unmodelled"]
    for word in words:
        assert any(word in u["what"] for u in data["unmodelled"]), (word, data["unmodelled"])
    assert all(u["consequence"].startswith("estimated") for u in data["unmodelled"])
    assert data["approximate"] is True
    for key in lines:
        assert any(r.startswith(f"not modelled: {key}") for r in data["approximate_reasons"]), data

    text = vramlens("estimate", path, "--gpu", "H100").stdout
    peak = next(line for line in text.splitlines() if line.strip().startswith("peak"))
    assert peak.split()[1] == "≈", peak
    shown = text.split("approximate:", 1)[1].split("speed", 1)[0]
    for key in lines:
        assert f"not modelled: {key}" in shown, text

    out = vramlens("check", path, "--gpu", "H100")
    warned = {int(line.split(":")[1]) for line in out.stdout.splitlines() if " warning VL024 [not-modelled] " in line}
    assert warned == set(lines.values()), out.stdout
    assert "estimate(s) approximate" in out.stdout.splitlines()[-1], out.stdout
    assert "peak ≈ " in out.stdout
    summary = json.loads(vramlens("check", path, "--gpu", "H100", "--format", "json").stdout)["summary"]
    assert summary["approximate"] == 1


@pytest.mark.parametrize(
    "call,kernels",
    [
        (
            "apply_liger_kernel_to_qwen2()",
            "(RMSNorm: its input and fp32 1/rms; SwiGLU: gate and up, no act(gate))",
        ),
        (
            "apply_liger_kernel_to_qwen2(rope=False, swiglu=False)",
            "(RMSNorm: its input and fp32 1/rms)",
        ),
    ],
)
def test_a_script_s_liger_patch_models_its_loss_and_its_other_kernels(call, kernels, tmp_path):
    path = tmp_path / "train.py"
    path.write_text(
        "from liger_kernel.transformers import apply_liger_kernel_to_qwen2\n"
        "from transformers import AutoModelForCausalLM, TrainingArguments, Trainer\n"
        f"{call}\n"
        "model = AutoModelForCausalLM.from_pretrained('Qwen/Qwen2.5-1.5B')\n"
        "args = TrainingArguments(output_dir='o', per_device_train_batch_size=2, bf16=True)\n"
        "Trainer(model=model, args=args).train()\n"
    )
    data = estimate_json(path)
    assert data["sources"]["loss_impl"]["value"] == "fused"
    # what the kernels save is modelled from Liger's source (estimate/components/liger.py), named as not traced
    assert data["unmodelled"] == [], data["unmodelled"]
    assert data["approximate"] is True
    liger = [r for r in data["approximate_reasons"] if r.startswith("Liger kernels' saved tensors read from")]
    assert [r.endswith(kernels) for r in liger] == [True], data["approximate_reasons"]


def test_liger_kernels_memory_is_modelled_and_named_approximate_in_every_view():
    # `use_liger_kernel: true`: its RMSNorm and SwiGLU's saved tensors are counted, not named as not modelled
    path = FIXTURES / "hf_liger.yaml"
    data = estimate_json(path)
    assert data["unmodelled"] == [] and data["approximate"] is True, data
    assert any(r.startswith("Liger kernels' saved tensors read from") for r in data["approximate_reasons"]), data
    text = vramlens("estimate", path, "--gpu", "H100").stdout
    assert "Liger kernels' saved tensors read from" in text, text
    out = vramlens("check", path, "--gpu", "H100").stdout
    assert " warning VL024 [not-modelled] " not in out, out


def test_an_explicit_value_only_is_unmodelled_and_off_switches_are_not():
    # `stage3_prefetch_bucket_size: auto` is sized as transformers sizes it; `liger_rope: false` switches nothing on
    for fixture, absent in (
        ("hf_zero_plus_plus.yaml", "stage3_prefetch_bucket_size"),
        ("axolotl_kernels.yaml", "liger_rope"),
    ):
        rp, est = estimate_of(FIXTURES / fixture)
        assert not any(absent in u.key for u in est.unmodelled), est.unmodelled


def test_a_fully_read_config_is_not_approximate_in_any_view():
    path = FIXTURES / "exact.yaml"
    data = estimate_json(path)
    assert data["approximate"] is False and data["approximate_reasons"] == [] and data["unmodelled"] == []
    text = vramlens("estimate", path, "--gpu", "H100").stdout
    assert "≈ " not in text.split("speed")[0] and "approximate" not in text
    out = vramlens("check", path, "--gpu", "H100").stdout
    assert "approximate" not in out and "VL024" not in out


# -- each reason an estimate is approximate -----------------------------------------------------------------------


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "setting,reason",
    [
        ("optim: frobnicate_adam", "unknown optimizer `frobnicate_adam`: estimated as AdamW"),
        ("optim: some_new_optimizer_8bit", "unknown optimizer `some_new_optimizer_8bit`: estimated as AdamW"),
    ],
)
def test_an_unknown_optimizer_is_an_approximation(setting, reason, tmp_path):
    path = _write(tmp_path, f"model_name_or_path: Qwen/Qwen2.5-1.5B\nmax_length: 1024\n{setting}\n")
    assert estimate_json(path)["approximate_reasons"] == [reason]


def test_an_assumed_sequence_length_is_an_approximation(tmp_path):
    path = _write(tmp_path, "model_name_or_path: Qwen/Qwen2.5-1.5B\nper_device_train_batch_size: 2\n")
    reasons = estimate_json(path)["approximate_reasons"]
    assert len(reasons) == 1 and "assumed 2048 tokens" in reasons[0], reasons


@pytest.mark.parametrize("model_type", ["zebra_lm", "quagga2"])
def test_a_generic_architecture_is_approximate(model_type, tmp_path):
    (tmp_path / "mymodel").mkdir()
    (tmp_path / "mymodel" / "config.json").write_text(
        json.dumps(
            {
                "model_type": model_type,
                "hidden_size": 1024,
                "num_hidden_layers": 8,
                "num_attention_heads": 16,
                "intermediate_size": 4096,
                "vocab_size": 32000,
                "torch_dtype": "bfloat16",
            }
        )
    )
    path = _write(tmp_path, "model_name_or_path: ./mymodel\nmax_length: 1024\nbf16: true\n")
    data = estimate_json(path, cwd=tmp_path)
    assert data["approximate"] and any(
        f"`{model_type}` has no dedicated model" in r for r in data["approximate_reasons"]
    ), data["approximate_reasons"]
    assert "≈ " in vramlens("estimate", path, "--gpu", "H100", cwd=tmp_path).stdout


@pytest.mark.parametrize("model,method", [("TheBloke/Llama-2-7B-GPTQ", "GPTQ"), ("TheBloke/Llama-2-7B-AWQ", "AWQ")])
def test_a_prequantized_checkpoint_counts_its_group_constants_as_stored_and_says_the_rest_is_approximate(
    model, method, tmp_path
):
    base = "use_peft: true\nlora_r: 16\nper_device_train_batch_size: 1\nmax_length: 1024\nbf16: true\n"
    rp, est = estimate_of(_write(tmp_path, f"model_name_or_path: {model}\n{base}"))
    assert rp.quant_type == method.lower()
    assert any(r.startswith(f"pre-quantized {method} checkpoint") for r in est.approximate), est.approximate
    # AutoGPTQ / AutoAWQ: per group of 128 input rows an fp16 scale and a 4-bit zero per output column (2.5 / 128
    # bytes per weight), not bitsandbytes NF4's fp32 absmax per 64 (4 / 64)
    quantized = est.params_total - rp.arch.vocab * rp.arch.hidden * (1 if rp.arch.tied_embeddings else 2)
    ratio = est.components["quant_constants"] / quantized
    assert 2.4 / 128 < ratio < 2.6 / 128, ratio
    nf4 = tmp_path / "nf4"
    nf4.mkdir()
    _, est_nf4 = estimate_of(_write(nf4, f"model_name_or_path: meta-llama/Llama-2-7b-hf\nload_in_4bit: true\n{base}"))
    assert est_nf4.components["quant_constants"] > 3 * est.components["quant_constants"]
    assert not any("pre-quantized" in r for r in est_nf4.approximate)


@pytest.mark.parametrize(
    "backend,fallback,approximate",
    [
        ("synthetic", "transformers is not installed", True),
        ("synthetic", None, True),
        ("transformers", None, False),
    ],
)
def test_a_trace_on_the_synthetic_stand_in_is_approximate(backend, fallback, approximate):
    from vramlens.report import estimate_fields
    from vramlens.trace.report import to_estimate

    rp, _ = estimate_of(FIXTURES / "exact.yaml")
    raw = {
        "peak_bytes": 10 << 30,
        "components": {"weights": 3 << 30},
        "phase": "forward-backward",
        "phases": {"forward-backward": 10 << 30},
        "params_total": 1,
        "params_trainable": 1,
        "backend": backend,
        "fallback_reason": fallback,
    }
    fields = estimate_fields(rp, to_estimate(rp, raw))
    assert fields["approximate"] is approximate
    if approximate:
        assert fields["approximate_reasons"][0].startswith("trace ran the synthetic stand-in"), fields
        assert (fallback or "the synthetic model") in fields["approximate_reasons"][0]


# -- a model that cannot be used says what was found and why ------------------------------------------------------


@pytest.mark.parametrize(
    "name,text,found",
    [
        (
            "run.sh",
            "torchrun train.py \\\n  --model_name_or_path $MODEL \\\n  --per_device_train_batch_size 4 "
            "--output_dir out\n",
            ("`model_name_or_path`", "only known when the script runs", "(line 2)"),
        ),
        (
            "run2.sh",
            'accelerate launch train.py --model_name_or_path "$(cat model.txt)" --bf16 --output_dir o\n',
            ("`model_name_or_path`", "only known when the script runs", "(line 1)"),
        ),
        (
            "train.py",
            "import sys\nfrom transformers import AutoModelForCausalLM, TrainingArguments, Trainer\n"
            "model = AutoModelForCausalLM.from_pretrained(sys.argv[1])\n"
            "args = TrainingArguments(output_dir='o', per_device_train_batch_size=2)\n"
            "Trainer(model=model, args=args).train()\n",
            ("sys.argv[1]", "only known when the script runs"),
        ),
    ],
)
def test_a_launch_whose_model_is_only_known_at_run_time_says_which_value(name, text, found, tmp_path):
    path = tmp_path / name
    path.write_text(text)
    out = vramlens("estimate", path)
    message = out.stderr.strip()
    assert "does not name a model vramlens can use" in message, message
    for word in found:
        assert word in message, message
    check = vramlens("check", path).stdout
    assert "VL017" in check and "vramlens can use" in check, check


@pytest.mark.parametrize("where", ["./models/missing-7b", "../elsewhere/llama"])
def test_a_model_path_that_does_not_exist_says_so(where, tmp_path):
    (tmp_path / "w").mkdir()
    path = _write(tmp_path / "w", f"model_name_or_path: {where}\nper_device_train_batch_size: 2\n")
    message = vramlens("estimate", path, cwd=tmp_path / "w").stderr
    assert f"model `{where}`: a local path" in message and "does not exist" in message, message
