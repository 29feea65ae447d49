"""The LSP base protocol's framing (`Content-Length` header, blank line, JSON body), read so that a bad frame
costs that frame only.

pygls 2's read loop (pygls 2.1 `io_.run_async`) reads as many bytes as the header says, so `Content-Length:
1000000000000` raised MemoryError and ended the server; a header it does not match (`Content-Length: abc`,
another spelling) or a body shorter than declared left the next header glued to junk, so that frame and every
later one were lost; a body that is not UTF-8 was logged and its request never answered.

Here a frame is at most MAX_FRAME_BYTES (a larger one is discarded as it arrives, never held); a frame whose
header cannot be read, or whose body runs into the next frame, is dropped and reading resumes at the next
`Content-Length` header; a request in a frame that cannot be read is answered with a parse error when its id can
be read from the frame's start. The decoder is pure (bytes in, frames out); `serve` runs it over stdio or a
socket and hands each message to pygls' protocol (`structure_message`, `handle_message`).

Base protocol: https://microsoft.github.io/language-server-protocol/specifications/lsp/3.17/specification/#baseProtocol
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

log = logging.getLogger(__name__)

# 64 MiB: the largest document the server keeps is a few MB (larger ones are reported and not read), and its
# JSON frame (escapes included) stays far below this; a 50 MB document still arrives, to be reported as too large.
MAX_FRAME_BYTES = 64 * 2**20
MAX_HEADER_BYTES = 8 * 1024  # a header block is two short lines
HEAD_BYTES = 4096  # the start of a refused frame, kept to find its request id
CHUNK_BYTES = 64 * 1024

PARSE_ERROR = -32700
INVALID_REQUEST = -32600

_BLANK_LINE = re.compile(rb"\r?\n\r?\n")
_LEADING_BREAKS = re.compile(rb"[\r\n]+")
_LINE_BREAK = re.compile(rb"\r?\n")
_HEADER = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+)[ \t]*:[ \t]*(.*?)[ \t]*")
# The start of a frame: raw bytes that never occur inside a JSON text (a line break is allowed there only between
# tokens, where `Content-Length:` cannot be), so finding them in a body means that body ran into the next frame.
_FRAME_START = re.compile(rb"content-length[ \t]{0,8}:[ \t]{0,8}[0-9]{1,18}[ \t]{0,8}\r?\n", re.IGNORECASE)
_OVERLAP = 64  # longer than any match of _FRAME_START: kept when a scan resumes in new bytes


@dataclass
class Frame:
    """A complete frame's body."""

    body: bytes


@dataclass
class BadFrame:
    """Bytes that were not a readable frame, and why; `head` is their start (to find a request id in)."""

    reason: str
    head: bytes = b""


class FrameDecoder:
    """Bytes in (`feed`), frames out. Holds at most one frame's body plus one chunk."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES):
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._need: int | None = None  # body length of the frame being read
        self._scanned = 0  # bytes of the partial body already searched for a frame start
        self._skip = 0  # bytes of an oversized body still to discard
        self._skip_reason = ""
        self._skip_head = b""
        self._skip_tail = b""  # last bytes discarded, for a frame start split across chunks

    def feed(self, data: bytes) -> list[Frame | BadFrame]:
        out: list[Frame | BadFrame] = []
        if self._skip:
            data = self._discard(data, out)
        self._buf += data
        while True:
            if self._skip:
                rest = bytes(self._buf)
                self._buf.clear()
                self._buf += self._discard(rest, out)
                if self._skip:
                    break
            elif self._need is not None:
                if not self._body(out, self._need):
                    break
            elif not self._header(out):
                break
        return out

    # ---- states ----------------------------------------------------------------------------------

    def _header(self, out: list) -> bool:
        """Read one header block; False when more bytes are needed."""
        buf = self._buf
        leading = _LEADING_BREAKS.match(buf)
        if leading is not None:  # a line break after the previous body: not a frame of its own
            del buf[: leading.end()]
        if not buf:
            return False
        blank = _BLANK_LINE.search(buf, 0, MAX_HEADER_BYTES + 4)
        if blank is None:
            if len(buf) <= MAX_HEADER_BYTES:
                return False
            self._resync(out, f"no end of header within {MAX_HEADER_BYTES} bytes", 0)
            return True
        length: int | None = None
        problem = None
        for line in _LINE_BREAK.split(bytes(buf[: blank.start()])):
            field = _HEADER.fullmatch(line)
            if field is None:
                problem = f"not a header line: {line[:60]!r}"
                break
            if field[1].lower() == b"content-length":
                value = field[2]
                if not value.isdigit() or len(value) > 18:
                    problem = f"Content-Length is not a byte count: {value[:40]!r}"
                    break
                length = int(value)
        if problem is not None or length is None:
            self._resync(out, problem or "no Content-Length header", blank.end())
            return True
        del buf[: blank.end()]
        if length > self.max_frame_bytes:
            self._skip = length
            self._skip_reason = (
                f"a message of {length:,} bytes is over the limit of "
                f"{self.max_frame_bytes // 2**20} MiB; it was not read"
            )
            self._skip_head = b""
            self._skip_tail = b""
        else:
            self._need = length
            self._scanned = 0
        return True

    def _body(self, out: list, need: int) -> bool:
        """Complete the body of `need` bytes being read; False when more bytes are needed."""
        buf = self._buf
        end = min(len(buf), need)
        start = self._frame_start(buf, max(0, self._scanned - _OVERLAP), end)
        if start is not None:  # the declared length runs into the next frame
            out.append(
                BadFrame(
                    f"the message ends before its Content-Length ({need:,} bytes)", bytes(buf[: min(start, HEAD_BYTES)])
                )
            )
            del buf[:start]
            self._need = None
            return True
        self._scanned = end
        if len(buf) < need:
            return False
        with memoryview(buf) as view:
            body = bytes(view[:need])
        del buf[:need]
        self._need = None
        out.append(Frame(body))
        return True

    def _discard(self, data: bytes, out: list) -> bytes:
        """Drop bytes of an oversized body; returns what follows it (or a frame start found inside it)."""
        if len(self._skip_head) < HEAD_BYTES:
            self._skip_head += data[: HEAD_BYTES - len(self._skip_head)]
        window = self._skip_tail + data
        start = self._frame_start(window, 0, len(self._skip_tail) + min(len(data), self._skip))
        if start is not None:
            out.append(BadFrame(self._skip_reason, self._skip_head))
            self._skip = 0
            return window[start:]
        taken = min(len(data), self._skip)
        self._skip -= taken
        self._skip_tail = window[max(0, len(self._skip_tail) + taken - _OVERLAP) : len(self._skip_tail) + taken]
        if self._skip == 0:
            out.append(BadFrame(self._skip_reason, self._skip_head))
        return data[taken:]

    def _resync(self, out: list, problem: str, at_least: int) -> None:
        """Drop junk up to the next frame start (past `at_least` bytes at least)."""
        buf = self._buf
        start = self._frame_start(buf, 1, len(buf))
        if start is None:
            start = max(at_least, len(buf) - _OVERLAP)
        start = max(start, 1)
        out.append(BadFrame(problem, bytes(buf[: min(start, HEAD_BYTES)])))
        del buf[:start]

    @staticmethod
    def _frame_start(data: bytes | bytearray, begin: int, end: int) -> int | None:
        """Offset of a frame start within data[begin:end] (a match may run up to _OVERLAP bytes past `end`)."""
        if data.find(b"\n", begin, min(len(data), end + _OVERLAP)) < 0:
            return None  # no line break, no frame start (compact JSON has none)
        m = _FRAME_START.search(data, begin, min(len(data), end + _OVERLAP))
        return m.start() if m is not None and m.start() < end else None


# ---------------------------------------------------------------------------------- request ids


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_SPACE = re.compile(r"[ \t\r\n]*")
_DECODER = json.JSONDecoder()


def request_id(head: bytes) -> int | str | None:
    """The id of the JSON-RPC request that `head` starts (top-level `id` and `method` found before the text
    ends or breaks), else None. Responses (no `method`) and notifications (no `id`) give None."""
    text = head.decode("utf-8", "replace")
    i = _skip_space(text, 0)
    if text[i : i + 1] != "{":
        return None
    i += 1
    found: Any = None
    has_id = has_method = False
    while True:
        i = _skip_space(text, i)
        if i >= len(text) or text[i] == "}":
            break
        if text[i] == ",":
            i += 1
            continue
        key = _STRING.match(text, i)
        if key is None:
            break
        i = _skip_space(text, key.end())
        if text[i : i + 1] != ":":
            break
        i = _skip_space(text, i + 1)
        name = key.group()[1:-1]
        if name in ("id", "method"):
            try:
                value, i = _DECODER.raw_decode(text, i)
            except ValueError:
                break
            if name == "id" and isinstance(value, (int, str)) and not isinstance(value, bool):
                found, has_id = value, True
            elif name == "method" and isinstance(value, str):
                has_method = True
        else:
            after = _skip_value(text, i)
            if after is None:
                break
            i = after
    return found if has_id and has_method else None


def _skip_space(text: str, i: int) -> int:
    """`i` moved past spaces and line breaks."""
    m = _SPACE.match(text, i)  # `*`: matches (empty) at any position
    return m.end() if m is not None else i


def _skip_value(text: str, i: int) -> int | None:
    depth = 0
    while i < len(text):
        c = text[i]
        if c == '"':
            m = _STRING.match(text, i)
            if m is None:
                return None
            i = m.end()
            if depth == 0:
                return i
            continue
        if c in "[{":
            depth += 1
        elif c in "]}":
            if depth == 0:
                return i
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == "," and depth == 0:
            return i
        i += 1
    return None


# ---------------------------------------------------------------------------------- the read loop


class Messages:
    """Turns frames into protocol messages: decodes, answers what cannot be read, hands the rest to pygls."""

    def __init__(self, protocol: Any, answer_error: Callable[[Any, int, str], None]):
        self.protocol = protocol
        self.answer_error = answer_error

    def bad(self, item: BadFrame) -> None:
        rid = request_id(item.head)
        log.warning(
            "skipped a message the client sent: %s%s",
            item.reason,
            f" (request {rid!r} answered with an error)" if rid is not None else "",
        )
        if rid is not None:
            self.answer_error(rid, PARSE_ERROR, f"Parse error: {item.reason}")

    def frame(self, body: bytes) -> None:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.bad(
                BadFrame(
                    f"the message is not UTF-8 (byte 0x{body[exc.start]:02x} at offset {exc.start})", body[:HEAD_BYTES]
                )
            )
            return
        try:
            message = json.loads(text, object_hook=self.protocol.structure_message)
        except json.JSONDecodeError as exc:
            self.bad(BadFrame(f"the message is not JSON ({exc.msg}, offset {exc.pos})", body[:HEAD_BYTES]))
            return
        except RecursionError:
            self.bad(BadFrame("the message nests too deeply to read", body[:HEAD_BYTES]))
            return
        except Exception as exc:  # structure_message refused it (answered there when it was a request)
            log.warning("a message the client sent could not be read: %s", exc)
            return
        if not hasattr(message, "jsonrpc"):
            rid = message.get("id") if isinstance(message, dict) else None
            log.warning("skipped a message that is not a JSON-RPC 2.0 message")
            if isinstance(message, dict) and "method" in message and isinstance(rid, (int, str)):
                self.answer_error(rid, INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message")
            return
        self.protocol.handle_message(message)


async def serve(
    read_chunk: Callable[[], Awaitable[bytes]],
    messages: Messages,
    stop: threading.Event | None = None,
    max_frame_bytes: int = MAX_FRAME_BYTES,
) -> None:
    """Read frames until end of input (or `stop`), handing each to `messages`. Errors of one message are
    logged; only `exit` (SystemExit) ends the loop early."""
    decoder = FrameDecoder(max_frame_bytes)
    while stop is None or not stop.is_set():
        chunk = await read_chunk()
        if not chunk:
            return
        for item in decoder.feed(chunk):
            try:
                if isinstance(item, Frame):
                    messages.frame(item.body)
                else:
                    messages.bad(item)
            except Exception:
                log.exception("handling a message failed")
            await asyncio.sleep(0)  # let what the message scheduled run, as between two reads


def stdin_chunks(stream: Any) -> Callable[[], Awaitable[bytes]]:
    """An async chunk reader over a blocking binary stream: one daemon thread reads (so a read blocked on
    stdin never holds up the process's exit), handing over one chunk at a time (the client is not read
    faster than the server takes messages)."""
    queue: asyncio.Queue[bytes] | None = None
    lock = threading.Lock()

    def pump(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[bytes]) -> None:
        try:  # the file descriptor itself: a thread blocked in BufferedReader.read1 holds its lock, and
            fd = stream.fileno()  # the interpreter cannot close stdin at exit
            read = functools.partial(os.read, fd)
        except (AttributeError, OSError, ValueError):
            read = getattr(stream, "read1", None) or stream.read
        while True:
            try:
                chunk = read(CHUNK_BYTES)
            except (OSError, ValueError):
                chunk = b""
            try:
                asyncio.run_coroutine_threadsafe(queue.put(chunk or b""), loop).result()
            except RuntimeError:  # the loop is closed: the server is ending
                return
            if not chunk:
                return

    async def read_chunk() -> bytes:
        nonlocal queue
        with lock:
            if queue is None:
                queue = asyncio.Queue(maxsize=1)
                threading.Thread(
                    target=pump, args=(asyncio.get_running_loop(), queue), daemon=True, name="vramlens-stdin"
                ).start()
        return await queue.get()

    return read_chunk
