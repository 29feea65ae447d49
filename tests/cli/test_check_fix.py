"""`vramlens check --fix` writes the safe fixes (and with --unsafe-fixes the unsafe ones) into the files they edit:
the config, or the DeepSpeed JSON it names; files are written only when unchanged, atomically, with their line breaks
and mode, and never through a symlink that leads out of the checked folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens.formats import parse_document
from vramlens.plan import IssueKind

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama3-8b-full-adamw-a100-40gb.yaml"

pytest.importorskip("vramlens.formats.render", reason="fixes need formats.render to write edits")


def check(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vramlens", "check", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_fix_makes_the_oom_example_pass(tmp_path):
    config = tmp_path / EXAMPLE.name
    shutil.copy(EXAMPLE, config)
    before = config.read_text(encoding="utf-8")
    assert check(config.name, "--gpu", "A100-40GB", cwd=tmp_path).returncode == 1

    # its "make it fit" trains LoRA adapters instead of the full model: an unsafe fix, not applied by --fix alone
    safe_only = check(config.name, "--gpu", "A100-40GB", "--fix", cwd=tmp_path)
    assert safe_only.returncode == 1 and "fixed: Make it fit" not in safe_only.stdout
    assert "unsafe: applies with --fix --unsafe-fixes" in safe_only.stdout

    shutil.copy(EXAMPLE, config)
    fixed = check(config.name, "--gpu", "A100-40GB", "--fix", "--unsafe-fixes", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "fixed: Make it fit" in fixed.stdout
    after = config.read_text(encoding="utf-8")
    assert after != before
    # comments and untouched settings survive
    assert "# Full fine-tune of Llama-3-8B" in after and "learning_rate: 2.0e-05" in after

    again = check(config.name, "--gpu", "A100-40GB", cwd=tmp_path)
    assert again.returncode == 0, again.stdout
    parsed = parse_document(after, str(config))
    assert parsed.plan is not None and not [i for i in parsed.issues if i.kind == IssueKind.UNREADABLE]


def test_fix_leaves_a_config_that_already_passes_alone(tmp_path):
    config = tmp_path / "ok.yaml"
    text = (
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ntorch_dtype: bfloat16\nbf16: true\n"
        "per_device_train_batch_size: 1\nmax_length: 512\noutput_dir: out\n"
        "env:\n  PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True\n"
    )
    config.write_text(text, encoding="utf-8")
    r = check("ok.yaml", "--fix", cwd=tmp_path)
    assert r.returncode == 0 and config.read_text(encoding="utf-8") == text


# -- the file an edit names --------------------------------------------------------------------------

TRL_WITH_DS = (
    "model_name_or_path: mistralai/Mistral-7B-v0.1\nuse_peft: true\ntorch_dtype: bfloat16\nbf16: true\n"
    "max_length: 4096\ndeepspeed: ds.json\noutput_dir: out\n"
)
DS_JSON = (
    '{\n  "train_micro_batch_size_per_gpu": 16,\n  "gradient_accumulation_steps": 1,\n'
    '  "zero_optimization": {"stage": 2}\n}\n'
)


def test_a_fix_for_the_deepspeed_json_goes_into_the_json_not_the_yaml(tmp_path):
    """Issue 11.1: the micro-batch lives in ds.json; --fix used to write its edits at the same lines and columns
    of the YAML (`use_peft: true1`, `torch_dtype: bfloat164`) and leave the JSON alone."""
    config, ds = tmp_path / "train.yaml", tmp_path / "ds.json"
    config.write_text(TRL_WITH_DS, encoding="utf-8")
    ds.write_text(DS_JSON, encoding="utf-8")
    plan = json.loads(check("train.yaml", "--gpu", "L4", "--format", "json", cwd=tmp_path).stdout)
    fit = next(
        x
        for f in plan["files"][0]["findings"]
        if f["rule"] == "VL001"
        for x in f["fixes"]
        if x["id"] in ("make-it-fit", "make-it-fit-safe") and x["applicability"] == "safe"
    )
    assert {e.get("file") for e in fit["edits"]} == {str(ds.resolve())}, fit  # JSON output names the file

    r = check("train.yaml", "--gpu", "L4", "--fix", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"wrote {ds.resolve()}" in r.stdout and "fixed 2 file(s)" in r.stdout, r.stdout
    after = config.read_text(encoding="utf-8")
    # the YAML keeps every line it had (the allocator setting is the only addition)
    assert after.startswith(TRL_WITH_DS), after
    data = json.loads(ds.read_text(encoding="utf-8"))
    assert data["train_micro_batch_size_per_gpu"] < 16
    assert data["train_micro_batch_size_per_gpu"] * data["gradient_accumulation_steps"] == 16
    assert check("train.yaml", "--gpu", "L4", cwd=tmp_path).returncode == 0


def test_a_json_outside_the_checked_folder_is_not_written_and_the_output_says_why(tmp_path):
    """The config in configs/ names ds.json at the project root (resolved from the working directory, as
    HF/axolotl do): checking configs/ may not write it, so the fix is left out with the reason."""
    (tmp_path / "configs").mkdir()
    config, ds = tmp_path / "configs" / "train.yaml", tmp_path / "ds.json"
    config.write_text(TRL_WITH_DS, encoding="utf-8")
    ds.write_text(DS_JSON, encoding="utf-8")
    r = check("configs", "--gpu", "L4", "--fix", cwd=tmp_path)
    assert "outside the checked folder" in r.stdout, r.stdout
    assert ds.read_text(encoding="utf-8") == DS_JSON
    assert config.read_text(encoding="utf-8").startswith(TRL_WITH_DS)
    assert "fixed: Make it fit" not in r.stdout


# -- how files are written ---------------------------------------------------------------------------

OOM_QLORA = (
    "# QLoRA on Mistral-7B with TRL\nmodel_name_or_path: mistralai/Mistral-7B-v0.1\ntorch_dtype: bfloat16\n"
    "load_in_4bit: true\nuse_peft: true\nlora_r: 16\nlora_alpha: 32\nlora_target_modules: all-linear\n"
    "bf16: true\nper_device_train_batch_size: 16\nmax_length: 4096\noutput_dir: out\n"
)


@pytest.mark.parametrize("eol", ["\r\n", "\r"], ids=["crlf", "cr"])
def test_crlf_files_stay_crlf_and_keep_their_mode(tmp_path, eol):
    config = tmp_path / "qlora.yaml"
    config.write_bytes(OOM_QLORA.replace("\n", eol).encode())
    os.chmod(config, 0o640)
    r = check("qlora.yaml", "--gpu", "T4", "--fix", cwd=tmp_path)
    assert "fixed: Make it fit" in r.stdout, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    data = config.read_bytes().decode()
    lowered = re.search(r"lower the micro-batch from 16 to (\d+)", r.stdout)
    assert lowered, r.stdout
    assert f"per_device_train_batch_size: {lowered[1]}{eol}" in data  # the batch the fix reported
    assert len(re.findall(r"\r\n|\r|\n", data)) == data.count(eol), data  # every line break, old and new, is eol
    assert os.stat(config).st_mode & 0o777 == 0o640
    assert not [p for p in tmp_path.iterdir() if p.name != "qlora.yaml"]  # no temporary file left behind


def test_a_symlink_to_a_file_outside_the_checked_folder_is_not_written_through(tmp_path):
    outside, checked = tmp_path / "outside", tmp_path / "checked"
    outside.mkdir()
    checked.mkdir()
    target = outside / "qlora.yaml"
    target.write_text(OOM_QLORA, encoding="utf-8")
    (checked / "qlora.yaml").symlink_to(target)
    for named in ("checked", "checked/qlora.yaml"):
        r = check(named, "--gpu", "T4", "--fix", cwd=tmp_path)
        assert r.returncode == 1 and "leads outside the checked folder" in r.stdout, r.stdout
        assert target.read_text(encoding="utf-8") == OOM_QLORA
        assert (checked / "qlora.yaml").is_symlink()


def test_a_symlink_inside_the_checked_folder_is_written_at_its_target(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "qlora.yaml"
    target.write_text(OOM_QLORA, encoding="utf-8")
    (tmp_path / "link.yaml").symlink_to(target)
    r = check("link.yaml", "--gpu", "T4", "--fix", cwd=tmp_path)
    assert "fixed: Make it fit" in r.stdout, r.stdout
    assert (tmp_path / "link.yaml").is_symlink()
    lowered = re.search(r"lower the micro-batch from 16 to (\d+)", r.stdout)
    assert lowered, r.stdout
    assert f"per_device_train_batch_size: {lowered[1]}\n" in target.read_text(encoding="utf-8")


def test_a_file_changed_while_fixing_is_not_overwritten(tmp_path, monkeypatch, capsys):
    """The file is edited (by the user, a formatter) after --fix read it: the change is kept, --fix says so."""
    import vramlens.analysis
    from vramlens.cli import main

    config = tmp_path / "qlora.yaml"
    config.write_text(OOM_QLORA, encoding="utf-8")
    real_analyze = vramlens.analysis.analyze
    calls = []

    def analyze_and_edit(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # after the first read, while the fixes are being worked out
            with open(config, "a", encoding="utf-8") as f:
                f.write("# edited meanwhile\n")
        return real_analyze(*args, **kwargs)

    monkeypatch.setattr(vramlens.analysis, "analyze", analyze_and_edit)
    monkeypatch.chdir(tmp_path)
    rc = main(["check", "qlora.yaml", "--gpu", "T4", "--fix"])
    out = capsys.readouterr().out
    assert len(calls) >= 2
    assert rc == 1 and "changed on disk since it was read" in out, out
    assert config.read_text(encoding="utf-8") == OOM_QLORA + "# edited meanwhile\n"


# -- fix levels --------------------------------------------------------------------------------------


def test_safe_and_unsafe_fixes_on_the_qlora_mistral_config(tmp_path):
    """Issue 16 B6: --fix applies the safe fixes (the micro-batch trade), the bf16 → fp16 changes a T4 needs are
    unsafe and wait for --unsafe-fixes, after which no error is left; JSON says each fix's applicability."""
    config = tmp_path / "qlora.yaml"
    config.write_text(OOM_QLORA, encoding="utf-8")
    report = json.loads(check("qlora.yaml", "--gpu", "T4", "--format", "json", cwd=tmp_path).stdout)
    levels = {
        x["title"].split(" → ")[0]: x["applicability"] for f in report["files"][0]["findings"] for x in f["fixes"]
    }
    # every VL005 finding offers the one fix that switches all of the file's bf16 settings (weights and AMP) to fp16
    assert levels["Use fp16 throughout: fp16 mixed precision, fp16 weights"] == "unsafe", levels
    # the micro-batch trade alone makes it fit, a safe fix; a plan that also takes Liger (another package: unsafe) is
    # offered beside it, never instead of it
    assert any(
        t.startswith("Make it fit") and "Liger" not in t and "lower the micro-batch" in t and a == "safe"
        for t, a in levels.items()
    ), levels
    assert all(a == "unsafe" for t, a in levels.items() if t.startswith("Make it fit") and "Liger" in t), levels

    safe = check("qlora.yaml", "--gpu", "T4", "--fix", cwd=tmp_path)
    assert safe.returncode == 1 and "fixed: Make it fit" in safe.stdout
    text = config.read_text(encoding="utf-8")
    assert "torch_dtype: bfloat16" in text and "bf16: true" in text  # unsafe fixes left alone

    unsafe = check("qlora.yaml", "--gpu", "T4", "--fix", "--unsafe-fixes", cwd=tmp_path)
    assert unsafe.returncode == 0, unsafe.stdout
    again = check("qlora.yaml", "--gpu", "T4", "--format", "json", cwd=tmp_path)
    assert again.returncode == 0 and json.loads(again.stdout)["summary"]["error"] == 0
    assert "torch_dtype: float16" in config.read_text(encoding="utf-8")
