"""Catalog entries from NeMo 2's per-size model config dataclasses (NVIDIA/NeMo `nemo/collections/llm`).

NeMo 2 defines each checkpoint it trains as a dataclass over megatron-core's `TransformerConfig`
(`nemo/collections/llm/gpt/model/<family>.py`: `Starcoder2Config7B(Starcoder2Config)`, `Qwen3Config30B_A3B(...)`),
and names the Hugging Face checkpoint in two places, both read here: its fine-tuning recipe
(`nemo/collections/llm/recipes/<name>.py`: `model()` returns `run.Config(<Model>, config=run.Config(<Config>))`, or
a family helper that picks the class by the recipe's `NAME`; `finetune_recipe` calls
`default_finetune_recipe(model(), "<org>/<name>", ...)`, or passes its `resume_path` parameter, whose default is the
id), and the class's docstring when it links exactly one `https://huggingface.co/<org>/<name>`. No id is inferred.

Each class's fields are its annotated literal defaults, over those of its bases followed within NeMo's model files
and into megatron-core's `TransformerConfig` (read from the Megatron-LM mirror,
megatron/core/transformer/transformer_config.py); a default that is not a literal (`activation_func = F.silu`, a layer
spec) is skipped. The megatron-core fields are written as the transformers `config.json` they describe (the table
`CONFIG_KEYS`, as scripts/import_catalog_megatron.py writes Megatron flags), under the model_type of the NeMo family
(`FAMILIES`), and the catalog reads that config as it reads a local config.json (`arch_from_hf_config`). The files
are read from the bare git mirrors (`git show <commit>:<path>`) and parsed with `ast`; nothing is imported or run.

A config class leaves the vocabulary to the tokenizer (`GPTConfig.vocab_size = None`) unless it states it (a
vocabulary set by a base class in another family's file is another model's, and not taken). An entry without one
takes that of the checkpoint a base class is named for where the catalog holds it under the same model_type, else
the default of the transformers config class of its model_type, and is written `approximate` with that reason. An
entry is left out, with the reason, where its layers are not what a config.json of its model_type builds
(`LEFT_OUT_FAMILIES`, `LEFT_OUT_CLASSES`) or its count is more than `SIZE_TOLERANCE` off the size its name states.
An id the catalog already holds is not written but compared field by field (`checked`, with the differences:
findings; a field the class does not state is not compared).

Megatron-Bridge (NVIDIA-NeMo/Megatron-Bridge `src/megatron/bridge/models/**/*_provider.py`) held per-size provider
dataclasses of the same kind (`Ministral3ModelProvider3B(Ministral3ModelProvider)`) until it dropped them for
providers filled from the checkpoint's config.json at run time; they are read at the last commit holding them
(`BRIDGE_COMMIT`), each named by the one Hub id its docstring links, into models_imported_bridge.json.

    python scripts/import_catalog_nemo.py [--git-dir /work/.mirror/NVIDIA+NeMo/repo] [--commit HEAD]
        [--megatron-git-dir /work/.mirror/NVIDIA+Megatron-LM/repo] [--megatron-commit HEAD]
        [--bridge-git-dir /work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo] [--bridge-commit 217de1a2e^] [--check]

`--check` writes nothing and exits 1 when a data file differs from what the sources give now.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "server" / "vramlens" / "knowledge" / "data" / "models_imported_nemo.json"
DEFAULT_GIT_DIR = Path("/work/.mirror/NVIDIA+NeMo/repo")
DEFAULT_MEGATRON_GIT_DIR = Path("/work/.mirror/NVIDIA+Megatron-LM/repo")
MODELS = "nemo/collections/llm/gpt/model"
RECIPES = "nemo/collections/llm/recipes"
# megatron-core's config classes NeMo's configs extend (`TransformerConfig`, DeepSeek's `MLATransformerConfig`)
MCORE_FILES = ("megatron/core/transformer/transformer_config.py", "megatron/core/model_parallel_config.py")
SIZE_TOLERANCE = 0.15  # parameters against the size the name states

sys.path.insert(0, str(ROOT / "server"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from import_catalog import importer_args, write_or_check  # noqa: E402
from import_catalog_transformers import _catalog_without, _checked, _mapped, sized  # noqa: E402

_MARK = "NVIDIA/NeMo "
_BRIDGE_MARK = "NVIDIA-NeMo/Megatron-Bridge"
BRIDGE_OUT = OUT.parent / "models_imported_bridge.json"
DEFAULT_BRIDGE_GIT_DIR = Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")
BRIDGE_MODELS = "src/megatron/bridge/models"
# Megatron-Bridge b4cd23b14f7f ("Remove size-specific provider classes", 2026-05-20) and 217de1a2e ("remove specific
# model provider dataclasses", 2026-03-16) dropped the per-size providers: since then every provider is filled from
# the checkpoint's config.json at run time. The parent of 217de1a2e is the last commit holding them all.
BRIDGE_COMMIT = "217de1a2e^"
_HF_LINK = re.compile(r"https://huggingface\.co/([A-Za-z0-9][\w.\-]*/[\w.\-]+?)(?:/|\b(?![\w.\-/]))")

# NeMo model file -> the transformers model_type its configs build (each file's HF importer/exporter names the
# transformers class it converts: llama.py `HFLlamaImporter` LlamaForCausalLM, starcoder2.py Starcoder2ForCausalLM,
# qwen3.py Qwen3ForCausalLM / Qwen3MoeForCausalLM, gemma3.py Gemma3ForCausalLM, phi3mini.py Phi3ForCausalLM,
# mixtral.py MixtralForCausalLM, deepseek.py DeepseekV3ForCausalLM / DeepseekV2ForCausalLM, starcoder.py
# GPTBigCodeForCausalLM, llama_nemotron.py LlamaForCausalLM for its homogeneous sizes)
FAMILIES = {
    "llama.py": "llama",
    "llama_nemotron.py": "llama",
    "mistral.py": "mistral",
    "mixtral.py": "mixtral",
    "qwen2.py": "qwen2",
    "qwen3.py": "qwen3",
    "starcoder2.py": "starcoder2",
    "starcoder.py": "gpt_bigcode",
    "gemma.py": "gemma",
    "gemma2.py": "gemma2",
    "gemma3.py": "gemma3_text",
    "phi3mini.py": "phi3",
    "deepseek.py": "deepseek_v3",
    "gpt_oss.py": "gpt_oss",
    "baichuan.py": "baichuan",
    "chatglm.py": "chatglm",
    "nemotron.py": "nemotron",
}
# a mixture of experts in these files is another model_type (transformers' MoE class of the family)
MOE_FAMILIES = {"qwen3": "qwen3_moe", "qwen2": "qwen2_moe"}
# classes of a file that build another model_type than the file's others, by the class they extend (deepseek.py
# `HFDeepSeekImporter`: DeepSeek-V2 and V2-Lite are DeepseekV2ForCausalLM checkpoints, `is_v3` only for V3)
CLASS_TYPES = {"DeepSeekV2Config": "deepseek_v2"}
CLASS_TYPES |= {"DeepSeekV2ModelProvider": "deepseek_v2", "DeepSeekV2LiteModelProvider": "deepseek_v2"}
# Megatron-Bridge's qwen_provider.py holds Qwen2 / Qwen2.5, Qwen3 and Qwen3-MoE providers (qwen/qwen2_bridge.py,
# qwen3_bridge.py, qwen3_moe_bridge.py register them for Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM)
CLASS_TYPES |= {"Qwen3ModelProvider": "qwen3", "Qwen3MoEModelProvider": "qwen3_moe"}
CLASS_TYPES |= {"Qwen3NextModelProvider": "qwen3_next"}
# Megatron-Bridge provider file -> model_type (the transformers class its bridge registers as `source`, at
# 217de1a2e^: glm/glm45_bridge.py Glm4MoeForCausalLM, ministral3/ministral3_bridge.py Mistral3ForConditionalGeneration
# (whose text model is transformers' ministral3), mistral/mistral_bridge.py MistralForCausalLM, deepseek_v3_bridge.py
# DeepseekV3ForCausalLM)
BRIDGE_FAMILIES = {
    "qwen_provider.py": "qwen2",
    "deepseek_provider.py": "deepseek_v3",
    "glm45_provider.py": "glm4_moe",
    "ministral3_provider.py": "ministral3",
    "mistral_provider.py": "mistral",
    "llama_provider.py": "llama",
}
# model_types whose entry is written approximate, and why
APPROXIMATE_FAMILIES = {
    # ministral3_provider.py `Ministral3ModelProvider`: the language model of a Mistral3ForConditionalGeneration
    # checkpoint; its Pixtral vision tower and projector are built by the bridge from the checkpoint's config.json
    "ministral3": ("the vision tower and projector of the checkpoint are not in the provider: language model only",),
    # Qwen3-Next's gated DeltaNet layers are set by a layer spec (not a literal default)
    "qwen3_next": ("the linear-attention layer pattern is not in the provider: every layer read as attention",),
}
# classes (and those extending them) whose layers a config.json of the file's model_type does not build
LEFT_OUT_CLASSES = {
    # llama.py `Llama4Config`: MoE layers every `moe_layer_freq`, a shared expert, chunked attention and QK L2 norms
    # (transformers' llama4_text), not a Llama decoder with experts
    "Llama4Config": "Llama 4's interleaved MoE layers, shared expert and chunked attention are not a `llama` config",
    # llama_nemotron.py: per-layer block_configs (DeciLM / nemotron-nas: layers without attention, FFN widths by
    # layer) that no config.json of a homogeneous model_type holds
    "HeterogeneousTransformerConfig": "heterogeneous layers (per-layer block_configs, DeciLM / nemotron-nas)",
}
# model_types whose NeMo config does not give the layers the config.json mapping builds
LEFT_OUT_FAMILIES = {
    # remote code (`auto_map`): the catalog holds their published config.json (models_imported_remote.json)
    "baichuan": "remote-code model: its published config.json is the catalog's source",
    "chatglm": "remote-code model: its published config.json is the catalog's source",
    # nemotron.py: squared-ReLU MLP and LayerNorm1p (`activation_func = squared_relu`, not a literal default)
    "nemotron": "Nemotron's squared-ReLU MLP is set by a non-literal default (activation_func)",
}
# megatron-core TransformerConfig field -> transformers config.json key (the keys arch_from_hf_config and the
# transformers config classes read); MoE keys by model_type below
CONFIG_KEYS = {
    "num_layers": "num_hidden_layers",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_attention_heads",
    "num_query_groups": "num_key_value_heads",
    "kv_channels": "head_dim",
    "ffn_hidden_size": "intermediate_size",
    "vocab_size": "vocab_size",
    "share_embeddings_and_output_weights": "tie_word_embeddings",
    "moe_router_topk": "num_experts_per_tok",
    "moe_ffn_hidden_size": "moe_intermediate_size",
    # MLATransformerConfig (DeepSeek): q_lora_rank, kv_lora_rank, qk_head_dim (the part without RoPE),
    # qk_pos_emb_head_dim, v_head_dim
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "qk_head_dim": "qk_nope_head_dim",
    "qk_pos_emb_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim",
}
# the number of routed experts as each model_type's config class names it
EXPERTS_KEY = {"mixtral": "num_local_experts", "qwen3_moe": "num_experts", "qwen2_moe": "num_experts"}
EXPERTS_KEY |= {"deepseek_v2": "n_routed_experts", "deepseek_v3": "n_routed_experts", "gpt_oss": "num_local_experts"}
EXPERTS_KEY |= {"glm4_moe": "n_routed_experts", "qwen3_next": "num_experts"}
# model_types that count shared experts (`n_shared_experts` of the routed experts' width) and leading dense layers
# (`first_k_dense_replace`) as DeepSeek does (transformers 5.24 DeepseekV3Config, Glm4MoeConfig)
DEEPSEEK = ("deepseek_v2", "deepseek_v3", "glm4_moe")


def git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True, text=True).stdout


# ----------------------------------------------------------------------------------------------- config classes


class ClassIndex:
    """The classes of a set of files, keyed `path::Name`, with how each file names the classes it imports (a
    provider's `MLATransformerConfig` may be its own subclass of megatron-core's, imported as
    `MCoreMLATransformerConfig`)."""

    def __init__(self) -> None:
        self.classes: dict[str, tuple[str, ast.ClassDef]] = {}
        self.by_name: dict[str, list[str]] = {}
        self.imports: dict[str, dict[str, tuple[str, str]]] = {}  # path -> local name -> (module, name)
        # module-level literal constants of every file, by name (a file imports them from another:
        # llama_nemotron.py's heterogeneous layer JSON from llama_nemotron_config.py)
        self.constants: dict[str, Any] = {}

    def add(self, path: str, source: str) -> None:
        module = ast.parse(source)
        imported = self.imports.setdefault(path, {})
        for node in module.body:
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    imported[alias.asname or alias.name] = (node.module, alias.name)
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    self.constants.setdefault(node.targets[0].id, ast.literal_eval(node.value))
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    continue
        for node in module.body:
            if isinstance(node, ast.ClassDef):
                key = f"{path}::{node.name}"
                self.classes[key] = (path, node)
                self.by_name.setdefault(node.name, []).append(key)

    def lookup(self, name: str, path: str | None = None) -> str | None:
        """The class a file means by `name`: its own, the one it imports (by module path), else the one class of
        that name in the index."""
        if path is not None:
            if f"{path}::{name}" in self.classes:
                return f"{path}::{name}"
            if name in self.imports.get(path, {}):
                module, original = self.imports[path][name]
                suffix = module.replace(".", "/") + ".py"
                hits = [k for k in self.by_name.get(original, []) if k.split("::")[0].endswith(suffix)]
                if hits:
                    return hits[0]
                name = original
        keys = self.by_name.get(name, [])
        return keys[0] if len(keys) == 1 else None

    def _bases(self, key: str) -> list[str | None]:
        path, node = self.classes[key]
        return [self.lookup(b.id, path) if isinstance(b, ast.Name) else None for b in node.bases]

    def mro(self, key: str, seen: frozenset[str] = frozenset()) -> list[str]:
        """The class's method resolution order over the indexed classes (C3, as Python computes it; a base outside
        the index is left out)."""
        if key not in self.classes or key in seen:
            return []
        bases = [b for b in self._bases(key) if b is not None]
        pending = [self.mro(b, seen | {key}) for b in bases] + [bases]
        out = [key]
        while any(pending):
            pending = [seq for seq in pending if seq]
            head = next((seq[0] for seq in pending if not any(seq[0] in other[1:] for other in pending)), None)
            if head is None:  # not linearisable: depth-first order
                head = pending[0][0]
            out.append(head)
            pending = [[c for c in seq if c != head] for seq in pending]
        return out

    def fields(self, key: str) -> dict[str, Any]:
        """The literal defaults of the class: each field from the first class of its MRO that sets it; a default
        that is not a literal leaves the field out."""
        out: dict[str, Any] = {}
        for cls in reversed(self.mro(key)):
            for stmt in self.classes[cls][1].body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value):
                    continue
                value = _literal(stmt.value, self.constants)
                if value is not _SKIP:
                    out[stmt.target.id] = value
                else:
                    out.pop(stmt.target.id, None)  # a non-literal default replaces the base's
        return out

    def setter(self, key: str, field: str) -> str | None:
        """The class (key) whose default of `field` the class takes: the first of its MRO that sets it."""
        for cls in self.mro(key):
            for stmt in self.classes[cls][1].body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == field:
                    return cls
        return None

    def ancestors(self, key: str) -> list[str]:
        """The class and those it extends (keys; a base outside the index by its bare name)."""
        out, todo = [], [key]
        while todo:
            cls = todo.pop(0)
            if cls in out:
                continue
            out.append(cls)
            if cls in self.classes:
                path, node = self.classes[cls]
                for b in node.bases:
                    if isinstance(b, ast.Name):
                        todo.append(self.lookup(b.id, path) or b.id)
        return out

    def file_of(self, key: str) -> str:
        return self.classes[key][0]

    def docstring(self, key: str) -> str:
        return ast.get_docstring(self.classes[key][1]) or ""


def name_of(key: str) -> str:
    return key.rsplit("::", 1)[-1]


_SKIP = object()


def _literal(node: ast.expr, constants: dict[str, Any]) -> Any:
    """A literal default, a module constant that is one, or `_SKIP`. Sums and products of whole numbers and lists
    (`25256 * 8`, `[0] + [1] * 59`) and `field(default_factory=lambda: <literal>)` count as literals."""
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    if isinstance(node, ast.Call) and ast.unparse(node.func) in ("field", "dataclasses.field"):
        factory = next((k.value for k in node.keywords if k.arg == "default_factory"), None)
        default = next((k.value for k in node.keywords if k.arg == "default"), None)
        if isinstance(factory, ast.Lambda):
            return _literal(factory.body, constants)
        return _literal(default, constants) if default is not None else _SKIP
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add)):
        left, right = _literal(node.left, constants), _literal(node.right, constants)
        numbers = [v for v in (left, right) if isinstance(v, int) and not isinstance(v, bool)]
        lists = [v for v in (left, right) if isinstance(v, list)]
        if len(numbers) + len(lists) == 2 and len(numbers) >= (1 if isinstance(node.op, ast.Mult) else 2 - len(lists)):
            if isinstance(node.op, ast.Mult) and numbers and max(numbers) <= 100_000:
                return left * right
            if isinstance(node.op, ast.Add) and len(numbers) != 1:
                return left + right
        return _SKIP
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _SKIP


# ----------------------------------------------------------------------------------------------- recipes


def _call_name(node: ast.expr) -> str:
    return ast.unparse(node.func) if isinstance(node, ast.Call) else ""


def _config_classes(node: ast.AST, index: ClassIndex, path: str) -> list[str]:
    """Config classes (keys) given to `run.Config(...)` anywhere under `node`, as the file at `path` names them."""
    out = []
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and _call_name(call) == "run.Config" and call.args:
            first = call.args[0]
            if isinstance(first, ast.Name) and "Config" in first.id and (key := index.lookup(first.id, path)):
                out.append(key)
    return out


def _functions(module: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in module.body if isinstance(n, ast.FunctionDef)}


def _constants(module: ast.Module) -> dict[str, Any]:
    out = {}
    for n in module.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            if isinstance(n.value, ast.Constant):
                out[n.targets[0].id] = n.value.value
    return out


def recipe_model(name: str, sources: dict[str, str], index: ClassIndex) -> tuple[str | None, str | None, str]:
    """(Hugging Face id, config class, why not) of one recipe module: the id its `finetune_recipe` gives
    `default_finetune_recipe`, the class its `model()` configures (directly, or through the family helper the
    recipe calls with its `NAME`)."""
    module = ast.parse(sources[name])
    functions, constants = _functions(module), _constants(module)
    finetune, model = functions.get("finetune_recipe"), functions.get("model")
    if finetune is None or model is None:
        return None, None, "no finetune_recipe() and model()"
    hf_id = None
    for call in ast.walk(finetune):
        if isinstance(call, ast.Call) and _call_name(call) == "default_finetune_recipe" and len(call.args) > 1:
            arg = call.args[1]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                hf_id = arg.value
            elif isinstance(arg, ast.Name):
                params = finetune.args.args[-len(finetune.args.defaults) :] if finetune.args.defaults else []
                for param, default in zip(params, finetune.args.defaults):
                    if param.arg == arg.id and isinstance(default, ast.Constant) and isinstance(default.value, str):
                        hf_id = default.value
    if not hf_id or not re.fullmatch(r"[A-Za-z0-9][\w.\-]*/[\w.\-]+", hf_id):
        return None, None, f"finetune_recipe names no Hub id ({hf_id!r})"
    classes = _config_classes(model, index, f"{RECIPES}/{name}")
    if not classes:  # `<family>_model(version=NAME)`: the helper's branch for this recipe's NAME
        for call in ast.walk(model):
            if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
                continue
            version = next((k.value for k in call.keywords if k.arg == "version"), call.args[0] if call.args else None)
            wanted = constants.get(version.id) if isinstance(version, ast.Name) else getattr(version, "value", None)
            helper, where = _helper(call.func.id, module, sources, name)
            if helper is not None and isinstance(wanted, str):
                classes = _branch(helper, wanted, index, f"{RECIPES}/{where}")
    if len(set(classes)) != 1:
        return hf_id, None, f"model() configures {sorted(set(classes)) or 'no'} config class"
    return hf_id, classes[0], ""


def _helper(func: str, module: ast.Module, sources: dict[str, str], name: str) -> tuple[ast.FunctionDef | None, str]:
    """The family helper `func` the recipe `name` imports from another recipe module, and that module's file."""
    for node in module.body:
        if isinstance(node, ast.ImportFrom) and node.module and any(a.name == func for a in node.names):
            other = node.module.rsplit(".", 1)[-1] + ".py"
            if other in sources:
                return _functions(ast.parse(sources[other])).get(func), other
    return _functions(module).get(func), name


def _branch(helper: ast.FunctionDef, version: str, index: ClassIndex, path: str) -> list[str]:
    """The config classes of the `if version == "<version>":` branch of a family helper."""
    for node in ast.walk(helper):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            right = node.test.comparators[0] if node.test.comparators else None
            if isinstance(right, ast.Constant) and right.value == version:
                return [c for stmt in node.body for c in _config_classes(stmt, index, path)]
    return []


# ----------------------------------------------------------------------------------------------- config.json


def hf_config(fields: dict[str, Any], model_type: str) -> dict[str, Any]:
    """The transformers config.json the megatron-core fields describe (megatron-core `TransformerConfig.__post_init__`
    completes `num_query_groups` = heads, `kv_channels` = hidden // heads, `ffn_hidden_size` = 4 · hidden)."""
    experts = fields.get("num_moe_experts")
    if experts and model_type in MOE_FAMILIES:
        model_type = MOE_FAMILIES[model_type]
    config: dict[str, Any] = {"model_type": model_type}
    for field, key in CONFIG_KEYS.items():
        if fields.get(field) is not None:
            config[key] = fields[field]
    heads, hidden = config["num_attention_heads"], config["hidden_size"]
    config.setdefault("num_key_value_heads", heads)
    config.setdefault("head_dim", hidden // heads)
    config.setdefault("intermediate_size", 4 * hidden)
    config["attention_bias"] = bool(fields.get("add_qkv_bias") or fields.get("add_bias_linear"))
    if not fields.get("multi_latent_attention"):
        for key in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            config.pop(key, None)
    if experts:
        config[EXPERTS_KEY.get(model_type, "num_local_experts")] = experts
        shared = fields.get("moe_shared_expert_intermediate_size")
        if shared and model_type in DEEPSEEK:
            config["n_shared_experts"] = shared // fields["moe_ffn_hidden_size"]
        elif shared:
            config["shared_expert_intermediate_size"] = shared
        freq = fields.get("moe_layer_freq")
        if isinstance(freq, list) and model_type in DEEPSEEK:
            config["first_k_dense_replace"] = next((i for i, f in enumerate(freq) if f), len(freq))
    else:
        config.pop("num_experts_per_tok", None)
        config.pop("moe_intermediate_size", None)
    return config


def vocab_default(model_type: str) -> int | None:
    """The vocabulary of the transformers config class of `model_type` (its default)."""
    from transformers import AutoConfig

    try:
        return int(AutoConfig.for_model(model_type).vocab_size)
    except (ValueError, KeyError, AttributeError, TypeError):
        return None


# ----------------------------------------------------------------------------------------------- build


def _index(
    git_dir: Path, sha: str, folders: list[str], megatron_dir: Path, megatron_sha: str, recursive: bool = False
) -> ClassIndex:
    """The config classes of `folders` (and, with `recursive`, their subfolders) and megatron-core's."""
    index = ClassIndex()
    for folder in folders:
        listing = git(git_dir, "ls-tree", *(["-r"] if recursive else []), "--name-only", sha, f"{folder}/").split()
        for path in listing:
            if path.endswith(".py"):
                index.add(path, git(git_dir, "show", f"{sha}:{path}"))
    for path in MCORE_FILES:
        index.add(path, git(megatron_dir, "show", f"{megatron_sha}:{path}"))
    return index


def _named(
    index: ClassIndex, sources: dict[str, str], folder: str
) -> tuple[dict[str, tuple[str, str]], list[dict[str, str]]]:
    """Config class -> (Hugging Face id, where the id is named): recipes first, then class docstrings."""
    named: dict[str, tuple[str, str]] = {}
    left_out = []
    for name in sorted(sources):
        hf_id, cls, why = recipe_model(name, sources, index)
        if hf_id is None and why.startswith("no finetune"):
            continue
        if cls is None:
            left_out.append({"file": f"{RECIPES}/{name}", "why": why})
            continue
        named.setdefault(cls, (str(hf_id), f"{RECIPES}/{name} finetune_recipe"))
    for cls, (path, _node) in sorted(index.classes.items()):
        if cls in named or not path.startswith(folder):
            continue
        links = {m.group(1).rstrip(".") for m in _HF_LINK.finditer(index.docstring(cls))}
        links = {link for link in links if not link.startswith(("docs/", "papers/", "spaces/", "datasets/"))}
        if len(links) == 1:
            named[cls] = (links.pop(), f"{path} {name_of(cls)} docstring")
    return named, left_out


def _vocabulary(
    bases: list[str], named: dict[str, tuple[str, str]], catalog: dict[str, Any], model_type: str
) -> tuple[int | None, str]:
    """The vocabulary of a config that states none, and whose: that of the checkpoint a base class of it is named
    for, where the catalog has it with the same model_type (Llama31NemotronNano8BConfig extends Llama31Config8B, which
    NeMo's llama31_8b recipe names meta-llama/Llama-3.1-8B); else the default of the transformers config class of
    its model_type (a family whose tokenizer changed, Ministral 3 under Mistral 7B's provider, takes that)."""
    for base in bases:
        known = catalog.get(named[base][0].lower()) if base in named else None
        if known is not None and known.family == model_type:
            return known.vocab, f"that of {known.id} (catalog), the checkpoint named for its base {name_of(base)}"
    vocab = vocab_default(model_type)
    return vocab, f"the default of transformers' {model_type} config class"


def convert(
    named: dict[str, tuple[str, str]], index: ClassIndex, families: dict[str, str], cite: str, catalog: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """(entries, comparisons with the catalog, left out, report lines) for the named config classes; `cite` opens
    each entry's source (repository and commit)."""
    models: list[dict[str, Any]] = []
    checked: list[dict[str, Any]] = []
    left_out: list[dict[str, Any]] = []
    report: list[str] = []
    for cls, (hf_id, where) in sorted(named.items(), key=lambda kv: kv[1][0].lower()):
        path = index.file_of(cls)
        family = families.get(path.rsplit("/", 1)[-1])
        ancestors = index.ancestors(cls)
        bare = [name_of(a) for a in ancestors]
        family = next((CLASS_TYPES[a] for a in bare if a in CLASS_TYPES), family)
        record = {"id": hf_id, "class": name_of(cls), "file": path}
        if family is None:
            left_out.append(record | {"why": f"{path.rsplit('/', 1)[-1]}: no transformers model_type mapped"})
            continue
        excluded = next((LEFT_OUT_CLASSES[a] for a in bare if a in LEFT_OUT_CLASSES), None)
        if excluded:
            left_out.append(record | {"why": excluded})
            continue
        if family in LEFT_OUT_FAMILIES:
            left_out.append(record | {"why": LEFT_OUT_FAMILIES[family]})
            continue
        fields = index.fields(cls)
        if not all(isinstance(fields.get(k), int) for k in ("num_layers", "hidden_size", "num_attention_heads")):
            left_out.append(record | {"why": "the class states no literal layer count, width or heads"})
            continue
        if (setter := index.setter(cls, "vocab_size")) and index.file_of(setter) != path:
            # a vocabulary set by a base class of another file is another model's (MistralModelProvider's 32768
            # under Ministral3ModelProvider): the tokenizer's, not stated for this checkpoint
            fields.pop("vocab_size", None)
        config = hf_config(fields, family)
        assumed = list(APPROXIMATE_FAMILIES.get(family, ()))
        if "vocab_size" not in config:
            vocab, whose = _vocabulary(ancestors[1:], named, catalog, config["model_type"])
            if vocab is None:
                left_out.append(record | {"why": "no vocabulary in the config and none to default to"})
                continue
            config["vocab_size"] = vocab
            assumed.append(f"vocabulary not in the config class (it comes from the tokenizer): {vocab}, {whose}")
        arch = _mapped(config, hf_id)
        if arch is None:
            left_out.append(record | {"why": "its config does not map to an architecture"})
            continue
        source = f"{cite} {path} {name_of(cls)} (Hub id: {where})"
        if (known := catalog.get(hf_id.lower())) is not None:
            record = _checked(hf_id, arch, known, **{"class": name_of(cls), "file": path})
            if fields.get("vocab_size") is None:  # not stated by the class: nothing to compare
                record["differs"].pop("vocab", None)
                record["vocab"] = None
            checked.append(record)
            continue
        total, stated, what = sized(hf_id, arch)
        if stated and abs(total / stated - 1) > SIZE_TOLERANCE:
            left_out.append(record | {"why": f"{total:.2f} B{what} against the {stated:g} B its name states"})
            continue
        entry: dict[str, Any] = {"id": hf_id, "source": source, "config": config}
        if assumed:
            entry["approximate"] = "; ".join(assumed)
        models.append(entry)
        report.append(f"  {hf_id} ({name_of(cls)}): {total:.2f} B" + (" (approximate)" if assumed else ""))
    for r in checked:
        if r["differs"]:
            report.append(f"  DIFFERS {r['id']} ({r['class']}, catalog {r['catalog']}): {r['differs']}")
    report += [f"  left out {e.get('id', e.get('file'))}: {e['why']}" for e in left_out]
    return models, sorted(checked, key=lambda m: m["id"].lower()), left_out, report


def build(git_dir: Path, commit: str, megatron_dir: Path, megatron_commit: str) -> tuple[dict[str, Any], list[str]]:
    """models_imported_nemo.json from NeMo 2's recipes and config classes."""
    sha = git(git_dir, "rev-parse", f"{commit}^{{commit}}").strip()
    msha = git(megatron_dir, "rev-parse", f"{megatron_commit}^{{commit}}").strip()
    index = _index(git_dir, sha, [MODELS], megatron_dir, msha)
    recipes = [p for p in git(git_dir, "ls-tree", "--name-only", sha, f"{RECIPES}/").split() if p.endswith(".py")]
    sources = {p.rsplit("/", 1)[-1]: git(git_dir, "show", f"{sha}:{p}") for p in recipes}
    named, unnamed = _named(index, sources, MODELS)
    cite = f"NVIDIA/NeMo {sha[:12]}"
    models, checked, left_out, report = convert(named, index, FAMILIES, cite, _catalog_without(_MARK, _BRIDGE_MARK))
    report.insert(0, f"{cite}: {len(named)} config classes named with a Hub id")
    data = {
        "source": f"NVIDIA/NeMo {MODELS}/*.py and {RECIPES}/*.py at {sha}; megatron-core defaults from "
        f"NVIDIA/Megatron-LM {MCORE_FILES[0]} at {msha}",
        "generated_by": "scripts/import_catalog_nemo.py",
        "models": models,
        "checked": checked,
        "left_out": unnamed + left_out,
    }
    return data, report


def build_bridge(
    git_dir: Path, commit: str, megatron_dir: Path, megatron_commit: str
) -> tuple[dict[str, Any], list[str]]:
    """models_imported_bridge.json from Megatron-Bridge's per-size provider dataclasses (their docstring ids)."""
    sha = git(git_dir, "rev-parse", f"{commit}^{{commit}}").strip()
    msha = git(megatron_dir, "rev-parse", f"{megatron_commit}^{{commit}}").strip()
    index = _index(git_dir, sha, [BRIDGE_MODELS], megatron_dir, msha, recursive=True)
    named, unnamed = _named(index, {}, BRIDGE_MODELS)
    cite = f"NVIDIA-NeMo/Megatron-Bridge {sha[:12]}"
    models, checked, left_out, report = convert(named, index, BRIDGE_FAMILIES, cite, _catalog_without(_BRIDGE_MARK))
    report.insert(0, f"{cite}: {len(named)} provider classes whose docstring links one Hub id")
    data = {
        "source": f"NVIDIA-NeMo/Megatron-Bridge {BRIDGE_MODELS}/**/*_provider.py at {sha}; megatron-core defaults "
        f"from NVIDIA/Megatron-LM {MCORE_FILES[0]} at {msha}",
        "generated_by": "scripts/import_catalog_nemo.py --bridge",
        "models": models,
        "checked": checked,
        "left_out": unnamed + left_out,
    }
    return data, report


def main(argv: list[str] | None = None) -> int:
    parser = importer_args((__doc__ or "").splitlines()[0], DEFAULT_GIT_DIR)
    parser.add_argument("--megatron-git-dir", type=Path, default=DEFAULT_MEGATRON_GIT_DIR)
    parser.add_argument("--megatron-commit", default="HEAD")
    parser.add_argument("--bridge-git-dir", type=Path, default=DEFAULT_BRIDGE_GIT_DIR)
    parser.add_argument("--bridge-commit", default=BRIDGE_COMMIT)
    args = parser.parse_args(argv)
    data, report = build(args.git_dir, args.commit, args.megatron_git_dir, args.megatron_commit)
    bridge, bridge_report = build_bridge(args.bridge_git_dir, args.bridge_commit, args.megatron_git_dir, "HEAD")
    print("\n".join(report + bridge_report), file=sys.stderr)
    summary = ", ".join(
        f"{len(d['models'])} models, {len(d['checked'])} checked, {len(d['left_out'])} left out" for d in (data, bridge)
    )
    outputs = {OUT: json.dumps(data, indent=1) + "\n", BRIDGE_OUT: json.dumps(bridge, indent=1) + "\n"}
    return write_or_check(outputs, "import_catalog_nemo.py", args.check, summary)


if __name__ == "__main__":
    sys.exit(main())
