"""NeMo AutoModel recipe YAML (examples/llm_finetune/ at v0.1.0 and v0.5.0) read into the model, GPU count,
parallel layout and memory settings (CLI as a subprocess; `_target_` values read as text, never imported)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens.formats import parse_document
from vramlens.plan import Origin

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_automodel"


def estimate(path: Path, *extra: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", "--format", "json", "--offline", *extra, path.name],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=path.parent,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    return data[0] if isinstance(data, list) else data


def source(d: dict, concept: str):
    s = d["sources"].get(concept)
    return None if s is None else s["value"]


def test_full_finetune_v010():
    """v0.1.0 llama3_2_1b_squad.yaml: Llama 3.2 1B, FSDP2 over the 8 GPUs of its header's torchrun line, local batch 8
    of a global 64 (no accumulation), Adam, the checkpoint's dtype."""
    d = estimate(FIXTURES / "v0.1.0" / "llama3_2_1b_squad.yaml")
    assert d["format"] == "nemo-automodel" and d["model"]["id"] == "meta-llama/Llama-3.2-1B"
    assert d["gpu"]["count"] == 8
    assert source(d, "dist_strategy") == "fsdp" and source(d, "zero_stage") == 3
    assert source(d, "micro_batch") == 8 and source(d, "grad_accum") == 1
    assert source(d, "optimizer") == "torch.optim.Adam" and source(d, "weight_dtype") == "bf16"
    assert source(d, "compile") is False and source(d, "grad_checkpointing") is False


def test_qlora_v010():
    """v0.1.0 llama3_1_8b_squad_qlora.yaml: 4-bit NF4 (double quant, bf16 storage) under LoRA r16/α32 on every
    linear, one GPU (its header runs `--nproc-per-node=1`): accumulation 32 / 4 = 8."""
    d = estimate(FIXTURES / "v0.1.0" / "llama3_1_8b_squad_qlora.yaml")
    assert d["model"]["id"] == "meta-llama/Llama-3.1-8B"
    assert source(d, "peft_method") == "qlora" and source(d, "quant_bits") == 4
    assert source(d, "lora_r") == 16 and source(d, "lora_alpha") == 32 and source(d, "lora_targets") == ["all-linear"]
    assert source(d, "micro_batch") == 4 and source(d, "grad_accum") == 8
    assert d["components_gib"]["adapters"] > 0


@pytest.mark.parametrize(
    "version, name", [("v0.1.0", "llama3_2_1b_hellaswag_peft.yaml"), ("v0.5.0", "llama3_2_1b_squad_peft.yaml")]
)
def test_lora_both_versions(version, name):
    """`match_all_linear: True` (v0.1.0) and `target_modules: '*_proj'` (v0.5.0) both adapt every projection."""
    d = estimate(FIXTURES / version / name)
    assert source(d, "peft_method") == "lora" and source(d, "lora_r") == 8 and source(d, "lora_alpha") == 32
    assert source(d, "lora_targets") == ["all-linear"]
    assert d["gpu"]["count"] == 8


def test_tensor_parallel_layout_v050():
    """v0.5.0 customizer_llama_3_1_8b_full_sft_tp.yaml: dp 4 × tp 2 = 8 GPUs, local batch 1 of 8 → 2 accumulation
    steps, sequences of 2048 (the dataset's seq_length)."""
    d = estimate(FIXTURES / "v0.5.0" / "customizer_llama_3_1_8b_full_sft_tp.yaml")
    assert d["model"]["id"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert source(d, "world_size") == 8 and source(d, "tensor_parallel") == 2
    assert source(d, "micro_batch") == 1 and source(d, "grad_accum") == 2 and source(d, "seq_len") == 2048
    assert source(d, "attn_impl") == "sdpa"


def test_pipeline_schedule_stages_and_micro_batches_read():
    """v0.5.0 llama3_1_8b_hellaswag_pp.yaml: `distributed.pipeline.pp_schedule: interleaved1f1b` is torch's
    Interleaved1F1B, two stages per rank, estimated stage by stage; the local batch of 32 runs as 8 micro-batches of
    `pp_microbatch_size: 4` (train_ft.py: `pp_batch_size` = local_batch_size); the 32 layers split evenly, no
    weight for the embeddings or the head (`generate_hf_model_fqn_per_model_part`). Nothing is left unmodelled."""
    d = estimate(FIXTURES / "v0.5.0" / "llama3_1_8b_hellaswag_pp.yaml")
    assert source(d, "pipeline_parallel") == 2 and d["gpu"]["count"] == 8
    assert source(d, "pipeline_schedule") == "Interleaved1F1B" and source(d, "virtual_pipeline") == 2
    assert source(d, "micro_batch") == 4 and source(d, "grad_accum") == 8
    assert source(d, "stage_input_weight") == source(d, "stage_output_weight") == 0
    assert d["unmodelled"] == []


def test_layers_per_stage_sets_the_stages():
    """`layers_per_stage: 4` over 32 layers: 8 stages (`calculate_virtual_stages`: ceil(32 / 4)), four on each of the
    2 pipeline ranks, 4 layers each."""
    from vramlens.resolve import Settings, resolve

    text = (FIXTURES / "v0.5.0" / "llama3_1_8b_hellaswag_pp.yaml").read_text(encoding="utf-8")
    text = text.replace("    pp_microbatch_size: 4\n", "    pp_microbatch_size: 4\n    layers_per_stage: 4\n")
    plan = parse_document(text, "/run/llama3_1_8b_hellaswag_pp.yaml").plan
    assert plan is not None and plan.layers_per_stage is not None and plan.layers_per_stage.value == 4
    rp = resolve(plan, Settings(gpu="H100-80GB", gpu_count=8)).resolved
    assert rp.virtual_pipeline == 4 and rp.stage_split == (4,) * 8


@pytest.mark.parametrize("rounding, stages", [("up", 12), ("down", 10), (None, None)])
def test_stage_count_rounded_to_a_multiple_of_the_pipeline_size(rounding, stages):
    """`layers_per_stage: 3` over 32 layers is 11 stages, which 2 ranks do not divide: NeMo AutoModel raises unless
    `round_virtual_stages_to_pp_multiple` rounds the count up (12) or down (10); then the layers are split evenly
    over those stages, the first ones a layer more (functional.py `calculate_virtual_stages`,
    `generate_hf_model_fqn_per_model_part`)."""
    from vramlens.resolve import Settings, resolve

    text = (FIXTURES / "v0.5.0" / "llama3_1_8b_hellaswag_pp.yaml").read_text(encoding="utf-8")
    extra = "    layers_per_stage: 3\n" + (f"    round_virtual_stages_to_pp_multiple: {rounding}\n" if rounding else "")
    text = text.replace("    pp_microbatch_size: 4\n", "    pp_microbatch_size: 4\n" + extra)
    plan = parse_document(text, "/run/llama3_1_8b_hellaswag_pp.yaml").plan
    assert not plan.unmodelled
    result = resolve(plan, Settings(gpu="H100-80GB", gpu_count=8))
    rp = result.resolved
    if stages is None:  # refused upstream: said, and estimated with two stages per rank
        assert rp.virtual_pipeline == 2 and any("do not fit" in a for a in result.assumptions)
        return
    assert len(rp.stage_split) == stages and rp.virtual_pipeline == stages // 2 and sum(rp.stage_split) == 32
    assert max(rp.stage_split) - min(rp.stage_split) <= 1 and rp.stage_split[0] == max(rp.stage_split)


def test_activation_checkpointing_and_eager_attention():
    """v0.5.0 gemma_2_9b_it_squad.yaml: `distributed.activation_checkpointing: true`, `attn_implementation: eager`."""
    d = estimate(FIXTURES / "v0.5.0" / "gemma_2_9b_it_squad.yaml")
    assert d["model"]["id"] == "google/gemma-2-9b-it"
    assert source(d, "grad_checkpointing") is True and source(d, "attn_impl") == "eager"
    assert source(d, "micro_batch") == 4 and source(d, "grad_accum") == 2


def test_packed_sequence_and_fp8():
    """v0.5.0 falcon3_7b_instruct_hellaswag_fp8.yaml: packed to 8192 tokens; fp8 linears read (counted as the bf16
    linears whose saved tensors they keep)."""
    path = FIXTURES / "v0.5.0" / "falcon3_7b_instruct_hellaswag_fp8.yaml"
    plan = parse_document(path.read_text(), str(path)).plan
    assert plan.format == "nemo-automodel" and plan.model_id.value == "tiiuae/Falcon3-7B-Instruct"
    assert plan.seq_len.value == 8192 and plan.packing.value is True
    assert plan.weight_dtype.value == "bf16"
    assert plan.float8_linears.value is True and plan.unmodelled == []


@pytest.mark.parametrize(
    "target", ["os.system", "builtins.eval", "nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained"]
)
def test_targets_are_text(target):
    """A `_target_` is read as text: nothing named there is imported or called."""
    text = (
        f"step_scheduler:\n  local_batch_size: 2\n  global_batch_size: 2\nmodel:\n  _target_: {target}\n"
        f"  pretrained_model_name_or_path: meta-llama/Llama-3.2-1B\ndistributed:\n  strategy: fsdp2\n  tp_size: 1\n"
        f"dist_env:\n  backend: nccl\nloss_fn:\n  _target_: {target}\noptimizer:\n  _target_: {target}\n"
    )
    plan = parse_document(text, "/w/recipe.yaml").plan
    assert plan.format == "nemo-automodel" and plan.micro_batch.value == 2
    assert plan.model_id.value == "meta-llama/Llama-3.2-1B"


def test_bad_values_are_reported():
    text = (
        "step_scheduler:\n  local_batch_size: lots\n  global_batch_size: 8\nmodel:\n"
        "  _target_: nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained\n"
        "  pretrained_model_name_or_path: meta-llama/Llama-3.2-1B\n  torch_dtype: bfloat17\n"
        "distributed:\n  strategy: fsdp2\n  tp_size: two\n"
    )
    plan = parse_document(text, "/w/recipe.yaml").plan
    messages = " ".join(i.message for i in plan.issues)
    assert "local_batch_size" in messages and "bfloat17" in messages and "tp_size" in messages
    assert plan.tensor_parallel is None


def test_expert_parallel_recipe_gathers_each_ranks_own_experts():
    """v0.5.0 examples/llm_benchmark/glm/glm_4.5_air_te_deepep.yaml: GLM-4.5-Air on 64 nodes of 8 (512 GPUs),
    `ep_size: 64`, `moe.reshard_after_forward: false`. The MoE parallelizer divides each MoE layer's 128 experts
    over 64 GPUs (2 each) and FSDP-shards them over the other 8 (moe/parallelizer.py `apply_ep`, `apply_fsdp`):
    expert parallelism is read, the layers kept gathered from forward to backward (ZeRO stage 2), HybridEP's NVLink
    and RDMA buffers counted and, the group spanning 8 H100 nodes, its inter-node queue pairs named as not counted.
    Each rank's gathered blocks then hold 2 of the 128 experts: below the same run with every expert gathered by at
    least 63/64 of every MoE layer's experts."""
    from vramlens.estimate import allocated_peak
    from vramlens.resolve import Settings, resolve

    path = FIXTURES / "v0.5.0" / "glm_4.5_air_te_deepep.yaml"
    plan = parse_document(path.read_text(encoding="utf-8"), str(path)).plan
    assert plan.expert_parallel is not None and plan.expert_parallel.value == 64
    assert plan.zero_stage.value == 2 and plan.zero_stage.key == "reshard_after_forward"
    assert plan.ep_dispatch is not None and plan.ep_dispatch.value == "hybridep" and plan.unmodelled == []
    rp = resolve(plan, Settings(model_lookup=False)).resolved
    assert [u.key for u in rp.unmodelled] == ["dispatcher"]
    assert rp.unmodelled[0].what.startswith("HybridEP's inter-node queue pairs (DOCA GPU verbs) for the 64-GPU")
    assert "8 NVLink domains of 8 H100-SXM GPUs" in rp.unmodelled[0].what
    assert (rp.world_size, rp.expert_parallel, rp.zero_stage) == (512, 64, 2)
    arch = rp.arch
    experts = (arch.layers - arch.dense_layers) * arch.num_experts * 3 * arch.hidden * arch.moe_intermediate
    assert allocated_peak(rp.with_changes(expert_parallel=1)) - allocated_peak(rp) >= experts * 63 / 64 * 2


def test_torch_dispatcher_counted():
    """v0.5.0 examples/llm_benchmark/qwen/qwen3_moe_30b_torch.yaml: `ep_size: 8`, `dispatcher: torch`,
    `experts: torch`. GroupedExperts.forward (components/moe/experts.py) all-gathers the group's hidden states in
    each MoE layer and its per-expert loop's `x.gather` keeps them for the backward: the dispatch is read into the
    plan and counted (components.dispatch), not named as not modelled."""
    from vramlens.estimate import _phases
    from vramlens.resolve import Settings, resolve

    path = FIXTURES / "v0.5.0" / "qwen3_moe_30b_torch.yaml"
    plan = parse_document(path.read_text(encoding="utf-8"), str(path)).plan
    assert plan.ep_dispatch is not None and plan.ep_dispatch.value == "all_gather_loop"
    assert plan.ep_dispatch.key == "dispatcher"
    assert "expert_parallel.dispatch" not in [u.key for u in plan.unmodelled]
    rp = resolve(plan, Settings(model_lookup=False)).resolved
    assert (rp.expert_parallel, rp.ep_dispatch) == (8, "all_gather_loop")
    phases = _phases(rp)[1]
    rows = 8 * 4 * 4096  # ep × local_batch_size × seq_len
    assert phases["expert-dispatch"]["temporaries"] == 2 * rows * rp.arch.hidden * 4 + rows * (8 * 12 + 1)


def test_deepep_dispatcher_counted():
    """v0.5.0 examples/llm_finetune/gpt_oss/customizer_gpt_oss_full_sft.yaml: `ep_size: 8`, `dispatcher: deepep`
    within one node: DeepEP's buffer (components/moe/megatron/fused_a2a.py `get_buffer`) is counted at the device
    level, not named as not modelled."""
    from vramlens.estimate import estimate
    from vramlens.resolve import Settings, resolve

    path = FIXTURES / "v0.5.0" / "customizer_gpt_oss_full_sft.yaml"
    plan = parse_document(path.read_text(encoding="utf-8"), str(path)).plan
    assert plan.ep_dispatch is not None and plan.ep_dispatch.value == "deepep"
    assert "expert_parallel.dispatch" not in [u.key for u in plan.unmodelled]
    rp = resolve(plan, Settings(model_lookup=False)).resolved
    with_buffer, without = estimate(rp, limits=False), estimate(rp.with_changes(ep_dispatch=""), limits=False)
    # gpt-oss-20b, hidden 2880 in bf16: tests/estimate/test_ep_dispatch.py `test_deepep_intranode_buffer_by_hand`
    assert with_buffer.device_bytes - without.device_bytes == 160_073_344 + 160 + (32 << 20)


@pytest.mark.parametrize(
    ("backend", "dispatch", "named"),
    [
        ("    dispatcher: torch\n", "all_gather", None),  # v0.4.0+: experts default torch_mm (grouped GEMMs)
        ("    dispatcher: torch\n    experts: torch\n", "all_gather_loop", None),
        # v0.2.0/v0.3.0 run the per-expert loop, v0.4.0 grouped GEMMs: the saved all-gather is named
        ("    enable_deepep: false\n", "all_gather", "kept for the backward"),
        ("    dispatcher: deepep\n", "deepep", None),
        ("    dispatcher: deepep\n    dispatcher_num_sms: 32\n", "deepep", "for 32 SMs"),
        ("    dispatcher: hybridep\n", "hybridep", None),
        ("    dispatcher: hybridep\n    dispatcher_num_sms: 32\n", "hybridep", None),
        ("", "deepep", None),  # BackendConfig's default where deep_ep is installed, said as assumed
    ],
)
def test_dispatchers_read(backend, dispatch, named):
    text = (
        "step_scheduler:\n  local_batch_size: 1\n  global_batch_size: 8\nmodel:\n"
        "  _target_: nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained\n"
        "  pretrained_model_name_or_path: Qwen/Qwen3-30B-A3B\n"
        "  backend:\n    _target_: nemo_automodel.components.models.common.utils.BackendConfig\n"
        f"{backend}distributed:\n  strategy: fsdp2\n  dp_size: 8\n  ep_size: 8\n"
    )
    plan = parse_document(text, "/w/recipe.yaml").plan
    assert (plan.ep_dispatch.value if plan.ep_dispatch else None) == dispatch
    whats = [u.what for u in plan.unmodelled]
    assert any(named in w for w in whats) if named else whats == []


def test_default_dispatcher_is_assumed_deepep_and_said():
    """No `model.backend.dispatcher`: BackendConfig takes DeepEP where deep_ep is installed (NeMo AutoModel's `moe`
    extra and container install it), so DeepEP's buffer is counted, and every view says the dispatcher was assumed;
    for a group DeepEP has no configuration for, the dispatch stays named as not counted."""
    text = (
        "model:\n  _target_: nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained\n"
        "  pretrained_model_name_or_path: Qwen/Qwen3-30B-A3B\n"
        "distributed:\n  strategy: fsdp2\n  dp_size: {n}\n  ep_size: {n}\n"
    )
    plan = parse_document(text.format(n=8), "/w/recipe.yaml").plan
    assert plan.ep_dispatch is not None and plan.ep_dispatch.value == "deepep"
    assert plan.ep_dispatch.origin == Origin.ASSUMED and plan.unmodelled == []
    assert any("dispatcher` not set: BackendConfig's default taken as DeepEP" in n for n in plan.read_notes)
    odd = parse_document(text.format(n=12), "/w/recipe.yaml").plan
    assert odd.ep_dispatch is None and odd.issues == []
    assert ["DeepEP, which has no configuration for 12 GPUs" in u.what for u in odd.unmodelled] == [True]


def test_deepep_group_size_without_a_config_is_reported():
    """deep_ep/buffer.py `Buffer.get_dispatch_config` has configurations for 2, 4, 8, 16, 24, 32, 64, 128, 144 and
    160 ranks only and asserts on any other."""
    text = (
        "model:\n  _target_: nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained\n"
        "  pretrained_model_name_or_path: Qwen/Qwen3-30B-A3B\n  backend:\n    dispatcher: deepep\n"
        "distributed:\n  strategy: fsdp2\n  dp_size: 12\n  ep_size: 12\n"
    )
    plan = parse_document(text, "/w/recipe.yaml").plan
    assert any("DeepEP has no dispatch configuration" in i.message for i in plan.issues)


def test_nodes_without_gpus_per_node_take_the_cards_reference_node():
    """v0.2.0 examples/benchmark/configs/gptoss_120b_te_deepep.yaml states `benchmark.num_nodes: 8` and no
    `--nproc-per-node`; its GPU is the H100 its `peak_tflops` comment names: 8 nodes × a DGX H100's 8 GPUs = 64, the
    expert-parallel group of 64 it asks for. The GPUs per node are said as assumed; `--num-gpus` sets them."""
    path = FIXTURES / "v0.2.0" / "gptoss_120b_te_deepep.yaml"
    d = estimate(path)
    assert d["gpu"]["count"] == 8 and source(d, "world_size") == 64 and source(d, "node_count") == 8
    assert d["sources"]["gpu_count"]["from"].startswith("assumed")
    assert any("GPUs per node not stated: taken as 8" in a for a in d["assumptions"])
    assert not any("num_nodes" in (u.get("key") or "") for u in d["unmodelled"])
    four = estimate(path, "--num-gpus", "4")
    assert source(four, "world_size") == 32
    # fewer GPUs shard the weights less
    assert four["components_gib"]["weights"] > d["components_gib"]["weights"]


def test_nodes_of_a_card_without_a_reference_node_are_approximate():
    text = (
        "benchmark:\n  num_nodes: 4\nstep_scheduler:\n  local_batch_size: 1\n  global_batch_size: 8\nmodel:\n"
        "  _target_: nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained\n"
        "  pretrained_model_name_or_path: meta-llama/Llama-3.2-1B\ndistributed:\n  strategy: fsdp2\n"
    )
    path = Path(__file__).parent / "_nodes_l40s.yaml"
    try:
        path.write_text(text)
        d = estimate(path, "--gpu", "L40S")
    finally:
        path.unlink()
    assert source(d, "world_size") == 4
    assert any("no reference node size" in r for r in d["approximate_reasons"])


def test_gb200_recipe_nodes_and_own_attention():
    """main 36044ad3 deepseek_v3_sdpa_compile_gb200.yaml: 16 nodes, no header; its comment names GB200, whose NVL72
    compute tray holds 4 GPUs ("16 nodes x 4 GB200 = 64 GPUs", the recipe's own comment): ep 64 over 64 GPUs. Its
    `backend.attn: sdpa` runs in NeMo's own DeepSeek-V3 class."""
    d = estimate(FIXTURES / "main-36044ad3" / "deepseek_v3_sdpa_compile_gb200.yaml")
    assert source(d, "world_size") == 64 and d["gpu"]["count"] == 4
    assert source(d, "attn_impl") == "sdpa"
    # `dispatcher: hybridep` over the 64 GPUs, one NVL72 NVLink domain: HybridEP's buffers for 2 × 4096 tokens a
    # rank (tests/estimate/test_ep_dispatch.py `test_hybridep_buffers_by_hand`), nothing named as not modelled
    assert any(
        "HybridEP's buffers for the 64-GPU expert-parallel group (all over NVLink): 7.73 GiB" in a
        for a in d["assumptions"]
    )
    assert d["unmodelled"] == []


def test_gpt_oss_attention_is_nemos_backend_not_transformers_eager():
    """transformers' GptOss class has no SDPA path (eager attention, b·h·s² scores per layer); NeMo AutoModel's own
    GptOssForCausalLM runs `backend.attn` (flex in the v0.2.0 benchmark recipe), which writes no score matrix."""
    path = FIXTURES / "v0.2.0" / "gptoss_120b_te_deepep.yaml"
    d = estimate(path)
    assert source(d, "attn_impl") == "flex_attention"
    assert any("NeMo AutoModel runs its own gpt_oss class" in a for a in d["assumptions"])
    assert not any("eager attention" in r for r in d["approximate_reasons"])
    text = path.read_text().replace("  backend:\n", "  backend_unused:\n")
    plain = Path(__file__).parent / "_gptoss_hf.yaml"
    try:
        plain.write_text(text.replace("nemo_automodel.components.models.gpt_oss.model.GptOssForCausalLM", "x.y"))
        hf = estimate(plain)
    finally:
        plain.unlink()
    # transformers' class: eager attention, several times the activations
    assert hf["components_gib"]["activations"] > 2 * d["components_gib"]["activations"]


def test_layout_without_a_gpu_count_runs_on_the_fewest_gpus_it_needs():
    """No dp_size, header or node count, and `ep_size: 8`: the expert-parallel group needs 8 data-parallel GPUs
    (components/distributed/mesh_utils.py: "non_pp_size must be a multiple of ep_size"), so the run is estimated on
    8 of them, said as an assumption, not on one GPU holding every expert unsharded."""
    text = (
        "step_scheduler:\n  local_batch_size: 1\n  global_batch_size: 8\nmodel:\n"
        "  _target_: nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained\n"
        "  pretrained_model_name_or_path: Qwen/Qwen3-30B-A3B\n  backend:\n    dispatcher: deepep\n"
        "distributed:\n  strategy: fsdp2\n  ep_size: 8\n"
    )
    path = Path(__file__).parent / "_ep_no_count.yaml"
    try:
        path.write_text(text)
        d = estimate(path)
        given = estimate(path, "--num-gpus", "16")
    finally:
        path.unlink()
    assert source(d, "world_size") == 8 and d["gpu"]["count"] == 8
    assert any("no GPU count given: taken as 8" in a and "ep 8" in a for a in d["assumptions"])
    assert given["gpu"]["count"] == 16
    assert not any("no GPU count given" in a for a in given["assumptions"])
    assert given["components_gib"]["weights"] < d["components_gib"]["weights"]


def test_hsdp_shards_within_each_replica(tmp_path):
    """v0.1.0 llama3_2_1b_hellaswag_hsdp.yaml: `dp_replicate_size: 2` over the 8 GPUs of its header: FSDP2 on the
    (dp_replicate, dp_shard) mesh shards within 4 GPUs, so each keeps a quarter of the weights, as a plain FSDP run
    over 4 GPUs does, not an eighth."""
    path = FIXTURES / "v0.1.0" / "llama3_2_1b_hellaswag_hsdp.yaml"
    d = estimate(path)
    assert source(d, "dp_replicas") == 2 and d["gpu"]["count"] == 8
    assert any("HSDP: FSDP shards over 4 GPU(s)" in a for a in d["assumptions"])
    assert not d["unmodelled"]
    plain = tmp_path / "plain.yaml"
    plain.write_text(path.read_text().replace("dp_replicate_size: 2", "dp_replicate_size: 1"))
    four = estimate(plain, "--num-gpus", "4")
    eight = estimate(plain, "--num-gpus", "8")
    assert abs(four["components_gib"]["weights"] - d["components_gib"]["weights"]) < 0.02
    assert eight["components_gib"]["weights"] < d["components_gib"]["weights"]
