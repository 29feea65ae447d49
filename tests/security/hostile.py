"""Hostile documents, shared by the security tests and `benchmarks/hostile_inputs.py`."""

from __future__ import annotations

HEADER = "model_name_or_path: meta-llama/Meta-Llama-3-8B\nper_device_train_batch_size: 4\nbf16: true\n"


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """ "Billion laughs": each anchor repeats the previous one `width` times (9^9 values when expanded)."""
    names = [f"l{i}" for i in range(levels)]
    lines = [f"{names[0]}: &{names[0]} [" + ", ".join(['"lol"'] * width) + "]"]
    for prev, name in zip(names, names[1:]):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * width) + "]")
    return HEADER + "\n".join(lines) + f"\nlora_target_modules: *{names[-1]}\n"


def deep_flow(depth: int = 100_000) -> str:
    return HEADER + "lora_target_modules: " + "[" * depth + "]" * depth + "\n"


def ten_megabytes() -> str:
    """A 10 MB YAML file: a real header and then many keys."""
    body = "".join(f"key_{i:07d}: {i}\n" for i in range(10 * 2**20 // 20))
    return HEADER + body


def binary(size: int = 64 * 1024) -> str:
    """A binary file as an editor would hand it over (bytes read as Latin-1: NULs and control characters)."""
    return bytes(range(256)).decode("latin-1") * (size // 256)


PYTHON_TAGS = [
    "model_name_or_path: !!python/object/apply:os.system ['touch {marker}']\n",
    "model_name_or_path: !!python/object/new:os.system ['touch {marker}']\n",
    "optim: !!python/name:os.system\n",
    "x: !!python/object/apply:subprocess.check_call [['touch', '{marker}']]\n",
]


# --- CPU and memory bombs: small or moderate texts whose naive handling is exponential or quadratic -----------

LAUNCH = "torchrun --nproc_per_node 8 train.py --model_name_or_path meta-llama/Meta-Llama-3-8B --bf16 True"


def shell_doubling(lines: int = 63) -> str:
    """`V1="$V0 $V0"`, `V2="$V1 $V1"`, …: each line doubles the value (63 lines: 2^63 characters if expanded),
    used by the launch command that follows."""
    out = ["V0=" + "a" * 8]
    out += [f'V{i}="$V{i - 1} $V{i - 1}"' for i in range(1, lines)]
    out.append(f"{LAUNCH} --output_dir $V{lines - 1} --per_device_train_batch_size 4")
    return "\n".join(out) + "\n"


def shell_doubling_readme(lines: int = 63) -> str:
    """The same doubling inside a ```bash block of a README."""
    return "# Training\n\nRun:\n\n```bash\n" + shell_doubling(lines) + "```\n"


def base60_int(chars: int = 300_000) -> str:
    """A YAML 1.1 base-60 ("sexagesimal") integer `59:59:59:…` of `chars` characters."""
    return HEADER + "max_steps: 1" + ":59" * (chars // 3) + "\n"


def repeated_keys(n: int = 4_000) -> str:
    """`optim:` repeated n times: one duplicate-key finding each."""
    return HEADER + "".join(f"optim: adamw_torch_{i}\n" for i in range(n))


def long_path(repeats: int = 40_000) -> str:
    """A referenced-file path `m/m/m/…/ds.json` of 2 × `repeats` characters."""
    return HEADER + "deepspeed: " + "m/" * repeats + "ds.json\n"


def fstring_placeholders(n: int = 150_000) -> str:
    """A Python `TrainingArguments(...)` call with a 450 KB f-string of n placeholders."""
    return (
        "from transformers import TrainingArguments\n"
        'args = TrainingArguments(output_dir="out", per_device_train_batch_size=4, bf16=True,\n'
        '                         run_name=f"' + "{x}" * n + '")\n'
    )
