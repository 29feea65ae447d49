"""The wire and the lifecycle. Frames no editor sends — a `Content-Length` of 10^12, one that is not a number,
one shorter or longer than its body, a body that is not UTF-8 — cost that frame only: the server stays up and
answers every later request (and the broken request itself, with a parse error, when its id can be read).
Requests before `initialize` and after `shutdown` get the errors the LSP specification names; `exit` ends the
process with 0 after `shutdown` and 1 without; a document version the client reuses is analysed again.
The server runs as `vramlens serve --stdio`; the bytes are written to its stdin as they are."""

from __future__ import annotations

import json

import pytest
from fuzzing import count, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from lsp_wire import Server
from vramlens.lsp.framing import Frame, FrameDecoder

CONFIG = "model_name_or_path: meta-llama/Meta-Llama-3-8B\nper_device_train_batch_size: 8\nbf16: true\n"
WITH_UNKNOWN_OPTIMIZER = CONFIG + "optim: adamw_nonsense\n"
PARSE_ERROR, INVALID_REQUEST, SERVER_NOT_INITIALIZED = -32700, -32600, -32002


def body(rid: int | None, method: str, params) -> bytes:
    message = {"jsonrpc": "2.0", "method": method, "params": params}
    if rid is not None:
        message = {"jsonrpc": "2.0", "id": rid, **message}
    return json.dumps(message).encode()


def framed(data: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(data) + data


def hover(s: Server, uri: str) -> dict:
    """The whole answer to a hover (result or error)."""
    return s.wait(s.send("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 1, "character": 3}}))


def codes(diagnostics: dict) -> set[str]:
    return {d.get("code") for d in diagnostics["params"]["diagnostics"]}


@pytest.fixture
def server(tmp_path):
    with Server(workspace=tmp_path, initialization_options={"trusted": False}) as s:
        s.ws = tmp_path
        yield s


def still_serves(s: Server, name: str = "after.yaml") -> None:
    uri = (s.ws / name).as_uri()
    mark = len(s.notifications)
    s.open(uri, CONFIG)
    assert "VL001" in codes(s.diagnostics(uri, 1, after=mark))
    assert "result" in hover(s, uri)
    s.close(uri)


# ---- framing ----------------------------------------------------------------------------------------------


def test_a_content_length_of_10_to_the_12_is_refused_and_the_server_keeps_serving(server: Server):
    server.initialize()
    server.write_bytes(
        b"Content-Length: 1000000000000\r\n\r\n"
        + body(
            777,
            "textDocument/hover",
            {"textDocument": {"uri": "file:///x.yaml"}, "position": {"line": 0, "character": 0}},
        )
    )
    answer = server.wait(777)  # the request's start was enough to answer it
    assert answer["error"]["code"] == PARSE_ERROR and "64 MiB" in answer["error"]["message"]
    still_serves(server)
    assert server.alive and server.rss_mib() < 300


@pytest.mark.parametrize(
    "header",
    [
        b"Content-Length: abc\r\n\r\n",
        b"Content-Length: -5\r\n\r\n",
        b"Content-Length: 12 34\r\n\r\n",
        b"Content-Type: text/plain\r\n\r\n",
        b"Content-Length: 99999999999999999999999\r\n\r\n",
        b"garbage\r\n\r\n",
    ],
)
def test_an_unreadable_header_costs_its_frame_only(server: Server, header: bytes):
    server.initialize()
    server.write_bytes(header + body(None, "textDocument/didClose", {"textDocument": {"uri": "file:///x"}}))
    still_serves(server)


def test_a_content_length_shorter_than_the_body(server: Server):
    server.initialize()
    data = body(
        41, "textDocument/hover", {"textDocument": {"uri": "file:///x.yaml"}, "position": {"line": 0, "character": 0}}
    )
    server.write_bytes(b"Content-Length: 10\r\n\r\n" + data)
    still_serves(server)


def test_a_content_length_longer_than_the_body(server: Server):
    server.initialize()
    data = body(
        42, "textDocument/hover", {"textDocument": {"uri": "file:///x.yaml"}, "position": {"line": 0, "character": 0}}
    )
    server.write_bytes(b"Content-Length: %d\r\n\r\n" % (len(data) + 5000) + data)
    still_serves(server)  # the next frame's header ends the broken one: nothing waits for 5,000 bytes
    assert server.wait(42)["error"]["code"] == PARSE_ERROR


def test_a_body_that_is_not_utf8_is_answered_with_a_parse_error(server: Server):
    server.initialize()
    data = body(
        43,
        "textDocument/hover",
        {"textDocument": {"uri": "file:///x-\udcff.yaml"}, "position": {"line": 0, "character": 0}},
    )
    data = data.replace(b"\\udcff", b"\xff\xfe")
    server.write_bytes(framed(data))
    answer = server.wait(43)
    assert answer["error"]["code"] == PARSE_ERROR and "not UTF-8" in answer["error"]["message"]
    text = CONFIG.encode() + b"# caf\xe9\n"  # Latin-1 text in a didOpen: dropped, the server goes on
    server.write_bytes(
        framed(
            body(
                None,
                "textDocument/didOpen",
                {
                    "textDocument": {
                        "uri": (server.ws / "latin1.yaml").as_uri(),
                        "languageId": "yaml",
                        "version": 1,
                        "text": "@@",
                    }
                },
            ).replace(b"@@", text.replace(b"\n", b"\\n"))
        )
    )
    still_serves(server)


def test_header_names_in_any_case_and_line_breaks_between_frames(server: Server):
    server.initialize()
    uri = (server.ws / "x.yaml").as_uri()
    server.write_bytes(
        b"\r\ncontent-length: %d\r\ncontent-type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n"
        % len(
            data := body(
                44, "textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 0}}
            )
        )
        + data
    )
    assert "result" in server.wait(44)


# ---- lifecycle --------------------------------------------------------------------------------------------


def test_requests_before_initialize_get_server_not_initialized(server: Server):
    uri = (server.ws / "early.yaml").as_uri()
    assert hover(server, uri)["error"]["code"] == SERVER_NOT_INITIALIZED
    server.open(uri, CONFIG)  # a notification before initialize is dropped
    server.initialize()
    assert hover(server, uri)["result"] is None  # never opened (opened, it has a hover at this position)
    assert (
        server.wait(server.send("initialize", {"processId": None, "rootUri": None, "capabilities": {}}))["error"][
            "code"
        ]
        == INVALID_REQUEST
    )
    still_serves(server)


def test_requests_after_shutdown_get_invalid_request_and_exit_is_0(server: Server):
    server.initialize()
    assert server.request("shutdown", None) is None
    assert hover(server, (server.ws / "late.yaml").as_uri())["error"]["code"] == INVALID_REQUEST
    server.notify("exit", None)
    assert server.proc.wait(20) == 0


def test_exit_without_shutdown_is_1(server: Server):
    server.initialize()
    server.notify("exit", None)
    assert server.proc.wait(20) == 1


def test_exit_before_initialize_is_1(server: Server):
    server.notify("exit", None)
    assert server.proc.wait(20) == 1


# ---- documents --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reused", [1, 0], ids=["same-version", "older-version"])
def test_a_reused_version_is_analysed_again(server: Server, reused: int):
    server.initialize()
    uri = (server.ws / "train.yaml").as_uri()
    mark = len(server.notifications)
    server.open(uri, CONFIG)
    assert "VL015" not in codes(server.diagnostics(uri, 1, after=mark))
    mark = len(server.notifications)
    server.notify(
        "textDocument/didChange",
        {"textDocument": {"uri": uri, "version": reused}, "contentChanges": [{"text": WITH_UNKNOWN_OPTIMIZER}]},
    )
    assert "VL015" in codes(server.diagnostics(uri, reused, after=mark))
    mark = len(server.notifications)
    server.open(uri, CONFIG)  # opened again at version 1: the old text's result is not current
    assert "VL015" not in codes(server.diagnostics(uri, 1, after=mark))


# ---- the decoder, over any split of a stream with broken frames in it ---------------------------------------

MAX = 2000
messages = st.builds(
    lambda i, s: json.dumps({"jsonrpc": "2.0", "id": i, "method": "m", "params": {"s": s}}).encode(),
    st.integers(0, 10**6),
    st.text(max_size=40),
)
junk = st.binary(max_size=60).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
broken = st.one_of(
    st.tuples(st.just("short"), messages, st.integers(0, 200)),
    st.tuples(st.just("long"), messages, st.integers(1, 5000)),
    st.tuples(st.just("nan"), messages, st.sampled_from([b"abc", b"-1", b"1e3", b"", b"0x10"])),
    st.tuples(
        st.just("huge"),
        st.binary(min_size=MAX + 1, max_size=MAX + 500).map(lambda b: b.replace(b"\n", b" ")),
        st.just(0),
    ),
    st.tuples(st.just("junk"), junk, st.just(0)),
)


def _encode(item) -> bytes:
    kind, data, n = item
    if kind == "ok":
        return framed(data)
    if kind == "short":
        return b"Content-Length: %d\r\n\r\n" % min(n, max(0, len(data) - 1)) + data
    if kind == "long":
        return b"Content-Length: %d\r\n\r\n" % (len(data) + n) + data
    if kind == "nan":
        return b"Content-Length: " + n + b"\r\n\r\n" + data
    if kind == "huge":
        return framed(data)
    return data


@fuzz_settings(300)
@given(
    items=st.lists(st.one_of(st.tuples(st.just("ok"), messages, st.just(0)), broken), max_size=12),
    cuts=st.lists(st.integers(1, 400), max_size=30),
)
def test_every_whole_frame_after_broken_ones_is_read(items, cuts):
    """Any mix of whole and broken frames, cut into any chunks: every whole frame comes out, in order — except
    one a `long` frame is still waiting for, at the very end of the stream."""
    stream = b"".join(_encode(i) for i in items)
    decoder = FrameDecoder(MAX)
    out = []
    pos = 0
    for cut in cuts + [len(stream)]:
        out += decoder.feed(stream[pos : pos + cut])
        pos += cut
    wanted = [data for kind, data, _ in items if kind == "ok"]
    tail_waits = bool(items) and items[-1][0] == "long"
    got = [f.body for f in out if isinstance(f, Frame) and f.body in set(wanted)]
    assert got == wanted or (tail_waits and got == wanted[: len(got)])
    assert len(decoder._buf) <= MAX + 5000 + 400
    count("wire frames", len(items))
