"""Import model shapes from frameworks' per-model Megatron argument files into
server/vramlens/knowledge/data/models_imported_mcore.json.

Source: THUDM/slime `scripts/models/<model>.sh`, one file per Hugging Face model, each a bash array
`MODEL_ARGS=(--num-layers … --hidden-size … --num-experts … --vocab-size …)` that slime's launch scripts `source` and
pass to its trainer (slime scripts/run-qwen3-4B.sh: `source "${SCRIPT_DIR}/models/qwen3-4B.sh"` … `${MODEL_ARGS[@]}`).
Each file is read from the bare git mirror (`git show <commit>:<path>`) by vramlens' own shell reader and Megatron
dialect (formats/shell.py, formats/megatron.py) as the launch that sources it: the file's text followed by one
`torchrun pretrain_gpt.py "${MODEL_ARGS[@]}"` line; the model is then built from the flags the reader kept as a
Megatron run's model is (`resolve.model.arch_from_sizes`; experts through `knowledge.models._arch_from_sizes`).
Nothing from the file is run.

A file is mapped to the Hugging Face id it describes only where its name states it (`FILES` below, each with the
model card that gives the size); a file whose name fits several published checkpoints of different shapes is left
out (`LEFT_OUT`, with the reason). Flags that change the model's weights and that the reader does not model
(`UNMODELLED_SHAPES`: a custom layer spec, gated / linear attention; a `--moe-layer-freq` pattern built by a shell
loop the reader cannot follow) make the entry `approximate`, with the reason. Multi-latent attention is read from the
file's own MLA flags (`mla_sizes`) and the entry written under the family the catalog sizes MLA with (`MLA_FAMILY`).
An id the catalog already has (hand entries, litgpt's import, an earlier imported file) is not written; its count
and sizes are compared with the catalog's and recorded under `"checked"` (tests/knowledge/test_catalog_mcore.py holds
that the exact ones agree).

    python scripts/import_catalog_mcore.py [--git-dir /work/.mirror/THUDM+slime/repo] [--commit HEAD] [--check]

`--check` writes nothing and exits 1 when the data file differs from what the source gives now.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import import_catalog  # noqa: E402
from import_catalog import importer_args, write_or_check  # noqa: E402

OUT = ROOT / "server" / "vramlens" / "knowledge" / "data" / "models_imported_mcore.json"
DEFAULT_GIT_DIR = Path("/work/.mirror/THUDM+slime/repo")
REPO = "THUDM/slime"
FOLDER = "scripts/models"
# the launch slime's run scripts make of a model file (scripts/run-*.sh); the batch flags only make it a training run
LAUNCH = '\ntorchrun pretrain_gpt.py "${MODEL_ARGS[@]}" --micro-batch-size 1 --global-batch-size 1\n'
AGREE = 0.01  # an exact entry's count against the catalog's

# file → (Hugging Face id, aliases with the same shapes, the model_type its config.json states, where the name is
# stated). A model_type is given only where the flags build that architecture's layers; an approximate entry is
# read as the Llama / Mixtral-style decoder the flags describe.
FILES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "qwen2.5-0.5B.sh": ("Qwen/Qwen2.5-0.5B", (), "qwen2"),
    "qwen2.5-1.5B.sh": ("Qwen/Qwen2.5-1.5B", (), "qwen2"),
    "qwen2.5-3B.sh": ("Qwen/Qwen2.5-3B", (), "qwen2"),
    "qwen2.5-7B.sh": ("Qwen/Qwen2.5-7B", (), "qwen2"),
    "qwen2.5-32B.sh": ("Qwen/Qwen2.5-32B", (), "qwen2"),
    "qwen3-0.6B.sh": ("Qwen/Qwen3-0.6B", (), "qwen3"),
    "qwen3-1.7B.sh": ("Qwen/Qwen3-1.7B", (), "qwen3"),
    "qwen3-4B.sh": ("Qwen/Qwen3-4B", (), "qwen3"),
    "qwen3-8B.sh": ("Qwen/Qwen3-8B", (), "qwen3"),
    "qwen3-14B.sh": ("Qwen/Qwen3-14B", (), "qwen3"),
    "qwen3-32B.sh": ("Qwen/Qwen3-32B", (), "qwen3"),
    "qwen3-30B-A3B.sh": ("Qwen/Qwen3-30B-A3B", (), "qwen3_moe"),
    "qwen3-235B-A22B.sh": ("Qwen/Qwen3-235B-A22B", (), "qwen3_moe"),
    # huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct: "Qwen3-Next-80B-A3B" in its Instruct and Thinking versions
    "qwen3-next-80B-A3B.sh": (
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        ("Qwen/Qwen3-Next-80B-A3B-Thinking",),
        "qwen3_next",
    ),
    "qwen3.5-0.8B.sh": ("Qwen/Qwen3.5-0.8B", (), "qwen3_5"),
    "qwen3.5-4B.sh": ("Qwen/Qwen3.5-4B", (), "qwen3_5"),
    "qwen3.5-9B.sh": ("Qwen/Qwen3.5-9B", (), "qwen3_5"),
    "qwen3.5-27B.sh": ("Qwen/Qwen3.5-27B", (), "qwen3_5"),
    "qwen3.5-35B-A3B.sh": ("Qwen/Qwen3.5-35B-A3B", ("Qwen/Qwen3.5-35B-A3B-Base",), "qwen3_5_moe"),
    "llama3.1-8B-Instruct.sh": ("meta-llama/Llama-3.1-8B-Instruct", (), "llama"),
    "llama3.2-3B-Instruct.sh": ("meta-llama/Llama-3.2-3B-Instruct", (), "llama"),
    "deepseek-v3.sh": ("deepseek-ai/DeepSeek-V3", (), "deepseek_v3"),
    # huggingface.co/moonshotai/Moonlight-16B-A3B: the one Moonlight model, published as -16B-A3B and -Instruct
    "moonlight.sh": ("moonshotai/Moonlight-16B-A3B", ("moonshotai/Moonlight-16B-A3B-Instruct",), "deepseek_v3"),
    # huggingface.co/moonshotai/Kimi-K2-Instruct: Kimi-K2 is published as -Base and -Instruct (1 T, 32 B active)
    "kimi-k2.sh": ("moonshotai/Kimi-K2-Instruct", ("moonshotai/Kimi-K2-Base",), "deepseek_v3"),
    "kimi-k2-thinking.sh": ("moonshotai/Kimi-K2-Thinking", (), "deepseek_v3"),
    # huggingface.co/zai-org/GLM-4.5: "GLM-4.5 … 355 billion total parameters and 32 billion active …, GLM-4.5-Air
    # … 106 billion total parameters and 12 billion active"
    # GLM-4.7 is built from the same file: slime scripts/run-glm4.7-355B-A32B.sh sources models/glm4.5-355B-A32B.sh
    # for the checkpoint docs/en/examples/glm4.7-355B-A32B.md downloads (`hf download zai-org/GLM-4.7`)
    "glm4.5-355B-A32B.sh": ("zai-org/GLM-4.5", ("zai-org/GLM-4.5-Base", "zai-org/GLM-4.7"), "glm4_moe"),
    "glm4.5-106B-A12B.sh": ("zai-org/GLM-4.5-Air", ("zai-org/GLM-4.5-Air-Base", "ZhipuAI/GLM-4.5-Air"), "glm4_moe"),
    # huggingface.co/zai-org/GLM-4.7-Flash: "GLM-4.7-Flash is a 30B-A3B MoE model"
    # (slime docs/en/examples/glm4.7-30B-A3B.md downloads it as `THUDM/GLM-4.7-Flash`, the organisation's former name)
    "glm4.7-30B-A3B.sh": ("zai-org/GLM-4.7-Flash", ("THUDM/GLM-4.7-Flash",), "glm4_moe_lite"),
    # huggingface.co/zai-org/GLM-5: "744B parameters (40B active)"
    "glm5-744B-A40B.sh": ("zai-org/GLM-5", (), "glm_moe_dsa"),
    # slime docs/en/examples/glm5.2-744B-A40B.md: "GLM-5.2 744B-A40B", trained from "BF16: `zai-org/GLM-5.2`"
    "glm5.2-744B-A40B.sh": ("zai-org/GLM-5.2", (), "glm_moe_dsa"),
    "minimax-m2.sh": ("MiniMaxAI/MiniMax-M2", (), "minimax_m2"),
    "mimo-7B-rl.sh": ("XiaomiMiMo/MiMo-7B-RL", (), "mimo"),
}
# files whose name does not say which published checkpoint they describe
LEFT_OUT = {
    "glm4-9B.sh": "GLM-4-9B is published as glm-4-9b(-chat, -hf) and GLM-4-9B-0414, with different shapes",
    "glm4-32B.sh": "GLM-4-32B is published as GLM-4-32B-0414 and GLM-4-32B-Base-0414; the name says neither",
    "llama3.2-3B-Instruct-amd.sh": "the same model as llama3.2-3B-Instruct.sh, set for AMD GPUs",
    "qwen3-4B-Instruct-2507.sh": "sources qwen3-4B.sh with another rotary base: no shapes of its own",
    "deepseek-v3-5layer.sh": "a 5-layer cut of DeepSeek-V3 for testing, no published checkpoint",
    "deepseek-v3-20layer.sh": "a 20-layer cut of DeepSeek-V3 for testing, no published checkpoint",
    "qwen3.5-35B-A3B-vl.sh": "the vision-language build of qwen3.5-35B-A3B.sh",
}
# model_types whose layers the flags build as Megatron's GPT layers (attention + dense or MoE MLP), counted exactly
# from the flags, and the family the entry is written under. GLM-4.5 and MiniMax-M2: a meta-device build with
# transformers 5.24's own classes (models/glm4_moe, models/minimax_m2) of the sizes these flags state gives 106.852 B
# (GLM-4.5-Air), 352.798 B (GLM-4.5) and 228.690 B (MiniMax-M2), the count here within 0.001 % (GLM's q/k/v biases,
# MiniMax's q/k norms left out); their layers
# are a decoder of attention and routed (+ shared) experts as the Mixtral-style entry holds them
EXACT_TYPES = {
    # multi-latent attention (MLA) + routed and shared experts, built as DeepSeek-V3's layers: transformers 5.24
    # models/glm4_moe_lite/modular_glm4_moe_lite.py `Glm4MoeLiteAttention(DeepseekV3Attention)` over GLM-4.5's MoE
    # (`Glm4MoeLiteMoE(Glm4MoeMoE)`: routed experts, one shared expert, a sigmoid router with a score-correction bias,
    # as `DeepseekV3MoE`); the catalog sizes MLA under the deepseek_v3 family (`MLA_FAMILY`)
    "deepseek_v3": "deepseek_v3",
    "glm4_moe_lite": "deepseek_v3",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3_moe",
    "llama": "llama",
    "glm4_moe": "mixtral",
    "minimax_m2": "mixtral",
}
# custom layer specs (`--spec <module> <function>`) that build Megatron's GPT layer with other norms only: slime
# slime_plugins/models/minimax_m2.py builds the GPT layer spec with q/k norms over all heads (MiniMax-M2's
# `qk_norm_type: per_layer`)
GPT_LAYER_SPECS = frozenset({"slime_plugins.models.minimax_m2.get_minimax_m2_layer_spec"})
# Megatron flags that change the weights and that vramlens' Megatron reader does not model (Megatron-LM
# megatron/training/arguments.py core_v0.15.0; slime_plugins for `--spec`)
UNMODELLED_SHAPES = {
    "spec": "layers built by the custom layer spec `{value}`, not Megatron's GPT layer (Qwen3-Next's and Qwen3.5's "
    "linear-attention layers): counted as GPT attention layers",
    "use_gated_attention": "gated attention: the output gate's weights not counted",
    "attention_output_gate": "attention output gate: its weights not counted",
    "multi_latent_attention": "multi-latent attention (MLA) counted as multi-head attention",
    "q_lora_rank": "MLA's low-rank query projection counted as a full one",
    "kv_lora_rank": "MLA's low-rank key/value projection counted as full ones",
    "experimental_attention_variant": "an experimental attention variant counted as multi-head attention",
    "linear_attention_freq": "linear-attention layers counted as attention layers",
}
# the family whose entries the catalog sizes MLA with (models.yaml deepseek-ai/DeepSeek-V3: `kv_lora_rank` and the
# head widths; estimate/shapes.py `mla_linears`): every file with `--multi-latent-attention` is written under it, so
# that an MLA model is never read as multi-head attention
MLA_FAMILY = "deepseek_v3"
# Megatron-LM megatron/training/arguments.py (d98e8a64) `_add_mla_args`: --q-lora-rank None (a full-rank query
# projection), --kv-lora-rank 32, --qk-head-dim 128, --qk-pos-emb-head-dim 64, --v-head-dim 128 when not given;
# flag -> (ModelArch field, default)
MLA_FLAGS = {
    "q-lora-rank": ("q_lora_rank", None),
    "kv-lora-rank": ("kv_lora_rank", 32),
    "qk-head-dim": ("qk_nope_head_dim", 128),
    "qk-pos-emb-head-dim": ("qk_rope_head_dim", 64),
    "v-head-dim": ("head_dim", 128),
}
# the reasons `UNMODELLED_SHAPES` gives for MLA, which the MLA sizes read from the file replace
_MLA_REASONS = frozenset(UNMODELLED_SHAPES[k] for k in ("multi_latent_attention", "q_lora_rank", "kv_lora_rank"))
# values the reader could not follow (a shell loop): what the default it keeps means
NOT_READ = {"moe-layer-freq": "`--moe-layer-freq` built by a shell loop, not read: every layer counted as an MoE layer"}
# ModelArch fields written out (the rest keep their defaults): the litgpt importer's, less the stored dtype (the
# flags do not state it), with the shared experts' width and MLA's sizes, which the flags do
_BASE = tuple(f for f in import_catalog.FIELDS if f != "stored_dtype")
_AT = _BASE.index("shared_experts") + 1
FIELDS = (*_BASE[:_AT], "shared_expert_intermediate", *_BASE[_AT:], "kv_lora_rank", "q_lora_rank")
FIELDS += ("qk_nope_head_dim", "qk_rope_head_dim")  # MLA's sizes (`mla_sizes`)


def mla_sizes(args: list[str]) -> dict[str, Any]:
    """The MLA sizes (`ModelArch` fields) a launch's `--multi-latent-attention` flags state, Megatron's defaults for
    those it leaves out; {} without MLA. The value heads are `--v-head-dim` wide (`head_dim`, as
    `arch_from_hf_config` reads DeepSeek's `v_head_dim`), one key/value head per query head."""
    if "--multi-latent-attention" not in args:
        return {}
    sizes: dict[str, Any] = {"kv_heads": None}
    for flag, (field, default) in MLA_FLAGS.items():
        at = args.index(f"--{flag}") if f"--{flag}" in args else -1
        sizes[field] = int(args[at + 1]) if 0 <= at < len(args) - 1 else default
    return sizes


# Remote-code models (`auto_map`, never run): their published config.json, read as a local config.json is; the layers
# it builds are written in knowledge/models.py `REMOTE_CODE_WRITTEN` from each family's modeling file. Written to
# REMOTE_OUT, each entry citing where its config was published.
REMOTE_OUT = OUT.parent / "models_imported_remote.json"
_QWEN_MAP = {
    "AutoConfig": "configuration_qwen.QWenConfig",
    "AutoModelForCausalLM": "modeling_qwen.QWenLMHeadModel",
}
_QWEN = {"architectures": ["QWenLMHeadModel"], "auto_map": _QWEN_MAP, "model_type": "qwen", "kv_channels": 128}
_QWEN |= {"no_bias": True, "tie_word_embeddings": False}
_CHATGLM = {
    "architectures": ["ChatGLMModel"],
    "auto_map": {"AutoConfig": "configuration_chatglm.ChatGLMConfig"},
    "model_type": "chatglm",
    "add_bias_linear": False,
    "add_qkv_bias": True,
    "multi_query_attention": True,
    "rmsnorm": True,
    "post_layer_norm": True,
    "tie_word_embeddings": False,
    "kv_channels": 128,
}
_BAICHUAN = {
    "architectures": ["BaichuanForCausalLM"],
    "auto_map": {"AutoConfig": "configuration_baichuan.BaichuanConfig"},
    "model_type": "baichuan",
    "tie_word_embeddings": False,
    "vocab_size": 125696,
    "max_position_embeddings": 4096,
}
REMOTE: list[dict[str, Any]] = [
    {
        "id": "Qwen/Qwen-7B",
        "aliases": ["Qwen/Qwen-7B-Chat"],
        "config": _QWEN
        | {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "intermediate_size": 22016}
        | {"vocab_size": 151936, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"},
        "source": "Qwen-1's configuration_qwen.py `QWenConfig` defaults, Qwen-7B's sizes (huggingface.co/Qwen/Qwen-7B; "
        "as vendored in github.com/ds-llo/qwcs at 443804a5)",
    },
    {
        "id": "Qwen/Qwen-1_8B",
        "aliases": ["Qwen/Qwen-1_8B-Chat"],
        "config": _QWEN
        | {"hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 11008}
        | {"vocab_size": 151936, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"},
        "source": "Qwen-1_8B-Chat config.json (huggingface.co/Qwen/Qwen-1_8B-Chat; as copied in "
        "github.com/CCKS2024/CCKS2024-Summary-of-incidents qwen-1_8b-chat_model/config.json at 92cefdba)",
    },
    {
        "id": "Qwen/Qwen-72B",
        "aliases": ["Qwen/Qwen-72B-Chat"],
        "config": _QWEN
        | {"hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64, "intermediate_size": 49152}
        | {"vocab_size": 152064, "max_position_embeddings": 32768, "torch_dtype": "bfloat16"},
        "source": "Qwen-72B-Chat config.json (huggingface.co/Qwen/Qwen-72B-Chat; as copied in github.com/ds-llo/qwcs "
        "config.json at 443804a5)",
    },
    {
        "id": "THUDM/chatglm3-6b",
        "aliases": ["THUDM/chatglm3-6b-base", "THUDM/chatglm2-6b", "ZhipuAI/chatglm3-6b", "zai-org/chatglm3-6b"],
        "config": _CHATGLM
        | {"hidden_size": 4096, "num_layers": 28, "num_attention_heads": 32, "multi_query_group_num": 2}
        | {"ffn_hidden_size": 13696, "padded_vocab_size": 65024, "seq_length": 8192, "torch_dtype": "float16"},
        "source": "THUDM/chatglm3-6b config.json (huggingface.co/THUDM/chatglm3-6b; chatglm2-6b's has the same sizes "
        "with seq_length 32768)",
    },
    {
        "id": "baichuan-inc/Baichuan2-7B-Base",
        "aliases": ["baichuan-inc/Baichuan2-7B-Chat"],
        "config": _BAICHUAN
        | {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "intermediate_size": 11008}
        | {"torch_dtype": "bfloat16"},
        "source": "Baichuan 2 technical report (arXiv:2309.10305) Table 2: 7B RoPE, hidden 4,096, FFN 11,008, "
        "32 heads, 32 layers; §2.2 vocabulary 125,696",
    },
    {
        "id": "baichuan-inc/Baichuan2-13B-Base",
        "aliases": ["baichuan-inc/Baichuan2-13B-Chat"],
        "config": _BAICHUAN
        | {"hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 40, "intermediate_size": 13696}
        | {"torch_dtype": "bfloat16"},
        "source": "Baichuan 2 technical report (arXiv:2309.10305) Table 2: 13B ALiBi, hidden 5,120, FFN 13,696, "
        "40 heads, 40 layers; §2.2 vocabulary 125,696",
        # modeling_baichuan.py (13B) `_gen_alibi_mask`: a heads × seq × seq bias added to every attention
        "approximate": "ALiBi attention: its heads × seq × seq bias mask and the masked (not flash) attention it "
        "forces are not modelled",
    },
]
# published checkpoints of these families left out, and why
REMOTE_LEFT_OUT = {
    "Qwen/Qwen-14B": "no published copy of its config.json found to cite",
    "Qwen/Qwen-VL-Chat": "its vision tower is built by remote code the catalog has no construction for",
    "Qwen/Qwen-Audio-Chat": "its audio encoder is built by remote code the catalog has no construction for",
    "Qwen/Qwen-7B-Chat-Int4": "GPTQ weights: the catalog holds unquantized checkpoints",
}


def remote_data() -> dict:
    """The remote-code entries with their counts (`params_b`) as the catalog builds them."""
    from vramlens.knowledge.models import _arch, param_count

    models = []
    for entry in REMOTE:
        arch = _arch(entry)
        if arch.approximate and "approximate" not in entry:
            raise SystemExit(f"{entry['id']}: read as approximate ({arch.approximate}); write its layers first")
        models.append({**entry, "params_b": round(param_count(arch) / 1e9, 3)})
    return {
        "source": "published config.json files and model tables, each entry citing its own",
        "generated_by": "scripts/import_catalog_mcore.py",
        "models": models,
        "left_out": [{"id": k, "why": v} for k, v in REMOTE_LEFT_OUT.items()],
    }


def git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True, text=True).stdout


def read_file(name: str, text: str) -> tuple[Any, list[str]]:
    """(the model the reader builds from the file's flags, or None; why the count is approximate)."""
    from vramlens.formats import parse_document, shell
    from vramlens.formats.megatron import handler
    from vramlens.plan import IssueKind
    from vramlens.resolve.model import arch_from_sizes

    launched = text + LAUNCH
    result = parse_document(launched, f"{FOLDER}/{name}")
    plan = result.plan
    if plan is None:
        return None, []
    arch = arch_from_sizes(plan)
    why: list[str] = []
    script, _issues = shell.analyze(launched, f"{FOLDER}/{name}")
    args = [a.text for a in script.launch.args]
    unmodelled = {u.key.replace("-", "_") for u in plan.unmodelled}
    for i, word in enumerate(args):
        flag = shell._flag_name(word).replace("-", "_") if word and word.startswith("--") else ""
        reason = UNMODELLED_SHAPES.get(flag)
        if not reason or (handler(flag) is not None and flag not in unmodelled):
            continue
        if flag == "spec":
            value = ".".join(w for w in args[i + 1 : i + 3] if w and not w.startswith("-"))
            if value in GPT_LAYER_SPECS:
                continue
            reason = reason.format(value=value)
        if reason not in why:
            why.append(reason)
    mla = mla_sizes(args)
    if mla and arch is not None:
        arch = arch.model_copy(update=mla)
        why = [w for w in why if w not in _MLA_REASONS]
    for issue in plan.issues:
        if issue.kind == IssueKind.NOT_READ:
            key = issue.message.split("`")[1] if "`" in issue.message else ""
            why.append(NOT_READ.get(key, f"`--{key}` not read: its default kept"))
    return arch, why


def build(git_dir: Path, commit: str) -> dict:
    from vramlens.knowledge.models import param_count

    rev = git(git_dir, "rev-parse", commit).strip()
    names = sorted(p.rsplit("/", 1)[-1] for p in git(git_dir, "ls-tree", "--name-only", rev, f"{FOLDER}/").split())
    models, checked, skipped = [], [], []
    for name in names:
        if name not in FILES:
            skipped.append({"file": name, "why": LEFT_OUT.get(name, "the name does not state a published model")})
            continue
        hf_id, aliases, model_type = FILES[name]
        arch, why = read_file(name, git(git_dir, "show", f"{rev}:{FOLDER}/{name}"))
        if arch is None:
            skipped.append({"file": name, "why": "the reader builds no model from its flags"})
            continue
        exact = model_type in EXACT_TYPES and not why
        family = EXACT_TYPES[model_type] if exact else ("mixtral" if arch.num_experts else "llama")
        if arch.kv_lora_rank:
            family = MLA_FAMILY
        source = f"{REPO} {FOLDER}/{name} at {rev[:12]} (Megatron flags, read by vramlens' Megatron reader)"
        entry: dict[str, Any] = {"id": hf_id}
        if aliases:
            entry["aliases"] = list(aliases)
        shapes = arch.model_dump()
        entry.update({k: shapes[k] for k in FIELDS if shapes[k] != type(arch).model_fields[k].default})
        entry["family"] = family
        entry["stored_dtype"] = "bf16"
        entry["source"] = source
        if not exact:
            style = "DeepSeek-V3" if arch.kv_lora_rank else ("Mixtral" if arch.num_experts else "Llama")
            why = why or [f"`{model_type}` layers read as a {style}-style decoder"]
            entry["approximate"] = "; ".join(why)
        built = type(arch)(**{k: v for k, v in entry.items() if k != "aliases"})
        entry["params_b"] = round(param_count(built) / 1e9, 3)
        known = _elsewhere(hf_id)
        if known is not None:
            ours, theirs = param_count(built), param_count(known)
            checked.append(
                {
                    "id": hf_id,
                    "file": name,
                    "catalog": known.id,
                    "exact": exact,
                    "params_b": round(ours / 1e9, 3),
                    "catalog_params_b": round(theirs / 1e9, 3),
                    "ratio": round(ours / theirs, 4),
                    "same_sizes": all(
                        getattr(built, k) == getattr(known, k)
                        for k in ("hidden", "layers", "heads", "vocab", "num_experts", "moe_intermediate")
                    ),
                }
            )
            continue
        models.append(entry)
    return {
        "source": f"{REPO} {FOLDER}/*.sh at {rev}",
        "generated_by": "scripts/import_catalog_mcore.py",
        "models": models,
        "checked": checked,
        "left_out": skipped,
    }


def _elsewhere(hf_id: str) -> Any:
    """The catalog's model for `hf_id` from any source but this file (models.yaml, litgpt's import, another
    imported file), or None. An entry written only because it agrees with this file's (transformers' defaults:
    scripts/import_catalog_transformers.py `agrees_with`) is not another source."""
    from vramlens.knowledge import models

    entries = [
        entry
        for name in models._imported_files()
        if (path := OUT.parent / name) != OUT and path.exists()
        for entry in json.loads(path.read_text(encoding="utf-8"))["models"]
    ]
    echoes = {e["id"].lower() for e in entries if str(e.get("agrees_with", "")).startswith(REPO)}
    known = models._catalog_exact(hf_id)
    if known is not None and not known.source.startswith(REPO) and known.id.lower() not in echoes:
        return known
    for entry in entries:
        if entry["id"].lower() in echoes:
            continue
        if hf_id.lower() in {s.lower() for s in (entry["id"], *entry.get("aliases", ()))}:
            return models._arch({**entry, "id": entry["id"]})
    return None


def main(argv: list[str] | None = None) -> int:
    args = importer_args(__doc__.split("\n\n")[0], DEFAULT_GIT_DIR).parse_args(argv)
    data = build(args.git_dir, args.commit)
    for c in data["checked"]:
        flag = "" if not c["exact"] or abs(c["ratio"] - 1) <= AGREE else "  DISAGREES"
        print(f"checked {c['id']}: {c['params_b']} B vs catalog {c['catalog_params_b']} B{flag}", file=sys.stderr)
    outputs = {OUT: json.dumps(data, indent=1) + "\n", REMOTE_OUT: json.dumps(remote_data(), indent=1) + "\n"}
    summary = f"{len(data['models'])} models, {len(data['checked'])} checked, {len(data['left_out'])} left out"
    return write_or_check(outputs, "import_catalog_mcore.py", args.check, summary)


if __name__ == "__main__":
    sys.exit(main())
