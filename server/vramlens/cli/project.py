"""The settings a command-line run uses for one file: its flags, then the project's `.vramlens.toml` /
`pyproject.toml [tool.vramlens]` found above the file (as the editor reads them)."""
from __future__ import annotations

from pathlib import Path


def analysis_settings(path: Path, args, severity: dict[str, str] | None = None):
    """`AnalysisSettings` for `path` from `args.gpu`, `args.num_gpus`, `args.headroom` (None: not given) and the
    project file; `severity` (rule → level from the command line) wins over the project's."""
    from vramlens.analysis import AnalysisSettings
    from vramlens.workspace_config import find_workspace_config

    cwd = Path.cwd()
    project = find_workspace_config(path.resolve(), cwd)
    values = project.values if project is not None else {}
    headroom = args.headroom if args.headroom is not None else values.get("headroom", 0.10)
    try:
        count = args.num_gpus or (int(values["gpuCount"]) if values.get("gpuCount") else None)
    except (TypeError, ValueError):
        count = args.num_gpus
    return AnalysisSettings(gpu=args.gpu or values.get("gpu"), gpu_count=count, headroom=float(headroom),
                            severity={**(values.get("severity") or {}), **(severity or {})}, workspace=cwd,
                            framework_versions={str(k): str(v)
                                                for k, v in (values.get("frameworkVersions") or {}).items()})
