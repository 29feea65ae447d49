"""litgpt's own LoRA blocks against the estimator's litgpt step, layer by layer.

Builds `litgpt.lora.GPT` (litgpt's real modelling code) in bf16 on the CPU with 1 and with 2 layers, runs a
training forward (LM head in 128-token chunks + `chunked_cross_entropy`, as litgpt's finetune scripts do) under
`torch.autograd.graph.saved_tensors_hooks`, and sums the distinct storages kept for backward. The difference
between the two runs is one block's saved activations per token, compared with
`estimate.components.activations_per_token(rp)[1]` for the same plan (framework "litgpt", fused q|k|v).

On CUDA, dropout keeps a 1-byte boolean mask (`native_dropout`); on the CPU its mask has the input's dtype. The
estimate is shifted by that one byte per dropped element so both sides describe the CPU run.

    pip install litgpt        # not a vramlens dependency; only this benchmark needs it
    python benchmarks/litgpt_vs_estimate.py [--seq 256] [--out benchmarks/results/litgpt_vs_estimate.txt]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vramlens.estimate import components as C
from vramlens.knowledge import gpus, models, optimizers
from vramlens.resolved import ResolvedPlan

# (litgpt config name, catalog id, LoRA targets, dropout)
CASES = [
    ("Llama-2-7b-hf", "meta-llama/Llama-2-7b-hf", ("q", "v"), 0.05),
    ("Llama-2-7b-hf", "meta-llama/Llama-2-7b-hf", ("q", "v"), 0.0),
    ("Llama-2-7b-hf", "meta-llama/Llama-2-7b-hf", ("q", "k", "v", "o", "gate", "up", "down"), 0.05),
    ("Meta-Llama-3-8B", "meta-llama/Meta-Llama-3-8B", ("q", "v"), 0.05),
    ("Mistral-7B-v0.1", "mistralai/Mistral-7B-v0.1", ("q", "v"), 0.05),
    ("Llama-3.2-1B", "meta-llama/Llama-3.2-1B", ("q", "k", "v", "o", "gate", "up", "down"), 0.05),
]


def saved_bytes(name: str, layers: int, targets: tuple[str, ...], dropout: float, seq: int) -> int:
    """Bytes of the distinct storages litgpt's forward keeps for backward (parameters and buffers excluded)."""
    import torch
    from litgpt.lora import GPT, Config, mark_only_lora_as_trainable
    from litgpt.utils import chunked_cross_entropy

    mlp = any(t in targets for t in ("gate", "up", "down"))
    cfg = Config.from_name(
        name,
        n_layer=layers,
        lora_r=32,
        lora_alpha=16,
        lora_dropout=dropout,
        lora_query="q" in targets,
        lora_key="k" in targets,
        lora_value="v" in targets,
        lora_projection="o" in targets,
        lora_mlp=mlp,
        lora_head=False,
    )
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = GPT(cfg)
    finally:
        torch.set_default_dtype(default)
    model.max_seq_length = seq
    mark_only_lora_as_trainable(model)
    model.train()
    kept: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        kept[storage.data_ptr()] = storage.nbytes()
        return t

    owned = {p.untyped_storage().data_ptr() for p in model.parameters()}
    owned |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    ids = torch.randint(0, cfg.padded_vocab_size, (1, seq))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(ids, lm_head_chunk_size=128)
        logits[-1] = logits[-1][..., :-1, :]
        chunked_cross_entropy(logits, ids[..., 1:])
    return sum(n for ptr, n in kept.items() if ptr not in owned)


def estimated_layer(model_id: str, targets: tuple[str, ...], dropout: float) -> tuple[float, int]:
    """(estimated bytes per token of one block on CUDA, dropped elements per token)."""
    arch = models.lookup_model(model_id)
    rp = ResolvedPlan(
        arch=arch,
        framework="litgpt",
        fused_qkv=True,
        repeat_kv=True,
        loss_impl="chunked",
        optimizer=optimizers.lookup_optimizer("adamw_torch"),
        gpu=gpus.lookup_gpu("A100-80GB")[0],
        peft="lora",
        lora_r=32,
        lora_alpha=16.0,
        lora_dropout=dropout,
        lora_targets=targets,
        adapter_fp32=False,
        kbit_upcast=False,
    )
    _, one = C.activations_per_token(rp)
    dropped = 0
    if dropout:
        widths = {"o": arch.q_dim, "gate": arch.hidden, "up": arch.hidden, "down": arch.intermediate}
        dropped = arch.hidden if any(t in targets for t in ("q", "k", "v")) else 0
        dropped += sum(w for t, w in widths.items() if t in targets)
    return one, dropped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=256, help="tokens per sequence (batch 1)")
    ap.add_argument("--out", type=Path, help="also write the table to this file")
    args = ap.parse_args()
    try:
        import litgpt  # noqa: F401
    except ImportError:
        print("needs litgpt: pip install litgpt", file=sys.stderr)
        return 2
    from importlib.metadata import version

    lines = [
        f"litgpt {version('litgpt')}, torch {version('torch')}, CPU, bf16, batch 1, {args.seq} tokens; "
        "bytes per token kept by one block",
        f"{'model':<18} {'LoRA targets':<24} {'dropout':>7} {'litgpt':>9} {'estimate':>9} {'est÷litgpt':>10}",
    ]
    ratios = []
    for name, model_id, targets, dropout in CASES:
        one = saved_bytes(name, 1, targets, dropout, args.seq)
        two = saved_bytes(name, 2, targets, dropout, args.seq)
        measured = (two - one) / args.seq
        est, dropped = estimated_layer(model_id, targets, dropout)
        est_cpu = est + dropped  # the CPU's mask has the input's dtype, not 1 byte
        ratios.append(est_cpu / measured)
        lines.append(
            f"{name:<18} {','.join(targets):<24} {dropout:>7} {measured:>9.0f} {est_cpu:>9.0f} "
            f"{est_cpu / measured:>10.3f}"
        )
    lines.append(f"\nestimate ÷ litgpt from {min(ratios):.3f} to {max(ratios):.3f} over {len(ratios)} blocks")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
