"""DeepSpeed's own values that a config leaves to it: ZeRO's sizes where the config does not write them, and the
config files training frameworks ship and name without the file beside the config (`data/deepspeed_presets.json`,
dumped from the frameworks' repositories by `scripts/dump_deepspeed_presets.py`)."""

from __future__ import annotations

import functools
import json
from importlib import resources

# ZeRO's sizes, in elements, where the config does not write them: the fields' defaults (deepspeed 0.19.8
# runtime/zero/config.py: reduce_bucket_size 5e8, stage3_prefetch_bucket_size 5e7, stage3_param_persistence_threshold
# 1e5, stage3_max_live_parameters and stage3_max_reuse_distance 1e9). An "auto" nothing fills is one of them too:
# `DeepSpeedConfigModel` drops every "auto" value before validating (runtime/config_utils.py
# `DeepSpeedConfigModel.__init__`), so the field's default holds.
ZERO_SIZE_DEFAULTS: dict[str, tuple[str, int]] = {  # concept: (the key, DeepSpeed's default)
    "zero_reduce_bucket": ("reduce_bucket_size", 5 * 10**8),
    "zero3_prefetch_bucket": ("stage3_prefetch_bucket_size", 5 * 10**7),
    "zero3_persistence_threshold": ("stage3_param_persistence_threshold", 10**5),
    "zero3_max_live_params": ("stage3_max_live_parameters", 10**9),
    "zero3_max_reuse_distance": ("stage3_max_reuse_distance", 10**9),
}


@functools.cache
def _presets() -> dict[str, dict]:
    data = resources.files("vramlens.knowledge.data").joinpath("deepspeed_presets.json").read_text(encoding="utf-8")
    return json.loads(data)["presets"]


def preset(target: str) -> tuple[str, dict] | None:
    """(where it comes from, the whole file) for a framework's preset name (ms-swift `zero3_offload`) or a packaged
    path (`deepspeed_configs/zero3_bf16.json`, matched by its end; `./` ignored)."""
    t = target.strip().replace("\\", "/")
    while t.startswith("./"):
        t = t[2:]
    presets = _presets()
    found = presets.get(t) or next((v for k, v in presets.items() if "/" in k and t.endswith("/" + k)), None)
    return None if found is None else (found["source"], found["contents"])
