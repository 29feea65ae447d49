#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this script).
# Installs everything the tests need on a fresh machine — the Python package with its test and trace
# extras, Node 24, code-server, Chromium, Neovim — then runs pytest over tests/.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1

# torch for the exact-trace tests: the CPU build (the trace needs no GPU).
if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install -q "torch==2.13.0" || "$PY" -m pip install -q "torch>=2.4,<=2.14.1"
fi
"$PY" -m pip install -q -e ".[dev,trace]"

# Real editors for the editor tier (code-server in headless Chromium, Neovim).
bash scripts/install-editor-tools.sh

# Lint, layout and types ([tool.ruff] and [tool.mypy] in pyproject.toml); a failure stops the run with the report.
"$PY" -m ruff check .
"$PY" -m ruff format --check .
"$PY" -m mypy

exec "$PY" -m pytest "$@"
