"""The expert-parallel token dispatchers whose buffers live outside torch — DeepEP's normal-mode buffer and HybridEP's
(estimate.components.dispatch) — as the frameworks that create them are read: NeMo AutoModel's `model.backend.
dispatcher` and Megatron-Core's flex token dispatcher (Megatron-LM flags, verl's `override_transformer_config`,
Megatron-SWIFT). Both frameworks create them the same way (megatron/core/transformer/moe/fused_a2a.py `get_buffer`,
`init_hybrid_ep_buffer`; NeMo AutoModel's components/moe/megatron/fused_a2a.py is its copy)."""

from __future__ import annotations

from vramlens.formats.settings import PlanBuilder, Setting, to_int
from vramlens.knowledge.deepep import DEFAULT_SMS, DISPATCH_CONFIGS, NVL_PEERS
from vramlens.plan import IssueKind, Origin

KEY = "expert_parallel.dispatch"  # the unmodelled entry's key where the dispatcher's own setting has none


def set_deepep(
    b: PlanBuilder,
    ep: int,
    said: Setting | None,
    ep_said: Setting | None,
    sms: Setting | None,
    *,
    assumed: str = "",
) -> None:
    """DeepEP's buffer for an expert-parallel group of `ep` GPUs, counted for DeepEP's own group sizes
    (deep_ep/buffer.py `Buffer.get_dispatch_config` asserts on another) at its default 20 SMs (`sms`: the setting
    that gives another count, named as not modelled); over more than one node its RDMA buffer comes from NVSHMEM's
    symmetric heap, whose own reservation is named as not counted. `assumed`: why DeepEP is taken where the file
    names no dispatcher (said in every view through the value's origin)."""
    group = f"the {ep}-GPU expert-parallel group"
    if ep not in DISPATCH_CONFIGS:
        b.issue(
            IssueKind.INVALID_VALUE,
            f"DeepEP has no dispatch configuration for an expert-parallel group of {ep} GPUs "
            f"(deep_ep/buffer.py `Buffer.get_dispatch_config`: {', '.join(map(str, DISPATCH_CONFIGS))})",
            ep_said,
        )
        return
    note = f"DeepEP's communication buffer for {group}, outside torch" + (f" ({assumed})" if assumed else "")
    b.set("ep_dispatch", "deepep", said, note=note, origin=Origin.ASSUMED if assumed else Origin.FILE)
    if sms is not None and to_int(sms.value) not in (None, DEFAULT_SMS):
        b.unmodelled(sms, f"DeepEP's buffer for {sms.value} SMs", f"counted for DeepEP's default {DEFAULT_SMS} SMs")
    elif sms is not None:
        b.remember(sms)
    if ep > NVL_PEERS:
        b.unmodelled(
            said or ep_said,
            f"NVSHMEM's symmetric heap, from which DeepEP's RDMA buffer for {group} over several nodes comes",
            "only the RDMA buffer counted",
            key=KEY,
        )


def set_hybridep(b: PlanBuilder, ep: int, said: Setting | None, sms: Setting | None) -> None:
    """HybridEP's buffers for an expert-parallel group of `ep` GPUs (their size does not depend on the SMs its
    kernels run on); for a group wider than the GPUs that reach each other over NVLink its inter-node queue pairs are
    named by resolve.distribution, which knows the GPU."""
    note = f"HybridEP's communication buffers for the {ep}-GPU expert-parallel group, outside torch"
    b.set("ep_dispatch", "hybridep", said, note=note)
    if sms is not None:
        b.remember(sms)
