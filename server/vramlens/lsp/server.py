"""The vramlens language server: state, and one small handler per LSP method.

Handlers only translate: they find the document's current analysis (`documents.Analyzer`) and hand
it to a feature module (`diagnostics`, `hover`, `code_actions`, `inlay_hints`, `code_lens`,
`completion`, `commands`) that returns LSP types. Every handler is wrapped by `_guard`: an exception
is logged and the client gets an empty answer, never a dead server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import inspect
import logging
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from lsprotocol import types
from pygls.exceptions import FeatureRequestError, JsonRpcException
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer
from pygls.protocol.language_server import lsp_method
from pygls.uris import to_fs_path

from vramlens import __version__

# Imported before the `initialize` answer: only what registering the features needs. The analysis pipeline,
# the settings model (pydantic) and the modules that use them are imported on first use, after the answer
# (`config`, `diagnostics`, `documents`, `vramlens.settings`; `_warm_up` loads them in the background).
from vramlens.lsp import code_actions, code_lens, completion, framing, hover, inlay_hints, notebooks
from vramlens.lsp.commands import LIST_GPUS, RUN_PROBE, RUN_TRACE, Commands, list_gpus
from vramlens.lsp.lifecycle import LifecycleProtocol

if TYPE_CHECKING:
    from vramlens import explain
    from vramlens.knowledge.hub import BackgroundLookups
    from vramlens.lsp import config
    from vramlens.lsp.documents import Analyzer, Result

log = logging.getLogger("vramlens.lsp")

CONFIG_TIMEOUT_S = 2.0  # how long a first analysis waits for the client's settings
PULL_DIAGNOSTICS_ID = "vramlens"


def _max_document_chars() -> int:
    from vramlens.lsp import pipeline  # after the initialize answer: documents arrive only then

    return pipeline.max_document_chars()


class AnsweringProtocol(LifecycleProtocol):
    """pygls drops a request whose params do not fit its method's types: it logs the error and sends nothing,
    and the client waits for an answer forever. Here such a request is answered with the error."""

    _server: VramlensServer  # the one server this protocol is made for (its `protocol_cls`)

    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if isinstance(data, dict) and "id" in data and "method" in data:
                self._send_response(
                    data["id"], error=types.ResponseError(code=exc.code, message=f"{exc.message} for {data['method']}")
                )
            raise

    def handle_message(self, message: Any) -> None:
        """pygls 2 files every handler it runs under `_request_futures` (notifications under a fresh uuid,
        and each step of its generator features such as didOpen/didChange/didClose), but removes only a
        request's entry, when it sends the answer (pygls 2.0 protocol/json_rpc.py `_execute_handler`,
        `_handle_notification`, `_send_handler_result`): every edit left a finished future behind (an
        edit storm grew the server by 1.2-1.7 KB per keystroke). Finished entries are dropped here after
        each message; a request still running keeps its entry, so `$/cancelRequest` and shutdown still
        find it."""
        super().handle_message(message)
        futures = self._request_futures
        for msg_id, future in list(futures.items()):
            if future.done() and futures.get(msg_id) is future:
                futures.pop(msg_id, None)

    # ---- documents past analysis.MAX_DOCUMENT_CHARS --------------------------------------------
    # pygls applies an incremental change by re-splitting the whole text and copying it line by line
    # (pygls 2.0 workspace/text_document.py `_apply_incremental_change`): a 50 MB document cost ~4.5 s per
    # keystroke. Such a document is kept open with no text; its one VL016 is published when it is opened
    # (or grows past the limit) and its incremental edits are not applied nor analysed. A whole-document
    # change that brings it back under the limit makes it a normal document again.

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        item = params.text_document
        oversized: dict[str, int] = self._server.oversized
        oversized.pop(item.uri, None)
        if len(item.text) > _max_document_chars():
            oversized[item.uri] = len(item.text)
            item = types.TextDocumentItem(uri=item.uri, language_id=item.language_id, version=item.version, text="")
            params = types.DidOpenTextDocumentParams(text_document=item)
        self.workspace.put_text_document(item)
        if (user_handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_OPEN)) is not None:
            yield user_handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        uri = params.text_document.uri
        oversized: dict[str, int] = self._server.oversized
        changes = list(params.content_changes)
        if uri in oversized:
            whole = [i for i, c in enumerate(changes) if isinstance(c, types.TextDocumentContentChangeWholeDocument)]
            doc = self.workspace.text_documents.get(uri)
            if not whole or len(changes[whole[-1]].text) > _max_document_chars():
                if doc is not None:
                    doc.version = params.text_document.version  # nothing else: it stays unread
                return
            del oversized[uri]
            changes = changes[whole[-1] :]
        for change in changes:
            self.workspace.update_text_document(params.text_document, change)
        doc = self.workspace.text_documents.get(uri)
        if doc is not None and len(doc.source) > _max_document_chars():
            oversized[uri] = len(doc.source)
            self.workspace.put_text_document(
                types.TextDocumentItem(uri=uri, language_id=doc.language_id or "", version=doc.version or 0, text="")
            )
        if (user_handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield user_handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        self._server.oversized.pop(params.text_document.uri, None)
        yield from super().lsp_text_document__did_close(params)


class VramlensServer(LanguageServer):
    protocol: AnsweringProtocol  # made by pygls from `protocol_cls` below

    def __init__(self) -> None:
        super().__init__(
            "vramlens",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=notebooks.SYNC_OPTIONS,
            protocol_cls=AnsweringProtocol,
        )
        self.commands = Commands(self)
        self.trusted = False  # until initializationOptions say `trusted: true`
        self.pull_diagnostics = False
        self._settings_ready: asyncio.Event | None = None
        self._exact: dict[tuple[str, str], float] = {}
        self._workers: dict[str, Any] = {}
        self._initialization_options: Any = None  # read on `initialized`, after the answer
        self.notebook_states: dict[str, notebooks.NotebookState] = {}
        self._hub: BackgroundLookups | None = None
        self.oversized: dict[str, int] = {}  # uri → size of an open document too large to read
        self.warm_up: threading.Thread | None = None  # started at `initialized`

    # ---- transport -----------------------------------------------------------------------------
    # pygls' own read loop (pygls 2.1 io_.run_async) trusts every Content-Length: these run `framing.serve`
    # instead, with pygls' writer and protocol as they are.

    def start_io(self, stdin: Any = None, stdout: Any = None) -> int:
        """Serve over stdio until `exit` or end of input; returns the exit code (0 after `shutdown`, else 1)."""
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        messages = framing.Messages(self.protocol, self.protocol.answer_error)
        self._stop_event = threading.Event()
        try:
            asyncio.run(framing.serve(framing.stdin_chunks(stdin or sys.stdin.buffer), messages, self._stop_event))
        except SystemExit as exc:  # `exit`: pygls' handler chose the code
            return exc.code if isinstance(exc.code, int) else 1
        except BrokenPipeError:
            log.error("the connection to the client is lost; stopping")
        except KeyboardInterrupt:
            pass
        finally:
            self.shutdown()
            self.join_warm_up()
        return 0 if self.protocol.shutdown_received else 1

    def join_warm_up(self, timeout: float = 10.0) -> None:
        """Let the warm-up thread finish before the interpreter ends: a daemon thread still inside pydantic-core's
        Rust code when finalization stops it aborts the process ("FATAL: exception not rethrown", exit -6)."""
        if self.warm_up is not None:
            self.warm_up.join(timeout)

    def start_tcp(self, host: str, port: int) -> None:
        """Serve one client at a time over TCP (`vramlens serve --tcp`), with the same framing as stdio."""
        self._stop_event = stop = threading.Event()

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.protocol.set_writer(writer)  # type: ignore[arg-type]
            messages = framing.Messages(self.protocol, self.protocol.answer_error)
            await framing.serve(lambda: reader.read(framing.CHUNK_BYTES), messages, stop)
            self.shutdown()

        async def listen() -> None:
            self._server = await asyncio.start_server(connection, host, port)
            async with self._server:
                await self._server.serve_forever()

        try:
            asyncio.run(listen())
        except asyncio.CancelledError:
            pass

    @functools.cached_property
    def settings(self) -> "config.SettingsStore":
        from vramlens.lsp import config

        return config.SettingsStore()

    @functools.cached_property
    def analyzer(self) -> "Analyzer":
        from vramlens.lsp.documents import Analyzer

        return Analyzer(self, self._on_result)

    # ---- client capabilities -------------------------------------------------------------------

    def _cap(self, path: str) -> Any:
        node: Any = self.client_capabilities
        for part in path.split("."):
            node = getattr(node, part, None)
            if node is None:
                return None
        return node

    def client_supports_document_changes(self) -> bool:
        return bool(self._cap("workspace.workspace_edit.document_changes"))

    def client_supports_disabled_actions(self) -> bool:
        return bool(self._cap("text_document.code_action.disabled_support"))

    def client_supports_configuration(self) -> bool:
        return bool(self._cap("workspace.configuration"))

    # ---- documents -----------------------------------------------------------------------------

    def document(self, uri: str) -> Any:
        """What is analysed under `uri`: an open text document, or an open notebook as one text (its cells
        joined); None for a notebook cell (analysed with its notebook) or a closed document."""
        doc = self.workspace.text_documents.get(uri)
        if doc is not None:
            return None if notebooks.is_cell(self, uri) else doc
        return notebooks.document(self, uri)

    def analysed_uris(self) -> list[str]:
        """Every open document and notebook that gets an analysis."""
        return [uri for uri in self.workspace.text_documents if not notebooks.is_cell(self, uri)] + [
            nb.uri for nb in self.workspace.notebook_documents.values()
        ]  # the client's spelling of the URI

    # ---- settings ------------------------------------------------------------------------------

    def workspace_root(self) -> Path | None:
        root = getattr(self.workspace, "root_path", None)
        return Path(root) if root else None

    def effective_settings(self, path: str | None) -> config.EffectiveSettings:
        """Settings for a file on disk (project files near it count), or for an unsaved buffer (None), with the
        workspace's trust as the client gave it at initialize (no settings source can set it)."""
        effective = self.settings.for_document(Path(path) if path else None, self.workspace_root())
        if effective.values.trusted != self.trusted:
            effective = dataclasses.replace(
                effective, values=effective.values.model_copy(update={"trusted": self.trusted})
            )
        return effective

    def settings_ready(self) -> asyncio.Event:
        if self._settings_ready is None:
            self._settings_ready = asyncio.Event()
        return self._settings_ready

    async def wait_for_settings(self) -> None:
        """didOpen may arrive before the answer to workspace/configuration: wait for it, briefly."""
        event = self.settings_ready()
        if not event.is_set():
            try:
                await asyncio.wait_for(event.wait(), CONFIG_TIMEOUT_S)
            except asyncio.TimeoutError:
                log.warning("no settings from the client after %.0f s; analysing with the defaults", CONFIG_TIMEOUT_S)
                event.set()

    def settings_changed(self) -> None:
        self.analyzer.invalidate_all()
        self.refresh_views()

    async def pull_settings(self) -> None:
        """Ask the client for the `vramlens` section (workspace/configuration)."""
        if not self.client_supports_configuration():
            return
        from vramlens.lsp import config

        root = self.workspace.root_uri
        try:
            answer = await asyncio.wait_for(
                self.workspace_configuration_async(
                    types.ConfigurationParams(items=[types.ConfigurationItem(scope_uri=root, section=config.SECTION)])
                ),
                CONFIG_TIMEOUT_S * 2,
            )
        except Exception as exc:
            log.warning("workspace/configuration failed: %s", exc)
            return
        section = answer[0] if answer else None
        if section is None:
            return
        problems: list[str] = []
        self.settings.editor = config.read_client_settings({config.SECTION: section}, problems)
        self._report_problems(problems)

    def _report_problems(self, problems: list[str]) -> None:
        for p in problems:
            log.warning("ignoring setting %s", p)

    # ---- results -------------------------------------------------------------------------------

    def _on_result(self, result: Result) -> None:
        from vramlens.lsp import diagnostics

        # a notebook's cells always get pushed diagnostics: vscode-languageclient 9 pulls only for documents
        # shown in text tabs, never for notebook cells
        if not self.pull_diagnostics or self.workspace.get_notebook_document(notebook_uri=result.uri) is not None:
            diagnostics.publish(self, result)
        diagnostics.notify_estimate(self, result)

    def explain_context(self, result: Result | None) -> "explain.Context | None":
        from vramlens import explain

        if result is None or result.analysis is None:
            return None
        if "explain" not in result.extra:
            result.extra["explain"] = explain.context(result.analysis, result.path, self.exact_gib(result))
        return result.extra["explain"]

    def remember_exact(self, uri: str, plan_key: str, gib: float) -> None:
        self._exact[(uri, plan_key)] = gib

    def exact_gib(self, result: Result) -> float | None:
        if result.plan_key is None:
            return None
        return self._exact.get((result.uri, result.plan_key))

    def worker_client(self, kind: str, cls: Any) -> Any:
        """One long-lived worker client per kind (its subprocess keeps torch imported)."""
        if kind == "trace":
            # the interpreter comes from the user's settings only, never from a project file in the repository
            from vramlens.settings import merge

            python = merge([self.settings.initialization, self.settings.editor]).trace_python
            current = self._workers.get(kind)
            if current is not None and getattr(current, "python", None) != (python or sys.executable):
                self._workers.pop(kind)
                asyncio.ensure_future(current.close())  # the setting changed: stop the old interpreter
            if kind not in self._workers:
                self._workers[kind] = cls(python)
        if kind not in self._workers:
            self._workers[kind] = cls()
        return self._workers[kind]

    def read_open_file(self, path: Path) -> str | None:
        """A referenced file's text from the editor's buffer when it is open; None otherwise (the reader
        then reads it from disk, checking what it opened)."""
        for doc in self.workspace.text_documents.values():
            if doc.path and Path(doc.path) == path and doc.uri not in self.oversized:
                return doc.source
        return None

    def hub_lookups(self) -> BackgroundLookups:
        """Hub lookups of unknown models, run in worker threads (`knowledge.hub.BackgroundLookups`): an analysis
        never waits for the network; when an answer arrives every open document is analysed again."""
        if self._hub is None:
            from vramlens.knowledge.hub import BackgroundLookups

            loop = asyncio.get_running_loop()
            self._hub = BackgroundLookups(lambda _repo: loop.call_soon_threadsafe(self.settings_changed))
        return self._hub

    def refresh_views(self) -> None:
        """Ask the client to re-request what depends on settings or traces."""
        if self.pull_diagnostics and self._cap("workspace.diagnostics.refresh_support"):
            self.workspace_diagnostic_refresh(None)
        if self._cap("workspace.code_lens.refresh_support"):
            self.workspace_code_lens_refresh(None)
        if self._cap("workspace.inlay_hint.refresh_support"):
            self.workspace_inlay_hint_refresh(None)

    # ---- errors --------------------------------------------------------------------------------

    def report_server_error(self, error: Exception, source: Any) -> None:
        # Errors of requests were answered as error responses already (commands say "trace support not
        # installed" that way); other failures are logged (stderr + window/logMessage), never a pop-up.
        if source is FeatureRequestError:
            return
        log.error("server error (%s): %s", getattr(source, "__name__", source), error)

    def shutdown_workers(self) -> None:
        for client in self._workers.values():
            close = getattr(client, "close", None)
            if callable(close):
                try:
                    result = close()
                    if inspect.isawaitable(result):
                        asyncio.ensure_future(result)
                except Exception:
                    log.warning("closing a worker failed", exc_info=True)
        self._workers.clear()
        if self._hub is not None:
            self._hub.shutdown()


# ---------------------------------------------------------------------------------- safety net


def _guard(default: Callable[[], Any] = lambda: None):
    """Catch, log and answer with `default()`: a handler error never reaches the client as a crash."""

    def wrap(fn):
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(ls, params):
                try:
                    return await fn(ls, params)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("%s failed", fn.__name__)
                    return default()

            return run_async

        @functools.wraps(fn)
        def run(ls, params):
            try:
                return fn(ls, params)
            except Exception:
                log.exception("%s failed", fn.__name__)
                return default()

        return run

    return wrap


# ---------------------------------------------------------------------------------- handlers


def create_server() -> VramlensServer:
    server = VramlensServer()

    @server.feature(types.INITIALIZE)
    @_guard()
    def initialize(ls: VramlensServer, params: types.InitializeParams) -> None:
        asyncio.get_running_loop().call_soon(_after_initialize_answer)  # runs once the answer is sent
        ls._initialization_options = params.initialization_options  # read on `initialized`
        if ls._cap("text_document.diagnostic") is not None:
            ls.pull_diagnostics = True
            server.feature(
                types.TEXT_DOCUMENT_DIAGNOSTIC,
                types.DiagnosticOptions(
                    identifier=PULL_DIAGNOSTICS_ID,
                    inter_file_dependencies=True,
                    workspace_diagnostics=False,
                ),
            )(_guard(lambda: types.RelatedFullDocumentDiagnosticReport(items=[]))(_pull_diagnostics))

    @server.feature(types.INITIALIZED)
    @_guard()
    async def initialized(ls: VramlensServer, params: types.InitializedParams) -> None:
        from vramlens.lsp import config

        # initializationOptions are read here, not in `initialize`: reading them needs the settings model
        # (pydantic), whose import would delay the answer; no document arrives before `initialized`.
        options = ls._initialization_options
        problems: list[str] = []
        ls.settings.initialization = config.read_client_settings(options, problems)
        ls._report_problems(problems)
        ls.trusted = config.client_trusts(options)  # untrusted unless the client says `trusted: true`
        if not ls.trusted:
            log.info("workspace not trusted (initializationOptions.trusted is not true): traces and probes are off")
        if ls.settings.initialization.get("debounce_ms") is not None:
            ls.analyzer.debounce_s = ls.settings.initialization["debounce_ms"] / 1000
        # Started only now, after the initialize answer went out: it would compete for the GIL with it.
        ls.warm_up = threading.Thread(target=_warm_up, daemon=True, name="vramlens-warm-up")
        ls.warm_up.start()
        ready = ls.settings_ready()
        if ls.trusted:  # runs a program found on PATH: never for a workspace the editor does not trust
            threading.Thread(
                target=_detect_gpu, args=(ls, asyncio.get_running_loop()), daemon=True, name="vramlens-gpu-detect"
            ).start()
        if ls._cap("workspace.did_change_configuration.dynamic_registration"):
            try:
                await ls.client_register_capability_async(
                    types.RegistrationParams(
                        registrations=[
                            types.Registration(
                                id="vramlens-configuration",
                                method=types.WORKSPACE_DID_CHANGE_CONFIGURATION,
                                register_options={"section": config.SECTION},
                            )
                        ]
                    )
                )
            except Exception as exc:
                log.info("could not register for configuration changes: %s", exc)
        if ls._cap("workspace.did_change_watched_files.dynamic_registration"):
            try:  # project settings edited outside the editor (git checkout, another tool)
                await ls.client_register_capability_async(
                    types.RegistrationParams(
                        registrations=[
                            types.Registration(
                                id="vramlens-project-files",
                                method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                                register_options=types.DidChangeWatchedFilesRegistrationOptions(
                                    watchers=[
                                        types.FileSystemWatcher(glob_pattern="**/.vramlens.toml"),
                                        types.FileSystemWatcher(glob_pattern="**/pyproject.toml"),
                                    ]
                                ),
                            )
                        ]
                    )
                )
            except Exception as exc:
                log.info("could not watch project settings files: %s", exc)
        if ls.client_supports_configuration():
            await ls.pull_settings()
            ready.set()
            if ls.analyzer.results:
                ls.settings_changed()  # something was analysed with the defaults meanwhile: redo it
        else:
            ready.set()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    @_guard()
    async def did_change_configuration(ls: VramlensServer, params: types.DidChangeConfigurationParams) -> None:
        from vramlens.lsp import config

        settings = params.settings
        if isinstance(settings, dict) and (config.SECTION in settings or "settings" in settings):
            problems: list[str] = []
            ls.settings.editor = config.read_client_settings(settings, problems)
            ls._report_problems(problems)
        elif ls.client_supports_configuration():
            await ls.pull_settings()  # VS Code sends {settings: null}: the news is "ask again"
        ls.settings_ready().set()
        ls.settings_changed()

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    @_guard()
    def did_change_watched_files(ls: VramlensServer, params: types.DidChangeWatchedFilesParams) -> None:
        if any(Path(to_fs_path(c.uri) or c.uri).name in (".vramlens.toml", "pyproject.toml") for c in params.changes):
            ls.settings_changed()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    @_guard()
    def did_open(ls: VramlensServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.analyzer.opened(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    @_guard()
    def did_change(ls: VramlensServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.analyzer.changed(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    @_guard()
    def did_save(ls: VramlensServer, params: types.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        name = Path(to_fs_path(uri) or uri).name
        if name in (".vramlens.toml", "pyproject.toml"):
            ls.settings_changed()  # project settings changed: every document may change
            return
        # Another open config may reference this file (a DeepSpeed JSON): re-analyse those too.
        saved = to_fs_path(uri)
        for other, result in list(ls.analyzer.results.items()):
            plan = result.plan
            if other == uri or (
                plan is not None
                and saved
                and any(r.resolved_path and Path(r.resolved_path) == Path(saved) for r in plan.references)
            ):
                ls.analyzer.results.pop(other, None)
                ls.analyzer.schedule(other, 0)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    @_guard()
    def did_close(ls: VramlensServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.analyzer.forget(params.text_document.uri)
        if not ls.pull_diagnostics:
            from vramlens.lsp import diagnostics

            diagnostics.clear(ls, params.text_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    @_guard()
    def did_open_notebook(ls: VramlensServer, params: types.DidOpenNotebookDocumentParams) -> None:
        ls.analyzer.opened(params.notebook_document.uri)  # reopened with the version it had: analysed again

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    @_guard()
    def did_change_notebook(ls: VramlensServer, params: types.DidChangeNotebookDocumentParams) -> None:
        ls.analyzer.changed(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    @_guard()
    def did_close_notebook(ls: VramlensServer, params: types.DidCloseNotebookDocumentParams) -> None:
        ls.analyzer.forget(params.notebook_document.uri)
        notebooks.clear(ls, params)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    @_guard()
    def on_hover(ls: VramlensServer, params: types.HoverParams) -> types.Hover | None:
        if notebooks.is_cell(ls, params.text_document.uri):
            return notebooks.cell_hover(ls, params, hover.hover)
        return hover.hover(ls, params)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(
            code_action_kinds=[types.CodeActionKind.QuickFix, code_actions.MAKE_IT_FIT, code_actions.MAKE_IT_FIT_UNSAFE]
        ),
    )
    @_guard(list)
    def on_code_action(ls: VramlensServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        if notebooks.is_cell(ls, params.text_document.uri):
            return notebooks.cell_code_actions(ls, params, code_actions.code_actions)
        return code_actions.code_actions(ls, params)

    @server.feature(types.TEXT_DOCUMENT_INLAY_HINT)
    @_guard(list)
    def on_inlay_hint(ls: VramlensServer, params: types.InlayHintParams) -> list[types.InlayHint]:
        if notebooks.is_cell(ls, params.text_document.uri):
            return notebooks.cell_inlay_hints(ls, params, inlay_hints.inlay_hints)
        return inlay_hints.inlay_hints(ls, params)

    @server.feature(types.TEXT_DOCUMENT_CODE_LENS)
    @_guard(list)
    def on_code_lens(ls: VramlensServer, params: types.CodeLensParams) -> list[types.CodeLens]:
        if notebooks.is_cell(ls, params.text_document.uri):
            return notebooks.cell_code_lens(ls, params, code_lens.code_lens)
        return code_lens.code_lens(ls, params)

    @server.feature(
        types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=completion.TRIGGER_CHARACTERS)
    )
    @_guard()
    def on_completion(ls: VramlensServer, params: types.CompletionParams) -> types.CompletionList | None:
        return completion.completion(ls, params)

    @server.command(LIST_GPUS)
    def cmd_list_gpus(ls: VramlensServer, *args: Any) -> list[dict]:
        return list_gpus(ls, args[0] if args else None)

    @server.command(RUN_TRACE)
    async def cmd_run_trace(ls: VramlensServer, *args: Any) -> dict:
        return await ls.commands.run("trace", args[0] if args else None)

    @server.command(RUN_PROBE)
    async def cmd_run_probe(ls: VramlensServer, *args: Any) -> dict:
        return await ls.commands.run("probe", args[0] if args else None)

    @server.feature(types.SHUTDOWN)
    @_guard()
    def shutdown(ls: VramlensServer, params: Any) -> None:
        ls.shutdown_workers()

    return server


async def _pull_diagnostics(ls: VramlensServer, params: types.DocumentDiagnosticParams) -> Any:
    from vramlens.lsp import diagnostics

    return await diagnostics.pull(ls, params)


def _after_initialize_answer() -> None:
    """`serve` starts with the garbage collector off (see there); the answer is out: back on."""
    if not gc.isenabled():
        gc.enable()


def _detect_gpu(ls: VramlensServer, loop: asyncio.AbstractEventLoop) -> None:
    """Thread: ask nvidia-smi once; when it names a GPU, use it as the default and re-analyse."""
    from vramlens.lsp.gpu_detect import detect_local_gpu

    try:
        gpu = detect_local_gpu(ls.workspace_root())
    except Exception:
        log.warning("GPU detection failed", exc_info=True)
        return
    if gpu is None:
        return

    def apply() -> None:
        ls.settings.detected = {"gpu": gpu.name, "gpu_count": gpu.count}
        ls.settings.detected_note = gpu.reported
        ls.settings_changed()

    loop.call_soon_threadsafe(apply)


WARM_UP_CONFIG = "model_name_or_path: gpt2\nper_device_train_batch_size: 1\noptim: adamw_torch\n"


def _warm_up() -> None:
    """Thread, started on `initialized`: import the pipeline and load the catalogs and rules
    (about a second on a busy 2-core machine) before the editor's first didOpen needs them. A module that does
    not import fails here for all to see; only the catalogs' and the warm-up analysis' failures are logged."""
    import vramlens.explain  # noqa: F401
    from vramlens.analysis import Settings, analyze
    from vramlens.knowledge import gpus, models, optimizers
    from vramlens.lsp import config, diagnostics, documents  # noqa: F401

    try:
        gpus.all_gpus()
        models.all_models()
        optimizers.all_optimizer_names()
        analyze(WARM_UP_CONFIG, "warm-up.yaml", Settings(gpu="A100-80GB"))
    except Exception:
        log.warning("warming up the analysis pipeline failed", exc_info=True)
