"""What the server loads before it can answer `initialize`: pygls, lsprotocol and the modules that register its
features. The settings model (pydantic), the parsers (PyYAML) and the analysis pipeline are loaded after the
answer (`benchmarks/startup.py` measures the time; this keeps a feature module from pulling them in again at
import, as a module-level `from vramlens.fixes import …` in the code actions once did)."""

from __future__ import annotations

import subprocess
import sys

LOADED_AFTER_THE_ANSWER = (
    "pydantic",
    "yaml",
    "vramlens.settings",
    "vramlens.lsp.pipeline",
    "vramlens.lsp.config",
    "vramlens.lsp.documents",
    "vramlens.fixes",
    "vramlens.formats",
    "vramlens.resolve",
    "vramlens.estimate",
)

SCRIPT = """
import sys
from vramlens.lsp.server import create_server
create_server()
print("LOADED", sorted(m for m in {names!r} if m in sys.modules))
"""


def test_registering_the_features_loads_no_settings_model_parser_or_pipeline(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.replace("{names!r}", repr(LOADED_AFTER_THE_ANSWER))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "LOADED []" in done.stdout, done.stdout
