"""Dump ms-swift 1.x/2.x's model registry (`--model_type` → model id and default LoRA targets) from its own source.

ms-swift 1.x and 2.x name a model by `--model_type qwen-7b-chat`; `swift/llm/utils/model.py` registers each type with
`@register_model(ModelType.qwen_7b_chat, 'qwen/Qwen-7B-Chat', LoRATM.qwen, …, hf_model_id='Qwen/Qwen-7B-Chat')`
(ModelScope id first; `hf_model_id` from 2.x). `--lora_target_modules DEFAULT` means the type's registered targets.
The file is read with `ast` (never imported), from a git checkout of modelscope/ms-swift at each tag:

    python scripts/dump_swift_model_types.py /path/to/ms-swift.git v1.7.3 v2.6.1 --also v1.3.0 v1.4.0 v1.5.0 \
        v1.6.0 v2.0.0 v2.1.0 v2.2.0 v2.3.0 v2.4.0 v2.5.0 > server/vramlens/knowledge/data/ms_swift_model_types.json

Output: {"tags": {tag: commit}, "types": {model_type: {"model_id", "hf_model_id", "lora_targets", "tag"[, "quant"]}}}
("quant": [method, bits] of a checkpoint stored quantized, `stored_quant`); a type
takes the oldest tag's model id and targets (the 1.x reading) and the newest tag's `hf_model_id`. The tags after
`--also` only add the types the main tags do not register (names renamed or dropped since: v1.5.0's `cogagent-chat`
became v1.7.3's `cogagent-18b-chat`). At every tag the example entry points' own registry is read too:
examples/pytorch/llm/llm_sft.py does `import custom`, whose examples/pytorch/llm/custom.py registers more types
(`CustomModelType.tigerbot_7b`, with swift's `LoRATM` targets) for the example scripts beside it.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

MODEL_PY = "swift/llm/utils/model.py"
CUSTOM_PY = "examples/pytorch/llm/custom.py"


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


def read_registry(source: str, lora_tm: dict[str, object] | None = None) -> dict[str, dict]:
    """The `register_model` calls of a module: its own `ModelType`/`CustomModelType` names, and `LoRATM` from the
    module itself or (custom.py, which imports swift's) from `lora_tm`."""
    tree = ast.parse(source)
    types = {**_class_constants(tree, "ModelType"), **_class_constants(tree, "CustomModelType")}
    targets = lora_tm if lora_tm is not None else _class_constants(tree, "LoRATM")

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
        entry = {
            "model_id": model_id if isinstance(model_id, str) else None,
            "hf_model_id": hf_id if isinstance(hf_id, str) else None,
            "lora_targets": list(lora) if isinstance(lora, (list, tuple)) else None,
        }
        quant = stored_quant(resolve(kw.get("requires"), {}), resolve(kw.get("function_kwargs"), {}), model_type)
        if quant is not None:
            entry["quant"] = quant
        out[model_type] = entry
    return out


# the quantization library a registered checkpoint requires: its weights are stored quantized by it
# (`requires=['auto_gptq>=0.5']` with `function_kwargs={'gptq_bits': 4}`, `requires=['autoawq']`,
# `requires=['bitsandbytes<0.41.2', …]` for Baichuan2's `-4bits` checkpoints)
_QUANT_LIBRARIES = (("auto_gptq", "gptq"), ("autoawq", "awq"), ("bitsandbytes", "nf4"))


def stored_quant(requires: object, function_kwargs: object, model_type: str) -> list | None:
    """[method, bits] of a type whose registered checkpoint is stored quantized, else None: the method from the
    library it requires; the bits from `gptq_bits` when literal, else 8 for an `-int8`/`8bit` type, else 4."""
    if not isinstance(requires, (list, tuple)):
        return None
    names = [str(r).split("<")[0].split(">")[0].split("=")[0].strip().lower() for r in requires]
    method = next((m for lib, m in _QUANT_LIBRARIES if lib in names), None)
    if method is None:
        return None
    bits = function_kwargs.get("gptq_bits") if isinstance(function_kwargs, dict) else None
    if not isinstance(bits, int):
        bits = 8 if ("int8" in model_type or "8bit" in model_type) else 4
    if method == "nf4" and bits == 8:
        method = "int8"
    return [method, bits]


def _show(git_dir: str, commit: str, path: str) -> str | None:
    done = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def main(git_dir: str, tags: list[str], also: list[str] = ()) -> dict:  # type: ignore[assignment]
    result: dict = {"source": f"modelscope/ms-swift {MODEL_PY}, {CUSTOM_PY}", "tags": {}, "types": {}}
    for tag in [*tags, *also]:
        extra = tag in also
        commit = subprocess.run(
            ["git", "--git-dir", git_dir, "rev-parse", tag], check=True, capture_output=True, text=True
        ).stdout.strip()
        source = _show(git_dir, commit, MODEL_PY)
        if source is None:
            raise SystemExit(f"{tag}: no {MODEL_PY}")
        result["tags"][tag] = commit
        registry = read_registry(source)
        custom = _show(git_dir, commit, CUSTOM_PY)
        if custom is not None:
            lora_tm = _class_constants(ast.parse(source), "LoRATM")
            for model_type, entry in read_registry(custom, lora_tm).items():
                registry.setdefault(model_type, {**entry, "file": CUSTOM_PY})
        for model_type, entry in registry.items():
            have = result["types"].get(model_type)
            if have is None:
                result["types"][model_type] = {**entry, "tag": tag}
            else:
                if entry["hf_model_id"] and not extra:
                    have["hf_model_id"] = entry["hf_model_id"]
                if "quant" in entry and "quant" not in have:
                    have["quant"] = entry["quant"]
    # a type only an older tag registers takes the Hub id a main tag pairs with the same ModelScope id (v1.5.0's
    # `cogagent-chat` → 'ZhipuAI/cogagent-chat', which v2.6.1's `cogagent-18b-chat` pairs with 'THUDM/cogagent-chat-hf')
    hub = {e["model_id"]: e["hf_model_id"] for e in result["types"].values() if e["model_id"] and e["hf_model_id"]}
    for entry in result["types"].values():
        if entry["hf_model_id"] is None and entry["model_id"] in hub and entry["tag"] in also:
            entry["hf_model_id"] = hub[entry["model_id"]]
    return result


if __name__ == "__main__":
    args = sys.argv[2:]
    cut = args.index("--also") if "--also" in args else len(args)
    json.dump(main(sys.argv[1], args[:cut], args[cut + 1 :]), sys.stdout, indent=0, sort_keys=True)
    sys.stdout.write("\n")
