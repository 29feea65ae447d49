"""Version-aware estimates: where the versions come from (setting, workspace pins, the trace interpreter's
metadata, newest known) and what each version changes in the estimate, with the assumption that says so."""

from __future__ import annotations

import sys
from pathlib import Path

from vramlens import environment
from vramlens.estimate import estimate
from vramlens.formats import parse_document
from vramlens.knowledge import versions
from vramlens.resolve import resolve
from vramlens.settings import Settings

CONFIG = """base_model: mistralai/Mistral-7B-v0.1
adapter: lora
lora_r: 16
lora_alpha: 16
lora_target_modules: [q_proj, k_proj, v_proj, o_proj]
sequence_len: 4096
micro_batch_size: 4
bf16: true
sdp_attention: true
gradient_checkpointing: true
"""


def resolved(tmp_path: Path, text: str = CONFIG, name: str = "train.yaml", **settings):
    f = tmp_path / name
    f.write_text(text)
    plan = parse_document(text, str(f), workspace=tmp_path).plan
    return resolve(plan, Settings(workspace=tmp_path, **settings))


def fake_env(root: Path, name: str, version: str) -> Path:
    """A venv-shaped folder with one distribution's metadata; returns its interpreter path (never run)."""
    site = root / "lib" / "python3.11" / "site-packages" / f"{name}-{version}.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody\n")
    (root / "bin").mkdir()
    python = root / "bin" / "python"
    python.write_text("#!/bin/sh\nexit 1\n")
    return python


def test_version_parsing():
    assert versions.parse("4.48.1") == (4, 48, 1)
    assert versions.parse("==5.0") == (5, 0, 0)
    assert versions.parse("4.57.0.dev0") == (4, 57, 0)
    assert versions.parse("latest") is None
    assert versions.loss_keeps_shifted_logits("4.48.3") and not versions.loss_keeps_shifted_logits("4.49.0")
    assert versions.sdpa_repeats_kv("4.53.3", masked=False) and not versions.sdpa_repeats_kv("4.54.0", masked=False)
    assert versions.sdpa_repeats_kv("5.0", masked=True)
    assert versions.attention_as_run("gemma2", "sdpa", "4.57.1") == "sdpa"
    assert versions.attention_as_run("gemma2", "sdpa", "5.0.0") == "eager"
    assert not versions.loss_keeps_shifted_logits(None)  # unknown: the newest known


def test_attention_and_loss_as_run_by_version_and_framework():
    """One answer for the resolver and the benchmarks: what attention runs, whether grouped K/V is expanded to every
    head and whether the loss copies the logits, from the family, the transformers version and who models it."""
    run = versions.as_run("llama", "sdpa", "4.48.1", hf_model=True, masked=False)
    assert run == ("sdpa", True, True)  # repeat_kv before 4.54, shifted logits before 4.49
    assert versions.as_run("llama", "sdpa", "5.24.0", hf_model=True, masked=False) == ("sdpa", False, False)
    assert versions.as_run("llama", "sdpa", "5.24.0", hf_model=True, masked=True).repeat_kv  # a padding mask
    assert (
        versions.as_run("llama", "sdpa", "4.48.1", hf_model=True, masked=False, loss_impl="chunked").loss_shifted_copy
        is False
    )
    assert versions.as_run("gemma2", "sdpa", "5.0.0", hf_model=True, masked=False) == ("eager", True, False)
    # torchtune / litgpt expand grouped K/V themselves whatever transformers says; flash attention reads them as is
    assert versions.as_run("gemma2", "sdpa", "5.0.0", hf_model=False, masked=False) == ("sdpa", True, False)
    assert versions.as_run("llama", "flash_attention_2", None, hf_model=False, masked=True).repeat_kv is False


def test_pins_from_each_kind_of_file(tmp_path):
    (tmp_path / "requirements-train.txt").write_text(
        "# training\ntransformers==4.48.1  # pinned\npeft>=0.13\n"
        "-r other.txt\nbitsandbytes[cuda]==0.45.0 ; sys_platform=='linux'\n"
    )
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname="x"\ndependencies=["trl==0.12.1", "peft>=0.10"]\n'
        '[tool.poetry.dependencies]\naccelerate = "1.2.0"\n'
    )
    pins = environment.workspace_pins(tmp_path)
    assert pins["transformers"].version == "4.48.1" and "requirements-train.txt" in pins["transformers"].source
    assert pins["bitsandbytes"].version == "0.45.0"
    assert pins["trl"].version == "0.12.1" and pins["accelerate"].version == "1.2.0"
    assert "peft" not in pins  # a range is not a pin


def test_lock_files_win_over_requirements(tmp_path):
    (tmp_path / "requirements.txt").write_text("transformers==4.46.0\n")
    (tmp_path / "uv.lock").write_text(
        'version = 1\n[[package]]\nname = "transformers"\nversion = "4.51.3"\n'
        '[[package]]\nname = "torch"\nversion = "2.6.0"\n'
    )
    pins = environment.workspace_pins(tmp_path)
    assert pins["transformers"] == environment.Found("4.51.3", "pinned in uv.lock")
    (tmp_path / "uv.lock").unlink()
    (tmp_path / "poetry.lock").write_text('[[package]]\nname = "Transformers"\nversion = "4.47.1"\n')
    assert environment.workspace_pins(tmp_path)["transformers"].version == "4.47.1"


def test_environment_yml_conda_and_pip(tmp_path):
    (tmp_path / "environment.yml").write_text(
        "name: t\ndependencies:\n  - python=3.11\n  - pytorch::pytorch=2.4.1\n  - pip:\n    - transformers==4.45.2\n"
    )
    pins = environment.workspace_pins(tmp_path)
    assert pins["torch"].version == "2.4.1" and pins["transformers"].version == "4.45.2"


def test_broken_and_oversized_pin_files_are_ignored(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project\nnot toml")
    (tmp_path / "uv.lock").write_text("x" * (environment.MAX_PIN_FILE + 10))
    (tmp_path / "environment.yml").write_text("dependencies: [unclosed")
    assert environment.workspace_pins(tmp_path) == {}


def test_trace_interpreter_metadata_is_read_not_run(tmp_path):
    python = fake_env(tmp_path / "venv", "transformers", "4.48.1")
    found = environment.installed(str(python))
    assert found["transformers"] == environment.Found("4.48.1", f"installed in {python}")


def test_order_setting_then_pins_then_interpreter_then_newest(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    python = fake_env(tmp_path / "venv", "transformers", "4.47.0")
    s = Settings(workspace=ws, trace_python=str(python))
    v = environment.versions(s)
    assert v["transformers"].version == "4.47.0"
    assert v["trl"] == environment.Found(versions.NEWEST["trl"], "the newest release vramlens knows")
    (ws / "requirements.txt").write_text("transformers==4.50.0\n")
    assert environment.versions(s)["transformers"].version == "4.50.0"
    told = s.model_copy(update={"framework_versions": {"Transformers": "4.48.1"}})
    assert environment.versions(told)["transformers"] == environment.Found("4.48.1", "the frameworkVersions setting")


def test_transformers_448_keeps_a_shifted_fp32_copy_of_the_logits(tmp_path):
    old = resolved(
        tmp_path,
        CONFIG.replace("sdp_attention: true", "flash_attention: true"),
        framework_versions={"transformers": "4.48.1"},
    )
    new = resolved(
        tmp_path,
        CONFIG.replace("sdp_attention: true", "flash_attention: true"),
        framework_versions={"transformers": "5.23.0"},
    )
    assert old.resolved.loss_shifted_copy and not new.resolved.loss_shifted_copy
    assert any("4.48.1" in a and "shifted fp32 copy" in a for a in old.assumptions)
    assert any("5.23.0" in a and "shifts the labels" in a for a in new.assumptions)
    e_old, e_new = estimate(old.resolved, limits=False), estimate(new.resolved, limits=False)
    # 4 × 4096 tokens × 32,000 logits × 2 more bytes while the loss runs (14 instead of 12 per logit)
    assert e_old.allocated_bytes - e_new.allocated_bytes == 4 * 4096 * 32000 * 2


def test_gemma2_runs_eager_in_transformers_5(tmp_path):
    text = CONFIG.replace("mistralai/Mistral-7B-v0.1", "google/gemma-2-2b")
    v5 = resolved(tmp_path, text, framework_versions={"transformers": "5.0.0"})
    v4 = resolved(tmp_path, text, framework_versions={"transformers": "4.57.1"})
    assert v5.resolved.attn_impl == "eager" and v4.resolved.attn_impl == "sdpa"
    assert any("Gemma-2 has no SDPA path" in a for a in v5.assumptions)
    assert estimate(v5.resolved, limits=False).allocated_bytes > estimate(v4.resolved, limits=False).allocated_bytes


TRL_QLORA = """from transformers import BitsAndBytesConfig
from peft import LoraConfig
from trl import SFTConfig, SFTTrainer

bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype="bfloat16")
args = SFTConfig(output_dir="out", per_device_train_batch_size=4, max_length=2048, bf16=True,
                 gradient_checkpointing=True, model_init_kwargs={"quantization_config": bnb, "dtype": "bfloat16"})
trainer = SFTTrainer(model="meta-llama/Llama-3.1-8B", args=args, \
peft_config=LoraConfig(r=16, target_modules="all-linear"))
"""


def test_trl_prepares_a_kbit_model_by_its_version(tmp_path):
    """TRL's SFTTrainer up to 0.25 upcasts a 4-bit model's other weights to fp32 and casts the embeddings and LM head
    back to bf16, with fp32 adapters; from 0.26 it does neither and trains bf16 adapters."""
    old = resolved(tmp_path, TRL_QLORA, framework_versions={"trl": "0.25.1"}, name="train.py")
    new = resolved(tmp_path, TRL_QLORA, framework_versions={"trl": "0.26.0"}, name="train.py")
    assert (old.resolved.kbit_upcast, old.resolved.kbit_embeddings_16bit, old.resolved.adapter_fp32) == (
        True,
        True,
        True,
    )
    assert (new.resolved.kbit_upcast, new.resolved.kbit_embeddings_16bit, new.resolved.adapter_fp32) == (
        False,
        False,
        False,
    )
    assert any("TRL 0.25.1" in a and "back in bf16" in a for a in old.assumptions)
    assert any("TRL 0.26.0" in a and "adapters train in bf16" in a for a in new.assumptions)
    e_old, e_new = estimate(old.resolved, limits=False), estimate(new.resolved, limits=False)
    assert e_old.components["weights"] > e_new.components["weights"]  # fp32 norms
    assert e_old.components["adapters"] == 2 * e_new.components["adapters"]


def test_server_never_imports_the_libraries_to_find_versions(tmp_path):
    fake_env(tmp_path / "venv", "transformers", "4.48.1")
    before = set(sys.modules)
    environment.versions(Settings(workspace=tmp_path, trace_python=str(tmp_path / "venv" / "bin" / "python")))
    assert not {m for m in set(sys.modules) - before if m.split(".")[0] in ("torch", "transformers", "peft")}


def test_litgpt_and_torchtune_expand_grouped_kv_whatever_transformers_is(tmp_path):
    """Frameworks that build their own attention repeat grouped K/V before SDPA; transformers' native-GQA
    versions do not change that (only transformers' own models read K/V grouped)."""
    litgpt = (
        "checkpoint_dir: checkpoints/meta-llama/Meta-Llama-3.1-8B\nprecision: bf16-true\nlora_r: 8\n"
        "lora_alpha: 16\nlora_query: true\nlora_value: true\n"
        "train:\n  micro_batch_size: 2\n  max_seq_length: 2048\n"
    )
    for version in ("4.48.1", "5.23.0"):
        r = resolved(tmp_path, litgpt, framework_versions={"transformers": version})
        assert r.resolved.framework == "litgpt" and r.resolved.repeat_kv, (version, r.resolved.framework)
    hf = resolved(
        tmp_path,
        CONFIG.replace("micro_batch_size: 4", "micro_batch_size: 4\nsample_packing: true"),
        framework_versions={"transformers": "5.23.0"},
    )
    assert not hf.resolved.repeat_kv  # transformers 5 without a mask: grouped K/V natively


def test_torch_before_113_loads_every_cuda_kernel_with_the_context(tmp_path):
    """torch 1.13 made CUDA module loading lazy; an older torch's context holds every kernel (1343 MiB measured)."""
    old = estimate(resolved(tmp_path, framework_versions={"torch": "1.12.1"}).resolved, limits=False)
    new = estimate(resolved(tmp_path, framework_versions={"torch": "2.5.1"}).resolved, limits=False)
    unknown = estimate(resolved(tmp_path).resolved, limits=False)
    assert old.allocated_bytes == new.allocated_bytes == unknown.allocated_bytes  # only the device level moves
    assert old.device_bytes - new.device_bytes == (1343 - 600) << 20
    assert new.device_bytes == unknown.device_bytes
    assert any(
        "torch 1.12.1 (the frameworkVersions setting)" in a and "CUDA context 1.3 GiB" in a for a in old.assumptions
    )
    assert not any("CUDA kernels load" in a for a in new.assumptions + unknown.assumptions)


def test_trace_python_flag_gives_the_estimate_that_interpreters_versions(tmp_path, monkeypatch):
    """`vramlens trace --python X`: the estimate beside the trace assumes the versions installed in X."""
    import argparse

    from vramlens.cli.project import settings_for

    python = fake_env(tmp_path / "venv", "transformers", "4.48.1")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "train.yaml").write_text(CONFIG.replace("sdp_attention: true", "flash_attention: true"))
    monkeypatch.chdir(ws)
    settings = settings_for(ws / "train.yaml", argparse.Namespace(python=str(python)))
    assert settings.trace_python == str(python)
    text = (ws / "train.yaml").read_text()
    res = resolve(parse_document(text, str(ws / "train.yaml"), workspace=ws).plan, settings)
    assert res.resolved.loss_shifted_copy
    assert any(f"transformers 4.48.1 (installed in {python})" in a for a in res.assumptions)


def test_bloom_runs_its_own_eager_attention(tmp_path):
    """BLOOM computes its ALiBi attention itself (baddbmm, fp32 softmax, bmm) whatever attn_implementation says: the
    estimate counts eager attention's s×s probabilities, and says why."""
    text = CONFIG.replace("mistralai/Mistral-7B-v0.1", "bigscience/bloom-560m")
    r = resolved(tmp_path, text, framework_versions={"transformers": "5.24.0"})
    assert r.resolved.attn_impl == "eager"
    assert any("bloom writes its attention out" in a for a in r.assumptions)


def test_moe_expert_lora_by_version():
    """transformers 4.x: each expert is nn.Linear modules; transformers 5 with peft ≥ 0.19: the fused expert
    parameters for the families peft converts; otherwise no target reaches the experts."""
    assert versions.moe_expert_lora("qwen3_moe", "4.57.1", "0.17.0") == "modules"
    assert versions.moe_expert_lora("qwen3_moe", "5.0.0", "0.18.1") is None
    assert versions.moe_expert_lora("qwen3_moe", "5.0.0", "0.19.0") == "parameters"
    assert versions.moe_expert_lora("mixtral", "5.24.0", "0.21.2") == "parameters"
    assert versions.moe_expert_lora("gpt_oss", "5.24.0", "0.21.2") is None
    assert versions.moe_expert_lora("qwen3_moe", None, None) == "parameters"  # unknown: the newest known
    assert versions.peft_folds_expert_factors("0.21.0") and not versions.peft_folds_expert_factors("0.20.0")


def test_qwen3_moe_lora_adapts_the_experts_from_peft_019(tmp_path):
    """Qwen3-30B-A3B with LoRA on gate/up/down: on peft 0.18 the experts stay frozen (13 M adapter parameters, the
    attention's); from peft 0.19 every expert trains (≈ 1 G parameters) and each block keeps its adapted expert
    stacks, so the estimate grows by tens of GiB; a k-bit model keeps its experts unquantized."""
    text = """base_model: Qwen/Qwen3-30B-A3B
adapter: lora
lora_r: 16
lora_alpha: 16
lora_target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]
sequence_len: 2048
micro_batch_size: 2
bf16: true
"""
    from vramlens.estimate import components as C

    old = resolved(tmp_path, text, framework_versions={"transformers": "5.24.0", "peft": "0.18.1"}).resolved
    new = resolved(tmp_path, text, framework_versions={"transformers": "5.24.0", "peft": "0.21.2"}).resolved
    assert C.params(old).adapter_params < 20e6 < 900e6 < C.params(new).adapter_params
    assert estimate(new, limits=False).allocated_bytes - estimate(old, limits=False).allocated_bytes > 40 * 2**30
    kbit = resolved(
        tmp_path,
        text.replace("adapter: lora", "adapter: qlora\nload_in_4bit: true"),
        framework_versions={"transformers": "5.24.0", "peft": "0.21.2"},
    ).resolved
    experts = sum(lin.params for lin in C.shapes(kbit.arch).linears if lin.expert)
    assert kbit.quant_bits == 4 and C.params(kbit).frozen_bytes >= 4 * experts


def test_dora_on_moe_experts_is_refused_by_peft(tmp_path):
    """peft's ParamWrapper raises for use_dora and lora_dropout: the estimate says the run stops in get_peft_model."""
    text = """base_model: Qwen/Qwen3-30B-A3B
adapter: lora
peft_use_dora: true
lora_r: 16
lora_alpha: 16
lora_target_modules: [q_proj, v_proj, gate_proj, up_proj, down_proj]
sequence_len: 2048
micro_batch_size: 1
bf16: true
"""
    rp = resolved(tmp_path, text, framework_versions={"transformers": "5.24.0", "peft": "0.21.2"}).resolved
    assert rp.peft == "dora"
    notes = estimate(rp, limits=False).assumptions
    assert any("use_dora" in a and "ValueError" in a for a in notes)
    old = resolved(tmp_path, text, framework_versions={"transformers": "4.57.1", "peft": "0.21.2"}).resolved
    assert not any("ValueError" in a for a in estimate(old, limits=False).assumptions)


def test_dora_before_peft_014_recomputes_the_base_product_and_keeps_a_weight_cast(tmp_path):
    """peft 0.13's DoRA recomputes x @ W.to(x.dtype) instead of taking the base layer's output (0.14.0 passes
    `base_result`): with fp32 adapters each adapted linear keeps an fp32 copy of its weight and an fp32 product in
    place of the 16-bit base output. Llama-3.2-1B, all seven linears, 2 × 2048 tokens, no checkpointing:
    per block 60,817,408 weight elements × 4 bytes + 4096 tokens × 23,552 output features × 2 more bytes —
    16 blocks, 6.5 GiB more on peft 0.13.2 (the real-library trace: 34.44 GiB on 0.13.2)."""
    text = """base_model: meta-llama/Llama-3.2-1B
adapter: lora
peft_use_dora: true
lora_r: 16
lora_alpha: 32
lora_dropout: 0.0
lora_target_linear: true
sequence_len: 2048
micro_batch_size: 2
bf16: true
sdp_attention: true
"""
    old = resolved(tmp_path, text, framework_versions={"transformers": "4.57.1", "peft": "0.13.2"})
    new = resolved(tmp_path, text, framework_versions={"transformers": "4.57.1", "peft": "0.14.0"})
    assert old.resolved.adapter_fp32 and old.resolved.peft == "dora"
    e_old, e_new = estimate(old.resolved, limits=False), estimate(new.resolved, limits=False)
    per_block = 60_817_408 * 4 + 4096 * 23_552 * 2
    assert e_old.components["activations"] - e_new.components["activations"] == 16 * per_block
    assert any("peft 0.13.2" in a and "x @ W" in a for a in e_old.assumptions)
    assert not any("x @ W" in a for a in e_new.assumptions)
    # with dropout every peft recomputes the product from the dropped input: the versions agree
    drop = {
        v: estimate(
            resolved(
                tmp_path,
                text.replace("lora_dropout: 0.0", "lora_dropout: 0.05"),
                framework_versions={"transformers": "4.57.1", "peft": v},
            ).resolved,
            limits=False,
        )
        for v in ("0.13.2", "0.21.2")
    }
    assert drop["0.13.2"].allocated_bytes == drop["0.21.2"].allocated_bytes


FSDP_LORA = (
    CONFIG
    + """fsdp:
  - full_shard
  - auto_wrap
fsdp_config:
  fsdp_transformer_layer_cls_to_wrap: MistralDecoderLayer
"""
)


def test_fsdp1_with_transformers_4x_checkpointing_keeps_every_block_input_gradient(tmp_path):
    """transformers before 4.52 checkpoints each layer around its FSDP unit (reentrant): FSDP1 keeps every layer's
    checkpointed input and its gradient until the backward ends. Not in 4.52+ (the layer checkpoints inside its
    unit), not with FSDP2, not with a non-reentrant checkpoint, not for a full fine-tune (no frozen units)."""

    def est(text, **versions_):
        r = resolved(tmp_path, text, framework_versions={"transformers": "4.45.2", **versions_})
        return r, estimate(r.resolved, limits=False)

    old, old_est = est(FSDP_LORA)
    new, new_est = est(FSDP_LORA, transformers="4.52.1")
    assert old.resolved.fsdp_keeps_block_grads and not new.resolved.fsdp_keeps_block_grads
    assert any(
        "transformers 4.45.2 (the frameworkVersions setting) checkpoints each layer around its FSDP unit" in a
        for a in old.assumptions
    )
    # Mistral-7B, 4 × 4096 tokens: 30 more bf16 block inputs of 4096 × 4096 × 4 × 2 bytes = 3.75 GiB, and at the
    # first block's backward every adapter's fp32 gradient (52 MB), not only the last block's
    grown = (
        old_est.phases["recompute"]
        - estimate(old.resolved.with_changes(fsdp_keeps_block_grads=False), limits=False).phases["recompute"]
    )
    assert 0 < grown - 30 * 4 * 4096 * 4096 * 2 < 64 * 2**20
    assert old_est.allocated_bytes > new_est.allocated_bytes
    for text in (
        FSDP_LORA + "  fsdp_version: 2\n",
        FSDP_LORA + "gradient_checkpointing_kwargs:\n  use_reentrant: false\n",
        FSDP_LORA.replace("adapter: lora\n", ""),
    ):
        r, _ = est(text)
        assert not r.resolved.fsdp_keeps_block_grads, text
    # FSDP's own activation checkpointing is non-reentrant inside each unit
    own = FSDP_LORA.replace("gradient_checkpointing: true\n", "") + "  fsdp_activation_checkpointing: true\n"
    r, _ = est(own)
    assert r.resolved.grad_checkpointing and not r.resolved.fsdp_keeps_block_grads
