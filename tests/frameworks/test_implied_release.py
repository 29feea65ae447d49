"""A file written for an older release of its framework is read with that release's arguments and defaults: the
release its own arguments belong to (`frameworks.recognise.implied_version`), when the workspace pins none and the
newest release vramlens has the arguments of does not define them all — and the file says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vramlens.analysis import analyze
from vramlens.formats import parse_document
from vramlens.knowledge import frameworks
from vramlens.plan import IssueKind
from vramlens.resolve import resolve
from vramlens.settings import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SWIFT_2 = FIXTURES / "ms-swift" / "v2.4.0" / "attention" / "qwen_7b_chat_lora_sft.sh"  # ms-swift v2.4.0's own


def _plan(text: str, workspace: Path, name: str = "sft.sh"):
    path = workspace / name
    path.write_text(text, encoding="utf-8")
    return parse_document(text, str(path), workspace=workspace).plan


def test_an_ms_swift_2_line_is_read_as_ms_swift_2_with_its_defaults(tmp_path):
    """`--sft_type`, `--batch_size`, `--lora_target_modules`: ms-swift 2.x arguments (4.x renamed or dropped them).
    The line is read as ms-swift 2.6.1: its defaults come from 2.6.1's SftArguments, labelled so, and the note
    names the arguments that decided it."""
    text = SWIFT_2.read_text(encoding="utf-8").replace("    --lora_rank 8 \\\n", "")
    plan = _plan(text, tmp_path)
    assert plan.framework_release == "2.6.1"
    note = next(n for n in plan.read_notes if n.startswith("read as ms-swift 2.6.1"))
    assert "`--batch_size`" in note and "more are not arguments of ms-swift 4.6.0" in note
    r = resolve(plan, Settings(workspace=tmp_path))
    assert r.sources["lora_r"].value == 8 and r.sources["lora_r"].framework == "ms-swift 2.6.1 (SftArguments.lora_rank)"
    assert r.sources["optimizer"].value == "adamw_torch"  # 2.x SftArguments.optim; 4.x takes transformers' fused


def test_the_renamed_flag_is_still_pointed_out_against_the_newest_release(tmp_path):
    plan = _plan(SWIFT_2.read_text(encoding="utf-8"), tmp_path)
    renamed = [i for i in plan.issues if i.kind == IssueKind.NOT_READ and "`sft_type` is not an argument" in i.message]
    assert len(renamed) == 1 and "ms-swift 4.6.0" in renamed[0].message and renamed[0].suggestion == "--tuner_type"


def test_a_line_the_newest_release_reads_whole_is_read_as_the_newest(tmp_path):
    plan = _plan(
        "swift sft --model Qwen/Qwen2.5-7B-Instruct --tuner_type lora --per_device_train_batch_size 2\n", tmp_path
    )
    assert plan.framework_release is None
    assert not any(n.startswith("read as ms-swift") for n in plan.read_notes)


def test_a_pinned_workspace_decides_over_the_file(tmp_path):
    (tmp_path / "requirements.txt").write_text("ms-swift==4.6.0\n", encoding="utf-8")
    plan = _plan(SWIFT_2.read_text(encoding="utf-8"), tmp_path)
    assert plan.framework_release is None
    r = resolve(plan, Settings(workspace=tmp_path))
    assert "2.6.1" not in (r.sources["lora_dropout"].framework or "")


def test_the_cli_names_the_release_it_read(tmp_path):
    script = tmp_path / "sft.sh"
    script.write_text(SWIFT_2.read_text(encoding="utf-8"), encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", "--offline", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert "read as ms-swift 2.6.1, the release the file is written for" in out.stdout, out.stdout + out.stderr
    assert "defaults of ms-swift 2.6.1 (SftArguments.optim)" in out.stdout


def test_llamafactory_train_bash_is_read_as_the_last_release_that_has_it(tmp_path):
    """`accelerate launch … src/train_bash.py` (LLaMA-Factory v0.6.3 examples/extras/fsdp_qlora/sft.sh): the entry
    script 0.7.1 replaced, so the run is read with 0.7.0's arguments (dumped from the `llmtuner` 0.7.0 wheel) and
    the defaults of that release: `trust_remote_code` on for every load before 0.9.2."""
    src = FIXTURES / "llamafactory" / "v0.6.3" / "examples" / "extras" / "fsdp_qlora" / "sft.sh"
    plan = _plan(src.read_text(encoding="utf-8"), tmp_path)
    assert plan.framework == "llamafactory" and plan.framework_release == "0.7.0"
    assert any("`train_bash.py` is LLaMA-Factory's entry script up to 0.7.0" in n for n in plan.read_notes)
    r = resolve(plan, Settings(workspace=tmp_path))
    assert r.sources["lora_r"].framework == "LLaMA-Factory 0.7.0 (LoraArguments.lora_rank)"
    _key, _label, defaults = frameworks.defaults_for("llamafactory", "sft", Settings(workspace=tmp_path), "0.7.0")
    assert defaults["trust_remote_code"] is True and "0.7.0" in defaults.labels["trust_remote_code"]


def test_llamafactory_cli_is_read_as_the_newest(tmp_path):
    text = "llamafactory-cli train --model_name_or_path Qwen/Qwen2.5-7B --stage sft --finetuning_type lora\n"
    plan = _plan(text, tmp_path)
    assert plan.framework_release is None


def test_a_release_pinned_between_two_dumps_is_held_to_either(tmp_path):
    """ms-swift 3.5.0 is not dumped: its file is read with 3.5.3's arguments and defaults (the same minor), and an
    argument is named only when neither 3.4.1.post1 nor 3.5.3 defines it."""
    (tmp_path / "requirements.txt").write_text("ms-swift==3.5.0\n", encoding="utf-8")
    text = (
        "swift sft --model Qwen/Qwen2.5-0.5B --train_type lora --torch_dtype bfloat16 "
        "--per_device_train_batch_size 1 --max_length 512 --modle_revision master\n"
    )
    path = tmp_path / "train.sh"
    path.write_text(text, encoding="utf-8")
    a = analyze(text, str(path), Settings(workspace=tmp_path, model_lookup=False))
    unknown = [f for f in a.findings if "modle_revision" in f.message]
    assert len(unknown) == 1
    assert unknown[0].message.startswith("`modle_revision` is not an argument of ms-swift 3.5.3 or 3.4.1.post1")
    # 3.5.0's own arguments are not known: it may be one (3.5.0 defines `--gc_collect_after_offload`, which
    # neither neighbour does), so it is said as information, not as an error
    assert "pinned 3.5.0: it may be one of 3.5.0's own" in unknown[0].message
    assert unknown[0].severity == "information" and "did you mean `--model_revision`?" in unknown[0].message


def test_a_pin_of_llmtuner_is_a_release_of_llamafactory(tmp_path):
    """LLaMA-Factory was published as `llmtuner` up to 0.7: a workspace pinning `llmtuner==0.6.3` runs that
    release (its arguments read as 0.6.3's, its requirements its own), not the one the file implies."""
    (tmp_path / "requirements.txt").write_text("llmtuner==0.6.3\n", encoding="utf-8")
    src = FIXTURES / "llamafactory" / "v0.6.3" / "examples" / "extras" / "fsdp_qlora" / "sft.sh"
    plan = _plan(src.read_text(encoding="utf-8"), tmp_path)
    assert plan.framework == "llamafactory" and plan.framework_release is None  # pinned: nothing implied
    r = resolve(plan, Settings(workspace=tmp_path))
    assert r.sources["lora_r"].framework == "LLaMA-Factory 0.6.3 (LoraArguments.lora_rank)"
    assert frameworks.run_version("llamafactory", Settings(workspace=tmp_path)) == "0.6.3"
    assert frameworks.release_requires("llamafactory", "0.6.3").specs["transformers"] == ">=4.37.2"
