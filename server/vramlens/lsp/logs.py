"""Logging for a stdio server: stdout carries the protocol, so logs go to stderr and, from WARNING up,
to the client as `window/logMessage` (VS Code shows them in the vramlens output channel)."""

from __future__ import annotations

import logging
import sys
import threading
from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from vramlens.lsp.server import VramlensServer

_LEVELS = {
    logging.ERROR: types.MessageType.Error,
    logging.WARNING: types.MessageType.Warning,
    logging.INFO: types.MessageType.Info,
}


class ClientLogHandler(logging.Handler):
    """Forwards records to the client; silent until the connection is up, never re-entrant."""

    def __init__(self, server: "VramlensServer", level: int = logging.WARNING):
        super().__init__(level)
        self.server = server
        self._local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(self._local, "busy", False):
            return
        if threading.current_thread() is not threading.main_thread():
            return  # the protocol writer is not thread-safe; stderr still has it
        self._local.busy = True
        try:
            if getattr(self.server.protocol, "writer", None) is None:
                return
            kind = _LEVELS.get(
                record.levelno, types.MessageType.Error if record.levelno > logging.ERROR else types.MessageType.Log
            )
            self.server.window_log_message(types.LogMessageParams(type=kind, message=self.format(record)))
        except Exception:
            pass
        finally:
            self._local.busy = False


class AnsweredCancelFilter(logging.Filter):
    """Drops pygls' warning for a `$/cancelRequest` whose request was already answered.

    Editors cancel requests they no longer need (VS Code cancels hovers, code actions and inlay hints as the
    cursor moves), and the answer is often out before the cancel arrives; LSP says such a cancel is to be
    ignored. pygls logs each one at WARNING (pygls/protocol/json_rpc.py, `_handle_cancel_notification`), which
    filled the output channel. Only that one message is dropped; every other record of the logger passes."""

    MESSAGE = "Cancel notification for unknown message id"

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self.MESSAGE))


PYGLS_RPC_LOGGER = "pygls.protocol.json_rpc"


def configure(server: "VramlensServer | None", level: int = logging.WARNING) -> None:
    """stderr for everything at `level` and above (pygls logs each message at INFO: kept out)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(stderr)
    root.setLevel(level)
    rpc = logging.getLogger(PYGLS_RPC_LOGGER)
    if not any(isinstance(f, AnsweredCancelFilter) for f in rpc.filters):
        rpc.addFilter(AnsweredCancelFilter())
    if server is not None:
        client = ClientLogHandler(server, max(level, logging.WARNING))
        client.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logging.getLogger("vramlens").addHandler(client)
