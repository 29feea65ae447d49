"""Server commands: `vramlens.listGpus`, `vramlens.runTrace`, `vramlens.runProbe`.

The exact trace and the live probe run in worker subprocesses (torch is never imported here); their
client modules live in `vramlens.trace` / `vramlens.probe`. Both report work-done progress and stop when
the client cancels. Without the optional `trace`/`probe` support the commands answer with an error
saying so.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcRequestCancelled

if TYPE_CHECKING:
    from vramlens.lsp.server import VramlensServer
    from vramlens.probe.client import ProbeClient
    from vramlens.trace.client import TraceClient

log = logging.getLogger(__name__)

LIST_GPUS = "vramlens.listGpus"
RUN_TRACE = "vramlens.runTrace"
RUN_PROBE = "vramlens.runProbe"
REQUEST_FAILED = -32803  # LSP ErrorCodes.RequestFailed
GIB = 1 << 30


class CommandError(JsonRpcException):
    """A command could not do its work; the message is shown to the user as is."""

    CODE = REQUEST_FAILED


class CommandCancelled(JsonRpcRequestCancelled):
    """The user cancelled (progress cancel button or $/cancelRequest). Raised instead of
    asyncio.CancelledError, which pygls' executeCommand dispatch would never answer."""


def list_gpus(ls: "VramlensServer | None" = None, uri: Any = None) -> list[dict[str, Any]]:
    """`vramlens.listGpus [uri]`: the GPU catalog; with the URI of an open config, that run on every GPU.

    Without a URI (or for a document with no estimate): one entry per catalog GPU, in catalog order,
    `{"name", "memory_gib", "usable_gib", "bf16", "vendor"}`. With one: one entry per GPU and count in the
    order `vramlens gpus` prints them (fitting choices fastest first, then the rest), each also carrying
    `"gpu", "count", "peak_gib", "fits", "tight", "tokens_per_s", "run_tokens_per_s", "step_s", "mfu", "bound"`
    for that document, computed by vramlens.estimate.gpu_choices (the same rows as `vramlens gpus --all`).
    """
    from vramlens.knowledge import gpus

    catalog = {
        g.name: {
            "name": g.name,
            "memory_gib": g.memory_gib,
            "usable_gib": g.usable_gib,
            "bf16": g.bf16,
            "vendor": g.vendor,
        }
        for g in gpus.all_gpus()
    }
    if isinstance(uri, list):
        uri = uri[0] if uri else None
    if isinstance(uri, dict):
        uri = uri.get("uri")
    result = ls.analyzer.current(uri) if ls is not None and isinstance(uri, str) else None
    res = getattr(result.analysis, "resolution", None) if result is not None else None
    if result is None or res is None or getattr(result.analysis, "estimate", None) is None:
        return list(catalog.values())
    from vramlens.estimate.gpu_choices import gpu_choices

    return [{**catalog[row["gpu"]], **row} for row in gpu_choices(res.resolved)]


class Commands:
    """The long-running commands of one server, and the exact results they produced."""

    def __init__(self, ls: "VramlensServer"):
        self.ls = ls
        self._tokens = itertools.count(1)

    # ---- availability --------------------------------------------------------------------------

    def trace_available(self) -> bool:
        return self._client("trace") is not None

    def _client(self, kind: str) -> "type[TraceClient] | type[ProbeClient] | None":
        """The trace/probe client class, when this interpreter has what it runs (torch, checked without
        importing it). Imported on first use: the server starts without them."""
        cls: type[TraceClient | ProbeClient]
        if kind == "trace":
            from vramlens.trace.client import TraceClient

            cls = TraceClient
        else:
            from vramlens.probe.client import ProbeClient

            cls = ProbeClient
        return cls if cls.available() else None

    # ---- running -------------------------------------------------------------------------------

    async def run(self, kind: str, uri: Any) -> dict[str, Any]:
        title = "exact trace" if kind == "trace" else "live probe"
        if isinstance(uri, list) and uri:
            uri = uri[0]
        if not isinstance(uri, str):
            raise CommandError(f"vramlens: {title} needs the URI of an open document")
        notebook = self.ls.workspace.get_notebook_document(cell_uri=uri)
        if notebook is not None:
            uri = notebook.uri  # a notebook cell: the notebook is the run
        if not self.ls.trusted:
            raise CommandError(f"vramlens: {title}s only run in trusted workspaces")
        cls = self._client(kind)
        if cls is None:
            raise CommandError(
                f"vramlens: {kind} support not installed — install `vramlens[{kind}]` "
                f"(PyTorch) into the Python that runs the server"
            )
        result = self.ls.analyzer.current(uri)
        res = result.resolution if result is not None else None
        if result is None or res is None:
            reason = result.error if result is not None else "the document is not open"
            raise CommandError(f"vramlens: nothing to {kind}: {reason or 'not a training config'}")
        request = self._request_future()
        token = f"vramlens-{kind}-{next(self._tokens)}"
        progress = await self._begin_progress(token, f"vramlens: {title}")
        try:
            summary = await self._call(cls, kind, res.resolved, token if progress else None, request)
        except asyncio.CancelledError:
            self._end_progress(token, progress, "cancelled")
            raise CommandCancelled(f"vramlens: {title} cancelled") from None
        except CommandError:
            self._end_progress(token, progress, "failed")
            raise
        except Exception as exc:
            self._end_progress(token, progress, "failed")
            log.warning("%s of %s failed", title, uri, exc_info=True)
            raise CommandError(f"vramlens: {title} failed: {exc}") from exc
        self._end_progress(token, progress, summary.get("message") or "done")
        for bulky in ("estimate", "timeline"):  # the full byte-level results stay server-side
            summary.pop(bulky, None)
        exact = summary.get("exact_gib") if kind == "trace" else None
        if kind == "trace" and isinstance(exact, (int, float)) and result.plan_key:
            self.ls.remember_exact(uri, result.plan_key, float(exact))
            result.extra.pop("explain", None)
            from vramlens.lsp.diagnostics import notify_estimate

            notify_estimate(self.ls, result)
            self.ls.refresh_views()
        return summary

    def _request_future(self) -> Any | None:
        """The pending executeCommand request's future, which pygls cancels on $/cancelRequest (the
        command's own task is not cancelled then, so it watches this future)."""
        try:
            msg_id = self.ls.protocol.msg_id
            return self.ls.protocol._request_futures.get(msg_id) if msg_id is not None else None
        except Exception:
            return None

    async def _call(self, cls: Any, kind: str, rp: Any, token: str | None, request: Any | None) -> dict[str, Any]:
        """Run the worker through its client; progress goes to the client, cancellation comes back."""

        def report(message: str, percentage: int | None = None) -> None:
            if token is not None:
                self.ls.work_done_progress.report(
                    token, types.WorkDoneProgressReport(message=message, percentage=percentage, cancellable=True)
                )

        cancel_future = self.ls.work_done_progress.tokens.get(token) if token else None
        client = self.ls.worker_client(kind, cls)
        task = asyncio.ensure_future(client.run(rp, progress=report))
        # Either future completing (it is cancelled) stops the run. Watched by callback, never wrapped:
        # cancelling a wrapper would cancel the request itself.
        loop = asyncio.get_running_loop()
        stop = loop.create_future()

        def stop_once() -> None:
            if not stop.done():
                stop.set_result(True)

        def on_done(_: Any) -> None:
            loop.call_soon_threadsafe(stop_once)

        for f in (cancel_future, request):
            if f is not None:
                f.add_done_callback(on_done)
        done, _ = await asyncio.wait([task, stop], return_when=asyncio.FIRST_COMPLETED)
        if not stop.done():
            stop.cancel()
        if task not in done:
            task.cancel()
            try:
                await task  # let the client stop its worker's job
            except BaseException:
                pass
            raise asyncio.CancelledError()
        out = task.result()
        if hasattr(out, "model_dump"):
            out = out.model_dump()
        elif hasattr(out, "__dict__") and not isinstance(out, dict):
            out = dict(vars(out))
        return out if isinstance(out, dict) else {"result": out}

    async def _begin_progress(self, token: str, title: str) -> bool:
        window = self.ls.client_capabilities.window
        if window is None or not window.work_done_progress:
            return False
        # The token's cancel future is registered before the create request goes out: a client may send
        # the cancel right after its answer, and pygls' create_async registers only once it has resumed
        # (a cancel in between was dropped as "unknown token").
        progress = self.ls.work_done_progress
        progress.tokens.setdefault(token, concurrent.futures.Future())
        try:
            await self.ls.protocol.send_request_async(
                types.WINDOW_WORK_DONE_PROGRESS_CREATE, types.WorkDoneProgressCreateParams(token=token)
            )
        except Exception:
            progress.tokens.pop(token, None)
            return False
        self.ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=title, cancellable=True))
        return True

    def _end_progress(self, token: str, started: bool, message: str) -> None:
        if started:
            self.ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
            self.ls.work_done_progress.tokens.pop(token, None)  # pygls keeps every token otherwise
