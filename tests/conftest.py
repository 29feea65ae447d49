"""Settings for every test.

- An isolated cache folder: the calibration file (`VRAMLENS_CALIBRATION`) and anything else under
  `XDG_CACHE_HOME` point into a fresh temporary folder, set before any test runs, so no test — nor a CLI or
  server it starts, which inherit the environment — reads or writes the user's cache.
- This folder on `sys.path` (pytest's default import mode), so tests can import `shared_data`.
"""
from __future__ import annotations

import os
import shutil
import tempfile

_CACHE = tempfile.mkdtemp(prefix="vramlens-tests-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE
os.environ["VRAMLENS_CALIBRATION"] = os.path.join(_CACHE, "vramlens", "calibration.jsonl")


def pytest_unconfigure(config) -> None:
    shutil.rmtree(_CACHE, ignore_errors=True)
