"""Fixes as a user sees them in a code action list: titled with the new peak, cheapest "make it fit" first."""

from __future__ import annotations

import pytest
from vramlens.fixes import replacement
from vramlens.plan import Span
from vramlens.text import apply_edits

FULL_FT = """
model_name_or_path: {model}
torch_dtype: bfloat16
bf16: true
per_device_train_batch_size: {mb}
gradient_accumulation_steps: 1
gradient_checkpointing: false
max_length: {seq}
optim: adamw_torch
output_dir: out
"""


def test_fix_titles_carry_the_new_peak(run):
    a = run(FULL_FT.format(model="meta-llama/Meta-Llama-3-8B", mb=4, seq=2048), gpu="A100-40GB")
    fixes = run.only(a, "VL001").fixes
    # only a plan that trains adapters fits: offered first, said so, and not the preferred (auto-applied) action
    assert fixes[0].id == "make-it-fit" and not fixes[0].preferred
    assert fixes[0].title.startswith("Make it fit (changes what is trained):")
    for fix in fixes:
        assert fix.estimate_after is not None
        assert f"→ peak {fix.estimate_after.device_bytes / 2**30:.1f} GiB" in fix.title
        assert "A100-40GB" in fix.title
    ckpt = next(f for f in fixes if f.id == "grad-checkpointing")
    assert ckpt.changes == {"grad_checkpointing": True}
    assert ckpt.estimate_after.device_bytes < a.estimate.device_bytes


def test_make_it_fit_prefers_changes_that_keep_the_training(run):
    # a 1B full fine-tune whose activations overflow: checkpointing (or cheaper) is enough, no LoRA needed
    a = run(FULL_FT.format(model="meta-llama/Llama-3.2-1B", mb=16, seq=4096), gpu="A100-40GB")
    fit = run.only(a, "VL001").fixes[0]
    assert fit.id == "make-it-fit"
    chosen = set(fit.changes)
    assert "peft_method" not in chosen and "quant_bits" not in chosen
    assert fit.changes.get("micro_batch", 16) * fit.changes.get("grad_accum", 1) == 16  # same global batch
    assert fit.estimate_after.device_bytes <= 0.9 * fit.estimate_after.usable_bytes
    assert "(fits A100-40GB)" in fit.title and fit.preferred
    # the fastest plan that fits: no slower than checkpointing alone, the classic answer
    ckpt = next(f for f in run.only(a, "VL001").fixes if f.id == "grad-checkpointing")
    assert fit.estimate_after.throughput.tokens_per_s >= ckpt.estimate_after.throughput.tokens_per_s


def test_make_it_fit_falls_back_to_lora_when_nothing_else_fits(run):
    # an 8B full fine-tune cannot fit 40 GB whatever the batch: weights + gradients + 8-bit states > 35 GiB
    a = run(FULL_FT.format(model="meta-llama/Meta-Llama-3-8B", mb=4, seq=2048), gpu="A100-40GB")
    fit = run.only(a, "VL001").fixes[0]
    assert fit.changes.get("peft_method") in ("lora", "qlora")
    assert fit.estimate_after.fits


def test_make_it_fit_is_absent_when_nothing_fits(run):
    a = run(FULL_FT.format(model="meta-llama/Llama-3.1-405B", mb=1, seq=2048), gpu="T4")
    fixes = run.only(a, "VL001").fixes
    assert all(f.id != "make-it-fit" for f in fixes)


def test_the_micro_batch_trade_keeps_the_global_batch(run):
    a = run(FULL_FT.format(model="meta-llama/Llama-3.2-1B", mb=32, seq=2048), gpu="A100-40GB")
    # the trade alone, or as "make it fit" when it is the whole plan
    trade = next(f for f in run.only(a, "VL001").fixes if set(f.changes) == {"micro_batch", "grad_accum"})
    assert trade.changes["micro_batch"] * trade.changes["grad_accum"] == 32
    assert trade.changes["micro_batch"] < 32


def test_apply_edits_and_overlaps():
    text = "a: 1\nbb: 22\n"
    span = Span(file="f", start_line=1, start_col=4, end_line=1, end_col=6)
    assert apply_edits(text, [replacement(span, "3", "t").edits[0]]) == "a: 1\nbb: 3\n"
    insert = Span(file="f", start_line=2, start_col=0, end_line=2, end_col=0)
    assert apply_edits(text, [replacement(insert, "c: 4\n", "t").edits[0]]) == "a: 1\nbb: 22\nc: 4\n"
    with pytest.raises(ValueError):
        apply_edits(text, [replacement(span, "x", "t").edits[0], replacement(span, "y", "t").edits[0]])


def test_fixes_render_into_the_document(run):
    pytest.importorskip("vramlens.formats.render")
    a = run(FULL_FT.format(model="meta-llama/Llama-3.2-1B", mb=16, seq=4096), gpu="A100-40GB")
    fit = run.only(a, "VL001").fixes[0]
    assert fit.edits, fit.note
    fixed = apply_edits(open(a.path).read(), fit.edits)
    again = run(fixed, gpu="A100-40GB")
    assert again.plan is not None and again.estimate.fits
    assert "VL001" not in run.ids(again)


def test_lines_a_fix_adds_to_a_crlf_file_are_crlf(tmp_path):
    """A Python script saved with CRLF: the import and keyword lines the fixes add keep its line breaks, in the
    editor's code actions as in `check --fix`."""
    from pathlib import Path

    from vramlens.analysis import Settings, analyze

    example = Path(__file__).resolve().parents[2] / "examples" / "sft_lora.py"
    text = example.read_text(encoding="utf-8").replace("\n", "\r\n")
    a = analyze(text, str(tmp_path / "sft_lora.py"), Settings(gpu="T4"))
    added = [e.new_text for f in a.findings for fix in f.fixes for e in fix.edits if "\n" in e.new_text]
    assert added, [fix.title for f in a.findings for fix in f.fixes]
    for new_text in added:
        assert new_text.count("\n") == new_text.count("\r\n"), new_text
