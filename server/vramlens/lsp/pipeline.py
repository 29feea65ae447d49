"""The one place the server calls the analysis pipeline (`vramlens.analysis.analyze`).

The server never computes memory itself: it hands the text, the path and the effective settings to
`analyze` and converts what comes back.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from vramlens.lsp.config import EffectiveSettings
from vramlens.settings import Settings

if TYPE_CHECKING:
    from vramlens.analysis import Analysis

log = logging.getLogger(__name__)


def analysis_settings(
    settings: EffectiveSettings,
    workspace: Path | None,
    read_file: Callable[[Path], str | None] | None = None,
    hub_lookup: Callable[[str], Any] | None = None,
) -> Settings:
    """The document's settings with the run's context (workspace root, how to read open buffers, how to ask the
    Hub without waiting); a model folder outside the workspace is read, and the Hub asked for a model a file
    names, only in a trusted workspace (an untrusted repository cannot make the editor reach the network)."""
    trusted = settings.values.trusted
    return settings.values.model_copy(
        update={
            "workspace": workspace,
            "read_file": read_file,
            "hub_lookup": hub_lookup,
            "model_lookup": settings.values.model_lookup and trusted,
            "any_model_folder": trusted,
        }
    )


def run(
    text: str,
    path: str,
    settings: EffectiveSettings,
    workspace: Path | None,
    read_file: Callable[[Path], str | None] | None = None,
    hub_lookup: Callable[[str], Any] | None = None,
) -> "Analysis | None":
    """`analysis.analyze` for one document; None when the pipeline itself failed (a bug, logged)."""
    # Imported on first use, not with this module: the server answers `initialize` before the pipeline loads.
    from vramlens.analysis import analyze

    if workspace is None and Path(path).is_absolute():
        workspace = Path(path).parent  # no workspace folder: the document's folder bounds what is read
    try:
        return analyze(text, path, analysis_settings(settings, workspace, read_file, hub_lookup))
    except Exception:
        log.exception("analysis of %s failed", path)
        return None


def max_document_chars() -> int:
    """`analysis.MAX_DOCUMENT_CHARS` (imported when first needed: the server starts without the pipeline)."""
    from vramlens.analysis import MAX_DOCUMENT_CHARS

    return MAX_DOCUMENT_CHARS


def too_large(path: str, size: int) -> "Analysis":
    """The analysis of an open document whose text was too large to keep (`analysis.too_large`)."""
    from vramlens.analysis import too_large as make

    return make(path, size)
