"""YAML and JSON read from other places than a config file, and files of many `---` documents, stay bounded.

Every YAML or JSON value vramlens reads goes through one bounded loader (`formats.yaml_doc.load_value`): a
LLaMA-Factory/torchtune `key=value` override on a command line, a JSON argument (`--fsdp_config '{…}'`), a conda
`environment.yml`. An alias bomb or a nesting of thousands of levels there is not read, a VL015 names the setting
and the bound, and the rest of the file is analysed. A file of many documents has only its first
MAX_YAML_DOCUMENTS analysed (and all of them together at most MAX_DOCUMENTS_CHARS of text); a VL021 at the first
document left out says how many and why.

The bombs run in a child process under a 1 GiB address-space limit, so an unbounded reader fails with
MemoryError or the hang-guard timeout instead of taking the machine; work is asserted by counts, not by time.
"""

from __future__ import annotations

import json
import logging
import re
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fuzzing import hang_guard
from vramlens import analysis, environment
from vramlens.analysis import analyze
from vramlens.formats import hf, parse_document
from vramlens.formats.yaml_doc import (
    MAX_DOCUMENTS_CHARS,
    MAX_YAML_DEPTH,
    MAX_YAML_DOCUMENTS,
    MAX_YAML_NODES,
    YamlError,
    load_value,
    split_documents,
)
from vramlens.settings import Settings

ADDRESS_SPACE = 1 << 30
HANG_GUARD_S = 300  # a generous wall-clock limit for a child process; the work itself is bounded by counts
RSS_BOUND_MIB = 50
LAUNCH = "llamafactory-cli train x.yaml"
HEADER = "model_name_or_path: meta-llama/Meta-Llama-3-8B\nper_device_train_batch_size: 4\nbf16: true\n"


# --- hostile values -----------------------------------------------------------------------------------------------


def alias_chain(levels: int = 40, name: str = "a", leaf: str = "[q_proj,k_proj]", sep: str = ",") -> str:
    """A flow sequence of anchors, each holding two aliases of the one before: 2^levels values when expanded
    (the 709-byte `lora_target='[&a0 [q_proj,k_proj],&a1 [*a0,*a0],…,&a39 [*a38,*a38]]'`)."""
    items = [f"&{name}0 {leaf}"] + [f"&{name}{i} [*{name}{i - 1}{sep}*{name}{i - 1}]" for i in range(1, levels)]
    return "[" + sep.join(items) + "]"


def alias_chain_mapping(levels: int = 40, name: str = "m") -> str:
    """The same doubling written with flow mappings: `{k0: &m0 {x: 1}, k1: &m1 {a: *m0, b: *m0}, …}`."""
    items = [f"k0: &{name}0 {{x: 1}}"] + [
        f"k{i}: &{name}{i} {{a: *{name}{i - 1}, b: *{name}{i - 1}}}" for i in range(1, levels)
    ]
    return "{" + ", ".join(items) + "}"


def deep(depth: int = 60_000, json_text: bool = True) -> str:
    """`{"a": [[[…]]]}` (JSON) or `[[[…]]]` (YAML flow) nested `depth` levels."""
    inner = "[" * depth + "]" * depth
    return '{"a": ' + inner + "}" if json_text else inner


def deep_objects(depth: int = 20_000) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def pip_bomb(levels: int = 40, flow: bool = True, name: str = "p") -> str:
    """A conda environment.yml whose `- pip:` list holds an alias bomb (flow, or block sequences of anchors)."""
    if flow:
        pip = "    - " + alias_chain(levels, name, leaf='["torch==2.3.0"]')
    else:
        lines = [f"    - &{name}0 [torch==2.3.0, transformers==4.44.0]"]
        lines += [f"    - &{name}{i} [*{name}{i - 1}, *{name}{i - 1}]" for i in range(1, levels)]
        pip = "\n".join(lines)
    return "name: train\nchannels: [conda-forge]\ndependencies:\n  - python=3.11\n  - pip:\n" + pip + "\n"


# --- a child process under a memory limit -------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import json, pathlib, resource, sys
    from vramlens.analysis import analyze
    from vramlens.settings import Settings
    cases = json.loads(sys.stdin.read())
    out = []
    for case in cases:
        ws = pathlib.Path(case["workspace"])
        for name, text in case.get("files", {}).items():
            (ws / name).write_text(text)
        analyze("model_name_or_path: gpt2\\n", "warm.yaml", Settings(gpu="A100-80GB"))    # imports, catalogs
        settings = Settings(gpu="A100-80GB", workspace=ws)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        a = analyze(case["text"], str(ws / case["name"]), settings)
        fixes = sum(len(f.fixes) for f in a.findings)     # what a code-action request computes
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        plan = a.plan
        out.append({"growth_mib": (after - before) / 1024, "error": a.error, "fixes": fixes,
                    "documents": len(a.documents), "estimate": a.estimate is not None,
                    "micro_batch": plan.micro_batch.value if plan is not None and plan.micro_batch else None,
                    "targets": plan.lora_targets.value if plan is not None and plan.lora_targets else None,
                    "findings": [[f.rule_id, f.message[:300], f.span.start_line] for f in a.findings]})
    print(json.dumps(out))
""")


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def analyse_in_child(cases: list[dict], tmp_path: Path) -> list[dict]:
    """Analyse each case ({name, text, files}) in its own workspace folder, in one child process."""
    for i, case in enumerate(cases):
        ws = tmp_path / f"ws{i}"
        ws.mkdir()
        case["workspace"] = str(ws)
    out = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        preexec_fn=_limit,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def messages(result: dict, rule: str | None = None) -> list[str]:
    return [m for r, m, _ in result["findings"] if rule is None or r == rule]


def no_internal_error(result: dict) -> None:
    assert not any("internal error" in m for m in messages(result)), result["findings"]
    assert result["error"] is None or "internal error" not in result["error"], result["error"]


# --- the loader itself --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, json_text, needle",
    [
        (alias_chain(), False, f"more than {MAX_YAML_NODES:,} values"),
        (alias_chain(30, "anchor_with_a_long_name", leaf="x", sep=", "), False, "alias bomb"),
        (alias_chain_mapping(), False, "alias bomb"),
        (deep(json_text=False), False, f"nests more than {MAX_YAML_DEPTH} levels"),
        (deep(), True, f"nests more than {MAX_YAML_DEPTH} levels"),
        (deep_objects(), True, f"nests more than {MAX_YAML_DEPTH} levels"),
        ("[" + ",".join(["1"] * (MAX_YAML_NODES + 10)) + "]", False, f"more than {MAX_YAML_NODES:,} values"),
        ("!!python/object/apply:os.system [x]", False, "is not read"),
    ],
)
def test_a_value_over_the_bounds_raises_a_yaml_error_naming_the_bound(text: str, json_text: bool, needle: str):
    with hang_guard("load_value"):
        with pytest.raises(YamlError, match=needle.replace("(", r"\(")):
            load_value(text, json=json_text)


def test_values_within_the_bounds_read_as_the_frameworks_read_them():
    assert load_value("[q_proj, v_proj]") == ["q_proj", "v_proj"]
    assert load_value("[&a q_proj, *a]") == ["q_proj", "q_proj"]
    assert load_value("{lr: 2e-5, n: 0x10, on: no}") == {"lr": "2e-5", "n": 16, True: False}  # YAML 1.1
    assert load_value('{"lr": 2e-5, "n": 16}', json=True) == {"lr": 2e-5, "n": 16}  # JSON numbers
    assert load_value("null") is None and load_value("~") is None
    assert load_value(alias_chain(15)) is not None  # ~2^17 values: under the bound, read


# --- shell overrides (LLaMA-Factory, torchtune) ---------------------------------------------------------------------

OVERRIDE_BOMBS = [
    # (tool command, key, value as written on the command line, what the VL015 names)
    (LAUNCH, "lora_target", f"'{alias_chain()}'", "alias bomb"),  # the 709-byte one
    (LAUNCH, "lora_target", f'"{alias_chain(40, "x9")}"', "alias bomb"),  # double-quoted, other names
    (LAUNCH, "lora_target", re.sub(r"([ &*])", r"\\\1", alias_chain(40, "q")), "alias bomb"),  # unquoted: `\&`, `\ `
    (LAUNCH, "deepspeed", f"'{alias_chain_mapping()}'", "alias bomb"),  # flow mappings
    (LAUNCH, "lora_target", deep(60_000, json_text=False), f"nests more than {MAX_YAML_DEPTH}"),
    (
        "tune run lora_finetune_single_device --config llama3_1/8B_lora_single_device",
        "model.lora_attn_modules",
        "'" + deep(60_000, json_text=False) + "'",
        f"nests more than {MAX_YAML_DEPTH}",
    ),
    (
        "tune run lora_finetune_single_device --config llama3_1/8B_lora_single_device",
        "dataset",
        f"'{alias_chain_mapping(40, 'd')}'",
        "alias bomb",
    ),
]


def test_override_bombs_are_not_read_and_the_rest_of_the_command_is(tmp_path: Path):
    cases = []
    for command, key, value, _ in OVERRIDE_BOMBS:
        batch = "batch_size=2" if command.startswith("tune") else "per_device_train_batch_size=2"
        cases.append({"name": "train.sh", "text": f"{command} {key}={value} {batch}\n"})
    results = analyse_in_child(cases, tmp_path)
    for (command, key, value, needle), result in zip(OVERRIDE_BOMBS, results):
        no_internal_error(result)
        vl015 = [m for m in messages(result, "VL015") if m.startswith(f"`{key}` is not read")]
        assert len(vl015) == 1 and needle in vl015[0], (key, value[:60], result["findings"])
        assert result["micro_batch"] == 2, (key, result)  # the other override is still read
        assert result["growth_mib"] < RSS_BOUND_MIB, result


def test_override_within_the_bounds_is_read_with_its_aliases():
    text = f"{LAUNCH} lora_target='[&t q_proj, *t, v_proj]' per_device_train_batch_size=2\n"
    plan = parse_document(text, "train.sh").plan
    assert plan.lora_targets.value == ["q_proj", "q_proj", "v_proj"]
    assert not [i for i in plan.issues if "is not read" in i.message]


# --- lora targets: names only, never a nested value turned into text -----------------------------------------------


def test_targets_keep_module_names_and_never_stringify_a_nested_value():
    big = load_value(alias_chain(15))  # ~2^17 values: within the bound, ~1 MB as text
    assert hf._targets([big, "v_proj", 7]) == ["v_proj", "7"]
    assert hf._targets([{"a": big}, "q_proj"]) == ["q_proj"]
    llamafactory = (
        "model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: sft\nfinetuning_type: lora\n"
        f"lora_target: [{alias_chain(15)}, v_proj]\n"
    )
    axolotl = (
        "base_model: meta-llama/Meta-Llama-3-8B\nadapter: lora\nmicro_batch_size: 2\nlora_target_modules:\n"
        f"  - {alias_chain(15)}\n  - q_proj\n"
    )
    for text in (llamafactory, axolotl):
        plan = parse_document(text, "cfg.yaml").plan
        assert plan.lora_targets is not None
        assert sum(len(t) for t in plan.lora_targets.value) < 100, [t[:80] for t in plan.lora_targets.value]


# --- JSON arguments (transformers' dict-valued flags) -------------------------------------------------------------

JSON_BOMBS = [
    (
        "train.sh",
        "torchrun --nproc_per_node 8 train.py --model_name_or_path meta-llama/Meta-Llama-3-8B "
        "--per_device_train_batch_size 2 --fsdp full_shard --fsdp_config '{}'\n",
        "fsdp_config",
        deep(),
    ),
    (
        "train.sh",
        "accelerate launch train.py --model_name_or_path meta-llama/Meta-Llama-3-8B "
        "--per_device_train_batch_size 2 --deepspeed '{}'\n",
        "deepspeed",
        deep_objects(10_000),
    ),
    (
        "train.sh",
        "python train.py --model_name_or_path meta-llama/Meta-Llama-3-8B --per_device_train_batch_size 2 "
        "--model_init_kwargs='{}'\n",
        "model_init_kwargs",
        deep(30_000),
    ),
    (
        "train.py",
        "from transformers import TrainingArguments\nargs = TrainingArguments(output_dir='o', "
        "per_device_train_batch_size=2, fsdp='full_shard', fsdp_config='{}')\n",
        "fsdp_config",
        deep(20_000),
    ),
    (
        "accelerate.yaml",
        "distributed_type: FSDP\nnum_processes: 8\nfsdp_config: '{}'\n",
        "fsdp_config",  # a string
        deep(5_000),
    ),
]


def test_deeply_nested_json_arguments_are_a_vl015_not_an_internal_error(tmp_path: Path):
    cases = [{"name": name, "text": template.replace("{}", value)} for name, template, _, value in JSON_BOMBS]
    results = analyse_in_child(cases, tmp_path)
    for (name, _, key, _), result in zip(JSON_BOMBS, results):
        no_internal_error(result)
        vl015 = [m for m in messages(result, "VL015") if m.startswith(f"`{key}` is not read")]
        assert vl015 and f"nests more than {MAX_YAML_DEPTH} levels" in vl015[0], (name, key, result["findings"])
        if name != "accelerate.yaml":
            assert result["micro_batch"] == 2, result  # the rest is still read


def test_a_json_argument_within_the_bounds_is_read():
    text = (
        "torchrun --nproc_per_node 8 train.py --model_name_or_path meta-llama/Meta-Llama-3-8B --fsdp full_shard "
        "--fsdp_config '{\"fsdp_offload_params\": true}'\n"
    )
    plan = parse_document(text, "train.sh").plan
    assert not [i for i in plan.issues if "is not read" in i.message]
    assert plan.offload_params is not None and plan.offload_params.value is True


# --- environment.yml ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flow, name", [(True, "p"), (False, "pins"), (True, "x_y-2")])
def test_environment_yml_alias_bomb_gives_no_pins_and_says_why(flow: bool, name: str, caplog):
    with hang_guard("environment.yml"), caplog.at_level(logging.WARNING, logger="vramlens.environment"):
        assert environment._environment_pins(pip_bomb(40, flow, name)) == {}
    assert any("environment.yml" in r.getMessage() and "alias bomb" in r.getMessage() for r in caplog.records)
    anchored = (
        f"dependencies:\n  - python=3.11\n  - pip: &{name} [torch==2.3.0]\n  - pip: *{name}\n"
        f"  - pip:\n    - transformers==4.44.0\n"
    )
    pins = environment._environment_pins(anchored)  # anchors within the bounds are read
    assert pins["torch"] == "2.3.0" and pins["transformers"] == "4.44.0", pins


def test_every_config_of_a_workspace_with_an_environment_yml_bomb_is_analysed(tmp_path: Path):
    bomb = pip_bomb(40)
    cases = [
        {"name": "cfg.yaml", "text": HEADER, "files": {"environment.yml": bomb}},
        {
            "name": "train.sh",
            "text": f"{LAUNCH} model_name_or_path=meta-llama/Meta-Llama-3-8B\n",
            "files": {"environment.yaml": pip_bomb(40, flow=False)},
        },
    ]
    for result in analyse_in_child(cases, tmp_path):
        no_internal_error(result)
        assert result["estimate"] and result["growth_mib"] < RSS_BOUND_MIB, result


# --- many documents -------------------------------------------------------------------------------------------------


def many_documents(n: int, marker: str = "---", end: str = "") -> str:
    return "".join(
        f"{marker}\nmodel_name_or_path: meta-llama/Meta-Llama-3-8B\nper_device_train_batch_size: {i % 8 + 4}"
        f"\nbf16: true\n{end}"
        for i in range(n)
    )


@pytest.mark.parametrize(
    "text",
    [
        many_documents(40),
        many_documents(40, marker="--- # run"),  # a comment on the marker
        many_documents(40, end="...\n"),  # documents closed with `...`
        "# sweep\n" + many_documents(40, marker="---\n# vramlens: gpu=H100-80GB"),
        "model_name_or_path: gpt2\n" + many_documents(39),  # the first document has no marker
    ],
)
def test_only_the_first_documents_are_analysed_and_a_vl021_says_how_many_are_not(monkeypatch, text: str):
    analysed = 0
    real = analysis._analyze

    def counting(*args, **kwargs):
        nonlocal analysed
        analysed += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(analysis, "_analyze", counting)
    a = analyze(text, "sweep.yaml", Settings(gpu="A100-80GB"))
    assert analysed == len(a.documents) == MAX_YAML_DOCUMENTS
    vl021 = [f for f in a.findings if f.rule_id == "VL021" and "not analysed" in f.message]
    assert len(vl021) == 1, [f.message for f in a.findings if f.rule_id == "VL021"]
    assert vl021[0].message.startswith(f"documents {MAX_YAML_DOCUMENTS + 1}–40 of this file are not analysed")
    assert f"the first {MAX_YAML_DOCUMENTS} documents" in vl021[0].message
    lines = text.split("\n")
    first_skipped = [i for i, line in enumerate(lines) if line.startswith("model_name_or_path")][MAX_YAML_DOCUMENTS]
    assert vl021[0].span.start_line == first_skipped  # on the first document left out
    assert not any(f.span.start_line > first_skipped for f in a.findings if f.rule_id != "VL021")


@pytest.mark.parametrize(
    "filler",
    [
        "".join(f"# note {i}\n" for i in range(60_000)),  # comments: in every view
        "\n" * 500_000,  # line breaks: too
        " \n" * 400_000,
    ],
    ids=["comments", "line-breaks", "blank-lines"],
)
def test_documents_of_a_long_file_are_held_to_the_text_budget(filler: str):
    """Each document is read at its own line numbers, with the file's comments and line breaks: the documents of a
    long file are read no more than MAX_DOCUMENTS_CHARS in all, and the first one always."""
    for n in (3, 6):
        text = "---\n".join(HEADER + filler for _ in range(n))
        docs = split_documents(text)
        assert docs is not None and docs.skipped > 0 and len(docs.views) + docs.skipped == n
        assert len(docs.views) == 1 or sum(len(v) for v in docs.views) <= MAX_DOCUMENTS_CHARS
        assert "MB of text for all of a file's documents" in docs.skipped_message(), docs.skipped_message()
        starts = [i for i, line in enumerate(text.split("\n")) if line.startswith("model_name_or_path")]
        assert docs.skipped_span.start_line == starts[len(docs.views)]


def test_a_file_within_the_budgets_is_analysed_whole():
    a = analyze(many_documents(MAX_YAML_DOCUMENTS), "sweep.yaml", Settings(gpu="A100-80GB"))
    assert len(a.documents) == MAX_YAML_DOCUMENTS
    assert not any("not analysed" in f.message for f in a.findings)


def test_check_fix_on_a_thousand_documents_finishes_and_says_what_it_left_out(tmp_path: Path):
    """`vramlens check --fix` (what the editor's fixAll computes, document by document) over 1,000 documents: the
    first ones are fixed, the rest reported as not analysed (150 documents took 212 s before the budget)."""
    path = tmp_path / "sweep.yaml"
    path.write_text(many_documents(1_000))
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "check", "--offline", "--gpu", "A100-80GB", "--fix", str(path)],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        cwd=tmp_path,
        preexec_fn=_limit,
    )
    assert "internal error" not in out.stdout + out.stderr
    assert f"documents {MAX_YAML_DOCUMENTS + 1}–1,000 of this file are not analysed" in out.stdout, out.stdout[-2000:]
    assert "fixed:" in out.stdout, out.stdout[-2000:]
    fixed = path.read_text()
    assert fixed.count("\n---\n") + 1 == 1_000  # every document is still there


# --- blank lines (each document's view is mostly blank lines) ---------------------------------------------------------


def test_fixes_of_a_config_with_many_blank_lines_are_computed_in_linear_time(tmp_path: Path):
    """The YAML writer looked for comment lines with `^\\s*#`, and `\\s` also matches line breaks: each of n blank
    lines started a scan over the rest of them (30,000 blank lines: 20 s of CPU for the fixes, 1.6 s now; 100,000
    about ten minutes, past the hang guard). The analysis catches what a fix raises, so the guard is the child's."""
    blanks = ["\n", " \n", "    \n", "\r\n"]
    config = HEADER.replace("4", "16") + "{}gradient_checkpointing: false\n"
    cases = [{"name": "cfg.yaml", "text": config.format(blank * 100_000)} for blank in blanks]
    for blank, result in zip(blanks, analyse_in_child(cases, tmp_path)):
        no_internal_error(result)
        assert result["fixes"] > 0 and result["growth_mib"] < RSS_BOUND_MIB, (blank, result)


def test_estimate_says_which_documents_of_a_long_file_it_left_out(tmp_path: Path):
    """`vramlens estimate` prints an estimate per analysed document and one line naming those past the budget."""
    doc = "model_name_or_path: meta-llama/Llama-3.2-1B\nper_device_train_batch_size: 2\nbf16: true\n"
    path = tmp_path / "sweep.yaml"
    for total in (MAX_YAML_DOCUMENTS + 1, MAX_YAML_DOCUMENTS + 7):
        path.write_text("\n---\n".join([doc] * total), encoding="utf-8")
        run = subprocess.run(
            [sys.executable, "-m", "vramlens", "estimate", str(path), "--gpu", "A100-80GB", "--format", "json"],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stderr
        assert len(json.loads(run.stdout)) == MAX_YAML_DOCUMENTS
        first = MAX_YAML_DOCUMENTS + 1
        which = f"document {first} of" if total == first else f"documents {first}–{total} of"
        assert which in run.stderr and "not analysed" in run.stderr, run.stderr
