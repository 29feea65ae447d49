"""A file a config names — a DeepSpeed JSON, a local model folder's config.json — is read only inside the
workspace, even while an entry on the way to it is being swapped between something inside and a link out of it:
the check holds across the open (`file_access.read_checked` checks the file it opened, not the path again).

A thread swaps the entry as fast as it can while the same document is analysed at least ROUNDS times, and until
the entry has been swapped at least ROUNDS times (however the two threads are scheduled). The path to the
file is DEPTH folders deep, so that resolving it (which the workspace check does) takes long enough for swaps to
land between the check and the open, and the interpreter switches threads often. Outside content must never reach
the plan or the estimate; before the swapping starts, the file inside is read (the reference works)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from vramlens.analysis import analyze
from vramlens.settings import Settings

ROUNDS = 80
DEADLINE_S = 120.0
DEPTH = 200
DEEP = "/".join(["d"] * DEPTH)
PAUSE_S = 0.0002
OUTSIDE_LAYERS = 77  # the outside config.json's num_hidden_layers (inside: 12)
OUTSIDE_ACCUM = 61  # the outside ds.json's gradient_accumulation_steps (inside: 3)
MODEL = {
    "model_type": "llama",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_attention_heads": 16,
    "num_hidden_layers": 12,
    "vocab_size": 32000,
    "torch_dtype": "bfloat16",
}
DS = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3, "zero_optimization": {"stage": 2}}


@dataclass
class Layout:
    """`ws/<ref>` leads to the file through `swapped`, which alternates between `inside` and `outside`."""

    ref: str
    swapped: Path
    inside: Path
    outside: Path
    real_folder: bool = False
    """`swapped` is a real folder (renamed away and back) rather than a link to one inside."""


def _layout(tmp_path: Path, kind: str, variant: str) -> tuple[Path, Path, Layout]:
    ws, out = tmp_path / "ws", tmp_path / "outside-the-workspace"
    name = "ds.json" if kind == "deepspeed" else "config.json"
    inside_body = json.dumps(DS if kind == "deepspeed" else MODEL)
    outside_body = json.dumps(
        {**DS, "gradient_accumulation_steps": OUTSIDE_ACCUM, "zero_optimization": {"stage": 3}}
        if kind == "deepspeed"
        else {**MODEL, "num_hidden_layers": OUTSIDE_LAYERS}
    )

    def put(folder: Path, body: str) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(body)
        return folder / name

    if variant == "folder":  # ws/sub → ws/real | outside; the file deep below it
        put(ws / "real" / DEEP, inside_body)
        put(out / DEEP, outside_body)
        layout = Layout(f"sub/{DEEP}", ws / "sub", ws / "real", out)
    elif variant == "real folder":  # ws/sub: a real folder, then a link to outside, then the folder again
        put(ws / "real" / DEEP, inside_body)
        put(out / DEEP, outside_body)
        layout = Layout(f"sub/{DEEP}", ws / "sub", ws / "real", out, real_folder=True)
    elif variant == "file":  # ws/<deep>/m/<name> → ws/real/<name> | outside/<name>
        layout = Layout(f"{DEEP}/m", ws / DEEP / "m" / name, put(ws / "real", inside_body), put(out, outside_body))
        layout.swapped.parent.mkdir(parents=True)
    else:  # a middle component: ws/<deep>/mid → ws/real | outside; then b/<name>
        put(ws / "real" / "b", inside_body)
        put(out / "b", outside_body)
        (ws / DEEP).mkdir(parents=True)
        layout = Layout(f"{DEEP}/mid/b", ws / DEEP / "mid", ws / "real", out)
    if kind == "deepspeed":
        text = (
            f"model_name_or_path: meta-llama/Llama-3.1-8B\nper_device_train_batch_size: 2\nbf16: true\n"
            f"deepspeed: {layout.ref}/{name}\n"
        )
    else:
        text = f"model_name_or_path: {layout.ref}\nper_device_train_batch_size: 2\nbf16: true\n"
    doc = ws / "train.yaml"
    doc.write_text(text)
    return ws, doc, layout


def _swap_link(link: Path, target: Path) -> None:
    tmp = link.with_name(link.name + ".swap")
    os.symlink(target, tmp)
    os.replace(tmp, link)


def _swapper(layout: Layout, stop: threading.Event, swaps: list[int]) -> None:
    """Swap until `stop`, pausing PAUSE_S in each state (which lets the analysis run in it); `swaps[0]` counts."""
    while not stop.is_set():
        if layout.real_folder:  # `swapped` starts as the real folder
            os.rename(layout.swapped, layout.inside)
            _swap_link(layout.swapped, layout.outside)  # a link out in its place
            time.sleep(PAUSE_S)
            layout.swapped.unlink()
            os.rename(layout.inside, layout.swapped)  # the real folder again
        else:
            _swap_link(layout.swapped, layout.outside)
            time.sleep(PAUSE_S)
            _swap_link(layout.swapped, layout.inside)
        time.sleep(PAUSE_S)
        swaps[0] += 1


@pytest.fixture
def often_switching_threads():
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    yield
    sys.setswitchinterval(before)


@pytest.mark.parametrize("variant", ["folder", "real folder", "file", "middle"])
@pytest.mark.parametrize("kind", ["deepspeed", "model folder"])
def test_a_swapped_path_never_brings_outside_content_in(tmp_path, kind, variant, often_switching_threads):
    ws, doc, layout = _layout(tmp_path, kind, variant)
    if layout.real_folder:
        os.rename(layout.inside, layout.swapped)
    else:
        _swap_link(layout.swapped, layout.inside)
    settings = Settings(workspace=ws, model_lookup=False)
    text = doc.read_text()
    assert _read(analyze(text, str(doc), settings), kind) == "inside"
    stop = threading.Event()
    swaps = [0]
    thread = threading.Thread(target=_swapper, args=(layout, stop, swaps), daemon=True)
    thread.start()
    leaks = []
    rounds = 0
    deadline = time.monotonic() + DEADLINE_S
    try:
        while (rounds < ROUNDS or swaps[0] < ROUNDS) and time.monotonic() < deadline:
            rounds += 1
            result = analyze(text, str(doc), settings)
            shown = (result.plan.model_dump_json() if result.plan is not None else "") + " ".join(
                f.message for f in result.findings
            )
            if _read(result, kind) == "outside" or str(layout.outside) in shown:
                leaks.append(shown[:300])
    finally:
        stop.set()
        thread.join(timeout=60)
    assert swaps[0] >= ROUNDS, swaps  # the entry was swapped while the document was analysed
    assert not leaks, f"{len(leaks)} of {rounds} analyses used the file outside the workspace: {leaks[0]}"


def _read(result, kind: str) -> str | None:
    """Which file the analysis used: "inside", "outside", or None (neither: refused, not found)."""
    if kind == "deepspeed":
        accum = result.plan.grad_accum.value if result.plan is not None and result.plan.grad_accum else None
        return {DS["gradient_accumulation_steps"]: "inside", OUTSIDE_ACCUM: "outside"}.get(accum)
    arch = result.resolution.resolved.arch if result.resolution and result.resolution.resolved else None
    return {MODEL["num_hidden_layers"]: "inside", OUTSIDE_LAYERS: "outside"}.get(arch.layers if arch else None)
