"""The formula estimator against the exact trace, shape by shape.

For a sweep of catalog models (1B–70B), sequence lengths (512–8192), micro batches (1–8) and settings
(checkpointing, LoRA, QLoRA, 8-bit Adam, foreach/fused AdamW, AMP, litgpt's LoRA/QLoRA step), builds the
ResolvedPlan, estimates its
allocated peak (`estimate(rp).allocated_bytes`) and traces it under fake tensors (`vramlens.trace.engine`),
then prints estimate ÷ trace per row and the share of rows within ±5 %. Rows outside ±5 % are listed with
both breakdowns. The litgpt rows are also set beside the peaks litgpt published for the same runs
(shared/calibration/ground-truth.jsonl). Finally it times the trace of Llama-3-70B at s=4096.

    python benchmarks/trace_vs_estimate.py [--quick] [--out benchmarks/results/trace_vs_estimate.txt]
    python benchmarks/trace_vs_estimate.py --real [--quick] [--out benchmarks/results/trace_real_vs_estimate.txt]

`--real` runs a grid of architectures × full/AMP/LoRA/DoRA/QLoRA × checkpointing on the real libraries
(transformers, peft, bitsandbytes under fake tensors: `vramlens.trace.hf`) and sets the estimate and the synthetic
trace beside each row (needs the `trace` extra).

Needs torch (and bitsandbytes for the QLoRA and 8-bit rows). Calibration is switched off so the estimate
is the formula's own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ["VRAMLENS_CALIBRATION"] = "off"

from vramlens import environment  # noqa: E402
from vramlens.estimate import GIB, estimate  # noqa: E402
from vramlens.knowledge import (
    frameworks,  # noqa: E402
    peft_methods,  # noqa: E402
    versions,  # noqa: E402
)
from vramlens.knowledge import gpus as gpu_kb  # noqa: E402
from vramlens.knowledge import models as model_kb  # noqa: E402
from vramlens.knowledge import optimizers as opt_kb  # noqa: E402
from vramlens.resolve import adapters  # noqa: E402
from vramlens.resolved import ResolvedPlan  # noqa: E402
from vramlens.settings import Settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GROUND_TRUTH = ROOT / ".." / "shared" / "calibration" / "ground-truth.jsonl"
TOLERANCE = 0.05

M1B, M3B, M8B = "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-3B", "meta-llama/Llama-3.1-8B"
M70B = "meta-llama/Meta-Llama-3-70B"
MISTRAL, QWEN, GEMMA2, QWEN3 = "mistralai/Mistral-7B-v0.3", "Qwen/Qwen2.5-7B", "google/gemma-2-9b", "Qwen/Qwen3-8B"
LORA = dict(peft="lora", lora_r=16, lora_alpha=16.0, lora_targets=("q", "k", "v", "o", "gate", "up", "down"))
QLORA = dict(LORA, peft="qlora", quant_bits=4, quant_double=True)

# litgpt's LoRA/QLoRA step (litgpt finetune_lora, precision bf16-true, torch.optim.AdamW): bf16 adapters, no
# k-bit upcast, the 128-token chunked head and loss, no attention mask, the LM head apart from the embedding
# (`make_plan` unties it); QLoRA quantizes the LM head too and runs the bitsandbytes litgpt pins (0.42.0: every
# 4-bit matmul keeps its input). `measured` names the ground-truth row of the same run.
LLAMA2_7B, LLAMA3_8B, GEMMA_2B, TINYLLAMA = (
    "meta-llama/Llama-2-7b-hf",
    "meta-llama/Meta-Llama-3-8B",
    "google/gemma-2b",
    "TinyLlama/TinyLlama-1.1B",
)
ALL_AND_HEAD = ("q", "k", "v", "o", "gate", "up", "down", "lm_head")


def litgpt(r: int, targets: tuple[str, ...], dropout: float, *, quant: bool, measured: str) -> dict:
    out = dict(
        framework="litgpt",
        loss_impl="chunked",
        adapter_fp32=False,
        kbit_upcast=False,
        attn_mask=False,
        optimizer="adamw_torch",
        peft="lora",
        lora_r=r,
        lora_alpha=16.0,
        lora_targets=targets,
        lora_dropout=dropout,
        measured=measured,
    )
    out.update(frameworks.step_flags("litgpt"))  # the step fields the resolver sets for a litgpt config
    if quant:
        out.update(
            peft="qlora",
            quant_bits=4,
            quant_keeps_input=frameworks.bnb_keeps_4bit_input(frameworks.BITSANDBYTES["litgpt"]),
        )
    return out


# (label, model, seq, micro batch, settings)
SWEEP: list[tuple[str, str, int, int, dict]] = [
    ("full fused", M1B, 512, 1, {}),
    ("full fused", M1B, 2048, 4, {}),
    ("full foreach", M1B, 2048, 1, dict(optimizer_impl="foreach")),
    ("full fused ckpt", M1B, 8192, 2, dict(grad_checkpointing=True)),
    ("AMP foreach", M1B, 2048, 1, dict(amp=True, weight_dtype="fp32", optimizer_impl="foreach")),
    ("AMP fused ckpt", M1B, 4096, 2, dict(amp=True, weight_dtype="fp32", grad_checkpointing=True)),
    ("LoRA", M1B, 2048, 1, LORA),
    ("full fused", M3B, 1024, 2, {}),
    ("full foreach ckpt", M3B, 4096, 1, dict(optimizer_impl="foreach", grad_checkpointing=True)),
    ("LoRA ckpt", M3B, 4096, 4, dict(LORA, grad_checkpointing=True)),
    ("QLoRA ckpt", M3B, 2048, 8, dict(QLORA, grad_checkpointing=True)),
    ("8-bit AdamW", M3B, 2048, 1, dict(optimizer="adamw_bnb_8bit")),
    ("full fused", M8B, 512, 1, {}),
    ("full fused", M8B, 2048, 1, {}),
    ("full foreach", M8B, 2048, 1, dict(optimizer_impl="foreach")),
    ("full fused ckpt", M8B, 4096, 4, dict(grad_checkpointing=True)),
    ("full fused", M8B, 4096, 4, {}),
    ("8-bit AdamW ckpt", M8B, 2048, 2, dict(optimizer="adamw_bnb_8bit", grad_checkpointing=True)),
    ("paged 8-bit AdamW", M8B, 1024, 1, dict(optimizer="paged_adamw_8bit")),
    ("LoRA", M8B, 2048, 1, LORA),
    ("LoRA ckpt", M8B, 8192, 1, dict(LORA, grad_checkpointing=True)),
    ("LoRA q,v bf16 adapters", M8B, 2048, 2, dict(LORA, lora_targets=("q", "v"), adapter_fp32=False)),
    ("QLoRA", M8B, 2048, 1, QLORA),
    ("QLoRA ckpt", M8B, 4096, 2, dict(QLORA, grad_checkpointing=True)),
    ("QLoRA ckpt paged", M8B, 8192, 1, dict(QLORA, grad_checkpointing=True, optimizer="paged_adamw_8bit")),
    ("full fused ckpt", MISTRAL, 4096, 2, dict(grad_checkpointing=True)),
    ("QLoRA ckpt", MISTRAL, 2048, 4, dict(QLORA, grad_checkpointing=True)),
    ("full fused ckpt", QWEN, 2048, 2, dict(grad_checkpointing=True)),
    ("LoRA ckpt", QWEN, 4096, 1, dict(LORA, grad_checkpointing=True)),
    ("LoRA ckpt", GEMMA2, 2048, 2, dict(LORA, grad_checkpointing=True)),
    ("LoRA ckpt", QWEN3, 2048, 2, dict(LORA, grad_checkpointing=True)),
    ("full fused ckpt", M70B, 2048, 1, dict(grad_checkpointing=True)),
    ("full fused", M70B, 4096, 1, {}),
    ("LoRA ckpt", M70B, 4096, 1, dict(LORA, grad_checkpointing=True)),
    ("QLoRA ckpt", M70B, 2048, 1, dict(QLORA, grad_checkpointing=True)),
    ("QLoRA ckpt paged", M70B, 8192, 2, dict(QLORA, grad_checkpointing=True, optimizer="paged_adamw_8bit")),
    ("LoRA dropout 0.05", M8B, 2048, 1, dict(LORA, lora_dropout=0.05)),
    (
        "litgpt QLoRA q,v",
        LLAMA2_7B,
        1304,
        1,
        litgpt(8, ("q", "v"), 0.05, quant=True, measured="lr-llama2-7b-qlora-mb1"),
    ),
    ("litgpt LoRA q,v", LLAMA2_7B, 1304, 1, litgpt(8, ("q", "v"), 0.05, quant=False, measured="lr-llama2-7b-lora-mb1")),
    ("litgpt QLoRA q,v", LLAMA3_8B, 512, 2, litgpt(32, ("q", "v"), 0.05, quant=True, measured="lg-llama3-8b-qlora")),
    ("litgpt LoRA all+head", GEMMA_2B, 512, 2, litgpt(8, ALL_AND_HEAD, 0.1, quant=False, measured="lg-gemma2b-lora")),
    (
        "litgpt QLoRA all+head",
        TINYLLAMA,
        512,
        8,
        litgpt(32, ALL_AND_HEAD, 0.05, quant=True, measured="lg-tinyllama-qlora"),
    ),
]
QUICK = {0, 2, 6, 13, 19, 22, 41}


# The real-library grid (`--real`): architectures × training mode × precision × checkpointing, traced with the
# real transformers/peft/bitsandbytes code (`engine.run(..., backend="transformers")`) and with the synthetic model.
REAL_MODELS = [
    M1B,
    M8B,
    "mistralai/Mistral-7B-v0.1",
    QWEN,
    "Qwen/Qwen2.5-0.5B",
    QWEN3,
    "Qwen/Qwen3-0.6B",
    GEMMA2,
    "google/gemma-2-2b",
    "google/gemma-3-1b-pt",
    "microsoft/Phi-3-mini-4k-instruct",
    "allenai/OLMo-2-1124-7B",
    "mistralai/Mixtral-8x7B-v0.1",
]
REAL_MODES = {
    "full bf16": dict(),
    "full AMP": dict(amp=True, weight_dtype="fp32"),
    "LoRA": LORA,
    "DoRA": dict(LORA, peft="dora"),
    "QLoRA": QLORA,
}
REAL_QUICK_MODELS = {M1B, "Qwen/Qwen2.5-0.5B", "google/gemma-3-1b-pt"}
# the named grids (`--grid NAME`, each its own results table, `trace_real_<name>_vs_estimate.txt` except the main one):
# "main" the first families; "more" the families added next (GPT-2, GPT-NeoX, Falcon, Phi-2, Qwen3-MoE, GPT-BigCode);
# "alibi" BLOOM
GRIDS: dict[str, list[str]] = {
    "main": REAL_MODELS,
    "more": [
        "openai-community/gpt2-large",
        "stabilityai/stablelm-base-alpha-3b",
        "tiiuae/falcon-7b",
        "microsoft/phi-2",
        "Qwen/Qwen3-30B-A3B",
        "bigcode/starcoderbase-1b",
    ],
    # ALiBi positions, attention written out in the modelling code (BLOOM's `alibi.baddbmm` and fp32 softmax)
    "alibi": ["bigscience/bloom-560m", "bigscience/bloom-1b7"],
}
GRIDS["t5"] = ["google-t5/t5-base", "google/flan-t5-large"]  # encoder-decoders: T5 v1.0 (relu, tied), Flan-T5
# a grid's own training modes where it does not run all of REAL_MODES
GRID_MODES: dict[str, dict[str, dict]] = {
    # T5's adapters on every linear of its blocks: q, k, v, o and wi_0, wi_1, wo (gated-gelu) or wi, wo (relu)
    "t5": {
        **REAL_MODES,
        **{
            name: dict(settings, lora_targets=LORA["lora_targets"] + ("fc1", "fc2"))
            for name, settings in REAL_MODES.items()
            if settings.get("peft")
        },
    },
}
# a grid's own (seq, micro batch) where 2048 × 2 does not fit its models: T5's 512-token inputs (the published
# configs' n_positions) with a target as long (the estimator's encoder-decoder assumption)
GRID_SHAPES: dict[str, tuple[int, int]] = {"t5": (512, 8)}

# "encoders": BERT, RoBERTa and DeBERTa-v3 fine-tuned for sequence classification (transformers'
# `*ForSequenceClassification`, the head a `block: encoder` plan estimates: `scalar_head`), at their 512 positions.
# The modes are REAL_MODES with the LoRA targets every block linear of an encoder has (q, k, v, o and the two MLP
# linears, fc1/fc2: an encoder's MLP is not gated, so the decoders' gate/up/down name nothing in it). No QLoRA:
# from_pretrained in 4 bits quantizes the classifier as well, and peft's sequence-classification task copies that
# 4-bit module into its trained copy (modules_to_save), which the trace cannot build (`hf.unsupported`).
ENCODER_LORA = dict(LORA, lora_targets=("q", "k", "v", "o", "fc1", "fc2"))
GRIDS["encoders"] = ["google-bert/bert-large-uncased", "FacebookAI/roberta-large", "microsoft/deberta-v3-base"]
GRID_MODES["encoders"] = {
    "full bf16": dict(scalar_head=True),
    "full AMP": dict(amp=True, weight_dtype="fp32", scalar_head=True),
    "LoRA": dict(ENCODER_LORA, scalar_head=True),
    "DoRA": dict(ENCODER_LORA, peft="dora", scalar_head=True),
}
GRID_SHAPES["encoders"] = (512, 8)

# the language tower of a vision-language model: Gemma-3-4B-it's text decoder (its config.json `text_config`) built as
# transformers' Gemma3ForCausalLM and trained on text-only batches; its SigLIP vision tower is not built (the plan's
# architecture is the catalog's with the vision fields cleared: `language_tower`)
GRIDS["vlm_tower"] = ["google/gemma-3-4b-pt"]
GRID_MODES["vlm_tower"] = {name: dict(settings, language_tower=True) for name, settings in REAL_MODES.items()}
# the whole vision-language model: Gemma-3-4B as AutoModelForCausalLM builds it (Gemma3ForConditionalGeneration,
# SigLIP tower + projector), on text-only batches ("txt": a text fine-tune) and on batches with one 896 × 896 image
# per sequence ("img": 256 image tokens among the 2048, pixel_values and token_type_ids as Gemma3Processor gives
# them). Full fine-tunes train the tower (TRL / transformers' Trainer); LoRA on the blocks' q, k, v, o, gate, up,
# down (peft also matches the tower's q_proj/k_proj/v_proj) and, "LoRA*", on every linear (peft's all-linear: the
# tower's too)
GRIDS["vlm"] = ["google/gemma-3-4b-pt"]
GRID_MODES["vlm"] = {
    f"{mode} {batch}": dict(settings, images_per_sequence=int(batch == "img"), vision_frozen=mode != "full")
    for mode, settings in (
        ("full", {}),
        ("LoRA", LORA),
        ("LoRA*", dict(LORA, lora_targets=("all-linear",))),
        ("QLoRA", QLORA),
    )
    for batch in ("txt", "img")
}
GRIDS["variants"] = [M1B, "Qwen/Qwen2.5-0.5B", "google/gemma-3-1b-pt", "Qwen/Qwen3-0.6B"]
# peft's IA3 and VeRA on the family's default targets (`make_plan`), pure fp32 (fp32 weights, no autocast), and TRL's
# chunked `nll` loss (SFTTrainer's fused LM head) under LoRA and full fine-tuning
GRID_MODES["variants"] = {
    "IA3": dict(peft="ia3"),
    "VeRA": dict(peft="vera", lora_r=256),
    "full fp32": dict(weight_dtype="fp32", compute_dtype="fp32"),
    "LoRA nll": dict(LORA, loss_impl="chunked", framework="trl"),
    "full nll": dict(loss_impl="chunked", framework="trl"),
}
# torchtune's own model, adapters and loss (`vramlens.trace.torchtune_backend`: the family's component builder with
# the plan's shapes, its single-device recipes' step): pure bf16 (or fp32) as torchtune trains, no padding mask (its
# collate passes none), torch.nn.CrossEntropyLoss or CEWithChunkedOutputLoss, LoRA on torchtune's default q/v and on
# every block linear (lora_attn_modules q, k, v, output_proj + apply_lora_to_mlp), DoRA, QLoRA (torchao NF4 base
# weights)
GRIDS["torchtune"] = [M1B, "Qwen/Qwen2.5-0.5B", M8B, "mistralai/Mistral-7B-v0.1"]
TORCHTUNE = dict(framework="torchtune", adapter_fp32=False, kbit_upcast=False)
TORCHTUNE_LORA = dict(TORCHTUNE, **{k: v for k, v in LORA.items()}, loss_impl="chunked")
GRID_MODES["torchtune"] = {
    "full CE": TORCHTUNE,
    "full chunk": dict(TORCHTUNE, loss_impl="chunked"),
    "fp32 chunk": dict(TORCHTUNE, loss_impl="chunked", weight_dtype="fp32", compute_dtype="fp32"),
    "LoRA q,v": dict(TORCHTUNE_LORA, lora_targets=("q", "v")),
    "LoRA all": TORCHTUNE_LORA,
    "DoRA all": dict(TORCHTUNE_LORA, peft="dora"),
    "QLoRA all": dict(TORCHTUNE_LORA, peft="qlora", quant_bits=4, quant_double=True),
}
# "hybrids": architectures that are not attention + MLP throughout, each a tiny config.json of its model_type
# (tests/trace/tiny_configs.py: transformers' own config classes, shrunk, layer patterns kept) read as a user's
# config.json is (`arch_from_hf_config`), and built by the real backend with transformers' config class:
# Mamba-2, Falcon-H1 and Jamba (Mamba mixers beside attention), LFM2 (short convolutions), Qwen3-Next (gated
# DeltaNet, fused MoE), gpt-oss (fused MoE with biases, sinks), DeepSeek-V3 (MLA + MoE), Gemma-3n (per-layer
# embeddings, AltUp, LAuReL), Llama-4 (interleaved MoE, chunked attention), Bamba, Nemotron-H and Granite-4 hybrids
# (Mamba-2's mixer among attention layers; Nemotron-H one mixer per block). Full, LoRA and QLoRA on the attention
# and MLP linears (q, k, v, o, gate, up, down: peft's all-linear would take Mamba-2's out_proj, which peft 0.21.2
# then refuses)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "trace"))
from tiny_configs import TINY_CONFIGS  # noqa: E402

TINY = "tiny:"  # a grid model named TINY + model_type is that tiny config
GRIDS["hybrids"] = [TINY + t for t in TINY_CONFIGS]
# Pure Mamba models hold no attention and no MLP: LoRA on what peft can adapt in them (resolve/adapters.py
# `MAMBA_LORA_TARGETS`: a Mamba-2 block's in_proj)
GRID_MODES["hybrids"] = {"full bf16": {}, "LoRA": LORA, "QLoRA": QLORA}
GRID_SHAPES["hybrids"] = (256, 2)
# decimals of the GiB columns where the peaks are a few MiB (the tiny configs): enough for --reuse to keep 0.1 %
GRID_DECIMALS = {"hybrids": 6}
# the backend a grid traces on (default: transformers)
GRID_BACKENDS = {"torchtune": "torchtune"}


def real_grid(quick: bool, grid: str = "main") -> list[tuple[str, str, int, int, dict]]:
    out = []
    seq, batch = GRID_SHAPES.get(grid, (2048, 2))
    for model in GRIDS[grid]:
        if quick and model not in REAL_QUICK_MODELS:
            continue
        for mode, settings in GRID_MODES.get(grid, REAL_MODES).items():
            for ckpt in (False, True):
                out.append(
                    (
                        mode + (" ckpt" if ckpt else ""),
                        model,
                        seq,
                        batch,
                        dict(settings, grad_checkpointing=ckpt, attn_mask=False),
                    )
                )
    return out


def results_table(grid: str) -> Path:
    """The results table a grid's run writes."""
    return (
        ROOT
        / "benchmarks"
        / "results"
        / ("trace_real_vs_estimate.txt" if grid == "main" else f"trace_real_{grid}_vs_estimate.txt")
    )


def real_main(args) -> int:
    """Estimate, synthetic trace and real-library trace of each grid row; estimate ÷ real and synthetic ÷ real."""
    from vramlens.trace import engine, hf, torchtune_backend
    from vramlens.trace.config import step_config

    backend = GRID_BACKENDS.get(args.grid, "transformers")
    real_code = torchtune_backend if backend == "torchtune" else hf
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    reused, reused_rows = reused_traces(args.reuse) if args.reuse else (None, {})
    if reused is not None:
        say(
            f"real and synthetic traces reused from {args.reuse.name} (neither depends on the estimator); "
            f"estimates computed now"
        )
        # the versions line of the run that traced them (a reused table repeats it below its own first line);
        # the estimates take their version-dependent choices from it, not from this interpreter
        line = next(line for line in args.reuse.read_text().splitlines() if line.startswith(VERSIONS_LINE))
        say(line)
        traced_with = versions_stated(line)
    else:
        traced_with = {k: x for k, x in hf.versions().items() if x}
        say(VERSIONS_LINE + "; " + ", ".join(f"{k} {x}" for k, x in traced_with.items()))
    seq, batch = GRID_SHAPES.get(args.grid, (2048, 2))
    kind = {
        "encoders": "bidirectional, sequence classification",
        "t5": "encoder-decoder, target as long as the input",
    }.get(args.grid, "causal SDPA")
    say(f"every row: seq {seq}, micro batch {batch}, no padding mask ({kind}), fused AdamW, set_to_none")
    say(
        f"{'#':>3} {'setting':<16} {'model':<30} {'real':>8} {'phase':<16} {'synth':>8} {'estimate':>9} "
        f"{'est÷real':>8} {'syn÷real':>8} {'real s':>6}"
    )
    grid = real_grid(args.quick, args.grid)
    for i, stated in reused_rows.items():  # the reused table's rows must be this grid's
        here = (grid[i][0], grid[i][1].split("/")[-1]) if i < len(grid) else None
        if stated != here:
            raise SystemExit(
                f"row {i} of {args.reuse.name} is {' / '.join(stated)}, this grid's is "
                f"{' / '.join(here) if here else 'missing'}: reuse it with the grid that wrote it "
                f"(--quick, --grid)"
            )
    ratios, synth, skipped = [], [], []
    for i, (label, model, seq, batch, settings) in enumerate(grid):
        if args.only and args.only.lower() not in model.lower() or args.rows and i not in args.rows:
            continue  # rows keep their grid numbers
        rp = make_plan(model, seq, batch, settings, traced_with)
        cfg = step_config(rp)
        reason = real_code.unsupported(cfg)
        if reused is not None:
            real, syn = reused.get(i, (None, None))
            if real is None:
                reason = reason or (syn if isinstance(syn, str) else "not traced in the reused run")
        elif reason is None:
            try:
                real = engine.run(cfg, backend=backend)
            except Exception as exc:  # noqa: BLE001 - reported as a row the real backend cannot trace
                reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        if reason is not None:
            skipped.append((i, label, model, reason))
            say(f"{i:>3} {label:<16} {model.split('/')[-1]:<30} {'—':>8} not traced on the real libraries: {reason}")
            continue
        if reused is None:
            try:
                syn = engine.run(cfg)
            except Exception:  # noqa: BLE001 - the stand-in has no module the targets name (Mamba-2's in_proj)
                syn = None
        est = estimate(rp, limits=False)
        r = est.allocated_bytes / real["peak_bytes"]
        ratios.append((r, label, model))
        d = GRID_DECIMALS.get(args.grid, 2)
        syn_col, q_col = f"{'—':>8}", f"{'—':>8}"
        if isinstance(syn, dict):
            q = syn["peak_bytes"] / real["peak_bytes"]
            synth.append(q)
            syn_col, q_col = f"{syn['peak_bytes'] / GIB:>8.{d}f}", f"{q:>8.3f}"
        say(
            f"{i:>3} {label:<16} {model.split('/')[-1]:<30} {real['peak_bytes'] / GIB:>8.{d}f} {real['phase']:<16} "
            f"{syn_col} {est.allocated_bytes / GIB:>9.{d}f} {r:>8.3f} {q_col} "
            f"{real['seconds']:>6.1f}{'' if abs(r - 1) <= 0.03 else '  ← est. off by >3 %'}"
        )
    say()
    if ratios:
        rs = sorted(x[0] for x in ratios)
        for tol in (0.03, 0.05, 0.15):
            n = sum(abs(x - 1) <= tol for x in rs)
            say(f"estimate within ±{tol:.0%} of the real trace: {n}/{len(rs)} = {n / len(rs):.0%}")
        say(f"estimate ÷ real trace: median {rs[len(rs) // 2]:.3f}, from {rs[0]:.3f} to {rs[-1]:.3f}")
        n = sum(abs(x - 1) <= 0.03 for x in synth)
        if synth:
            say(
                f"synthetic trace within ±3 % of the real trace: {n}/{len(synth)} "
                f"(from {min(synth):.3f} to {max(synth):.3f})"
            )
    if skipped:
        say(f"rows the real backend could not trace: {len(skipped)}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


def summary() -> list[str]:
    """Every real-library results table in benchmarks/results, row counts within ±3/5/15 % and the models and
    architecture families they cover, per table and over all of them."""
    import re

    family = {m.split("/")[-1]: lookup(m).family for models in GRIDS.values() for m in models}
    # est÷real, then syn÷real ("—" where no synthetic trace was made) and the trace's seconds
    ratio = re.compile(r"\s*\d+ .{16} (\S+)\s.*\s([\d.]+)\s+(?:[\d.]+|—)\s+[\d.]+(?:\s|$)")
    lines, every, models = [], [], set()
    for path in sorted((ROOT / "benchmarks" / "results").glob("trace_real_*vs_estimate*.txt")):
        rs = []
        for line in path.read_text().splitlines():
            m = ratio.match(line)
            if m and "not traced" not in line:
                rs.append(float(m.group(2)))
                models.add(m.group(1))
        every += rs
        n3 = sum(abs(r - 1) <= 0.03 + 5e-4 for r in rs)  # the tables print three decimals
        lines.append(f"{path.name:<52} {n3:>4}/{len(rs):<4} within ±3 %")
    fams = {family.get(m, m) for m in models}
    for tol in (0.03, 0.05, 0.15):
        n = sum(abs(r - 1) <= tol + 5e-4 for r in every)
        lines.append(f"all tables: {n}/{len(every)} = {n / max(len(every), 1):.1%} within ±{tol:.0%}")
    lines.append(f"{len(models)} models of {len(fams)} architecture families: {', '.join(sorted(fams))}")
    return lines


def reused_traces(path: Path) -> tuple[dict[int, tuple[dict | None, dict | str]], dict[int, tuple[str, str]]]:
    """Row number → (real, synthetic) traces read back from a results table this script wrote for the same grid;
    (None, reason) for a row that run could not trace. Also row number → (setting, model) as the table names
    them, to check the grid is the same."""
    import re

    out, names = {}, {}
    untraced = re.compile(r"\s*(\d+)\s.*not traced on the real libraries: (.+)$")
    # the synthetic columns read "—" where the stand-in could not run the row
    row = re.compile(
        r"\s*(\d+)\s+.+?\s{2,}\S+\s+([\d.]+)\s+(\S+)\s+([\d.]+|—)\s+[\d.]+\s+[\d.]+\s+(?:[\d.]+|—)\s+([\d.]+)"
    )
    name = re.compile(r"\s*(\d+) (.{16}) (\S+)")
    for line in path.read_text().splitlines():
        m = row.match(line)
        if m:
            real = {"peak_bytes": float(m.group(2)) * GIB, "phase": m.group(3), "seconds": float(m.group(5))}
            out[int(m.group(1))] = (real, None if m.group(4) == "—" else {"peak_bytes": float(m.group(4)) * GIB})
        elif (skip := untraced.match(line)) is not None:
            out[int(skip.group(1))] = (None, skip.group(2))  # the reason that run gave
        else:
            continue
        n = name.match(line)
        names[int(n.group(1))] = (n.group(2).strip(), n.group(3))
    return out, names


VERSIONS_LINE = "estimate and synthetic trace against the real-library trace (allocated peak, GiB)"


def versions_stated(line: str) -> dict[str, str]:
    """Package → version from a table's versions line ("...; torch 2.13.0+cpu, transformers 4.48.1, ...")."""
    listed = line.split("; ", 1)[1] if "; " in line else ""
    return dict(part.strip().split(" ", 1) for part in listed.split(",") if " " in part.strip())


def lookup(model: str):
    """The architecture of a grid model: a catalog id, or TINY + a model_type of tests/trace/tiny_configs.py."""
    if model.startswith(TINY):
        return model_kb.arch_from_hf_config(TINY_CONFIGS[model[len(TINY) :]], model)
    return model_kb.lookup_model(model)


def make_plan(
    model: str, seq: int, batch: int, settings: dict, traced_with: dict[str, str] | None = None
) -> ResolvedPlan:
    """The plan of one row. `traced_with` (package → version) names the libraries the row's real trace ran on;
    without it, the versions a run of this interpreter would use."""
    arch = lookup(model)
    if arch is None:
        raise SystemExit(f"{model} is not in the catalog")
    settings = dict(settings)
    settings.pop("measured", None)
    if settings.pop("language_tower", False):
        arch = language_tower(arch)
    arch = frameworks.arch_as_run(settings.get("framework", ""), arch)
    if settings.get("framework") == "torchtune" and "rope_caches" not in settings:
        # the builder the backend uses: Llama 3.2's for llama (one shared RoPE), the family's own otherwise
        settings["rope_caches"] = frameworks.torchtune_rope_caches(
            None, arch.family, settings.get("peft", "none"), arch.layers
        )
    if settings.get("peft") in ("lora", "qlora") and arch.family in adapters.MAMBA_LORA_TARGETS:
        # a model with no attention and no MLP: LoRA on what peft can adapt in it
        settings["lora_targets"] = adapters.MAMBA_LORA_TARGETS[arch.family]
    if settings.get("peft") in ("ia3", "vera") and "lora_targets" not in settings:
        # peft's default targets for the family, as the resolver takes them
        targets, feedforward = peft_methods.default_targets(settings["peft"], arch.family)
        settings.update(lora_targets=targets, feedforward_targets=feedforward)
    opt = opt_kb.lookup_optimizer(settings.pop("optimizer", "adamw_torch_fused"))
    impl = settings.pop("optimizer_impl", opt.default_impl if opt.default_impl != "none" else "fused")
    gpu = gpu_kb.lookup_gpu("H100-80GB")[0]
    # the version-dependent choices the resolver makes, for the transformers this interpreter traces with
    # (litgpt builds its own model and expands grouped K/V itself: no transformers choice applies, as in resolve)
    hf = settings.get("framework", "transformers") in frameworks.HF_MODEL_FRAMEWORKS
    if traced_with is None:
        traced_with = {k: found.version for k, found in environment.versions(Settings()).items()}
    # Gemma-3's batches with images carry token_type_ids: explicit masks reach every layer (components.image_block_mask)
    image_mask = bool(settings.get("images_per_sequence")) and arch.family == "gemma3_text" and bool(arch.vision_params)
    run = versions.as_run(
        arch.family,
        "sdpa",
        traced_with.get("transformers"),
        hf_model=hf,
        masked=settings.get("attn_mask", True) or image_mask,
        loss_impl=settings.get("loss_impl", "standard"),
    )
    return ResolvedPlan(
        arch=arch,
        optimizer=opt,
        optimizer_impl=impl,
        gpu=gpu,
        seq_len=seq,
        micro_batch=batch,
        weight_dtype=settings.pop("weight_dtype", "bf16"),
        compute_dtype=settings.pop("compute_dtype", "bf16"),
        attn_impl=run.attention,
        repeat_kv=run.repeat_kv,
        loss_shifted_copy=run.loss_shifted_copy,
        versions=tuple((k, x, "the trace's interpreter") for k, x in traced_with.items()),
        **settings,
    )


def language_tower(arch):
    """A vision-language model's language model alone (what `AutoModelForCausalLM` builds from its `text_config`)."""
    return arch.model_copy(
        update={k: type(v)() for k, v in arch.model_dump().items() if k.startswith(("vision_", "image_"))}
    )


def breakdown(parts: dict) -> str:
    return ", ".join(f"{k} {v / GIB:.2f}" for k, v in parts.items() if v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="six rows only")
    ap.add_argument("--out", type=Path, help="also write the report to this file")
    ap.add_argument(
        "--grid", default="main", choices=sorted(GRIDS), help="with --real: which grid of families (default: main)"
    )
    ap.add_argument(
        "--reuse",
        type=Path,
        help="with --real: take the real and synthetic traces from a table this "
        "script wrote (same grid) and only recompute the estimates",
    )
    ap.add_argument("--only", help="with --real: only the rows whose model id contains this text")
    ap.add_argument(
        "--rows",
        type=lambda text: {int(x) for x in text.split(",")},
        help="with --real: only these row numbers of the grid (comma-separated)",
    )
    ap.add_argument(
        "--real",
        action="store_true",
        help="the real-library grid: estimate and synthetic trace against the transformers/peft/bitsandbytes trace",
    )
    ap.add_argument("--summary", action="store_true", help="the real-library tables in benchmarks/results, summed")
    args = ap.parse_args()
    if args.summary:
        print("\n".join(summary()))
        return 0
    if args.real:
        return real_main(args)

    from vramlens.trace import engine
    from vramlens.trace.config import step_config

    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    say(
        f"{'#':>2} {'setting':<24} {'model':<28} {'seq':>5} {'b':>2} {'trace GiB':>10} {'phase':<16} "
        f"{'estimate GiB':>12} {'phase':<16} {'est÷trace':>9} {'trace s':>7}"
    )
    rows, misses, measured = [], [], []
    truth = {}
    if GROUND_TRUTH.exists():
        truth = {r["id"]: r for r in map(json.loads, GROUND_TRUTH.read_text().splitlines()) if r.get("measured_gib")}
    for i, (label, model, seq, batch, settings) in enumerate(SWEEP):
        if args.quick and i not in QUICK:
            continue
        rp = make_plan(model, seq, batch, settings)
        est = estimate(rp, limits=False)
        raw = engine.run(step_config(rp))
        ratio = est.allocated_bytes / raw["peak_bytes"]
        rows.append(ratio)
        ok = abs(ratio - 1) <= TOLERANCE
        say(
            f"{i:>2} {label:<24} {model.split('/')[-1]:<28} {seq:>5} {batch:>2} {raw['peak_bytes'] / GIB:>10.2f} "
            f"{raw['phase']:<16} {est.allocated_bytes / GIB:>12.2f} {est.phase:<16} {ratio:>9.3f} "
            f"{raw['seconds']:>7.1f}{'' if ok else '  ← miss'}"
        )
        if not ok:
            est_parts = {k: v for k, v in est.components.items() if k not in ("allocator", "cuda_context")}
            misses.append((i, label, model, seq, batch, raw, est, est_parts))
        if settings.get("measured") in truth:
            measured.append((i, truth[settings["measured"]], raw["peak_bytes"], est.allocated_bytes))
    within = sum(abs(r - 1) <= TOLERANCE for r in rows)
    say()
    say(
        f"within ±{TOLERANCE:.0%}: {within}/{len(rows)} = {within / len(rows):.0%} "
        f"(estimate ÷ trace from {min(rows):.3f} to {max(rows):.3f})"
    )
    if misses:
        say()
        say("rows outside the tolerance, traced vs estimated breakdown at each one's peak (GiB):")
        for i, label, model, seq, batch, raw, est, est_parts in misses:
            say(f"#{i} {label}, {model}, s={seq}, b={batch}")
            say(
                f"   trace    {raw['peak_bytes'] / GIB:.2f} in {raw['phase']} ({raw['peak_at']}): "
                f"{breakdown(raw['components'])}"
            )
            say("            phases: " + ", ".join(f"{k} {v / GIB:.2f}" for k, v in raw["phases"].items()))
            say(f"   estimate {est.allocated_bytes / GIB:.2f} in {est.phase}: {breakdown(est_parts)}")
            say("            phases: " + ", ".join(f"{k} {v / GIB:.2f}" for k, v in est.phases.items()))
    if measured:
        say()
        say("litgpt rows beside litgpt's published peaks (max_memory_allocated over the whole run, GiB):")
        for i, row, traced, estimated in measured:
            gib = row["measured_gib"]
            say(
                f"#{i} {row['id']:<26} measured {gib:6.2f}   trace {traced / GIB:6.2f} ({traced / GIB / gib:.3f})   "
                f"estimate {estimated / GIB:6.2f} ({estimated / GIB / gib:.3f})"
            )
    if not args.quick:
        rp = make_plan(M70B, 4096, 1, {})
        t0 = time.perf_counter()
        raw = engine.run(step_config(rp))
        wall = time.perf_counter() - t0
        say()
        say(
            f"trace time, Llama-3-70B s=4096 b=1 full bf16 fused AdamW: {wall:.1f} s wall "
            f"({raw['ops']:,} ops, peak {raw['peak_bytes'] / GIB:.2f} GiB; {os.cpu_count()} cores, "
            f"load average {os.getloadavg()[0]:.1f})"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
