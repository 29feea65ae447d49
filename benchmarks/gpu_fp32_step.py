"""A pure fp32 training step's allocated peaks on the local GPU, beside the same step under bf16 autocast.

Llama-3.2-1B's shapes (meta-llama/Llama-3.2-1B config.json: hidden 2048, 16 layers, 32 heads, 8 KV heads, vocabulary
128,256, tied embeddings), random weights built on the GPU, random token ids, micro batch 2 × 1,024, torch.optim.AdamW
with its defaults, three steps: the peak of each step's forward, backward and optimizer step (step 0 has no optimizer
state yet; from step 1 on AdamW's two states are live through the forward and backward). SDPA and eager attention,
and SDPA restricted to one backend (fp32 has no flash kernel). Prints each case and writes $OUT/fp32.json
(benchmarks/results/gpu_fp32_step_h200.json holds one run on an H200).

    python benchmarks/gpu_fp32_step.py        # on a machine with a CUDA GPU and transformers
"""

from __future__ import annotations

import json
import os

import torch
import transformers
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import LlamaConfig, LlamaForCausalLM

GIB = 2**30
CONFIG = LlamaConfig(
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=64,
    vocab_size=128256,
    tie_word_embeddings=True,
    max_position_embeddings=131072,
    rope_theta=500000.0,
)
CASES = [  # (attention, autocast bf16, SDPA backend or None for torch's choice)
    ("sdpa", False, None),
    ("eager", False, None),
    ("sdpa", True, None),
    ("sdpa", False, SDPBackend.EFFICIENT_ATTENTION),
    ("sdpa", False, SDPBackend.MATH),
]


def run(attn: str, amp: bool, backend, steps: int = 3) -> dict:
    torch.cuda.empty_cache()
    CONFIG._attn_implementation = attn
    model = LlamaForCausalLM(CONFIG).to(device="cuda", dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(0, CONFIG.vocab_size, (2, 1024), device="cuda")
    rec: dict = {}
    for step in range(steps):
        torch.cuda.reset_peak_memory_stats()
        # one context per step: `sdpa_kernel` is a generator context manager, entered once
        with sdpa_kernel([backend]) if backend is not None else torch.autocast("cuda", enabled=False):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                loss = model(input_ids=ids, labels=ids).loss
            fwd = torch.cuda.max_memory_allocated()
            loss.backward()
        bwd = torch.cuda.max_memory_allocated()
        opt.step()
        opt.zero_grad(set_to_none=True)
        peak = torch.cuda.max_memory_allocated()
        rec[step] = {k: round(v / GIB, 3) for k, v in (("fwd_peak", fwd), ("bwd_peak", bwd), ("step_peak", peak))}
    rec["max_allocated_gib"] = max(rec[s]["step_peak"] for s in range(1, steps))
    del model, opt
    return rec


def main() -> None:
    out: dict = {"torch": torch.__version__, "transformers": transformers.__version__}
    out["gpu"] = torch.cuda.get_device_name(0)
    for attn, amp, backend in CASES:
        key = f"{attn} float32 amp={amp} backend={backend.name if backend is not None else 'auto'}"
        try:
            out[key] = run(attn, amp, backend)
        except Exception as exc:  # a backend with no kernel for fp32 says so
            out[key] = {"error": repr(exc)[:300]}
        print(key, out[key], flush=True)
    folder = os.environ.get("OUT", ".")
    with open(os.path.join(folder, "fp32.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
