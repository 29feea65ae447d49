"""Catalog entries from transformers' own config classes and from published config.json copies.

Two generated files, both read by the catalog (`knowledge/models.py` `_imported`) as config.json entries — each entry
holds a `config` dict that is mapped by `arch_from_hf_config` exactly as a local config.json is:

- `models_imported_transformers.json`: for each config class of the installed transformers whose docstring names the
  checkpoint its defaults reproduce ("Instantiating a configuration with the defaults will yield a similar
  configuration to that of the [org/name](https://huggingface.co/org/name) architecture"), an entry with that id and
  `ConfigClass().to_dict()`. Only config objects are built (no model, no weights). The docstrings are not always
  right (transformers 5.24 `SegformerConfig` names ByteDance-Seed/Seed-OSS-36B-Instruct, `Gemma2Config` google/
  gemma2-7b over the 2B's sizes) and "similar" is not "equal", so:
    * a class that is a sub-config (`sub_configs`) of another class naming the same checkpoint is left out (the
      checkpoint's config.json is the outer one: text_config + vision_config), and a checkpoint two unrelated classes
      name is taken from the one whose model_type its name spells, else the one its whole id (the org) spells, else
      left out;
    * the parameter count (language model + vision tower) must be within `SIZE_TOLERANCE` of the size the name
      states ("35B", "1.5B"), or that of the language model alone where the name states that (Qwen2.5-Omni-7B),
      else the entry is left out; a mixture of experts whose name states only the
      parameters used per token ("Qwen1.5-MoE-A2.7B"), or states its size before its number of experts (Meta's
      "Llama-4-Scout-17B-16E": 17B activated, 109B total), is held to that, counting its layers'
      `experts_per_token` routed experts alone; a checkpoint whose name states no size is left out (defaults that name
      bigscience/bloom build 16 M parameters, DbrxConfig's 2.5 B for dbrx-instruct);
    * every id that is also in the catalog already (models.yaml, litgpt's import, the config.json copies below) is
      not written (the catalog entry wins) but compared, shape field by shape field as the estimate reads them, and
      recorded under "checked" with the fields that differ (and the dtype: defaults state none, bf16 is assumed).
      Where that entry is itself approximate and files the model under another family (slime's Megatron flags for
      Qwen3-Next, whose custom layer spec the Megatron reader counts as GPT layers) and the defaults agree with it in
      every field, the defaults are written too, with `agrees_with` naming that source, and the catalog takes them
      before it (`knowledge/models.py` `_imported`): the same sizes, with the model's own layer kinds.
      Defaults reproduce a published config.json's shapes for under half of those checkpoints (transformers 5.24:
      `Qwen3Config` names Qwen/Qwen3-8B over other sizes, `GptOssConfig` gpt-oss-20b over the 120b's), so every
      written entry is marked approximate, with that count.
- `models_imported_mlc.json`: mlc-ai/mlc-llm `python/mlc_llm/model/model_preset.py` `MODEL_PRESETS` (config.json
  dicts), read from the bare git mirror with `ast.literal_eval` (never imported). Only presets whose
  `_name_or_path` is a Hub id (org/name) become entries: the others name no checkpoint, and none is guessed.

    python scripts/import_catalog_transformers.py [--only transformers|mlc]
        [--git-dir /work/.mirror/mlc-ai+mlc-llm/repo] [--commit HEAD] [--check]

`--check` writes nothing and exits 1 when a data file differs from what its source gives now. The writer, the
field comparison and the size reading are scripts/import_catalog.py's.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "server" / "vramlens" / "knowledge" / "data"
OUT_TRANSFORMERS = DATA / "models_imported_transformers.json"
OUT_MLC = DATA / "models_imported_mlc.json"
DEFAULT_MLC_GIT_DIR = Path("/work/.mirror/mlc-ai+mlc-llm/repo")
MLC_PATH = "python/mlc_llm/model/model_preset.py"
SIZE_TOLERANCE = 0.15  # parameters built from the defaults against the size the checkpoint's name states

sys.path.insert(0, str(ROOT / "server"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from import_catalog import FIELDS, _effective, render, stated_size  # noqa: E402

# the docstring sentence that names the checkpoint (transformers 5.24 utils/auto_docstring.py writes it from
# `@auto_docstring(checkpoint=...)`; older hand-written docstrings say the same)
_NAMES = re.compile(
    r"similar\s+configuration\s+to\s+that\s+of\s+the\s+[^\[]*?\[([\w.\-]+/[\w.\-]+)\]\(https://huggingface\.co/"
    r"([\w.\-]+/[\w.\-]+)\)",
    re.S,
)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
# the parameters a mixture of experts uses per token, as its name states them: "A2.7B" in Qwen1.5-MoE-A2.7B,
# "A3B" in Qwen3-30B-A3B
_ACTIVE = re.compile(r"(?<![A-Za-z0-9.])A(\d+(?:\.\d+)?)B(?![A-Za-z0-9])")
# a size followed by the number of experts, "17B-16E": the parameters per token (meta-llama/llama-models
# models/llama4/MODEL_CARD.md: "Llama 4 Scout (17Bx16E) … 17B (Activated) 109B (Total)")
_SIZE_THEN_EXPERTS = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)B-\d+E(?![A-Za-z0-9])")


# sources of the entries these imports write (left out of the catalog they are compared with, so that a rerun
# compares with the same entries)
_TRANSFORMERS_MARK = "defaults (docstring names"
_MLC_MARK = "mlc-ai/mlc-llm"


def _catalog_without(*marks: str) -> dict[str, Any]:
    """The catalog's models by lower-case spelling, without those whose source holds one of `marks`."""
    from vramlens.knowledge import models

    models._catalog.cache_clear()  # the data files as they are now (one may just have been written)
    _, exact, _ = models._catalog()
    kept = {k: m for k, m in exact.items() if not any(mark in m.source for mark in marks)}
    # a spelling whose entry carried a mark may have another, which that entry was taken before (`agrees_with`)
    for name in models._imported_files():
        text = (DATA / name).read_text(encoding="utf-8")
        for entry in json.loads(text)["models"]:
            if any(mark in entry.get("source", "") for mark in marks):
                continue
            for spelling in (entry["id"], *entry.get("aliases", ())):
                if spelling.lower() in exact and spelling.lower() not in kept:
                    kept[spelling.lower()] = models._arch({k: v for k, v in entry.items() if k != "agrees_with"})
    return kept


def _origin(arch: Any) -> str:
    return arch.source.split(";")[0][:100] or "models.yaml"


def _canonical(config: dict[str, Any]) -> dict[str, Any]:
    """The config with its keys sorted at every level (transformers fills some dicts, `rope_parameters` by layer
    kind, from sets: their order changes between runs)."""
    return json.loads(json.dumps(config, sort_keys=True, default=str))


def _mapped(config: dict[str, Any], model_id: str) -> Any:
    from vramlens.knowledge.models import arch_from_hf_config

    return arch_from_hf_config(config, model_id, source="")


def _language_b(arch: Any) -> float:
    """Parameters of the language model alone (billions)."""
    from vramlens.knowledge.models import param_count

    return param_count(arch) / 1e9


def _total_b(arch: Any) -> float:
    """Parameters of the language model and the towers beside it (billions)."""
    return _language_b(arch) + arch.vision_params / 1e9


def stated_active(name: str) -> float | None:
    """The parameters per token (billions) a mixture-of-experts name states ("Qwen1.5-MoE-A2.7B": 2.7,
    "Llama-4-Scout-17B-16E": 17), or None."""
    name = name.replace("_", "-")
    m = _SIZE_THEN_EXPERTS.search(name) or _ACTIVE.search(name)
    return float(m.group(1)) if m else None


def _active_b(arch: Any) -> float:
    """Parameters one token goes through (billions): the language model less, in every MoE layer, the routed experts
    beyond `experts_per_token` (shared experts and router always run)."""
    from vramlens.knowledge.models import _linear_mlp, param_count

    moe_layers = arch.layers - arch.dense_layers if arch.is_moe else 0
    expert = _linear_mlp(arch.hidden, arch.moe_intermediate or arch.intermediate, True, arch.mlp_bias)
    idle = moe_layers * max(0, arch.num_experts - arch.experts_per_token) * expert
    return (param_count(arch) - idle) / 1e9


def sized(model_id: str, arch: Any) -> tuple[float, float | None, str]:
    """(billions of parameters `arch` builds, the size the checkpoint's name states or None, " per token" where the
    name states the parameters per token of a mixture of experts whose tokens leave some experts idle, or " in the
    language model" where a multimodal name states the size of its language model alone; then the first is that
    count too)."""
    name = model_id.rsplit("/", 1)[-1]
    stated = stated_size(name)
    sparse = arch.is_moe and arch.num_experts > arch.experts_per_token
    if sparse and (_SIZE_THEN_EXPERTS.search(name) or not stated) and (active := stated_active(name)):
        return _active_b(arch), active, " per token"
    total = _total_b(arch)
    if stated and arch.vision_params and abs(total / stated - 1) > SIZE_TOLERANCE:
        # a multimodal name may state its language model's size alone: Qwen/Qwen2.5-Omni-7B's thinker is a
        # Qwen2.5-7B (7.6B; transformers 5.24 Qwen2_5OmniThinkerConfig text_config), beside vision and audio towers,
        # a talker and a vocoder (3.1B more)
        language = _language_b(arch)
        if abs(language / stated - 1) <= SIZE_TOLERANCE:
            return language, stated, " in the language model"
    return total, stated, ""


def _fields(arch: Any) -> dict[str, Any]:
    return {k: getattr(arch, k) for k in FIELDS}


# compared apart from the shapes: the catalog's own family name (a hand entry may be filed under the family whose
# formulas it uses), and the checkpoint's dtype (transformers' defaults state none: the mapping assumes bf16)
_NOT_COMPARED = ("family", "stored_dtype")


def _compare(arch: Any, catalog: Any) -> dict[str, list[Any]]:
    """The shape fields (as the estimate reads them) where `arch` and the catalog's entry differ. The dense MLP width
    of an MoE model whose every layer is MoE builds nothing, and is not compared."""
    pairs = _effective({"id": arch.id, **_fields(arch)}, catalog)
    differ = {k: [ours, theirs] for k, (ours, theirs) in pairs.items() if ours != theirs and k not in _NOT_COMPARED}
    if arch.is_moe and catalog.is_moe and not arch.dense_layers and not catalog.dense_layers:
        differ.pop("intermediate", None)
    return differ


def _checked(model_id: str, arch: Any, known: Any, **where: str) -> dict[str, Any]:
    """The record of one comparison with a catalog entry (`checked` in the data file)."""
    dtype = [arch.stored_dtype, known.stored_dtype]
    record = {"id": model_id, **where, "catalog": known.id, "from": _origin(known), "differs": _compare(arch, known)}
    return record | ({"dtype": dtype} if dtype[0] != dtype[1] else {}) | _fields(arch)


def _spells(model_type: str, model_id: str) -> bool:
    """Whether a checkpoint's name spells the model_type (`minimax` in MiniMax-Text-01-hf, not `minimax_m2`)."""
    squash = re.sub(r"[^a-z0-9]", "", model_id.rsplit("/", 1)[-1].lower())
    return re.sub(r"[^a-z0-9]", "", model_type.lower()) in squash


def _sub_configs(cls: type) -> set[type]:
    """The config classes nested in `cls` (`sub_configs`, and theirs: Qwen3-Omni's talker holds a code predictor)."""
    out: set[type] = set()
    todo = [cls]
    while todo:
        for sub in (getattr(todo.pop(), "sub_configs", None) or {}).values():
            if isinstance(sub, type) and sub not in out:
                out.add(sub)
                todo.append(sub)
    return out


def transformers_classes() -> tuple[list[tuple[str, str, type]], list[str]]:
    """(checkpoint id, model_type, config class) for every config class whose docstring names the checkpoint its
    defaults reproduce, one class per checkpoint; and why the others naming a checkpoint were left out."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    named: dict[str, list[tuple[str, type]]] = {}
    for model_type, class_name in CONFIG_MAPPING_NAMES.items():
        cls = getattr(transformers, class_name, None)
        match = _NAMES.search((cls.__doc__ or "") if cls is not None else "")
        if cls is None or match is None or match.group(1) != match.group(2):
            continue
        named.setdefault(match.group(2), []).append((model_type, cls))
    out, report = [], []
    for model_id, classes in sorted(named.items()):
        inner = {sub for _, cls in classes for sub in _sub_configs(cls)}
        outer = [(t, c) for t, c in classes if c not in inner]
        if len(outer) > 1:
            # the name's spelling, else the whole id's: the org may be the family (CohereForAI/c4ai-command-r-v01,
            # named by CohereConfig and by Cohere2Config, whose command-r7b checkpoints the docstring does not name)
            spelled = [(t, c) for t, c in outer if _spells(t, model_id)] or [
                (t, c) for t, c in outer if _spells(t, model_id.replace("/", "-"))
            ]
            if len(spelled) > 1:  # the longest spelling: qwen3_5_moe over qwen3_5 for Qwen3.5-35B-A3B
                longest = max(len(t) for t, _ in spelled)
                spelled = [(t, c) for t, c in spelled if len(t) == longest]
            if len(spelled) != 1:
                names = ", ".join(c.__name__ for _, c in outer)
                report.append(f"  left out {model_id}: named by unrelated classes ({names})")
                continue
            outer = spelled
        if not outer:
            continue
        out.append((model_id, *outer[0]))
    return out, report


def build_transformers() -> tuple[dict[str, Any], list[str]]:
    """models_imported_transformers.json's content, and the report lines."""
    import transformers

    version = transformers.__version__
    classes, report = transformers_classes()
    report.insert(0, f"transformers {version}: {len(classes)} config classes name a checkpoint")
    catalog = _catalog_without(_TRANSFORMERS_MARK)
    candidates: list[dict[str, Any]] = []
    unsized: list[str] = []
    checked: list[dict[str, Any]] = []
    confirmed: list[tuple[str, str, dict[str, Any], str, Any]] = []
    for model_id, model_type, cls in classes:
        try:
            config = _canonical(cls().to_dict())
        except Exception as exc:  # a class whose defaults do not validate (a required sub-config, ...)
            report.append(f"  left out {model_id}: {cls.__name__}() fails ({str(exc).splitlines()[0][:100]})")
            continue
        arch = _mapped(config, model_id)
        if arch is None:
            continue  # not a model with a language model's shapes (vision, audio, detection, ...)
        source = f"transformers {version} {cls.__name__} defaults (docstring names {model_id})"
        if (known := catalog.get(model_id.lower())) is not None:
            record = _checked(model_id, arch, known, **{"class": cls.__name__})
            checked.append(record)
            if known.approximate and not record["differs"] and arch.family != known.family:
                # the catalog's entry is approximate and files the model under another family (slime's Megatron
                # flags for a custom layer spec, counted as GPT layers): these defaults state the same shapes and
                # build the model's own layer kinds, so they are written too and taken before it
                confirmed.append((model_id, source, config, cls.__name__, known))
            continue
        total, stated, what = sized(model_id, arch)
        if not stated:
            unsized.append(model_id)
            continue
        if abs(total / stated - 1) > SIZE_TOLERANCE:
            report.append(
                f"  left out {model_id}: {cls.__name__} defaults build {total:.3g}B{what}, the name states {stated:g}B"
            )
            continue
        candidates.append({"id": model_id, "source": source, "config": config, "_class": cls.__name__})
    # "similar" measured: the checkpoints also in the catalog whose shapes the defaults reproduce
    agree = sum(1 for r in checked if not r["differs"])
    models: list[dict[str, Any]] = []
    for entry in candidates:
        note = (
            f"shapes from transformers {version} {entry.pop('_class')} defaults, which its docstring calls similar to "
            f"{entry['id']} (their size checked against the name; such defaults reproduce the published shapes of "
            f"{agree} of {len(checked)} checkpoints checked)"
        )
        models.append({"id": entry["id"], "source": entry["source"], "approximate": note, "config": entry["config"]})
    for model_id, source, config, class_name, known in confirmed:
        origin = known.source.split(";")[0]
        note = (
            f"shapes from transformers {version} {class_name} defaults, which its docstring calls similar to "
            f"{model_id}; every shape field the estimate compares agrees with {origin} (sizes that source does not "
            "state are the defaults')"
        )
        # the other entry's spellings of the same checkpoint come along (Qwen3-Next's Thinking variant)
        aliases = {"aliases": list(known.aliases)} if known.aliases else {}
        models.append(
            {"id": model_id, **aliases, "source": source, "approximate": note, "agrees_with": origin, "config": config}
        )
    report.append(
        f"  left out {len(unsized)} whose name states no size to check the defaults against: {', '.join(unsized)}"
    )
    report.append(f"  {len(models)} written, {len(checked)} already in the catalog: {agree} agree exactly")
    report += [f"  written beside an approximate entry of another family it agrees with: {c[0]}" for c in confirmed]
    for r in checked:
        if r["differs"]:
            report.append(f"  DIFFERS {r['id']} ({r['class']}, catalog {r['catalog']}): {r['differs']}")
    data = {
        "source": f"transformers {version} configuration classes (docstring checkpoints, default values)",
        "generated_by": "scripts/import_catalog_transformers.py",
        "models": sorted(models, key=lambda m: m["id"].lower()),
        "checked": sorted(checked, key=lambda m: m["id"].lower()),
    }
    return data, report


# ----------------------------------------------------------------------------------------------- mlc-llm


def read_mlc(git_dir: Path, commit: str) -> tuple[dict[str, Any], str]:
    """`MODEL_PRESETS` of mlc-llm's model_preset.py at `commit` of the bare mirror (ast only), and the full hash."""
    git = ["git", f"--git-dir={git_dir}"]
    sha = subprocess.run([*git, "rev-parse", f"{commit}^{{commit}}"], check=True, capture_output=True, text=True)
    full = sha.stdout.strip()
    text = subprocess.run([*git, "show", f"{full}:{MLC_PATH}"], check=True, capture_output=True, text=True).stdout
    for node in ast.parse(text).body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        if isinstance(target, ast.Name) and target.id == "MODEL_PRESETS" and node.value is not None:
            return ast.literal_eval(node.value), full
    raise ValueError(f"no MODEL_PRESETS in {MLC_PATH} at {full}")


def build_mlc(presets: dict[str, Any], sha: str) -> tuple[dict[str, Any], list[str]]:
    """models_imported_mlc.json's content, and the report lines."""
    catalog = _catalog_without(_TRANSFORMERS_MARK, _MLC_MARK)
    report = [f"mlc-llm {sha[:12]}: {len(presets)} presets"]
    models, checked, unnamed = [], [], []
    for name, config in presets.items():
        model_id = str(config.get("_name_or_path") or "")
        if not _HUB_ID.match(model_id) or model_id.startswith(("data/", "root/", "home/")):
            unnamed.append(name)
            continue
        arch = _mapped(config, model_id)
        if arch is None:
            report.append(f"  left out {name} ({model_id}): its config does not map to an architecture")
            continue
        if (known := catalog.get(model_id.lower())) is not None:
            checked.append(_checked(model_id, arch, known, preset=name))
            continue
        source = f"mlc-ai/mlc-llm {sha[:12]} {MLC_PATH} MODEL_PRESETS[{name!r}] (_name_or_path {model_id})"
        models.append({"id": model_id, "source": source, "config": _canonical(config)})
    report.append(f"  {len(unnamed)} presets name no Hub id (_name_or_path): {', '.join(unnamed)}")
    agree = sum(1 for r in checked if not r["differs"])
    report.append(f"  {len(models)} written, {len(checked)} already in the catalog: {agree} agree exactly")
    for r in checked:
        if r["differs"]:
            report.append(f"  DIFFERS {r['id']} (preset {r['preset']}, catalog {r['catalog']}): {r['differs']}")
    data = {
        "source": f"mlc-ai/mlc-llm {MLC_PATH} at {sha}",
        "generated_by": "scripts/import_catalog_transformers.py --only mlc",
        "models": sorted(models, key=lambda m: m["id"].lower()),
        "checked": sorted(checked, key=lambda m: m["id"].lower()),
    }
    return data, report


# ----------------------------------------------------------------------------------------------- main


def _write(path: Path, data: dict[str, Any], check: bool) -> bool:
    text = render(data)
    if check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        print("up to date" if current == text else f"{path} differs from the source")
        return current == text
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT)}")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", choices=("transformers", "mlc"))
    parser.add_argument("--git-dir", type=Path, default=DEFAULT_MLC_GIT_DIR, help="bare git mirror of mlc-ai/mlc-llm")
    parser.add_argument("--commit", default="HEAD", help="mlc-llm commit")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a data file is stale")
    args = parser.parse_args(argv)
    ok = True
    if args.only in (None, "mlc"):
        data, report = build_mlc(*read_mlc(args.git_dir, args.commit))
        print("\n".join(report))
        ok &= _write(OUT_MLC, data, args.check)
    if args.only in (None, "transformers"):
        data, report = build_transformers()
        print("\n".join(report))
        ok &= _write(OUT_TRANSFORMERS, data, args.check)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
