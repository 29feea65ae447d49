"""The language server's features end to end, as VS Code and as Neovim would drive it."""

from __future__ import annotations

import asyncio
import importlib.util
import re
from pathlib import Path

import pytest
from lsp_editor import EXAMPLES, GIB_TOLERANCE, Editor, edits_of
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="module")

OOM_EXAMPLE = EXAMPLES / "llama3-8b-full-adamw-a100-40gb.yaml"
PEAK = re.compile(r"peak (\d+(?:\.\d+)?) GiB")


def _peak_in(title: str) -> float:
    m = PEAK.search(title)
    assert m, f"fix title names no peak: {title!r}"
    return float(m.group(1))


async def test_oom_example_is_an_error_with_the_breakdown(editor: Editor):
    uri = editor.open(OOM_EXAMPLE)
    diagnostics = await editor.diagnostics(uri)
    oom = [d for d in diagnostics if d.code == "VL001"]
    assert len(oom) == 1, [d.code for d in diagnostics]
    assert oom[0].severity == types.DiagnosticSeverity.Error
    assert "A100-40GB" in oom[0].message
    related = oom[0].related_information or []
    assert related and all("GiB" in r.message for r in related)  # the breakdown
    assert all(r.location.uri == uri for r in related)
    est = await editor.estimate(uri)
    assert est["gpu"]["name"] == "A100-40GB" and not est["fits"]
    assert f"{est['peak']['device_gib']:.1f}" in oom[0].message


async def test_make_it_fit_produces_a_config_that_fits(editor: Editor):
    uri = editor.open(OOM_EXAMPLE)
    diagnostics = await editor.diagnostics(uri)
    actions = await editor.code_actions(uri, diagnostics, only=["source"])
    # its "make it fit" trains LoRA instead of the full model: an unsafe fix, so not a fix-all action
    make_it_fit = [a for a in actions if a.kind in ("source.fixAll.vramlens", "source.vramlens.makeItFit")]
    assert len(make_it_fit) == 1, [a.title for a in actions]
    action = make_it_fit[0]
    assert action.edit is not None, action.disabled
    promised = _peak_in(action.title)
    editor.apply(action.edit)
    after = await editor.diagnostics(uri)
    assert "VL001" not in {d.code for d in after}
    est = await editor.estimate(uri)
    assert est["fits"]
    assert abs(est["peak"]["device_gib"] - promised) <= GIB_TOLERANCE, (action.title, est["peak"])


FIXTURES = EXAMPLES.parent / "tests" / "fixtures"
FIX_DOCUMENTS = [
    OOM_EXAMPLE,
    EXAMPLES / "llama3-8b-qlora-a10g.yaml",
    EXAMPLES / "launch_full_ft.sh",
    EXAMPLES / "sft_lora.py",
    EXAMPLES / "mistral-7b-lora-zero2.yaml",
    EXAMPLES / "qwen2.5-7b-lora-torchtune.yaml",
    FIXTURES / "python" / "hf_trainer_full.py",
    FIXTURES / "shell" / "torchrun_hf.sh",
    FIXTURES / "shell" / "axolotl_train.sh",
]


@pytest.mark.parametrize("path", [p for p in FIX_DOCUMENTS if p.exists()], ids=lambda p: p.name)
async def test_every_offered_fix_does_what_its_title_says(editor: Editor, path: Path):
    """Apply each quick fix to a fresh copy of the document: the result re-parses and its estimate is
    the peak the fix's title promised."""
    uri = editor.open(path)
    diagnostics = await editor.diagnostics(uri)
    actions = await editor.code_actions(uri, diagnostics)
    original = editor.texts[uri]
    enabled = [a for a in actions if a.edit is not None]
    for action in enabled:
        promised = _peak_in(action.title) if PEAK.search(action.title) else None
        editor.replace_all(uri, original)
        await editor.diagnostics(uri)
        editor.apply(action.edit)
        after = await editor.diagnostics(uri)
        assert not any(d.code == "VL016" for d in after), (action.title, [d.message for d in after])
        if promised is not None:
            est = await editor.estimate(uri)
            assert abs(est["peak"]["device_gib"] - promised) <= GIB_TOLERANCE, (action.title, est["peak"])


async def test_quick_fix_edits_use_the_clients_edit_shape(editor: Editor):
    uri = editor.open(OOM_EXAMPLE)
    diagnostics = await editor.diagnostics(uri)
    actions = [a for a in await editor.code_actions(uri, diagnostics) if a.edit is not None]
    assert actions
    supports = editor.client.capabilities.workspace.workspace_edit.document_changes
    for action in actions:
        assert action.kind == types.CodeActionKind.QuickFix or action.kind.startswith("source")
        if supports:
            assert action.edit.document_changes and not action.edit.changes
        else:
            assert action.edit.changes and not action.edit.document_changes
        assert uri in edits_of(action.edit)


async def test_hover_on_micro_batch_tells_cost_and_limit(editor: Editor):
    uri = editor.open(OOM_EXAMPLE)
    await editor.diagnostics(uri)
    hover = await editor.hover(uri, *_pos(editor.position_of(uri, "per_device_train_batch_size", 3)))
    assert hover is not None
    text = hover.contents.value
    assert "per_device_train_batch_size" in text and "each +1" in text
    assert "A100-40GB" in text and "GiB" in text


async def test_hover_on_optimizer_compares_8bit(editor: Editor):
    uri = editor.open(OOM_EXAMPLE)
    await editor.diagnostics(uri)
    hover = await editor.hover(uri, *_pos(editor.position_of(uri, "optim:", 1)))
    assert hover is not None
    assert "adamw_8bit" in hover.contents.value


async def test_hover_on_model_shows_the_budget(editor: Editor):
    uri = editor.open(OOM_EXAMPLE)
    est = await editor.estimate(uri)
    hover = await editor.hover(uri, *_pos(editor.position_of(uri, "meta-llama/Meta-Llama-3-8B", 4)))
    assert hover is not None
    text = hover.contents.value
    assert "| component | GiB |" in text and "█" in text
    assert f"{est['peak']['device_gib']:.1f}" in text
    assert "peak phase" in text


async def test_hover_outside_settings_is_empty(editor: Editor):
    uri = editor.open(OOM_EXAMPLE)
    await editor.diagnostics(uri)
    assert await editor.hover(uri, 0, 2) is None  # the leading comment


async def test_code_lens_and_inlay_hints_show_the_peak(editor: Editor):
    uri = editor.open(OOM_EXAMPLE)
    est = await editor.estimate(uri)
    lenses = await editor.client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert len(lenses) == 1
    title = lenses[0].command.title
    assert f"peak {est['peak']['device_gib']:.1f} / " in title and "A100-40GB" in title
    model_line = editor.position_of(uri, "model_name_or_path").line
    assert lenses[0].range.start.line == model_line
    lines = editor.texts[uri].splitlines()
    hints = await editor.client.text_document_inlay_hint_async(
        types.InlayHintParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start=types.Position(0, 0), end=types.Position(len(lines), 0)),
        )
    )
    by_line = {h.position.line: h for h in hints}
    optim_line = editor.position_of(uri, "optim:").line
    assert "optimizer state" in by_line[optim_line].label and "GiB" in by_line[optim_line].label
    assert by_line[optim_line].position.character == len(lines[optim_line])


async def test_positions_follow_the_negotiated_encoding(editor: Editor):
    """Non-ASCII before a memory setting on the same line: ranges count the client's code units."""
    text = (
        "# vramlens: gpu=A100-40GB\nmodel_name_or_path: meta-llama/Meta-Llama-3-8B\n"
        "per_device_train_batch_size: 4  # 😀 größer\noptim: adamw_torch\nbf16: true\n"
    )
    uri = editor.open(EXAMPLES / "unicode-probe.yaml", text)
    await editor.estimate(uri)
    hints = await editor.client.text_document_inlay_hint_async(
        types.InlayHintParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start=types.Position(0, 0), end=types.Position(10, 0)),
        )
    )
    line = "per_device_train_batch_size: 4  # 😀 größer"
    hint = next(h for h in hints if h.position.line == 2)
    expected = {"utf-8": len(line.encode("utf-8")), "utf-32": len(line)}.get(
        editor.encoding, len(line.encode("utf-16-le")) // 2
    )
    assert hint.position.character == expected


async def test_diagnostics_follow_edits_and_close(editor: Editor):
    uri = editor.open(OOM_EXAMPLE)
    assert "VL001" in {d.code for d in await editor.diagnostics(uri)}
    # a typing burst: each edit supersedes the previous one; the last one counts
    for value in ("2", "1", "8", "1"):
        pos = editor.position_of(uri, "per_device_train_batch_size: ", len("per_device_train_batch_size: "))
        end = types.Position(pos.line, pos.character + 1)
        editor.change(uri, [types.TextEdit(range=types.Range(start=pos, end=end), new_text=value)])
    pos = editor.position_of(uri, "gradient_checkpointing: false", len("gradient_checkpointing: "))
    editor.change(
        uri,
        [
            types.TextEdit(
                range=types.Range(start=pos, end=types.Position(pos.line, pos.character + 5)), new_text="true"
            )
        ],
    )
    est = await editor.estimate(uri)
    diagnostics = await editor.diagnostics(uri)
    assert ("VL001" in {d.code for d in diagnostics}) == (not est["fits"])
    if not editor.pulls:
        versions = [p.version for p in editor.client.published if p.uri == uri and p.version is not None]
        assert versions == sorted(versions), "diagnostics of an older version arrived after a newer one"
        editor.client.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )
        await editor._until(
            lambda: (
                True if editor.client.diagnostics.get(uri) == () or editor.client.diagnostics.get(uri) == [] else None
            ),
            "cleared diagnostics",
        )


async def test_completion_of_values_and_gpu_names(editor: Editor):
    text = (
        "# vramlens: gpu=A10\nmodel_name_or_path: meta-llama/Meta-Llama-3-8B\noptim: adamw\n"
        "attn_implementation: \nper_device_train_batch_size: 1\n"
    )
    uri = editor.open(EXAMPLES / "completion-probe.yaml", text)
    await editor.diagnostics(uri)

    async def labels(line: int, character: int) -> list[str]:
        result = await editor.client.text_document_completion_async(
            types.CompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line, character)
            )
        )
        items = result.items if isinstance(result, types.CompletionList) else (result or [])
        return [i.label for i in items]

    gpus = await labels(0, len("# vramlens: gpu=A10"))
    assert "A100-40GB" in gpus and "A10G" in gpus
    assert "adamw_torch_fused" in await labels(2, len("optim: adamw"))
    assert "flash_attention_2" in await labels(3, len("attn_implementation: "))
    assert "meta-llama/Meta-Llama-3-8B" in await labels(1, len("model_name_or_path: meta-llama/Meta-L"))


async def test_commands(editor: Editor):
    gpus = await editor.client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="vramlens.listGpus", arguments=[])
    )
    names = {g["name"] for g in gpus}
    assert {"A100-40GB", "A100-80GB", "H100-SXM", "RTX 4090"} <= names
    uri = editor.open(OOM_EXAMPLE)
    await editor.diagnostics(uri)
    if not TRACE:
        with pytest.raises(Exception, match="trace support not installed"):
            await editor.client.workspace_execute_command_async(
                types.ExecuteCommandParams(command="vramlens.runTrace", arguments=[uri])
            )


async def test_bad_input_never_breaks_the_server(editor: Editor):
    uris = []
    for name, text in [
        ("empty.yaml", ""),
        ("tabs.yaml", "model:\n\t- [unclosed\n"),
        ("binary.yaml", "\x00\x01\x02 model: ]]]"),
        ("huge.yaml", "per_device_train_batch_size: 1e400\nmodel_name_or_path: meta-llama/Meta-Llama-3-8B\n"),
        ("alias-bomb.yaml", "a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: [*c, *c]\n"),
        ("unknown-model.yaml", "model_name_or_path: no/such-model\nper_device_train_batch_size: 4\n"),
        ("weird.py", "TrainingArguments(per_device_train_batch_size=lambda: 1, optim=)\n"),
        ("weird.sh", "torchrun --per_device_train_batch_size '\n"),
    ]:
        uri = editor.open(EXAMPLES / name, text)
        uris.append(uri)
        await editor.diagnostics(uri)
        for line in range(3):
            for col in (0, 5, 200):
                await editor.hover(uri, line, col)
        await editor.code_actions(uri, [])
        await editor.client.text_document_completion_async(
            types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(1, 3))
        )
    # requests for documents that were never opened
    ghost = (EXAMPLES / "never-opened.yaml").as_uri()
    assert await editor.hover(ghost, 0, 0) is None
    # still alive and still right
    uri = editor.open(OOM_EXAMPLE)
    assert "VL001" in {d.code for d in await editor.diagnostics(uri)}


def _pos(p: types.Position) -> tuple[int, int]:
    return p.line, p.character


TRACE = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("vramlens.trace.client") is not None


@pytest.mark.slow
@pytest.mark.skipif(not TRACE, reason="exact trace needs torch (vramlens[trace])")
async def test_exact_trace_with_progress_cancel_and_results_in_views(editor: Editor):
    uri = editor.open(EXAMPLES / "sft_lora.py")
    before = await editor.estimate(uri)
    assert before["exact_gib"] is None
    client = editor.client
    run = asyncio.ensure_future(
        client.workspace_execute_command_async(types.ExecuteCommandParams(command="vramlens.runTrace", arguments=[uri]))
    )
    token = await editor._until(lambda: next(iter(client.progress_reports), None), "trace progress")
    client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
    with pytest.raises(Exception, match="cancel"):
        await run
    assert type(client.progress_reports[token][-1]).__name__ == "WorkDoneProgressEnd"

    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="vramlens.runTrace", arguments=[uri])
    )
    exact = result["exact_gib"]
    assert exact > 0 and "exact trace" in result["message"]
    updated = await editor._until(
        lambda: next((e for e in reversed(client.estimates) if e["uri"] == uri and e["exact_gib"] is not None), None),
        "estimate with the exact figure",
    )
    assert updated["exact_gib"] == exact
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert f"exact: {exact:.1f} GiB" in lenses[0].command.title
    hover = await editor.hover(uri, *_pos(editor.position_of(uri, "per_device_train_batch_size", 2)))
    assert f"exact trace: {exact:.1f} GiB" in hover.contents.value


SMALL_CONFIG = "model_name_or_path: gpt2\nper_device_train_batch_size: 1\nmax_seq_length: 128\nbf16: true\n"


@pytest.mark.slow
@pytest.mark.skipif(not TRACE, reason="exact trace needs torch (vramlens[trace])")
async def test_cancel_request_stops_a_running_trace(editor: Editor, tmp_path: Path):
    """$/cancelRequest for the executeCommand request (an editor dropping the request, not the progress
    cancel button): answered as cancelled at once, the trace's progress ends as cancelled, and the next
    trace still runs."""
    uri = editor.open(OOM_EXAMPLE)  # a full 8B fine-tune: seconds of tracing, time enough to cancel
    await editor.estimate(uri)
    client = editor.client
    msg_id = f"cancel-me-{id(tmp_path)}"
    known = set(client.progress_reports)
    run = asyncio.ensure_future(
        client.protocol.send_request_async(
            types.WORKSPACE_EXECUTE_COMMAND,
            types.ExecuteCommandParams(command="vramlens.runTrace", arguments=[uri]),
            msg_id=msg_id,
        )
    )

    def running():  # the worker has the job: it reported progress
        for token, reports in client.progress_reports.items():
            if token not in known and any(isinstance(r, types.WorkDoneProgressReport) for r in reports):
                return token
        return None

    token = await editor._until(running, "progress of the trace")
    client.cancel_request(types.CancelParams(id=msg_id))
    with pytest.raises(Exception, match="cancel"):
        await asyncio.wait_for(run, 30)
    end = await editor._until(
        lambda: next((r for r in client.progress_reports[token] if isinstance(r, types.WorkDoneProgressEnd)), None),
        "progress end",
    )
    assert end.message == "cancelled"

    small = tmp_path / "small.yaml"
    small.write_text(SMALL_CONFIG)
    small_uri = editor.open(small)
    await editor.estimate(small_uri)
    result = await asyncio.wait_for(
        client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="vramlens.runTrace", arguments=[small_uri])
        ),
        120,
    )
    assert result["exact_gib"] > 0


async def test_a_version_without_an_estimate_says_so(editor: Editor):
    """The status item shows the figure of the document's last notification: a version that has no
    estimate (no longer parses, not a training config) sends one without figures, with the reason."""
    uri = editor.open(OOM_EXAMPLE)
    assert (await editor.estimate(uri))["fits"] is False
    editor.replace_all(uri, editor.texts[uri] + "\nper_device_train_batch_size: [unclosed\n")
    broken = await editor.estimate_notification(uri)
    assert "peak" not in broken and "gpu" not in broken
    assert broken["version"] == editor.versions[uri] and broken["reason"]
    editor.replace_all(uri, OOM_EXAMPLE.read_text())
    assert (await editor.estimate(uri))["fits"] is False  # back, with its figure

    other = editor.open(EXAMPLES / "compose.yaml", "services:\n  web:\n    image: nginx\n")
    assert (await editor.estimate_notification(other))["reason"] == "not a training config"


async def test_unsaved_buffers_are_analysed_by_language(editor: Editor):
    """An untitled buffer has no file name: its language id decides how it is read."""
    text = (EXAMPLES / "sft_lora.py").read_text()
    uri = "untitled:Untitled-7"
    editor.texts[uri], editor.versions[uri] = text, 1
    editor._last_version[uri] = 1
    editor.client.text_document_did_open(
        types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
    )
    est = await editor.estimate(uri)
    assert est["gpu"]["name"] == "T4" and est["peak"]["device_gib"] > 1


HOSTILE_VALUE = "x` ![tracker](https://example.invalid/t.png) [click](https://example.invalid/) <img src=y> `"


@pytest.mark.parametrize("key", ["attn_implementation", "optim", "model_name_or_path"])
async def test_config_values_in_a_hover_stay_text(editor: Editor, key: str):
    """A backtick in a value must not end the hover's code span: no image, link or HTML from the config
    renders (checked with a CommonMark renderer), and the value is still shown."""
    markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py (a dev dependency) renders the hover")
    text = re.sub(rf"^{key}: .*$", f'{key}: "{HOSTILE_VALUE}"', OOM_EXAMPLE.read_text(), flags=re.M)
    uri = editor.open(EXAMPLES / f"hostile-hover-{key}.yaml", text)
    await editor.diagnostics(uri)
    hover = await editor.hover(uri, *_pos(editor.position_of(uri, f"{key}:", 1)))
    assert hover is not None
    html = markdown_it.MarkdownIt("commonmark").render(hover.contents.value)
    assert "<img" not in html and "<a " not in html, hover.contents.value
    assert "tracker" in html
