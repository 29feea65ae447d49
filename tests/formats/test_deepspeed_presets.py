"""DeepSpeed configs read as DeepSpeed runs them: the files frameworks ship under a name (read whole, as the
framework would load them), ZeRO sizes a config leaves out taken at DeepSpeed's defaults (nothing fills a missing
key: the HF Trainer and accelerate replace only "auto"), and DeepSpeed's field names beside their `stage3_` aliases."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens.formats import parse_document
from vramlens.plan import IssueKind, Origin

ROOT = Path(__file__).resolve().parents[2]
MIRRORS = Path("/work/.mirror")


def _plan(text: str, name: str, tmp_path: Path):
    return parse_document(text, str(tmp_path / name), workspace=tmp_path).plan


def _swift(flag: str, tmp_path: Path):
    line = f"NPROC_PER_NODE=4 swift sft --model Qwen/Qwen2.5-7B --train_type full --deepspeed {flag}\n"
    return _plan(line, "train.sh", tmp_path)


def test_ms_swift_preset_is_its_own_file(tmp_path: Path):
    """ms-swift 3.x/4.x zero2.json writes a 2e8-element reduce bucket without overlap_comm; 2.x's default-zero2
    turned overlap_comm on; 2.x's zero3-offload offloads the parameters only."""
    p = _swift("zero2", tmp_path)
    assert (p.zero_stage.value, p.zero_reduce_bucket.value, p.zero_overlap_comm.value) == (2, 200_000_000, False)
    assert "swift/config/zero2.json" in p.zero_reduce_bucket.note
    p = _swift("default-zero2", tmp_path)
    assert (p.zero_stage.value, p.zero_reduce_bucket.value, p.zero_overlap_comm.value) == (2, 200_000_000, True)
    p = _swift("zero3-offload", tmp_path)
    assert (p.zero_stage.value, p.offload_params.value, p.offload_optimizer.value) == (3, True, False)
    assert p.zero3_prefetch_bucket.value == "auto" and p.zero3_max_live_params.value == 1_000_000_000


def test_packaged_path_without_the_file_reads_the_framework_file(tmp_path: Path):
    text = "model_name_or_path: m/x\nstage: sft\ncutoff_len: 512\ndeepspeed: examples/deepspeed/ds_z2_config.json\n"
    p = _plan(text, "cfg.yaml", tmp_path)
    assert (p.zero_stage.value, p.zero_reduce_bucket.value, p.zero_overlap_comm.value) == (2, 500_000_000, False)
    assert any(i.kind == IssueKind.REFERENCE and "LLaMA-Factory" in i.message for i in p.issues)


def test_deepspeed_field_names_are_read_like_their_stage3_aliases(tmp_path: Path):
    """axolotl's zero3*.json write `max_live_parameters` / `max_reuse_distance` (0): DeepSpeed takes them."""
    text = "base_model: m/x\nsequence_len: 512\nmicro_batch_size: 1\ndeepspeed: deepspeed_configs/zero3_bf16.json\n"
    p = _plan(text, "cfg.yaml", tmp_path)
    assert (p.zero3_max_live_params.value, p.zero3_max_reuse_distance.value) == (0, 0)
    assert p.zero_overlap_comm.value is True


def test_a_size_left_out_is_deepspeeds_default_not_the_hf_fill(tmp_path: Path):
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 3}, "bf16": {"enabled": true}}\n')
    text = "base_model: m/x\nsequence_len: 512\nmicro_batch_size: 1\ndeepspeed: ds.json\n"
    p = _plan(text, "cfg.yaml", tmp_path)
    sizes = {
        "zero_reduce_bucket": 500_000_000,
        "zero3_prefetch_bucket": 50_000_000,
        "zero3_persistence_threshold": 100_000,
        "zero3_max_live_params": 1_000_000_000,
        "zero3_max_reuse_distance": 1_000_000_000,
    }
    for concept, default in sizes.items():
        got = getattr(p, concept)
        assert (got.value, got.origin) == (default, Origin.DEFAULT), concept
        assert "DeepSpeed's default" in got.note
    # below ZeRO-3 the stage-3 sizes do not apply and are not set
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}\n')
    p = _plan(text, "cfg.yaml", tmp_path)
    assert p.zero_reduce_bucket.value == "auto" and p.zero3_prefetch_bucket is None


def test_accelerate_plugin_config_writes_no_sizes(tmp_path: Path):
    text = "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\nnum_processes: 4\n"
    p = _plan(text, "acc.yaml", tmp_path)
    assert (p.zero_stage.value, p.zero_reduce_bucket.value) == (2, 500_000_000)
    assert "accelerate" in p.zero_reduce_bucket.note


def test_estimate_uses_the_written_bucket(tmp_path: Path):
    """The ZeRO-2 reduce bucket of LLaMA-Factory's ds_z2_config.json (5e8 elements) is what the backward holds, not
    the HF fill of an "auto" (h²)."""
    from vramlens.analysis import analyze
    from vramlens.estimate import estimate
    from vramlens.settings import Settings

    text = (
        "model_name_or_path: meta-llama/Llama-3.1-8B\nstage: sft\nfinetuning_type: full\ncutoff_len: 8192\n"
        "per_device_train_batch_size: 4\nbf16: true\ndeepspeed: examples/deepspeed/ds_z2_config.json\n"
        "# vramlens: gpu=H100 count=8\n"
    )
    a = analyze(text, str(tmp_path / "cfg.yaml"), Settings(workspace=tmp_path, model_lookup=False))
    rp = a.resolution.resolved
    assert rp.zero_reduce_bucket == 500_000_000
    recompute = estimate(rp).phases["recompute"]
    filled = estimate(rp.with_changes(zero_reduce_bucket=None)).phases["recompute"]
    assert recompute - filled == pytest.approx((500_000_000 - 4096**2) * 2, rel=1e-6)


def _unmirrored() -> list[str]:
    """The frameworks' revisions `scripts/dump_deepspeed_presets.py` reads that are not mirrored here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "dump_deepspeed_presets", ROOT / "scripts" / "dump_deepspeed_presets.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    missing = []
    for mirror, tag, _, _ in script.SOURCES:
        git = ["git", "--git-dir", str(MIRRORS / mirror / "repo"), "rev-parse", "--verify", "-q", f"{tag}^{{commit}}"]
        if subprocess.run(git, capture_output=True).returncode != 0:
            missing.append(f"{mirror} {tag}")
    return sorted(set(missing))


def test_presets_are_the_dump_of_the_frameworks_files():
    """`knowledge/data/deepspeed_presets.json` is what `scripts/dump_deepspeed_presets.py` reads from the
    frameworks' repositories (skipped where they, at the tags it reads, are not mirrored here)."""
    missing = _unmirrored()
    if missing:
        pytest.skip(f"not mirrored here: {', '.join(missing)}")
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "dump_deepspeed_presets.py"), "--mirrors", str(MIRRORS)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    shipped = ROOT / "server" / "vramlens" / "knowledge" / "data" / "deepspeed_presets.json"
    assert json.loads(out) == json.loads(shipped.read_text())
