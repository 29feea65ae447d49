"""Paged optimizer states that do not fit on the GPU beside the rest cross PCIe every optimizer step: bitsandbytes
prefetches each parameter's states before its update and waits for it, so the step pays for the part that does not
fit coming in and as much going out. torchtune's full fine-tune of Llama 3.1 8B on one RTX 4090 (bf16 weights,
PagedAdamW8bit in the backward) is such a run; the same run on an 80 GB GPU keeps its states on the device."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from vramlens.estimate import estimate
from vramlens.estimate.throughput import PCIE_OFFLOAD_GBS
from vramlens.knowledge.gpus import gpu_by_name
from vramlens.knowledge.optimizers import lookup_optimizer
from vramlens.resolved import ResolvedPlan

GIB = 2**30
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _plan(gpu: str, optimizer: str = "paged_adamw_8bit") -> ResolvedPlan:
    """The torchtune full fine-tune of the published throughput table (benchmarks/throughput.py
    `torchtune_plan("full")`: PagedAdamW8bit in the backward), on `gpu` and with `optimizer`."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import throughput as bench
    finally:
        sys.path.remove(str(BENCHMARKS))
    return bench.torchtune_plan("full").model_copy(
        update={"gpu": gpu_by_name(gpu), "optimizer": lookup_optimizer(optimizer)}
    )


def _paged_out(e) -> float:
    """The paged states the estimate leaves off the device (its assumption names them in GiB)."""
    line = next(a for a in e.assumptions if a.startswith("paged optimizer states:"))
    return float(line.split(": ")[1].split(" GiB")[0]) * GIB


def test_paged_states_that_do_not_fit_cross_pcie_twice_every_step():
    e = estimate(_plan("RTX 4090"), limits=False)
    paged_out = _paged_out(e)
    assert paged_out > 8 * GIB  # 16 GB of 8-bit states beside 15 GiB of bf16 weights on a 24 GB card
    paging = e.throughput.parts_s["optimizer paging"]
    assert paging == pytest.approx(2 * paged_out / (PCIE_OFFLOAD_GBS * 1e9), rel=0.01)
    assert e.throughput.step_s >= sum(v for k, v in e.throughput.parts_s.items() if k != "launch overhead")


def test_paged_states_that_fit_cost_nothing_extra():
    e = estimate(_plan("A100-80GB"), limits=False)
    assert not any(a.startswith("paged optimizer states:") for a in e.assumptions)
    assert "optimizer paging" not in e.throughput.parts_s


def test_paging_slows_the_4090_run_by_its_traffic_over_the_link():
    paged = estimate(_plan("RTX 4090"), limits=False).throughput
    resident = estimate(_plan("RTX 4090", "adamw_bnb_8bit"), limits=False).throughput
    # the same 8-bit update either way; the paged run adds its migrations to the step
    assert paged.step_s - resident.step_s == pytest.approx(paged.parts_s["optimizer paging"], rel=0.05)
    assert paged.tokens_per_s < 0.8 * resident.tokens_per_s
