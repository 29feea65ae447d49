"""The LSP lifecycle as the specification states it, on top of pygls 2's protocol.

- Before `initialize`: a request is answered with ServerNotInitialized (-32002); a notification is dropped,
  except `exit`. (pygls ran the handler, which failed on the missing workspace and answered null.)
- A second `initialize` is answered with InvalidRequest (-32600).
- After `shutdown`: a request is answered with InvalidRequest; a notification other than `exit` is dropped.
  (pygls dropped the request silently, so the client waited for an answer forever.)
- `exit` ends the process with 0 after `shutdown`, 1 without (pygls computes the code, `VramlensServer.start_io`
  makes it the process's exit code).

https://microsoft.github.io/language-server-protocol/specifications/lsp/3.17/specification/#initialize
https://microsoft.github.io/language-server-protocol/specifications/lsp/3.17/specification/#shutdown
https://microsoft.github.io/language-server-protocol/specifications/lsp/3.17/specification/#exit
"""

from __future__ import annotations

import logging
from typing import Any

from lsprotocol import types
from pygls.protocol import LanguageServerProtocol

log = logging.getLogger(__name__)


class LifecycleProtocol(LanguageServerProtocol):
    """pygls' language-server protocol with the lifecycle errors of the specification."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initialize_received = False

    @property
    def shutdown_received(self) -> bool:
        return self._shutdown  # pygls sets it when it has answered `shutdown`

    def answer_error(self, msg_id: Any, code: int, message: str) -> None:
        """Answer request `msg_id` with a JSON-RPC error."""
        self._send_response(msg_id, error=types.ResponseError(code=code, message=message))

    def handle_message(self, message: Any) -> None:
        method = getattr(message, "method", None)
        request = method is not None and getattr(message, "id", None) is not None
        if method == types.EXIT:
            super().handle_message(message)
            return
        if self.shutdown_received:
            if request:
                self.answer_error(
                    message.id,
                    types.ErrorCodes.InvalidRequest,
                    f"{method}: the server has been shut down; only `exit` is accepted",
                )
            else:
                log.info("dropped %s after shutdown", method or "a response")
            return
        if method == types.INITIALIZE and request:
            if self.initialize_received:
                self.answer_error(
                    message.id, types.ErrorCodes.InvalidRequest, "initialize: the server is already initialized"
                )
                return
            self.initialize_received = True
        elif not self.initialize_received and method is not None:
            if request:
                self.answer_error(
                    message.id,
                    types.ErrorCodes.ServerNotInitialized,
                    f"{method}: the server is not initialized (send `initialize` first)",
                )
            else:
                log.info("dropped %s before initialize", method)
            return
        super().handle_message(message)
