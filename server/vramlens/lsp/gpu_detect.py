"""The local GPU, when this machine has one: `nvidia-smi --query-gpu=name,memory.total`.

Used only as a default when neither the project nor the editor names a GPU. Never required: no
`nvidia-smi`, a slow driver or an unknown card all give None. Runs in a thread so start-up never waits.

Only an `nvidia-smi` found through an absolute `PATH` entry, outside the folder the server was started in and
outside the workspace, is run: an empty or relative `PATH` entry means the current directory, which in an
editor is usually the repository, and a repository's own `nvidia-smi` must not run because it was opened.
The server skips detection altogether in untrusted workspaces.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from vramlens import file_access

log = logging.getLogger(__name__)

QUERY = ["--query-gpu=name,memory.total", "--format=csv,noheader"]
TIMEOUT_S = 3.0


@dataclass(frozen=True)
class LocalGpu:
    name: str
    """The catalog name when known (e.g. "A100-40GB"), else what nvidia-smi reported."""
    count: int
    """How many GPUs of that model the machine has."""
    reported: str
    """The raw line, e.g. "NVIDIA A100-SXM4-40GB, 40960 MiB"."""


def parse_nvidia_smi(output: str) -> LocalGpu | None:
    """The most common GPU in `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader` output."""
    rows = []
    for line in output.splitlines():
        name, _, memory = line.partition(",")
        if name.strip():
            rows.append((name.strip(), memory.strip()))
    if not rows:
        return None
    (name, memory), count = Counter(rows).most_common(1)[0]
    from vramlens.knowledge import gpus

    match = gpus.lookup_gpu(name)
    if match is None and memory:
        # "NVIDIA Foo, 24564 MiB" → a generic GPU of that size; lookup_gpu understands "24GiB"
        mib = memory.split()[0]
        if mib.replace(".", "", 1).isdigit():
            match = gpus.lookup_gpu(f"{float(mib) / 1024:.0f}GiB")
    return LocalGpu(match[0].name if match else name, count, f"{name}, {memory}")


def find_nvidia_smi(workspace: Path | None = None) -> str | None:
    """The absolute, symlink-resolved path of the first executable `nvidia-smi` on `PATH` that lies outside
    the current directory and `workspace`; empty and relative `PATH` entries are skipped."""
    roots = [r for r in (workspace,) if r is not None]
    real_roots = [Path(os.path.realpath(r)) for r in roots]
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        candidate = os.path.realpath(os.path.join(entry, "nvidia-smi"))
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        if file_access.under_current_folder(Path(candidate)) or file_access.inside(Path(candidate), real_roots):
            continue
        return candidate
    return None


def detect_local_gpu(workspace: Path | None = None) -> LocalGpu | None:
    exe = find_nvidia_smi(workspace)
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, *QUERY], capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("nvidia-smi failed: %s", exc)
        return None
    if done.returncode != 0:
        return None
    try:
        return parse_nvidia_smi(done.stdout)
    except Exception:  # an odd driver line must never stop the server
        log.warning("could not read nvidia-smi output %r", done.stdout[:200], exc_info=True)
        return None
