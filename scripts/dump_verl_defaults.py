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
    args.sort(key=lambda a: (a["owner"], a["name"]))
    record = {
        "framework": "verl",
        "version": version,
        "source": [{"file": whl.name, "sha256": digest}],
        "configs": files,
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
