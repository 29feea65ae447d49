"""The settings a command-line run uses for one file: the project's `.vramlens.toml` / `pyproject.toml
[tool.vramlens]` found above the file (as the editor reads them), then the flags — one model
(`vramlens.settings.Settings`) validates both, so the command line refuses what the server refuses."""

from __future__ import annotations

import os
import sys
from pathlib import Path

EXIT_SETTINGS = 2
TRACE_PYTHON_ENV = "VRAMLENS_TRACE_PYTHON"  # the user's trace interpreter when --python is not given


def add_settings_flags(p, gpu_help: str = 'GPU, e.g. "A100-40GB", "H100", "8xH100" (overrides the config)') -> None:
    """The flags that set `Settings` fields (validated with every other source in `settings_for`)."""
    from vramlens.settings import DEFAULT_HEADROOM

    p.add_argument("--gpu", help=gpu_help)
    p.add_argument("--num-gpus", type=int, help="number of GPUs (overrides the config)")
    p.add_argument("--headroom", type=float, help=f"fraction of GPU memory to keep free (default {DEFAULT_HEADROOM:g})")
    p.add_argument(
        "--offline",
        action="store_true",
        default=None,
        help="never look a model up on the Hugging Face Hub (also off when HF_HUB_OFFLINE=1)",
    )


def settings_for(path: Path, args, severity: dict[str, str] | None = None):
    """`Settings` for `path` from the project file and `args.gpu`, `args.num_gpus`, `args.headroom`, `args.python`
    (absent or None: not given); `severity` (rule → level from the command line) wins over the project's.
    Raises `SettingsError` naming the file (or flag), the key and what is allowed."""
    from vramlens.settings import SettingsError, from_flags, merge, user_chosen
    from vramlens.workspace_config import find_workspace_config

    cwd = Path.cwd()
    project = find_workspace_config(path.resolve(), cwd)
    if project is not None and project.problems:
        raise SettingsError(str(project.path), list(project.problems))
    flags = from_flags(
        gpu=getattr(args, "gpu", None),
        gpu_count=getattr(args, "num_gpus", None),
        headroom=getattr(args, "headroom", None),
        severity=severity or None,
        model_lookup=False if getattr(args, "offline", None) else None,
        # the interpreter `trace`/`probe` run in: its installed versions are the run's
        trace_python=chosen_python(args),
    )
    # the command line reads a model folder named by an absolute path wherever it is (its config.json only)
    return merge(
        [user_chosen(project.values) if project is not None else {}, flags], workspace=cwd, any_model_folder=True
    )


def chosen_python(args) -> str | None:
    """The trace interpreter the user chose: `--python`, else `$VRAMLENS_TRACE_PYTHON`; None: the one running
    vramlens. Never a project file's: that would let a repository choose the program that runs."""
    return getattr(args, "python", None) or os.environ.get(TRACE_PYTHON_ENV, "").strip() or None


def report(exc) -> int:
    """Print a refused setting the way every command does; the exit code for it."""
    for problem in exc.problems:
        print(f"vramlens: {exc.source}: {problem}", file=sys.stderr)
    return EXIT_SETTINGS
