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

# With arguments, pytest runs just those. Without, the whole suite in two passes: everything but the real
# editors on one worker per core (pytest-xdist, a test file per worker so its fixtures stay with it), then the
# editor tier alone, which starts code-server, Chromium and Neovim and would compete with the other worker.
if [ "$#" -gt 0 ]; then
    exec "$PY" -m pytest "$@"
fi
# at most 4 workers: each holds its own torch and traced models in memory
CORES=$(nproc 2>/dev/null || echo 2)
WORKERS=${VRAMLENS_TEST_WORKERS:-$((CORES < 4 ? CORES : 4))}
status=0
"$PY" -m pytest -n "$WORKERS" --dist loadfile --ignore=tests/editors tests || status=$?
"$PY" -m pytest tests/editors || status=$((status ? status : $?))
exit "$status"
