"""Every real config in the shared corpus: read without an exception, recognised with its format (or declared
not a training config), and the values read checked against a golden table that was reviewed by eye."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from vramlens.formats import parse_document
from vramlens.plan import IssueKind

GOLDEN = Path(__file__).resolve().parent / "golden" / "corpus_plans.jsonl"
sys.path.insert(0, str(GOLDEN.parent))
from make_golden import record  # noqa: E402

# corpus folder -> the formats its files may be recognised as
EXPECTED = {
    "axolotl": {"axolotl", "axolotl-cloud"},
    "llamafactory": {"llamafactory", "llamafactory-v1"},
    "torchtune": {"torchtune"},
    "trl-recipes": {"trl"},
    "accelerate": {"accelerate", "hf"},  # ms-swift's fsdp2.json is TrainingArguments fsdp keys
    "deepspeed": {"deepspeed"},
    "lightning": {"litgpt"},
    "custom": {"gpt-neox"},
}


def test_every_corpus_file_parses_and_is_recognised_or_declined(corpus):
    seen = {}
    for path in sorted(p for p in corpus.rglob("*") if p.is_file()):
        text = path.read_text(encoding="utf-8", errors="replace")
        result = parse_document(text, str(path))  # must not raise
        folder = path.parent.name
        fmt = result.plan.format if result.plan is not None else None
        if folder in EXPECTED:
            assert fmt in EXPECTED[folder], f"{path.name}: {fmt}"
        seen[path.name] = fmt
    assert len(seen) >= 160
    # measured-memory tables are documents, not configs
    assert seen["unsloth__README_vram_tables.md"] is None or seen["unsloth__README_vram_tables.md"] == "markdown"


def test_corpus_plans_match_the_reviewed_golden_table(corpus):
    golden = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len([g for g in golden if g["format"]]) >= 40
    formats = {g["format"] for g in golden}
    assert {
        "axolotl",
        "llamafactory",
        "llamafactory-v1",
        "torchtune",
        "trl",
        "accelerate",
        "deepspeed",
        "litgpt",
        "gpt-neox",
        "axolotl-cloud",
        "hf",
    } <= formats
    mismatches = []
    for expected in golden:
        got = record(corpus / expected["file"])
        if got != expected:
            diff = {k: (expected.get(k), got.get(k)) for k in set(expected) | set(got) if expected.get(k) != got.get(k)}
            if "settings" in diff:
                e, g = diff.pop("settings")
                diff["settings"] = {
                    c: ((e or {}).get(c), (g or {}).get(c))
                    for c in set(e or {}) | set(g or {})
                    if (e or {}).get(c) != (g or {}).get(c)
                }
            mismatches.append((expected["file"], diff))
    assert not mismatches, "run tests/formats/golden/make_golden.py after an intended change:\n" + "\n".join(
        f"{f}: {d}" for f, d in mismatches[:10]
    )


@pytest.mark.parametrize(
    "text",
    [
        # a GitHub workflow, a docker-compose file, a Kubernetes manifest, a dataset card, an empty file
        (
            "name: ci\non:\n  push:\njobs:\n  test:\n    runs-on: ubuntu-latest\n"
            "    steps:\n      - uses: actions/checkout@v4\n"
        ),
        "services:\n  web:\n    image: nginx\n    ports: ['80:80']\n",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: trainer\nspec:\n  containers:\n    - name: t\n      image: x\n",
        "dataset_info:\n  features:\n    - name: text\n      dtype: string\n  splits:\n    - name: train\n",
        "",
        "- just\n- a\n- list\n",
    ],
)
def test_other_yaml_files_are_not_training_configs(text):
    result = parse_document(text, "/ws/file.yaml")
    assert result.plan is None and not result.issues


def test_a_broken_config_is_reported_not_raised():
    result = parse_document("micro_batch_size: [1\nsequence_len: 2048\n", "/ws/cfg.yaml")
    assert result.plan is None
    assert result.issues[0].kind == IssueKind.UNREADABLE and result.issues[0].span.start_line == 1


def test_unknown_file_types_that_are_not_yaml_are_declined():
    assert parse_document("FROM python:3.11\nRUN pip install x\n", "/ws/Dockerfile").plan is None
    assert parse_document("[tool.x]\na = 1\n", "/ws/pyproject.toml").plan is None
