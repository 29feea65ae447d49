"""CPU and memory bombs stay bounded: a shell variable that doubles per line, a YAML base-60 integer, thousands
of findings, a path value of 80,000 characters, an f-string of 150,000 placeholders. Each analysis runs in a
child process under a 1 GiB address-space limit (so a regression fails with MemoryError instead of taking the
machine), and the user-visible bound is asserted: the capped value is unknown and said so, the diagnostic is a
readable one. Times are printed by benchmarks/hostile_inputs.py, not asserted."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import hostile
from vramlens.formats import shell

ADDRESS_SPACE = 1 << 30
RSS_BOUND_MIB = 50

MEASURE = textwrap.dedent("""
    import json, pathlib, resource, sys
    sys.path.insert(0, sys.argv[1])
    import hostile
    from vramlens.analysis import analyze
    from vramlens.settings import Settings
    text = getattr(hostile, sys.argv[2])()
    ws = pathlib.Path(sys.argv[4]) if len(sys.argv) > 4 else None
    settings = Settings(gpu="A100-80GB", workspace=ws)
    analyze(hostile.HEADER, "warm.yaml", settings)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    a = analyze(text, str(ws / sys.argv[3]) if ws else sys.argv[3], settings)
    fixes = sum(len(f.fixes) for f in a.findings)     # what a code-action request computes
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"growth_mib": (after - before) / 1024, "error": a.error, "fixes": fixes,
                      "findings": [[f.rule_id, f.message[:300]] for f in a.findings]}))
""")


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def measure(name: str, path: str, workspace: Path | None = None) -> dict:
    args = [sys.executable, "-c", MEASURE, str(Path(hostile.__file__).parent), name, path]
    if workspace is not None:
        args.append(str(workspace))
    out = subprocess.run(args, capture_output=True, text=True, timeout=600, preexec_fn=_limit)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _no_internal_error(result: dict) -> None:
    for rule, message in result["findings"]:
        assert "internal error" not in message, message


def test_doubling_shell_variable_is_capped_and_unknown():
    # 20 lines: 4.7 million characters uncapped, small enough to run in this process before the cap existed
    script, issues = shell.analyze(hostile.shell_doubling(20), "train.sh")
    values = [script.env[f"V{i}"].value for i in range(20)]
    known = [v for v in values if v is not None]
    assert known and all(len(v) <= shell.MAX_VALUE_CHARS for v in known)
    assert values[-1] is None  # unknown, not a truncated string
    assert any("treated as unknown" in i.message for i in issues), issues


def test_doubling_shell_variable_script_and_readme_in_bounded_memory():
    for name, path in (("shell_doubling", "train.sh"), ("shell_doubling_readme", "README.md")):
        result = measure(name, path)
        _no_internal_error(result)
        messages = [m for _, m in result["findings"]]
        assert any("expands to more than 131,072 characters" in m for m in messages), messages
        assert result["growth_mib"] < RSS_BOUND_MIB, result


def test_long_path_value_is_not_walked_component_by_component(tmp_path, monkeypatch):
    """`deepspeed: m/m/…/ds.json` and a model path of 80,000 characters: no file can have such a name (PATH_MAX),
    so they are "not found" after a bounded number of file-system calls, not one `lstat` per component."""
    import os

    from vramlens.analysis import analyze
    from vramlens.settings import Settings

    calls = 0
    real_lstat = os.lstat

    def counting_lstat(*args, **kwargs):
        nonlocal calls
        calls += 1
        return real_lstat(*args, **kwargs)

    monkeypatch.setattr(os, "lstat", counting_lstat)
    settings = Settings(gpu="A100-80GB", workspace=tmp_path)
    a = analyze(hostile.long_path(), str(tmp_path / "cfg.yaml"), settings)
    vl014 = [f.message for f in a.findings if f.rule_id == "VL014"]
    assert vl014 and "not found" in vl014[0] and "outside" not in vl014[0], vl014
    model = "model_name_or_path: " + "m/" * 40_000 + "x\nper_device_train_batch_size: 4\n"
    b = analyze(model, str(tmp_path / "model.yaml"), settings)
    assert any("unknown model" in f.message for f in b.findings), [f.message[:100] for f in b.findings]
    assert calls < 1_000, calls


def test_thousands_of_findings_split_the_text_once(monkeypatch):
    """4,000 repeated `optim:` keys: the first 1,000 duplicates reported one by one, each placed in the document,
    then one finding counting the rest at the last; the text is split into lines once per analysis (it was split
    twice per finding: quadratic in the file)."""
    from vramlens.analysis import analyze
    from vramlens.rules import context
    from vramlens.settings import Settings

    splits = 0
    real = context.text_lines

    def counting(text, *args, **kwargs):
        nonlocal splits
        if len(text) > 10_000:
            splits += 1
        return real(text, *args, **kwargs)

    monkeypatch.setattr(context, "text_lines", counting)
    a = analyze(hostile.repeated_keys(4_000), "cfg.yaml", Settings(gpu="A100-80GB"))
    dup = [f for f in a.findings if "duplicate key `optim`" in f.message]
    assert len(dup) == 1_000  # the first 1,000 `optim:` after the first
    assert {f.span.start_line for f in dup} == set(range(4, 1_004))
    rest = [f for f in a.findings if "more duplicate keys" in f.message]
    assert len(rest) == 1 and rest[0].message.startswith("2,999 more duplicate keys")
    assert rest[0].span.start_line == 4_002  # the last one
    assert splits <= 2, splits


def test_base_60_integer_is_a_readable_vl016_with_no_fixes_to_compute():
    """A 300 KB `59:59:…` integer: refused by the parser (a VL016 naming it), so diagnostics and code actions
    (the fixes) have nothing quadratic left to do."""
    result = measure("base60_int", "cfg.yaml")
    assert [f[0] for f in result["findings"]] == ["VL016"], result["findings"]
    assert "larger than any setting can use" in result["findings"][0][1]
    assert result["fixes"] == 0 and result["growth_mib"] < RSS_BOUND_MIB, result


def test_an_f_string_of_150_000_placeholders_never_reaches_ast_parse(monkeypatch):
    """CPython 3.11 parses one f-string's placeholders in quadratic time; such a text is not parsed at all
    (no plan, no findings), while an ordinary TrainingArguments script still is."""
    import ast

    from vramlens.analysis import analyze
    from vramlens.formats import python_calls
    from vramlens.settings import Settings

    parsed: list[int] = []
    real = ast.parse

    def counting(text, *args, **kwargs):
        parsed.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(python_calls.ast, "parse", counting)
    bomb = analyze(hostile.fstring_placeholders(), "train.py", Settings(gpu="A100-80GB"))
    assert parsed == [] and bomb.plan is None and bomb.findings == []
    ok = analyze(hostile.fstring_placeholders(3), "train.py", Settings(gpu="A100-80GB"))
    assert parsed and ok.plan is not None and ok.plan.micro_batch.value == 4
