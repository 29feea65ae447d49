"""The rules engine: loading the rule set, running checks, severity settings, suppression comments.

The rules themselves live in the repository's top-level `rules/` folder (installed as the
`vramlens_rules` package), one file per rule with its id, name, title, default severity, message
template, documentation and check. This package is only the machinery that runs them.
"""

from vramlens.rules.context import RuleContext
from vramlens.rules.engine import run_rules, severity_map
from vramlens.rules.model import SEVERITIES, Finding, Related, Rule, normalize_severity
from vramlens.rules.registry import all_rules, rule_by_id

__all__ = [
    "Finding",
    "Related",
    "Rule",
    "RuleContext",
    "SEVERITIES",
    "all_rules",
    "normalize_severity",
    "rule_by_id",
    "run_rules",
    "severity_map",
]
