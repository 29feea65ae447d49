"""The accuracy table against published measurements (benchmarks/published.py): it runs as a user runs it, every
row names a primary source and says what was measured, and the two estimator refinements it led to behave."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens.estimate import components as C
from vramlens.estimate import estimate
from vramlens.knowledge import gpus, models, optimizers
from vramlens.resolved import ResolvedPlan

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "published.py"
ROWS = REPO / "benchmarks" / "data" / "published_rows.jsonl"


def rows() -> list[dict]:
    return [json.loads(line) for line in ROWS.read_text().splitlines() if line.strip()]


def sources() -> dict:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import published
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return published.SOURCES


def test_every_row_cites_a_primary_source_and_what_it_measured():
    known = sources()
    table = rows()
    assert len(table) >= 25
    for row in table:
        src = known.get(row["source"])
        assert src is not None, row["id"]
        assert src["url"].startswith("https://github.com/"), row["source"]
        assert src["measured"] and src["version"]
        assert row["measure"] in ("allocated", "reserved", "device", "oom"), row["id"]
        assert row["reliability"] in ("high", "medium", "low"), row["id"]
        assert row["published"] and row["note"], row["id"]  # the figure as printed, and the settings read
        if row["measure"] != "oom":
            assert row["measured_bytes"] > 0, row["id"]
    assert len({r["id"] for r in table}) == len(table)
    assert len({r["source"] for r in table}) >= 5
    assert {r["type"] for r in table} >= {"full", "lora", "qlora"}


def test_the_table_runs_on_a_couple_of_rows(tmp_path):
    table = rows()
    measured = next(r for r in table if r["measure"] == "allocated" and r["reliability"] != "low")
    oom = next(r for r in table if r["measure"] == "oom" and r["reliability"] != "low")
    picked = tmp_path / "rows.jsonl"
    picked.write_text(json.dumps(measured) + "\n" + json.dumps(oom) + "\n")
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--rows-file", str(picked)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    row_line = next(line for line in lines if line.startswith(measured["id"]))
    assert re.search(r"[+-]\d+\.\d%", row_line)  # estimate vs published, error in %
    assert any(line.startswith(oom["id"]) and (" ok " in line or "MISS" in line) for line in lines)
    assert "OOM runs predicted as not fitting: " in out.stdout
    assert "median |err|" in out.stdout and "target:" in out.stdout
    assert sources()[measured["source"]]["url"] in out.stdout  # the source list names where the row is from


def test_a_row_whose_source_is_unknown_is_refused(tmp_path):
    row = dict(rows()[0], source="a blog I remember")
    picked = tmp_path / "rows.jsonl"
    picked.write_text(json.dumps(row) + "\n")
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--rows-file", str(picked)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert out.returncode != 0
    assert "unknown source" in (out.stderr + out.stdout)


def plan(**changes) -> ResolvedPlan:
    base = dict(
        arch=models.lookup_model("mistralai/Mistral-7B-v0.1"),
        framework="trl",
        weight_dtype="bf16",
        compute_dtype="bf16",
        micro_batch=2,
        seq_len=4096,
        packing=True,
        attn_mask=False,
        grad_checkpointing=True,
        attn_impl="flash_attention_2",
        repeat_kv=False,
        optimizer=optimizers.lookup_optimizer("adamw_torch"),
        optimizer_impl="foreach",
        peft="qlora",
        lora_r=16,
        lora_alpha=16,
        lora_targets=("q", "k", "v", "o"),
        quant_bits=4,
        quant_double=True,
        gpu=gpus.lookup_gpu("A100-80GB")[0],
    )
    base.update(changes)
    return ResolvedPlan(**base)


def test_fsdp_gathers_a_4bit_block_in_its_packed_storage():
    lora = plan(peft="lora", quant_bits=None, strategy="fsdp", zero_stage=3, world_size=2, gpu_count=2)
    qlora = plan(strategy="fsdp", zero_stage=3, world_size=2, gpu_count=2, quant_storage="bf16")
    gathered_16 = C.gathered_layer_bytes(lora, C.params(lora))
    gathered_4 = C.gathered_layer_bytes(qlora, C.params(qlora))
    assert gathered_16 == C.params(lora).layer_bytes
    packed, consts = C.quantized_bytes_per_param(qlora)
    # a quarter of the 16-bit block plus the quantization constants (norms stay 16-bit)
    assert gathered_4 < gathered_16 * (packed + consts) / 2 * 1.01
    assert C.fsdp_backward_working_set(qlora, C.params(qlora)) < C.fsdp_backward_working_set(lora, C.params(lora))


def test_trl_bf16_cast_keeps_embeddings_16bit_and_the_residual_fp32():
    upcast = plan(kbit_upcast=True)
    trl_cast = plan(kbit_upcast=True, kbit_embeddings_16bit=True)
    none = plan(kbit_upcast=False)
    s = C.shapes(upcast.arch)
    saved = C.params(upcast).frozen_bytes - C.params(trl_cast).frozen_bytes
    assert saved == (s.embed_params + s.lm_head_params) * 2  # embeddings and LM head back to 2 bytes
    # the norms stay fp32, so the checkpointed residual stream is still fp32: twice the 16-bit checkpoints
    assert C.checkpoint_per_token(trl_cast) == C.checkpoint_per_token(upcast) == 2 * C.checkpoint_per_token(none)
    a, b, c = (estimate(p, limits=False).allocated_bytes for p in (none, trl_cast, upcast))
    assert a < b < c


@pytest.mark.parametrize("key", ["fms-acceleration", "transformers-docs"])
def test_headline_sources_have_rows_that_count(key):
    counted = [r for r in rows() if r["source"] == key and r["reliability"] != "low" and r["measure"] != "oom"]
    assert len(counted) >= 5


def test_bert_keeps_its_dropout_masks_in_eager_attention():
    bert = models.lookup_model("bert-large-uncased")
    plain = bert.model_copy(update={"family": "electra-like", "id": "no-default-dropouts"})
    common = dict(
        framework="transformers",
        weight_dtype="fp32",
        compute_dtype="fp32",
        micro_batch=4,
        seq_len=512,
        attn_impl="eager",
        attn_mask=False,
        scalar_head=True,
        optimizer=optimizers.lookup_optimizer("adamw_hf"),
        gpu=gpus.lookup_gpu("V100-16GB")[0],
    )
    with_masks = C.activations_per_token(ResolvedPlan(arch=bert, **common))[1]
    without = C.activations_per_token(ResolvedPlan(arch=plain, **common))[1]
    # per token and layer: a 1-byte mask per attention score (heads × seq) and one per hidden unit after the
    # attention output and after the MLP (CUDA native_dropout keeps bool masks), and the dropped copy of the fp32
    # probabilities the probability-times-V matmul keeps (without the dropout that matmul keeps the softmax's own
    # output, which is already fp32: one probability-sized tensor, not two)
    assert with_masks - without == bert.heads * 512 + 2 * bert.hidden + 4 * bert.heads * 512
    sdpa = dict(common, attn_impl="sdpa")
    assert (
        C.activations_per_token(ResolvedPlan(arch=bert, **sdpa))[1]
        - C.activations_per_token(ResolvedPlan(arch=plain, **sdpa))[1]
    ) == 2 * bert.hidden


def test_fsdp_keeps_the_root_unit_gathered_through_forward_and_backward():
    from vramlens.estimate import _phases

    # FSDP1 under the HF Trainer: the adapters are units of their own, not gathered with the blocks (FSDP2 gathers
    # them with their block: tests/estimate/test_fsdp_recompute_blocks.py)
    sharded = plan(
        peft="lora", quant_bits=None, strategy="fsdp", zero_stage=3, world_size=2, gpu_count=2, fsdp_version=1
    )
    s = C.shapes(sharded.arch)
    root = C.fsdp_root_unsharded(sharded)
    # bf16 embeddings + LM head, and the last block, prefetched when the loss's backward starts
    assert root == (s.embed_params + s.lm_head_params + s.layer_params) * 2
    # SHARD_GRAD_OP holds every block gathered instead, from its forward to its backward, and every adapter's unit
    # (FSDP1 SHARD_GRAD_OP reshards no unit after its forward: C.fsdp_unit_adapters; traced in
    # tests/trace/test_sharded_trace.py `test_fsdp1_adapter_units_in_the_checkpointed_backward`)
    grad_op = sharded.with_changes(zero_stage=2)
    adapters = C.params(grad_op).trainable * C.params(grad_op).trainable_dtype_bytes
    assert C.fsdp_root_unsharded(grad_op) == root + s.layer_params * 2 * (sharded.arch.layers - 1) + adapters
    _, phases, p, _ = _phases(sharded)
    # held while the activations are, gone by the optimizer step
    assert phases["forward-backward"]["buffers"] - phases["optimizer-step"]["buffers"] == root
    # the top block's backward peaks (the adapters' gradients are small beside the checkpoints it still holds): its
    # own gathered parameters are the unit the loss's backward prefetched (in the root), and it adds its adapters'
    # unsharded gradients; the block below is prefetched only at the block's first adapter's backward, its
    # recomputed activations freed, and no gradient shard is made yet (C.fsdp_recompute_block)
    assert phases["recompute"]["buffers"] == pytest.approx(
        phases["forward-backward"]["buffers"] + p.trainable / sharded.arch.layers * 2, abs=2
    )
    assert phases["recompute"]["gradients"] == 0


def test_checkpointed_backward_trades_checkpoints_for_gradients_block_by_block():
    from vramlens.estimate import _phases

    full = plan(peft="none", quant_bits=None, lora_r=0, lora_alpha=0, lora_targets=(), micro_batch=8, seq_len=4096)
    s = C.shapes(full.arch)
    _, fresh, p, _ = _phases(full)  # set_to_none, no accumulation
    _, kept, _, _ = _phases(full.with_changes(set_to_none=False))  # gradients resident all along
    per_block_ckpt = int(8 * 4096 * C.checkpoint_per_token(full)) // full.arch.layers
    # the first block's backward: every gradient but the embedding's, one checkpoint left
    assert fresh["recompute"]["gradients"] == C.gradients(full, p) - s.embed_params * 2
    assert (
        fresh["recompute"]["activations"] - kept["recompute"]["activations"]
        == per_block_ckpt - per_block_ckpt * full.arch.layers
    )
    assert sum(fresh["recompute"].values()) < sum(kept["recompute"].values())
