"""The YAML/JSON loader: the same data as the frameworks' loaders, exact spans, and the YAML pitfalls of
docs/config-sources.md."""

from __future__ import annotations

import datetime
import json

import pytest
import yaml
from vramlens.formats.yaml_doc import YamlError, load_yaml


def entries(text: str, file: str = "c.yaml") -> dict:
    _, settings = load_yaml(text, file)
    return {s.path: s for s in settings}


def cut(text: str, span) -> str:
    lines = text.split("\n")
    assert span.start_line == span.end_line
    return lines[span.start_line][span.start_col : span.end_col]


def test_every_corpus_file_loads_like_the_frameworks_loaders(corpus):
    checked = 0
    for path in sorted(corpus.rglob("*")):
        if path.suffix not in (".yaml", ".yml", ".json"):
            continue
        text = path.read_text(encoding="utf-8")
        data, _ = load_yaml(text, str(path))
        expected = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        assert data == expected, path.name
        checked += 1
    assert checked >= 160


def test_yaml_1_1_scalars_are_read_as_pyyaml_reads_them():
    text = (
        "lr: 2e-5\nlr2: 2.0e-5\nsteps: 500_000\nflag: no\nmp: 'no'\nup: On\nempty:\nnothing: null\n"
        "tilde: ~\noct: 010\nday: 2024-01-02\n"
    )
    data, _ = load_yaml(text, "c.yaml")
    assert data == {
        "lr": "2e-5",
        "lr2": 2e-5,
        "steps": 500000,
        "flag": False,
        "mp": "no",
        "up": True,
        "empty": None,
        "nothing": None,
        "tilde": None,
        "oct": 8,
        "day": datetime.date(2024, 1, 2),
    }


def test_json_numbers_follow_json_not_yaml():
    data, _ = load_yaml('{"sub_group_size": 1e9, "lr": 2e-5, "n": 3, "auto": "auto"}', "ds.json")
    assert data == {"sub_group_size": 1e9, "lr": 2e-5, "n": 3, "auto": "auto"}
    assert isinstance(data["sub_group_size"], float)


def test_json_with_tabs_and_comments_keeps_positions():
    text = '{\n\t"a": 1, // one\n\t/* block */ "b": "x//y"\n}\n'
    data, settings = load_yaml(text, "c.jsonc")
    assert data == {"a": 1, "b": "x//y"}
    b = next(s for s in settings if s.key == "b")
    assert cut(text, b.value_span) == '"x//y"'


def test_spans_cover_key_value_and_entry():
    text = "model:\n  name: 'meta-llama/Llama-3.1-8B'   # the model\nbatch: 4\n"
    e = entries(text)
    name = e[("model", "name")]
    assert cut(text, name.value_span) == "'meta-llama/Llama-3.1-8B'"
    assert cut(text, name.key_span) == "name"
    assert (name.span.start_line, name.span.start_col) == (1, 2)
    batch = e[("batch",)]
    assert cut(text, batch.span) == "batch: 4"


def test_a_block_mapping_entry_ends_at_its_last_child_not_at_the_next_key():
    text = "a:\n  b: 1\n  c: [1, 2]\n\n# comment\nd: 2\n"
    a = entries(text)[("a",)]
    assert (a.span.end_line, a.span.end_col) == (2, 11)


def test_empty_value_has_a_zero_width_span_after_the_colon():
    text = "deepspeed:\nfsdp:   # off\n"
    e = entries(text)
    ds = e[("deepspeed",)]
    assert ds.value is None
    assert (ds.value_span.start_line, ds.value_span.start_col, ds.value_span.end_col) == (0, 10, 10)


def test_columns_count_characters():
    text = "note: 'größe'\nbatch: 4\n"
    batch = entries(text)[("batch",)]
    assert cut(text, batch.value_span) == "4"


def test_anchors_and_merge_keys():
    text = "base: &b\n  micro_batch_size: 2\n  sequence_len: 1024\nrun:\n  <<: *b\n  sequence_len: 4096\n"
    data, settings = load_yaml(text, "c.yaml")
    assert data["run"] == {"micro_batch_size": 2, "sequence_len": 4096}
    paths = [s.path for s in settings]
    assert ("run", "micro_batch_size") in paths and ("run", "<<") not in paths
    assert sum(1 for p in paths if p == ("run", "sequence_len")) == 1


def test_an_alias_is_placed_where_it_is_written_not_at_its_anchor():
    """No corpus file uses anchors, so a loader that puts an alias at its anchor's text (what a composed node
    tree gives: the alias node is the anchored node) would pass every corpus comparison and still point
    diagnostics and fixes at the wrong line."""
    text = (
        "base: &b\n  micro_batch_size: 2\nlr: &lr 2.0e-5\nrun:\n  sequence_len: 4096\n  <<: *b\n"
        "other_lr: *lr\nsizes: [*lr, 3]\n"
    )
    got = entries(text)
    assert cut(text, got[("other_lr",)].value_span) == "*lr"
    assert got[("other_lr",)].value == 2.0e-5
    run = got[("run",)]  # a block mapping that ends with an alias ends at the alias
    assert (run.value_span.start_line, run.value_span.end_line, run.value_span.end_col) == (4, 5, 8)
    assert got[("run", "micro_batch_size")].value == 2
    assert cut(text, got[("run", "micro_batch_size")].key_span) == "micro_batch_size"  # the anchor's entry
    assert got[("run", "micro_batch_size")].key_span.start_line == 1
    key_alias = entries("a: &k key\n*k : 2\n")[("key",)]
    assert (key_alias.key_span.start_line, key_alias.key_span.start_col, key_alias.key_span.end_col) == (1, 0, 2)


def test_duplicate_keys_keep_the_last_value_and_are_reported():
    issues = []
    data, settings = load_yaml("micro_batch_size: 1\nmicro_batch_size: 8\n", "c.yaml", issues)
    assert data == {"micro_batch_size": 8}
    assert [s.value for s in settings if s.key == "micro_batch_size"] == [8]
    assert issues and "duplicate key" in issues[0].message and issues[0].span.start_line == 1


@pytest.mark.parametrize(
    "text,needle",
    [
        ("a: !!python/object/apply:os.system ['ls']\n", "is not read"),
        ("a: &x [*x]\n", "alias"),
        ("a: 1\n---\nb: 2\n", "single"),
        ("a: [1, 2\n", "syntax"),
    ],
)
def test_unsafe_or_broken_documents_raise_with_a_position(text, needle):
    with pytest.raises(YamlError) as err:
        load_yaml(text, "c.yaml")
    assert needle in str(err.value)
    assert err.value.span is not None and err.value.span.file == "c.yaml"


def test_alias_expansion_is_bounded():
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(
            f"{chr(97 + i)}: &{chr(97 + i)} " + "{" + ", ".join(f"k{j}: *{chr(96 + i)}" for j in range(10)) + "}"
        )
    with pytest.raises(YamlError, match="aliases"):  # a "billion laughs" document stops at a budget
        load_yaml("\n".join(lines) + "\n", "c.yaml")


def test_base_60_integers_are_read_up_to_a_size_then_refused_before_any_arithmetic():
    data, _ = load_yaml("a: 1:30\nb: -2:00:00\nc: 190:20:30.15\n", "c.yaml")
    assert data == yaml.safe_load("a: 1:30\nb: -2:00:00\nc: 190:20:30.15\n") == {"a": 90, "b": -7200, "c": 685230.15}
    for huge in ("1" + ":59" * 100_000, "9" * 5_000):
        with pytest.raises(YamlError, match="larger than any setting can use") as err:
            load_yaml(f"model: x\nmax_steps: {huge}\n", "c.yaml")
        assert err.value.span is not None and err.value.span.start_line == 1


def test_mappings_used_as_keys_get_short_names_however_deep():
    """`{{{…}}}`: each mapping is the key of the one around it. Its name was `str()` of the mapping, which quotes
    the inner key's name again at every level (the backslashes double), so 24 levels made an 8 MB key and the 50
    levels of a mutated config.json never finished (found by the long fuzz profile)."""
    for depth in (24, 99):
        data, _ = load_yaml("{" * depth + "}" * depth + "\n", "config.json")
        while isinstance(data, dict) and data:
            ((key, data),) = data.items()
            assert isinstance(key, str) and len(key) < 1_000
    data, _ = load_yaml("? [a, b]\n: 1\n? {x: 1}\n: 2\n", "c.yaml")
    assert data == {"['a', 'b']": 1, "{'x': 1}": 2}


@pytest.mark.parametrize(
    "text, merged",
    [
        # a later `<<` key wins over an earlier one (PyYAML 6.0.3's SafeConstructor.flatten_mapping)
        ("a: &a {lr: 1}\nb: &b {lr: 2}\nc:\n  <<: *a\n  <<: *b\n", {"lr": 2}),
        # within one `<<: [*a, *b]` the earlier mapping wins and the mapping's own keys win over both
        # (https://yaml.org/type/merge.html; PyYAML 6.0.3)
        ("a: &a {lr: 1, wd: 1}\nb: &b {lr: 2, bs: 2}\nc:\n  <<: [*a, *b]\n  wd: 3\n", {"lr": 1, "bs": 2, "wd": 3}),
        # a source written in place, alone or beside aliases
        ("c:\n  <<: {lr: 1, wd: 1}\n  wd: 3\n", {"lr": 1, "wd": 3}),
        ("a: &a {lr: 1}\nc:\n  <<: [*a, {bs: 4, lr: 9}]\n", {"lr": 1, "bs": 4}),
    ],
)
def test_merge_keys_resolve_as_the_merge_spec_says(text, merged):
    """PyYAML 6.0.4 merges by the identity of the key strings (one-character keys are one object in CPython,
    longer ones are not), so its result for these documents depends on the keys' length; vramlens follows the
    merge-key spec, as PyYAML did up to 6.0.3."""
    data, _ = load_yaml(text, "merge.yaml")
    assert data["c"] == merged
    if yaml.__version__ in ("5.4.1", "6.0", "6.0.1", "6.0.2", "6.0.3"):
        assert data == yaml.safe_load(text)


def test_an_inline_merge_source_places_its_keys_where_they_are_written():
    text = "run:\n  <<:\n    micro_batch_size: 2\n    sequence_len: 1024\n  sequence_len: 4096\n"
    data, settings = load_yaml(text, "c.yaml")
    assert data == yaml.safe_load(text) == {"run": {"micro_batch_size": 2, "sequence_len": 4096}}
    by_path = {s.path: s for s in settings}
    assert ("run", "<<") not in by_path and ("run", "<<", "micro_batch_size") not in by_path
    assert (
        by_path[("run", "micro_batch_size")].value == 2
        and by_path[("run", "micro_batch_size")].key_span.start_line == 2
    )
    assert [s.value for s in settings if s.path == ("run", "sequence_len")] == [4096]
