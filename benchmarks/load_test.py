"""Load: 200 open documents and bursts of edits at typing speed, against `vramlens serve` over stdio.

1. Opens N documents (the examples, the shared corpus and the test fixtures, cycled) and waits for each one's
   diagnostics.
2. Bursts: R edits per second for D seconds, typed into one document at a time (switching every 25 edits, as
   a user moves between files): digits of a number typed and deleted, a comment typed. Every 5th tick a hover,
   every 10th a code lens and an inlay-hint request on the document being edited.
3. Waits until every edited document's last version has its diagnostics.

Prints the latency of requests during the burst (send → answer), of diagnostics (edit → diagnostics of that
version, for the versions that were analysed; the others were superseded by the next edit and cancelled),
how many versions were analysed, and the server's RSS before and after each burst (flat memory: the second
burst ends where the first did).

    python benchmarks/load_test.py [--docs 200] [--rate 50] [--seconds 10] [--bursts 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fuzz"))

from lsp_wire import Server  # noqa: E402

SOURCES = (REPO / "examples", REPO / ".." / "shared" / "corpus", REPO / "tests" / "fixtures")
LANGUAGE = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".py": "python", ".sh": "shellscript", ".md": "markdown"}


@dataclass
class BurstReport:
    edits: int = 0
    analysed: int = 0  # versions that got their own diagnostics
    request_ms: list[float] = field(default_factory=list)
    diagnostics_ms: list[float] = field(default_factory=list)
    settle_ms: float = 0.0  # last edit → diagnostics of every document's last version
    rss_before_mib: float = 0.0
    rss_after_mib: float = 0.0
    unanswered: int = 0
    errors: int = 0
    out_of_order: int = 0  # an older version's diagnostics published after a newer one's


@dataclass
class LoadReport:
    docs: int
    open_s: float
    rss_start_mib: float
    bursts: list[BurstReport]
    alive: bool


def documents(n: int) -> list[tuple[str, str]]:
    files = []
    for folder in SOURCES:
        if folder.is_dir():
            files += sorted(p for p in folder.rglob("*") if p.suffix in LANGUAGE and p.is_file())
    out = []
    for i in range(n):
        p = files[i % len(files)]
        out.append((f"d{i:03d}_{p.name}", p.read_text(encoding="utf-8", errors="replace")))
    return out


def _edit_texts(text: str, count: int) -> list[str]:
    """`count` successive texts, as typed: a digit inserted and deleted after the first number, then a comment
    typed at the end, character by character."""
    out = []
    digit = next((i + 1 for i, c in enumerate(text) if c.isdigit()), None)
    comment = "# vramlens load test: typing a comment here "
    typed = 0
    for k in range(count):
        if digit is not None and k % 4 < 2:
            text = text[:digit] + "0" + text[digit:] if k % 4 == 0 else text[:digit] + text[digit + 1 :]
        else:
            if typed == 0:
                text = text if text.endswith("\n") else text + "\n"
            text += comment[typed % len(comment)]
            typed += 1
        out.append(text)
    return out


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def run_load(
    docs: int = 200, rate: float = 50, seconds: float = 10, bursts: int = 2, workspace: Path | None = None
) -> LoadReport:
    own = workspace is None
    tmp = tempfile.TemporaryDirectory() if own else None
    ws = Path(tmp.name) if own else workspace
    try:
        return _run(ws, docs, rate, seconds, bursts)
    finally:
        if tmp is not None:
            tmp.cleanup()


def _run(ws: Path, n_docs: int, rate: float, seconds: float, n_bursts: int) -> LoadReport:
    docs = documents(n_docs)
    with Server(workspace=ws) as s:
        s.initialize()
        t0 = time.perf_counter()
        uris = []
        for name, text in docs:
            uri = (ws / name).as_uri()
            uris.append(uri)
            s.open(uri, text, LANGUAGE.get(Path(name).suffix, "plaintext"))
        for uri in uris:
            s.diagnostics(uri, 1, timeout=120)
        open_s = time.perf_counter() - t0
        time.sleep(1.0)
        rss_start = s.rss_mib()
        reports = []
        for b in range(n_bursts):
            reports.append(_burst(s, uris, rate, seconds, offset=b * 7))
        return LoadReport(n_docs, open_s, rss_start, reports, s.alive)


def _burst(s: Server, uris: list[str], rate: float, seconds: float, offset: int) -> BurstReport:
    rep = BurstReport(rss_before_mib=s.rss_mib())
    ticks = int(rate * seconds)
    per_doc = 25
    plans: dict[str, list[str]] = {}
    sent_at: dict[tuple[str, int], float] = {}
    requests: list[tuple[int, float]] = []
    mark = len(s.notifications)
    start = time.perf_counter()
    for k in range(ticks):
        target = start + k / rate
        now = time.perf_counter()
        if target > now:
            time.sleep(target - now)
        uri = uris[(offset + k // per_doc) % len(uris)]
        if uri not in plans:
            plans[uri] = _edit_texts(s.texts[uri], ticks)
        text = plans[uri].pop(0)
        s.change(uri, text)
        sent_at[(uri, s.versions[uri])] = time.perf_counter()
        rep.edits += 1
        pos = {"line": k % 5, "character": 2}
        if k % 5 == 0:
            requests.append(
                (s.send("textDocument/hover", {"textDocument": {"uri": uri}, "position": pos}), time.perf_counter())
            )
        if k % 10 == 0:
            requests.append((s.send("textDocument/codeLens", {"textDocument": {"uri": uri}}), time.perf_counter()))
            requests.append(
                (
                    s.send(
                        "textDocument/inlayHint",
                        {
                            "textDocument": {"uri": uri},
                            "range": {"start": {"line": 0, "character": 0}, "end": {"line": 200, "character": 0}},
                        },
                    ),
                    time.perf_counter(),
                )
            )
    last_edit = time.perf_counter()
    for rid, t in requests:
        try:
            answer = s.wait(rid, timeout=60)
        except Exception:
            rep.unanswered += 1
            continue
        rep.errors += "error" in answer
        rep.request_ms.append((answer["_received"] - t) * 1000)
    final = {uri: s.versions[uri] for uri in plans}
    for uri, version in final.items():
        s.diagnostics(uri, version, after=mark, timeout=60)
    rep.settle_ms = (time.perf_counter() - last_edit) * 1000
    newest: dict[str, int] = {}
    for when, msg in s.notifications[mark:]:
        if msg["method"] != "textDocument/publishDiagnostics":
            continue
        p = msg["params"]
        key = (p["uri"], p.get("version"))
        if key in sent_at:
            rep.analysed += 1
            rep.diagnostics_ms.append((when - sent_at[key]) * 1000)
        if p.get("version") is not None:
            if p["version"] < newest.get(p["uri"], 0):
                rep.out_of_order += 1
            newest[p["uri"]] = max(newest.get(p["uri"], 0), p["version"])
    time.sleep(1.0)
    rep.rss_after_mib = s.rss_mib()
    return rep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--rate", type=float, default=50, help="edits per second")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--bursts", type=int, default=2)
    args = ap.parse_args()
    r = run_load(args.docs, args.rate, args.seconds, args.bursts)
    print(f"{r.docs} documents opened and analysed in {r.open_s:.1f} s; server RSS {r.rss_start_mib:.0f} MiB")
    for i, b in enumerate(r.bursts, 1):
        print(
            f"burst {i}: {b.edits} edits at {args.rate:g}/s for {args.seconds:g} s; {b.analysed} versions analysed, "
            f"{b.edits - b.analysed} superseded and cancelled"
        )
        print(
            f"  requests (hover/codeLens/inlayHint) n={len(b.request_ms)}: p50 {percentile(b.request_ms, 0.5):.1f} ms, "
            f"p99 {percentile(b.request_ms, 0.99):.1f} ms; unanswered {b.unanswered}, errors {b.errors}"
        )
        print(
            f"  edit → diagnostics n={len(b.diagnostics_ms)}: p50 {percentile(b.diagnostics_ms, 0.5):.1f} ms, "
            f"p99 {percentile(b.diagnostics_ms, 0.99):.1f} ms; settled {b.settle_ms:.0f} ms after the last edit; "
            f"out of order {b.out_of_order}"
        )
        print(f"  RSS before {b.rss_before_mib:.0f} MiB, after {b.rss_after_mib:.0f} MiB")
    print(f"server alive: {r.alive}")
    if r.bursts:
        all_req = [x for b in r.bursts for x in b.request_ms]
        print(
            f"all bursts: request p50 {percentile(all_req, 0.5):.1f} ms, p99 {percentile(all_req, 0.99):.1f} ms; "
            f"mean {statistics.fmean(all_req):.1f} ms"
        )


if __name__ == "__main__":
    main()
