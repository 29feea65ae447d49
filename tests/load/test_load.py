"""The server under load (benchmarks/load_test.py, shorter): 200 open documents, bursts of edits at 50 per
second and a flood as fast as the pipe takes them. It stays up, answers every request, ends with diagnostics
for every document's last version, never publishes an older version after a newer one, and its memory
stays flat. Latencies are printed by the benchmark, not asserted here."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests" / "fuzz")]

import load_test  # noqa: E402
from lsp_wire import Server  # noqa: E402


def test_two_hundred_documents_and_bursts_of_edits(tmp_path):
    report = load_test.run_load(docs=200, rate=50, seconds=3, bursts=2, workspace=tmp_path)
    assert report.alive
    for burst in report.bursts:
        assert burst.edits == 150
        assert burst.unanswered == 0 and burst.errors == 0
        assert burst.out_of_order == 0
        assert 1 <= burst.analysed <= burst.edits
    first, second = report.bursts
    assert second.rss_after_mib - first.rss_after_mib < 20, (first.rss_after_mib, second.rss_after_mib)
    assert second.rss_after_mib - report.rss_start_mib < 60, (report.rss_start_mib, second.rss_after_mib)


def test_a_flood_of_edits_is_coalesced_and_the_last_version_wins(tmp_path):
    docs = load_test.documents(20)
    with Server(workspace=tmp_path) as s:
        s.initialize()
        uris = []
        for name, text in docs:
            uri = (tmp_path / name).as_uri()
            uris.append(uri)
            s.open(uri, text, load_test.LANGUAGE.get(Path(name).suffix, "plaintext"))
        for uri in uris:
            s.diagnostics(uri, 1)
        rss_before = s.rss_mib()
        mark = len(s.notifications)
        plans = {uri: load_test._edit_texts(s.texts[uri], 100) for uri in uris}
        for k in range(100):  # 2,000 edits with no pause, documents interleaved
            for uri in uris:
                s.change(uri, plans[uri][k])
        hover = s.request(
            "textDocument/hover", {"textDocument": {"uri": uris[0]}, "position": {"line": 0, "character": 1}}
        )
        assert hover is None or "contents" in hover
        for uri in uris:
            s.diagnostics(uri, s.versions[uri], after=mark)
        published = [m for _, m in s.notifications[mark:] if m["method"] == "textDocument/publishDiagnostics"]
        assert len(published) < 2000  # superseded versions were cancelled, not queued
        newest: dict[str, int] = {}
        for m in published:
            v = m["params"]["version"]
            assert v >= newest.get(m["params"]["uri"], 0), "an older version was published after a newer one"
            newest[m["params"]["uri"]] = v
        assert s.alive
        assert s.rss_mib() - rss_before < 50
