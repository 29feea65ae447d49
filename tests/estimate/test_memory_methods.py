"""Memory-saving methods modelled as their implementations run them: GaLore, Q-GaLore, LISA, BAdam, LLaMA-Pro.

Each is checked against the figure its own repository publishes for a command (the ratio estimate ÷ published must
land in 0.8–1.25), run as a user runs it where vramlens reads the command (the CLI on ms-swift's examples and a
LLaMA-Factory config), else through the public `estimate` function on the plan the command describes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from vramlens.estimate import GIB, estimate
from vramlens.estimate import components as C
from vramlens.knowledge import gpus, models, optimizers
from vramlens.resolved import ResolvedPlan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SWIFT = FIXTURES / "ms-swift" / "v4.5.2"  # modelscope/ms-swift v4.5.2 examples/train/tuners/ (see SOURCE)
BAND = (0.8, 1.25)


def run_cli(path: Path, *flags: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", "--format", "json", "--offline", *flags, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    return data[0] if isinstance(data, list) else data


def variant(tmp_path: Path, fixture: str, name: str, drop: tuple[str, ...] = (), add: tuple[str, ...] = ()) -> Path:
    """The example's command with some flag lines removed and others added."""
    lines = [
        l.rstrip().removesuffix("\\").rstrip()
        for l in (SWIFT / fixture).read_text().splitlines()
        if l.strip() and not any(l.strip().startswith(d) for d in drop)
    ]
    comments = [l for l in lines if l.startswith("#")]
    command = [l for l in lines if not l.startswith("#")] + [f"    {a}" for a in add]
    path = tmp_path / name
    path.write_text("\n".join(comments + [" \\\n".join(command)]) + "\n")
    return path


# ------------------------------------------------------------------ ms-swift v4.5.2 examples, as their headers state


@pytest.mark.parametrize(
    "fixture, stated_gib",
    [
        ("galore_train_galore.sh", 38.0),  # "# 38GiB": GaLore, one optimizer per parameter
        ("galore_train_qgalore.sh", 35.0),  # "# 35GiB": Q-GaLore (QGaLoreAdamW8bit)
        ("lisa_train.sh", 29.0),  # "# 29GiB": LISA, 2 active layers
        ("llamapro_train.sh", 25.4),  # "# 25.4GiB": LLaMA-Pro, 4 new blocks
    ],
)
def test_ms_swift_method_examples_land_near_their_stated_memory(fixture, stated_gib):
    d = run_cli(SWIFT / fixture)
    assert d["unmodelled"] == [], d["unmodelled"]
    ratio = d["peak"]["device_gib"] / stated_gib
    assert BAND[0] <= ratio <= BAND[1], (fixture, d["peak"], stated_gib)


def test_ms_swift_galore_per_parameter_optimizers_keep_every_gradient(tmp_path):
    """ms-swift's `--galore_optim_per_parameter` builds one optimizer per parameter and steps them all together at the
    optimizer step (no gradient hooks), so the full gradients are held as without it."""
    qwen = models.lookup_model("Qwen/Qwen2.5-7B-Instruct")
    full_grads = C.shapes(qwen).total * 2 / GIB
    per_param = run_cli(SWIFT / "galore_train_galore.sh")
    together = run_cli(variant(tmp_path, "galore_train_galore.sh", "one.sh", drop=("--galore_optim_per_parameter",)))
    for d in (per_param, together):
        assert d["components_gib"]["gradients"] == pytest.approx(full_grads, rel=0.01)
    assert per_param["peak"]["device_gib"] == pytest.approx(together["peak"]["device_gib"], rel=0.01)
    # a smaller rank shrinks only the projected states
    low = run_cli(variant(tmp_path, "galore_train_galore.sh", "r32.sh", add=("--galore_rank 32",)))
    assert low["components_gib"]["optimizer"] < per_param["components_gib"]["optimizer"]
    assert low["components_gib"]["gradients"] == pytest.approx(full_grads, rel=0.01)


def test_ms_swift_q_galore_is_read_as_its_8bit_optimizer_and_quantized_projections(tmp_path):
    galore = run_cli(variant(tmp_path, "galore_train_qgalore.sh", "plain.sh", drop=("--galore_quantization",)))
    qgalore = run_cli(SWIFT / "galore_train_qgalore.sh")
    assert qgalore["sources"]["optimizer"]["value"] == "q_galore_adamw8bit"
    # 8-bit states (bitsandbytes) on the projected and the full-rank parameters: about half of 16-bit AdamW's
    assert qgalore["components_gib"]["optimizer"] == pytest.approx(galore["components_gib"]["optimizer"] / 2, rel=0.06)
    assert qgalore["components_gib"]["weights"] == galore["components_gib"]["weights"]  # ms-swift keeps bf16 weights
    projq = run_cli(variant(tmp_path, "galore_train_qgalore.sh", "projq.sh", add=("--galore_proj_quant true",)))
    assert projq["unmodelled"] == []
    assert projq["components_gib"]["optimizer"] < qgalore["components_gib"]["optimizer"]
    bits8 = run_cli(
        variant(
            tmp_path, "galore_train_qgalore.sh", "projq8.sh", add=("--galore_proj_quant true", "--galore_proj_bits 8")
        )
    )
    assert bits8["sources"]["optimizer_proj_bits"]["value"] == 8


@pytest.mark.parametrize("blocks", [4, 7, 14])
def test_ms_swift_llama_pro_estimates_the_expanded_model(tmp_path, blocks):
    """swift/tuners/llamapro.py copies `llamapro_num_new_blocks` decoder blocks into the model: the model grows by
    that many layers, and only they train."""
    qwen = models.lookup_model("Qwen/Qwen2.5-7B-Instruct")
    per_layer = C.shapes(qwen).layer_params
    d = run_cli(
        variant(
            tmp_path,
            "llamapro_train.sh",
            f"pro{blocks}.sh",
            drop=("--llamapro_num_new_blocks",),
            add=(f"--llamapro_num_new_blocks {blocks}",),
        )
    )
    assert d["unmodelled"] == []
    assert d["model"]["params"] == pytest.approx(models.param_count(qwen) + blocks * per_layer, rel=0.002)
    assert d["params_trainable"] == pytest.approx(blocks * per_layer, rel=0.01)
    assert d["components_gib"]["weights"] == pytest.approx(d["model"]["params"] * 2 / GIB, rel=0.01)


# ------------------------------------------------------------------ GaLore and Q-GaLore READMEs (their own scripts)


def llama7b_plan(
    optimizer: str, micro_batch: int, checkpointing: bool, int8: bool = False, proj_quant: bool = False
) -> ResolvedPlan:
    """jiaweizzhao/GaLore 2cc66f88 torchrun_main.py and VITA-Group/Q-GaLore 5bd2f1c5 run_pretrain.py with
    configs/llama_7b.json (Llama-2-7B's shapes: vocab 32000, hidden 4096, 32 layers, MLP 11008): the model cast to
    bf16 (`--dtype bfloat16`), max_length 256 (the scripts' default), SDPA attention
    (peft_pretraining/modeling_llama.py), GaLore on every attention and MLP linear (`target_modules_list = ["attn",
    "mlp"]`), rank 1024, one optimizer per parameter stepped from the backward (`*_per_layer`), the embedding and LM
    head on bitsandbytes Adam8bit."""
    return ResolvedPlan(
        arch=models.lookup_model("meta-llama/Llama-2-7b-hf"),
        framework="custom",
        weight_dtype="bf16",
        compute_dtype="bf16",
        micro_batch=micro_batch,
        grad_accum=512 // micro_batch,
        seq_len=256,
        grad_checkpointing=checkpointing,
        attn_impl="sdpa",
        optimizer=optimizers.lookup_optimizer(optimizer),
        low_rank=1024,
        low_rank_targets=("all-linear",),
        low_rank_int8_weights=int8,
        low_rank_proj_quant=proj_quant,
        gpu=gpus.lookup_gpu("RTX 4090")[0],
        gpu_count=1,
    )


def assert_near(est_bytes: int, published: float):
    """The READMEs write "G" without saying GB or GiB, nor which counter: either reading must land in the band."""
    for unit in (1e9, GIB):
        ratio = est_bytes / (published * unit)
        assert BAND[0] <= ratio <= BAND[1], (est_bytes / GIB, published, unit)


@pytest.mark.parametrize(
    "micro_batch, checkpointing, published",
    [
        (
            16,
            True,
            22.8,
        ),  # GaLore README "LLaMA-7B, 8-bit GaLore-Adam, single GPU, activation checkpointing, bsz=16, 22.8G"
        (1, False, 21.3),  # Q-GaLore scripts/single_gpu/llama_7b_galore.sh "Memory cost: 21.3G"
        (16, True, 22.02),  # Q-GaLore scripts/single_gpu/llama_7b_galore_checkpointing.sh "22.02G, BSZ=16"
    ],
)
def test_galore_8bit_per_layer_llama7b_matches_the_published_memory(micro_batch, checkpointing, published):
    est = estimate(llama7b_plan("galore_adamw_8bit_layerwise", micro_batch, checkpointing), limits=False)
    assert est.components["gradients"] == 0  # each gradient is stepped away in the backward
    assert_near(est.device_bytes, published)


@pytest.mark.parametrize(
    "micro_batch, checkpointing, published",
    [
        (1, False, 15.08),  # Q-GaLore scripts/single_gpu/llama_7b.sh "Memory cost: 15.08 G"
        (16, True, 15.26),  # Q-GaLore README / llama_7b_checkpointing.sh "15.26G, BSZ=16"
    ],
)
def test_q_galore_llama7b_matches_the_published_memory(micro_batch, checkpointing, published):
    """`--weight_quant --stochastic_round --proj_quant --optimizer q_galore_adamw8bit_per_layer`: INT8 block linears,
    INT4 projections (a uint8 each), 8-bit states, per-layer updates."""
    plan = llama7b_plan("q_galore_adamw8bit_layerwise", micro_batch, checkpointing, int8=True, proj_quant=True)
    est = estimate(plan, limits=False)
    assert_near(est.device_bytes, published)
    # what INT8 weights and INT4 projections save over 8-bit GaLore on 16-bit weights
    galore = estimate(llama7b_plan("galore_adamw_8bit_layerwise", micro_batch, checkpointing), limits=False)
    linears = sum(l.params for l in C.shapes(plan.arch).linears)
    assert galore.components["weights"] - est.components["weights"] == pytest.approx(linears * (2 - 1), rel=0.02)
    assert est.components["optimizer"] < galore.components["optimizer"]


def test_galore_projection_svd_is_a_step_transient():
    """Every `update_proj_gap` steps the largest targeted gradient is decomposed in fp32 (`get_orthogonal_matrix`):
    its fp32 copy, the solver's column-major working copy, U and Vh. For Llama-2-7B the MLP's 11008 × 4096 SVD
    outweighs the for-loop step's two copies of the 32000 × 4096 embedding."""
    plan = llama7b_plan("galore_adamw", 1, True)
    p = C.params(plan)
    m, n = 11008, 4096
    svd = 4 * (2 * m * n + m * n + n * n + n)
    assert svd > 2 * p.largest_param_bytes
    assert C.optimizer_temporaries(plan, p) == svd
    # a rank-r projection is r × the short side, in the gradient's dtype (2 bytes), or a byte plus group scales
    base = C.optimizer_state(plan, p)
    quant = C.optimizer_state(plan.with_changes(low_rank_proj_quant=True), p)
    short_sides = sum(l.count * min(l.in_features, l.out_features) for l in C.shapes(plan.arch).linears)
    assert base - quant == pytest.approx(1024 * short_sides * (2 - 1 - 4 / 256), rel=0.01)


# ------------------------------------------------------------------ BAdam README, through LLaMA-Factory

BADAM = """model_name_or_path: {model}
stage: sft
do_train: true
finetuning_type: full
use_badam: true
badam_mode: layer
badam_switch_mode: random
badam_switch_interval: 100
dataset: alpaca_gpt4_en
template: default
cutoff_len: 1024
per_device_train_batch_size: 2
gradient_accumulation_steps: 8
learning_rate: 1.0e-5
bf16: true
"""


@pytest.mark.parametrize(
    "model, published",
    [
        ("meta-llama/Meta-Llama-3-8B", 23.5),  # Ledzy/BAdam bf989dcb readme.md Table 1: "23.5 GB" on one RTX 3090
        ("meta-llama/Llama-2-7b-hf", 21.8),  # the same table: "21.8 GB"
    ],
)
def test_badam_matches_its_readme_on_an_rtx3090(tmp_path, model, published):
    """BAdam's README command (batch 2, Alpaca-GPT4, one decoder layer per block, bf16) as a LLaMA-Factory config:
    the active block keeps an fp32 copy and fp32 Adam states (block_optim.py `switch_trainable_params`), 16 bytes
    per active parameter with its gradients — the README's 2M + 16M/D."""
    path = tmp_path / "badam.yaml"
    path.write_text(BADAM.format(model=model))
    d = run_cli(path, "--gpu", "RTX 3090")
    assert d["fits"] is True
    trained = d["params_trainable"]
    assert d["components_gib"]["optimizer"] == pytest.approx(trained * 12 / GIB, rel=0.01)  # fp32 copy + 2 states
    assert_near(d["peak"]["device_gib"] * GIB, published)
