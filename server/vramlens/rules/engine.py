"""Running the rule set over one analysed document: severity settings, suppression comments, and a
rule that fails becomes a finding (with its traceback in the log), never an exception."""

from __future__ import annotations

import logging
from typing import Mapping

from vramlens.rules.context import RuleContext
from vramlens.rules.model import Finding, Rule, normalize_severity
from vramlens.rules.registry import all_rules, rule_by_id
from vramlens.rules.suppression import scan

log = logging.getLogger(__name__)


def severity_map(overrides: Mapping[str, str] | None) -> dict[str, str]:
    """User severity settings keyed by rule id; unknown rules and words are dropped (logged)."""
    out: dict[str, str] = {}
    for code, word in (overrides or {}).items():
        rule = rule_by_id(str(code))
        level = normalize_severity(str(word))
        if rule is None or level is None:
            log.warning("ignoring severity setting %s=%s", code, word)
            continue
        out[rule.id] = level
    return out


def _ready(rule: Rule, ctx: RuleContext) -> bool:
    if rule.needs == "plan":
        return ctx.plan is not None
    if rule.needs == "resolution":
        return ctx.resolution is not None
    if rule.needs == "estimate":
        return ctx.estimate is not None
    return True


def run_rules(ctx: RuleContext, severity: Mapping[str, str] | None = None) -> list[Finding]:
    levels = severity_map(severity)
    suppressions = scan(ctx.text)
    findings: list[Finding] = []
    for rule in all_rules():
        level = levels.get(rule.id, rule.severity)
        if level == "off" or not _ready(rule, ctx):
            continue
        try:
            produced = rule.run(ctx)
        except Exception as exc:
            log.exception("rule %s failed on %s", rule.id, ctx.path)
            produced = [
                ctx.finding(
                    rule,
                    f"vramlens could not run {rule.id} ({rule.name}) on this file: "
                    f"{type(exc).__name__}: {exc} — please report this",
                    ctx.anchor,
                )
            ]
            level = "warning"
        for f in produced:
            if suppressions.suppressed(f.span.start_line, rule.id, rule.name):
                continue
            f.severity = level
            findings.append(f)
    findings.sort(key=lambda f: (f.span.start_line, f.span.start_col, f.rule_id))
    return findings
