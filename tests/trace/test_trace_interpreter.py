"""The trace interpreter is the user's choice (`--python`, `$VRAMLENS_TRACE_PYTHON`, else the one running vramlens),
never one named by a file in the repository being analysed: `[trace] python` there would run the repository's own
program. Run as a user runs it: the CLI in a subprocess, from inside and outside the repository."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from trace_plans import need, tiny_config

PROJECT_FILES = {
    ".vramlens.toml": '[trace]\npython = "./tools/py"\n',
    "pyproject.toml": '[project]\nname = "x"\n\n[tool.vramlens.trace]\npython = "./tools/py"\n',
    "pyproject-dotted": '[tool.vramlens]\n"trace.python" = "tools/py"\n',
}


def _repository(tmp_path, project_file: str):
    repo = tmp_path / "repo"
    repo.mkdir()
    cfg = tiny_config(repo)
    # the model folder by its absolute path: the config is traced from outside the repository too
    cfg.write_text(cfg.read_text().replace("./tiny-model", str(repo / "tiny-model")))
    tools = repo / "tools"
    tools.mkdir()
    marker = tmp_path / "ran"
    script = tools / "py"
    script.write_text(f'#!/bin/sh\ntouch {marker}\nexec {sys.executable} "$@"\n')
    script.chmod(0o755)
    name = "pyproject.toml" if project_file.startswith("pyproject") else project_file
    (repo / name).write_text(PROJECT_FILES[project_file])
    return repo, cfg, marker


def _trace(cwd, *args, **env):
    base = {k: v for k, v in os.environ.items() if k != "VRAMLENS_TRACE_PYTHON"}
    return subprocess.run(
        [sys.executable, "-m", "vramlens", "trace", *args, "--no-record"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**base, **env},
    )


def test_a_repositorys_trace_python_never_runs_from_outside_it(tmp_path):
    need("torch")
    repo, cfg, marker = _repository(tmp_path, ".vramlens.toml")
    done = _trace(tmp_path, str(cfg))
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    notice = [line for line in done.stderr.splitlines() if "ignored" in line]
    assert len(notice) == 1 and str(repo / ".vramlens.toml") in notice[0]
    assert "--python" in notice[0] and "VRAMLENS_TRACE_PYTHON" in notice[0]


@pytest.mark.parametrize("project_file", list(PROJECT_FILES))
def test_inside_the_repository_the_users_choice_wins_and_the_repositorys_is_ignored(tmp_path, project_file):
    """The user's interpreter (here one that does not exist, so the run stops as it starts) is the one started."""
    repo, cfg, marker = _repository(tmp_path, project_file)
    chosen = str(tmp_path / "envs" / "train" / "bin" / "python")
    from_env = _trace(repo, "train.yaml", VRAMLENS_TRACE_PYTHON=chosen)
    assert from_env.returncode == 4 and chosen in from_env.stderr and "ignored" in from_env.stderr
    flag = _trace(repo, "train.yaml", "--python", chosen + "3", VRAMLENS_TRACE_PYTHON=chosen)
    assert flag.returncode == 4 and chosen + "3" in flag.stderr
    assert not marker.exists()
