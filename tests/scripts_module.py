"""The project's scripts (scripts/*.py) loaded as modules for tests, once each."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@functools.cache
def load_script(name: str) -> ModuleType:
    """scripts/<name>.py as the module `name` (registered in sys.modules: dataclasses look their module up), with
    scripts/ on the path for the ones that import a sibling."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
