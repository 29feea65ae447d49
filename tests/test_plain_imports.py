"""The project's own modules are imported plainly: an import of `vramlens.…` inside a `try` whose handler catches
ImportError (or everything) would turn a broken module into fixes or diagnostics that silently vanish."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATCHING = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def _own_imports(nodes) -> list[str]:
    names = []
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.ImportFrom) and (sub.module or "").split(".")[0] == "vramlens":
                names.append(sub.module)
            elif isinstance(sub, ast.Import):
                names += [a.name for a in sub.names if a.name.split(".")[0] == "vramlens"]
    return names


def _catches(handler: ast.ExceptHandler) -> set[str]:
    if handler.type is None:
        return {"BaseException"}
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {t.id if isinstance(t, ast.Name) else getattr(t, "attr", "") for t in types}


def test_no_import_of_the_project_is_guarded():
    guarded = []
    for path in sorted([*(ROOT / "server" / "vramlens").rglob("*.py"), *(ROOT / "rules").glob("*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Try) and any(_catches(h) & CATCHING for h in node.handlers):
                for name in _own_imports(node.body):
                    guarded.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert not guarded, "\n".join(guarded)
