"""Optimizer stage: the optimizer from the catalog, its implementation (foreach / fused / for-loop) and a low-rank
optimizer's rank and target modules."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vramlens.knowledge.schema import ModelArch
from vramlens.resolve.adapters import normalize_targets
from vramlens.resolve.common import Approximate, Context


@dataclass(frozen=True)
class OptimizerPart:
    opt: Any  # knowledge.optimizers' spec
    impl: str
    low_rank: int
    low_rank_targets: tuple[str, ...]
    proj_bits: Any


def resolve_optimizer(ctx: Context, arch: ModelArch) -> OptimizerPart:
    from vramlens.knowledge import optimizers

    val, assumptions = ctx.val, ctx.assumptions
    opt_text = val("optimizer") or "adamw_torch"
    opt = optimizers.lookup_optimizer(str(opt_text))
    if opt is None:
        opt = optimizers.lookup_optimizer("adamw_torch")
        assert opt is not None  # the catalog's AdamW
        assumptions.append(Approximate(f"unknown optimizer `{opt_text}`: estimated as AdamW"))
    impl = val("optimizer_impl") or (opt.default_impl if opt.default_impl != "none" else "fused")
    low_rank = 0
    low_rank_targets: tuple[str, ...] = ()
    if opt.low_rank:
        # transformers trainer.py (GaLore/APOLLO optim_args): rank 128 unless `optim_args` says `rank=`; a framework's
        # own default through its hooks (`low_rank_default`)
        low_rank = int(val("optimizer_rank") or ctx.hooks.low_rank_default)
        # transformers `optim_target_modules` names modules or patterns ("attn", "mlp", r".*.attn.*")
        named = []
        for name in val("optimizer_targets") or ["all-linear"]:
            words = set(re.split(r"[^a-z_]+", str(name).lower()))
            if words & {"attn", "self_attn", "attention", "self_attention"}:
                named += ["q_proj", "k_proj", "v_proj", "o_proj"]
            elif words & {"mlp", "feed_forward", "ffn"}:
                named.append("mlp")
            else:
                named.append(str(name))
        low_rank_targets, _ = normalize_targets(named, arch)
        low_rank_targets = low_rank_targets or ("all-linear",)
    proj_bits = val("optimizer_proj_bits") if opt.low_rank else None
    return OptimizerPart(opt, impl, low_rank, low_rank_targets, proj_bits)
