"""A tiny editor on top of the pytest-lsp client: keeps document texts, applies edits the way an editor
does (in the negotiated position encoding), and waits for the diagnostics and the `vramlens/estimate`
notification of a given document version, whether the server pushes diagnostics or the client pulls."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities
from pytest_lsp.client import make_test_lsp_client
from shared_data import CORPUS as CORPUS  # ../shared beside the repository (absent in a plain clone)
from vramlens.text import LineIndex, apply_lsp_edits

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

FIXTURES = REPO / "tests" / "fixtures"
TIMEOUT_S = 20.0
GIB_TOLERANCE = 0.051


def make_client() -> LanguageClient:
    """The pytest-lsp client, also recording every publishDiagnostics and vramlens/estimate message."""
    client = make_test_lsp_client()
    client.published = []  # type: ignore[attr-defined]
    client.estimates = []  # type: ignore[attr-defined]
    original = client.protocol.fm.features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]

    def record_diagnostics(params: types.PublishDiagnosticsParams) -> None:
        original(params)
        client.published.append(params)

    client.protocol.fm.features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = record_diagnostics

    @client.feature("vramlens/estimate")
    def record_estimate(params: Any) -> None:
        client.estimates.append(plain(params))

    # what an editor answers without doing anything a test could see
    for method in (
        types.CLIENT_REGISTER_CAPABILITY,
        types.WORKSPACE_CODE_LENS_REFRESH,
        types.WORKSPACE_INLAY_HINT_REFRESH,
    ):
        client.feature(method)(lambda params: None)

    return client


def plain(value: Any) -> Any:
    """pygls hands over params of custom notifications as named tuples: back to JSON-like dicts."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def offset_at(text: str, pos: types.Position, encoding: str) -> int:
    """String offset of an LSP position in `text` (positions count code units of `encoding`), clamped as editors do."""
    return LineIndex(text).offset_at(pos.line, pos.character, encoding)


def position_at(text: str, offset: int, encoding: str) -> types.Position:
    line, col = LineIndex(text).pos(offset)
    return types.Position(line=line, character=LineIndex(text).position(line, col, encoding)[1])


def apply_text_edits(text: str, edits: list[types.TextEdit], encoding: str) -> str:
    return apply_lsp_edits(
        text,
        [
            ((e.range.start.line, e.range.start.character), (e.range.end.line, e.range.end.character), e.new_text)
            for e in edits
        ],
        encoding,
    )


def edits_of(edit: types.WorkspaceEdit) -> dict[str, list[types.TextEdit]]:
    """{uri: edits} from `changes` or `documentChanges`."""
    out: dict[str, list[types.TextEdit]] = {}
    for uri, edits in (edit.changes or {}).items():
        out.setdefault(uri, []).extend(edits)
    for change in edit.document_changes or ():
        assert isinstance(change, types.TextDocumentEdit), f"unexpected resource operation {change!r}"
        out.setdefault(change.text_document.uri, []).extend(change.edits)
    return out


@dataclass
class Editor:
    client: LanguageClient
    result: types.InitializeResult
    texts: dict[str, str] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    _last_version: dict[str, int] = field(default_factory=dict)

    @property
    def encoding(self) -> str:
        return str(self.result.capabilities.position_encoding or "utf-16")

    @property
    def pulls(self) -> bool:
        return self.result.capabilities.diagnostic_provider is not None

    def open(self, path: Path, text: str | None = None, language_id: str | None = None) -> str:
        uri = path.resolve().as_uri() if path.is_absolute() or path.exists() else path.as_uri()
        text = path.read_text(encoding="utf-8") if text is None else text
        language_id = language_id or {".py": "python", ".sh": "shellscript", ".json": "json", ".md": "markdown"}.get(
            path.suffix, "yaml"
        )
        # versions keep counting across close/reopen, so results of an earlier opening never match
        version = self._last_version.get(uri, 0) + 1
        self.texts[uri], self.versions[uri] = text, version
        self._last_version[uri] = version
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                types.TextDocumentItem(uri=uri, language_id=language_id, version=version, text=text)
            )
        )
        return uri

    def close(self, uri: str) -> None:
        self.client.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )
        self.texts.pop(uri, None)
        self.versions.pop(uri, None)

    def close_all(self) -> None:
        for uri in list(self.texts):
            self.close(uri)

    def change(self, uri: str, edits: list[types.TextEdit]) -> None:
        """Apply edits locally and send them as incremental changes (last first, so positions stay valid)."""
        text = self.texts[uri]
        ordered = sorted(
            edits,
            key=lambda e: (offset_at(text, e.range.start, self.encoding), offset_at(text, e.range.end, self.encoding)),
            reverse=True,
        )
        changes = []
        for e in ordered:
            changes.append(types.TextDocumentContentChangePartial(range=e.range, text=e.new_text))
            text = apply_text_edits(text, [e], self.encoding)
        self.texts[uri] = text
        self._bump(uri)
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
                content_changes=changes,
            )
        )

    def replace_all(self, uri: str, text: str) -> None:
        self.texts[uri] = text
        self._bump(uri)
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )

    def _bump(self, uri: str) -> None:
        self.versions[uri] = self._last_version[uri] = self._last_version[uri] + 1

    def apply(self, edit: types.WorkspaceEdit) -> None:
        for uri, edits in edits_of(edit).items():
            assert uri in self.texts, f"edit for a document that is not open: {uri}"
            self.change(uri, edits)

    async def _until(self, predicate, what: str) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT_S
        while True:
            value = predicate()
            if value is not None:
                return value
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.005)

    async def diagnostics(self, uri: str) -> list[types.Diagnostic]:
        """The diagnostics for the document's current version."""
        if self.pulls:
            report = await self.client.text_document_diagnostic_async(
                types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri))
            )
            return list(report.items)
        version = self.versions[uri]

        def published():
            for p in reversed(self.client.published):
                if p.uri == uri and p.version == version:
                    return list(p.diagnostics)
            return None

        return await self._until(published, f"diagnostics of {uri} v{version}")

    async def estimate(self, uri: str) -> dict:
        """The `vramlens/estimate` notification for the document's current version: an estimate."""
        sent = await self.estimate_notification(uri)
        assert "peak" in sent, f"no estimate for {uri}: {sent.get('reason')}"
        return sent

    async def estimate_notification(self, uri: str) -> dict:
        """The `vramlens/estimate` notification for the document's current version: the estimate, or
        {uri, version, reason} when that version has none."""
        version = self.versions[uri]

        def sent():
            for e in reversed(self.client.estimates):
                if e["uri"] == uri and e["version"] == version:
                    return e
            return None

        if self.pulls:
            await self.diagnostics(uri)  # pulling is what triggers the analysis in pull mode
        return await self._until(sent, f"estimate of {uri} v{version}")

    async def hover(self, uri: str, line: int, character: int) -> types.Hover | None:
        return await self.client.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line, character)
            )
        )

    async def code_actions(
        self,
        uri: str,
        diagnostics: list[types.Diagnostic],
        only: list[str] | None = None,
        rng: types.Range | None = None,
    ) -> list[types.CodeAction]:
        if rng is None:
            end = len(LineIndex(self.texts[uri]))
            rng = types.Range(start=types.Position(0, 0), end=types.Position(end, 0))
        actions = await self.client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=rng,
                context=types.CodeActionContext(diagnostics=diagnostics, only=only),
            )
        )
        return [a for a in actions or [] if isinstance(a, types.CodeAction)]

    def position_of(self, uri: str, needle: str, after: int = 0) -> types.Position:
        text = self.texts[uri]
        index = text.index(needle)
        return position_at(text, index + after, self.encoding)


async def start(
    client: LanguageClient, profile: str, root: Path = EXAMPLES, initialization_options: dict | None = None
) -> Editor:
    """initialize + initialized as the given client (pytest-lsp's recorded capabilities)."""
    result = await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities(profile),
            root_uri=root.resolve().as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=root.resolve().as_uri(), name=root.name)],
            initialization_options=initialization_options,
        )
    )
    return Editor(client, result)
