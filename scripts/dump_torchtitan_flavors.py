"""Dump torchtitan's model flavor tables into server/vramlens/knowledge/data/torchtitan_flavors.json.

torchtitan names a model by `[model] name` and `flavor` in its TOML job config; the shapes are the keyword
arguments of the `*ModelArgs(...)` calls in the flavor dict of torchtitan/models/<name>/__init__.py, over the
dataclass defaults of that class (torchtitan/models/<name>/model/args.py); a nested `MoEArgs(...)` argument is
flattened into the flavor over MoEArgs' own defaults (torchtitan/models/moe/moe.py at v0.2.x). At main a flavor is a
function returning `<Model>.Config` (torchtitan/models/<name>/__init__.py `<name>_configs = {"16B": _16b, ...}`):
its local constants and the keyword arguments of the calls in its body are read, over the keyword defaults of the
module's own layer-building helpers it calls. Everything is read with `ast` from a git checkout of pytorch/torchtitan
at each tag below and at main; nothing is imported or run.

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
MAIN = "main"  # the branch, dumped after the tags as version "main"
OUT = Path(__file__).resolve().parents[1] / "server" / "vramlens" / "knowledge" / "data" / "torchtitan_flavors.json"
# the decoder shapes vramlens estimates from, mixture-of-experts and DeepSeek MLA fields included (diffusion flavors
# are listed by name only)
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
    # mixture of experts: MoEArgs (torchtitan/models/moe/moe.py at v0.2.x) and the MoE fields of the ModelArgs
    "num_experts",
    "num_shared_experts",
    "top_k",
    "inter_dim",  # deepseek_v3: the dense layers' FFN width
    "moe_inter_dim",  # the width of one expert
    "n_dense_layers",  # deepseek_v3: leading layers with a dense FFN
    "interleave_moe_layer_step",  # llama4: every n-th layer is MoE
    "auto_scale_hidden_dim",  # llama4: the expert width scaled from dim and top_k
    # DeepSeek multi-head latent attention
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)
MOE_FIELDS = frozenset({"num_experts", "num_shared_experts", "top_k", "moe_inter_dim"})
# torchtitan main's names for the same fields (torchtitan/models/deepseek_v3/__init__.py, qwen3/__init__.py at main)
MAIN_NAMES = {"moe_hidden_dim": "moe_inter_dim", "dense_hidden_dim": "inter_dim", "router_top_k": "top_k"}
# where MoEArgs is defined, newest layout first
MOE_ARGS_FILES = ("torchtitan/models/moe/moe.py", "torchtitan/models/moe.py")


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
                given: dict = {}
                for kw in value.keywords:
                    if isinstance(kw.value, ast.Call) and isinstance(kw.value.func, ast.Name):
                        # a nested args dataclass (moe_args=MoEArgs(...)): its fields, over its defaults
                        given[kw.arg] = {"class": kw.value.func.id}
                        given.update({k.arg: literal(k.value) for k in kw.value.keywords if k.arg})
                    elif kw.arg:
                        given[kw.arg] = literal(kw.value)
                table[key.value] = given
    return cls, table


def nested_defaults(git_dir: str, ref: str, args_source: str, given: dict) -> dict:
    """The dataclass defaults of the nested args classes a flavor names (MoEArgs), or the args class's own
    `field(default_factory=MoEArgs)` default when the flavor leaves it out."""
    out: dict = {}
    classes = {v["class"] for v in given.values() if isinstance(v, dict) and "class" in v}
    if "MoEArgs" in args_source:
        classes.add("MoEArgs")
    for cls in sorted(classes):
        for path in MOE_ARGS_FILES:
            found = dataclass_defaults(show(git_dir, ref, path) or "", cls)
            if found:
                out.update(found)
                break
    return out


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
        args_source = show(git_dir, tag, args_path) or ""
        defaults = dataclass_defaults(args_source, cls)
        flavors = {}
        for flavor, given in table.items():
            nested = nested_defaults(git_dir, tag, args_source, given)
            merged = {**nested, **defaults, **given}
            if merged.get("moe_enabled") is False:  # qwen3's dense flavors: MoEArgs' defaults go unused
                merged = {k: v for k, v in merged.items() if k not in MOE_FIELDS}
            flavors[flavor] = {k: v for k, v in merged.items() if k in KEEP}
        models[name] = {"args_class": cls, "args_file": args_path, "flavors": flavors}
    return {"commit": commit, "models": models}


def _function_fields(fn: ast.FunctionDef, helpers: dict[str, ast.FunctionDef]) -> dict:
    """A main-branch flavor function's fields: its `name = constant` locals and the constant (or local-named)
    keyword arguments of the calls in its body, first one written winning, over the keyword defaults of the
    module's own helpers it calls (`_build_gptoss_layers(..., n_heads=64)` style defaults)."""
    env: dict = {}
    for node in fn.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = literal(node.value)
            if value is not None:
                env[node.targets[0].id] = value
    fields: dict = {}
    helper_defaults: dict = {}
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if not kw.arg or kw.arg in fields:
                continue
            if isinstance(kw.value, ast.Name) and kw.value.id in env:
                fields[kw.arg] = env[kw.value.id]
            elif not isinstance(kw.value, ast.Name):
                value = literal(kw.value)
                if value is not None:
                    fields[kw.arg] = value
        if isinstance(node.func, ast.Name) and node.func.id in helpers:
            a = helpers[node.func.id].args
            names = [p.arg for p in a.args][len(a.args) - len(a.defaults) :] + [p.arg for p in a.kwonlyargs]
            values = list(a.defaults) + list(a.kw_defaults)
            for n, d in zip(names, values):
                if d is not None and n not in helper_defaults and (v := literal(d)) is not None:
                    helper_defaults[n] = v
    merged = {**helper_defaults, **env, **fields}
    return {MAIN_NAMES.get(k, k): v for k, v in merged.items()}


def dump_main(git_dir: str, ref: str = MAIN) -> dict:
    """torchtitan main: `<name>_configs = {"flavor": _function, ...}` in torchtitan/models/<name>/__init__.py."""
    commit = git(git_dir, "rev-parse", ref).strip()
    models = {}
    inits = [
        p
        for p in git(git_dir, "ls-tree", "-r", "--name-only", ref, "torchtitan/models/").splitlines()
        if p.count("/") == 3 and p.endswith("/__init__.py")
    ]
    for init in sorted(inits):
        name = init.split("/")[2]
        tree = ast.parse(show(git_dir, ref, init) or "")
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        for node in tree.body:
            if not (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Dict)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.endswith("_configs")
            ):
                continue
            flavors = {}
            for key, value in zip(node.value.keys, node.value.values):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Name) and value.id in functions:
                    fields = _function_fields(functions[value.id], functions)
                    flavors[key.value] = {k: v for k, v in fields.items() if k in KEEP}
            if flavors:
                models[name] = {
                    "args_class": f"{node.targets[0].id} (functions)",
                    "args_file": init,
                    "flavors": flavors,
                }
    return {"commit": commit, "models": models}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--git-dir", required=True, help="a pytorch/torchtitan git directory (bare is fine)")
    args = ap.parse_args()
    out = {
        "source": "pytorch/torchtitan torchtitan/models/<name>/__init__.py (flavor dicts) over "
        "torchtitan/models/<name>/model/args.py (dataclass defaults) at the tags; at main the flavor functions of "
        "torchtitan/models/<name>/__init__.py; read with ast by "
        "scripts/dump_torchtitan_flavors.py",
        "versions": {**{tag: dump_tag(args.git_dir, tag) for tag in TAGS}, MAIN: dump_main(args.git_dir)},
    }
    OUT.write_text(json.dumps(out, indent=1, sort_keys=False) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
