"""Open documents and their analyses: when to analyse, which result is current, what is stale.

One analysis per (document version, settings generation). A change schedules an analysis and cancels
the one it supersedes; changes in quick succession are debounced, so a burst of edits costs one
analysis, while a single keystroke is analysed at once. Requests that need the current result (hover, code
actions, lenses) compute it at once if the scheduled run has not happened yet; either way each version is
analysed once.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pygls.workspace import TextDocument

from vramlens.lsp import notebooks, pipeline
from vramlens.text import LineIndex, LinesWithBreaks

if TYPE_CHECKING:
    from vramlens.analysis import Analysis
    from vramlens.lsp.config import EffectiveSettings
    from vramlens.lsp.server import VramlensServer
    from vramlens.plan import TrainingPlan
    from vramlens.resolve import Resolution

log = logging.getLogger(__name__)

# Suffix to analyse an unsaved buffer as, by its language id (untitled documents have no file name).
# Edits closer together than this are a burst and are debounced by DEBOUNCE_S; a lone edit is analysed at
# once (an analysis takes ~1-2 ms, see benchmarks/lsp_latency.py).
BURST_S = 0.03
DEBOUNCE_S = 0.02
# FLOOD_EDITS edits within FLOOD_S were queued before the server got to them (no one types 250 keys a second):
# a debounced analysis then waits for the queue to drain, at most MAX_DEFER_S.
FLOOD_EDITS = 5
FLOOD_S = 0.02
MAX_DEFER_S = 1.0

LANGUAGE_SUFFIX = {
    "yaml": ".yaml",
    "json": ".json",
    "jsonc": ".json",
    "python": ".py",
    "shellscript": ".sh",
    "sh": ".sh",
    "bash": ".sh",
    "markdown": ".md",
    "toml": ".toml",
}


@dataclass
class Result:
    """One analysis of one document version."""

    uri: str
    """The document."""
    version: int | None
    """The document version analysed."""
    generation: int
    """The settings generation it was analysed with (bumped on every settings change)."""
    path: str
    """The path the parsers saw (spans carry it)."""
    analysis: "Analysis | None"
    """The analysis, or None when analysis itself failed unexpectedly."""
    settings: "EffectiveSettings | None"
    """The effective settings it was analysed with."""
    elapsed_ms: float = 0.0
    """Wall time of the analysis."""
    plan_key: str | None = None
    """A digest of the resolved plan: trace results stay valid while it is unchanged."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Per-result memo for features (e.g. the explain context)."""
    edit: int = 0
    """How many opens and changes of the document the server had seen (`Analyzer.edits`)."""

    @property
    def plan(self) -> "TrainingPlan | None":
        return self.analysis.plan if self.analysis is not None else None

    @property
    def resolution(self) -> "Resolution | None":
        return self.analysis.resolution if self.analysis is not None else None

    @property
    def error(self) -> str | None:
        """Why there is no estimate, when the analysis says."""
        return self.analysis.error if self.analysis is not None else None


def _lsp_lines(doc: TextDocument) -> LinesWithBreaks:
    """Replaces pygls' `TextDocument.lines` (`tuple(source.splitlines(True))`) for two reasons: `str.splitlines`
    also breaks at \\v, \\f, \\x1c-\\x1e, \\x85, U+2028 and U+2029 while editors (and LSP) break only at \\n,
    \\r\\n and \\r — after a form feed every position was off by a line and incremental edits landed in the wrong
    place — and a 10 MB file became half a million string objects (~40 MB) each time a position was converted."""
    return LineIndex(doc.source).with_breaks()


TextDocument.lines = property(_lsp_lines)  # type: ignore[assignment]


def document_path(doc: TextDocument) -> str:
    """The path to analyse a document as; untitled buffers get a suffix from their language id."""
    path = doc.path or doc.uri
    if not Path(path).suffix and doc.language_id in LANGUAGE_SUFFIX and not doc.uri.startswith("file:"):
        path += LANGUAGE_SUFFIX[doc.language_id]
    return path


def plan_digest(analysis: "Analysis | None") -> str | None:
    if analysis is None or analysis.resolution is None:
        return None
    return hashlib.sha1(analysis.resolution.resolved.model_dump_json().encode()).hexdigest()


class Analyzer:
    """The analyses of all open documents, and the scheduling of new ones."""

    def __init__(self, server: "VramlensServer", on_result: Callable[[Result], None]):
        self.server = server
        self.on_result = on_result
        self.results: dict[str, Result] = {}
        self.pending: dict[str, asyncio.Task] = {}
        self.generation = 0
        # uri → opens and changes seen. A client may reuse a version number (a didChange whose version is not
        # newer, a second didOpen at version 1): the version alone would keep the old text's result current.
        self.edits: dict[str, int] = {}
        self.debounce_s = DEBOUNCE_S
        self._last_change: float | None = None  # of any document
        self._recent: collections.deque[float] = collections.deque(maxlen=FLOOD_EDITS)

    # ---- current results -----------------------------------------------------------------------

    def cached(self, uri: str) -> Result | None:
        """The result for the document's current version and settings, if already computed."""
        doc = self.server.document(uri)
        result = self.results.get(uri)
        if doc is None or result is None:
            return None
        if uri in self.server.oversized and result.extra.get("too_large"):
            return result  # unread: its edits change nothing that was analysed
        if (
            result.version != doc.version
            or result.edit != self.edits.get(uri, 0)
            or result.generation != self.generation
        ):
            return None
        return result

    def is_current(self, result: Result) -> bool:
        """The result is of the document's text as it is now (same version, no edit since)."""
        doc = self.server.document(result.uri)
        return doc is not None and doc.version == result.version and result.edit == self.edits.get(result.uri, 0)

    def current(self, uri: str) -> Result | None:
        """The result for the document as it is now, analysing it if needed (None if not open)."""
        result = self.cached(uri)
        if result is not None:
            return result
        doc = self.server.document(uri)
        if doc is None:
            return None
        result = self._analyse(doc)
        self.results[uri] = result
        try:
            self.on_result(result)
        except Exception:
            log.exception("publishing the analysis of %s failed", uri)
        return result

    def _analyse(self, doc: TextDocument) -> Result:
        path = document_path(doc)
        settings = self.server.effective_settings(path if doc.uri.startswith("file:") else None)
        start = time.perf_counter()
        size = self.server.oversized.get(doc.uri)
        analysis: Analysis | None
        if size is not None:
            analysis = pipeline.too_large(path, size)
        else:
            analysis = pipeline.run(
                doc.source,
                path,
                settings,
                self.server.workspace_root(),
                self.server.read_open_file,
                self.server.hub_lookups(),
            )
            if notebooks.is_notebook_file(path, doc.source):  # an .ipynb opened as JSON text
                analysis = notebooks.as_file_positions(analysis, doc.source)
        elapsed = (time.perf_counter() - start) * 1000
        return Result(
            doc.uri,
            doc.version,
            self.generation,
            path,
            analysis,
            settings,
            elapsed,
            plan_digest(analysis),
            extra={"too_large": True} if size is not None else {},
            edit=self.edits.get(doc.uri, 0),
        )

    # ---- scheduling ----------------------------------------------------------------------------

    def opened(self, uri: str) -> None:
        """didOpen arrived (a document opened again may come back with the version it had)."""
        self.edits[uri] = self.edits.get(uri, 0) + 1
        self.schedule(uri, 0)

    def changed(self, uri: str) -> None:
        """An edit arrived. A lone keystroke is analysed at once; an edit that follows the previous one
        within `BURST_S` (pasting, multi-cursor, undo runs, key repeat) waits `debounce_s` so the burst
        costs one analysis."""
        self.edits[uri] = self.edits.get(uri, 0) + 1
        now = time.monotonic()
        last, self._last_change = self._last_change, now
        self._recent.append(now)
        # Any document's edit counts: when edits to many documents interleave (a flood the server falls behind
        # on), each document's own edits look far apart and every version was analysed, stale or not.
        burst = last is not None and now - last < BURST_S
        self.schedule(uri, self.debounce_s if burst else 0)

    def schedule(self, uri: str, delay: float) -> None:
        """Analyse `uri` after `delay` seconds, replacing (cancelling) a pending run."""
        old = self.pending.pop(uri, None)
        if old is not None and not old.done():
            old.cancel()
        self.pending[uri] = asyncio.ensure_future(self._run_later(uri, delay))

    async def _run_later(self, uri: str, delay: float) -> None:
        task = asyncio.current_task()
        try:
            if delay > 0:
                give_up = time.monotonic() + MAX_DEFER_S
                await asyncio.sleep(delay)
                while self._flooded() and time.monotonic() < give_up:
                    await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # let already-received edits land first
            await self.server.wait_for_settings()
            self.current(uri)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("analysis of %s failed", uri)
        finally:
            if self.pending.get(uri) is task:
                del self.pending[uri]

    def _flooded(self) -> bool:
        """Edits arrive back to back (queued edits the server is catching up on): a debounced analysis waits,
        since the version it would analyse is probably already superseded."""
        recent = self._recent
        return len(recent) == FLOOD_EDITS and time.monotonic() - recent[0] < FLOOD_S

    def invalidate_all(self) -> None:
        """Settings changed: every result is stale; re-analyse every open document."""
        self.generation += 1
        for uri in self.server.analysed_uris():
            self.schedule(uri, 0)

    def forget(self, uri: str) -> None:
        task = self.pending.pop(uri, None)
        if task is not None:
            task.cancel()
        self.results.pop(uri, None)
        self.edits.pop(uri, None)
