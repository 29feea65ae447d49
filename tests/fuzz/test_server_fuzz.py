"""The running server (`vramlens serve` over stdio) on broken real configs typed as edits: every request is
answered, the server stays up, every diagnostic, inlay hint, lens, completion and edit range lies inside
the document the server had, and every offered edit applies."""

from __future__ import annotations

from pathlib import Path

import pytest
from bounds import Doc, apply_lsp_edits
from fuzzing import count, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from lsp_wire import Server, ServerError
from seeds import documents, edit_script, mutation, seeds

LANGUAGE = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".py": "python", ".sh": "shellscript", ".md": "markdown"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    ws = tmp_path_factory.mktemp("ws")
    (ws / "ds.json").write_text('{"zero_optimization": {"stage": 3}}')
    with Server(workspace=ws, initialization_options={"trusted": False}) as s:
        s.initialize()
        s.ws = ws
        yield s


def _check_range(doc: Doc, rng: dict, what: str) -> None:
    problem = doc.lsp_range_problem(rng)
    assert problem is None, f"{what}: {rng}: {problem}"


def _edits_for(uri: str, edit: dict | None) -> list[dict]:
    if not edit:
        return []
    out = list((edit.get("changes") or {}).get(uri, []))
    for change in edit.get("documentChanges") or []:
        if change.get("textDocument", {}).get("uri") == uri:
            out.extend(change["edits"])
    return out


def session(s: Server, name: str, texts: list[str], probes: list[tuple[float, float]], n: int) -> None:
    uri = (s.ws / f"doc{n}_{name}").as_uri()
    mark = len(s.notifications)
    s.open(uri, texts[0], LANGUAGE.get(Path(name).suffix, "plaintext"))
    for i, text in enumerate(texts[1:]):
        s.change(uri, text, incremental=i % 3 != 2)
    text, version = s.texts[uri], s.versions[uri]
    doc = Doc(text)

    # requests: hover/completion at probe positions (some past the end), the lenses, hints and actions
    def pos(p: tuple[float, float]) -> dict:
        line = int(p[0] * (len(doc.lines) + 1))
        length = doc.line_len(min(line, len(doc.lines) - 1), utf16=True)
        return {"line": line, "character": int(p[1] * (length + 2))}

    whole = {
        "start": {"line": 0, "character": 0},
        "end": {"line": len(doc.lines) - 1, "character": doc.line_len(len(doc.lines) - 1, utf16=True)},
    }
    ids = {}
    for k, p in enumerate(probes):
        ids[("hover", k)] = s.send("textDocument/hover", {"textDocument": {"uri": uri}, "position": pos(p)})
        ids[("completion", k)] = s.send("textDocument/completion", {"textDocument": {"uri": uri}, "position": pos(p)})
    ids["lens"] = s.send("textDocument/codeLens", {"textDocument": {"uri": uri}})
    ids["hints"] = s.send("textDocument/inlayHint", {"textDocument": {"uri": uri}, "range": whole})
    diags = s.diagnostics(uri, version, after=mark)["params"]["diagnostics"]
    for d in diags:
        _check_range(doc, d["range"], f"diagnostic {d.get('code')}")
        for rel in d.get("relatedInformation") or []:
            if rel["location"]["uri"] == uri:
                _check_range(doc, rel["location"]["range"], "related information")
    ids["actions"] = s.send(
        "textDocument/codeAction", {"textDocument": {"uri": uri}, "range": whole, "context": {"diagnostics": diags}}
    )
    if diags:
        ids["actions-at"] = s.send(
            "textDocument/codeAction",
            {"textDocument": {"uri": uri}, "range": diags[0]["range"], "context": {"diagnostics": diags[:1]}},
        )

    answers = {key: s.wait(rid) for key, rid in ids.items()}
    errors = {key: a["error"] for key, a in answers.items() if "error" in a}
    assert not errors, errors
    for key, answer in answers.items():
        result = answer.get("result")
        kind = key[0] if isinstance(key, tuple) else key
        if kind == "hover" and result and result.get("range"):
            _check_range(doc, result["range"], "hover")
        elif kind == "completion" and result:
            for item in (result.get("items") if isinstance(result, dict) else result) or []:
                edit = item.get("textEdit")
                if edit:
                    _check_range(doc, edit.get("range") or edit.get("replace"), f"completion {item['label']}")
        elif kind == "lens":
            for lens in result or []:
                _check_range(doc, lens["range"], "code lens")
        elif kind == "hints":
            for hint in result or []:
                p = hint["position"]
                _check_range(doc, {"start": p, "end": p}, "inlay hint")
        elif kind.startswith("actions"):
            for action in result or []:
                edits = _edits_for(uri, action.get("edit"))
                for e in edits:
                    _check_range(doc, e["range"], f"action {action['title']!r}")
                apply_lsp_edits(text, edits)  # raises on overlap or a range outside
    s.close(uri)
    assert s.alive


probes = st.lists(st.tuples(st.floats(0, 1.2), st.floats(0, 1.2)), min_size=1, max_size=3)
_session_number = iter(range(10**9))


@fuzz_settings(1000)
@given(doc=documents(max_mutations=3), edits=st.lists(mutation, max_size=3), probes=probes)
def test_server_survives_mutated_documents(server: Server, doc, edits, probes):
    name, text = doc
    texts = [text, *edit_script(text, edits)]
    try:
        session(server, name, texts, probes, next(_session_number))
    except ServerError as exc:
        pytest.fail(f"{exc}\nserver log:\n{server.stderr_tail()}")
    count("server session")


def test_every_seed_in_the_server(server: Server):
    """Each corpus file opened as is, then typed into from empty (an edit per line)."""
    for n, seed in enumerate(seeds()[:60]):
        lines = seed.text.splitlines(keepends=True)
        step = max(1, len(lines) // 8)
        texts = ["", *("".join(lines[:k]) for k in range(step, len(lines), step)), seed.text]
        session(server, seed.name, texts, [(0.5, 0.5)], 10**6 + n)
    count("server session", 60)
