"""Messages no well-behaved editor sends: broken JSON, wrong parameter types, unknown methods and commands,
requests for documents that are not open, edits with ranges past the end, before the open or after the close.
Every request gets an answer (a result or an error), and the server keeps serving."""

from __future__ import annotations

import json

import pytest
from fuzzing import count, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from lsp_wire import Server, ServerError

CONFIG = "model_name_or_path: meta-llama/Meta-Llama-3-8B\nper_device_train_batch_size: 8\nbf16: true\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    ws = tmp_path_factory.mktemp("ws")
    with Server(workspace=ws, initialization_options={"trusted": False}) as s:
        s.initialize()
        s.ws = ws
        yield s


def answered(s: Server, method: str, params) -> dict:
    """The answer to a request, whatever it is (errors included)."""
    return s.wait(s.send(method, params))


def still_serves(s: Server) -> None:
    uri = (s.ws / "probe.yaml").as_uri()
    mark = len(s.notifications)
    s.open(uri, CONFIG)
    assert s.diagnostics(uri, 1, after=mark)["params"]["diagnostics"]
    assert "result" in answered(
        s, "textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 1, "character": 3}}
    )
    s.close(uri)


def _raw(s: Server, body: bytes) -> None:
    s.write_bytes(b"Content-Length: %d\r\n\r\n" % len(body) + body)


def test_broken_frames_and_unknown_methods(server: Server):
    _raw(server, b"{not json")
    _raw(server, b'{"jsonrpc": "2.0", "id": 999999, "method": "textDocument/hover", "params": "nonsense"}')
    _raw(server, json.dumps({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"x": 1}}).encode())
    assert "error" in answered(server, "vramlens/noSuchMethod", {})
    assert "error" in answered(server, "textDocument/hover", {"textDocument": {"uri": 5}, "position": None})
    for command, args in (
        ("vramlens.noSuchCommand", []),
        ("vramlens.runTrace", []),
        ("vramlens.runTrace", [42]),
        ("vramlens.runProbe", [{"uri": None}]),
        ("vramlens.listGpus", ["extra", 1]),
    ):
        answered(server, "workspace/executeCommand", {"command": command, "arguments": args})
    still_serves(server)


def test_documents_that_are_not_open(server: Server):
    uri = (server.ws / "never-opened.yaml").as_uri()
    for method, extra in (
        ("textDocument/hover", {"position": {"line": 0, "character": 0}}),
        ("textDocument/completion", {"position": {"line": 0, "character": 0}}),
        ("textDocument/codeLens", {}),
        (
            "textDocument/inlayHint",
            {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 9, "character": 0}}},
        ),
        (
            "textDocument/codeAction",
            {
                "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
                "context": {"diagnostics": []},
            },
        ),
    ):
        answer = answered(server, method, {"textDocument": {"uri": uri}, **extra})
        assert "error" not in answer, answer
    server.notify(
        "textDocument/didChange", {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": "x: 1\n"}]}
    )
    server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    still_serves(server)


line = st.integers(-3, 10**9)
char = st.integers(-3, 10**9)
position = st.builds(
    lambda a, b: {"line": a, "character": b}, st.one_of(st.integers(0, 12), line), st.one_of(st.integers(0, 40), char)
)


@fuzz_settings(150)
@given(
    starts=st.lists(st.tuples(position, position, st.text(max_size=20)), min_size=1, max_size=4),
    version=st.one_of(st.integers(2, 5), st.integers(-(2**31), 2**31 - 1)),
)
def test_edits_with_odd_ranges_and_versions(server: Server, starts, version):
    """Ranges past the end, reversed or negative, odd versions: the server applies what it can, answers, and
    the next request still works."""
    uri = (server.ws / "odd.yaml").as_uri()
    server.open(uri, CONFIG)
    changes = [{"range": {"start": a, "end": b}, "text": t} for a, b, t in starts]
    server.notify(
        "textDocument/didChange", {"textDocument": {"uri": uri, "version": version}, "contentChanges": changes}
    )
    for method, extra in (
        ("textDocument/hover", {"position": {"line": 0, "character": 1}}),
        ("textDocument/codeLens", {}),
        ("textDocument/completion", {"position": {"line": 1, "character": 2}}),
    ):
        try:
            answered(server, method, {"textDocument": {"uri": uri}, **extra})
        except ServerError as exc:
            pytest.fail(f"{exc}\n{server.stderr_tail()}")
    server.close(uri)
    assert server.alive
    count("server protocol")
