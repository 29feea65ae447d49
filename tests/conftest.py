"""Settings for every test.

- An isolated cache folder: the calibration file (`VRAMLENS_CALIBRATION`) and anything else under
  `XDG_CACHE_HOME` point into a fresh temporary folder, set before any test runs, so no test — nor a CLI or
  server it starts, which inherit the environment — reads or writes the user's cache.
- No network: `HF_HUB_OFFLINE=1` turns the Hub lookup of unknown models off for every test and every CLI or
  server it starts; the tests of the lookup clear it and point `HF_ENDPOINT` at a Hub on loopback
  (`fake_hub.py`).
- This folder on `sys.path` (pytest's default import mode), so tests can import `shared_data` and `model_shapes`.
"""

from __future__ import annotations

import os
import shutil
import tempfile

_CACHE = tempfile.mkdtemp(prefix="vramlens-tests-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE
os.environ["VRAMLENS_CALIBRATION"] = os.path.join(_CACHE, "vramlens", "calibration.jsonl")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.pop("HF_ENDPOINT", None)


def pytest_unconfigure(config) -> None:
    shutil.rmtree(_CACHE, ignore_errors=True)
