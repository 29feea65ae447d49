"""`vramlens.listGpus`, the command behind the editors' GPU picker: the catalog, and with a document's URI that
run on every GPU, with the same figures and order as `vramlens gpus PATH --all --format json`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lsp_editor import EXAMPLES, Editor
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="module")

CATALOG_KEYS = {"name", "memory_gib", "usable_gib", "bf16", "vendor"}
FIGURES = (
    "gpu",
    "count",
    "peak_gib",
    "usable_gib",
    "fits",
    "tight",
    "tokens_per_s",
    "run_tokens_per_s",
    "step_s",
    "mfu",
    "bound",
)


async def _list_gpus(editor: Editor, *arguments) -> list[dict]:
    return await editor.client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="vramlens.listGpus", arguments=list(arguments))
    )


def _cli_rows(path: Path) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "gpus", str(path), "--all", "--format", "json"],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["gpus"]


async def test_without_a_document_it_lists_the_catalog(editor: Editor):
    gpus = await _list_gpus(editor)
    names = [g["name"] for g in gpus]
    assert {"A100-40GB", "A100-80GB", "H100-SXM", "RTX 4090", "T4"} <= set(names)
    assert len(names) == len(set(names))  # one entry per GPU, no counts
    assert all(set(g) == CATALOG_KEYS for g in gpus), gpus[0]


@pytest.mark.parametrize("name", ["llama3-8b-full-adamw-a100-40gb.yaml", "mistral-7b-lora-zero2.yaml"])
async def test_with_a_document_it_gives_each_gpu_the_peak_and_speed_of_vramlens_gpus(editor: Editor, name: str):
    path = EXAMPLES / name
    uri = editor.open(path)
    await editor.diagnostics(uri)
    gpus = await _list_gpus(editor, uri)
    expected = _cli_rows(path)
    assert [{k: g[k] for k in FIGURES} for g in gpus] == expected
    # each entry also names its catalog GPU, so a picker can set vramlens.gpu from it
    assert all(g["name"] == g["gpu"] and CATALOG_KEYS <= set(g) for g in gpus)
    fitting = [g for g in gpus if g["fits"]]
    assert fitting and len(fitting) < len(gpus)  # both kinds, fitting ones first, fastest first
    assert gpus[: len(fitting)] == fitting
    speeds = [g["run_tokens_per_s"] for g in fitting]
    assert speeds == sorted(speeds, reverse=True)
    assert all(g["peak_gib"] <= g["usable_gib"] for g in fitting)


async def test_a_sharded_run_is_tried_on_several_counts_and_the_uri_may_come_in_an_object(editor: Editor):
    uri = editor.open(EXAMPLES / "mistral-7b-lora-zero2.yaml")
    gpus = await _list_gpus(editor, {"uri": uri})
    assert {g["count"] for g in gpus if g["gpu"] == "A100-80GB"} == {1, 2, 4, 8}


async def test_a_document_without_an_estimate_gets_the_catalog(editor: Editor):
    uri = editor.open(EXAMPLES / "notes.yaml", "just: some yaml\n")
    await editor.diagnostics(uri)
    assert [g["name"] for g in await _list_gpus(editor, uri)] == [g["name"] for g in await _list_gpus(editor)]
    closed = (EXAMPLES / "not-open.yaml").resolve().as_uri()
    assert all(set(g) == CATALOG_KEYS for g in await _list_gpus(editor, closed))
