"""Catalog entries from state-spaces/mamba's README: the Mamba checkpoints it publishes, at the sizes its table states.

Source: `README.md`, section "Pretrained Models": the checkpoint names in its first paragraph (`mamba-130m`, …,
`mamba-2.8b`, …, and `mamba-2.8b-slimpj`, "uploaded to Hugging Face" under `state-spaces`) and its table
`| Parameters | Layers | Model dim. |`. A name is written when its size (`130m`, `2.8b`) is a row's "Parameters"
(`130M`, `2.8B`), with that row's layers and width; the other fields are those mamba_ssm's `MambaConfig` holds by
default (`mamba_ssm/models/config_mamba.py`, read with `ast`: vocabulary 50277 padded to a multiple of 8, tied
embeddings, RMSNorm, `ssm_cfg` empty: the `Mamba` mixer's defaults). Each entry is that config.json in mamba_ssm's own
format, which the catalog reads as transformers converts it (`vramlens.knowledge.ssm_configs`).

Left out, each with the reason: a name whose size no row states (the Mamba-2 checkpoints `mamba2-780m`, `mamba2-1.3b`,
`mamba2-2.7b`: the table's rows say 790M, 1.4B, 2.8B; `mamba2-130m` and `mamba2-370m` are Mamba-2 models whose
`ssm_cfg` the README does not give), and the Transformer++ baseline (`transformerpp-2.7b`: not a Mamba model). Both
files are read from the bare git mirror (`git show`); nothing is run.

    python scripts/import_catalog_mamba.py [--git-dir /work/.mirror/state-spaces+mamba/repo] [--commit HEAD] [--check]
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import import_catalog_transformers as tr  # noqa: E402
from import_catalog import dataclass_defaults, importer_args, render, write_or_check  # noqa: E402

OUT = ROOT / "server" / "vramlens" / "knowledge" / "data" / "models_imported_mamba.json"
DEFAULT_GIT_DIR = Path("/work/.mirror/state-spaces+mamba/repo")
REPO = "state-spaces/mamba"
CONFIG_PATH = "mamba_ssm/models/config_mamba.py"
MARK = f"{REPO} "  # the source every entry of this import cites (left out of the catalog it is compared with)


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True).stdout


def pretrained_section(readme: str) -> str:
    """The README's "Pretrained Models" section."""
    match = re.search(r"^## Pretrained Models\n(.*?)(?=^## )", readme, re.M | re.S)
    if match is None:
        raise SystemExit("README.md has no '## Pretrained Models' section")
    return match.group(1)


def names(section: str) -> list[str]:
    """The checkpoint names the section lists (the backticked words of its paragraphs), in order."""
    return list(dict.fromkeys(re.findall(r"`([\w.\-]+)`", section)))


def table(section: str) -> dict[str, tuple[int, int]]:
    """The table's rows: stated size (lower case, `2.8b`) → (layers, model dim)."""
    rows = {}
    for size, layers, dim in re.findall(r"^\|\s*([\d.]+[MB])\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|", section, re.M):
        rows[size.lower()] = (int(layers), int(dim))
    return rows


def build(readme: str, config_source: str, sha: str) -> tuple[dict[str, Any], list[str]]:
    """models_imported_mamba.json's content, and the report lines."""
    section = pretrained_section(readme)
    rows = table(section)
    defaults = dataclass_defaults(ast.parse(config_source), "MambaConfig")
    report = [f"{REPO} {sha[:12]} README.md: {len(names(section))} names, {len(rows)} table rows"]
    catalog = tr._catalog_without(MARK)
    models, checked = [], []
    for name in names(section):
        if not name.startswith("mamba-"):
            why = "a Mamba-2 model, its ssm_cfg not given" if name.startswith("mamba2") else "not a Mamba model"
            report.append(f"  left out {name}: {why}")
            continue
        size = name.removeprefix("mamba-").split("-")[0]
        if size not in rows:
            report.append(f"  left out {name}: no row of the table states {size}")
            continue
        layers, dim = rows[size]
        config = {**defaults, "d_model": dim, "n_layer": layers}
        model_id = f"state-spaces/{name}"
        arch = tr._mapped(config, model_id)
        if (known := catalog.get(model_id.lower())) is not None:
            checked.append(tr._checked(model_id, arch, known))
            continue
        built, stated, what = tr.sized(model_id, arch)
        if stated and abs(built / stated - 1) > tr.SIZE_TOLERANCE:
            report.append(f"  left out {name}: builds {built:.3g}B{what}, the name states {stated:g}B")
            continue
        source_note = (
            f"{REPO} {sha[:12]} README.md 'Pretrained Models' ({size.upper()}: {layers} layers, model dim {dim}) "
            f"and {CONFIG_PATH} defaults"
        )
        models.append({"id": model_id, "source": source_note, "config": config})
    report.append(f"  {len(models)} written, {len(checked)} already in the catalog")
    for r in checked:
        if r["differs"]:
            report.append(f"  DIFFERS {r['id']} (catalog {r['catalog']}): {r['differs']}")
    data = {
        "source": f"{REPO} README.md and {CONFIG_PATH} at {sha}",
        "generated_by": "scripts/import_catalog_mamba.py",
        "models": sorted(models, key=lambda m: m["id"].lower()),
        "checked": sorted(checked, key=lambda r: r["id"]),
    }
    return data, report


def main(argv: list[str] | None = None) -> int:
    args = importer_args((__doc__ or "").splitlines()[0], DEFAULT_GIT_DIR).parse_args(argv)
    sha = _git(args.git_dir, "rev-parse", f"{args.commit}^{{commit}}").strip()
    readme = _git(args.git_dir, "show", f"{sha}:README.md")
    config_source = _git(args.git_dir, "show", f"{sha}:{CONFIG_PATH}")
    data, report = build(readme, config_source, sha)
    print("\n".join(report))
    summary = f"{len(data['models'])} models, {len(data['checked'])} checked"
    return write_or_check({OUT: render(data)}, "import_catalog_mamba.py", args.check, summary)


if __name__ == "__main__":
    raise SystemExit(main())
