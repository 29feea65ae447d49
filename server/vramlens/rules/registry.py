"""Loading the rule set: one module per rule in the `vramlens_rules` package (the top-level `rules/`
folder of the repository, mapped to that package name in pyproject.toml).

In a source checkout that has not been (re)installed, the folder is found next to `server/` and
loaded from there, so the rules never silently disappear.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType

from vramlens.plan import IssueKind
from vramlens.rules.model import SEVERITIES, Rule

log = logging.getLogger(__name__)

PACKAGE = "vramlens_rules"
_ID = re.compile(r"^VL\d{3}$")
_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


def _package() -> ModuleType:
    try:
        return importlib.import_module(PACKAGE)
    except ModuleNotFoundError as exc:
        if exc.name != PACKAGE:
            raise  # the rule set is there but imports something missing: a bug
    folder = Path(__file__).resolve().parents[3] / "rules"  # server/vramlens/rules -> repo root
    init = folder / "__init__.py"
    if not init.is_file():
        raise ImportError(f"the rule set ({PACKAGE}) is not installed and {folder} does not exist")
    spec = importlib.util.spec_from_file_location(PACKAGE, init, submodule_search_locations=[str(folder)])
    if spec is None or spec.loader is None:  # not for a path ending in .py
        raise ImportError(f"the rule set ({PACKAGE}) cannot be loaded from {folder}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    spec.loader.exec_module(module)
    return module


def rules_package_dir() -> Path:
    """The folder the rule modules are loaded from."""
    return Path(_package().__path__[0])


@functools.cache
def all_rules() -> tuple[Rule, ...]:
    """Every rule, sorted by id. Raises if a rule file is malformed (a packaging error, not user input)."""
    package = _package()
    rules: list[Rule] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{PACKAGE}.{info.name}")
        rule = getattr(module, "RULE", None)
        if not isinstance(rule, Rule):
            raise TypeError(f"{PACKAGE}.{info.name} defines no RULE")
        _validate(rule, info.name)
        rules.append(rule)
    ids = [r.id for r in rules]
    names = [r.name for r in rules]
    if len(set(ids)) != len(ids) or len(set(names)) != len(names):
        raise ValueError("duplicate rule ids or names in the rule set")
    owners: dict[IssueKind, list[str]] = {kind: [] for kind in IssueKind}
    for rule in rules:
        for kind in rule.owns:
            owners[kind].append(rule.id)
    wrong = {kind.value: found for kind, found in owners.items() if len(found) != 1}
    if wrong:
        raise ValueError(f"every parse-issue kind needs exactly one rule that owns it: {wrong}")
    return tuple(sorted(rules, key=lambda r: r.id))


def _validate(rule: Rule, module: str) -> None:
    if not _ID.match(rule.id) or not _NAME.match(rule.name):
        raise ValueError(f"{module}: bad rule id {rule.id!r} or name {rule.name!r}")
    if rule.severity not in SEVERITIES:
        raise ValueError(f"{module}: bad default severity {rule.severity!r}")
    if not rule.why.strip() or not rule.title.strip() or not rule.message.strip():
        raise ValueError(f"{module}: a rule needs a title, a message and its documentation")
    if rule._check is None:
        raise ValueError(f"{module}: {rule.id} has no check")


def owner_of(kind: IssueKind) -> Rule:
    """The rule that reports parse issues of this kind."""
    return next(rule for rule in all_rules() if kind in rule.owns)


def rule_by_id(code: str) -> Rule | None:
    """A rule by id ("VL001") or name ("predicted-oom")."""
    key = code.strip()
    for rule in all_rules():
        if rule.id == key.upper() or rule.name == key.lower():
            return rule
    return None
