"""Dump the DeepSpeed config files that training frameworks ship, as the frameworks ship them.

A config names one of these without the file beside it: ms-swift's `--deepspeed zero2` (its own JSON under
swift/config/ or swift/llm/ds_config/), axolotl's `deepspeed: deepspeed_configs/zero3_bf16.json` (fetched with
`axolotl fetch deepspeed_configs`), LLaMA-Factory's `deepspeed: examples/deepspeed/ds_z3_config.json`. vramlens then
reads the file the framework would load. Each file is read from a git checkout of the framework at a tag (never
imported, nothing executed) and written whole, with where it came from:

    python scripts/dump_deepspeed_presets.py [--mirrors /work/.mirror] \
        > server/vramlens/knowledge/data/deepspeed_presets.json

`--mirrors` holds bare clones as `<owner>+<name>/repo` (the layout `benchmarks/held_out.py` reads). Output:
{"presets": {name: {"source": "<repo> <tag> (<commit>) <path>", "contents": {...}}}}. A name is what a config
writes: ms-swift's preset names, or a packaged path (matched by its end).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

# (mirror, tag, path in the repository, the names configs use for it)
SOURCES: list[tuple[str, str, str, tuple[str, ...]]] = [
    # ms-swift 3.x/4.x: `--deepspeed zero2` (swift/arguments/base_args/… `_init_deepspeed`: one of zero0, zero1,
    # zero2, zero3, zero2_offload, zero3_offload, the file swift/config/<name>.json)
    *(
        ("modelscope+ms-swift", "v4.5.2", f"swift/config/{n}.json", (n,))
        for n in ("zero0", "zero1", "zero2", "zero3", "zero2_offload", "zero3_offload")
    ),
    # ms-swift 1.x/2.x (swift/llm/utils/argument.py v2.4.0 `handle_compatibility`'s deepspeed_mapping:
    # default-zero2 → zero2.json, default-zero3 → zero3.json, zero2-offload, zero3-offload)
    ("modelscope+ms-swift", "v2.4.0", "swift/llm/ds_config/zero2.json", ("default-zero2",)),
    ("modelscope+ms-swift", "v2.4.0", "swift/llm/ds_config/zero3.json", ("default-zero3",)),
    ("modelscope+ms-swift", "v2.4.0", "swift/llm/ds_config/zero2_offload.json", ("zero2-offload",)),
    ("modelscope+ms-swift", "v2.4.0", "swift/llm/ds_config/zero3_offload.json", ("zero3-offload",)),
    # axolotl deepspeed_configs/
    *(
        ("axolotl-ai-cloud+axolotl", "v0.18.0", f"deepspeed_configs/{n}.json", (f"deepspeed_configs/{n}.json",))
        for n in (
            "zero1",
            "zero2",
            "zero3",
            "zero3_bf16",
            "zero3_bf16_cpuoffload_all",
            "zero3_bf16_cpuoffload_params",
        )
    ),
    # LLaMA-Factory examples/deepspeed/
    *(
        ("hiyouga+LLaMA-Factory", "v0.9.5", f"examples/deepspeed/{n}.json", (f"examples/deepspeed/{n}.json",))
        for n in (
            "ds_z0_config",
            "ds_z2_config",
            "ds_z2_offload_config",
            "ds_z3_config",
            "ds_z3_offload_config",
            "ds_z3_fp8_config",
        )
    ),
]


def _git(mirrors: Path, mirror: str, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(mirrors / mirror / "repo"), *args], check=True, capture_output=True, text=True
    ).stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    args = ap.parse_args()
    presets: dict[str, dict] = {}
    for mirror, tag, path, names in SOURCES:
        commit = _git(args.mirrors, mirror, "rev-list", "-n", "1", tag).strip()
        contents = json.loads(_git(args.mirrors, mirror, "show", f"{commit}:{path}"))
        repo = mirror.replace("+", "/")
        for name in names:
            presets[name] = {"source": f"{repo} {tag} ({commit[:10]}) {path}", "contents": contents}
    json.dump({"presets": presets}, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
