"""Opening a file never runs anything from it. Python, shell, Markdown and YAML written as bait — os.system,
eval, command substitution, object-constructing tags, a module named like a dependency — are only read: a
marker file each would create never appears, whether the analysis, the CLI or the language server reads them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from lsp_wire import Server
from vramlens.analysis import Settings, analyze


def bait(marker: Path) -> dict[str, str]:
    m = str(marker)
    touch = f"touch {m}"
    return {
        "train.py": f"""import os, subprocess
from transformers import TrainingArguments
from evil_helpers import TrainingArguments as T2          # a workspace module: never imported
os.system("{touch}")
exec("open('{m}', 'w')")
args = TrainingArguments(
    output_dir=__import__("os").system("{touch}"),
    per_device_train_batch_size=eval("__import__('os').system('{touch}') or 4"),
    optim=subprocess.check_output(["{touch.split()[0]}", "{m}"]) and "adamw_torch",
    learning_rate=(lambda: open("{m}", "w"))() or 2e-5,
    **{{k: v for k, v in __import__("os").environ.items()}},
)
""",
        "run.sh": f"""#!/bin/bash
{touch}
export BS=$({touch}; echo 8)
LR=`{touch}`
eval "{touch}"
torchrun --nproc_per_node $({touch}) train.py --per_device_train_batch_size $BS --model_name_or_path gpt2 \\
    --output_dir "$({touch})" --optim `{touch}` --bf16
source ./evil.sh
. ./evil.sh
""",
        "evil.sh": f"{touch}\n",
        "README.md": f"""# Training
```bash
{touch}
accelerate launch --config_file $({touch}) train.py --per_device_train_batch_size 4 --model_name_or_path gpt2
```
```python
import os; os.system("{touch}")
from trl import SFTConfig
SFTConfig(per_device_train_batch_size=__import__("os").system("{touch}"))
```
""",
        "cfg.yaml": (
            f"model_name_or_path: !!python/object/apply:os.system ['{touch}']\nper_device_train_batch_size: 2\n"
        ),
        "cfg2.yaml": f"model_name_or_path: gpt2\noptim: !!python/name:os.system\nper_device_train_batch_size: 2\n"
        f"deepspeed: !!python/object/new:subprocess.Popen [['{touch.split()[0]}', '{m}']]\n",
        "evil_helpers.py": f"open('{m}', 'w').write('imported')\n",
    }


@pytest.fixture
def workspace(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    marker = tmp_path / "ran"
    for name, text in bait(marker).items():
        (ws / name).write_text(text)
    # modules named like what vramlens imports: a server started in this folder must not import them
    for shadow in ("yaml.py", "pydantic.py", "pygls.py", "lsprotocol.py", "json.py", "ast.py", "shlex.py"):
        (ws / shadow).write_text(f"open({str(marker)!r}, 'w').write({shadow!r})\nraise ImportError('shadowed')\n")
    return ws, marker


def test_the_analysis_only_reads_bait(workspace):
    ws, marker = workspace
    for name in ("train.py", "run.sh", "README.md", "cfg.yaml", "cfg2.yaml", "evil.sh", "evil_helpers.py"):
        analyze((ws / name).read_text(), str(ws / name), Settings(gpu="A100-80GB", workspace=ws))
    assert not marker.exists(), marker.read_text()


def test_the_cli_in_the_repository_only_reads_bait(workspace):
    ws, marker = workspace
    for command in (["vramlens"], [sys.executable, "-m", "vramlens"]):
        out = subprocess.run(
            [*command, "check", "--gpu", "A100-80GB", "."], cwd=ws, capture_output=True, text=True, timeout=300
        )
        assert "Traceback" not in out.stderr, out.stderr
        assert not marker.exists(), (command, marker.read_text())


def test_the_server_started_in_the_repository_only_reads_bait(workspace):
    ws, marker = workspace
    with Server(workspace=ws) as s:  # cwd = the workspace, as an editor starting `python -m vramlens` does
        s.initialize()
        for name in ("train.py", "run.sh", "README.md", "cfg.yaml", "cfg2.yaml"):
            uri = (ws / name).as_uri()
            mark = len(s.notifications)
            s.open(
                uri,
                (ws / name).read_text(),
                {"py": "python", "sh": "shellscript", "md": "markdown"}.get(name.rsplit(".", 1)[1], "yaml"),
            )
            diags = s.diagnostics(uri, 1, after=mark)["params"]["diagnostics"]
            assert all("internal error" not in d["message"] for d in diags), diags
            s.request(
                "textDocument/codeAction",
                {
                    "textDocument": {"uri": uri},
                    "range": {"start": {"line": 0, "character": 0}, "end": {"line": 20, "character": 0}},
                    "context": {"diagnostics": diags},
                },
            )
        assert s.alive
        assert "shadowed" not in s.stderr_tail(200)
    assert not marker.exists(), marker.read_text()
