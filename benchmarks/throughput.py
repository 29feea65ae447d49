"""The step-time model (vramlens.estimate.throughput) against published tokens/s tables.

Rows are runs whose settings a table states, each built as the plan the estimator sees, with the measured tokens
per second per GPU beside the predicted one:

  MosaicML llm-foundry, scripts/train/benchmarking/README.md (commit 061f2c7): MPT models 125M–70B pre-trained
    with Composer + FSDP FULL_SHARD, bf16 compute, on 8–128 H100-80GB, A100-80GB and
    A100-40GB (the A100 tables: "1600 Gbps node-node interconnect"), with and without activation checkpointing;
    "Throughput (T/s/GPU)". MPT shapes from
    scripts/train/yamls/pretrain/mpt-*.yaml (d_model, n_heads, n_layers, expansion_ratio 4, vocab 50368, tied
    embeddings, no biases, LayerNorm, GELU MLP, `attn_impl: triton`: llmfoundry/models/layers/flash_attn_triton.py,
    flash-attn's Triton FlashAttention kernel; submit_benchmarks.py `--attn_impl` default 'triton').
  torchtune README.md (commit 0031bfb), "Memory and training speed": Llama 3.1 8B on one RTX 4090, batch 2,
    packed to 2048 tokens, torch.compile on, the single-device recipes' configs (full: bf16 weights, bitsandbytes
    PagedAdamW8bit in the backward, activation checkpointing; LoRA/QLoRA: rank 8, LoRA on q and v, QLoRA on q, k,
    v, output and the MLP, activation checkpointing). Rows on other GPUs are left out: their peak memory shows
    settings the table does not state. The full run's 16 GB of paged 8-bit states do not fit beside its bf16
    weights on the 24 GB card: each step pages them over PCIe (the memory estimate's paged-out part).
  torchtune README.md "Optimization flags" (commit 1814feb): Llama 3.2 3B on one A100, batch 2 × 4096 packed,
    each technique added to the previous row's (compile, chunked cross-entropy, activation checkpointing, optimizer
    in backward, activation offloading, 8-bit AdamW; LoRA, QLoRA).
  NVIDIA-NeMo/Automodel docs/performance-summary.mdx (commit 36044ad): LoRA on DGX-H100, 1–16 GPUs, TP 1–2.
  ms-swift docs/source_en/Megatron-SWIFT/Quick-start.md "Benchmark" (commit 3602360): Qwen2.5-14B full on 8 A800,
    DeepSpeed ZeRO-2 and ZeRO-3 (s/it of batch 1 × accumulation 2 × 8192 packed tokens per GPU).
  NVIDIA/Megatron-LM examples/llama/README.md "FP8 Performance" (commit d98e8a6): Llama 3 8B, 8 H100, CP 2.
  benchmarks/data/throughput_rows.jsonl: one row per published run, each with its page (url, commit), what the page
    states (`published`) and the settings read from the framework's defaults at that commit (`note`, which also
    names anything assumed):
      fms-acceleration scripts/benchmarks/refs/a100_80gb.csv (train_tokens_per_second per device): Mistral-7B,
        Mixtral-8x7B and Llama-2-70B full, LoRA and QLoRA on 1–2 A100-80GB, with and without the foak plugin's
        Triton kernels (the settings of the matching rows of published_rows.jsonl);
      torchtitan benchmarks/llama3_h100_202412_torchtitan.md (Tables 1–3: FSDP, torch.compile, Float8, context
        parallel; its H100s are the 96 GB, 2.4 TB/s, 500 W part: the catalog's H100-96GB) and
        benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md;
      QwenLM/Qwen README "Profiling of Memory and Speed": Qwen-1.8B and 7B LoRA and Q-LoRA on one A100 at 256–8192
        tokens (s/it at batch 1 × accumulation 8; Q-LoRA on the GPTQ Int4 chat checkpoints in fp16 under DeepSpeed,
        as the README's finetuning section and finetune_qlora_single_gpu.sh run it).

Prints every row, the absolute error (median |predicted/measured − 1|), and the relative speed of pairs of rows
of the same model on the same table (consecutive sequence lengths, checkpointing on/off, method): the share whose
predicted ratio is within ±15 % of the measured ratio. Writes the table to benchmarks/results/throughput.txt, or to
the file `--out` names.

    python benchmarks/throughput.py [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "server"))
sys.path.insert(0, str(REPO / "benchmarks"))
ROWS = REPO / "benchmarks" / "data" / "throughput_rows.jsonl"

from published import plan_from_row  # noqa: E402
from vramlens.estimate import estimate  # noqa: E402
from vramlens.knowledge.gpus import gpu_by_name  # noqa: E402
from vramlens.knowledge.models import lookup_model  # noqa: E402
from vramlens.knowledge.optimizers import lookup_optimizer  # noqa: E402
from vramlens.knowledge.schema import ModelArch  # noqa: E402
from vramlens.resolved import ResolvedPlan  # noqa: E402

MPT = {  # name: (d_model, n_heads, n_layers)
    "125m": (768, 12, 12),
    "350m": (1024, 16, 24),
    "760m": (1536, 12, 24),
    "1b": (2048, 16, 24),
    "3b": (2560, 20, 32),
    "7b": (4096, 32, 32),
    "13b": (5120, 40, 40),
    "30b": (7168, 64, 48),
    "70b": (8192, 64, 80),
}

# (table, model, seq_len, gpus, micro_batch, grad_accum, checkpointing, measured tokens/s per GPU)
FOUNDRY = [
    # H100 80GB BF16 (amp_bf16, FSDP FULL_SHARD)
    ("H100-SXM", "70b", 2048, 64, 8, 4, True, 1039),
    ("H100-SXM", "70b", 2048, 32, 2, 16, True, 882),
    ("H100-SXM", "30b", 8192, 8, 1, 21, True, 1384),
    ("H100-SXM", "30b", 4096, 8, 1, 21, True, 1802),
    ("H100-SXM", "30b", 2048, 8, 3, 21, True, 2002),
    ("H100-SXM", "30b", 1024, 8, 6, 21, True, 2084),
    ("H100-SXM", "13b", 32768, 8, 1, 3, True, 1976),
    ("H100-SXM", "13b", 16384, 8, 3, 3, True, 2985),
    ("H100-SXM", "13b", 4096, 8, 10, 3, True, 4717),
    ("H100-SXM", "13b", 2048, 8, 2, 1, False, 4792),
    ("H100-SXM", "13b", 1024, 8, 40, 3, True, 5502),
    ("H100-SXM", "7b", 65536, 8, 1, 2, True, 1956),
    ("H100-SXM", "7b", 32768, 8, 2, 2, True, 3318),
    ("H100-SXM", "7b", 8192, 8, 8, 2, True, 6935),
    ("H100-SXM", "7b", 4096, 8, 16, 2, True, 8611),
    ("H100-SXM", "7b", 2048, 8, 6, 1, False, 10643),
    ("H100-SXM", "7b", 1024, 8, 64, 2, True, 10203),
    ("H100-SXM", "3b", 65536, 8, 1, 2, True, 3262),
    ("H100-SXM", "3b", 32768, 8, 3, 6, True, 5873),
    ("H100-SXM", "3b", 16384, 8, 1, 6, False, 11152),
    ("H100-SXM", "3b", 8192, 8, 3, 6, False, 16578),
    ("H100-SXM", "3b", 4096, 8, 5, 6, False, 20964),
    ("H100-SXM", "3b", 2048, 16, 10, 3, False, 24142),
    ("H100-SXM", "3b", 1024, 8, 20, 6, False, 27046),
    ("H100-SXM", "3b", 512, 8, 40, 6, False, 27965),
    ("H100-SXM", "1b", 65536, 8, 1, 2, True, 5506),
    ("H100-SXM", "1b", 32768, 8, 1, 4, False, 12025),
    ("H100-SXM", "1b", 16384, 8, 2, 4, False, 19649),
    ("H100-SXM", "1b", 8192, 8, 3, 4, False, 29157),
    ("H100-SXM", "1b", 4096, 8, 7, 4, False, 38535),
    ("H100-SXM", "1b", 2048, 8, 14, 1, False, 45455),
    ("H100-SXM", "1b", 1024, 8, 18, 4, False, 48910),
    ("H100-SXM", "1b", 512, 8, 56, 4, False, 52275),
    ("H100-SXM", "760m", 32768, 8, 1, 2, False, 16291),
    ("H100-SXM", "760m", 16384, 8, 3, 2, False, 27815),
    ("H100-SXM", "760m", 8192, 8, 6, 2, False, 41825),
    ("H100-SXM", "760m", 4096, 8, 12, 2, False, 55459),
    ("H100-SXM", "760m", 2048, 8, 24, 2, False, 63147),
    ("H100-SXM", "760m", 1024, 8, 48, 2, False, 78581),
    ("H100-SXM", "760m", 512, 8, 96, 2, False, 83749),
    # A100 80GB (amp_bf16, FSDP FULL_SHARD)
    ("A100-80GB", "30b", 8192, 8, 1, 21, True, 574),
    ("A100-80GB", "30b", 4096, 8, 1, 21, True, 814),
    ("A100-80GB", "30b", 2048, 8, 3, 21, True, 916),
    ("A100-80GB", "30b", 1024, 8, 6, 21, True, 946),
    ("A100-80GB", "30b", 512, 8, 12, 21, True, 967),
    ("A100-80GB", "13b", 32768, 8, 1, 3, True, 1016),
    ("A100-80GB", "13b", 16384, 8, 3, 3, True, 1431),
    ("A100-80GB", "13b", 8192, 8, 5, 3, True, 1795),
    ("A100-80GB", "13b", 4096, 8, 10, 3, True, 2060),
    ("A100-80GB", "13b", 2048, 8, 2, 3, False, 2262),
    ("A100-80GB", "13b", 1024, 8, 40, 3, True, 2330),
    ("A100-80GB", "7b", 65536, 8, 1, 2, True, 1013),
    ("A100-80GB", "7b", 32768, 8, 2, 2, True, 1672),
    ("A100-80GB", "7b", 16384, 8, 4, 2, True, 2453),
    ("A100-80GB", "7b", 8192, 8, 8, 2, True, 3206),
    ("A100-80GB", "7b", 4096, 8, 16, 2, True, 3684),
    ("A100-80GB", "7b", 2048, 8, 6, 2, False, 4641),
    ("A100-80GB", "7b", 1024, 8, 64, 2, True, 4357),
    ("A100-80GB", "3b", 65536, 8, 1, 2, True, 1767),
    ("A100-80GB", "3b", 32768, 8, 3, 6, True, 3029),
    ("A100-80GB", "3b", 16384, 8, 1, 6, False, 5529),
    ("A100-80GB", "3b", 8192, 8, 3, 6, False, 7695),
    ("A100-80GB", "3b", 4096, 8, 5, 6, False, 9457),
    ("A100-80GB", "3b", 2048, 8, 10, 2, False, 10811),
    ("A100-80GB", "3b", 1024, 8, 20, 6, False, 11580),
    ("A100-80GB", "3b", 512, 8, 40, 6, False, 12127),
    ("A100-80GB", "1b", 65536, 8, 1, 2, True, 3044),
    ("A100-80GB", "1b", 32768, 8, 1, 4, False, 6275),
    ("A100-80GB", "1b", 16384, 8, 2, 4, False, 9956),
    ("A100-80GB", "1b", 8192, 8, 3, 4, False, 13814),
    ("A100-80GB", "1b", 4096, 8, 7, 4, False, 17807),
    ("A100-80GB", "1b", 2048, 8, 14, 4, False, 20513),
    ("A100-80GB", "1b", 1024, 8, 18, 4, False, 22112),
    ("A100-80GB", "1b", 512, 8, 56, 4, False, 23148),
    ("A100-80GB", "760m", 65536, 8, 1, 2, True, 4143),
    ("A100-80GB", "760m", 32768, 8, 1, 2, False, 8802),
    ("A100-80GB", "760m", 16384, 8, 3, 2, False, 14274),
    ("A100-80GB", "760m", 8192, 8, 6, 2, False, 20933),
    ("A100-80GB", "760m", 4096, 8, 12, 2, False, 27351),
    ("A100-80GB", "760m", 2048, 8, 24, 2, False, 32434),
    ("A100-80GB", "760m", 1024, 8, 48, 2, False, 29765),
    ("A100-80GB", "760m", 512, 8, 96, 2, False, 29446),
    ("A100-80GB", "350m", 65536, 8, 1, 2, False, 7524),
    ("A100-80GB", "350m", 32768, 8, 2, 2, False, 13652),
    ("A100-80GB", "350m", 16384, 8, 4, 2, False, 23559),
    ("A100-80GB", "350m", 8192, 8, 8, 2, False, 36569),
    ("A100-80GB", "350m", 4096, 8, 16, 2, False, 49555),
    ("A100-80GB", "350m", 2048, 8, 32, 2, False, 58782),
    ("A100-80GB", "350m", 1024, 8, 64, 2, False, 64813),
    ("A100-80GB", "350m", 512, 8, 128, 2, False, 69330),
    ("A100-80GB", "125m", 65536, 8, 1, 2, False, 20368),
    ("A100-80GB", "125m", 32768, 8, 2, 2, False, 36407),
    ("A100-80GB", "125m", 16384, 8, 4, 2, False, 60040),
    ("A100-80GB", "125m", 8192, 8, 8, 2, False, 90392),
    ("A100-80GB", "125m", 4096, 8, 16, 2, False, 118396),
    ("A100-80GB", "125m", 2048, 8, 32, 2, False, 141737),
    ("A100-80GB", "125m", 1024, 8, 64, 2, False, 156468),
    ("A100-80GB", "125m", 512, 8, 128, 2, False, 165681),
    # A100 40GB (bf16 PURE, FSDP FULL_SHARD)
    ("A100-40GB", "13b", 8192, 8, 1, 16, True, 1407),
    ("A100-40GB", "13b", 4096, 8, 2, 16, True, 1603),
    ("A100-40GB", "13b", 2048, 8, 4, 16, True, 1668),
    ("A100-40GB", "13b", 1024, 8, 8, 16, True, 1727),
    ("A100-40GB", "13b", 512, 8, 16, 16, True, 1763),
    ("A100-40GB", "7b", 16384, 8, 1, 4, True, 2249),
    ("A100-40GB", "7b", 8192, 8, 3, 4, True, 2887),
    ("A100-40GB", "7b", 4096, 8, 6, 4, True, 3366),
    ("A100-40GB", "7b", 2048, 8, 12, 4, True, 3679),
    ("A100-40GB", "7b", 1024, 8, 24, 4, True, 3854),
    ("A100-40GB", "7b", 512, 8, 48, 4, True, 3895),
    ("A100-40GB", "3b", 32768, 8, 1, 4, True, 2955),
    ("A100-40GB", "3b", 16384, 8, 2, 8, True, 4465),
    ("A100-40GB", "3b", 8192, 8, 1, 8, False, 7149),
    ("A100-40GB", "3b", 4096, 8, 2, 8, False, 8777),
]

# The same README's runs over several nodes (16–128 GPUs, 2048 tokens) not listed above: the H100 table and the two
# A100 tables "with 1600 Gbps node-node interconnect (RoCE)" (200 Gb/s per GPU). The A100 40GB table's header lacks
# its "Model TFLOP" column; its rows have it, so the cells are read by position as in the other tables.
FOUNDRY_NODES = [
    ("H100-SXM", "30b", 2048, 32, 14, 3, True, 2308),
    ("H100-SXM", "30b", 2048, 16, 10, 3, True, 2263),
    ("H100-SXM", "13b", 2048, 64, 2, 1, False, 4800),
    ("H100-SXM", "13b", 2048, 32, 2, 1, False, 4811),
    ("H100-SXM", "13b", 2048, 16, 2, 1, False, 4767),
    ("H100-SXM", "3b", 2048, 64, 6, 3, False, 22525),
    ("H100-SXM", "3b", 2048, 32, 6, 3, False, 23021),
    ("H100-SXM", "1b", 2048, 64, 20, 1, False, 44402),
    ("H100-SXM", "1b", 2048, 32, 20, 1, False, 45130),
    ("H100-SXM", "1b", 2048, 16, 20, 1, False, 46037),
    ("H100-SXM", "760m", 2048, 32, 24, 1, False, 67971),
    ("H100-SXM", "760m", 2048, 16, 24, 1, False, 68551),
    ("A100-80GB", "70b", 2048, 64, 8, 4, True, 410),
    ("A100-80GB", "70b", 2048, 32, 2, 16, True, 373),
    ("A100-40GB", "70b", 2048, 128, 4, 1, True, 376),
    ("A100-40GB", "70b", 2048, 64, 2, 1, True, 276),
    ("A100-40GB", "30b", 2048, 128, 6, 1, True, 865),
    ("A100-40GB", "30b", 2048, 32, 4, 1, True, 857),
    ("A100-40GB", "13b", 2048, 128, 16, 1, True, 1972),
    ("A100-40GB", "13b", 2048, 64, 16, 1, True, 1976),
    ("A100-40GB", "13b", 2048, 32, 14, 1, True, 1998),
    ("A100-40GB", "13b", 2048, 16, 10, 1, True, 1993),
    ("A100-40GB", "7b", 2048, 128, 18, 1, True, 3623),
    ("A100-40GB", "7b", 2048, 64, 18, 1, True, 3665),
    ("A100-40GB", "7b", 2048, 32, 18, 1, True, 3725),
    ("A100-40GB", "7b", 2048, 16, 16, 1, True, 3645),
    ("A100-40GB", "3b", 2048, 128, 6, 1, False, 9538),
    ("A100-40GB", "3b", 2048, 64, 6, 1, False, 9736),
    ("A100-40GB", "3b", 2048, 32, 6, 1, False, 9914),
    ("A100-40GB", "3b", 2048, 16, 5, 1, False, 9750),
    ("A100-40GB", "1b", 2048, 128, 10, 1, False, 18647),
    ("A100-40GB", "1b", 2048, 64, 10, 1, False, 19001),
    ("A100-40GB", "1b", 2048, 32, 10, 1, False, 15555),
    ("A100-40GB", "1b", 2048, 16, 8, 1, False, 19085),
    ("A100-40GB", "760m", 2048, 128, 12, 1, False, 28940),
    ("A100-40GB", "760m", 2048, 64, 12, 1, False, 29344),
    ("A100-40GB", "760m", 2048, 32, 12, 1, False, 29648),
    ("A100-40GB", "760m", 2048, 16, 12, 1, False, 29607),
    ("A100-40GB", "350m", 2048, 128, 18, 1, False, 51934),
    ("A100-40GB", "350m", 2048, 64, 18, 1, False, 52689),
    ("A100-40GB", "350m", 2048, 32, 18, 1, False, 53811),
    ("A100-40GB", "350m", 2048, 16, 18, 1, False, 55413),
    ("A100-40GB", "125m", 2048, 128, 26, 1, False, 123936),
    ("A100-40GB", "125m", 2048, 64, 26, 1, False, 125234),
    ("A100-40GB", "125m", 2048, 32, 26, 1, False, 127122),
    ("A100-40GB", "125m", 2048, 16, 26, 1, False, 130535),
]

# torchtune README "Memory and training speed", one RTX 4090: (method, measured tokens/s)
TORCHTUNE_4090 = [("full", 1650), ("lora", 3083), ("qlora", 2413)]


def mpt(name: str) -> ModelArch:
    d, heads, layers = MPT[name]
    return ModelArch(
        id=f"mosaicml/mpt-{name}",
        family="mpt",
        mlp="gelu",
        norm="layernorm",
        hidden=d,
        layers=layers,
        heads=heads,
        intermediate=4 * d,
        vocab=50368,
        tied_embeddings=True,
        source="llm-foundry scripts/train/yamls/pretrain",
    )


def foundry_plan(row) -> ResolvedPlan:
    """The plan of an llm-foundry row. Every table's runs gather bf16 parameters under autocast bf16: Composer
    (llm-foundry 061f2c7 setup.py `mosaicml>=0.16.3,<0.17`) maps `fsdp_config.mixed_precision` DEFAULT to
    param_dtype = buffer_dtype = bf16 with reduce_dtype unset, and PURE to all three bf16 (composer v0.16.3
    composer/trainer/mosaic_fsdp_utils.py `get_mixed_precision`); an unset reduce_dtype reduces in param_dtype
    (torch distributed/fsdp/api.py `MixedPrecision`: "this takes on the param_dtype value"). The sharded flat
    parameters, their gradient shard (cast back after the reduce-scatter: torch 2.0 _runtime_utils.py
    `_cast_grad_to_param_dtype`) and AdamW's states stay fp32. "bf16" in the A100 tables' Precision column is
    Composer's older name for autocast bf16 (composer v0.11.1 composer/core/precision.py `Precision.BF16`).
    submit_benchmarks.py sets `model.norm_type: low_precision_layernorm` (llmfoundry/models/layers/norm.py
    `LPLayerNorm`: layer_norm in the autocast dtype with autocast off), so on the gathered bf16 weights every op of
    a block runs in bf16 and autocast casts nothing: the step is a bf16 model's with an fp32 master, which is how
    the plan states it (bf16 weights, gradients and reduce-scatter; fp32 master weights and AdamW states, all
    sharded over the ranks). The bf16 weight shard it counts (2 bytes per parameter over the ranks) stands for the
    fp32 gradient shard's other half: exact when gradients are resident (accumulation over micro-batches), 2 bytes
    per parameter over the ranks high at the loss's backward of a single micro-batch step. The loss: modeling_mpt.py
    `loss_fn` defaults to 'fused_crossentropy', flash-attn's CrossEntropyLoss (setup.py's `gpu` extra installs
    `xentropy-cuda-lib`; submit_benchmarks.py installs `-e .[gpu]`)."""
    gpu, model, seq, n, mb, accum, ckpt, _ = row
    return ResolvedPlan(
        arch=mpt(model),
        framework="custom",
        weight_dtype="bf16",
        compute_dtype="bf16",
        master_weights=True,
        loss_impl="xentropy",
        micro_batch=mb,
        grad_accum=accum,
        seq_len=seq,
        grad_checkpointing=ckpt,
        attn_impl="flash_attention_triton",  # the yamls' `attn_config: attn_impl: triton`
        optimizer=lookup_optimizer("adamw_torch"),
        strategy="fsdp",
        zero_stage=3,
        world_size=n,
        gpu=gpu_by_name(gpu),
        gpu_count=8,
    )


def torchtune_plan(method: str) -> ResolvedPlan:
    arch = lookup_model("meta-llama/Llama-3.1-8B")
    common = dict(
        arch=arch,
        framework="torchtune",
        weight_dtype="bf16",
        compute_dtype="bf16",
        micro_batch=2,
        seq_len=2048,
        packing=True,
        grad_checkpointing=True,
        compile=True,
        gpu=gpu_by_name("RTX 4090"),
        loss_impl="chunked",
    )
    if method == "full":
        return ResolvedPlan(**common, optimizer=lookup_optimizer("paged_adamw_8bit"), optimizer_in_bwd=True)
    return ResolvedPlan(
        **common,
        optimizer=lookup_optimizer("adamw_torch"),
        peft=method,
        lora_r=8,
        lora_alpha=16,
        # recipes/configs/llama3_1/8B_lora_single_device.yaml: q_proj and v_proj; 8B_qlora_single_device.yaml:
        # q, k, v, output_proj and the MLP
        lora_targets=("q", "v") if method == "lora" else ("q", "k", "v", "o", "gate", "up", "down"),
        quant_bits=4 if method == "qlora" else None,
        kbit_upcast=False,  # torchtune's QLoRA keeps its norms in bf16 (no prepare_model_for_kbit_training)
    )


# torchtune README.md "Optimization flags" (commit 1814feb, "add flags to readme", 2024-11-18; unchanged at
# bd2a0fc): Llama 3.2 3B, recipe full_finetune_single_device, batch 2, max sequence length 4096, bf16, one A100
# (its 60 GiB peak: the 80 GB part); "Each technique is added on top of the previous one, except for LoRA and QLoRA,
# which do not use optimizer_in_bwd or AdamW8bit". The "Baseline" row (an unpacked dataset: tokens per step not
# stated) is left out. Settings of recipes/configs/llama3_2/3B_{full,lora}_single_device.yaml at 1814feb: AdamW
# (torch, fused), bitsandbytes PagedAdamW8bit for the 8-bit row; LoRA rank 64, alpha 128 on q, v, output_proj and
# the MLP, dropout 0; packed sequences attend through FlexAttention's block-causal mask (torchtune
# modules/attention_utils.py `_SUPPORTS_FLEX_ATTENTION` on sm80+ with torch 2.5).
# (label, measured tokens/s, settings added to the previous row's)
TORCHTUNE_FLAGS = [
    ("+ packed", 7075, {}),
    ("+ compile", 8998, {"compile": True}),
    ("+ chunked CE", 9174, {"loss_impl": "chunked"}),
    ("+ activation checkpointing", 7210, {"grad_checkpointing": True}),
    ("+ optimizer in backward", 7309, {"optimizer_in_bwd": True}),
    ("+ activation offloading", 7301, {"activation_offload": True}),
    ("+ 8-bit AdamW", 6960, {"optimizer": "paged_adamw_8bit"}),
    ("LoRA", 8210, {"optimizer": "adamw_torch_fused", "optimizer_in_bwd": False, "peft": "lora"}),
    ("QLoRA", 8035, {"peft": "qlora"}),
]


def torchtune_flags_plans() -> list[tuple[str, int, ResolvedPlan]]:
    base = dict(
        arch=lookup_model("meta-llama/Llama-3.2-3B"),
        framework="torchtune",
        weight_dtype="bf16",
        compute_dtype="bf16",
        micro_batch=2,
        seq_len=4096,
        packing=True,
        attn_impl="flex_attention",
        gpu=gpu_by_name("A100-80GB"),
    )
    settings: dict = {"optimizer": "adamw_torch_fused"}
    out = []
    for label, measured, changes in TORCHTUNE_FLAGS:
        settings = {**settings, **changes}
        kw = {k: v for k, v in settings.items() if k not in ("optimizer", "peft")}
        peft = settings.get("peft", "none")
        if peft != "none":
            kw.update(
                peft=peft,
                lora_r=64,
                lora_alpha=128,
                lora_targets=("q", "v", "o", "gate", "up", "down"),
                quant_bits=4 if peft == "qlora" else None,
                kbit_upcast=False,  # torchtune's QLoRA keeps its norms in bf16
            )
        out.append((label, measured, ResolvedPlan(**base, **kw, optimizer=lookup_optimizer(settings["optimizer"]))))
    return out


# NVIDIA-NeMo/Automodel docs/performance-summary.mdx (commit 36044ad, "Last Updated: 2025-10-02"), "Fine-Tuning
# (LoRA) Performance", DGX-H100, BF16: the configs of examples/llm_benchmark/ at that commit (LoRA dim 16, alpha 32
# on every `*_proj`, `use_triton` LoRA kernels; mock data of full sequences, no padding; activation checkpointing
# on the TP-2 runs, off on the single-GPU ones). "TE" kernels: Transformer Engine's RMSNorm, Linear and
# DotProductAttention, which on Hopper runs cuDNN's fused attention (TE docs, "Attention backends": sm90 prefers
# the cuDNN backend), taken at FlashAttention-3's Hopper rate. Tensor parallelism 2 inside a node, FSDP2 over the
# rest. (model, GPUs, grad accum, TP, LoRA dropout, checkpointing, measured tokens/s/GPU)
NEMO_LORA = [
    ("meta-llama/Llama-3.1-8B", 1, 16, 1, 0.1, False, 12472.87),
    ("Qwen/Qwen2.5-7B", 1, 16, 1, 0.0, False, 14110.05),
    ("meta-llama/Llama-3.3-70B-Instruct", 8, 4, 2, 0.0, True, 1091.85),
    ("meta-llama/Llama-3.3-70B-Instruct", 16, 2, 2, 0.0, True, 984.85),
    ("Qwen/Qwen2.5-32B-Instruct", 8, 4, 2, 0.0, True, 2250.31),
    ("Qwen/Qwen2.5-32B-Instruct", 16, 2, 2, 0.0, True, 2072.89),
]


def nemo_plan(row) -> ResolvedPlan:
    model, n, accum, tp, dropout, ckpt, _ = row
    dp = n // tp
    return ResolvedPlan(
        arch=lookup_model(model),
        framework="custom",
        weight_dtype="bf16",
        compute_dtype="bf16",
        micro_batch=2,
        grad_accum=accum,
        seq_len=4096,
        packing=True,
        grad_checkpointing=ckpt,
        attn_impl="flash_attention_3",
        fused_kernels=("rms_norm",),
        fused_lora=True,
        optimizer=lookup_optimizer("adamw_torch"),
        peft="lora",
        lora_r=16,
        lora_alpha=32,
        lora_dropout=dropout,
        lora_targets=("q", "k", "v", "o", "gate", "up", "down"),
        strategy="fsdp" if dp > 1 else "none",
        zero_stage=3,
        world_size=dp,
        tensor_parallel=tp,
        gpu=gpu_by_name("H100-SXM"),
        gpu_count=min(n, 8),
    )


# ms-swift docs/source_en/Megatron-SWIFT/Quick-start.md "Benchmark" (commit 3602360): Qwen2.5-14B full-parameter,
# 8K context, one node of eight A800s (80 GiB: "8*80GB"), `swift sft` with DeepSpeed ZeRO-2 and ZeRO-3, s/it. The
# script it links, examples/megatron/benchmark/deepspeed.sh: per-device batch 1, gradient accumulation 2,
# `--packing true --max_length 8192`, `--attn_impl flash_attn`, bf16; swift's default gradient checkpointing on.
# DeepSpeed's bf16 optimizer keeps fp32 master weights. (ZeRO stage, s/it)
MS_SWIFT = [(2, 10.32), (3, 10.56)]


def ms_swift_plan(stage: int) -> ResolvedPlan:
    return ResolvedPlan(
        arch=lookup_model("Qwen/Qwen2.5-14B"),
        framework="ms-swift",
        weight_dtype="bf16",
        compute_dtype="bf16",
        micro_batch=1,
        grad_accum=2,
        seq_len=8192,
        packing=True,
        grad_checkpointing=True,
        attn_impl="flash_attention_2",
        optimizer=lookup_optimizer("adamw_torch"),
        master_weights=True,
        strategy="deepspeed",
        zero_stage=stage,
        world_size=8,
        gpu=gpu_by_name("A800-80GB"),
        gpu_count=8,
    )


# NVIDIA/Megatron-LM examples/llama/README.md "FP8 Performance" (commit d98e8a6): LLAMA3-8B on 8 H100s, GBS 128,
# MBS 1, seq 8192, CP 2 (so 4 data-parallel ranks, GA 32), 13812 tokens/s/GPU; the settings of the script it
# documents, examples/llama/train_llama3_8b_h100_fp8.sh: Transformer Engine fp8 (hybrid) linears, `--attention-backend
# fused` (cuDNN; FlashAttention-3's Hopper rate), `--cross-entropy-loss-fusion`, RMSNorm through TE, bf16 with
# `--use-distributed-optimizer` (fp32 master weights and Adam states sharded over the data- and context-parallel
# ranks, all 8: megatron/core/distributed/param_and_grad_buffer.py `get_data_and_context_parallel_group(
# with_context_parallel=True)`; gradients reduce-scattered and parameters all-gathered: ZeRO-1's traffic), no
# activation recompute; RoPE and SwiGLU fused by default (megatron/training/arguments.py `--no-rope-fusion`,
# `--no-bias-swiglu-fusion` turn them off).
MEGATRON_LLAMA3_8B = 13812


def megatron_plan() -> ResolvedPlan:
    return ResolvedPlan(
        arch=lookup_model("meta-llama/Meta-Llama-3-8B"),
        framework="custom",
        weight_dtype="bf16",
        compute_dtype="bf16",
        micro_batch=1,
        grad_accum=32,
        seq_len=8192,
        packing=True,
        attn_impl="flash_attention_3",
        fused_kernels=("rms_norm", "rope", "swiglu", "cross_entropy"),
        float8_linears=True,
        optimizer=lookup_optimizer("adamw_torch"),
        master_weights=True,
        strategy="deepspeed",
        zero_stage=1,
        world_size=8,  # the ranks the optimizer shards over: data-parallel × context-parallel
        context_parallel=2,
        gpu=gpu_by_name("H100-SXM"),
        gpu_count=8,
    )


def load_rows(path: Path = ROWS) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def row_plan(row: dict) -> ResolvedPlan:
    """The plan of a throughput_rows.jsonl row: published.plan_from_row's, with what only speed depends on."""
    rp = plan_from_row(row)
    kernels = tuple(row.get("kernels") or ())
    world = int(row.get("world") or row.get("n_gpus") or 1)
    update = dict(
        fused_kernels=tuple(k for k in kernels if k != "fused_lora"),
        fused_lora="fused_lora" in kernels,
        float8_linears=bool(row.get("float8")),
        float8_all_gather=bool(row.get("float8_all_gather")),
        compile=bool(row.get("compile")),
        context_parallel=int(row.get("context_parallel") or 1),
        selective_recompute=row.get("selective_recompute", "none"),
        master_weights=bool(row.get("master_weights", rp.master_weights)),
        fused_qkv=bool(row.get("fused_qkv", rp.fused_qkv)),
        world_size=world if rp.strategy != "none" else 1,
        gpu_count=min(int(row.get("n_gpus") or 1), 8),
    )
    return rp.model_copy(update=update)


def throughput(rp: ResolvedPlan):
    """The estimate's speed: the memory estimate's paged-out optimizer states included."""
    return estimate(rp, limits=False).throughput


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", default=str(REPO / "benchmarks" / "results" / "throughput.txt"), help="where to write the table"
    )
    args = parser.parse_args()
    rows = []  # (group, label, measured, predicted, mfu, bound)
    for row in FOUNDRY + FOUNDRY_NODES:
        t = throughput(foundry_plan(row))
        gpu, model, seq, n, mb, accum, ckpt, measured = row
        label = f"MPT-{model:5s} {gpu:9s} seq {seq:6d} mb {mb:3d} ×{accum:<2d} {'ckpt' if ckpt else '    '} {n}×GPU"
        rows.append(((gpu, model), label, measured, t.tokens_per_s, t.mfu, t.bound))
    for method, measured in TORCHTUNE_4090:
        t = throughput(torchtune_plan(method))
        rows.append(
            (
                ("RTX 4090", "llama-3.1-8b"),
                f"torchtune Llama-3.1-8B {method:5s} RTX 4090 batch 2 × 2048",
                measured,
                t.tokens_per_s,
                t.mfu,
                t.bound,
            )
        )
    for label, measured, plan in torchtune_flags_plans():
        t = throughput(plan)
        rows.append(
            (
                ("A100-80GB", "llama-3.2-3b flags"),
                f"torchtune flags Llama-3.2-3B A100 {label}",
                measured,
                t.tokens_per_s,
                t.mfu,
                t.bound,
            )
        )
    for row in NEMO_LORA:
        t = throughput(nemo_plan(row))
        model, n, accum, tp, *_ = row
        label = f"NeMo Automodel LoRA {model.split('/')[1][:24]} H100 {n}×GPU TP{tp}"
        rows.append((("nemo", model), label, row[-1], t.tokens_per_s, t.mfu, t.bound))
    for stage, s_it in MS_SWIFT:
        t = throughput(ms_swift_plan(stage))
        measured = 1 * 2 * 8192 / s_it  # per GPU: batch 1 × accumulation 2 × 8192 tokens per step
        rows.append(
            (
                ("ms-swift", "qwen2.5-14b"),
                f"ms-swift Qwen2.5-14B full 8×A800 ZeRO-{stage}",
                measured,
                t.tokens_per_s,
                t.mfu,
                t.bound,
            )
        )
    t = throughput(megatron_plan())
    rows.append(
        (
            ("megatron", "llama3-8b"),
            "Megatron-LM Llama3-8B fp8 8×H100 CP2",
            MEGATRON_LLAMA3_8B,
            t.tokens_per_s,
            t.mfu,
            t.bound,
        )
    )
    for row in load_rows():
        t = throughput(row_plan(row))
        rows.append((row["group"], row["id"][:62], row["tokens_per_s"], t.tokens_per_s, t.mfu, t.bound))

    lines = [f"{'run':62s} {'measured':>9s} {'predicted':>9s} {'ratio':>6s} {'MFU':>5s}  bound"]
    for _, label, m, p, mfu, bound in rows:
        lines.append(f"{label:62s} {m:9.0f} {p:9.0f} {p / m:6.2f} {mfu:5.1%}  {bound}")
    errors = [abs(p / m - 1) for _, _, m, p, _, _ in rows]
    pairs = []
    groups: dict = {}
    for g, label, m, p, _, _ in rows:
        groups.setdefault(g, []).append((label, m, p))
    for members in groups.values():
        for (la, ma, pa), (lb, mb_, pb) in zip(members, members[1:]):
            pairs.append((la, lb, ma / mb_, pa / pb))
    within = sum(1 for *_, mr, pr in pairs if abs(pr / mr - 1) <= 0.15)
    ratios = sorted(p / m for _, _, m, p, _, _ in rows)
    sources = {"llm-foundry", "torchtune", "nemo-automodel", "ms-swift", "megatron-lm"}
    sources |= {row["source"] for row in load_rows()}
    lines += [
        "",
        f"rows {len(rows)} from {len(sources)} sources: predicted/measured median {statistics.median(ratios):.2f} "
        f"(range {ratios[0]:.2f}–{ratios[-1]:.2f}); median |error| {statistics.median(errors):.1%}; "
        f"within ±15 %: {sum(e <= 0.15 for e in errors)}/{len(rows)}, "
        f"within ±30 %: {sum(e <= 0.30 for e in errors)}/{len(rows)}",
        f"pairs {len(pairs)} (same model and table, next row): predicted ratio within ±15 % of the measured "
        f"ratio on {within}/{len(pairs)} ({within / len(pairs):.0%})",
        "",
        "pairs outside ±15 % (predicted ratio / measured ratio):",
    ]
    lines += [f"  {pr / mr:5.2f}  {la} → {lb}" for la, lb, mr, pr in pairs if abs(pr / mr - 1) > 0.15]
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
