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
2 · hidden_size // head width Mamba heads), squared-ReLU MLPs (`--squared-relu`: `mlp_hidden_act` relu2), the MLP
biases (none with `--disable-bias-linear`), untied head (`--untie-embeddings-and-output-weights`), the parameter dtype
(`--bf16`). The config is the one the run reader builds from the same flags (formats/megatron_hybrid.py
`nemotron_h_config`, megatron-core's defaults where the flags are silent). The files are read from the bare git mirror
(`git show <commit>:<path>`); the flags are split with `shlex` and nothing is run.

A file whose flags leave a shape out is written `approximate` with the reason: a vocabulary that comes from the
Hugging Face tokenizer (no `--padded-vocab-size`) takes transformers' `NemotronHConfig` default (131072; that class's
docstring names NVIDIA-Nemotron-3-Nano-30B-A3B-BF16). A file whose layers the catalog cannot build (a latent MoE,
`--moe-latent-size`; SwiGLU MLPs; biases megatron-core builds that the config cannot hold: attention, expert and
LayerNorm biases, `megatron_hybrid.uncounted_biases`) is left out with the reason; so is an id the catalog already
holds (compared under "checked").

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

# the run reader's config of a hybrid (megatron-core's defaults where the flags are silent)
from vramlens.formats.megatron_hybrid import mamba_sizes, not_buildable, uncounted_biases  # noqa: E402
from vramlens.formats.megatron_hybrid import nemotron_h_config as hybrid_config  # noqa: E402

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


def sizes_of(f: dict[str, str | bool]) -> dict[str, Any]:
    """The sizes `megatron_hybrid.nemotron_h_config` takes, from a conf file's flags (megatron/training/arguments.py:
    without --kv-channels, hidden_size // num_attention_heads; without --ffn-hidden-size, 4 · hidden_size)."""
    hidden, heads = int(f["hidden-size"]), int(f["num-attention-heads"])
    moe_ffn = f.get("moe-ffn-hidden-size") or f.get("ffn-hidden-size")
    return {
        "hidden": hidden,
        "heads": heads,
        "kv_heads": int(f["num-query-groups"]) if f.get("group-query-attention") else heads,
        "head_dim": int(f.get("kv-channels") or hidden // heads),
        "ffn": int(f.get("ffn-hidden-size") or 4 * hidden),
        "vocab": int(f["padded-vocab-size"]) if f.get("padded-vocab-size") else NEMOTRON_H_VOCAB,
        "tied": not f.get("untie-embeddings-and-output-weights"),
        "squared_relu": bool(f.get("squared-relu")),
        "linear_bias": not f.get("disable-bias-linear"),
        "qkv_bias": bool(f.get("add-qkv-bias")),
        "layernorm": "rms" not in str(f.get("normalization") or "LayerNorm").lower(),
        "dtype": "bf16" if f.get("bf16") else "fp16" if f.get("fp16") else None,
        "experts": int(str(f["num-experts"])) if f.get("num-experts") else None,
        "topk": int(str(f["moe-router-topk"])) if f.get("moe-router-topk") else None,
        "moe_ffn": int(str(moe_ffn or 4 * hidden)),
        "shared": int(str(f.get("moe-shared-expert-intermediate-size") or 0)),
    }


def nemotron_h_config(f: dict[str, str | bool]) -> tuple[dict[str, Any] | None, list[str], str | None]:
    """The nemotron_h config.json of a hybrid's flags (the run reader's, `megatron_hybrid.nemotron_h_config`), what
    it had to assume, and why a file is left out (None when it is not)."""
    pattern = str(f.get("hybrid-layer-pattern") or f.get("hybrid-override-pattern"))
    sizes = sizes_of(f)
    if f.get("swiglu"):
        return None, [], "gated (SwiGLU) MLPs, which Nemotron-H's layers do not have"
    if (why := not_buildable(pattern, sizes)) is not None:
        return None, [], why
    if uncounted_biases(pattern, sizes):
        return None, [], "biases (linear or LayerNorm) that a nemotron_h config.json cannot hold"
    stated = {name: f.get(name.replace("_", "-")) for name in MAMBA_FLAGS}  # `--mamba-head-dim 64` → mamba_head_dim
    mamba = mamba_sizes(sizes["hidden"], {name: int(str(v)) if v else None for name, v in stated.items()})
    assumed = []
    if not f.get("padded-vocab-size"):
        assumed.append(
            f"vocabulary not in the Megatron arguments (the Hugging Face tokenizer's): {NEMOTRON_H_VOCAB}, "
            "transformers 5.24 NemotronHConfig's default"
        )
    return hybrid_config(pattern, sizes, mamba), assumed, None


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
            config, assumed, why = nemotron_h_config(f)
        except KeyError as missing:
            left_out.append(where | {"id": model_id, "why": f"--{missing.args[0]} not stated"})
            continue
        if config is None:
            left_out.append(where | {"id": model_id, "why": why})
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
