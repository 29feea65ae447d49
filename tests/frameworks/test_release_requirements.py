"""What a framework's release requires of transformers, torch, peft, TRL, bitsandbytes and accelerate — its package
metadata's `Requires-Dist`, dumped for every release on PyPI — decides the versions nothing else names: ms-swift
2.6.1 runs transformers < 4.48 (the loss's shifted fp32 logits copy, foreach AdamW), axolotl 0.19.0 exactly
5.16.1, and a release whose arguments are not dumped (ms-swift 3.5.0) what it allowed (< 4.53)."""

from __future__ import annotations

import json
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


def test_every_published_release_s_requirements_are_dumped():
    """Read from the releases' METADATA (an sdist's PKG-INFO or egg-info requires.txt) by
    scripts/dump_release_requirements.py, for every release on PyPI, dumped arguments or not."""
    req = schemas.release_requirements
    assert req("ms-swift", "2.6.1") == ("2.6.1", req("ms-swift", "2.6.1")[1])
    assert req("ms-swift", "2.6.1")[1]["transformers"] == "<4.48,>=4.33"
    assert req("ms-swift", "3.5.0")[1]["transformers"] == "<4.53,>=4.33"  # no argument dump of 3.5.0
    assert req("axolotl", "0.19.0")[1]["transformers"] == "==5.16.1"
    assert req("axolotl", "0.6.0")[1]["torch"] == "==2.5.1"  # an sdist
    assert req("openrlhf", "0.11.2")[1]["deepspeed"] == "==0.19.6"
    assert req("llamafactory", "0.5.0")[1]["transformers"].startswith(">=")  # published as llmtuner
    # a series (`==3.5.*`) is its newest release; a release never published is not assumed
    assert req("ms-swift", "3.5")[0] == max(
        (v for v in ("3.5.0", "3.5.1", "3.5.2", "3.5.3") if req("ms-swift", v)), key=schemas.version_key
    )
    assert req("ms-swift", "3.5.99") is None and req("no-such-framework", "1.0") is None
    assert not any("requires" in schemas.schema("ms-swift", v) for v in schemas.versions("ms-swift"))


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
    # a release between two argument dumps requires what its own metadata says
    assert frameworks.release_requires("ms-swift", "2.4.0").who == "ms-swift 2.4.0"
    assert frameworks.release_requires("ms-swift", "2.99.0") is None  # never published
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


SWIFT_3 = """CUDA_VISIBLE_DEVICES=0 swift sft \\
    --model Qwen/Qwen2.5-0.5B-Instruct \\
    --train_type full \\
    --per_device_train_batch_size 1 \\
    --max_length 1024 \\
    --torch_dtype bfloat16 \\
    --output_dir output
"""


def test_a_pinned_release_between_two_dumps_runs_what_it_allowed(tmp_path, monkeypatch):
    """ms-swift 3.5.0 (its arguments read as 3.5.3's) required transformers < 4.53: foreach AdamW, the era's
    `optim` default, not the fused one of transformers 4.54+ with torch 2.8."""
    beside = {"transformers": environment.Found("5.24.0", "installed with vramlens")}
    monkeypatch.setattr(environment, "installed", lambda python: beside)
    _, newest = _resolve(tmp_path, SWIFT_3, "a.sh")
    assert newest.resolved.optimizer_impl == "fused"
    (tmp_path / "requirements.txt").write_text("ms-swift==3.5.0\n", encoding="utf-8")
    _, pinned = _resolve(tmp_path, SWIFT_3, "b.sh")
    said = "transformers 4.52 (the newest ms-swift 3.5.0 allows: transformers<4.53,>=4.33)"
    assert any(str(a).startswith(said) for a in pinned.assumptions), pinned.assumptions
    assert pinned.resolved.optimizer_impl == "foreach"


def test_a_script_runs_the_framework_release_it_installs(tmp_path):
    """`pip install 'ms-swift[llm]==3.5.0'` in the launch script: its flags are held to that release (before the
    workspace's pin) and its defaults are that release's."""
    (tmp_path / "requirements.txt").write_text("ms-swift==4.6.0\n", encoding="utf-8")
    line = SWIFT_3.replace("--train_type full", "--tuner_type full")  # ms-swift 4.x's name
    plan, res = _resolve(tmp_path, "pip install 'ms-swift[llm]==3.5.0' -U\n" + line, "train.sh")
    assert plan.installs["ms-swift"] == ("3.5.0", "`pip install` in train.sh line 1")
    flagged = [i.message for i in plan.issues if "tuner_type" in i.message]
    assert flagged and "not an argument of ms-swift 3.5.3 or 3.4.1.post1" in flagged[0], plan.issues
    assert "the newest ms-swift 3.5.0 allows" in " ".join(map(str, res.assumptions))
    # without the line, the workspace's pin decides: 4.x defines the flag
    plan, _ = _resolve(tmp_path, line, "other.sh")
    assert not [i for i in plan.issues if "tuner_type" in i.message]


def test_a_notebook_runs_the_framework_release_it_installs(tmp_path):
    cells = [
        {"cell_type": "code", "metadata": {}, "source": ["!pip install ms-swift==3.5.0"], "outputs": []},
        {"cell_type": "code", "metadata": {}, "source": ["%%bash\n" + SWIFT_3.replace("--train_type", "--tuner_type")]},
    ]
    text = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    plan, _ = _resolve(tmp_path, text, "train.ipynb")
    assert plan.installs["ms-swift"] == ("3.5.0", "`pip install` in cell 1")
    assert any("not an argument of ms-swift 3.5.3 or 3.4.1.post1" in i.message for i in plan.issues), plan.issues


def test_the_framework_versions_setting_names_the_release_the_file_is_read_as(tmp_path):
    """`frameworkVersions = {"ms-swift" = "3.5.0"}`: the flags are held to that release when the file is read, as
    its defaults are, and no other release is implied from them."""
    from vramlens.analysis import analyze

    line = SWIFT_3.replace("--train_type full", "--tuner_type full")
    path = tmp_path / "train.sh"
    path.write_text(line, encoding="utf-8")
    told = Settings(model_lookup=False, gpu="H100-80GB", workspace=tmp_path, framework_versions={"ms-swift": "3.5.0"})
    a = analyze(line, str(path), told)
    assert any("`tuner_type` is not an argument of ms-swift 3.5.3 or 3.4.1.post1" in f.message for f in a.findings)
    assert any("the newest ms-swift 3.5.0 allows" in str(x) for x in a.resolution.assumptions)
    # a 2.x line under a 2.x setting: read as that release, not as the one its flags imply
    a = analyze(SWIFT_2, str(path), told.model_copy(update={"framework_versions": {"ms-swift": "2.4.0"}}))
    assert a.plan.framework_release is None
    assert not any("read as ms-swift" in str(x) for x in a.resolution.assumptions)
    assert any("the newest ms-swift 2.4.0 allows" in str(x) for x in a.resolution.assumptions)


def test_megatron_swift_takes_the_ms_swift_release_a_script_installs(tmp_path):
    """Megatron-SWIFT's fused cross-entropy is on by default from ms-swift 4.0.0: a script installing 3.12.6 runs
    it off."""
    installs = {"ms-swift": ("3.12.6", "`pip install` in train.sh line 1")}
    settings = Settings(workspace=tmp_path)
    _, _, pinned = frameworks.defaults_for("megatron-swift", "sft", settings, None, installs)
    assert pinned["cross_entropy_fusion"] is False and "3.12.6" in pinned.labels["cross_entropy_fusion"]
    _, _, newest = frameworks.defaults_for("megatron-swift", "sft", settings)
    assert newest["cross_entropy_fusion"] is True
    assert newest.labels["cross_entropy_fusion"].startswith("Megatron-SWIFT 4.6.0 (MegatronArguments.")
