"""One process, several GPUs: a model spread over its GPUs by `device_map` (naive model parallelism). ms-swift does it
whenever a process sees more than one GPU (fixtures from its repository at v2.4.0, v3.5.0 and v4.0.0, each with its
SOURCE); transformers does it for `from_pretrained(..., device_map="auto")` in a process with several GPUs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from vramlens.analysis import analyze
from vramlens.estimate import components as C
from vramlens.estimate import estimate
from vramlens.estimate.shapes import shapes
from vramlens.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SWIFT = ROOT / "tests" / "fixtures" / "ms-swift"
VERSIONS = {"v2.4.0": "2.4.0", "v3.5.0": "3.5.0", "v4.0.0": "4.0.0"}


def analysed(path: Path, text: str | None = None, **settings):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    text = path.read_text(encoding="utf-8") if text is None else text
    tag = next((t for t in VERSIONS if t in path.parts), None)
    if tag:
        settings.setdefault("framework_versions", {"ms-swift": VERSIONS[tag]})
    a = analyze(text, str(path), Settings(model_lookup=False, **settings))
    assert a.estimate is not None and a.resolution is not None, a.error
    return a


@pytest.mark.parametrize(
    "path, gpus, processes",
    [
        # `CUDA_VISIBLE_DEVICES=0,1 python llm_sft.py`: one process over two GPUs ("2 * 75GB GPU memory")
        ("v2.4.0/device_map/qwen_72b_chat_lora_mp_sft.sh", 2, 1),
        ("v2.4.0/device_map/qwen_7b_chat_full_mp_sft.sh", 2, 1),
        # `CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --nproc_per_node=2 llm_sft.py`: MP + DDP ("4 * 20GB GPU memory")
        ("v2.4.0/device_map/qwen_7b_chat_lora_mp_ddp_sft.sh", 4, 2),
        # `CUDA_VISIBLE_DEVICES=0,1,2,3 NPROC_PER_NODE=2 swift sft` ("14GiB * 4")
        ("v3.5.0/device_map/ddp_device_map_train.sh", 4, 2),
        ("v4.0.0/device_map/ddp_device_map_train.sh", 4, 2),
    ],
)
def test_ms_swift_spreads_the_model_over_each_process_s_gpus(path, gpus, processes):
    a = analysed(SWIFT / path)
    dpp = a.plan.devices_per_process
    assert dpp is not None and dpp.value == gpus // processes
    assert dpp.key == "CUDA_VISIBLE_DEVICES" and "spreads the model over 2 GPUs" in (dpp.note or "")
    rp = a.resolution.resolved
    assert (rp.devices_per_process, rp.gpu_count) == (gpus // processes, gpus)
    # DDP replicas are the processes, not the GPUs
    assert rp.world_size == processes and rp.strategy == ("ddp" if processes > 1 else "none")
    assert any("device_map over 2 GPUs" in x and "busiest" in x for x in a.estimate.assumptions)


def test_one_visible_gpu_per_process_is_no_device_map():
    path = SWIFT / "v3.5.0" / "device_map" / "ddp_device_map_train.sh"
    a = analysed(
        path, path.read_text(encoding="utf-8").replace("CUDA_VISIBLE_DEVICES=0,1,2,3", "CUDA_VISIBLE_DEVICES=0,1")
    )
    assert a.plan.devices_per_process is None
    assert a.resolution.resolved.devices_per_process == 1 and a.resolution.resolved.world_size == 2


def test_the_estimate_is_the_busiest_gpu_s_share():
    """Per GPU: its blocks' share of the weights, with the embedding or the head where they lie; every saved
    activation of its blocks; the logits on the GPU with the head. The figure is the larger of the two GPUs."""
    a = analysed(SWIFT / "v2.4.0" / "device_map" / "qwen_72b_chat_lora_mp_sft.sh")
    rp = a.resolution.resolved
    whole = estimate(rp.with_changes(devices_per_process=1, gpu_count=1))
    spread = a.estimate
    devs = C.device_map_devices(rp)
    assert [d.layers for d in devs] and sum(d.layers for d in devs) == rp.arch.layers
    assert devs[0].embedding and devs[-1].head and not rp.arch.tied_embeddings
    s = shapes(rp.arch)
    wb = C.DTYPE_BYTES[rp.weight_dtype]
    blocks = whole.components["weights"] - (s.embed_params + s.lm_head_params) * wb
    on_gpu = [
        blocks * d.layers / rp.arch.layers + wb * (s.embed_params * d.embedding + s.lm_head_params * d.head)
        for d in devs
    ]
    assert spread.components["weights"] == pytest.approx(max(on_gpu), rel=0.01)
    # the GPU with the head holds the whole model's logits and about its blocks' share of the activations
    peak = max(devs, key=lambda d: on_gpu[devs.index(d)])
    assert peak.head and spread.components["logits"] == whole.components["logits"]
    share = peak.layers / rp.arch.layers
    assert spread.components["activations"] == pytest.approx(whole.components["activations"] * share, rel=0.1)
    assert spread.components["gradients"] == pytest.approx(whole.components["gradients"] * share, rel=0.02)
    assert 0.45 * whole.device_bytes < spread.device_bytes < 0.6 * whole.device_bytes


def test_the_gpus_run_one_after_another_no_data_parallel_speed_up():
    a = analysed(SWIFT / "v2.4.0" / "device_map" / "qwen_72b_chat_lora_mp_sft.sh")
    rp = a.resolution.resolved
    one = estimate(rp.with_changes(devices_per_process=1, gpu_count=1)).throughput
    two = a.estimate.throughput
    assert two.step_s == pytest.approx(one.step_s)
    assert two.run_tokens_per_s == pytest.approx(one.run_tokens_per_s)
    assert two.tokens_per_s == pytest.approx(one.tokens_per_s / 2)


SCRIPT = """import os

os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

model = AutoModelForCausalLM.from_pretrained(
    "meta-llama/Llama-2-13b-hf", torch_dtype=torch.bfloat16, device_map="auto"
)
model = get_peft_model(model, LoraConfig(r=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
args = TrainingArguments(output_dir="out", per_device_train_batch_size=1, gradient_checkpointing=True, bf16=True)
Trainer(model=model, args=args, train_dataset=None).train()
"""


def test_a_python_script_s_device_map_auto_over_its_visible_gpus(tmp_path):
    path = tmp_path / "train.py"
    spread = analysed(path, SCRIPT)
    rp = spread.resolution.resolved
    assert spread.plan.devices_per_process is not None and spread.plan.devices_per_process.key == "device_map"
    assert (rp.devices_per_process, rp.world_size, rp.strategy) == (2, 1, "none")
    # one GPU per process as before: one process per visible GPU, each with the whole model
    pinned = analysed(path, SCRIPT.replace('device_map="auto"', 'device_map={"": 0}'))
    assert pinned.resolution.resolved.devices_per_process == 1
    assert spread.estimate.components["weights"] < 0.6 * pinned.estimate.components["weights"]
    # with no GPU count known, one GPU: the same estimate as without device_map
    alone = SCRIPT.replace('os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"\n', "")
    assert analysed(path, alone).resolution.resolved.devices_per_process == 1
    assert (
        analysed(path, alone).estimate.device_bytes
        == analysed(path, alone.replace(', device_map="auto"', "")).estimate.device_bytes
    )
    # the settings' GPU count: all of them for the one process
    told = analysed(path, alone, gpu_count=2).resolution.resolved
    assert (told.devices_per_process, told.world_size) == (2, 1)


@pytest.mark.parametrize("tied", [False, True])
def test_the_placement_is_accelerate_s(tied):
    """The blocks on each GPU and where the head lies, against accelerate's own `get_balanced_memory` +
    `infer_auto_device_map` on the model built on the meta device (as transformers' `device_map="auto"` runs them)."""
    torch = pytest.importorskip("torch")
    accelerate = pytest.importorskip("accelerate")
    transformers = pytest.importorskip("transformers")
    from accelerate.utils import get_balanced_memory, infer_auto_device_map

    a = analysed(SWIFT / "v3.5.0" / "device_map" / "ddp_device_map_train.sh")
    rp = a.resolution.resolved
    arch = rp.arch.model_copy(update={"tied_embeddings": tied})
    rp = rp.with_changes(arch=arch)
    cfg = transformers.Qwen2Config(
        hidden_size=arch.hidden,
        intermediate_size=arch.intermediate,
        num_hidden_layers=arch.layers,
        num_attention_heads=arch.heads,
        num_key_value_heads=arch.kv_heads,
        vocab_size=arch.vocab,
        tie_word_embeddings=tied,
    )
    with accelerate.init_empty_weights():
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    if tied:
        model.tie_weights()
    big = {0: 10**13, 1: 10**13}
    kw = {"no_split_module_classes": model._no_split_modules, "dtype": torch.bfloat16}
    placed = infer_auto_device_map(model, max_memory=get_balanced_memory(model, max_memory=big, **kw), **kw)
    layers = [0, 0]
    for name, device in placed.items():
        if name.startswith("model.layers."):
            layers[device] += 1
    devs = C.device_map_devices(rp)
    assert [d.layers for d in devs] == layers
    assert [d.head for d in devs].index(True) == placed["lm_head"]
    assert [d.embedding for d in devs].index(True) == placed["model.embed_tokens"]
