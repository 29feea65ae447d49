"""Estimator accuracy against published measurements (../shared/calibration/ground-truth.jsonl).

For every row whose setup the estimator can express, builds the ResolvedPlan the row describes,
estimates it, and compares like with like: `allocated`/`active` rows with the allocated peak,
`reserved` with reserved, `nvidia-smi` with the device level, `fit-boundary` rows (the smallest VRAM
budget at which that length fitted) with the device level, and `oom` rows by whether the estimate
exceeds the card. Prints a row table, a summary by type and reliability, and the same summary for two
common rules of thumb: "16 bytes per parameter" and accelerate's "weights × 4".

    python benchmarks/accuracy.py [--all] [--rows ID_PREFIX]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

from vramlens.estimate import GIB, estimate
from vramlens.knowledge import frameworks
from vramlens.knowledge import gpus as gpu_kb
from vramlens.knowledge import models as model_kb
from vramlens.knowledge import optimizers as opt_kb
from vramlens.knowledge.schema import ModelArch
from vramlens.resolved import ResolvedPlan

ROOT = Path(__file__).resolve().parents[1]
GROUND_TRUTH = ROOT.parent / "shared" / "calibration" / "ground-truth.jsonl"

# framework -> how it runs the step (from each row's notes; litgpt's from knowledge.frameworks)
LITGPT = {**frameworks.BEHAVIOUR["litgpt"], "loss_impl": "chunked", "keep_logits": True}
HF_LOOP = {"adapter_fp32": True, "kbit_upcast": True, "loss_impl": "standard", "keep_logits": True}
HF_TRAINER = {"adapter_fp32": True, "kbit_upcast": True, "loss_impl": "standard", "keep_logits": False}
# unsloth's step (knowledge.frameworks): its chunked fused loss, offloaded ("unsloth") checkpointing, its LoRA kernels
UNSLOTH = {**frameworks.BEHAVIOUR["unsloth"], "loss_impl": "fused"}


def arch_from_row(row: dict) -> ModelArch:
    """The catalog's architecture for the row's model (checked against the row's shapes by the knowledge
    tests); the row's own `arch` when the model is not in the catalog."""
    found = model_kb.lookup_model(row["model"])
    if found is not None:
        return found
    a = row["arch"]
    family = a.get("family", "llama")
    mlp = a.get("mlp", "swiglu")
    if mlp not in ("swiglu", "geglu", "gelu", "relu"):
        mlp = "geglu" if "geglu" in mlp or "gelu_gated" in mlp else "swiglu"
    return ModelArch(
        id=row["model"],
        family=family,
        mlp=mlp,
        norm="layernorm" if "layer" in a.get("norm", "") else "rmsnorm",
        hidden=a["hidden"],
        layers=a["layers"],
        heads=a["heads"],
        kv_heads=a.get("kv_heads"),
        head_dim=a.get("head_dim"),
        intermediate=a["intermediate"],
        vocab=a["vocab"],
        tied_embeddings=bool(a.get("tied_embeddings", False)),
        attn_bias=bool(a.get("attn_bias", family in ("qwen2", "phi", "stablelm", "gpt2"))),
        mlp_bias=family in ("phi", "gpt2"),
        params_b=row.get("params_b"),
    )


def optimizer_of(row: dict) -> tuple[str, str]:
    text = (row.get("optimizer") or "").lower()
    if "8bit" in text:
        return "adamw_bnb_8bit", "fused"
    if "fused" in text:
        return "adamw_torch_fused", "fused"
    return "adamw_torch", "foreach"  # torch's default on CUDA is foreach


def bitsandbytes_of(row: dict, litgpt: bool) -> str | None:
    """The bitsandbytes release the row ran with: named in its source, else the one its framework supports."""
    m = re.search(r"bitsandbytes\s+v?(\d+\.\d+(?:\.\d+)?)", row.get("source", "") + " " + row.get("notes", ""))
    if m:
        return m.group(1)
    return frameworks.BITSANDBYTES.get("litgpt") if litgpt else None


def plan_from_row(row: dict) -> ResolvedPlan | None:
    if not row.get("arch") or not row.get("seq_len"):
        return None
    fw = (row.get("framework") or "").lower()
    behaviour = LITGPT if "lit" in fw else HF_LOOP if "loop" in fw else UNSLOTH if fw == "unsloth" else HF_TRAINER
    precision = row.get("precision") or "bf16-pure"
    quant = row.get("quant")
    amp = precision.endswith("amp") and not quant
    weight = "fp32" if amp else ("fp16" if precision.startswith("fp16") else "bf16")
    compute = "fp16" if precision.startswith("fp16") else "bf16"
    lora = row.get("lora")
    peft = "none"
    targets: tuple[str, ...] = ()
    r = 0
    dropout = 0.0
    if lora:
        peft = "qlora" if quant else "lora"
        t = lora.get("targets") or ["q", "v"]
        if isinstance(t, str):
            t = [t]
        names = {"proj": "o", "output_proj": "o", "query": "q", "key": "k", "value": "v", "mlp": "mlp"}
        out = []
        for x in t:
            x = names.get(x, x)
            if x == "all-linear":
                out = ["all-linear"]
                break
            if x == "mlp":
                out += ["gate", "up", "down", "fc1", "fc2"]
            else:
                out.append(x.replace("_proj", ""))
        targets = tuple(out)
        r = int(lora.get("r") or 8)
        dropout = float(lora.get("dropout") or 0.0)
    opt_name, impl = optimizer_of(row)
    gpu_match = gpu_kb.lookup_gpu(row.get("gpu") or "") or gpu_kb.lookup_gpu("A100-80GB")
    n = int(row.get("n_gpus") or 1)
    fsdp = row.get("fsdp")
    zero = row.get("zero_stage")
    strategy, stage = "none", 0
    if fsdp:
        strategy, stage = "fsdp", 3 if "FULL" in str(fsdp).upper() else 2
    elif zero is not None:
        strategy, stage = "deepspeed", int(zero)
    elif n > 1:
        strategy = "ddp"
    notes = (row.get("notes") or "").lower()
    set_to_none = "set_to_none=false" not in notes
    ga = int(row.get("grad_accum") or (4 if "lit" in fw else 1))  # litgpt accumulates to its global batch
    attn = {"sdpa": "sdpa", "flash": "flash_attention_2", "eager": "eager"}.get(row.get("attention") or "sdpa", "sdpa")
    framework = "litgpt" if behaviour is LITGPT else "unsloth" if behaviour is UNSLOTH else "custom"
    return ResolvedPlan(
        arch=frameworks.arch_as_run(framework, arch_from_row(row)),
        framework=framework,
        weight_dtype=weight,
        compute_dtype=compute,
        amp=amp,
        micro_batch=int(row.get("micro_batch") or 1),
        grad_accum=ga,
        seq_len=int(row["seq_len"]),
        grad_checkpointing=bool(row.get("grad_checkpointing")),
        attn_impl=attn,
        activation_offload=behaviour is UNSLOTH and bool(row.get("grad_checkpointing")),
        # HF ≥ 4.57 without a mask uses SDPA's native GQA; litgpt expands K/V and runs causal without a mask
        repeat_kv=attn == "eager" or "lit" in fw,
        attn_mask=behaviour is HF_TRAINER,
        loss_impl=behaviour["loss_impl"],
        keep_logits=behaviour["keep_logits"],
        optimizer=opt_kb.lookup_optimizer(opt_name),
        optimizer_impl=impl,
        set_to_none=set_to_none,
        peft=peft,
        lora_r=r,
        lora_alpha=float((lora or {}).get("alpha") or r or 0),
        lora_dropout=dropout,
        lora_targets=targets,
        adapter_fp32=behaviour["adapter_fp32"],
        kbit_upcast=behaviour["kbit_upcast"],
        quant_bits=4 if quant else None,
        quant_double=quant == "nf4-dq",
        **frameworks.step_flags(framework),
        quant_keeps_input=frameworks.bnb_keeps_4bit_input(bitsandbytes_of(row, behaviour is LITGPT)),
        strategy=strategy,
        zero_stage=stage,
        world_size=n if strategy != "none" else 1,
        gpu=gpu_match[0],
        gpu_count=n,
    )


def measured_bytes(row: dict) -> float | None:
    v = row.get("measured_gib")
    return None if v is None else v * GIB


def compare_level(row: dict, est) -> float:
    kind = row.get("measure_kind")
    if kind in ("allocated", "active", "unknown"):
        return est.allocated_bytes
    if kind == "reserved":
        return est.reserved_bytes
    return est.device_bytes  # nvidia-smi, fit-boundary


def naive_16(row: dict) -> float:
    return 16 * row["params_b"] * 1e9


def accelerate_x4(row: dict) -> float:
    """accelerate's "weights × 4" peak for Adam training, weights in the row's storage precision."""
    per = 0.5 if row.get("quant") else (4 if (row.get("precision") or "").startswith("fp32") else 2)
    return 4 * per * row["params_b"] * 1e9


def summarize(name: str, errors: list[float], width: int = 28, bands: tuple[float, ...] = (0.10, 0.15, 0.20)) -> str:
    """One summary line: median |error|, the share within each ± band, the mean signed error."""
    if not errors:
        return f"{name:<{width}} n=0"
    abs_e = [abs(e) for e in errors]

    def within(t: float) -> float:
        return sum(e <= t for e in abs_e) / len(abs_e)

    shares = "  ".join(
        f"{'within ' if i == 0 else ''}±{b * 100:.0f}% {within(b) * 100:5.1f}%" for i, b in enumerate(bands)
    )
    return (
        f"{name:<{width}} n={len(errors):>3}  median |err| {statistics.median(abs_e) * 100:5.1f}%  "
        f"{shares}  mean err {statistics.mean(errors) * 100:+5.1f}%"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="include low-reliability rows in the summary")
    ap.add_argument("--rows", help="only rows whose id starts with this")
    args = ap.parse_args(argv)
    rows = [json.loads(l) for l in GROUND_TRUTH.read_text().splitlines() if l.strip()]
    if args.rows:
        rows = [r for r in rows if r["id"].startswith(args.rows)]

    print(
        f"{'id':<40} {'kind':<12} {'rel':<6} {'measured':>8} {'vramlens':>8} {'err':>7} "
        f"{'16B/p':>7} {'acc×4':>7}  phase"
    )
    errs: dict[str, list[float]] = {}
    oom_checks = []
    for row in rows:
        rp = plan_from_row(row)
        if rp is None:
            continue
        est = estimate(rp, limits=False)
        kind = row.get("measure_kind")
        if kind == "oom":
            bound = (row.get("lower_bound_gb") or rp.gpu.memory_gib * 1.073741824) * 1e9
            ok = est.device_bytes > bound * 0.95
            oom_checks.append(ok)
            print(
                f"{row['id']:<40} {'oom':<12} {row['reliability']:<6} {'>' + format(bound / GIB, '.1f'):>8} "
                f"{est.device_bytes / GIB:>8.2f} {'ok' if ok else 'MISS':>7}"
            )
            continue
        m = measured_bytes(row)
        if m is None:
            continue
        ours = compare_level(row, est)
        e = ours / m - 1
        n16 = naive_16(row) / m - 1
        a4 = accelerate_x4(row) / m - 1
        print(
            f"{row['id']:<40} {kind:<12} {row['reliability']:<6} {m / GIB:>8.2f} {ours / GIB:>8.2f} "
            f"{e * 100:>+6.1f}% {n16 * 100:>+6.0f}% {a4 * 100:>+6.0f}%  {est.phase}"
        )
        if row["reliability"] == "low" and not args.all:
            key_sets = [("low (not in targets)", e, n16, a4)]
        else:
            typ = row["type"] if row.get("n_gpus", 1) in (1, None) else "multi-GPU"
            key_sets = [("high+medium", e, n16, a4), (f"  {typ}", e, n16, a4), (f"  {row['reliability']}", e, n16, a4)]
        for key, ev, nv, av in key_sets:
            errs.setdefault(("vramlens", key), []).append(ev)
            errs.setdefault(("16 bytes/param", key), []).append(nv)
            errs.setdefault(("accelerate weights×4", key), []).append(av)
    print()
    for method in ("vramlens", "16 bytes/param", "accelerate weights×4"):
        print(f"== {method}")
        for (m_, key), v in sorted(errs.items(), key=lambda kv: (kv[0][1] != "high+medium", kv[0][1])):
            if m_ == method:
                print("  " + summarize(key, v))
    if oom_checks:
        print(f"\nOOM rows predicted as not fitting: {sum(oom_checks)}/{len(oom_checks)}")
    main_errs = [abs(e) for e in errs.get(("vramlens", "high+medium"), [])]
    if main_errs:
        med = statistics.median(main_errs)
        w15 = sum(e <= 0.15 for e in main_errs) / len(main_errs)
        print(f"\ntarget (high+medium): median |err| ≤ 8% → {med * 100:.1f}%; ≥ 80% within ±15% → {w15 * 100:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
