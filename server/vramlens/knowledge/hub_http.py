"""One bounded HTTP GET for the Hub lookup (`knowledge.hub`), with the standard library: a total deadline over
every connection it opens, a cap on the body, redirects to http(s) only and the token kept for the same host.
Imported only when a lookup happens (urllib.request and ssl take ~0.1 s to import)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

CONNECT_S = 3.0  # one TCP connection (a machine without a network is told at once)
_CHUNK = 64 * 1024


class TooLarge(Exception):
    """The body is longer than the cap (announced in Content-Length, or counted as it arrived)."""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    """The headers asked for (`get`'s `want`) that the answer, or an answer that redirected to it, carried."""
    body: bytes = b""
    """The body of a 2xx answer (at most the cap); empty for any other status."""


def get(
    url: str, token: str | None, user_agent: str, deadline: "Deadline", max_bytes: int, want: tuple[str, ...] = ()
) -> Reply:
    """GET `url`. Redirects are followed (the Hub answers a renamed repository with one). Raises TooLarge,
    OSError (no connection; TimeoutError once the deadline has passed) or http.client.HTTPException."""
    request = urllib.request.Request(url, headers={"User-Agent": user_agent})
    if token:
        request.add_unredirected_header("Authorization", f"Bearer {token}")
    redirects = _Redirects(token, want)
    opener = urllib.request.build_opener(_Http(deadline), _Https(deadline), redirects)
    try:
        response = opener.open(request, timeout=max(deadline.left(), 0.001))
    except urllib.error.HTTPError as err:  # 4xx/5xx: the status and headers are what is wanted
        err.close()
        return Reply(err.code, {k: err.headers[k] for k in want if err.headers.get(k)})
    with response:
        headers = {**redirects.seen, **{k: response.headers[k] for k in want if response.headers.get(k)}}
        announced = response.headers.get("Content-Length", "")
        if announced.isdigit() and int(announced) > max_bytes:
            raise TooLarge(url)
        chunks, total = [], 0
        while True:
            chunk = response.read(_CHUNK)
            if deadline.expired:
                raise TimeoutError("deadline passed")
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:
                raise TooLarge(url)
            chunks.append(chunk)
        return Reply(response.status, headers, b"".join(chunks))


class Deadline:
    """One time limit for everything a lookup does on the network. A socket timeout bounds one read only (a server
    sending a byte a second never trips it), so every connection opened is registered here and shut down when
    the limit passes, which ends the read blocked on it. A duplicate of each socket is kept: TLS takes the
    original over (ssl.SSLSocket detaches it), the duplicate still names the same connection. (A name lookup
    happens before there is a socket: the system resolver's own timeout bounds it.)"""

    def __init__(self, seconds: float):
        self._at = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._expired = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def left(self) -> float:
        return self._at - time.monotonic()

    @property
    def expired(self) -> bool:
        return self._expired or self.left() <= 0

    def connect(self, address, timeout=None, source_address=None) -> socket.socket:
        """`socket.create_connection`, within the deadline (http.client calls it as `_create_connection`)."""
        if self.left() <= 0:
            raise TimeoutError("deadline passed")
        sock = socket.create_connection(address, min(CONNECT_S, self.left()), source_address)
        with self._lock:
            if self._expired:
                sock.close()
                raise TimeoutError("deadline passed")
            self._sockets.append(sock.dup())
        sock.settimeout(max(self.left(), 0.001))
        return sock

    def _expire(self) -> None:
        with self._lock:
            self._expired = True
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            for sock in self._sockets:
                sock.close()
            self._sockets.clear()


def _watched(connection_class: type, deadline: Deadline) -> type:
    """`connection_class` (http.client's) opening its socket through `deadline.connect` — the hook http.client
    keeps for this (`HTTPConnection._create_connection`, CPython 3.10–3.13 Lib/http/client.py)."""

    class Watched(connection_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._create_connection = deadline.connect

    return Watched


class _UnderDeadline:
    """Mixed into urllib's HTTP and HTTPS handlers: every connection they open is watched by the deadline."""

    def __init__(self, deadline: Deadline):
        super().__init__()
        self._deadline = deadline

    def do_open(self, http_class, req, **kwargs):
        return super().do_open(_watched(http_class, self._deadline), req, **kwargs)


class _Http(_UnderDeadline, urllib.request.HTTPHandler):
    pass


class _Https(_UnderDeadline, urllib.request.HTTPSHandler):
    pass


class _Redirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, to http(s) only (urllib also allows ftp), keeping the token for the same host only
    (an `add_unredirected_header` is dropped on every redirect: https://docs.python.org/3/library/urllib.request.html
    `Request.add_unredirected_header`) and the wanted headers of the answers that redirected (the Hub sends
    `X-Repo-Commit` there, not from the host a file is then served from)."""

    def __init__(self, token: str | None, want: tuple[str, ...]):
        super().__init__()
        self._token = token
        self._want = want
        self.seen: dict[str, str] = {}

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = urllib.parse.urlsplit(urllib.parse.urljoin(req.full_url, newurl))
        if new.scheme not in ("http", "https"):
            raise urllib.error.HTTPError(req.full_url, code, f"redirect to {new.scheme}: refused", headers, fp)
        self.seen.update({k: headers[k] for k in self._want if headers.get(k)})
        redirected = super().redirect_request(req, fp, code, msg, headers, newurl)
        if redirected is not None and self._token and new.netloc == urllib.parse.urlsplit(req.full_url).netloc:
            redirected.add_unredirected_header("Authorization", f"Bearer {self._token}")
        return redirected
