"""One answer everywhere a user looks: for the same file, the CLI's text and JSON, the hover, the inlay hints and
the diagnostics name each memory component the same way and show the same figure for it; the framework defaults
the estimate applied are listed in the CLI text with their values, as the hover lists them; the bf16 note on a GPU
without bf16 reads the same in the CLI and the hover.

The files: a QLoRA Mistral-7B (TRL, batch 16 × 4096, bf16) judged on a T4, and a full bf16 Llama-3-8B run."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from lsp_editor import FIXTURES, Editor
from lsprotocol import types
from vramlens.estimate.result import COMPONENT_LABELS

IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")

QLORA = FIXTURES / "views" / "qlora_mistral_t4.yaml"
FULL = FIXTURES / "views" / "full_bf16_llama3.yaml"
LABEL_TO_KEY = {label: key for key, label in COMPONENT_LABELS.items()}
# "activations 34.5 GiB", "adapter weights 26 MiB", "logits and loss: 7.8 GiB"
FIGURE = re.compile(r"(?P<label>[a-zA-Z][a-zA-Z ()−-]*?):? (?P<n>\d+(?:\.\d+)?) (?P<unit>GiB|MiB)")


def cli(path, fmt: str = "text") -> str:
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "estimate", str(path), "--format", fmt],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode in (0, 1), out.stderr
    return out.stdout


def component_figures(text: str) -> list[tuple[str, float]]:
    """(component key, GiB) for every figure in a text that is named by a component label."""
    found = []
    for part in re.split(r" · |; |, ", text):
        m = FIGURE.search(part)
        if m and m.group("label").strip() in LABEL_TO_KEY:
            gib = float(m.group("n")) / (1024 if m.group("unit") == "MiB" else 1)
            found.append((LABEL_TO_KEY[m.group("label").strip()], gib))
    return found


def cli_rows(text: str) -> dict[str, float]:
    """The breakdown rows of `vramlens estimate` text: component key → GiB."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"  (\S.*?)\s{2,}(\d+\.\d+) GiB", line)
        if m and m.group(1) in LABEL_TO_KEY:
            rows[LABEL_TO_KEY[m.group(1)]] = float(m.group(2))
    return rows


def assert_same(key: str, shown: float, reference: float, where: str) -> None:
    tolerance = 0.051 if shown >= 0.1 else 0.5 / 1024 + 0.005  # one decimal in GiB, or whole MiB
    assert abs(shown - reference) <= tolerance, f"{where}: {COMPONENT_LABELS[key]} {shown} vs JSON {reference}"


async def inlay_labels(editor: Editor, uri: str) -> dict[int, str]:
    lines = editor.texts[uri].splitlines()
    hints = await editor.client.text_document_inlay_hint_async(
        types.InlayHintParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start=types.Position(0, 0), end=types.Position(len(lines), 0)),
        )
    )
    return {h.position.line: h.label if isinstance(h.label, str) else "".join(p.value for p in h.label) for h in hints}


async def hover_text(editor: Editor, uri: str, needle: str) -> str:
    pos = editor.position_of(uri, needle)
    hover = await editor.hover(uri, pos.line, pos.character)
    assert hover is not None, needle
    return hover.contents.value if isinstance(hover.contents, types.MarkupContent) else str(hover.contents)


def unescape(markdown: str) -> str:
    return re.sub(r"\\(.)", r"\1", markdown).replace("`", "")


@IN_MODULE_LOOP
@pytest.mark.parametrize("path", [QLORA, FULL], ids=["qlora-mistral-7b-t4", "full-bf16-llama3-8b"])
async def test_every_view_shows_the_same_figures(editor: Editor, path):
    data = json.loads(cli(path, "json"))
    components = data["components_gib"]
    text = cli(path)
    rows = cli_rows(text)
    assert rows, text
    for key, gib in rows.items():
        assert gib == components[key], (key, gib, components[key])

    uri = editor.open(path)
    est = await editor.estimate(uri)
    assert est["peak"]["device_gib"] == data["peak"]["device_gib"]

    labels = await inlay_labels(editor, uri)
    batch_line = editor.position_of(uri, "per_device_train_batch_size").line
    # the batch line names what the micro-batch scales, each apart; the chunked loss of the QLoRA run holds no logits
    # at its peak (the recompute of a checkpointed block), so that line shows activations alone
    per_batch = [k for k in ("activations", "logits") if components[k] > 0]
    assert [k for k, _ in component_figures(labels[batch_line])] == per_batch, labels[batch_line]
    seen = 0
    for line, label in labels.items():
        parts = label.split(" · ")
        assert len(parts) == len(set(parts)), f"a label repeated on line {line}: {label!r}"
        for key, gib in component_figures(label):
            assert_same(key, gib, components[key], f"inlay hint on line {line} ({label!r})")
            seen += 1
    assert seen >= 3, labels

    batch_hover = unescape(await hover_text(editor, uri, "per_device_train_batch_size"))
    figures = dict(component_figures(batch_hover.split("\n")[2]))
    assert set(figures) == set(per_batch), batch_hover
    for key, gib in figures.items():
        assert_same(key, gib, components[key], "hover on the batch line")

    oom = [d for d in await editor.diagnostics(uri) if d.code == "VL001"]
    assert len(oom) == 1
    checked = 0
    for info in [oom[0].message] + [r.message for r in oom[0].related_information or []]:
        for key, gib in component_figures(info):
            assert_same(key, gib, components[key], f"diagnostic {info!r}")
            checked += 1
    assert checked >= 2, oom[0]


@IN_MODULE_LOOP
async def test_the_quantized_line_names_weights_and_constants_once(editor: Editor):
    uri = editor.open(QLORA)
    await editor.estimate(uri)
    labels = await inlay_labels(editor, uri)
    line = editor.position_of(uri, "load_in_4bit").line
    assert [k for k, _ in component_figures(labels[line])] == ["weights", "quant_constants"], labels[line]


def test_cli_lists_the_defaults_it_applied_with_their_values():
    text = cli(QLORA)
    section = text[text.index("defaults of TRL") : text.index("  assumptions:")]
    for line in (
        "gradient checkpointing: true",
        "loss implementation: chunked",
        "weight dtype: fp32",
        "LoRA dropout: 0.05",
    ):
        assert f"    - {line}\n" in section, section
    sources = json.loads(cli(QLORA, "json"))["sources"]
    assert sources["grad_checkpointing"] == {
        "value": True,
        "from": "default of TRL 1.16.0 (_BaseConfig.gradient_checkpointing)",
    }
    assert sources["lora_dropout"]["value"] == 0.05 and sources["loss_impl"]["value"] == "chunked"
    assert sources["micro_batch"]["value"] == 16 and "qlora_mistral_t4.yaml:8" in sources["micro_batch"]["from"]


@IN_MODULE_LOOP
async def test_hover_lists_the_same_defaults_and_the_same_bf16_note(editor: Editor):
    text = cli(QLORA)
    uri = editor.open(QLORA)
    await editor.estimate(uri)
    budget = unescape(await hover_text(editor, uri, "mistralai"))
    for title, value in (
        ("gradient checkpointing", "true"),
        ("loss implementation", "chunked"),
        ("weight dtype", "fp32"),
        ("LoRA dropout", "0.05"),
    ):
        assert f"    - {title}: {value}\n" in text
        assert f"{title} {value}" in budget, budget
    note = next(line.strip()[2:] for line in text.splitlines() if "has no bf16" in line)
    bf16_hover = unescape(await hover_text(editor, uri, "bf16:"))
    assert note in bf16_hover, (note, bf16_hover)
    assert "compute dtype: bf16 (emulated)" in bf16_hover and "compute dtype: fp16" not in bf16_hover


@IN_MODULE_LOOP
@pytest.mark.parametrize("path", [QLORA, FULL], ids=["qlora-mistral-7b-t4", "full-bf16-llama3-8b"])
async def test_the_budget_hover_shows_the_cli_speed_and_breakdown(editor: Editor, path):
    data = json.loads(cli(path, "json"))
    text = cli(path)
    speed = next(line.split("speed", 1)[1].strip() for line in text.splitlines() if line.startswith("  speed "))
    tokens = float(re.search(r"≈ ([\d,]+) tokens/s per GPU", speed).group(1).replace(",", ""))
    assert abs(tokens - data["throughput"]["tokens_per_s"]) <= 1, (speed, data["throughput"])
    step_s = float(re.search(r"([\d.]+) s per optimizer step", speed).group(1))
    assert abs(step_s - data["throughput"]["step_s"]) <= 0.0051, (speed, data["throughput"])

    uri = editor.open(path)
    await editor.estimate(uri)
    budget = unescape(await hover_text(editor, uri, "model_name_or_path"))
    assert f"speed: {speed}\n" in budget, (speed, budget)
    rows = {}
    for line in budget.splitlines():
        m = re.match(r"\| ([^|*]+?) \| (\d+(?:\.\d+)?) \|", line)
        if m and m.group(1) in LABEL_TO_KEY:
            rows[LABEL_TO_KEY[m.group(1)]] = float(m.group(2))
    # a component under 0.005 GiB (the last block's adapter gradients under checkpointing) shows as 0.00 in both
    assert {k for k, v in rows.items() if v > 0} == {k for k, v in data["components_gib"].items() if v > 0}, (
        rows,
        budget,
    )
    for key, gib in rows.items():
        assert_same(key, gib, data["components_gib"][key], "budget hover")
