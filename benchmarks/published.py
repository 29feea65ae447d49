"""Estimator accuracy against published GPU-memory measurements that are not in the calibration set.

The rows (benchmarks/data/published_rows.jsonl) were gathered from primary public sources — framework
benchmark tables, docs and pull requests — each with its source, the configuration the source states, the
framework defaults of that version for what it leaves out (said in the row's note), and what was measured.
Every row is estimated as stated and compared like with like: `allocated` (torch.cuda.max_memory_allocated)
with the estimate's allocated peak, `reserved` (max_memory_reserved) with reserved, `device` (nvidia-smi /
NVML used) with the device level, and `oom` rows (the source reports the run went out of memory) by
whether the estimate exceeds the card. Low-reliability rows (settings or the measured quantity ambiguous)
are printed but kept out of the headline figures, as in benchmarks/accuracy.py.

    python benchmarks/published.py [--all] [--rows ID_PREFIX] [--source KEY]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import accuracy  # noqa: E402  (benchmarks/accuracy.py: the same summary line)
from vramlens.estimate import GIB, estimate
from vramlens.knowledge import frameworks, versions
from vramlens.knowledge import gpus as gpu_kb
from vramlens.knowledge import models as model_kb
from vramlens.knowledge import optimizers as opt_kb
from vramlens.knowledge.schema import ModelArch
from vramlens.resolved import ResolvedPlan

ROWS = Path(__file__).resolve().parent / "data" / "published_rows.jsonl"

# Where each row comes from: the document, the version read, and how that source measured memory.
SOURCES: dict[str, dict[str, str]] = {
    "fms-acceleration": {
        "title": "foundation-model-stack/fms-acceleration benchmark reference, A100-80GB",
        "url": "https://github.com/foundation-model-stack/fms-acceleration/blob/0aab2c6f64e3e19d137efe2b8f7a4c65c23a2059/scripts/benchmarks/refs/a100_80gb.csv",
        "version": "commit 0aab2c6f (pins in scripts/benchmarks/refs/requirements.txt at the same commit)",
        "measured": "mem_peak_torch_mem_alloc_in_bytes: HF Trainer skip_memory_metrics=False probes "
        "(torch.cuda.max_memory_allocated, rank 0; scripts/benchmarks/README.md 'Logging Memory')",
    },
    "transformers-docs": {
        "title": "transformers docs, Efficient Training on a Single GPU (bert-large-uncased on a V100 16GB)",
        "url": "https://github.com/huggingface/transformers/blob/0016acf7ef421c7fe8eff7945de52c71896c3b01/docs/source/en/perf_train_gpu_one.mdx",
        "version": (
            "published as https://huggingface.co/docs/transformers/v4.21.0/perf_train_gpu_one (doc dated Jan 2022)"
        ),
        "measured": "pynvml nvmlDeviceGetMemoryInfo(...).used // 1024**2 after trainer.train() (device level, MiB)",
    },
    "torchtune-readme": {
        "title": "pytorch/torchtune README 'Memory and training speed' tables",
        "url": "https://github.com/pytorch/torchtune/pull/955",
        "version": "README table of PR #955 (2024-05-09): Llama2 7B at batch 4 × 2048, 70B at 4 × 4096",
        "measured": "'Peak Memory per GPU (GB)': which torchtune counter (active/allocated/reserved) is not stated",
    },
    "torchtune-pr961": {
        "title": "pytorch/torchtune PR #961 'Update README table' (re-measurement of the single-device full fine-tune)",
        "url": "https://github.com/pytorch/torchtune/pull/961",
        "version": "2024-05-10",
        "measured": "'20.2 peak memory allocated (and similar for reserved)' (torchtune memory stats: bytes / 1e9)",
    },
    "ms-swift-benchmark": {
        "title": "modelscope/swift docs, LLM Benchmark (max length × model, LoRA, one A100)",
        "url": "https://github.com/modelscope/swift/blob/main/docs/source_en/LLM/Benchmark.md",
        "version": "Dec 2023 (torch 2.1.1, flash_attn 2.3.4, bitsandbytes 0.41.3.post2, as the page states)",
        "measured": (
            "'GPU Memory (GiB)': torch.cuda.max_memory_reserved / 1024**3 (swift trainer `get_max_cuda_memory`)"
        ),
    },
    "peft-method-comparison": {
        "title": "huggingface/peft method_comparison/MetaMathQA results (Llama-3.2-3B on an L40S)",
        "url": "https://github.com/huggingface/peft/tree/main/method_comparison/MetaMathQA/results",
        "version": "result files of 2025-06 (transformers 4.52.4, peft 0.15.2.dev0, torch 2.7.1)",
        "measured": "cuda_memory_reserved_99th: 99th percentile of torch.cuda.memory_reserved() over training steps",
    },
}

LINEAR = {"q", "k", "v", "o", "gate", "up", "down", "all-linear"}


def load_rows(path: Path = ROWS) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plan_from_row(row: dict) -> ResolvedPlan:
    """The ResolvedPlan of the run the row describes: its stated settings (defaults already filled in the row, each
    named in its note), with the version-dependent choices of the transformers/bitsandbytes it ran with."""
    arch = model_kb.lookup_model(row["model"])
    if arch is None and row.get("arch"):
        arch = ModelArch(**row["arch"])  # a model outside the catalog: the row gives its config.json shapes
    if arch is None:
        raise ValueError(f"{row['id']}: model {row['model']} is not in the catalog")
    gpu = gpu_kb.lookup_gpu(row["gpu"])
    if gpu is None:
        raise ValueError(f"{row['id']}: GPU {row['gpu']} is not in the catalog")
    pins = row.get("versions") or {}
    framework = row.get("framework_key", "transformers")
    hf_model = framework in frameworks.HF_MODEL_FRAMEWORKS
    masked = bool(row.get("attn_mask", not row.get("packing")))
    loss = row.get("loss", "standard")
    run = versions.as_run(
        arch.family,
        row.get("attention", "sdpa"),
        pins.get("transformers"),
        hf_model=hf_model,
        masked=masked,
        loss_impl=loss,
    )
    lora = row.get("lora") or {}
    quant = row.get("quant") or {}
    peft = "none"
    if lora:
        peft = "qlora" if quant else ("dora" if lora.get("dora") else "lora")
    targets = tuple(t for t in lora.get("targets", ()) if t in LINEAR)
    n = int(row.get("n_gpus") or 1)
    strategy = row.get("strategy") or ("ddp" if n > 1 else "none")
    keeps_block_grads = (
        strategy == "fsdp"
        and bool(row.get("grad_checkpointing"))
        and framework in frameworks.HF_TRAINER_FRAMEWORKS
        and versions.fsdp1_keeps_block_grads(
            arch.family,
            pins.get("transformers"),
            fsdp_version=int(row.get("fsdp_version") or 1),
            reentrant=bool(row.get("ckpt_reentrant", True)),
            lora=peft in ("lora", "qlora", "dora"),
        )
    )
    return ResolvedPlan(
        arch=arch,
        framework=framework,
        weight_dtype=row.get("weight_dtype", "bf16"),
        compute_dtype=row.get("compute_dtype", "bf16"),
        amp=bool(row.get("amp")),
        micro_batch=int(row["micro_batch"]),
        grad_accum=int(row.get("grad_accum") or 1),
        seq_len=int(row["seq_len"]),
        packing=bool(row.get("packing")),
        grad_checkpointing=bool(row.get("grad_checkpointing")),
        activation_offload=bool(row.get("activation_offload")),
        attn_impl=run.attention,
        compile=bool(row.get("compile")),
        repeat_kv=run.repeat_kv,
        loss_shifted_copy=run.loss_shifted_copy,
        attn_mask=masked,
        loss_impl=loss,
        keep_logits=bool(row.get("keep_logits")),
        optimizer=opt_kb.lookup_optimizer(row.get("optimizer", "adamw_torch")),
        optimizer_impl=row.get("optimizer_impl", "foreach"),
        optimizer_in_bwd=bool(row.get("optimizer_in_bwd")),
        set_to_none=bool(row.get("set_to_none", True)),
        peft=peft,
        lora_r=int(lora.get("r") or 0),
        lora_alpha=float(lora.get("alpha") or 0),
        lora_dropout=float(lora.get("dropout") or 0.0),
        lora_targets=targets,
        adapter_fp32=bool(row.get("adapter_fp32", True)),
        kbit_upcast=bool(row.get("kbit_upcast", True)),
        kbit_embeddings_16bit=bool(row.get("kbit_embeddings_16bit")),
        quant_bits=quant.get("bits"),
        quant_type=quant.get("type", "nf4"),
        quant_double=bool(quant.get("double")),
        quant_storage=quant.get("storage", "uint8"),
        quant_keeps_input=bool(quant) and frameworks.bnb_keeps_4bit_input(pins.get("bitsandbytes")),
        **frameworks.step_flags(framework),
        scalar_head=bool(row.get("scalar_head")),
        strategy=strategy,
        zero_stage=int(row.get("zero_stage") or 0),
        world_size=n if strategy != "none" else 1,
        fsdp_keeps_block_grads=keeps_block_grads,
        rope_caches=frameworks.torchtune_rope_caches(row.get("torchtune_builder"), arch.family, peft, arch.layers)
        if framework == "torchtune"
        else 1,
        gpu=gpu[0],
        gpu_count=n,
        versions=tuple((package, version, "as published") for package, version in pins.items()),
    )


def compared_bytes(row: dict, est) -> int:
    kind = row["measure"]
    if kind == "allocated":
        return est.allocated_bytes
    if kind == "reserved":
        return est.reserved_bytes
    return est.device_bytes  # device (nvidia-smi / NVML)


def summarize(name: str, errors: list[float]) -> str:
    return accuracy.summarize(name, errors, width=22, bands=(0.05, 0.10, 0.15))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="count low-reliability rows in the headline too")
    ap.add_argument("--rows", help="only rows whose id starts with this")
    ap.add_argument("--source", help="only rows of this source key")
    ap.add_argument("--rows-file", type=Path, default=ROWS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    rows = load_rows(args.rows_file)
    if args.rows:
        rows = [r for r in rows if r["id"].startswith(args.rows)]
    if args.source:
        rows = [r for r in rows if r["source"] == args.source]

    print(f"{'id':<44} {'source':<22} {'kind':<9} {'rel':<6} {'published':>9} {'vramlens':>9} {'err':>7}  phase")
    errs: dict[str, list[float]] = {}
    oom_checks: list[bool] = []
    for row in rows:
        src = row["source"]
        if src not in SOURCES:
            raise SystemExit(f"{row['id']}: unknown source {src!r}")
        est = estimate(plan_from_row(row), limits=False)
        rel = row["reliability"]
        if row["measure"] == "oom":
            card = plan_from_row(row).gpu.memory_gib * GIB
            ok = est.device_bytes > card
            if rel != "low" or args.all:
                oom_checks.append(ok)
            print(
                f"{row['id']:<44} {src:<22} {'oom':<9} {rel:<6} {'>' + format(card / GIB, '.1f'):>9} "
                f"{est.device_bytes / GIB:>9.2f} {'ok' if ok else 'MISS':>7}  {est.phase}"
            )
            continue
        measured = row["measured_bytes"]
        ours = compared_bytes(row, est)
        e = ours / measured - 1
        print(
            f"{row['id']:<44} {src:<22} {row['measure']:<9} {rel:<6} {measured / GIB:>9.2f} {ours / GIB:>9.2f} "
            f"{e * 100:>+6.1f}%  {est.phase}"
        )
        if rel == "low" and not args.all:
            errs.setdefault("low (not in headline)", []).append(e)
            continue
        for key in (
            "headline",
            f"  {row['type']}",
            f"  {'multi-GPU' if int(row.get('n_gpus') or 1) > 1 else '1 GPU'}",
            f"  {src}",
        ):
            errs.setdefault(key, []).append(e)

    print("\nsources:")
    used = sorted({r["source"] for r in rows})
    for key in used:
        s = SOURCES[key]
        print(f"  {key}: {s['title']}\n      {s['url']} ({s['version']})\n      measured: {s['measured']}")
    print("\n== vramlens against published measurements (high + medium reliability)")
    for key in sorted(errs, key=lambda k: (k != "headline", k.startswith("low"), k)):
        print("  " + summarize(key, errs[key]))
    if oom_checks:
        print(f"\nOOM runs predicted as not fitting: {sum(oom_checks)}/{len(oom_checks)}")
    head = [abs(e) for e in errs.get("headline", [])]
    if head:
        med = statistics.median(head) * 100
        w15 = sum(e <= 0.15 for e in head) / len(head) * 100
        sources = len({r["source"] for r in rows if r["reliability"] != "low" and r["measure"] != "oom"})
        print(
            f"\ntarget: median |err| ≤ 5% → {med:.1f}%; ≥ 90% within ±15% → {w15:.1f}%"
            f" ({len(head)} rows from {sources} sources)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
