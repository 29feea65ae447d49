"""The language server and the CLI's estimate path never import torch or the training libraries: they run only
in the trace worker (a subprocess)."""

from __future__ import annotations

import subprocess
import sys

from trace_plans import tiny_config

HEAVY = ("torch", "transformers", "peft", "bitsandbytes", "trl", "accelerate")

SCRIPT = """
import sys
from vramlens.cli import main
import vramlens.lsp.server, vramlens.trace.client, vramlens.trace.report, vramlens.trace.config
try:
    main(["estimate", sys.argv[1], "--format", "json"])
except SystemExit:
    pass
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print("HEAVY", heavy)
"""


def test_server_and_estimate_never_import_torch_or_transformers(tmp_path):
    cfg = tiny_config(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.replace("{heavy!r}", repr(set(HEAVY))), str(cfg)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert '"allocated_gib"' in done.stdout  # the estimate ran
    assert "HEAVY []" in done.stdout, done.stdout[-500:]
