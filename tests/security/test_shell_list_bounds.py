"""Bash arrays, quoted argument lists, `X+=…` and `bash -c "…"` stay bounded: an array that doubles per line, one
copied on every line of a 2 MB script, a list that names itself through its variables, a string appended to on
every line, and `bash -c` strings nested 200 deep. What is bounded is counted (elements kept, words spliced,
levels read) and what a user sees is asserted (a value past a bound is unknown and said so); the large inputs run
in a child process under a 1 GiB address-space limit, as tests/security/test_resource_bombs.py does."""

from __future__ import annotations

import json
import resource
import shlex
import subprocess
import sys
import textwrap

from vramlens.formats import shell

LAUNCH = "deepspeed --module openrlhf.cli.train_sft --pretrain m/x"
ADDRESS_SPACE = 1 << 30


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def analyze_in_child(text: str) -> dict:
    """`shell.analyze` of `text` in a child process limited to ADDRESS_SPACE: the launch's argument count, the
    length of every array kept, and the issues."""
    code = textwrap.dedent("""
        import json, sys
        from vramlens.formats import shell
        script, issues = shell.analyze(sys.stdin.read(), "train.sh")
        print(json.dumps({"args": len(script.launch.args) if script.launch else None,
                          "unknown": sum(a.value is None for a in script.launch.args) if script.launch else None,
                          "arrays": [len(v.elements) for v in script.env.values() if v.elements is not None],
                          "issues": [i.message for i in issues]}))
    """)
    out = subprocess.run(
        [sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=600, preexec_fn=_limit
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_an_array_that_doubles_per_line_is_capped_and_unknown():
    text = "A=(x x)\n" + 'A+=("${A[@]}" "${A[@]}")\n' * 60 + LAUNCH + ' "${A[@]}"\n'
    script, issues = shell.analyze(text, "train.sh")
    assert len(script.env["A"].elements) <= shell.MAX_WORDS + 1  # 2**61 elements uncapped
    assert any(a.value is None for a in script.launch.args)
    assert any("treated as unknown" in i.message for i in issues), issues


def test_an_array_copied_on_every_line_splices_a_bounded_number_of_words():
    # 20,000 copies of 5,000 elements: 100 million words without the bound on spliced words
    text = "A=(" + "x " * 5000 + ")\n" + 'B=("${A[@]}")\n' * 20_000 + LAUNCH + ' "${B[@]}"\n'
    result = analyze_in_child(text)
    assert result["args"] is not None and result["args"] <= shell.MAX_WORDS + 10
    assert all(n <= shell.MAX_WORDS + 1 for n in result["arrays"])
    assert any("treated as unknown" in m for m in result["issues"]), result["issues"]


def test_a_huge_array_keeps_its_first_elements_and_the_plan_says_the_rest_was_not_read(tmp_path):
    text = "A=(" + "--x 1 " * 300_000 + ")\n" + LAUNCH + ' "${A[@]}"\n'
    result = analyze_in_child(text)
    assert result["arrays"] == [shell.MAX_WORDS + 1]
    path = tmp_path / "train.sh"
    path.write_text(text, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "vramlens", "plan", str(path), "--format", "json", "--no-resolve"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        preexec_fn=_limit,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    data = data[0] if isinstance(data, list) else data
    assert any(f"more than {shell.MAX_ARGS:,} arguments" in i["message"] for i in data["issues"]), data["issues"]


def test_a_list_that_doubles_through_its_variables_splits_a_bounded_number_of_levels():
    text = 'V0="a b"\n' + "".join(f'V{i}="$V{i - 1} $V{i - 1}"\n' for i in range(1, 60)) + "torchrun $V59 train.py\n"
    script, _ = shell.analyze(text, "train.sh")
    assert len(script.launch.args) <= 2 ** (shell.MAX_SPLICE_DEPTH + 1) + 2  # 2**60 words uncapped


def test_appending_to_a_string_on_every_line_is_capped_and_unknown():
    text = "X=abcdefgh\n" + 'X+="$X"\n' * 40 + "Y=a\n" + "Y+=abcdefgh\n" * 100_000 + LAUNCH + " --x $X --y $Y\n"
    result = analyze_in_child(text)
    assert any("treated as unknown" in m for m in result["issues"]), result["issues"]


CMD = "torchrun --nproc_per_node 8 train.py --model_name_or_path m/x --per_device_train_batch_size 2"


def test_bash_c_nesting_is_read_to_a_bounded_depth(monkeypatch):
    two = f"bash -c 'sh -c \"{CMD}\"'\n"
    script, _ = shell.analyze(two, "train.sh")
    assert script.launch is not None and script.launch.script.text == "train.py"
    monkeypatch.setattr(shell, "MAX_INLINE_DEPTH", 1)
    script, _ = shell.analyze(two, "train.sh")
    assert script.launch is None  # the second level is past the bound: not read


def test_bash_c_nested_many_levels_is_not_followed_past_the_bound():
    s = CMD
    for _ in range(9):  # each level quoted for the one around it, as bash needs
        s = "bash -c " + shlex.quote(s)
    script, _ = shell.analyze(s + "\n", "train.sh")
    assert script.launch is None


def test_many_bash_c_lines_are_each_read_once():
    text = "bash -c 'bash -c \"bash -c x\"'\n" * 60_000 + LAUNCH + "\n"
    result = analyze_in_child(text)
    assert result["args"] == 5
