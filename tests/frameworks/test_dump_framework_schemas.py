"""scripts/dump_framework_schemas.py reads a package archive without importing it and writes a deterministic dump."""

from __future__ import annotations

import importlib.util
import json
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("dump_framework_schemas", ROOT / "scripts" / "dump_framework_schemas.py")
dump_script = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = dump_script  # dataclasses look their module up while the class is built
spec.loader.exec_module(dump_script)

ARGS_PY = """
import sys
sys.exit("imported")   # the dump never runs the package
from dataclasses import dataclass, field
from typing import Optional

@dataclass
class BaseArgs:
    per_device_train_batch_size: int = field(default=8, metadata={"help": "x" * 5000})
    seed: int = 42

@dataclass
class TrainArgs(BaseArgs):
    use_lora: bool = False
    lora_target_modules: list = field(default_factory=lambda: ["q_proj", "v_proj"])
    per_device_train_batch_size: Optional[int] = 2
"""
CLI_PY = """
import argparse
p = argparse.ArgumentParser()
p.add_argument("--train.micro_batch_size", type=int, default=4)
p.add_argument("--ds.zero_stage", type=int, default=2, choices=[0, 1, 2, 3])
"""


def _wheel(tmp: Path) -> Path:
    w = tmp / "fakepkg-1.2.0-py3-none-any.whl"
    with zipfile.ZipFile(w, "w") as z:
        z.writestr("fakepkg/args.py", ARGS_PY)
        z.writestr("fakepkg-1.2.0.data/purelib/fakepkg/cli/train_sft.py", CLI_PY)
    return w


def test_dump_reads_classes_and_parsers_deterministically(tmp_path, monkeypatch):
    _wheel(tmp_path)
    out = tmp_path / "schemas"
    monkeypatch.setattr(dump_script, "OUT", out)
    target = dump_script.Target(
        "fakepkg",
        "fakepkg",
        {
            "1.2.0": (
                dump_script.Part(("fakepkg/args.py",), "classes", ("TrainArgs",)),
                dump_script.Part(("fakepkg/cli/train_*.py",), "argparse"),
            )
        },
    )
    data, notes = dump_script.dump(target, "1.2.0", tmp_path)
    assert notes == []
    path = dump_script.write(data)
    first = path.read_bytes()
    by_name = {a["name"]: a for a in json.loads(first)["arguments"]}
    assert by_name["per_device_train_batch_size"]["default"] == 2  # the subclass's default
    assert by_name["lora_target_modules"]["default"] == ["q_proj", "v_proj"]
    assert by_name["train.micro_batch_size"] == {
        "name": "train.micro_batch_size",
        "aliases": [],
        "type": "int",
        "default": 4,
        "default_text": None,
        "choices": None,
        "owner": "train_sft",
        "file": "fakepkg/cli/train_sft.py",
        "line": 4,
    }
    assert by_name["ds.zero_stage"]["choices"] == [0, 1, 2, 3]
    assert all("help" not in a for a in by_name.values())
    assert by_name["seed"]["owner"] == "BaseArgs" and json.loads(first)["bases"] == {"TrainArgs": ["BaseArgs"]}
    assert data["source"][0]["file"] == "fakepkg-1.2.0-py3-none-any.whl" and len(data["source"][0]["sha256"]) == 64
    dump_script.write(dump_script.dump(target, "1.2.0", tmp_path)[0])
    assert path.read_bytes() == first


def test_missing_files_and_classes_are_named(tmp_path):
    _wheel(tmp_path)
    target = dump_script.Target(
        "fakepkg",
        "fakepkg",
        {
            "1.2.0": (
                dump_script.Part(("fakepkg/nothere.py",), "argparse"),
                dump_script.Part(("fakepkg/args.py",), "classes", ("NoSuchArgs",)),
            )
        },
    )
    data, notes = dump_script.dump(target, "1.2.0", tmp_path)
    assert data["arguments"] == []
    assert any("no file matches" in n for n in notes) and any("NoSuchArgs" in n for n in notes)


CONFIG_PY = """
from dataclasses import dataclass, field

@dataclass
class ParallelConfig:
    sequence_parallel: bool = False
    bias_fusion: bool = True

@dataclass
class ModelConfig(ParallelConfig):
    num_layers: int = field(default=0, metadata={"argparse_meta": {"default": None}})
    layernorm_epsilon: float = field(default=1e-5, metadata={"argparse_meta": {"arg_names": ["--norm-epsilon"]}})
    derived: int = field(init=False, default=0)
    internal: int = 3
"""
MEGATRON_ARGS_PY = """
import sys
sys.exit("imported")
from megatron.training.argument_utils import ArgumentGroupFactory

def _add_transformer_args(parser):
    exclude = ["internal"]
    ArgumentGroupFactory(ModelConfig, exclude=exclude).build_group(parser, "transformer")
    group = parser.add_argument_group(title="network size")
    group.add_argument("--no-persist-layer-norm", action="store_true")
    return parser
"""


def test_megatron_factory_flags_are_read_as_argument_group_factory_builds_them(tmp_path):
    """megatron/training/argument_utils.py `ArgumentGroupFactory`: `--field-name` per field, `--no-`/`--disable-`
    for a bool defaulting to True, `argparse_meta` names and default, excluded and `init=False` fields left out."""
    members = {
        "megatron/training/arguments.py": MEGATRON_ARGS_PY.encode(),
        "megatron/core/transformer/transformer_config.py": CONFIG_PY.encode(),
    }
    records, notes = dump_script.factory_arguments(members, sorted(members))
    assert notes == []
    by_name = {r["name"]: r for r in records}
    assert set(by_name) == {"sequence_parallel", "bias_fusion", "num_layers", "layernorm_epsilon"}
    assert by_name["sequence_parallel"]["aliases"] == []  # `--sequence-parallel` is the name, dashed
    assert by_name["sequence_parallel"]["owner"] == "ParallelConfig"
    assert by_name["bias_fusion"]["aliases"] == ["disable-bias-fusion", "no-bias-fusion"]
    assert by_name["num_layers"]["default"] is None
    assert (
        by_name["layernorm_epsilon"]["aliases"] == ["norm-epsilon"] and by_name["layernorm_epsilon"]["default"] == 1e-5
    )


def test_a_release_is_read_at_its_tag_of_a_git_repository(tmp_path):
    """A target with a repository reads the files at the release's tag (git show; nothing checked out or run)."""
    import subprocess

    repo = tmp_path / "Megatron-LM"
    (repo / "megatron" / "training").mkdir(parents=True)
    (repo / "megatron" / "training" / "arguments.py").write_text(
        'import argparse\np = argparse.ArgumentParser()\np.add_argument("--micro-batch-size", type=int, default=None)\n'
    )

    def git(*args):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "r")
    git("tag", "core_v0.1.0")
    target = dump_script.Target(
        "megatron",
        "megatron-core",
        {"0.1.0": (dump_script.MEGATRON_ARGPARSE,)},
        repository="NVIDIA/Megatron-LM",
        tags={"0.1.0": "core_v0.1.0"},
    )
    data, notes = dump_script.dump(target, "0.1.0", tmp_path, {"NVIDIA/Megatron-LM": repo})
    assert [a["name"] for a in data["arguments"]] == ["micro_batch_size"]
    assert data["source"][0]["file"] == "NVIDIA/Megatron-LM@core_v0.1.0" and len(data["source"][0]["commit"]) == 40
