"""Catalog entries from alibaba/Pai-Megatron-Patch's Qwen2.5-VL size table.

Source: `examples/qwen2_5_vl/run_mcore_qwen.sh`, whose `if [ $MODEL_SIZE = 3B ]; then … elif … fi` blocks set, per
published size, the language model's sizes, each commented with the config.json field it is (`NUM_LAYERS=36 #
num_hidden_layers`, `HIDDEN_SIZE`, `NUM_ATTN_HEADS`, `INTERMEDIATE_SIZE`, `NUM_KEY_VALUE_HEADS`,
`MAX_POSITION_EMBEDDINGS`, `VOCAB_SIZE`, `RMS_NORM_EPS`, `tie_option="" # tie_word_embeddings`, untied where it holds
`--untie-embeddings-and-output-weights`); and `megatron_patch/model/qwen2_5_vl/transformer_config.py`
`get_vision_model_config`, the vision tower it builds beside them (`config.num_layers = 32 # depth`, `hidden_size`
1280, `num_attention_heads` 16, `patch_size`, `temporal_patch_size`, `spatial_merge_size`, `fullatt_block_indexes`,
`_qwen2_5_vl_window_size`, and an MLP width of 3420 for the decoders of 28 and 36 layers, 3456 otherwise), whose
merger projects to the language model's width (`get_vision_projection_config`: "out_hidden_size = hidden_size").
Both files are read from the bare git mirror (`git show`), the shell file as text (only `NAME=value` lines inside the
size blocks) and the Python file with `ast`; nothing is run.

Each size becomes the config.json of `Qwen/Qwen2.5-VL-<size>-Instruct` (examples/qwen2_5_vl/README.md converts
Qwen2.5-VL-3B-Instruct; Qwen publishes Qwen2.5-VL at these four sizes, each as an -Instruct checkpoint). A size the
catalog already has is not written but compared, language model and vision tower, and recorded under "checked";
a size whose neighbours disagree with the catalog (any checked size differs) is not written at all: the mapping
itself would then be in doubt.

    python scripts/import_catalog_pai.py [--git-dir /work/.mirror/alibaba+Pai-Megatron-Patch/repo] [--commit HEAD]
        [--check]
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
from import_catalog import importer_args, render, write_or_check  # noqa: E402

OUT = ROOT / "server" / "vramlens" / "knowledge" / "data" / "models_imported_pai.json"
DEFAULT_GIT_DIR = Path("/work/.mirror/alibaba+Pai-Megatron-Patch/repo")
REPO = "alibaba/Pai-Megatron-Patch"
SIZES_PATH = "examples/qwen2_5_vl/run_mcore_qwen.sh"
VISION_PATH = "megatron_patch/model/qwen2_5_vl/transformer_config.py"
MARK = f"{REPO} "

# the shell variable → the config.json field its comment names
TEXT_FIELDS = {
    "NUM_LAYERS": "num_hidden_layers",
    "HIDDEN_SIZE": "hidden_size",
    "NUM_ATTN_HEADS": "num_attention_heads",
    "INTERMEDIATE_SIZE": "intermediate_size",
    "NUM_KEY_VALUE_HEADS": "num_key_value_heads",
    "MAX_POSITION_EMBEDDINGS": "max_position_embeddings",
    "VOCAB_SIZE": "vocab_size",
    "RMS_NORM_EPS": "rms_norm_eps",
}
# `get_vision_model_config`'s `config.<attr>` → Qwen2_5_VLVisionConfig's field (the file's own comments: "# depth",
# "# num_heads", "# hidden_size")
VISION_FIELDS = {
    "num_layers": "depth",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_heads",
    "patch_size": "patch_size",
    "temporal_patch_size": "temporal_patch_size",
    "spatial_merge_size": "spatial_merge_size",
    "in_channels": "in_chans",
    "fullatt_block_indexes": "fullatt_block_indexes",
    "_qwen2_5_vl_window_size": "window_size",
}
_BLOCK = re.compile(r"^(?:el)?if \[ \$MODEL_SIZE = (\S+) \]; then$")
_ASSIGN = re.compile(r"^([A-Za-z_]+)=(\S*|\"[^\"]*)")


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True).stdout


def read_sources(git_dir: Path, commit: str) -> tuple[str, str, str]:
    """(the size table's text, the vision config's text, the full hash) at `commit` of the bare mirror."""
    full = _git(git_dir, "rev-parse", f"{commit}^{{commit}}").strip()
    return _git(git_dir, "show", f"{full}:{SIZES_PATH}"), _git(git_dir, "show", f"{full}:{VISION_PATH}"), full


def size_blocks(text: str) -> dict[str, dict[str, str]]:
    """Each `MODEL_SIZE` block's variables: {"3B": {"NUM_LAYERS": "36", …, "tie_option": " --untie-…"}}."""
    blocks: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    lines = iter(text.splitlines())
    for raw in lines:
        line = raw.strip()
        if m := _BLOCK.match(line):
            current = blocks.setdefault(m.group(1), {})
        elif line == "fi" or line.startswith("else"):
            current = None
        elif current is not None and (m := _ASSIGN.match(line)):
            value = m.group(2)
            while value.startswith('"') and not (len(value) > 1 and value.endswith('"')):
                value += " " + next(lines).strip()  # a quoted value over several lines (tie_option=" \ … ")
            current[m.group(1)] = value.strip('"')
    return blocks


def vision_config(source: str) -> tuple[dict[str, Any], list[int], int, int]:
    """`get_vision_model_config`'s constants as Qwen2_5_VLVisionConfig fields, and its MLP width rule: (fields,
    the decoder layer counts of the first width, that width, the other width)."""
    func = next(
        n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "get_vision_model_config"
    )
    fields: dict[str, Any] = {}
    widths: tuple[list[int], int, int] | None = None
    for node in func.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            left, op, right = node.test.left, node.test.ops[0], node.test.comparators[0]
            if isinstance(left, ast.Attribute) and left.attr == "num_layers" and isinstance(op, ast.In):
                first, other = node.body[0], node.orelse[0]
                assert isinstance(first, ast.Assign) and isinstance(other, ast.Assign)
                widths = (ast.literal_eval(right), ast.literal_eval(first.value), ast.literal_eval(other.value))
            else:  # the pipeline branch: the depth is the `else` one
                for sub in node.orelse:
                    _take(sub, fields)
        else:
            _take(node, fields)
    assert widths is not None, "no MLP width rule in get_vision_model_config"
    return fields, *widths


def _take(node: ast.stmt, fields: dict[str, Any]) -> None:
    if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute)):
        return
    name = node.targets[0].attr
    if name in VISION_FIELDS:
        try:
            fields[VISION_FIELDS[name]] = ast.literal_eval(node.value)
        except ValueError:
            pass  # computed from other settings (kv_channels, seq_length): not a size of its own


def hf_config(block: dict[str, str], vision: tuple[dict[str, Any], list[int], int, int]) -> dict[str, Any]:
    """The Qwen2.5-VL config.json one size block and the vision tower describe."""
    fields, first_layers, first_width, other_width = vision
    text: dict[str, Any] = {TEXT_FIELDS[k]: ast.literal_eval(v) for k, v in block.items() if k in TEXT_FIELDS}
    layers = text["num_hidden_layers"]
    return {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        **text,
        "tie_word_embeddings": "--untie-embeddings-and-output-weights" not in block.get("tie_option", ""),
        "torch_dtype": "bfloat16",
        "vision_config": {
            **fields,
            "intermediate_size": first_width if layers in first_layers else other_width,
            "out_hidden_size": text["hidden_size"],
            "hidden_act": "silu",
            "model_type": "qwen2_5_vl",
        },
    }


def build(sizes: str, vision_source: str, sha: str) -> tuple[dict[str, Any], list[str]]:
    """models_imported_pai.json's content, and the report lines."""
    blocks = size_blocks(sizes)
    vision = vision_config(vision_source)
    report = [f"{REPO} {sha[:12]} {SIZES_PATH}: sizes {', '.join(blocks)}"]
    catalog = tr._catalog_without(MARK)
    checked, candidates = [], []
    for size, block in blocks.items():
        model_id = f"Qwen/Qwen2.5-VL-{size}-Instruct"
        config = hf_config(block, vision)
        arch = tr._mapped(config, model_id)
        if (known := catalog.get(model_id.lower())) is not None:
            record = tr._checked(model_id, arch, known, size=size)
            if arch.vision_params != known.vision_params:
                record["differs"]["vision_params"] = [arch.vision_params, known.vision_params]
            checked.append(record)
            continue
        candidates.append((size, model_id, config, arch))
    models: list[dict[str, Any]] = []
    doubt = [r["id"] for r in checked if r["differs"]]
    for size, model_id, config, arch in candidates:
        built, stated, what = tr.sized(model_id, arch)
        if doubt:
            report.append(f"  left out {model_id}: the sizes checked differ from the catalog ({', '.join(doubt)})")
        elif stated and abs(built / stated - 1) > tr.SIZE_TOLERANCE:
            report.append(f"  left out {model_id}: builds {built:.3g}B{what}, the name states {stated:g}B")
        else:
            source = f"{REPO} {sha[:12]} {SIZES_PATH} MODEL_SIZE={size} and {VISION_PATH} get_vision_model_config"
            models.append({"id": model_id, "source": source, "config": config})
    agree = len(checked) - len(doubt)
    report.append(f"  {len(models)} written, {len(checked)} already in the catalog: {agree} agree exactly")
    report.extend(f"  DIFFERS {r['id']} (catalog {r['catalog']}): {r['differs']}" for r in checked if r["differs"])
    data = {
        "source": f"{REPO} {SIZES_PATH} and {VISION_PATH} at {sha}",
        "generated_by": "scripts/import_catalog_pai.py",
        "models": sorted(models, key=lambda m: m["id"].lower()),
        "checked": sorted(checked, key=lambda r: r["id"]),
    }
    return data, report


def main(argv: list[str] | None = None) -> int:
    args = importer_args((__doc__ or "").splitlines()[0], DEFAULT_GIT_DIR).parse_args(argv)
    data, report = build(*read_sources(args.git_dir, args.commit))
    print("\n".join(report))
    summary = f"{len(data['models'])} models, {len(data['checked'])} checked"
    return write_or_check({OUT: render(data)}, "import_catalog_pai.py", args.check, summary)


if __name__ == "__main__":
    raise SystemExit(main())
