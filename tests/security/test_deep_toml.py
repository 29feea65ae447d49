"""TOML a repository controls (`.vramlens.toml`, `pyproject.toml`, `uv.lock`, `poetry.lock`) nested thousands of
levels deep in any of TOML's ways (arrays, inline tables, dotted keys, table headers): the file is refused with a
reason, never a RecursionError nor a parse whose memory grows with the square of a key's length; a refused
`.vramlens.toml` is reported as an unreadable one is (named, exit 2), a refused `pyproject.toml` or lock file is
passed over with a warning line and every config is still checked."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens import toml_reading

CONFIG = "model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 2\nbf16: true\n"
LEVELS = 2_000  # ~4 KB; tomllib's recursion gave out at about 500 levels of arrays


def arrays(n: int = LEVELS) -> str:
    return "a = " + "[" * n + "]" * n + "\n"


def inline_tables(n: int = LEVELS) -> str:
    return "a = " + "{ b = " * n + "1" + " }" * n + "\n"


def mixed(n: int = LEVELS) -> str:
    pairs = (n + 1) // 2
    return "a = " + "[{ b = " * pairs + "1" + "}]" * pairs + "\n"


def dotted_key(n: int = LEVELS) -> str:
    return "a" + ".a" * n + " = 1\n"


def dotted_header(n: int = LEVELS) -> str:
    return "[" + "a." * n + "a]\nx = 1\n"


def array_of_tables(n: int = LEVELS) -> str:
    return "[[" + "package." * n + "x]]\nname = 'torch'\n"


def dotted_in_inline_table(n: int = LEVELS) -> str:
    return "a = { " + "b." * n + "c = 1 }\n"


SHAPES = {
    f.__name__: f
    for f in (arrays, inline_tables, mixed, dotted_key, dotted_header, array_of_tables, dotted_in_inline_table)
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_kind_of_deep_nesting_is_refused_with_a_reason(shape: str):
    for levels in (toml_reading.MAX_DEPTH + 1, LEVELS, 50_000):
        read = toml_reading.loads(SHAPES[shape](levels))
        assert read.data is None and "nest deeper than" in read.problem, (shape, levels, read)


@pytest.mark.parametrize("shape", ["arrays", "inline_tables", "dotted_key"])
def test_nesting_as_deep_as_the_bound_is_read(shape: str):
    assert toml_reading.loads(SHAPES[shape](toml_reading.MAX_DEPTH - 2)).data is not None


def test_brackets_inside_strings_and_comments_do_not_count():
    deep = "[" * LEVELS + "{" * LEVELS
    text = (
        f"basic = \"{deep}\"\nliteral = '{deep}'\n# {deep}\n"
        f"multi = \"\"\"\n{deep}\n\"\"\"\nmulti_literal = '''\n{deep}\n'''\n"
        f'escaped = "\\"{deep}"\nends_with_quotes = """{deep}"""""\nreal = [[1, 2], {{ x = [3] }}]\n'
    )
    read = toml_reading.loads(text)
    assert read.problem is None
    assert read.data["real"] == [[1, 2], {"x": [3]}] and read.data["ends_with_quotes"] == deep + '""'


def test_broken_toml_is_a_reason_not_an_exception():
    for text in ('a = "unterminated', "a = [[[", "[x\n", "a = 1\na = 2\n", "\x00", "= 1", "a = ]]]]]"):
        read = toml_reading.loads(text)
        assert read.data is None and read.problem.startswith("not valid TOML"), (text, read)


# ---- as a user meets it: the command line ------------------------------------------------------------------


ADDRESS_SPACE = 1 << 30  # a regression fails with MemoryError instead of taking the machine


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "VRAMLENS_CALIBRATION": "off"}
    return subprocess.run(
        [sys.executable, "-m", "vramlens", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        preexec_fn=_limit,
    )


@pytest.mark.parametrize("shape", ["arrays", "inline_tables", "dotted_key", "array_of_tables"])
def test_a_deep_vramlens_toml_is_named_and_refused_like_an_unreadable_one(tmp_path: Path, shape: str):
    (tmp_path / "train.yaml").write_text(CONFIG)
    (tmp_path / ".vramlens.toml").write_text('gpu = "A10G"\n' + SHAPES[shape]())
    out = cli("check", "train.yaml", "--offline", cwd=tmp_path)
    assert "Traceback" not in out.stderr and "RecursionError" not in out.stderr, out.stderr[-2000:]
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert ".vramlens.toml" in out.stderr and "nest deeper than" in out.stderr, out.stderr


@pytest.mark.parametrize("shape", ["arrays", "mixed", "dotted_header"])
def test_a_deep_pyproject_is_passed_over_and_the_config_still_checked(tmp_path: Path, shape: str):
    (tmp_path / "train.yaml").write_text(CONFIG)
    (tmp_path / "pyproject.toml").write_text('[tool.vramlens]\ngpu = "A10G"\n' + SHAPES[shape]())
    out = cli("estimate", "train.yaml", "--offline", "--format", "json", cwd=tmp_path)
    assert "Traceback" not in out.stderr and "RecursionError" not in out.stderr, out.stderr[-2000:]
    assert out.returncode == 0, (out.returncode, out.stderr)
    result = json.loads(out.stdout)
    result = result[0] if isinstance(result, list) else result
    assert result["peak"]["allocated_gib"] > 0
    assert result["gpu"]["name"] != "A10G"  # its settings are not used …
    assert "pyproject.toml" in out.stderr and "nest deeper than" in out.stderr  # … and the user is told


@pytest.mark.parametrize(
    "lock, shape",
    [
        ("uv.lock", "arrays"),
        ("poetry.lock", "inline_tables"),
        ("uv.lock", "array_of_tables"),
        ("poetry.lock", "dotted_key"),
    ],
)
def test_a_deep_lock_file_gives_no_internal_error(tmp_path: Path, lock: str, shape: str):
    (tmp_path / "train.yaml").write_text(CONFIG)
    (tmp_path / "other.yaml").write_text(CONFIG.replace("2\n", "4\n"))
    (tmp_path / lock).write_text('version = 1\n[[package]]\nname = "torch"\nversion = "2.6.0"\n' + SHAPES[shape]())
    out = cli("check", ".", "--offline", "--format", "json", cwd=tmp_path)
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "internal error" not in out.stdout, out.stdout[-2000:]
    checked = json.loads(out.stdout)
    assert {Path(f["path"]).name for f in checked["files"]} >= {"train.yaml", "other.yaml"}, checked
    assert lock in out.stderr and "nest deeper than" in out.stderr, out.stderr


@pytest.mark.parametrize(
    "name, text",
    [
        (".vramlens.toml", dotted_key(20_000)),  # 40 KB: tomllib took 1.5 GB for it
        ("pyproject.toml", "[tool.vramlens]\n" + dotted_key(100_000)),
        ("uv.lock", dotted_header(100_000)),
        ("poetry.lock", dotted_in_inline_table(100_000)),
    ],
    ids=[".vramlens.toml", "pyproject.toml", "uv.lock", "poetry.lock"],
)
def test_a_long_dotted_key_is_refused_before_it_is_parsed(tmp_path: Path, name: str, text: str):
    (tmp_path / "train.yaml").write_text(CONFIG)
    (tmp_path / name).write_text(text)
    out = cli("check", "train.yaml", "--offline", cwd=tmp_path)  # within 1 GiB of address space
    assert "MemoryError" not in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert name in out.stderr and "nest deeper than" in out.stderr, out.stderr
    assert out.returncode == (2 if name == ".vramlens.toml" else 0), (out.returncode, out.stdout, out.stderr)
