"""What a framework's release requires of transformers, torch, peft, TRL, bitsandbytes and accelerate — its package
metadata's `Requires-Dist`, dumped with its arguments — decides the versions nothing else names: ms-swift 2.6.1
runs transformers < 4.48 (the loss's shifted fp32 logits copy, foreach AdamW), axolotl 0.19.0 exactly 5.16.1."""

from __future__ import annotations

from pathlib import Path

import pytest
from vramlens import environment
from vramlens.formats import parse_document
from vramlens.frameworks import schemas
from vramlens.knowledge import frameworks
from vramlens.resolve import Settings, resolve

SWIFT_2 = """CUDA_VISIBLE_DEVICES=0 swift sft \\
    --model_type qwen2-0_5b-instruct \\
    --model_id_or_path Qwen/Qwen2-0.5B-Instruct \\
    --sft_type full \\
    --batch_size 1 \\
    --max_length 1024 \\
    --dtype bf16 \\
    --output_dir output
"""


@pytest.mark.parametrize(
    ("spec", "newest", "known", "allowed"),
    [
        (">=4.37.2", "5.24.0", (), None),  # the newest satisfies it
        ("<4.48,>=4.33", "5.24.0", (), "4.47"),  # the series below an exclusive bound
        ("<4.58.1", "5.24.0", (), "4.58.0"),
        ("!=4.52.0,!=4.57.0,<=5.6.0,>=4.55.0", "5.24.0", (), "5.6.0"),  # an inclusive bound itself
        ("==5.16.1", "5.24.0", (), "5.16.1"),
        ("<1.0,>=0.15", "1.16.0", ("0.12.2", "0.29.1", "1.16.0"), "0.29.1"),  # below a major bound: a known one
        ("<1.0", "1.16.0", (), None),  # nothing known to name
        ("<=2.13.0,>=2.11.0", "2.13.0", (), None),
    ],
)
def test_the_newest_release_a_requirement_allows(spec, newest, known, allowed):
    assert environment.newest_allowed(spec, newest, known) == allowed


def test_the_dumps_hold_each_release_s_requirements():
    """Read from the wheels' METADATA (an sdist's egg-info requires.txt) by scripts/dump_framework_schemas.py."""
    assert schemas.schema("ms-swift", "2.6.1")["requires"]["transformers"] == "<4.48,>=4.33"
    assert schemas.schema("axolotl", "0.19.0")["requires"]["transformers"] == "==5.16.1"
    assert schemas.schema("axolotl", "0.6.0")["requires"]["torch"] == "==2.5.1"  # the sdist's requires.txt
    assert schemas.schema("openrlhf", "0.11.2")["requires"]["deepspeed"] == "==0.19.6"
    assert "requires" not in schemas.schema("transformers", "5.24.0")


def _resolve(tmp_path: Path, text: str, name: str, **settings):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    plan = parse_document(text, str(path), workspace=tmp_path).plan
    assert plan is not None
    return plan, resolve(plan, Settings(model_lookup=False, gpu="H100-80GB", workspace=tmp_path, **settings))


def _fake_environment(tmp_path: Path, **installed: str) -> str:
    """A virtual environment's interpreter path with these distributions' metadata (it is never run)."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    for name, version in installed.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
    (tmp_path / "venv" / "bin").mkdir(parents=True, exist_ok=True)
    return str(tmp_path / "venv" / "bin" / "python")


def test_an_old_release_runs_the_transformers_it_allows(tmp_path):
    python = _fake_environment(tmp_path)  # the run's environment names none of the libraries
    plan, res = _resolve(tmp_path, SWIFT_2, "sft.sh", trace_python=python)
    assert (plan.framework, plan.framework_release) == ("ms-swift", "2.6.1")
    said = "transformers 4.47 (the newest ms-swift 2.6.1 allows: transformers<4.48,>=4.33)"
    assert any(str(a).startswith(said) and "shifted fp32 copy of the logits" in str(a) for a in res.assumptions)
    assert res.resolved.optimizer_impl == "foreach"  # ms-swift 2.x's own `optim` default, adamw_torch


def test_a_named_version_wins_over_the_requirement(tmp_path):
    _, told = _resolve(tmp_path, SWIFT_2, "a.sh", framework_versions={"transformers": "4.57.6"})
    assert any(str(a).startswith("transformers 4.57.6 (the frameworkVersions setting)") for a in told.assumptions)
    # the run's interpreter, once set, is the run's environment even outside the release's requirement
    python = _fake_environment(tmp_path, transformers="5.24.0")
    _, there = _resolve(tmp_path, SWIFT_2, "b.sh", trace_python=python)
    assert any(str(a).startswith(f"transformers 5.24.0 (installed in {python})") for a in there.assumptions)


def test_what_is_installed_beside_vramlens_gives_way_to_the_requirement(monkeypatch):
    """Without a trace interpreter the versions installed with vramlens are vramlens' own, not known to be the
    run's: a release that excludes them decides."""
    monkeypatch.setattr(
        environment,
        "installed",
        lambda python: {"transformers": environment.Found("5.24.0", "installed with vramlens")},
    )
    settings = Settings(model_lookup=False)
    env = frameworks.run_environment("ms-swift", settings, "2.6.1")
    assert env["transformers"].version == "4.47"
    assert frameworks.run_environment("trl", settings, None)["transformers"].source == "installed with vramlens"
    # a release between two dumps is not assumed to require what either does
    assert frameworks.release_requires("ms-swift", settings, "2.4.0") is None
    # below a release's lower bound (LLaMA-Factory 0.7.0: transformers>=4.37.2, no upper one): not the run's either
    monkeypatch.setattr(
        environment,
        "installed",
        lambda python: {"transformers": environment.Found("4.30.2", "installed with vramlens")},
    )
    env = frameworks.run_environment("llamafactory", settings, "0.7.0")
    assert env["transformers"].source == "the newest release vramlens knows"
    assert environment.satisfies("<4.48,>=4.33", "4.30.2") is False
    assert environment.satisfies("<4.48,>=4.33", "4.47.1") is True
    assert environment.satisfies("", "4.47.1") is None


@pytest.mark.parametrize(
    ("words", "pins"),
    [
        (["pip", "install", '"transformers==4.51.*"'], {"transformers": "4.51"}),
        (
            ["pip", "install", "-U", '"transformers==4.46.3"', "easydict", '"peft==0.15.2"'],
            {"transformers": "4.46.3", "peft": "0.15.2"},
        ),
        (["pip3", "install", "'trl[vllm]==0.19.1'", "--no-deps"], {"trl": "0.19.1"}),
        (
            ["pip", "install", "transformers>=4.51", "flash-attn==2.8.3"],
            {},
        ),  # a range; not a library of a step's memory
        (["pip", "uninstall", "transformers==4.46.3"], {}),
    ],
)
def test_what_a_pip_install_command_pins(words, pins):
    assert environment.pip_install_pins(words) == pins


def test_a_script_runs_the_versions_it_installs(tmp_path):
    """A launch script's own `pip install` decides before the workspace's pins (and the release's requirement)."""
    text = 'pip install "transformers==4.46.3" easydict\n' + SWIFT_2
    (tmp_path / "requirements.txt").write_text("transformers==4.57.6\n", encoding="utf-8")
    plan, res = _resolve(tmp_path, text, "train.sh")
    assert plan.installs == {"transformers": ("4.46.3", "`pip install` in train.sh line 1")}
    said = "transformers 4.46.3 (`pip install` in train.sh line 1)"
    assert any(str(a).startswith(said) and "shifted fp32 copy of the logits" in str(a) for a in res.assumptions)
