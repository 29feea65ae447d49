"""Dump ms-swift 1.x/2.x's model registry (`--model_type` → model id and default LoRA targets) from its own source.

ms-swift 1.x and 2.x name a model by `--model_type qwen-7b-chat`; `swift/llm/utils/model.py` registers each type with
`@register_model(ModelType.qwen_7b_chat, 'qwen/Qwen-7B-Chat', LoRATM.qwen, …, hf_model_id='Qwen/Qwen-7B-Chat')`
(ModelScope id first; `hf_model_id` from 2.x). `--lora_target_modules DEFAULT` means the type's registered targets.
The file is read with `ast` (never imported), from a git checkout of modelscope/ms-swift at each tag:

    python scripts/dump_swift_model_types.py /path/to/ms-swift.git v1.7.3 v2.6.1 \
        > server/vramlens/knowledge/data/ms_swift_model_types.json

Output: {"tags": {tag: commit}, "types": {model_type: {"model_id", "hf_model_id", "lora_targets", "tag"}}}; a type
takes the oldest tag's model id and targets (the 1.x reading) and the newest tag's `hf_model_id`.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

MODEL_PY = "swift/llm/utils/model.py"


def _class_constants(tree: ast.Module, name: str) -> dict[str, object]:
    """Attributes of `class name:` whose value is a literal or another attribute of the same class."""
    out: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    target, value = stmt.targets[0].id, stmt.value
                    if isinstance(value, ast.Name) and value.id in out:
                        out[target] = out[value.id]
                        continue
                    try:
                        out[target] = ast.literal_eval(value)
                    except ValueError:
                        pass
    return out


def read_registry(source: str) -> dict[str, dict]:
    tree = ast.parse(source)
    types = _class_constants(tree, "ModelType")
    targets = _class_constants(tree, "LoRATM")

    def resolve(node: ast.AST | None, table: dict):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return table.get(node.attr)
        try:
            return ast.literal_eval(node) if node is not None else None
        except ValueError:
            return None

    out: dict[str, dict] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register_model" and node.args):
            continue
        model_type = resolve(node.args[0], types)
        if not isinstance(model_type, str):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        model_id = resolve(node.args[1] if len(node.args) > 1 else kw.get("model_id_or_path"), {})
        lora = resolve(node.args[2] if len(node.args) > 2 else kw.get("lora_target_modules"), targets)
        hf_id = resolve(kw.get("hf_model_id"), {})
        out[model_type] = {
            "model_id": model_id if isinstance(model_id, str) else None,
            "hf_model_id": hf_id if isinstance(hf_id, str) else None,
            "lora_targets": list(lora) if isinstance(lora, (list, tuple)) else None,
        }
    return out


def main(git_dir: str, tags: list[str]) -> dict:
    result: dict = {"source": f"modelscope/ms-swift {MODEL_PY}", "tags": {}, "types": {}}
    for tag in tags:
        commit = subprocess.run(
            ["git", "--git-dir", git_dir, "rev-parse", tag], check=True, capture_output=True, text=True
        ).stdout.strip()
        source = subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"{commit}:{MODEL_PY}"], check=True, capture_output=True, text=True
        ).stdout
        result["tags"][tag] = commit
        for model_type, entry in read_registry(source).items():
            have = result["types"].get(model_type)
            if have is None:
                result["types"][model_type] = {**entry, "tag": tag}
            elif entry["hf_model_id"]:
                have["hf_model_id"] = entry["hf_model_id"]
    return result


if __name__ == "__main__":
    json.dump(main(sys.argv[1], sys.argv[2:]), sys.stdout, indent=0, sort_keys=True)
    sys.stdout.write("\n")
