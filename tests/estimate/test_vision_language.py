"""Vision-language models as a user's config runs them: whether the batches carry images (and which setting says so),
the vision tower's weights, gradients, optimizer state, adapters and activations in the estimate."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("VRAMLENS_CALIBRATION", "off")

from vramlens.estimate import GIB, estimate  # noqa: E402
from vramlens.estimate import components as C  # noqa: E402
from vramlens.formats import parse_document  # noqa: E402
from vramlens.resolve import resolve  # noqa: E402
from vramlens.settings import Settings  # noqa: E402

TRL_GEMMA3_TEXT = """model_name_or_path: google/gemma-3-4b-it
dataset_name: trl-lib/Capybara
per_device_train_batch_size: 2
max_length: 2048
bf16: true
learning_rate: 2.0e-5
"""

LLAMAFACTORY_QWEN_VL = """model_name_or_path: Qwen/Qwen2.5-VL-7B-Instruct
image_max_pixels: 262144
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
template: qwen2_vl
per_device_train_batch_size: 1
cutoff_len: 2048
bf16: true
"""


def resolved(tmp_path: Path, text: str, name: str = "train.yaml"):
    f = tmp_path / name
    f.write_text(text)
    plan = parse_document(text, str(f), workspace=tmp_path).plan
    return resolve(plan, Settings(workspace=tmp_path, gpu="H100-80GB"))


def test_gemma3_text_fine_tune_counts_the_tower_weights_but_runs_no_image(tmp_path):
    """AutoModelForCausalLM loads Gemma-3-4B whole (SigLIP tower + projector): 4.30 B weights. A text dataset puts no
    image through the tower, so it gets no gradient, no optimizer state and saves no activations."""
    res = resolved(tmp_path, TRL_GEMMA3_TEXT)
    rp = res.resolved
    assert rp.arch.vision_params > 0.41e9
    assert rp.images_per_sequence == 0
    assert any("text-only batches" in a for a in res.assumptions)
    p = C.params(rp)
    assert round(p.total / 1e9, 2) == 4.30
    assert p.trainable == p.total - rp.arch.vision_params  # the language model only
    assert C.vision_activations(rp, rp.micro_batch) == 0
    text = estimate(rp, limits=False)
    # the same run with one image per sequence: the tower trains and keeps its activations
    with_images = estimate(rp.with_changes(images_per_sequence=1), limits=False)
    tower_states = rp.arch.vision_params * (2 + 8)  # fp32 weights here: grads + AdamW states
    assert with_images.allocated_bytes - text.allocated_bytes > tower_states
    assert C.params(rp.with_changes(images_per_sequence=1)).trainable == p.total


def test_llamafactory_qwen_vl_config_runs_one_image_per_sequence(tmp_path):
    res = resolved(tmp_path, LLAMAFACTORY_QWEN_VL)
    rp = res.resolved
    assert rp.images_per_sequence == 1
    assert res.sources["images_per_sequence"].key == "image_max_pixels"
    assert rp.vision_frozen  # LLaMA-Factory's freeze_vision_tower default
    assert any("one image of" in a for a in res.assumptions)
    # LLaMA-Factory keeps a frozen tower out of `lora_target: all`: no adapters, no saved tower activations
    assert C.vision_adapted(rp) == []
    assert C.vision_activations(rp, 1) < 4 * 2**20  # the float32 pixel_values only
    # the stated pixel budget sizes the image: 262144 pixels of 14 × 14 patches
    assert rp.arch.image_patches == 262144 // (14 * 14)


def test_a_qwen_vl_model_without_image_settings_still_assumes_images(tmp_path):
    text = LLAMAFACTORY_QWEN_VL.replace("image_max_pixels: 262144\n", "").replace("template: qwen2_vl\n", "")
    res = resolved(tmp_path, text)
    assert res.resolved.images_per_sequence == 1
    assert "images_per_sequence" not in res.sources


def test_peft_adapters_reach_the_siglip_tower_by_name(tmp_path):
    """peft matches target names against the end of module names: q_proj/k_proj/v_proj adapt the SigLIP tower's
    attention too, all-linear every tower linear; their gradients and activations exist only with images."""
    res = resolved(
        tmp_path,
        TRL_GEMMA3_TEXT + "use_peft: true\nlora_r: 16\ngradient_checkpointing: false\n"
        "lora_target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]\n",
    )
    rp = res.resolved
    assert [name for name, _, _ in C.vision_adapted(rp)] == ["q", "k", "v"]
    every = rp.with_changes(lora_targets=("all-linear",))
    assert len(C.vision_adapted(every)) == 6
    assert C.vision_adapter_params(every) > C.vision_adapter_params(rp) > 0
    assert C.vision_activations(rp, 2) == 0
    images = rp.with_changes(images_per_sequence=1)
    assert C.vision_activations(every.with_changes(images_per_sequence=1), 2) > C.vision_activations(images, 2) > 0
    gap = estimate(images, limits=False).allocated_bytes - estimate(rp, limits=False).allocated_bytes
    assert 5 * GIB < gap < 15 * GIB  # 2 × 4096 patches through 27 blocks
    # checkpointed, each tower block keeps its input only, adapters or not
    ckpt = images.with_changes(grad_checkpointing=True)
    assert C.vision_activations(ckpt, 2) == C.vision_activations(ckpt.with_changes(lora_targets=("all-linear",)), 2)


def test_image_settings_of_each_framework_say_images(tmp_path):
    axolotl = (
        "base_model: google/gemma-3-4b-it\nprocessor_type: AutoProcessor\nsequence_len: 2048\n"
        "micro_batch_size: 1\nbf16: true\nadapter: lora\nlora_r: 16\nlora_target_modules: [q_proj, v_proj]\n"
    )
    res = resolved(tmp_path, axolotl, "axolotl.yaml")
    assert res.resolved.images_per_sequence == 1
    assert res.sources["images_per_sequence"].key == "processor_type"
    trl = TRL_GEMMA3_TEXT + "dataset_kwargs:\n  skip_prepare_dataset: true\n"
    assert resolved(tmp_path, trl, "vlm.yaml").resolved.images_per_sequence == 1


def test_a_trl_vision_script_loading_an_image_text_model_runs_images(tmp_path):
    script = """from transformers import AutoModelForImageTextToText, AutoProcessor
from trl import SFTConfig, SFTTrainer

model = AutoModelForImageTextToText.from_pretrained("google/gemma-3-4b-it")
processor = AutoProcessor.from_pretrained("google/gemma-3-4b-it")
args = SFTConfig(output_dir="out", per_device_train_batch_size=1, bf16=True, max_length=2048)
trainer = SFTTrainer(model=model, args=args, processing_class=processor, train_dataset=None)
trainer.train()
"""
    res = resolved(tmp_path, script, "sft_vlm.py")
    assert res.resolved.arch.vision_params
    assert res.resolved.images_per_sequence == 1
    assert res.sources["images_per_sequence"].value == "AutoModelForImageTextToText"
    text = script.replace("AutoModelForImageTextToText", "AutoModelForCausalLM")
    assert resolved(tmp_path, text, "sft.py").resolved.images_per_sequence == 0


SWIFT_QWEN_VL = """CUDA_VISIBLE_DEVICES=0 \\
{env}swift sft \\
    --model Qwen/Qwen2.5-VL-7B-Instruct \\
    --dataset AI-ModelScope/LaTeX_OCR \\
    --train_type {train_type} \\
    --torch_dtype bfloat16 \\
    --per_device_train_batch_size 1 \\
    --freeze_vit {freeze_vit} \\
    --max_length 2048{flags}
"""


def swift(env: str = "", flags: str = "", train_type: str = "lora", freeze_vit: str = "true") -> str:
    return SWIFT_QWEN_VL.format(env=env, flags=flags, train_type=train_type, freeze_vit=freeze_vit)


def test_ms_swift_image_budget_from_the_environment_or_the_flag(tmp_path):
    """ms-swift caps a Qwen-VL image by `MAX_PIXELS` in the environment, `--max_pixels`, or `IMAGE_MAX_TOKEN_NUM`
    (merged tokens: 4 patches each); the tightest cap sizes the image."""
    default = resolved(tmp_path, swift(), "a.sh").resolved.arch.image_patches
    res = resolved(tmp_path, swift(env="MAX_PIXELS=1003520 \\\n"), "b.sh")
    assert res.resolved.arch.image_patches == 1003520 // 14**2 == 5120 != default
    assert res.sources["image_patches"].key == "MAX_PIXELS"
    res = resolved(tmp_path, swift(flags=" \\\n    --max_pixels 401408"), "c.sh")
    assert res.resolved.arch.image_patches == 2048 and res.sources["image_patches"].key == "max_pixels"
    both = resolved(tmp_path, swift(env="MAX_PIXELS=200704 \\\n", flags=" \\\n    --max_pixels 401408"), "d.sh")
    assert both.resolved.arch.image_patches == 1024
    tokens = resolved(tmp_path, "export IMAGE_MAX_TOKEN_NUM=1024\n" + swift(), "e.sh")
    assert tokens.resolved.arch.image_patches == 4096
    # a variable that is neither exported nor a prefix of the command does not reach ms-swift
    assert resolved(tmp_path, "MAX_PIXELS=200704\n" + swift(), "f.sh").resolved.arch.image_patches == default
    # other programs do not read MAX_PIXELS
    other = LLAMAFACTORY_QWEN_VL.replace("image_max_pixels: 262144\n", "")
    f = tmp_path / "g.sh"
    script = f"MAX_PIXELS=200704 llamafactory-cli train {tmp_path / 'lf.yaml'}\n"
    (tmp_path / "lf.yaml").write_text(other)
    assert resolved(tmp_path, script, f.name).resolved.arch.image_patches == default


def test_ms_swift_python_api_reads_the_image_budget_from_os_environ(tmp_path):
    script = """import os
os.environ["MAX_PIXELS"] = "200704"
from swift.llm import TrainArguments, sft_main
sft_main(TrainArguments(model="Qwen/Qwen2.5-VL-7B-Instruct", train_type="lora", torch_dtype="bfloat16",
                        max_length=2048, freeze_vit=True{extra}))
"""
    assert resolved(tmp_path, script.format(extra=""), "a.py").resolved.arch.image_patches == 1024
    assert resolved(tmp_path, script.format(extra=", max_pixels=100352"), "b.py").resolved.arch.image_patches == 512


def test_a_bigger_image_budget_costs_memory_when_the_tower_trains(tmp_path):
    """`--freeze_vit false` in a full fine-tune trains the tower: its activations grow with the image. Checkpointed
    (ms-swift's default), each of the tower's 32 blocks keeps its 1280-wide bf16 input: 4096 patches more are
    4096 × 32 × 1280 × 2 bytes = 0.31 GiB more."""
    small = resolved(tmp_path, swift(env="MAX_PIXELS=200704 \\\n", train_type="full", freeze_vit="false"), "a.sh")
    big = resolved(tmp_path, swift(env="MAX_PIXELS=1003520 \\\n", train_type="full", freeze_vit="false"), "b.sh")
    assert not small.resolved.vision_frozen and small.sources["vision_frozen"].key == "freeze_vit"
    gap = estimate(big.resolved, limits=False).allocated_bytes - estimate(small.resolved, limits=False).allocated_bytes
    assert 4096 * 32 * 1280 * 2 <= gap < 1.5 * 4096 * 32 * 1280 * 2
