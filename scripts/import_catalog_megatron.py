"""Catalog entries for NVIDIA's Nemotron-H hybrids from Megatron-LM's ModelOpt model arguments.

Megatron-LM states each checkpoint its ModelOpt examples convert as a shell file named for it,
`examples/post_training/modelopt/conf/<org>/<name>.sh`, whose `MODEL_ARGS="..."` are the Megatron flags that build
that checkpoint's layers (`HF_MODEL_CKPT=<org>/<name>`; a file named for another checkpoint than the one it
converts, `NVIDIA-Nemotron-Nano-9B-v2.sh` for its base, gives that name as an alias). For the hybrid Mamba/attention
models among them (`--hybrid-layer-pattern` / `--hybrid-override-pattern`: M Mamba-2, * attention, - MLP, E MoE, one
character per layer) this script writes the transformers `nemotron_h` config.json those flags describe (transformers
5.24 models/nemotron_h/configuration_nemotron_h.py): hidden_size, the layer pattern (`hybrid_override_pattern`),
query heads, key/value groups (`--num-query-groups`), head width (`--kv-channels`), MLP and expert widths
(`--ffn-hidden-size`, `--moe-ffn-hidden-size`, `--moe-shared-expert-intermediate-size`), experts and top-k, Mamba
heads and head width, state size and groups (Megatron's `TransformerConfig` defaults `mamba_head_dim` 64,
`mamba_state_dim` 128, `mamba_num_groups` 8 when the file states none, and `MambaMixer`'s `d_conv=4` and `expand=2`:
2 · hidden_size // head width Mamba heads), squared-ReLU MLPs (`--squared-relu`: `mlp_hidden_act` relu2), no biases
(`--disable-bias-linear`), untied head, bf16. The files are read from the bare git mirror (`git show
<commit>:<path>`); the flags are split with `shlex` and nothing is run.

A file whose flags leave a shape out is written `approximate` with the reason: a vocabulary that comes from the
Hugging Face tokenizer (no `--padded-vocab-size`) takes transformers' `NemotronHConfig` default (131072; that class's
docstring names NVIDIA-Nemotron-3-Nano-30B-A3B-BF16). A file whose layers the catalog cannot build (a latent MoE,
`--moe-latent-size`) is left out with the reason; so is an id the catalog already holds (compared under "checked").

    python scripts/import_catalog_megatron.py [--git-dir /work/.mirror/NVIDIA+Megatron-LM/repo] [--commit HEAD]
        [--check]

`--check` writes nothing and exits 1 when the data file differs from what the source gives now.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "server" / "vramlens" / "knowledge" / "data" / "models_imported_megatron.json"
DEFAULT_GIT_DIR = Path("/work/.mirror/NVIDIA+Megatron-LM/repo")
CONF = "examples/post_training/modelopt/conf"
SIZE_TOLERANCE = 0.15  # parameters against the size the name states

sys.path.insert(0, str(ROOT / "server"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from import_catalog import importer_args, stated_size, write_or_check  # noqa: E402
from import_catalog_transformers import _catalog_without, _checked, _mapped, _total_b  # noqa: E402

# megatron-core's Mamba mixer sizes and defaults (TransformerConfig, MambaMixer.__init__), as the run reader takes them
from vramlens.formats.megatron_hybrid import MAMBA_CONV, mamba_sizes  # noqa: E402

_MARK = "NVIDIA/Megatron-LM"
# transformers 5.24 NemotronHConfig's default vocabulary (the checkpoint its docstring names)
NEMOTRON_H_VOCAB = 131072
MAMBA_FLAGS = ("mamba_num_heads", "mamba_head_dim", "mamba_num_groups", "mamba_state_dim")
_ARGS = re.compile(r'^MODEL_ARGS="(.*?)"', re.S | re.M)
_CKPT = re.compile(r"^\s*HF_MODEL_CKPT=(\S+)", re.M)


def flags(text: str) -> dict[str, str | bool] | None:
    """The `MODEL_ARGS` flags of a conf file: `--name value` as name → value, a bare `--name` as True."""
    m = _ARGS.search(text)
    if m is None:
        return None
    words = shlex.split(m.group(1).replace("\\\n", " "))
    out: dict[str, str | bool] = {}
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        nxt = words[i + 1] if i + 1 < len(words) else None
        out[word[2:]] = nxt if nxt is not None and not nxt.startswith("--") else True
    return out


def nemotron_h_config(f: dict[str, str | bool]) -> tuple[dict[str, Any], list[str]]:
    """The nemotron_h config.json of a hybrid's flags, and what it had to assume."""
    pattern = str(f.get("hybrid-layer-pattern") or f.get("hybrid-override-pattern"))
    heads = int(f["num-attention-heads"])
    moe = "num-experts" in f
    stated = {name: f.get(name.replace("_", "-")) for name in MAMBA_FLAGS}  # `--mamba-head-dim 64` → mamba_head_dim
    mamba_heads, head_dim, groups, state = mamba_sizes(
        int(f["hidden-size"]), {name: int(str(v)) if v else None for name, v in stated.items()}
    )
    assumed = []
    config: dict[str, Any] = {
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        "hybrid_override_pattern": pattern,
        "num_hidden_layers": len(pattern),
        "hidden_size": int(f["hidden-size"]),
        "num_attention_heads": heads,
        "num_key_value_heads": int(f["num-query-groups"]) if f.get("group-query-attention") else heads,
        # megatron/training/arguments.py: without --kv-channels, hidden_size // num_attention_heads
        "head_dim": int(f.get("kv-channels") or int(f["hidden-size"]) // heads),
        "intermediate_size": int(f["ffn-hidden-size"]),
        "mamba_num_heads": mamba_heads,
        "mamba_head_dim": head_dim,
        "ssm_state_size": state,
        "n_groups": groups,
        "conv_kernel": MAMBA_CONV,
        "mlp_hidden_act": "relu2" if f.get("squared-relu") else "silu",
        "use_bias": not f.get("disable-bias-linear"),
        "attention_bias": not f.get("disable-bias-linear"),
        "tie_word_embeddings": not f.get("untie-embeddings-and-output-weights"),
        "dtype": "bfloat16" if f.get("bf16") else "float32",
    }
    if moe:
        config |= {
            "n_routed_experts": int(f["num-experts"]),
            "num_experts_per_tok": int(f["moe-router-topk"]),
            "moe_intermediate_size": int(f.get("moe-ffn-hidden-size") or f["ffn-hidden-size"]),
        }
        shared = int(f.get("moe-shared-expert-intermediate-size") or 0)
        if shared:  # one shared expert of that width (Megatron's `SharedExpertMLP`)
            config |= {"n_shared_experts": 1, "moe_shared_expert_intermediate_size": shared}
    if f.get("padded-vocab-size"):
        config["vocab_size"] = int(f["padded-vocab-size"])
    else:
        config["vocab_size"] = NEMOTRON_H_VOCAB
        assumed.append(
            f"vocabulary not in the Megatron arguments (the Hugging Face tokenizer's): {NEMOTRON_H_VOCAB}, "
            "transformers 5.24 NemotronHConfig's default"
        )
    return config, assumed


def git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True, text=True).stdout


def build(git_dir: Path, commit: str) -> tuple[dict[str, Any], list[str]]:
    sha = git(git_dir, "rev-parse", f"{commit}^{{commit}}").strip()
    paths = [p for p in git(git_dir, "ls-tree", "-r", "--name-only", sha, CONF).split() if p.endswith(".sh")]
    catalog = _catalog_without(_MARK)
    models, checked, left_out, report = [], [], [], [f"NVIDIA/Megatron-LM {sha[:12]}: {len(paths)} conf files"]
    for path in sorted(paths):
        text = git(git_dir, "show", f"{sha}:{path}")
        f = flags(text)
        ckpt = _CKPT.search(text)
        if f is None or ckpt is None or not (f.get("hybrid-layer-pattern") or f.get("hybrid-override-pattern")):
            continue  # not a hybrid: the catalog's other sources hold these
        model_id = ckpt.group(1)
        where = {"file": path.removeprefix(CONF + "/")}
        if f.get("moe-latent-size"):
            left_out.append(where | {"id": model_id, "why": "latent MoE (--moe-latent-size): not built here"})
            continue
        try:
            config, assumed = nemotron_h_config(f)
        except KeyError as missing:
            left_out.append(where | {"id": model_id, "why": f"--{missing.args[0]} not stated"})
            continue
        arch = _mapped(config, model_id)
        if arch is None:
            left_out.append(where | {"id": model_id, "why": "its config does not map"})
            continue
        size, total = stated_size(model_id), _total_b(arch)
        if size is not None and abs(total / size - 1) > SIZE_TOLERANCE:
            left_out.append(where | {"id": model_id, "why": f"{total:.2f} B against the {size} B its name states"})
            continue
        source = f"NVIDIA/Megatron-LM {sha[:12]} {path} MODEL_ARGS"
        known = catalog.get(model_id.lower())
        if known is not None:
            checked.append(_checked(model_id, arch, known, source=source))
            continue
        entry: dict[str, Any] = {"id": model_id, "source": source, "config": config}
        named = where["file"].removesuffix(".sh")  # the file is named for the checkpoint it converts
        if named.lower() != model_id.lower():
            entry["aliases"] = [named]
        if assumed:
            entry["approximate"] = "; ".join(assumed)
        models.append(entry)
        report.append(f"  {model_id}: {total:.2f} B" + (" (approximate)" if assumed else ""))
    report += [f"  left out {e['id']}: {e['why']}" for e in left_out]
    data = {
        "source": f"NVIDIA/Megatron-LM {CONF}/*/*.sh at {sha}",
        "generated_by": "scripts/import_catalog_megatron.py",
        "models": models,
        "checked": checked,
        "left_out": left_out,
    }
    return data, report


def main(argv: list[str] | None = None) -> int:
    args = importer_args(__doc__.splitlines()[0], DEFAULT_GIT_DIR).parse_args(argv)
    data, report = build(args.git_dir, args.commit)
    print("\n".join(report), file=sys.stderr)
    summary = f"{len(data['models'])} models, {len(data['checked'])} checked, {len(data['left_out'])} left out"
    return write_or_check({OUT: json.dumps(data, indent=1) + "\n"}, "import_catalog_megatron.py", args.check, summary)


if __name__ == "__main__":
    sys.exit(main())
