"""The vramlens language server (`vramlens serve`): diagnostics, hovers, code actions, inlay hints,
code lenses and completion for training configs, over stdio or TCP."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vramlens.lsp.server import VramlensServer


def create_server() -> "VramlensServer":
    from vramlens.lsp.server import create_server as create

    return create()


def serve(*, tcp: bool = False, host: str = "127.0.0.1", port: int = 2087, log_level: str = "WARNING") -> int:
    """Run the server until the client says exit; returns the exit code (0 after `shutdown`, else 1)."""
    import gc
    import logging

    # No cyclic garbage collection until the initialize answer is out: importing lsprotocol allocates
    # a few hundred thousand objects, and the collections that triggers cost ~30-50 ms of the start
    # (measured). It is switched back on once the answer is sent (server.py).
    gc.disable()

    from vramlens.lsp import logs

    server = create_server()
    logs.configure(server, getattr(logging, log_level.upper(), logging.WARNING))
    if tcp:
        server.start_tcp(host, port)
        return 0
    return server.start_io()
