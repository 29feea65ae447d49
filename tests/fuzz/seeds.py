"""Seed documents and the ways the fuzzers break them.

Seeds are the real configs in `../shared/corpus/`, `examples/` and `tests/fixtures/` (YAML, JSON, Python,
shell, Markdown). `documents()` draws one and applies a few mutations of the kinds a half-typed or
hostile file has: truncation, random character edits, long repeats, token swaps with odd values (huge numbers, NaN,
tags, aliases, shell substitutions), deep nesting, duplicated keys and lines, random indentation.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
from shared_data import SHARED  # noqa: E402

SEED_DIRS = (SHARED / "corpus", REPO / "examples", REPO / "tests" / "fixtures")
SUFFIXES = {".yaml", ".yml", ".json", ".py", ".sh", ".md"}
MAX_SEED_CHARS = 60_000


@dataclass(frozen=True)
class Seed:
    name: str  # file name, e.g. "qlora.yml" (the suffix picks the reader)
    text: str


@functools.cache
def seeds() -> tuple[Seed, ...]:
    out: list[Seed] = []
    for folder in SEED_DIRS:
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*")):
            if path.suffix.lower() not in SUFFIXES or not path.is_file():
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if len(text) <= MAX_SEED_CHARS:
                out.append(Seed(path.name, text))
    # a few tiny seeds, so that short documents are common too
    out += [
        Seed("tiny.yaml", "model_name_or_path: gpt2\nper_device_train_batch_size: 8\n"),
        Seed("tiny.json", '{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 3}}\n'),
        Seed("tiny.py", "from trl import SFTConfig\nSFTConfig(per_device_train_batch_size=4, bf16=True)\n"),
        Seed("tiny.sh", "torchrun --nproc_per_node 8 train.py --model_name_or_path gpt2 --bf16\n"),
        Seed("empty.yaml", ""),
    ]
    # the routes where YAML or JSON is read from a value, and a stream of more documents than are analysed
    out += [
        Seed(
            "overrides.sh",
            "llamafactory-cli train cfg.yaml model_name_or_path=meta-llama/Meta-Llama-3-8B "
            "lora_target='[&t q_proj, *t, v_proj]' deepspeed='{zero_optimization: {stage: 3}}' "
            "per_device_train_batch_size=2\n",
        ),
        Seed(
            "tune.sh",
            "tune run lora_finetune_single_device --config llama3_1/8B_lora_single_device "
            "model.lora_attn_modules='[q_proj, v_proj]' batch_size=4 optimizer.lr=2e-5\n",
        ),
        Seed(
            "json_args.sh",
            "torchrun --nproc_per_node 8 train.py --model_name_or_path gpt2 --fsdp full_shard "
            '--fsdp_config \'{"fsdp_offload_params": true, "min_num_params": [1, [2]]}\'\n',
        ),
        Seed(
            "arrays.sh",
            "MODEL=m/x\nwhile getopts m: o; do case $o in m) MODEL=$OPTARG ;; esac; done\n"
            "ARGS=(\n --pretrain $MODEL # base\n --micro_train_batch_size 2\n)\nARGS+=(--max_len 512)\n"
            'DIST="--nproc_per_node 8 --nnodes 1"\n'
            'deepspeed $DIST --module openrlhf.cli.train_sft "${ARGS[@]}" ${ARGS[*]} ${ARGS[0]}\n',
        ),
        Seed(
            "bash_c.sh",
            "read -r -d '' cmds <<EOF\nopenrlhf.cli.train_sft --pretrain m/x --zero_stage 3\nEOF\n"
            'srun -N 1 bash -c "cd /w; torchrun --nproc_per_node 8 -m ${cmds}"\n'
            "bash -c 'sh -c \"srun torchrun train.py --model_name_or_path m/x\"'\n",
        ),
        Seed(
            "sweep.yaml",
            "".join(f"---\nmodel_name_or_path: gpt2\nper_device_train_batch_size: {i + 1}\n" for i in range(12)),
        ),
    ]
    return tuple(out)


# Values that break parsers and arithmetic when they stand where a number, a name or a list belongs.
ODD_VALUES = [
    "0",
    "-1",
    "-0",
    "1e400",
    "-1e400",
    "1e-400",
    "99999999999999999999999999999999",
    "0x" + "f" * 64,
    "1_000_000_000",
    "1000000000",
    ".nan",
    ".inf",
    "-.inf",
    "NaN",
    "Infinity",
    "nan",
    "inf",
    "1:2:3",
    "0b1010",
    "017",
    "+5",
    "2.5",
    "~",
    "null",
    "true",
    "no",
    "on",
    "auto",
    "''",
    '""',
    "[]",
    "{}",
    "[1, [2, [3]]]",
    "{a: {b: {c: 1}}}",
    "!!python/object/apply:os.system ['touch /tmp/vramlens-fuzz-marker']",
    "!!binary aGVsbG8=",
    "!!set {a, b}",
    "!!timestamp 2001-12-14",
    "!custom x",
    "&anchor 4",
    "*anchor",
    "*missing",
    "<<: *anchor",
    "|\n  block",
    ">-\n  fold",
    "'unterminated",
    '"unterminated',
    "${HOME}",
    "$(touch /tmp/vramlens-fuzz-marker)",
    "`touch /tmp/vramlens-fuzz-marker`",
    "../../etc/passwd",
    "/etc/passwd",
    "~/.ssh/id_rsa",
    "http://example.invalid/x.json",
    "meta-llama/Llama-3.1-405B",
    "A100-40GB",
    "8xH100",
    "paged_adamw_8bit",
    "adamw_torch",
    "lora",
    "qlora",
    "eager",
    "flash_attention_2",
    "\u0000",
    "\ufeff",
    "\u2028",
    "\udc80",
    "\U0001f600" * 3,
    "é" * 10,
    "\t",
    "\r\n",
    "#",
    ":",
    "- ",
    "---",
    "...",
    "__import__('os').system('x')",
    "lambda: 1",
    "**kwargs",
    "f'{x}'",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "\\",
    '"""',
]
PUNCTUATION = list(":-[]{},#&*!|>'\"%@`\\\n\t =()$;<")


def _apply(text: str, kind: str, where: float, payload: str, count: int) -> str:
    n = len(text)
    pos = min(int(where * (n + 1)), n)
    if kind == "truncate":
        return text[:pos]
    if kind == "delete":
        return text[:pos] + text[pos + count :]
    if kind == "insert":
        return text[:pos] + payload + text[pos:]
    if kind == "repeat":
        # a stretch of text repeated many times: long words, long lines, many keys (backtracking regexes)
        piece = text[pos : pos + count * 3] or payload
        return text[:pos] + piece * (50 * count) + text[pos:]
    if kind == "replace_token":
        # replace the word (or number) at pos with payload
        a = pos
        while a > 0 and (text[a - 1].isalnum() or text[a - 1] in "._-/"):
            a -= 1
        b = pos
        while b < n and (text[b].isalnum() or text[b] in "._-/"):
            b += 1
        return text[:a] + payload + text[b:]
    lines = text.split("\n")
    i = min(int(where * len(lines)), len(lines) - 1)
    if kind == "duplicate_line":
        lines[i:i] = [lines[i]] * count
    elif kind == "delete_line":
        del lines[i : i + count]
    elif kind == "indent":
        lines[i] = " " * count + lines[i]
    elif kind == "dedent":
        lines[i] = lines[i].lstrip()
    elif kind == "tabs":
        lines[i] = lines[i].replace("  ", "\t")
    elif kind == "swap_lines":
        j = min(i + count, len(lines) - 1)
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "nest":
        opening, closing = ("[", "]") if count % 2 else ("{a: ", "}")
        depth = 1 + count * 37
        lines[i] = lines[i] + " " + opening * depth + "1" + closing * depth
    elif kind == "huge_value":
        lines[i] = lines[i] + " " + "9" * (10 + count * 100)
    return "\n".join(lines)


KINDS = [
    "truncate",
    "delete",
    "insert",
    "insert",
    "replace_token",
    "replace_token",
    "replace_token",
    "duplicate_line",
    "delete_line",
    "indent",
    "dedent",
    "tabs",
    "swap_lines",
    "nest",
    "huge_value",
    "repeat",
]

payloads = st.one_of(
    st.sampled_from(ODD_VALUES),
    st.sampled_from(PUNCTUATION),
    st.text(max_size=8),
    st.sampled_from(ODD_VALUES).map(lambda v: "\n" + v + ": " + v),
)
mutation = st.tuples(st.sampled_from(KINDS), st.floats(0, 1), payloads, st.integers(1, 12))


def mutate(text: str, mutations) -> str:
    for kind, where, payload, count in mutations:
        text = _apply(text, kind, where, payload, count)
    return text


@st.composite
def documents(draw, max_mutations: int = 4) -> tuple[str, str]:
    """(file name, text): a real config with 0..max_mutations mutations."""
    seed = draw(st.sampled_from(seeds()))
    muts = draw(st.lists(mutation, max_size=max_mutations))
    return seed.name, mutate(seed.text, muts)


def edit_script(text: str, mutations) -> list[str]:
    """The successive texts of a document as the mutations are typed one by one (for didChange)."""
    out = []
    for m in mutations:
        text = _apply(text, *m)
        out.append(text)
    return out


# --- generated routes: YAML values on a command line, JSON arguments, files of many documents -----------------------


def alias_chain(levels: int, name: str = "a", leaf: str = "[q_proj, k_proj]") -> str:
    """`[&a0 leaf, &a1 [*a0, *a0], …]`: each anchor doubles the one before (2^levels values when expanded)."""
    items = [f"&{name}0 {leaf}"] + [f"&{name}{i} [*{name}{i - 1}, *{name}{i - 1}]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


def nested(depth: int, brackets: tuple[str, str]) -> str:
    return brackets[0] * depth + "1" + brackets[1] * depth


# Values as a command line gives them to a YAML or JSON reader: odd scalars, alias chains short and explosive (other
# anchor names, other leaves), nestings from a few levels to thousands (YAML and JSON brackets), plain lists.
yaml_values = st.one_of(
    st.sampled_from(ODD_VALUES),
    st.builds(
        alias_chain,
        st.integers(1, 45),
        st.sampled_from(["a", "x9", "long_anchor-name"]),
        st.sampled_from(["[q_proj, k_proj]", "x", "{a: 1}", '"s"']),
    ),
    st.builds(nested, st.integers(1, 3_000), st.sampled_from([("[", "]"), ('{"a": ', "}"), ("{a: ", "}")])),
    st.lists(st.sampled_from(["q_proj", "v_proj", "1", "null", "&t q", "*t", "[a]", "{b: 2}", "'x'"]), max_size=6).map(
        lambda items: "[" + ", ".join(items) + "]"
    ),
)
_OVERRIDE_LAUNCHES = [
    (
        "llamafactory-cli train cfg.yaml",
        [
            "lora_target",
            "deepspeed",
            "per_device_train_batch_size",
            "additional_target",
            "model_name_or_path",
            "quantization_bit",
        ],
    ),
    (
        "tune run lora_finetune_single_device --config llama3_1/8B_lora_single_device",
        ["model.lora_attn_modules", "batch_size", "optimizer", "dataset", "~model.apply_lora_to_mlp"],
    ),
]
_JSON_FLAGS = ["--fsdp_config", "--deepspeed", "--model_init_kwargs", "--gradient_checkpointing_kwargs"]


def _quoted(value: str, quote: str) -> str:
    if quote == "\\":  # unquoted, the shell's special characters escaped
        return "".join("\\" + c if c in " &;|<>()'\"$`\\*?" else c for c in value)
    return quote + value + quote


@st.composite
def override_commands(draw) -> tuple[str, str]:
    """(file name, script): a LLaMA-Factory or torchtune launch with `key=value` overrides, or a transformers launch
    with JSON arguments, each value drawn from `yaml_values` and quoted or escaped as a shell user would."""
    quote = st.sampled_from(["'", '"', "\\"])
    if draw(st.booleans()):
        launch, keys = draw(st.sampled_from(_OVERRIDE_LAUNCHES))
        pairs = draw(st.lists(st.tuples(st.sampled_from(keys), yaml_values, quote), min_size=1, max_size=4))
        words = [f"{key}={_quoted(value, q)}" for key, value, q in pairs]
    else:
        launch = "torchrun --nproc_per_node 8 train.py --model_name_or_path gpt2 --per_device_train_batch_size 2"
        pairs = draw(st.lists(st.tuples(st.sampled_from(_JSON_FLAGS), yaml_values, quote), min_size=1, max_size=3))
        words = [f"{flag} {_quoted(value, q)}" for flag, value, q in pairs]
    return "train.sh", launch + " " + " ".join(words) + "\n"


@functools.cache
def _small_yaml_seeds() -> tuple[Seed, ...]:
    return tuple(s for s in seeds() if s.name.endswith((".yaml", ".yml")) and len(s.text) < 4_000)


@st.composite
def multi_documents(draw, max_documents: int = 40) -> tuple[str, str]:
    """(file name, text): a YAML stream of 2..max_documents real configs between `---` markers (with a comment or a
    `...` end at times), sometimes past the number of documents vramlens analyses, then 0..2 mutations."""
    docs = draw(st.lists(st.sampled_from(_small_yaml_seeds()), min_size=2, max_size=max_documents))
    marker = draw(st.sampled_from(["---\n", "--- # run\n", "...\n---\n", "---\n# vramlens: gpu=H100-80GB\n"]))
    text = "".join(marker + d.text.rstrip("\n") + "\n" for d in docs)
    return "runs.yaml", mutate(text, draw(st.lists(mutation, max_size=2)))
