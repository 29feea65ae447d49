"""Catalog entries from Meta's own table of Llama checkpoints: meta-llama/llama-models `models/sku_list.py`.

Each `Model(...)` there states the Hugging Face repository of a checkpoint (`huggingface_repo`) and the arguments its
reference implementation is built with (`arch_args`: `dim`, `n_layers`, `n_heads`, `n_kv_heads`, `vocab_size`,
`ffn_dim_multiplier`, `multiple_of`, `norm_eps`, `rope_theta`). The file is read from the bare git mirror with `ast`
(never imported); it left the repository at c4d86446 ("Move all Llama Stack types to llama-stack"), so the default
commit is the last one that holds it. Each entry becomes the config.json of a `LlamaForCausalLM`, field by field as
`models/llama3/reference_impl/model.py` (same commit) builds the model:

- `hidden_size` = `dim`, `num_hidden_layers` = `n_layers`, `num_attention_heads` = `n_heads`, `num_key_value_heads`
  = `n_kv_heads` (`Attention`: `args.n_heads if args.n_kv_heads is None else args.n_kv_heads`), `vocab_size`,
  `rms_norm_eps` = `norm_eps` (`rope_theta` is no size, and the file gives Llama 2 Llama 3's 500000: not taken);
- `intermediate_size` from `FeedForward`: `hidden_dim` (`4 * dim`, or the args' own `hidden_dim`) taken to
  `int(2 * hidden_dim / 3)`, times `ffn_dim_multiplier`, rounded up to a multiple of `multiple_of`;
- `tie_word_embeddings` false: `Transformer` holds `tok_embeddings` and a separate `output` projection;
- `torch_dtype` bfloat16: the `Model`'s `quantization_format`, `CheckpointQuantizationFormat.bf16` by default.

Left out, each with the reason: a checkpoint stored in another format (fp8, int4: the estimate would count bf16
weights), a vision model (its cross-attention layers and vision tower are not in `arch_args` as config.json sizes),
and one whose count misses the size its name states by more than `SIZE_TOLERANCE`. An id the catalog already has is
not written but compared shape field by shape field and recorded under "checked"; a new id whose sizes are those of
a checked checkpoint that disagrees with the catalog is left out too (the file gives Llama 2 7B and 13B Llama 3's
grouped-query heads and MLP width, and its chat models the same arguments).

    python scripts/import_catalog_llama_models.py [--git-dir /work/.mirror/meta-llama+llama-models/repo]
        [--commit <sha>] [--check]
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import import_catalog_transformers as tr  # noqa: E402
from import_catalog import importer_args, render, write_or_check  # noqa: E402

OUT = ROOT / "server" / "vramlens" / "knowledge" / "data" / "models_imported_llama_models.json"
DEFAULT_GIT_DIR = Path("/work/.mirror/meta-llama+llama-models/repo")
REPO = "meta-llama/llama-models"
SKU_PATH = "models/sku_list.py"
MARK = f"{REPO} "  # the source every entry of this import cites (left out of the catalog it is compared with)


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True).stdout


def read_sku_list(git_dir: Path, commit: str) -> tuple[str, str]:
    """(models/sku_list.py's text, the full hash) at `commit`, or at the last commit before it that holds the file."""
    full = _git(git_dir, "rev-parse", f"{commit}^{{commit}}").strip()
    holds = subprocess.run(
        ["git", f"--git-dir={git_dir}", "cat-file", "-e", f"{full}:{SKU_PATH}"], check=False, capture_output=True
    )
    if holds.returncode != 0:
        last = _git(git_dir, "rev-list", "-1", full, "--", SKU_PATH).strip()  # the commit that removed it
        full = _git(git_dir, "rev-parse", f"{last}^").strip()
    return _git(git_dir, "show", f"{full}:{SKU_PATH}"), full


class _Reader:
    """Values of the file's expressions without running it: literals, the module's constant names
    (`LLAMA3_VOCAB_SIZE`), calls of its argument-less functions that return a dict literal (`arch_args_1b()`), and
    `**` merges of those into a dict."""

    def __init__(self, module: ast.Module):
        self.constants = {
            node.targets[0].id: node.value.value
            for node in module.body
            if isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
        }
        self.returns = {
            node.name: node.body[-1].value
            for node in module.body
            if isinstance(node, ast.FunctionDef)
            and not node.args.args
            and isinstance(node.body[-1], ast.Return)
            and isinstance(node.body[-1].value, ast.Dict)
        }

    def value(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.returns:
            return self.value(self.returns[node.func.id])
        if isinstance(node, ast.Dict):
            out: dict[Any, Any] = {}
            for key, item in zip(node.keys, node.values, strict=True):
                if key is None:
                    out.update(self.value(item))
                else:
                    out[ast.literal_eval(key)] = self.value(item)
            return out
        if isinstance(node, ast.Name) and node.id in self.constants:
            return self.constants[node.id]
        return ast.literal_eval(node)


def sku_models(source: str) -> list[dict[str, Any]]:
    """Every `Model(...)` call of the file: its `huggingface_repo`, `core_model_id` name, `quantization_format`
    name and `arch_args`, in file order."""
    module = ast.parse(source)
    reader = _Reader(module)
    out = []
    for node in ast.walk(module):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Model"):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        repo = kw.get("huggingface_repo")
        quantization = kw.get("quantization_format")
        core = kw.get("core_model_id")
        out.append(
            {
                "repo": repo.value if isinstance(repo, ast.Constant) else None,
                "core": core.attr if isinstance(core, ast.Attribute) else "",
                "format": quantization.attr if isinstance(quantization, ast.Attribute) else "bf16",
                "args": reader.value(kw["arch_args"]),
                "line": node.lineno,
            }
        )
    return sorted(out, key=lambda m: m["line"])  # ast.walk is breadth-first: back to file order


def ffn_width(args: dict[str, Any]) -> int:
    """The MLP width `FeedForward` builds (llama-models models/llama3/reference_impl/model.py, `TransformerBlock`
    passing `hidden_dim=4 * args.dim`)."""
    hidden = int(2 * args.get("hidden_dim", 4 * args["dim"]) / 3)
    if args.get("ffn_dim_multiplier") is not None:
        hidden = int(args["ffn_dim_multiplier"] * hidden)
    multiple = args["multiple_of"]
    return multiple * ((hidden + multiple - 1) // multiple)


def hf_config(args: dict[str, Any]) -> dict[str, Any]:
    """The config.json of the `LlamaForCausalLM` the reference implementation builds from `arch_args`."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": args["dim"],
        "num_hidden_layers": args["n_layers"],
        "num_attention_heads": args["n_heads"],
        "num_key_value_heads": args.get("n_kv_heads") or args["n_heads"],
        "intermediate_size": ffn_width(args),
        "vocab_size": args["vocab_size"],
        "rms_norm_eps": args["norm_eps"],
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def build(source: str, sha: str) -> tuple[dict[str, Any], list[str]]:
    """models_imported_llama_models.json's content, and the report lines."""
    skus = sku_models(source)
    report = [f"{REPO} {sha[:12]} {SKU_PATH}: {len(skus)} models"]
    catalog = tr._catalog_without(MARK)
    checked: list[dict[str, Any]] = []
    candidates: list[tuple[dict[str, Any], dict[str, Any]]] = []
    seen: set[str] = set()
    for sku in skus:
        model_id = sku["repo"]
        if model_id in seen:
            continue  # one checkpoint in two layouts (Llama-3.1-405B: 8 and 16 .pth files), the same arguments
        seen.add(model_id)
        if not model_id:
            report.append(f"  left out {sku['core']}: no huggingface_repo")
            continue
        if sku["format"] != "bf16":
            report.append(f"  left out {model_id}: stored as {sku['format']}")
            continue
        if any(k.startswith("vision_") for k in sku["args"]):
            report.append(f"  left out {model_id}: a vision model (cross-attention layers, vision tower)")
            continue
        config = hf_config(sku["args"])
        arch = tr._mapped(config, model_id)
        if (known := catalog.get(model_id.lower())) is not None:
            checked.append({**tr._checked(model_id, arch, known, core=sku["core"]), "_config": config})
            continue
        candidates.append((sku, config))
    contradicted = {json.dumps(r["_config"], sort_keys=True): r["id"] for r in checked if r["differs"]}
    models = []
    for sku, config in candidates:
        model_id = sku["repo"]
        if (same := contradicted.get(json.dumps(config, sort_keys=True))) is not None:
            report.append(f"  left out {model_id}: the sizes the file gives {same}, which differ from the catalog's")
            continue
        built, stated, what = tr.sized(model_id, tr._mapped(config, model_id))
        if stated and abs(built / stated - 1) > tr.SIZE_TOLERANCE:
            report.append(f"  left out {model_id}: builds {built:.3g}B{what}, the name states {stated:g}B")
            continue
        source_note = f"{REPO} {sha[:12]} {SKU_PATH} {sku['core']} (huggingface_repo {model_id})"
        models.append({"id": model_id, "source": source_note, "config": config})
    agree = sum(1 for r in checked if not r["differs"])
    report.append(f"  {len(models)} written, {len(checked)} already in the catalog: {agree} agree exactly")
    for r in checked:
        if r["differs"]:
            report.append(f"  DIFFERS {r['id']} ({r['core']}, catalog {r['catalog']}): {r['differs']}")
    data = {
        "source": f"{REPO} {SKU_PATH} at {sha}",
        "generated_by": "scripts/import_catalog_llama_models.py",
        "models": sorted(models, key=lambda m: m["id"].lower()),
        "checked": sorted(({k: v for k, v in r.items() if k != "_config"} for r in checked), key=lambda r: r["id"]),
    }
    return data, report


def main(argv: list[str] | None = None) -> int:
    args = importer_args((__doc__ or "").splitlines()[0], DEFAULT_GIT_DIR).parse_args(argv)
    data, report = build(*read_sku_list(args.git_dir, args.commit))
    print("\n".join(report))
    summary = f"{len(data['models'])} models, {len(data['checked'])} checked"
    return write_or_check({OUT: render(data)}, "import_catalog_llama_models.py", args.check, summary)


if __name__ == "__main__":
    raise SystemExit(main())
