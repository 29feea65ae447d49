"""Catalog entries for Qwen3-VL checkpoints from InternLM/xtuner's model configs (xtuner v1).

xtuner states each Qwen3-VL checkpoint it trains as a config class whose defaults are that checkpoint's shapes:
`xtuner/v1/model/compose/qwen3_vl/qwen3_vl_config.py` (`Qwen3VLDense4BConfig`, `Qwen3VLDense8BConfig`,
`Qwen3VLMoE30BA3Config`, `Qwen3VLMoE235BA22Config`: the vision tower `Qwen3VLVisionConfig(...)`, the projector and
the text model), whose text models are `xtuner/v1/model/dense/qwen3.py` `Qwen3Dense4BConfig` / `Qwen3Dense8BConfig`
and `xtuner/v1/model/moe/qwen3.py` `Qwen3MoE30BA3Config` / `Qwen3MoE235BA22Config` (sizes, `MHAConfig(...)` heads,
experts), and whose `hf_config` properties write the Hugging Face config.json fields they map to. The files are read
with `ast` from the bare git mirror (`git show <commit>:<path>`); nothing from them is imported or run. A class's
fields are its annotated class attributes (literals, or a call of another config class with keyword overrides)
over those of its bases in these files.

Each entry is the config.json the catalog reads as a local one (`knowledge/models.py` `arch_from_hf_config`):
`qwen3_vl` (dense) or `qwen3_vl_moe` with `text_config` (the text model's sizes, `dtype` bfloat16 as xtuner's
`hf_config` writes it; every layer MoE: xtuner's `first_k_dense_replace` 0 is `mlp_only_layers` [] with
`decoder_sparse_step` 1) and `vision_config` (depth, widths, patch, merge, position embeddings, deepstack indexes,
`out_hidden_size` = the projector's text width). An id the catalog already holds (models.yaml, an earlier import) is
not written but compared, field by field as the estimate reads them, under "checked".

    python scripts/import_catalog_xtuner.py [--git-dir /work/.mirror/InternLM+xtuner/repo] [--commit HEAD] [--check]

`--check` writes nothing and exits 1 when the data file differs from what the source gives now.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "server" / "vramlens" / "knowledge" / "data" / "models_imported_xtuner.json"
DEFAULT_GIT_DIR = Path("/work/.mirror/InternLM+xtuner/repo")
FILES = (
    "xtuner/v1/model/moe/gpt_oss.py",
    "xtuner/v1/model/dense/qwen3.py",
    "xtuner/v1/model/moe/qwen3.py",
    "xtuner/v1/model/dense/qwen3vl_text.py",
    "xtuner/v1/model/moe/qwen3vl_text.py",
    "xtuner/v1/model/compose/qwen3_vl/qwen3_vl_config.py",
)
SIZE_TOLERANCE = 0.15  # parameters (text + vision) against the size the name states

sys.path.insert(0, str(ROOT / "server"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from import_catalog import importer_args, stated_size, write_or_check  # noqa: E402
from import_catalog_transformers import _catalog_without, _checked, _mapped, _total_b  # noqa: E402

# Hub checkpoint -> (aliases, xtuner config class); the Thinking checkpoints are published with the Instruct ones'
# config.json (huggingface.co/Qwen/Qwen3-VL-4B-Thinking and -Instruct: Qwen3VLForConditionalGeneration, the same sizes)
CHECKPOINTS = (
    ("Qwen/Qwen3-VL-4B-Instruct", ("Qwen/Qwen3-VL-4B-Thinking",), "Qwen3VLDense4BConfig"),
    ("Qwen/Qwen3-VL-8B-Instruct", ("Qwen/Qwen3-VL-8B-Thinking",), "Qwen3VLDense8BConfig"),
    ("Qwen/Qwen3-VL-30B-A3B-Instruct", ("Qwen/Qwen3-VL-30B-A3B-Thinking",), "Qwen3VLMoE30BA3Config"),
    ("Qwen/Qwen3-VL-235B-A22B-Instruct", ("Qwen/Qwen3-VL-235B-A22B-Thinking",), "Qwen3VLMoE235BA22Config"),
    ("openai/gpt-oss-20b", (), "GptOss21BA3P6Config"),
    ("openai/gpt-oss-120b", (), "GptOss117BA5P8Config"),
)
_MARK = "InternLM/xtuner"


class Unsupported(Exception):
    """A class attribute value outside literals and config-class calls."""


def _value(node: ast.expr, classes: dict[str, dict[str, Any]]) -> Any:
    """A literal, or a config-class call (`MHAConfig(num_attention_heads=32, ...)`) as its fields."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        kwargs = {kw.arg: _value(kw.value, classes) for kw in node.keywords if kw.arg is not None}
        if node.args:
            raise Unsupported(ast.unparse(node))
        base = _fields(node.func.id, classes) if node.func.id in classes else {}
        return {**base, **kwargs}
    return ast.literal_eval(node)


def _fields(name: str, classes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A class's fields: its bases' (in these files) overridden by its own annotated attributes."""
    cls = classes[name]
    out: dict[str, Any] = {}
    for base in cls["bases"]:
        if base in classes:
            out.update(_fields(base, classes))
    for field, node in cls["body"].items():
        try:
            out[field] = _value(node, classes)
        except (ValueError, TypeError, SyntaxError, Unsupported):
            continue  # a factory, an expression: not a shape
    return out


def read_classes(sources: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Every class of the files: its base names and its annotated attributes' value nodes."""
    classes: dict[str, dict[str, Any]] = {}
    for path, text in sources.items():
        for node in ast.parse(text, filename=path).body:
            if not isinstance(node, ast.ClassDef):
                continue
            body = {
                stmt.target.id: stmt.value
                for stmt in node.body
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None
            }
            bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
            classes[node.name] = {"bases": bases, "body": body, "path": path}
    return classes


def hf_config(compose: dict[str, Any]) -> dict[str, Any]:
    """The config.json of a Qwen3-VL compose config's fields (xtuner's `hf_config` field mapping)."""
    text, vision, projector = compose["text_config"], compose["vision_config"], compose["projector_config"]
    attention = text["attention"]
    moe = bool(text.get("n_routed_experts"))
    text_config: dict[str, Any] = {
        "model_type": "qwen3_vl_moe_text" if moe else "qwen3_vl_text",
        "hidden_size": text["hidden_size"],
        "intermediate_size": text["intermediate_size"],
        "num_hidden_layers": text["num_hidden_layers"],
        "num_attention_heads": attention["num_attention_heads"],
        "num_key_value_heads": attention["num_key_value_heads"],
        "head_dim": attention["head_dim"],
        "vocab_size": text["vocab_size"],
        "max_position_embeddings": text["max_position_embeddings"],
        "tie_word_embeddings": text["tie_word_embeddings"],
        "dtype": "bfloat16",
    }
    if moe:
        if text.get("n_shared_experts") or text.get("first_k_dense_replace"):
            raise Unsupported("shared experts or leading dense layers: not a Qwen3-VL-MoE config")
        text_config |= {
            "num_experts": text["n_routed_experts"],
            "num_experts_per_tok": text["num_experts_per_tok"],
            "moe_intermediate_size": text["moe_intermediate_size"],
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
        }
    model_type = "qwen3_vl_moe" if moe else "qwen3_vl"
    vision_config = {
        "model_type": model_type,
        **{
            k: vision[k]
            for k in (
                "depth",
                "hidden_size",
                "intermediate_size",
                "in_channels",
                "patch_size",
                "spatial_merge_size",
                "temporal_patch_size",
                "hidden_act",
                "num_position_embeddings",
                "deepstack_visual_indexes",
            )
        },
        "num_heads": vision["num_attention_heads"],
        "out_hidden_size": projector["text_hidden_size"],
    }
    return {
        "architectures": ["Qwen3VLMoeForConditionalGeneration" if moe else "Qwen3VLForConditionalGeneration"],
        "model_type": model_type,
        "tie_word_embeddings": text["tie_word_embeddings"],
        "text_config": text_config,
        "vision_config": vision_config,
    }


def gpt_oss_config(text: dict[str, Any]) -> dict[str, Any]:
    """The config.json of an xtuner gpt-oss config's fields (`GptOssConfig.hf_config`: sinks, biased q/k/v/o,
    every other layer a sliding window — `layers_type`: sliding where (i + 1) is odd — and biased experts). The
    published checkpoints store the experts in MXFP4 (huggingface.co/openai/gpt-oss-120b model card: "Native MXFP4
    quantization: The models are trained with native MXFP4 precision for the MoE layer"; its config.json
    `quantization_config.quant_method` "mxfp4"), which xtuner's config does not state."""
    attention = text["attention"]
    layers = text["num_hidden_layers"]
    if not (attention.get("qkv_bias") and attention.get("o_bias") and attention.get("with_sink")):
        raise Unsupported("attention without gpt-oss's biases and sinks")
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "hidden_size": text["hidden_size"],
        "intermediate_size": text["moe_intermediate_size"],
        "num_hidden_layers": layers,
        "num_attention_heads": attention["num_attention_heads"],
        "num_key_value_heads": attention["num_key_value_heads"],
        "head_dim": attention["head_dim"],
        "attention_bias": True,
        "sliding_window": attention["sliding_window"],
        "layer_types": ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)],
        "num_local_experts": text["n_routed_experts"],
        "num_experts_per_tok": text["num_experts_per_tok"],
        "vocab_size": text["vocab_size"],
        "max_position_embeddings": text["max_position_embeddings"],
        "tie_word_embeddings": text["tie_word_embeddings"],
        "quantization_config": {"quant_method": "mxfp4"},
        "dtype": "bfloat16",
    }


def git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True, text=True).stdout


def build(git_dir: Path, commit: str) -> tuple[dict[str, Any], list[str]]:
    sha = git(git_dir, "rev-parse", f"{commit}^{{commit}}").strip()
    classes = read_classes({path: git(git_dir, "show", f"{sha}:{path}") for path in FILES})
    catalog = _catalog_without(_MARK)
    models, checked, report = [], [], [f"InternLM/xtuner {sha[:12]}"]
    for model_id, aliases, name in CHECKPOINTS:
        fields = _fields(name, classes)
        config = hf_config(fields) if "text_config" in fields else gpt_oss_config(fields)
        where = f"{classes[name]['path']} `{name}`"
        source = f"InternLM/xtuner {sha[:12]} {where}"
        arch = _mapped(config, model_id)
        if arch is None:
            report.append(f"  left out {model_id}: its config does not map")
            continue
        size, total = stated_size(model_id), _total_b(arch)
        if size is None or abs(total / size - 1) > SIZE_TOLERANCE:
            report.append(f"  left out {model_id}: {total:.2f} B against the {size} B its name states")
            continue
        known = catalog.get(model_id.lower())
        if known is not None:
            checked.append(_checked(model_id, arch, known, source=source))
            continue
        models.append({"id": model_id, "aliases": list(aliases), "source": source, "config": config})
        report.append(f"  {model_id}: {total:.2f} B")
    data = {
        "source": f"InternLM/xtuner {FILES[-1]} and the text configs it builds on, at {sha}",
        "generated_by": "scripts/import_catalog_xtuner.py",
        "models": models,
        "checked": checked,
    }
    return data, report


def main(argv: list[str] | None = None) -> int:
    args = importer_args(__doc__.splitlines()[0], DEFAULT_GIT_DIR).parse_args(argv)
    data, report = build(args.git_dir, args.commit)
    print("\n".join(report), file=sys.stderr)
    summary = f"{len(data['models'])} models, {len(data['checked'])} checked"
    return write_or_check({OUT: json.dumps(data, indent=1) + "\n"}, "import_catalog_xtuner.py", args.check, summary)


if __name__ == "__main__":
    sys.exit(main())
