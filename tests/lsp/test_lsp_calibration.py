"""The editor names a local calibration where it applies one, as the command line does: the estimate carries the
record (factor, source, date, key) and the hover's headline shows it; a record that is not an exact trace or a probe
scales nothing, in the editor either."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from lsp_editor import Editor
from lsprotocol import types
from vramlens import __version__, calibration
from vramlens.estimate import REVISION
from vramlens.formats import parse_file
from vramlens.resolve import resolve
from vramlens.settings import Settings

IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")


def _config(folder: Path, hidden: int) -> Path:
    """A config of a local model no other test uses (its own architecture: its own calibration records)."""
    model = folder / f"model-{hidden}"
    model.mkdir(parents=True)
    (model / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": hidden,
                "num_hidden_layers": 3,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "intermediate_size": 4 * hidden,
                "vocab_size": 3001,
                "torch_dtype": "bfloat16",
            }
        )
    )
    cfg = folder / f"train-{hidden}.yaml"
    cfg.write_text(f"model_name_or_path: {model}\nper_device_train_batch_size: 2\nmax_seq_length: 256\nbf16: true\n")
    return cfg


def _record(cfg: Path, *, source: str, ratio: float, exact: bool | None) -> None:
    """Append a record for `cfg`'s plan to the calibration file the server reads (the test session's own)."""
    rp = resolve(
        parse_file(cfg, workspace=cfg.parent).plan, Settings(workspace=cfg.parent, any_model_folder=True)
    ).resolved
    rec = {
        "arch": rp.arch.id,
        "arch_hash": calibration.arch_hash(rp),
        "settings_hash": calibration.settings_hash(rp),
        "settings": calibration.features(rp),
        "source": source,
        "estimated_allocated": 1000,
        "measured_allocated": int(1000 * ratio),
        "gpu": None,
        "time": "2025-03-01T10:00:00+00:00",
        "vramlens": __version__,
        "estimator": REVISION,
    }
    if exact is not None:
        rec["exact"] = exact
    path = Path(os.environ["VRAMLENS_CALIBRATION"])
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec) + "\n")


async def _hover(editor: Editor, cfg: Path) -> str:
    uri = editor.open(cfg)
    await editor.estimate(uri)
    pos = editor.position_of(uri, "model_name_or_path")
    hover = await editor.hover(uri, pos.line, pos.character)
    assert hover is not None
    value = hover.contents.value if isinstance(hover.contents, types.MarkupContent) else str(hover.contents)
    return re.sub(r"\\(.)", r"\1", value)


@IN_MODULE_LOOP
@pytest.mark.parametrize("source, ratio, said", [("trace", 1.2, "an exact trace"), ("probe", 0.85, "a probe")])
async def test_the_hover_headline_names_the_calibration_it_applies(editor: Editor, tmp_path, source, ratio, said):
    cfg = _config(tmp_path, 200 if source == "trace" else 208)
    _record(cfg, source=source, ratio=ratio, exact=True if source == "trace" else None)
    text = await _hover(editor, cfg)
    head = text.split("| component")[0]  # the headline, above the budget table
    assert f"calibrated ×{ratio:.3f} by {said} of 2025-03-01" in head, text


@IN_MODULE_LOOP
async def test_an_inexact_trace_record_scales_nothing_in_the_editor(editor: Editor, tmp_path):
    cfg = _config(tmp_path, 216)
    _record(cfg, source="trace", ratio=1.45, exact=False)
    text = await _hover(editor, cfg)
    assert "calibrated" not in text, text
