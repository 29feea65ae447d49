"""Pin files a repository controls (requirements*.txt, pyproject.toml, uv.lock, poetry.lock, environment.yml) in any
shape: entries of the wrong type are skipped, never an internal error for the configs beside them; and a pin file
is read only inside the workspace — a link to a file or through a folder outside, or a chain of links, is not
followed, so pins from elsewhere never change an estimate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fuzzing import hang_guard
from vramlens import environment
from vramlens.analysis import analyze
from vramlens.settings import Settings

CONFIG = "model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 2\nbf16: true\n"
PIN = "transformers==4.48.1"

# Each shape: the file, its text, and the pin a reader should still find in it (None: none).
MALFORMED = {
    "pyproject.toml": [
        ("[project]\noptional-dependencies = [1]\n", None),
        ("[project]\ndependencies = 5\n", None),
        ('[project]\ndependencies = "transformers==4.48.1"\n', None),
        (f'[project]\ndependencies = [1, true, {{a = 1}}, [2], 1979-05-27, "{PIN}"]\n', PIN),
        ('[project]\noptional-dependencies = "x"\n', None),
        (f'[project]\noptional-dependencies = {{ a = 5, b = "x", c = [{{}}], d = ["{PIN}"] }}\n', PIN),
        ("project = 5\n", None),
        ('project = ["a"]\n', None),
        ("dependency-groups = [1]\n", None),
        (f'[dependency-groups]\ndev = [{{include-group = "x"}}, 3, "{PIN}"]\nother = 7\n', PIN),
        ("tool = 5\n", None),
        ("[tool]\npoetry = [1]\n", None),
        ("[tool.poetry]\ndependencies = [1]\n", None),
        ("[tool.poetry.dependencies]\ntransformers = 4.48\ntorch = [1]\npeft = { version = 3 }\n", None),
        ('[tool.poetry.dependencies]\ntransformers = { version = "4.48.1", extras = 5 }\n', PIN),
        ("[tool.vramlens]\ngpu = [1]\n[project]\ndependencies = [{a = [{b = 1}]}]\n", None),
    ],
    "uv.lock": [
        ("package = 'x'\n", None),
        ("package = 5\n", None),
        ("package = [1, 'a', [], {}]\n", None),
        ("[[package]]\nname = 5\nversion = '4.48.1'\n", None),
        ("[[package]]\nname = 'transformers'\nversion = 4.48\n", None),
        ("[[package]]\nname = ['transformers']\nversion = ['4.48.1']\n", None),
        ("[[package]]\nname = 'torch'\n[[package]]\nname = 'transformers'\nversion = '4.48.1'\n", PIN),
        ("[package]\nname = 'transformers'\nversion = '4.48.1'\n", None),
    ],
    "poetry.lock": [
        ("package = { name = 'transformers', version = '4.48.1' }\n", None),
        ("[[package]]\nname = 'transformers'\nversion = 1979-05-27\n", None),
        ("[[package]]\nname = 'transformers'\nversion = '4.48.1'\n[[package]]\nname = 7\n", PIN),
    ],
    "environment.yml": [
        ("dependencies:\n  - pip: 5\n", None),
        ("dependencies:\n  - pip: transformers==4.48.1\n", None),
        ("dependencies:\n  - pip: {a: 1}\n", None),
        (f"dependencies:\n  - pip: [1, null, [x], {{a: b}}, '{PIN}']\n", PIN),
        ("dependencies:\n  - 5\n  - null\n  - [a, b]\n  - {pip: null}\n", None),
        ("dependencies: 5\n", None),
        ("dependencies: {pip: [transformers==4.48.1]}\n", None),
        ("- a\n- b\n", None),
        ("7\n", None),
        ("dependencies:\n  - transformers=4.48.1=py_0\n  - 'pytorch::pytorch==2.4.1'\n", PIN),
    ],
    "requirements.txt": [
        ("\x00\x01\x02\n", None),
        ("transformers" + " " * 200_000 + "x\n", None),  # matched in linear time (was quadratic: minutes)
        ("transformers" + " " * 200_000 + "==4.48.1\n", PIN),
        ("transformers[" + "x" * 200_000 + "\n", None),
        ("-r\n--requirement\n-e .\ngit+https://x\n[extras]\n==1\n" + "=" * 10_000 + "\n", None),
        (f"  {PIN} ; python_version >= '3.9'  # pinned\r\n", PIN),
        ("transformers===4.48.1\n", "transformers==4.48.1"),
    ],
}
CASES = [(name, text, found) for name, shapes in MALFORMED.items() for text, found in shapes]


@pytest.mark.parametrize(
    "name, text, found", CASES, ids=[f"{n}-{i}" for n, shapes in MALFORMED.items() for i in range(len(shapes))]
)
def test_a_malformed_pin_file_is_read_for_what_it_holds_and_never_breaks_analysis(
    tmp_path: Path, name: str, text: str, found: str | None
):
    (tmp_path / name).write_text(text)
    with hang_guard(name):  # a generous CPU-time guard: a super-linear reader would trip it
        pins = environment.workspace_pins(tmp_path)
    if found is None:
        assert "transformers" not in pins, pins
    else:
        assert pins["transformers"].version == found.split("=")[-1], pins
    config = tmp_path / "train.yaml"
    config.write_text(CONFIG)
    result = analyze(CONFIG, str(config), Settings(workspace=tmp_path, gpu="A100-80GB"))
    assert result.error is None, result.error
    assert not [f.message for f in result.findings if "internal error" in f.message]
    assert result.estimate is not None


def test_malformed_pins_in_one_file_leave_the_other_files_pins(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[project]\ndependencies = 5\noptional-dependencies = [1]\n")
    (tmp_path / "environment.yml").write_text("dependencies:\n  - pip: 5\n")
    (tmp_path / "requirements.txt").write_text(f"{PIN}\n")
    assert environment.workspace_pins(tmp_path)["transformers"] == environment.Found(
        "4.48.1", "pinned in requirements.txt"
    )


# ---- links out of the workspace --------------------------------------------------------------------------------

OUTSIDE_PINS = {
    "requirements.txt": f"{PIN}\n",
    "pyproject.toml": f'[project]\nname = "x"\ndependencies = ["{PIN}"]\n',
    "uv.lock": 'version = 1\n[[package]]\nname = "transformers"\nversion = "4.48.1"\n',
    "poetry.lock": '[[package]]\nname = "transformers"\nversion = "4.48.1"\n',
    "environment.yml": f"dependencies:\n  - pip:\n    - {PIN}\n",
}


def link_to_file(ws: Path, outside: Path, name: str) -> None:
    (ws / name).symlink_to(outside / name)


def link_through_folder(ws: Path, outside: Path, name: str) -> None:
    (ws / "env").symlink_to(outside, target_is_directory=True)  # a folder link inside the workspace …
    (ws / name).symlink_to(Path("env") / name)  # … that the pin file's link goes through


def chain_of_links(ws: Path, outside: Path, name: str) -> None:
    (ws / "a.link").symlink_to(outside / name)
    (ws / "b.link").symlink_to("a.link")
    (ws / name).symlink_to("b.link")  # each link inside, the last one out


def relative_dotdot(ws: Path, outside: Path, name: str) -> None:
    (ws / name).symlink_to(Path("..") / outside.name / name)


LINKS = {f.__name__: f for f in (link_to_file, link_through_folder, chain_of_links, relative_dotdot)}


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    for name, text in OUTSIDE_PINS.items():
        (outside / name).write_text(text)
    return ws, outside


@pytest.mark.parametrize("link", list(LINKS))
@pytest.mark.parametrize("name", list(OUTSIDE_PINS))
def test_a_pin_file_linked_out_of_the_workspace_is_not_read(dirs, link: str, name: str):
    ws, outside = dirs
    LINKS[link](ws, outside, name)
    assert (ws / name).read_text() == OUTSIDE_PINS[name]  # the link works: it is refused, not broken
    assert "transformers" not in environment.workspace_pins(ws)
    versions = environment.versions(Settings(workspace=ws))
    assert versions["transformers"].source != f"pinned in {name}"


def test_a_requirements_include_linked_outside_is_not_read(dirs):
    """`-r` is not followed, and the file it names is one of the `requirements*.txt` read on their own: a link
    out is refused there too."""
    ws, outside = dirs
    (ws / "requirements.txt").write_text("-r requirements-train.txt\npeft>=0.13\n")
    (ws / "requirements-train.txt").symlink_to(outside / "requirements.txt")
    assert environment.workspace_pins(ws) == {}


def test_links_inside_the_workspace_are_still_read(dirs):
    ws, _ = dirs
    (ws / "pins").mkdir()
    (ws / "pins" / "requirements.txt").write_text(f"{PIN}\n")
    (ws / "requirements.txt").symlink_to(Path("pins") / "requirements.txt")
    assert environment.workspace_pins(ws)["transformers"].version == "4.48.1"


AXOLOTL = """base_model: mistralai/Mistral-7B-v0.1
adapter: lora
lora_r: 16
lora_target_modules: [q_proj, k_proj, v_proj, o_proj]
sequence_len: 4096
micro_batch_size: 4
bf16: true
flash_attention: true
gradient_checkpointing: true
"""


def _estimate(ws: Path) -> dict:
    env = {**os.environ, "VRAMLENS_CALIBRATION": "off"}
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", "train.yaml", "--offline", "--format", "json"],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_pins_outside_the_workspace_do_not_change_the_estimate(dirs):
    """transformers 4.48 keeps a shifted fp32 copy of the logits: read from a linked file outside, it would
    raise the estimate and say "pinned in requirements.txt"."""
    ws, outside = dirs
    (ws / "train.yaml").write_text(AXOLOTL)
    before = _estimate(ws)
    (ws / "requirements.txt").symlink_to(outside / "requirements.txt")
    (ws / "uv.lock").symlink_to(outside / "uv.lock")
    after = _estimate(ws)
    assert not [a for a in after["assumptions"] if "pinned in" in a], after["assumptions"]
    assert after["peak"] == before["peak"]
