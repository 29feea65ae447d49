"""The `PYTORCH_CUDA_ALLOC_CONF` grammar: comma-separated `key:value` options.

Read from PyTorch's allocator-config parser (`c10/cuda/CUDAAllocatorConfig.cpp`, later
`c10/core/AllocatorConfig.cpp`) and the CUDA-semantics docs: an unknown key is an error
("Unrecognized CachingAllocator option"); `max_split_size_mb` must be > 20 (the 20 MiB large-block
size); `garbage_collection_threshold` must lie strictly between 0 and 1; `roundup_power2_divisions` is
a power of two or a bracketed `[size_mb:divisions, ..., >:divisions]` list; `pinned_num_register_threads`
is a power of two up to 128; booleans are `True`/`False`; `backend` is `native` or `cudaMallocAsync`.
Whitespace around tokens is ignored.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

BOOL_WORDS = ("True", "False", "true", "false")
KNOWN_KEYS = (
    "expandable_segments",
    "max_split_size_mb",
    "garbage_collection_threshold",
    "roundup_power2_divisions",
    "backend",
    "pinned_use_cuda_host_register",
    "pinned_num_register_threads",
    "release_lock_on_cudamalloc",
)
# Options of newer PyTorch releases that are accepted without checking their values.
NEWER_KEYS = (
    "max_non_split_rounding_mb",
    "pinned_use_background_threads",
    "pinned_reserve_segment_size_mb",
    "graph_capture_record_stream_reuse",
    "per_process_memory_fraction",
    "expandable_segments_handle_type",
)


@dataclass(frozen=True)
class ConfError:
    """One problem in the value: the message, where it is (character offsets into the value), a fix."""

    message: str
    start: int
    end: int
    replacement: str | None = None  # corrected text for [start, end), when one is obvious


@dataclass(frozen=True)
class Option:
    key: str
    value: str
    start: int  # offset of the key in the value string
    end: int  # offset after the value


def split_options(conf: str) -> list[Option]:
    """Split at top-level commas (not inside `[...]`); offsets point into `conf`."""
    out: list[Option] = []
    depth, start = 0, 0
    for i, ch in enumerate(conf + ","):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            raw = conf[start:i]
            lead = len(raw) - len(raw.lstrip())
            body = raw.strip()
            if body:
                key, _, value = body.partition(":")
                out.append(Option(key.strip(), value.strip() if _ else "\0", start + lead, start + lead + len(body)))
            start = i + 1
    return out


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _int(text: str) -> int | None:
    return int(text) if re.fullmatch(r"\d+", text) else None


def check(conf: str) -> list[ConfError]:
    """Every syntax or range error in an allocator-config value."""
    errors: list[ConfError] = []
    for opt in split_options(conf):
        key, value = opt.key, opt.value
        if value == "\0" and "=" in key:
            name, _, val = key.partition("=")
            fixed = f"{name.strip()}:{val.strip()}"
            errors.append(ConfError(f"`{key}` uses `=`: options are written `key:value`", opt.start, opt.end, fixed))
            continue
        if value == "\0":
            errors.append(ConfError(f"`{key}` has no value: options are written `key:value`", opt.start, opt.end))
            continue
        if key not in KNOWN_KEYS and key not in NEWER_KEYS:
            close = difflib.get_close_matches(key.lower(), KNOWN_KEYS + NEWER_KEYS, n=1, cutoff=0.6)
            hint = f" — did you mean `{close[0]}`?" if close else ""
            errors.append(
                ConfError(
                    f"unknown allocator option `{key}`{hint}",
                    opt.start,
                    opt.start + len(key),
                    close[0] if close else None,
                )
            )
            continue
        problem = _check_value(key, value)
        if problem:
            message, replacement = problem
            vstart = opt.end - len(value)
            errors.append(ConfError(message, vstart, opt.end, replacement))
    return errors


def _check_value(key: str, value: str) -> tuple[str, str | None] | None:
    if key in ("expandable_segments", "pinned_use_cuda_host_register", "release_lock_on_cudamalloc"):
        if value not in BOOL_WORDS:
            fixed = {"1": "True", "0": "False", "yes": "True", "no": "False", "on": "True", "off": "False"}
            return f"`{key}` takes True or False, got `{value}`", fixed.get(value.lower())
    elif key == "max_split_size_mb":
        n = _int(value)
        if n is None:
            return f"`max_split_size_mb` takes a whole number of MiB, got `{value}`", None
        if n <= 20:
            return f"`max_split_size_mb` must be more than 20 (MiB), got {n}", None
    elif key == "garbage_collection_threshold":
        try:
            f = float(value)
        except ValueError:
            return f"`garbage_collection_threshold` takes a number between 0 and 1, got `{value}`", None
        if not 0.0 < f < 1.0:
            return f"`garbage_collection_threshold` must be strictly between 0 and 1, got {value}", None
    elif key == "roundup_power2_divisions":
        if value.startswith("["):
            if not value.endswith("]"):
                return "`roundup_power2_divisions` list is missing its closing `]`", None
            for item in filter(None, (p.strip() for p in value[1:-1].split(","))):
                size, _, div = item.partition(":")
                size, div = size.strip(), div.strip()
                size_mb, divisions = _int(size), _int(div)
                if (
                    (size != ">" and not (size_mb and _power_of_two(size_mb)))
                    or divisions is None
                    or (divisions and not _power_of_two(divisions))
                ):
                    return (
                        f"`roundup_power2_divisions` entries are `size_mb:divisions` with powers of two "
                        f"(or `>:divisions`), got `{item}`"
                    ), None
        else:
            n = _int(value)
            if n is None or not _power_of_two(n):
                return f"`roundup_power2_divisions` must be a power of two, got `{value}`", None
    elif key == "backend":
        if value not in ("native", "cudaMallocAsync"):
            close = difflib.get_close_matches(value, ("native", "cudaMallocAsync"), n=1, cutoff=0.5)
            return f"`backend` is `native` or `cudaMallocAsync`, got `{value}`", (close[0] if close else None)
    elif key == "pinned_num_register_threads":
        n = _int(value)
        if n is None or not _power_of_two(n) or n > 128:
            return f"`pinned_num_register_threads` must be a power of two up to 128, got `{value}`", None
    return None


def repaired(conf: str) -> str | None:
    """The value with every error that has an obvious replacement corrected; None when some error has none."""
    errors = check(conf)
    if not errors or any(e.replacement is None for e in errors):
        return None
    out = conf
    for e in sorted(errors, key=lambda e: e.start, reverse=True):
        out = out[: e.start] + (e.replacement or "") + out[e.end :]  # none is None (above)
    return out


def with_expandable_segments(conf: str | None) -> str:
    """`conf` with `expandable_segments:True` set (replacing an existing expandable_segments option)."""
    options = [o for o in split_options(conf or "") if o.key != "expandable_segments"]
    parts = ["expandable_segments:True"] + [f"{o.key}:{o.value}" if o.value != "\0" else o.key for o in options]
    return ",".join(parts)


def expandable_segments_on(conf: str | None) -> bool:
    return any(o.key == "expandable_segments" and o.value.lower() == "true" for o in split_options(conf or ""))
