"""Dump torchtitan's model flavor tables into server/vramlens/knowledge/data/torchtitan_flavors.json.

torchtitan names a model by `[model] name` and `flavor` in its TOML job config; the shapes are the keyword
arguments of the `*ModelArgs(...)` calls in the flavor dict of torchtitan/models/<name>/__init__.py, over the
dataclass defaults of that class (torchtitan/models/<name>/model/args.py). Both are read with `ast` from a git
checkout of pytorch/torchtitan at each tag below; nothing is imported or run.

    python scripts/dump_torchtitan_flavors.py --git-dir /path/to/torchtitan/.git

Rerun it to add a tag: the tags are listed in TAGS.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path

TAGS = ("v0.1.0", "v0.2.0", "v0.2.2")
OUT = Path(__file__).resolve().parents[1] / "server" / "vramlens" / "knowledge" / "data" / "torchtitan_flavors.json"
# the dense decoder families vramlens estimates from their shapes (MoE and diffusion flavors are listed by name only)
KEEP = (
    "dim",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "vocab_size",
    "multiple_of",
    "ffn_dim_multiplier",
    "hidden_dim",
    "head_dim",
    "qk_norm",
    "enable_weight_tying",
    "max_seq_len",
    "moe_enabled",
    "use_flex_attn",
    "attn_type",
)


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True).stdout


def show(git_dir: str, ref: str, path: str) -> str | None:
    try:
        return git(git_dir, "show", f"{ref}:{path}")
    except subprocess.CalledProcessError:
        return None


def literal(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None  # a call or a name: not a plain shape value


def dataclass_defaults(source: str, cls: str) -> dict:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {
                s.target.id: literal(s.value)
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value is not None
            }
    return {}


def flavor_tables(source: str) -> tuple[str | None, dict[str, dict]]:
    """The args class name and {flavor: explicit keyword arguments} of the module's flavor dict."""
    cls, table = None, {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)):
            continue
        for key, value in zip(node.value.keys, node.value.values):
            if (
                isinstance(key, ast.Constant)
                and isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id.endswith("ModelArgs")
            ):
                cls = value.func.id
                table[key.value] = {kw.arg: literal(kw.value) for kw in value.keywords if kw.arg}
    return cls, table


def dump_tag(git_dir: str, tag: str) -> dict:
    commit = git(git_dir, "rev-list", "-n1", tag).strip()
    models = {}
    inits = [
        p
        for p in git(git_dir, "ls-tree", "-r", "--name-only", tag, "torchtitan/models/").splitlines()
        if p.count("/") == 3 and p.endswith("/__init__.py")
    ]
    for init in sorted(inits):
        name = init.split("/")[2]
        cls, table = flavor_tables(show(git_dir, tag, init) or "")
        if not table:
            continue
        args_path = f"torchtitan/models/{name}/model/args.py"
        defaults = dataclass_defaults(show(git_dir, tag, args_path) or "", cls)
        models[name] = {
            "args_class": cls,
            "args_file": args_path,
            "flavors": {
                flavor: {k: v for k, v in {**defaults, **given}.items() if k in KEEP} for flavor, given in table.items()
            },
        }
    return {"commit": commit, "models": models}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--git-dir", required=True, help="a pytorch/torchtitan git directory (bare is fine)")
    args = ap.parse_args()
    out = {
        "source": "pytorch/torchtitan torchtitan/models/<name>/__init__.py (flavor dicts) over "
        "torchtitan/models/<name>/model/args.py (dataclass defaults), read with ast by "
        "scripts/dump_torchtitan_flavors.py",
        "versions": {tag: dump_tag(args.git_dir, tag) for tag in TAGS},
    }
    OUT.write_text(json.dumps(out, indent=1, sort_keys=False) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
