"""The rules engine as a user meets it: the rule list, suppression comments, severity settings, and a rule
that breaks becoming a finding instead of an exception."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError
from vramlens.fixes import FIX_IDS
from vramlens.rules import all_rules, rule_by_id

OOM = """
model_name_or_path: meta-llama/Meta-Llama-3-8B
torch_dtype: bfloat16
bf16: true
per_device_train_batch_size: 4
max_length: 2048
optim: adamw_torch{comment}
output_dir: out
"""

# The rule list of the interface contract (id, default severity).
CONTRACT = {
    "VL001": "error",
    "VL002": "warning",
    "VL003": "information",
    "VL004": "warning",
    "VL005": "error",
    "VL006": "error",
    "VL007": "warning",
    "VL008": "warning",
    "VL009": "information",
    "VL010": "warning",
    "VL011": "warning",
    "VL012": "warning",
    "VL013": "error",
    "VL014": "error",
    "VL015": "warning",
    "VL016": "error",
    "VL017": "information",
    "VL018": "information",
    "VL019": "warning",
    "VL020": "warning",
    "VL021": "information",
    "VL022": "information",
    "VL023": "information",
    "VL024": "warning",
    "VL025": "error",
}


def test_the_rule_set_is_the_contracted_list_with_documentation():
    rules = all_rules()
    assert {r.id: r.severity for r in rules} == CONTRACT
    for r in rules:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", r.name)
        assert len(r.why.split()) > 40, f"{r.id} needs its documentation"
        assert "Example" in r.why and "Fix" in r.why, f"{r.id}: example and fix sections"
        assert set(r.fixes) <= set(FIX_IDS), f"{r.id} offers unknown fixes {set(r.fixes) - set(FIX_IDS)}"
    assert rule_by_id("predicted-oom").id == "VL001" and rule_by_id("vl004").id == "VL004"


def test_line_suppression_only_hides_that_rule_on_that_line(run):
    plain = run(OOM.format(comment=""), gpu="A100-40GB")
    assert "VL001" in run.ids(plain)
    line = run.only(plain, "VL001").span.start_line
    assert line == run.line_of(plain, "optim:")
    hidden = run(OOM.format(comment="   # vramlens: ignore[VL001]"), gpu="A100-40GB")
    assert "VL001" not in run.ids(hidden)
    other = run(OOM.format(comment="   # vramlens: ignore[VL009]"), gpu="A100-40GB")
    assert "VL001" in run.ids(other)
    by_name = run(OOM.format(comment="   # vramlens: ignore[predicted-oom]"), gpu="A100-40GB")
    assert "VL001" not in run.ids(by_name)


def test_file_suppression(run):
    base = OOM.format(comment="")
    a = run("# vramlens: ignore-file[VL004]\n" + base, gpu="A100-40GB")
    assert "VL004" not in run.ids(a) and "VL001" in run.ids(a)
    everything = run(base + "# vramlens: ignore\n", gpu="A100-40GB")
    assert everything.findings == [] and everything.estimate is not None


def test_severity_overrides(run):
    base = OOM.format(comment="")
    a = run(base, gpu="A100-40GB", severity={"VL001": "warning", "missing-expandable-segments": "off"})
    assert run.only(a, "VL001").severity == "warning"
    assert "VL004" not in run.ids(a)
    info = run(base, gpu="A100-40GB", severity={"VL001": "info"})
    assert run.only(info, "VL001").severity == "information"
    # unknown rules are ignored, not fatal; an unknown level is refused where the settings are read
    odd = run(base, gpu="A100-40GB", severity={"VL999": "off"})
    assert run.only(odd, "VL001").severity == "error"
    with pytest.raises(ValidationError, match="'loud' is not one of"):
        run(base, gpu="A100-40GB", severity={"VL001": "loud"})


def test_a_rule_that_breaks_becomes_a_finding(run, monkeypatch, caplog):
    rule = rule_by_id("VL009")

    def broken(ctx):
        raise KeyError("boom")

    monkeypatch.setattr(rule, "_check", broken)
    a = run(OOM.format(comment=""), gpu="A100-40GB")
    f = run.only(a, "VL009")
    assert "could not run VL009" in f.message and f.severity == "warning"
    assert "VL001" in run.ids(a)  # the other rules still ran
    assert "rule VL009 failed" in caplog.text


@pytest.mark.parametrize("text", ["", "\n\n", "just: a\nplain: mapping\n", "- a\n- list\n", "key: [unclosed\n"])
def test_documents_that_are_not_configs(run, text):
    a = run(text)
    assert a.plan is None and a.estimate is None
    assert all(f.rule_id == "VL016" for f in a.findings)


def test_a_failing_stage_keeps_the_plan_and_reports_itself(run, monkeypatch, caplog):
    import vramlens.analysis as analysis

    def broken(rp, **kw):
        raise ZeroDivisionError("estimator bug")

    monkeypatch.setattr(analysis, "estimate", broken)
    a = run(OOM.format(comment=""), gpu="A100-40GB")
    assert a.plan is not None and a.resolution is not None and a.estimate is None
    f = run.only(a, "VL016")
    assert "internal error" in f.message and "estimator bug" in f.message
    assert "estimating" in caplog.text
