"""Dump verl's PPO trainer defaults into server/vramlens/frameworks/schemas/verl/<version>.json.

Rerunnable: `python scripts/dump_verl_defaults.py [--wheels DIR] [VERSION ...]`. Each version's wheel is fetched with
`pip download --no-deps verl==VERSION` (or taken from --wheels) and read as a zip file; nothing from it is imported
or run. verl's trainer is configured by hydra from YAML (`python3 -m verl.trainer.main_ppo` loads
`verl/trainer/config/ppo_trainer.yaml`, `--config-name=ppo_megatron_trainer` the Megatron one). Up to 0.4 that file
holds every default; from 0.5 it composes sub-configs (actor/, rollout/, ref/, ...) whose flattened result verl
ships as `_generated_ppo_trainer.yaml` / `_generated_ppo_megatron_trainer.yaml` (written by verl's
scripts/generate_trainer_config.sh with `print_cfg.py --cfg job`), which is read instead. The dataclasses those
versions attach (`_target_: verl.workers.config.FSDPActorConfig`, ...) are instantiated from this YAML
(verl/utils/config.py `omega_conf_to_dataclass`), so the YAML is what a run sees.

Each YAML file is read with vramlens' bounded loader (formats/yaml_doc.py). Every leaf becomes one argument
`{"name": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "type", "default", "default_text", "owner",
"line"}` (the owner is the config, whose file `configs` names); an OmegaConf interpolation
(`${data.max_prompt_length}`, `${oc.select:a.b,512}`) is kept as `default_text` with `default` null, and resolved
by the reader at run time against the launch line's values.

verl's engine-based SFT trainer (`torchrun … -m verl.trainer.sft_trainer`, from 0.6.0; `@hydra.main(config_name=
"sft_trainer_engine")` in verl/trainer/sft_trainer.py) is composed by hydra from config groups: its
`sft_trainer_engine.yaml` opens with `defaults: [model@model: hf_model, engine@engine: fsdp, optim@optim: fsdp, …,
_self_]`, and a launch picks another option of a group with `engine=megatron` / `optim=megatron`. Its own leaves are
dumped under the owner `sft_trainer_engine`, every option of every group it names (but LEFT_OUT_OPTIONS) under the owner
`sft_trainer_engine:<group>/<option>` (the option's leaves under the package the defaults list places it at,
`engine.strategy`), and `composes` keeps the default option of each group, so that a reader composes the tree as
hydra does: the chosen option of each group, then the file's own values over them (`_self_` last).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

from vramlens.formats.yaml_doc import load_yaml  # noqa: E402

OUT = ROOT / "server" / "vramlens" / "frameworks" / "schemas" / "verl"
VERSIONS = ["0.2.0.post2", "0.3.0.post1", "0.4.1", "0.5.0", "0.6.1", "0.7.0"]
CONFIG_DIR = "verl/trainer/config/"
CONFIGS = ("ppo_trainer", "ppo_megatron_trainer")
COMPOSED = ("sft_trainer_engine",)  # configs built from a hydra `defaults:` list of config groups
# group options left out: VeOmni's engine and optimizer (0.7.0 engine/veomni.yaml, optim/veomni.yaml), which the
# reader takes as not modelled as a whole (`engine=veomni`), so their keys are not read one by one
LEFT_OUT_OPTIONS = ("engine/veomni", "optim/veomni")


def _wheel(version: str, wheels: Path) -> Path:
    found = sorted(wheels.glob(f"verl-{version}-*.whl"))
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                f"verl=={version}",
                "-d",
                str(wheels),
            ],
            check=True,
            capture_output=True,
        )
        found = sorted(wheels.glob(f"verl-{version}-*.whl"))
    if not found:
        raise SystemExit(f"verl {version}: no wheel downloaded")
    return found[0]


def _type(value) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "dict"
    return None


def arguments(text: str, file: str, owner: str) -> list[dict]:
    data, settings = load_yaml(text, file)
    out = []
    for s in settings:
        if isinstance(s.value, dict) and s.value:
            continue  # a section: its leaves are listed
        if any(not isinstance(p, str) for p in s.path) or s.path[-1] == "_target_":
            continue
        value = s.value
        text_value = value if isinstance(value, str) and "${" in value else None
        if value == "???":  # OmegaConf's mandatory value: the user must set it
            text_value, value = "???", None
        out.append(
            {
                "name": ".".join(s.path),
                "type": _type(value),
                "default": None if text_value else value,
                "default_text": text_value,
                "owner": owner,  # the file: `configs[owner]`
                "line": s.span.start_line + 1 if s.span else 0,
            }
        )
    return out


def _group_entries(defaults, file: str) -> list[tuple[str, str, str]]:
    """A primary config's `defaults:` list as (group, package, option); `_self_` must come last (the file's own
    values over its groups', as every verl release that has the file writes it)."""
    entries = []
    for i, d in enumerate(defaults or ()):
        if d == "_self_":
            if i != len(defaults) - 1:
                raise SystemExit(f"{file}: `_self_` is not last in its defaults list")
            continue
        if not isinstance(d, dict) or len(d) != 1:
            raise SystemExit(f"{file}: defaults entry {d!r} is not `group@package: option`")
        ((key, option),) = d.items()
        group, _, package = str(key).partition("@")
        entries.append((group, package or group, str(option)))
    return entries


def composed(z: zipfile.ZipFile, names: set[str], config: str) -> tuple[list[dict], dict[str, str], dict[str, str]]:
    """The arguments of a config composed from config groups (see the module's text), the files read by owner,
    and the default option of each group."""
    path = f"{CONFIG_DIR}{config}.yaml"
    text = z.read(path).decode("utf-8")
    data, _ = load_yaml(text, path)
    args = arguments(text, path, config)
    files = {config: path}
    choices = {}
    for group, package, option in _group_entries(data.get("defaults"), path):
        choices[group] = option
        options = sorted(n for n in names if n.startswith(f"{CONFIG_DIR}{group}/") and n.endswith(".yaml"))
        for file in options:
            which = f"{group}/{file.rsplit('/', 1)[1].removesuffix('.yaml')}"
            if which in LEFT_OUT_OPTIONS:
                continue
            owner = f"{config}:{which}"
            files[owner] = file
            for a in arguments(z.read(file).decode("utf-8"), file, owner):
                a["name"] = f"{package}.{a['name']}"
                args.append(a)
    return args, files, choices


def dump(version: str, wheels: Path) -> Path:
    whl = _wheel(version, wheels)
    digest = hashlib.sha256(whl.read_bytes()).hexdigest()
    args: list[dict] = []
    files = {}
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        for config in CONFIGS:
            path = next(
                (CONFIG_DIR + n for n in (f"_generated_{config}.yaml", f"{config}.yaml") if CONFIG_DIR + n in names),
                None,
            )
            if path is None:
                continue
            files[config] = path
            args += arguments(z.read(path).decode("utf-8"), path, config)
        composes = {}
        for config in COMPOSED:
            if f"{CONFIG_DIR}{config}.yaml" in names:
                found, read, composes[config] = composed(z, names, config)
                args += found
                files.update(read)
    args.sort(key=lambda a: (a["owner"], a["name"]))
    record = {
        "framework": "verl",
        "version": version,
        "source": [{"file": whl.name, "sha256": digest}],
        "configs": files,
        **({"composes": composes} if composes else {}),
        "arguments": args,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / f"{version}.json"
    # one argument a line: small, and a new version's dump diffs line by line against the last
    head = json.dumps({k: v for k, v in record.items() if k != "arguments"}, sort_keys=True)
    lines = ",\n".join(json.dumps(a, sort_keys=True, separators=(",", ":")) for a in args)
    target.write_text(head[:-1] + ', "arguments": [\n' + lines + "\n]}\n", encoding="utf-8")
    return target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("versions", nargs="*", default=VERSIONS)
    ap.add_argument("--wheels", type=Path, help="folder with downloaded wheels (default: a temporary one)")
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wheels = ns.wheels or Path(tmp)
        for version in ns.versions:
            target = dump(version, wheels)
            print(f"verl {version}: {target.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
