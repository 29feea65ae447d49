"""Which fixes are offered and which `check --fix` applies: "make it fit" holds no change that does not lower its
peak; --fix never applies a memory fix that costs something (speed, another package, a change to the training) and
still leaves the run out of memory, and it lists every fix it left with why; LoRA/QLoRA fixes for a full fine-tune
say the learning rate usually changes too; axolotl's fused-loss fix writes Liger, which its title names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from vramlens.analysis import analyze
from vramlens.fixes import Fixer
from vramlens.formats import parse_document
from vramlens.formats.render import render_change
from vramlens.settings import Settings
from vramlens.text import apply_edits


def check(path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramlens", "check", path.name, *args],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


# -- "make it fit" holds only changes that lower its peak --------------------------------------------------------

SFT_PY = """\
from trl import SFTConfig, SFTTrainer

args = SFTConfig(output_dir="out", per_device_train_batch_size=16, max_length=4096, bf16=True,
                 model_init_kwargs={"dtype": "bfloat16"})
trainer = SFTTrainer(model="Qwen/Qwen2.5-7B", args=args)
"""
SFT_YAML = (
    "model_name_or_path: Qwen/Qwen2.5-7B\ntorch_dtype: bfloat16\nbf16: true\n"
    "per_device_train_batch_size: 16\nmax_length: 4096\noutput_dir: out\n"
)
QLORA_YAML = (
    "model_name_or_path: mistralai/Mistral-7B-v0.1\ntorch_dtype: bfloat16\nload_in_4bit: true\n"
    "use_peft: true\nlora_r: 16\nlora_alpha: 32\nlora_target_modules: all-linear\nbf16: true\n"
    "per_device_train_batch_size: 16\nmax_length: 4096\noutput_dir: out\n"
)
FULL_YAML = (
    "model_name_or_path: mistralai/Mistral-7B-v0.1\ntorch_dtype: bfloat16\nbf16: true\n"
    "per_device_train_batch_size: 16\nmax_length: 4096\noutput_dir: out\n"
)
AXOLOTL = (
    "base_model: meta-llama/Meta-Llama-3-8B\nload_in_8bit: false\nload_in_4bit: false\n"
    "datasets:\n  - path: tatsu-lab/alpaca\n    type: alpaca\noutput_dir: ./out\nsequence_len: 8192\n"
    "micro_batch_size: 2\ngradient_accumulation_steps: 8\noptimizer: adamw_torch_fused\n"
    "learning_rate: 2e-5\nbf16: true\ngradient_checkpointing: true\nflash_attention: true\n"
)

CASES = [
    ("train.py", SFT_PY, "A100-80GB"),
    ("sft.yaml", SFT_YAML, "A100-80GB"),
    ("qlora.yaml", QLORA_YAML, "T4"),
    ("full.yaml", FULL_YAML, "A100-80GB"),
    ("axolotl.yaml", AXOLOTL, "H100-80GB"),
]


@pytest.mark.parametrize("name,text,gpu", CASES, ids=[c[0] for c in CASES])
def test_every_change_of_make_it_fit_lowers_its_peak(name, text, gpu):
    """Leave any one change out of a "make it fit" plan and it either no longer fits or its peak rises by at least
    1 %: no fused loss (another package) or smaller micro-batch (slower) that buys nothing."""
    path = f"/ws/{name}"
    settings = Settings(gpu=gpu)
    analysis = analyze(text, path, settings)
    fixer = Fixer(text, analysis.plan, analysis.resolution.resolved, analysis.estimate, settings)
    plans = [fix for fix in (fixer.make_it_fit(), fixer.make_it_fit_safe()) if fix is not None]
    assert plans, "expected an out-of-memory config"
    for fix in plans:
        for c in fixer.candidates():
            own = c.changes or {"micro_batch": None, "grad_accum": None}
            if not all(k in fix.changes and (v is None or fix.changes[k] == v) for k, v in own.items()):
                continue
            without = {k: v for k, v in fix.changes.items() if k not in own}
            est = fixer.evaluate(without)
            assert not fixer.fits(est) or est.device_bytes >= fix.estimate_after.device_bytes * 1.01, (
                f"{c.label!r} lowers the peak of {fix.title!r} by nothing"
            )


def test_the_qwen_example_fits_without_liger():
    """The reported case: "Make it fit: use Liger's fused linear cross-entropy + use 8-bit AdamW" as the only fit. A
    fit that takes Liger (another package) is unsafe and is offered beside a fit without it."""
    for name, text in (("train.py", SFT_PY), ("sft.yaml", SFT_YAML)):
        analysis = analyze(text, f"/ws/{name}", Settings(gpu="A100-80GB"))
        fits = [x for f in analysis.findings for x in f.fixes if x.id.startswith("make-it-fit")]
        assert any("Liger" not in x.title for x in fits), [x.title for x in fits]
        assert all(not x.safe for x in fits if "Liger" in x.title), [x.title for x in fits]


def test_a_fastest_plan_with_an_unsafe_change_that_saves_memory_keeps_its_safe_alternative():
    analysis = analyze(FULL_YAML, "/ws/full.yaml", Settings(gpu="A100-80GB"))
    fits = {x.id: x for f in analysis.findings for x in f.fixes if x.id.startswith("make-it-fit")}
    assert not fits["make-it-fit"].safe and fits["make-it-fit-safe"].safe, list(fits)


# -- what --fix applies, and what it says it left ----------------------------------------------------------------

TRAIN_FULL_PY = '''\
"""Full fine-tune of Llama-3.1-8B with the transformers Trainer."""
import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B", torch_dtype=torch.bfloat16)
args = TrainingArguments(
    output_dir="out/full",
    per_device_train_batch_size=4,
    gradient_accumulation_steps=4,
    bf16=True,
    gradient_checkpointing=True,
    learning_rate=2e-5,
)
trainer = Trainer(model=model, args=args, train_dataset=None)
trainer.train()
'''
TRAIN_FULL_YAML = (
    "model_name_or_path: meta-llama/Llama-3.1-8B\ntorch_dtype: bfloat16\nbf16: true\n"
    "per_device_train_batch_size: 4\ngradient_accumulation_steps: 4\ngradient_checkpointing: true\n"
    "learning_rate: 2.0e-05\noutput_dir: out\n"
)


@pytest.mark.parametrize(
    "name,text", [("train_full.py", TRAIN_FULL_PY), ("train_full.yaml", TRAIN_FULL_YAML)], ids=["python", "yaml"]
)
@pytest.mark.parametrize("unsafe", [False, True], ids=["safe", "unsafe"])
def test_fix_applies_no_costly_half_measure_and_says_what_it_left(tmp_path, name, text, unsafe):
    """A full fine-tune of an 8B model on a 40 GB card: only LoRA/QLoRA fit. --fix applies the free allocator
    setting, not the slower micro-batch trade (nor, with --unsafe-fixes, Liger or 8-bit AdamW) that leaves it out
    of memory; each fix it left is in `not_applied` with why — never an empty list."""
    config = tmp_path / name
    config.write_text(text, encoding="utf-8")
    r = check(config, "--gpu", "A100-40GB", "--fix", *(["--unsafe-fixes"] if unsafe else []), "--format", "json")
    entry = json.loads(r.stdout)["files"][0]
    after = config.read_text(encoding="utf-8")
    assert "per_device_train_batch_size" in after and ("=4," in after or ": 4\n" in after), after  # not lowered
    left = {x.split(" → ")[0]: x for x in entry["not_applied"]}
    micro = next((t for t in left if t.startswith("Lower the micro-batch")), None)
    assert micro and left[micro].endswith("not applied: it costs speed and the run still does not fit"), left
    assert "use_liger_kernel" not in after and "adamw_bnb_8bit" not in after
    if unsafe and name.endswith(".py"):
        # LoRA cannot be written into a plain Trainer script: said, with where to make it
        lora = [x for x in entry["not_applied"] if "LoRA" in x and "cannot be written into this file" in x]
        assert lora and "get_peft_model" in lora[0], entry["not_applied"]
    if unsafe:
        assert any(x.startswith("Use 8-bit AdamW") and "still does not fit" in x for x in entry["not_applied"]), left


def test_the_text_output_gives_an_unwritable_fix_its_level_and_where_to_make_it(tmp_path):
    config = tmp_path / "train_full.py"
    config.write_text(TRAIN_FULL_PY, encoding="utf-8")
    out = check(config, "--gpu", "A100-40GB").stdout
    qlora = next(line for line in out.splitlines() if "fix: Train QLoRA" in line)
    assert "(unsafe; --fix cannot write it here: wrap the model in LoRA adapters" in qlora, qlora


# -- LoRA instead of a full fine-tune: the learning rate ----------------------------------------------------------


@pytest.mark.parametrize(
    "name,text", [("train_full.py", TRAIN_FULL_PY), ("train_full.yaml", TRAIN_FULL_YAML)], ids=["python", "yaml"]
)
def test_lora_fixes_for_a_full_fine_tune_say_the_learning_rate_usually_changes(name, text):
    analysis = analyze(text, f"/ws/{name}", Settings(gpu="A100-40GB"))
    fixes = [x for f in analysis.findings for x in f.fixes if x.id in ("lora", "qlora") or "LoRA" in x.title]
    assert fixes, [x.title for f in analysis.findings for x in f.fixes]
    for fix in fixes:
        assert "learning rate is left as it is" in fix.title and "10×" in fix.title, fix.title
        assert "learning_rate" not in fix.changes


def test_qlora_for_a_lora_run_says_nothing_about_the_learning_rate():
    analysis = analyze(QLORA_YAML.replace("load_in_4bit: true\n", ""), "/ws/lora.yaml", Settings(gpu="T4"))
    qlora = [x for f in analysis.findings for x in f.fixes if x.id == "qlora"]
    assert qlora and not any("learning rate" in x.title for x in qlora), [x.title for x in qlora]


# -- axolotl: Liger's fused linear cross-entropy is what the fix writes ------------------------------------------


@pytest.mark.parametrize(
    "plugins",
    [
        "",
        "plugins:\n  - axolotl.integrations.spectrum.SpectrumPlugin\n",
        "plugins: [axolotl.integrations.liger.LigerPlugin]\n",
    ],
    ids=["no-plugins", "another-plugin", "liger-listed"],
)
def test_axolotl_fused_loss_writes_liger_not_cut_cross_entropy(plugins):
    text = AXOLOTL + plugins
    path = "/ws/axolotl.yaml"
    result = render_change(text, parse_document(text, path).plan, {"loss_impl": "fused"})
    new = apply_edits(text, result.edits, path)
    data = yaml.safe_load(new)
    assert "axolotl.integrations.liger.LigerPlugin" in data["plugins"]
    assert data["liger_fused_linear_cross_entropy"] is True
    assert "cut_cross_entropy" not in new.lower() and "CutCrossEntropy" not in new
    if "Spectrum" in plugins:
        assert "axolotl.integrations.spectrum.SpectrumPlugin" in data["plugins"]
    assert parse_document(new, path).plan.loss_impl.value == "fused"


def test_axolotl_liger_fix_title_names_what_it_writes(tmp_path):
    config = tmp_path / "axolotl.yaml"
    config.write_text(AXOLOTL, encoding="utf-8")
    report = json.loads(check(config, "--gpu", "H100-80GB", "--format", "json").stdout)
    fused = [x for f in report["files"][0]["findings"] for x in f["fixes"] if x["id"] == "fused-loss"]
    assert fused, report
    for fix in fused:
        written = "".join(e["new_text"] for e in fix["edits"])
        assert fix["title"].startswith("Use Liger's fused linear cross-entropy")
        assert "LigerPlugin" in written and "liger_fused_linear_cross_entropy: true" in written, written
        assert "CutCrossEntropy" not in written
