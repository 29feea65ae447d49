"""Import model shapes from litgpt's config table into server/vramlens/knowledge/data/models_imported.json.

Source: Lightning-AI/litgpt `litgpt/config.py` — a list of `dict(name=..., hf_config=dict(org=..., name=...), n_layer,
n_embd, n_head, n_query_groups, intermediate_size, padded_vocab_size, ...)`, one per Hugging Face checkpoint, over the
defaults of its `Config` dataclass, completed by `Config.__post_init__` (head_size = n_embd // n_head,
padded_vocab_size = vocab_size rounded up to padding_multiple, n_query_groups = n_head, intermediate_size =
4 · n_embd). The file is read with `ast` from the bare git mirror (`git show <commit>:litgpt/config.py`) and its
module-level statements are interpreted by a small evaluator of data operations only (literals, `dict(...)`,
`deepcopy`, `str.format`, f-strings, list `append`/`extend`, `for` / `if` / `continue`); nothing from it is imported
or run.

What litgpt's table does not state is taken from `FAMILIES` below, one rule per group of litgpt names, each with its
source: the Hugging Face `model_type` (the catalog's `family`), whether the checkpoint ties its embeddings (litgpt's
conversion copies the embedding into `lm_head` either way: litgpt/scripts/convert_hf_checkpoint.py), and the
checkpoint's `torch_dtype`. A litgpt name no rule covers, or a shape the catalog cannot hold exactly, is skipped and
listed with the reason. Entries of the hand-written catalog (models.yaml) win: an imported id that is already a
catalog spelling is not written, but its fields are compared with the hand entry and recorded under `"checked"`
(tests/knowledge/test_catalog_import.py holds that they agree). `params_b` is the catalog's own `param_count`; it is
cross-checked against the size the name states ("7B", "1.1b", "300M"), and outliers beyond 15 % are reported.

    python scripts/import_catalog.py [--git-dir /work/.mirror/Lightning-AI+litgpt/repo] [--commit HEAD] [--check]

`--check` writes nothing and exits 1 when the data file differs from what the source gives now.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "server" / "vramlens" / "knowledge" / "data" / "models_imported.json"
DEFAULT_GIT_DIR = Path("/work/.mirror/Lightning-AI+litgpt/repo")
SOURCE_PATH = "litgpt/config.py"
SIZE_TOLERANCE = 0.15  # params_b against the size in the name


# ----------------------------------------------------------------------------------------------- evaluator


class Unsupported(Exception):
    """A construct outside the data operations the evaluator interprets."""


class _Continue(Exception):
    pass


_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Div: lambda a, b: a / b,
    ast.Mod: lambda a, b: a % b,
}
_COMPARE = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
}
# methods of plain data the table uses: nothing else is called
_METHODS = {
    (str, "format"),
    (str, "replace"),
    (str, "lower"),
    (str, "upper"),
    (dict, "copy"),
    (dict, "get"),
    (dict, "update"),
    (list, "append"),
    (list, "extend"),
    (list, "copy"),
}


class Evaluator:
    """Interprets module-level data statements of a parsed file; `skipped` lists the statements it left out."""

    def __init__(self) -> None:
        self.env: dict[str, Any] = {"True": True, "False": False, "None": None}
        self.skipped: list[str] = []

    def run(self, module: ast.Module) -> None:
        for stmt in module.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # docstring
            try:
                self.stmt(stmt)
            except Unsupported as exc:
                self.skipped.append(f"line {stmt.lineno}: {exc}")

    def block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.stmt(stmt)

    def stmt(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign):
            value = self.expr(node.value)
            for target in node.targets:
                self.assign(target, value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise Unsupported(ast.dump(node.op))
            self.env[node.target.id] = op(self.expr(node.target), self.expr(node.value))
        elif isinstance(node, ast.Expr):
            self.expr(node.value)
        elif isinstance(node, ast.For):
            for item in self.expr(node.iter):
                self.assign(node.target, item)
                try:
                    self.block(node.body)
                except _Continue:
                    continue
        elif isinstance(node, ast.If):
            self.block(node.body if self.expr(node.test) else node.orelse)
        elif isinstance(node, ast.Continue):
            raise _Continue
        elif isinstance(node, ast.Pass):
            return
        else:
            raise Unsupported(type(node).__name__)

    def assign(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
        elif isinstance(target, ast.Subscript):
            self.expr(target.value)[self.expr(target.slice)] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = list(value)
            if len(values) != len(target.elts):
                raise Unsupported("unpacking of a different length")
            for t, v in zip(target.elts, values):
                self.assign(t, v)
        else:
            raise Unsupported(f"assignment to {type(target).__name__}")

    def expr(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in self.env:
                raise Unsupported(f"name {node.id!r}")
            return self.env[node.id]
        if isinstance(node, ast.List):
            return [self.expr(e) for e in node.elts]
        if isinstance(node, ast.Tuple):
            return tuple(self.expr(e) for e in node.elts)
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise Unsupported("dict unpacking")
            return {self.expr(k): self.expr(v) for k, v in zip(node.keys, node.values) if k is not None}
        if isinstance(node, ast.Subscript):
            return self.expr(node.value)[self.expr(node.slice)]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](self.expr(node.left), self.expr(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
            value = self.expr(node.operand)
            return -value if isinstance(node.op, ast.USub) else not value
        if isinstance(node, ast.BoolOp):
            values = [self.expr(v) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.Compare):
            left = self.expr(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = self.expr(right_node)
                if type(op) not in _COMPARE or not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.JoinedStr):
            return "".join(self.expr(v) if not isinstance(v, ast.Constant) else str(v.value) for v in node.values)
        if isinstance(node, ast.FormattedValue):
            if node.format_spec is not None or node.conversion not in (-1, None):
                raise Unsupported("formatted value with a spec")
            return str(self.expr(node.value))
        if isinstance(node, ast.IfExp):
            return self.expr(node.body) if self.expr(node.test) else self.expr(node.orelse)
        if isinstance(node, ast.ListComp) and len(node.generators) == 1:
            gen = node.generators[0]
            out = []
            saved = dict(self.env)
            try:
                for item in self.expr(gen.iter):
                    self.assign(gen.target, item)
                    if all(self.expr(cond) for cond in gen.ifs):
                        out.append(self.expr(node.elt))
            finally:
                self.env = saved
            return out
        if isinstance(node, ast.Call):
            return self.call(node)
        raise Unsupported(type(node).__name__)

    def call(self, node: ast.Call) -> Any:
        args = [self.expr(a) for a in node.args]
        if any(k.arg is None for k in node.keywords):
            raise Unsupported("keyword unpacking")
        kwargs = {k.arg: self.expr(k.value) for k in node.keywords if k.arg is not None}
        func = node.func
        if isinstance(func, ast.Name) and func.id == "dict" and not args:
            return kwargs
        if isinstance(func, ast.Name) and func.id == "deepcopy" and len(args) == 1 and not kwargs:
            return copy.deepcopy(args[0])
        if isinstance(func, ast.Name) and func.id == "range" and all(isinstance(a, int) for a in args) and not kwargs:
            if len(args) > 3 or max((abs(a) for a in args), default=0) > 100_000:
                raise Unsupported("range")
            return range(*args)
        if isinstance(func, ast.Attribute):
            owner = self.expr(func.value)
            if (type(owner), func.attr) in _METHODS:
                return getattr(owner, func.attr)(*args, **kwargs)
            raise Unsupported(f"method {type(owner).__name__}.{func.attr}")
        raise Unsupported(f"call of {ast.unparse(func)}")


def dataclass_defaults(module: ast.Module, name: str) -> dict[str, Any]:
    """The literal defaults of a dataclass's annotated fields (`field(default_factory=dict)` → {})."""
    for node in module.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            defaults: dict[str, Any] = {}
            for stmt in node.body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value):
                    continue
                value = stmt.value
                if isinstance(value, ast.Call) and any(k.arg == "default_factory" for k in value.keywords):
                    factory = next(k.value for k in value.keywords if k.arg == "default_factory")
                    defaults[stmt.target.id] = {"dict": {}, "list": []}.get(ast.unparse(factory))
                else:
                    defaults[stmt.target.id] = ast.literal_eval(value)
            return defaults
    raise ValueError(f"no class {name} in the source")


def find_multiple(n: int, k: int) -> int:
    """litgpt/config.py `find_multiple`: n rounded up to a multiple of k."""
    return n if n % k == 0 else n + k - (n % k)


def litgpt_configs(source: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Every entry of litgpt's `configs` list over the `Config` defaults, completed as `Config.__post_init__` does
    (litgpt/config.py), and the statements the evaluator left out."""
    module = ast.parse(source)
    defaults = dataclass_defaults(module, "Config")
    evaluator = Evaluator()
    evaluator.env["deepcopy"] = copy.deepcopy
    evaluator.run(module)
    out = []
    for entry in evaluator.env.get("configs", []):
        c = {**defaults, **entry}
        if c.get("head_size") is None:
            c["head_size"] = c["n_embd"] // c["n_head"]
        if c.get("padded_vocab_size") is None:
            c["padded_vocab_size"] = find_multiple(c["vocab_size"], c["padding_multiple"])
        if c.get("n_query_groups") is None:
            c["n_query_groups"] = c["n_head"]
        if c.get("intermediate_size") is None:
            c["intermediate_size"] = 4 * c["n_embd"]
        out.append(c)
    return out, evaluator.skipped


# ----------------------------------------------------------------------------------------------- family rules


@dataclass(frozen=True)
class Family:
    """What litgpt's table does not state, for the litgpt names `pattern` matches (re.fullmatch)."""

    pattern: str
    model_type: str
    tied: bool
    dtype: str
    source: str


# Tied embeddings and checkpoint dtypes as the published config.json files state them. First match wins.
FAMILIES = (
    # EleutherAI/pythia-*: GPTNeoXForCausalLM, separate `embed_out`, "tie_word_embeddings": false, "torch_dtype":
    # "float16" (huggingface.co/EleutherAI/pythia-1b/blob/main/config.json; tests/fixtures/hub copy)
    Family(r"pythia-.*", "gpt_neox", False, "fp16", "pythia config.json: tie_word_embeddings false, float16"),
    # tiiuae/falcon-7b: one shared LayerNorm per parallel block (FalconConfig new_decoder_architecture false),
    # lm_head tied (FalconForCausalLM `_tied_weights_keys`), bfloat16
    Family(r"falcon-.*", "falcon", True, "bf16", "falcon-7b config.json: tied lm_head, bfloat16"),
    # tiiuae/Falcon3-*: LlamaForCausalLM, "tie_word_embeddings": false, bfloat16
    Family(r"Falcon3-.*", "llama", False, "bf16", "Falcon3 config.json: LlamaForCausalLM, untied, bfloat16"),
    # openlm-research/open_llama_*: LlamaForCausalLM, untied, float16
    Family(r"open_llama_.*", "llama", False, "fp16", "open_llama config.json: LlamaForCausalLM, untied, float16"),
    Family(r"Llama-2-.*-hf", "llama", False, "fp16", "Llama-2 *-hf config.json: untied, float16"),
    # Llama 3.2 1B/3B tie their embeddings (config.json "tie_word_embeddings": true; torchtune llama3_2 builders
    # `tie_word_embeddings=True`); every other Llama 3.x checkpoint is untied; all bfloat16
    Family(r"Llama-3\.2-[13]B.*", "llama", True, "bf16", "Llama-3.2 1B/3B config.json: tie_word_embeddings true"),
    Family(r"(Llama-3.*|R1-Distill-Llama-.*)", "llama", False, "bf16", "Llama 3.x config.json: untied, bfloat16"),
    Family(r"CodeLlama-.*", "llama", False, "bf16", "CodeLlama config.json: untied, bfloat16"),
    Family(r"OLMo-2-.*", "olmo2", False, "fp32", "OLMo-2 config.json: untied, float32"),
    # Gemma: embeddings always tied (GemmaConfig / Gemma2Config / Gemma3TextConfig tie_word_embeddings=True);
    # Gemma and Gemma 3 bfloat16, Gemma 2 float32
    Family(r"(Gemma-[27]b(-it)?|CodeGemma-.*)", "gemma", True, "bf16", "Gemma config.json: tied, bfloat16"),
    Family(r"Gemma-2-.*", "gemma2", True, "fp32", "Gemma-2 config.json: tied, float32"),
    Family(r"Gemma-3-1b-it", "gemma3_text", True, "bf16", "Gemma-3-1b config.json: gemma3_text, tied, bfloat16"),
    Family(r"phi-(1_5|2)", "phi", False, "fp16", "phi-1_5 / phi-2 config.json: untied lm_head with a bias, float16"),
    # Phi-4-mini ties its embeddings (config.json "tie_word_embeddings": true), the other Phi-3 / Phi-4 do not
    Family(r"Phi-4-mini-.*", "phi3", True, "bf16", "Phi-4-mini config.json: phi3, tied, bfloat16"),
    Family(r"(Phi-3.*|phi-4|Phi-4-.*)", "phi3", False, "bf16", "Phi-3 / Phi-4 config.json: phi3, untied, bfloat16"),
    Family(r"(Mistral-.*|Mathstral-.*)", "mistral", False, "bf16", "Mistral config.json: untied, bfloat16"),
    Family(r"Mixtral-.*", "mixtral", False, "bf16", "Mixtral config.json: untied, bfloat16"),
    # Qwen2.5 technical report (arXiv 2412.15115) Table 1 and Qwen2.5-Coder report (arXiv 2409.12186) Table 1:
    # "Tie Embedding" yes for 0.5B, 1.5B and 3B, no from 7B up; Qwen2.5-Math-1.5B is built on Qwen2.5-1.5B
    Family(r"Qwen2\.5-(Coder-|Math-)?(0\.5|1\.5|3)B.*", "qwen2", True, "bf16", "Qwen2.5 report: tied below 7B"),
    Family(r"(Qwen2\.5-.*|QwQ-.*)", "qwen2", False, "bf16", "Qwen2.5 report: untied from 7B up"),
    # Qwen3 technical report (arXiv 2505.09388) Table 1: "Tie Embedding" yes for 0.6B, 1.7B and 4B
    Family(r"Qwen3-(0\.6|1\.7|4)B.*", "qwen3", True, "bf16", "Qwen3 report: tied for 0.6B, 1.7B, 4B"),
    Family(r"Qwen3-.*-A\d+B.*", "qwen3_moe", False, "bf16", "Qwen3 report: MoE models untied"),
    Family(r"Qwen3-.*", "qwen3", False, "bf16", "Qwen3 report: untied from 8B up"),
    Family(r"SmolLM2-.*", "llama", True, "bf16", "SmolLM2 config.json: LlamaForCausalLM, tied, bfloat16"),
)

_MLP = {"GptNeoxMLP": "gelu", "LLaMAMLP": "swiglu", "GemmaMLP": "geglu", "LLaMAMoE": "swiglu"}
_NORM = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}
# the fields an imported entry sets (the rest keep ModelArch's defaults)
FIELDS = (
    "family",
    "mlp",
    "norm",
    "hidden",
    "layers",
    "heads",
    "kv_heads",
    "head_dim",
    "intermediate",
    "vocab",
    "tied_embeddings",
    "attn_bias",
    "mlp_bias",
    "num_experts",
    "experts_per_token",
    "moe_intermediate",
    "shared_experts",
    "dense_layers",
    "stored_dtype",
)
# not imported: litgpt's `block_size` is not the checkpoint's max_position_embeddings for about a fifth of the
# checkpoints the hand catalog also has (Mistral-7B-v0.1: 4096 against 32768; Qwen2.5-Math: 4096 against 131072)


def family_of(name: str) -> Family | None:
    return next((f for f in FAMILIES if re.fullmatch(f.pattern, name)), None)


def to_entry(c: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """A catalog entry (ModelArch fields) for one litgpt config, or None and why it cannot be mapped exactly."""
    name = c["name"]
    family = family_of(name)
    if family is None:
        return None, "no family rule: model_type, tied embeddings and checkpoint dtype are not in litgpt's table"
    if c.get("latent_attention"):
        return None, "multi-head latent attention: the catalog holds DeepSeek MLA as a config.json entry"
    if c["mlp_class_name"] not in _MLP or c["norm_class_name"] not in _NORM:
        return None, f"{c['mlp_class_name']} / {c['norm_class_name']} has no catalog equivalent"
    if c.get("n_expert_groups"):
        return None, "grouped expert routing"
    if family.model_type == "falcon" and not c.get("shared_attention_norm"):
        return None, "Falcon's new decoder architecture (two LayerNorms per parallel block) is not the falcon formula"
    if family.model_type == "gpt_neox" and not c.get("parallel_residual", True):
        return None, "GPT-NeoX without parallel residual"
    moe = c["mlp_class_name"] == "LLaMAMoE"
    hidden, heads = c["n_embd"], c["n_head"]
    entry: dict[str, Any] = {
        "id": f"{c['hf_config']['org']}/{c['hf_config']['name']}",
        "aliases": [name] if name != c["hf_config"]["name"] else [],
        "family": family.model_type,
        "mlp": _MLP[c["mlp_class_name"]],
        "norm": _NORM[c["norm_class_name"]],
        "hidden": hidden,
        "layers": c["n_layer"],
        "heads": heads,
        "kv_heads": c["n_query_groups"] if c["n_query_groups"] != heads else None,
        "head_dim": c["head_size"] if c["head_size"] != hidden // heads else None,
        "intermediate": c["intermediate_size"],
        # the embedding the checkpoint holds: litgpt's padded_vocab_size is the HF config's vocab_size (checked
        # against every hand entry litgpt also has)
        "vocab": c["padded_vocab_size"],
        "tied_embeddings": family.tied,
        "attn_bias": bool(c["bias"] or c["attn_bias"]),
        "mlp_bias": bool(c["bias"]),
        "num_experts": c["n_expert"] if moe else 0,
        "experts_per_token": c["n_expert_per_token"] if moe else 0,
        # None: the experts are `intermediate` wide (ModelArch)
        "moe_intermediate": c.get("moe_intermediate_size") if moe else None,
        "shared_experts": (c.get("n_shared_expert") or 0) if moe else 0,
        "dense_layers": (c.get("first_k_dense_replace") or 0) if moe else 0,
        "stored_dtype": family.dtype,
    }
    return entry, ""


_SIZE = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)([BbMm])(?![A-Za-z0-9])")


def stated_size(name: str) -> float | None:
    """The parameter count a model name states, in billions ("7B", "1.1b", "300M"; "8x7B" is not one)."""
    if re.search(r"\d+x\d+", name):
        return None
    m = _SIZE.search(name.replace("_", "-"))
    if not m:
        return None
    return float(m.group(1)) * (1.0 if m.group(2) in "Bb" else 1e-3)


# ----------------------------------------------------------------------------------------------- import


def read_source(git_dir: Path, commit: str) -> tuple[str, str]:
    """litgpt/config.py at `commit` of the bare mirror, and the full commit hash."""
    git = ["git", f"--git-dir={git_dir}"]
    full = subprocess.run([*git, "rev-parse", f"{commit}^{{commit}}"], check=True, capture_output=True, text=True)
    sha = full.stdout.strip()
    text = subprocess.run([*git, "show", f"{sha}:{SOURCE_PATH}"], check=True, capture_output=True, text=True)
    return text.stdout, sha


def _hand_catalog() -> tuple[dict[str, Any], set[str]]:
    """The hand-written catalog's models by lower-case spelling, and every spelling."""
    sys.path.insert(0, str(ROOT / "server"))
    from vramlens.knowledge.data import load
    from vramlens.knowledge.models import _arch

    by_spelling: dict[str, Any] = {}
    for raw in load("models.yaml")["models"]:
        arch = _arch(raw)
        for spelling in (arch.id, *arch.aliases):
            by_spelling[spelling.lower()] = arch
    return by_spelling, set(by_spelling)


def _params_b(entry: dict[str, Any]) -> float:
    from vramlens.knowledge.models import param_count
    from vramlens.knowledge.schema import ModelArch

    return param_count(ModelArch(**entry)) / 1e9


def build(source: str, sha: str) -> tuple[dict[str, Any], list[str]]:
    """The data file's content, and the report lines (skipped configs, outliers, disagreements)."""
    configs, skipped_statements = litgpt_configs(source)
    hand, spellings = _hand_catalog()
    report = [f"litgpt {sha[:12]}: {len(configs)} configs"]
    report += [f"  statement not interpreted: {s}" for s in skipped_statements]
    models: dict[str, dict[str, Any]] = {}
    checked: list[dict[str, Any]] = []
    cite = f"litgpt {sha[:12]} {SOURCE_PATH}"
    for c in configs:
        entry, why = to_entry(c)
        if entry is None:
            report.append(f"  skipped {c['name']}: {why}")
            continue
        family = family_of(c["name"])
        assert family is not None
        hf_url = f"huggingface.co/{entry['id']}/blob/main/config.json"
        entry["source"] = f"{cite} `{c['name']}` ({hf_url}); {family.source}; params from these shapes"
        if entry["id"].lower() in spellings:
            arch = hand[entry["id"].lower()]
            differ = {k: (v, w) for k, (v, w) in _effective(entry, arch).items() if v != w}
            checked.append({"id": entry["id"], "catalog": arch.id, **{k: entry[k] for k in FIELDS}})
            for k, (ours, theirs) in differ.items():
                report.append(f"  DIFFERS {entry['id']} (catalog {arch.id}): {k} litgpt {ours!r}, catalog {theirs!r}")
            continue
        key = entry["id"].lower()
        if key in models:  # a second litgpt name for the same checkpoint
            models[key]["aliases"] = sorted({*models[key]["aliases"], *entry["aliases"]})
            continue
        models[key] = entry
    # aliases already spelled elsewhere are dropped (the hand catalog and the first import keep them)
    taken = set(spellings) | set(models)
    for entry in models.values():
        kept = []
        for alias in entry["aliases"]:
            if alias.lower() not in taken:
                kept.append(alias)
                taken.add(alias.lower())
        entry["aliases"] = kept
        entry["params_b"] = round(_params_b(entry), 3)
        stated = stated_size(entry["id"].rsplit("/", 1)[-1])
        if stated and abs(entry["params_b"] / stated - 1) > SIZE_TOLERANCE:
            report.append(
                f"  size outlier {entry['id']}: {entry['params_b']}B from the shapes, {stated:g}B in the name"
            )
    report.append(f"  {len(models)} imported, {len(checked)} already in the catalog (compared)")
    data = {
        "source": f"Lightning-AI/litgpt {SOURCE_PATH} at {sha}",
        "generated_by": "scripts/import_catalog.py",
        "models": [_compact(m) for m in sorted(models.values(), key=lambda m: m["id"].lower())],
        "checked": sorted(checked, key=lambda m: m["id"].lower()),
    }
    return data, report


def _effective(entry: dict[str, Any], arch: Any) -> dict[str, tuple[Any, Any]]:
    """Each field of `entry` beside the hand entry's, as the estimate reads them (`kv_heads` None = heads,
    `head_dim` None = hidden // heads, `moe_intermediate` None = intermediate)."""
    from vramlens.knowledge.schema import ModelArch

    ours = ModelArch(id=entry["id"], **{k: entry[k] for k in FIELDS})
    pairs = {k: (getattr(ours, k), getattr(arch, k)) for k in FIELDS}
    pairs["kv_heads"] = (ours.n_kv_heads, arch.n_kv_heads)
    pairs["head_dim"] = (ours.d_head, arch.d_head)
    if ours.is_moe or arch.is_moe:
        pairs["moe_intermediate"] = (
            ours.moe_intermediate or ours.intermediate,
            arch.moe_intermediate or arch.intermediate,
        )
    return pairs


def _compact(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry without the fields that keep ModelArch's defaults."""
    defaults = {"kv_heads": None, "head_dim": None, "moe_intermediate": None, "num_experts": 0, "experts_per_token": 0}
    defaults |= {"shared_experts": 0, "dense_layers": 0, "aliases": [], "attn_bias": False, "mlp_bias": False}
    return {k: v for k, v in entry.items() if not (k in defaults and v == defaults[k])}


def render(data: dict[str, Any]) -> str:
    """One model per line, so that a rerun's changes read as a diff."""
    lines = ["{"]
    lines.append(f'  "source": {json.dumps(data["source"])},')
    lines.append(f'  "generated_by": {json.dumps(data["generated_by"])},')
    for key in ("models", "checked"):
        rows = [f"    {json.dumps(m, sort_keys=False)}" for m in data[key]]
        lines.append(f'  "{key}": [')
        lines.append(",\n".join(rows))
        lines.append("  ]" + ("," if key == "models" else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = importer_args(__doc__.splitlines()[0], DEFAULT_GIT_DIR).parse_args(argv)
    source, sha = read_source(args.git_dir, args.commit)
    data, report = build(source, sha)
    print("\n".join(report))
    return write_or_check({OUT: render(data)}, "import_catalog.py", args.check, f"{len(data['models'])} models")


def importer_args(description: str, git_dir: Path) -> argparse.ArgumentParser:
    """The command line every catalog importer takes: the mirror, the commit, and `--check`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--git-dir", type=Path, default=git_dir, help="bare git mirror of the source repository")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a data file is out of date")
    return parser


def write_or_check(outputs: dict[Path, str], script: str, check: bool, summary: str) -> int:
    """Write each data file, or with `check` compare it with what the source gives now: 1 when one is stale."""
    if check:
        stale = [path for path, text in outputs.items() if (path.read_text("utf-8") if path.exists() else "") != text]
        for path in stale:
            print(f"{path.relative_to(ROOT)} is out of date: rerun scripts/{script}", file=sys.stderr)
        if not stale:
            print(f"{', '.join(p.name for p in outputs)} up to date ({summary})")
        return 1 if stale else 0
    for path, text in outputs.items():
        path.write_text(text, encoding="utf-8")
    print(f"wrote {summary}")
    return 0


def iter_models(path: Path = OUT) -> Iterator[dict[str, Any]]:
    yield from json.loads(path.read_text(encoding="utf-8"))["models"]


if __name__ == "__main__":
    raise SystemExit(main())
