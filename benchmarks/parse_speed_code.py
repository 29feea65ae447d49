"""How long reading a 2,000-line Python script, shell script and README takes (the editor re-reads on keystrokes).

Python is compared with `ast.parse` of the same text (the floor: vramlens parses with `ast`, then walks
the tree once); shell with `shlex.split` of the same text (a tokenizer without offsets or variables);
Markdown with the shell figure. Prints the median of several runs in milliseconds of CPU time of this
process (`time.process_time`), which a busy machine disturbs far less than wall-clock time.

    python benchmarks/parse_speed_code.py [--repeat 30]
"""

from __future__ import annotations

import argparse
import ast
import shlex
import statistics
import time

from vramlens.formats import parse_document

PY_BLOCK = '''

def stage_{i}(data):
    """One training stage."""
    batch_size = {b}
    accum = 64 // batch_size
    name = f"stage-{i}-{{batch_size}}"
    model = AutoModelForCausalLM.from_pretrained(
        "meta-llama/Llama-3.1-8B",
        torch_dtype=torch.bfloat16,
        attn_implementation="flash_attention_2",
    )
    peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules=["q_proj", "v_proj"])
    args = SFTConfig(
        output_dir=name,
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accum,
        max_length=4096,
        optim="paged_adamw_8bit",
        bf16=True,
        learning_rate=2e-4,
        logging_steps=10,
        **extra_args,
    )
    rows = [len(x) for x in data if x]
    total = sum(rows) / max(1, len(rows))
    if total > 100:
        print("long rows", total)
    for step, batch in enumerate(data):
        if step % 100 == 0:
            print(step, batch)
    trainer = SFTTrainer(model=model, args=args, peft_config=peft_config, train_dataset=data)
    return trainer
'''

PY_HEAD = """import os
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
import torch
from peft import LoraConfig
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer

extra_args = {"report_to": "none"}
"""

SH_BLOCK = """
# stage {i}
STAGE={i}
OUT=out/stage_$STAGE
mkdir -p "$OUT"
echo "starting stage $STAGE at $(date)" >> logs/run.log
if [ -f "$OUT/done" ]; then
    echo "skip $STAGE"
fi
cp configs/base.yaml "$OUT/config.yaml"
python tools/prepare.py --input data/part_{i}.jsonl --output "$OUT/data" --num_proc 8
"""

SH_TAIL = """
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --nproc_per_node 4 train.py \\
    --model_name_or_path meta-llama/Llama-3.1-8B \\
    --per_device_train_batch_size 4 \\
    --gradient_accumulation_steps 8 \\
    --bf16 \\
    --gradient_checkpointing True \\
    --optim adamw_torch_fused
"""


def python_text(lines: int = 2000) -> str:
    out, i = [PY_HEAD], 0
    while sum(s.count("\n") for s in out) < lines:
        out.append(PY_BLOCK.format(i=i, b=1 + i % 8))
        i += 1
    return "".join(out)


def shell_text(lines: int = 2000) -> str:
    out, i = ["#!/bin/bash\nset -e\n"], 0
    while sum(s.count("\n") for s in out) < lines - SH_TAIL.count("\n"):
        out.append(SH_BLOCK.format(i=i))
        i += 1
    out.append(SH_TAIL)
    return "".join(out)


def markdown_text(lines: int = 2000) -> str:
    prose = "Some prose about the training run, its data and its results.\n\n"
    out, i = ["# Project\n\n"], 0
    while sum(s.count("\n") for s in out) < lines - 12:
        out.append(prose + f"```bash\npython tools/prepare.py --part {i}\n```\n\n")
        i += 1
    console = SH_TAIL.strip().replace("\n    ", "\n>     ").replace("\nCUDA", "\n$ CUDA")
    out.append("```console\n$ " + console + "\n```\n")
    return "".join(out)


def median_ms(fn, repeat: int) -> float:
    fn()  # warm caches (imports, regex compilation)
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append((time.process_time() - t) * 1000)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()

    py = python_text()
    sh = shell_text()
    md = markdown_text()
    assert parse_document(py, "train.py").plan.micro_batch is not None
    assert parse_document(sh, "run.sh").plan.micro_batch.value == 4
    assert parse_document(md, "README.md").plan.micro_batch.value == 4

    rows = [
        ("python", py, "train.py", "ast.parse", lambda: ast.parse(py)),
        ("shell", sh, "run.sh", "shlex.split", lambda: shlex.split(sh, comments=True)),
        ("markdown", md, "README.md", "shlex.split", lambda: shlex.split(sh, comments=True)),
    ]
    print(
        f"{'format':<9} {'lines':>6} {'KiB':>6} {'vramlens ms':>12} {'baseline':>12} {'baseline ms':>12} {'ratio':>6}"
    )
    for name, text, path, base_name, base in rows:
        ours = median_ms(lambda: parse_document(text, path), args.repeat)
        ref = median_ms(base, args.repeat)
        print(
            f"{name:<9} {text.count(chr(10)):>6} {len(text) / 1024:>6.1f} {ours:>12.2f} {base_name:>12} "
            f"{ref:>12.2f} {ours / ref:>6.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
