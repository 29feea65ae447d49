"""Files beside a config that change how it is analysed, for the fuzzers: pin files (requirements*.txt,
pyproject.toml, uv.lock, poetry.lock, environment.yml) and project settings (`.vramlens.toml`,
`pyproject.toml [tool.vramlens]`).

`project_files()` draws a few of them: a real-shaped seed of each kind, broken the ways `seeds.mutate` breaks
configs, with values of the wrong type put in (a number where a list of requirements belongs, a table where a
version does), with nesting thousands of levels deep in each way TOML and YAML nest, or random text.
"""

from __future__ import annotations

from hypothesis import strategies as st
from seeds import ODD_VALUES, mutate, mutation

PIN = "transformers==4.48.1"
SEEDS: dict[str, list[str]] = {
    "requirements.txt": [
        f"# training\n{PIN}  # pinned\npeft>=0.13\n-r requirements-dev.txt\nbitsandbytes[cuda]==0.45.0 ; "
        "sys_platform=='linux'\ntorch==2.6.0\n",
        "--extra-index-url https://download.pytorch.org/whl/cu124\ntorch==2.4.1+cu124\n-e .\naccelerate===1.2.0\n",
    ],
    "requirements-dev.txt": ["-r requirements.txt\ntrl==0.12.1\n"],
    "pyproject.toml": [
        f'[project]\nname = "train"\ndependencies = ["{PIN}", "peft>=0.10"]\n'
        '[project.optional-dependencies]\nquant = ["bitsandbytes==0.45.0"]\n'
        '[dependency-groups]\ndev = ["trl==0.12.1", {include-group = "quant"}]\n'
        '[tool.poetry.dependencies]\naccelerate = "1.2.0"\ntorch = { version = "2.6.0", source = "pytorch" }\n'
        '[tool.vramlens]\ngpu = "A100-40GB"\ngpu-count = 2\nheadroom = 0.1\nseverity = { VL004 = "off" }\n',
        '[tool.vramlens]\ngpu = "H100"\n[tool.vramlens.severity]\nVL001 = "warning"\n',
    ],
    "uv.lock": [
        'version = 1\nrequires-python = ">=3.10"\n\n[[package]]\nname = "transformers"\nversion = "4.51.3"\n'
        'source = { registry = "https://pypi.org/simple" }\ndependencies = [\n    { name = "torch", marker = '
        "\"sys_platform == 'linux'\" },\n]\n"
        'wheels = [\n    { url = "https://x/t.whl", hash = "sha256:ab", size = 1 },\n]\n'
        '\n[[package]]\nname = "torch"\nversion = "2.6.0"\n',
    ],
    "poetry.lock": [
        '[[package]]\nname = "transformers"\nversion = "4.47.1"\ndescription = "x"\noptional = false\n'
        '[package.dependencies]\ntorch = ">=2.0"\n\n[metadata]\nlock-version = "2.0"\ncontent-hash = "ab"\n',
    ],
    "environment.yml": [
        "name: train\nchannels:\n  - pytorch\ndependencies:\n  - python=3.11\n  - pytorch::pytorch=2.4.1\n"
        f"  - pip\n  - pip:\n    - {PIN}\n    - peft>=0.13\n",
    ],
    ".vramlens.toml": [
        'gpu = "A100-40GB"\ngpu-count = 1\nheadroom = 0.1\n[severity]\nVL004 = "off"\n',
        'gpuCount = 8\nframework-versions = { transformers = "4.48.1" }\n',
    ],
}
NAMES = sorted(SEEDS)

TOML_VALUES = [
    "1",
    "-5",
    "5.0",
    "inf",
    "nan",
    "true",
    '"x"',
    f'"{PIN}"',
    "[]",
    "{}",
    "[1]",
    "[1, 'a', {b = 2}]",
    "{ a = 1 }",
    "{ version = 3 }",
    "1979-05-27",
    "07:32:00",
    "1979-05-27T07:32:00Z",
    "[[1], [[2]]]",
    '"""\nmulti\n"""',
    "'''raw'''",
    "0x" + "f" * 40,
    "9" * 400,
    '"' + "é" * 50 + '"',
]
DEPTHS = [65, 300, 2_000, 20_000]


def deep(kind: str, levels: int) -> str:
    """A line nesting `levels` deep: TOML arrays, inline tables, dotted keys, a table header; YAML flow."""
    if kind == "arrays":
        return "deep = " + "[" * levels + "]" * levels
    if kind == "inline tables":
        return "deep = " + "{ a = " * levels + "1" + " }" * levels
    if kind == "dotted key":
        return "deep" + ".a" * levels + " = 1"
    if kind == "table header":
        return "[deep" + ".a" * levels + "]"
    return "deep: " + "[" * levels + "]" * levels  # YAML flow (environment.yml)


def _wrong_type(text: str, where: float, value: str) -> str:
    """The value of the line at `where` (after `=` or `:`) replaced with `value`."""
    lines = text.split("\n")
    i = min(int(where * len(lines)), len(lines) - 1)
    for sep in ("=", ":"):
        if sep in lines[i]:
            lines[i] = lines[i].split(sep, 1)[0] + sep + " " + value
            break
    else:
        lines[i] = value
    return "\n".join(lines)


@st.composite
def project_file(draw) -> tuple[str, str]:
    """(file name, text) of one pin or project-settings file."""
    name = draw(st.sampled_from(NAMES))
    text = draw(st.sampled_from(SEEDS[name]))
    how = draw(st.sampled_from(["mutate", "wrong type", "wrong type", "deep", "random"]))
    if how == "mutate":
        text = mutate(text, draw(st.lists(mutation, min_size=1, max_size=3)))
    elif how == "wrong type":
        for _ in range(draw(st.integers(1, 3))):
            value = draw(st.sampled_from(TOML_VALUES + ODD_VALUES))
            text = _wrong_type(text, draw(st.floats(0, 1)), value)
    elif how == "deep":
        kind = draw(st.sampled_from(["arrays", "inline tables", "dotted key", "table header", "yaml flow"]))
        line = deep(kind, draw(st.sampled_from(DEPTHS)))
        lines = text.split("\n")
        at = draw(st.integers(0, len(lines)))
        text = "\n".join(lines[:at] + [line] + lines[at:])
    else:
        text = draw(st.text(max_size=400))
    return name, text


def project_files(max_files: int = 3):
    """A few pin and project-settings files, at most one of each name."""
    return st.lists(project_file(), min_size=1, max_size=max_files, unique_by=lambda f: f[0])
