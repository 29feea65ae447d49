"""The server's own bookkeeping stays bounded under a stream of edits, and a document too large to read is
reported once and then costs nothing per edit, while other documents keep being served. The real server
runs over stdio (pytest-lsp), with one extra request the test adds in front of it to count pygls'
in-flight handler futures."""

from __future__ import annotations

import sys

import pytest
import pytest_lsp
from lsp_editor import EXAMPLES, make_client, plain, start
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

# `vramlens serve --stdio` plus a request answering how many handler futures pygls keeps
SERVE_COUNTING = """
from vramlens.lsp import create_server
server = create_server()

@server.feature("vramlensTest/requestFutures")
def request_futures(ls, params):
    return {"count": sum(1 for _ in ls.protocol._request_futures)}

server.start_io()
"""
SERVER = ClientServerConfig(server_command=[sys.executable, "-c", SERVE_COUNTING], client_factory=make_client)
EDITS = 300
BIG_CHARS = 50 * 2**20


@pytest_lsp.fixture(config=SERVER)
async def client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


async def _futures(client: LanguageClient) -> int:
    return plain(await client.protocol.send_request_async("vramlensTest/requestFutures", {}))["count"]


@pytest.mark.asyncio
async def test_notifications_leave_no_request_futures_behind(client: LanguageClient):
    """Each didChange used to stay in pygls' `_request_futures` for the life of the server (+1.2-1.7 KB per
    edit); after 300 edits the table holds only what is still running."""
    editor = await start(client, "visual-studio-code")
    uri = editor.open(EXAMPLES / "llama3-8b-qlora-a10g.yaml")
    await editor.diagnostics(uri)
    for i in range(EDITS):
        pos = types.Position(0, 0)
        editor.change(uri, [types.TextEdit(range=types.Range(pos, pos), new_text=f"# edit {i}\n")])
    await editor.diagnostics(uri)
    other = editor.open(EXAMPLES / "mistral-7b-lora-zero2.yaml")
    await editor.diagnostics(other)
    editor.close(other)
    assert await _futures(client) < 10


@pytest.mark.asyncio
async def test_a_50_mb_document_is_reported_once_and_edits_to_it_are_not_analysed(client: LanguageClient):
    editor = await start(client, "visual-studio-code")
    big = (EXAMPLES / "huge.yaml").as_uri()
    text = "model_name_or_path: meta-llama/Meta-Llama-3-8B\n" + "x" * BIG_CHARS + "\n"
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=big, language_id="yaml", version=1, text=text))
    )
    editor.texts[big], editor.versions[big] = "", 1
    diagnostics = await editor.diagnostics(big)
    assert [d.code for d in diagnostics] == ["VL016"], diagnostics
    assert "too large" in diagnostics[0].message and "MB" in diagnostics[0].message
    for version in range(2, 6):  # typing at the top of the huge document
        pos = types.Position(0, version)
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=big, version=version),
                content_changes=[types.TextDocumentContentChangePartial(range=types.Range(pos, pos), text="a")],
            )
        )
    # a hover on the huge document asks for its current analysis: it is the one already reported
    await editor.hover(big, 0, 3)
    small = editor.open(EXAMPLES / "llama3-8b-qlora-a10g.yaml")
    assert await editor.diagnostics(small)
    hover = await editor.hover(small, *_position_of(editor, small, "micro_batch_size"))
    assert hover is not None and "batch" in str(hover.contents).lower()
    published = [p for p in client.published if p.uri == big]
    assert len(published) == 1, [p.version for p in published]
    # a whole-document change that makes it small again brings it back
    editor.versions[big] = 6
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=big, version=6),
            content_changes=[
                types.TextDocumentContentChangeWholeDocument(
                    text="model_name_or_path: meta-llama/Meta-Llama-3-8B\nper_device_train_batch_size: 4\n"
                )
            ],
        )
    )
    diagnostics = await editor.diagnostics(big)
    assert not any("too large" in d.message for d in diagnostics), diagnostics


def _position_of(editor, uri: str, needle: str) -> tuple[int, int]:
    pos = editor.position_of(uri, needle, 2)
    return pos.line, pos.character
