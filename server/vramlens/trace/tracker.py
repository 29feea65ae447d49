"""Live storage bytes of every tensor an op produces, counted like the CUDA caching allocator counts
`memory_allocated`: each storage rounded up to 512 B (`kMinBlockSize = 512` in
`c10/cuda/CUDACachingAllocator.cpp`; docs/memory-model.md).

`LiveBytes` is a TorchDispatchMode. It sees every op's outputs, registers each new storage with a weakref
finalizer and keeps the current and peak byte counts, the phase each storage was allocated in, a
category label (set later: params, grads, optimizer, ...), and a snapshot of the live set at the peak.
It works the same on fake tensors (no memory) and on real CPU tensors, which is how the trace is checked.
It also records the allocation and free sequence, in order — `(op, id, bytes requested, stream, phase)`, at most
`max_events` of them — for the caching-allocator replay (`trace.allocator_replay`).
"""

from __future__ import annotations

import weakref
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary


def alloc_size(nbytes: int) -> int:
    """The CUDA caching allocator rounds every request up to a multiple of 512 bytes."""
    if nbytes == 0:
        return 0
    return ((nbytes + 511) // 512) * 512


def inner_tensors(t: torch.Tensor) -> list[torch.Tensor]:
    """The tensors a traceable wrapper subclass (torchao's NF4Tensor) holds (`__tensor_flatten__`)."""
    return [getattr(t, name) for name in t.__tensor_flatten__()[0]]


class TraceCancelled(Exception):
    """Raised at a safe point (a phase boundary, a block boundary) when the caller asked to stop."""


class _Rec:
    __slots__ = ("nbytes", "cat", "phase", "__weakref__")

    def __init__(self, nbytes: int, phase: str):
        self.nbytes, self.cat, self.phase = nbytes, None, phase


MAX_EVENTS = 500_000  # allocations and frees recorded for the allocator replay (~60 MB at most)


class LiveBytes(TorchDispatchMode):
    def __init__(
        self,
        on_ops: Callable[[int], None] | None = None,
        every: int = 2000,
        cap_bytes: int | None = None,
        max_events: int = MAX_EVENTS,
    ):
        super().__init__()
        self.events: list[tuple[str, int, int, int, str]] = []
        self.max_events = max_events
        self.events_capped = False  # the sequence stopped at `max_events`: a replay sees its beginning
        self.recs = WeakIdKeyDictionary()  # storage -> _Rec
        self.live: dict[int, _Rec] = {}  # id(rec) -> rec
        self.cur = 0
        self.peak = 0
        self.seg_peak = 0  # peak since the last phase boundary (see `next_phase`)
        self.peak_phase = "init"
        self.peak_snap: list[_Rec] = []
        self._dirty = False
        self.phase = "init"
        self.n_ops = 0
        self._on_ops = on_ops
        self._every = every
        self.cap_bytes = cap_bytes  # emulate a memory cap: raise MemoryError past it
        self.outside = False  # storages made now live outside the caching allocator
        self.outside_bytes = 0  #   (bitsandbytes paged states): registered, not counted

    # bookkeeping ---------------------------------------------------------------------------------
    def _free(self, key: int) -> None:
        rec = self.live.pop(key, None)
        if rec is None:
            return
        if self._dirty:  # leaving a local maximum that is the peak: keep its live set
            self.peak_snap = list(self.live.values()) + [rec]
            self._dirty = False
        self.cur -= rec.nbytes
        if rec.cat != "outside":
            self._event("free", key, 0)

    def _event(self, op: str, key: int, nbytes: int) -> None:
        if len(self.events) < self.max_events:
            self.events.append((op, key, nbytes, 0, self.phase))  # one stream: the step runs on one
        else:
            self.events_capped = True

    def track(self, t) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        if is_traceable_wrapper_subclass(t):
            # a wrapper subclass (torchao's NF4Tensor) owns no memory: its nominal storage has the wrapped shape's
            # size but no allocation behind it (`_make_wrapper_subclass`); the tensors it holds are what is allocated
            for inner in inner_tensors(t):
                self.track(inner)
            return
        st = t.untyped_storage()
        if st in self.recs:
            return
        self._add(st, st.nbytes())

    def resized(self, st, nbytes: int) -> None:
        """`st.resize_(nbytes)` of a tracked storage: the old size is freed and the new one allocated, as on CUDA
        (FSDP frees and re-allocates its unsharded parameters this way: torch 2.13 distributed/utils.py
        `_free_storage`, distributed/fsdp/_fully_shard/_fsdp_param.py `alloc_storage`/`free_storage`)."""
        rec = self.recs.get(st)
        if rec is None or rec.cat == "outside" or alloc_size(nbytes) == rec.nbytes:
            return
        self._free(id(rec))
        del self.recs[st]
        self._add(st, nbytes, rec.cat)

    def _add(self, st, nbytes: int, cat: str | None = None) -> None:
        rec = _Rec(alloc_size(nbytes), self.phase)
        rec.cat = cat
        if self.outside:
            self.outside_bytes += rec.nbytes
            rec.nbytes, rec.cat = 0, "outside"
        self.recs[st] = rec
        key = id(rec)
        self.live[key] = rec
        weakref.finalize(st, self._free, key)
        self.cur += rec.nbytes
        if rec.cat != "outside":
            self._event("alloc", key, nbytes)  # the allocator rounds the request itself
        if self.cur > self.seg_peak:
            self.seg_peak = self.cur
        if self.cur > self.peak:
            self.peak = self.cur
            self.peak_phase = self.phase
            self._dirty = True
        if self.cap_bytes is not None and self.cur > self.cap_bytes:
            raise MemoryError(f"tried to hold {self.cur} bytes, more than the {self.cap_bytes}-byte cap")

    def label(self, tensors, cat: str, *, only_unlabelled: bool = False) -> None:
        for t in tensors:
            if isinstance(t, torch.Tensor) and is_traceable_wrapper_subclass(t):
                self.label(inner_tensors(t), cat, only_unlabelled=only_unlabelled)
            elif isinstance(t, torch.Tensor):
                rec = self.recs.get(t.untyped_storage())
                if rec is not None and not (only_unlabelled and rec.cat):
                    rec.cat = cat

    def set_phase(self, phase: str) -> None:
        self.phase = phase

    def next_phase(self, phase: str) -> tuple[int, int]:
        """Start `phase`; returns (bytes live now, peak since the previous boundary) for the phase that ended."""
        out = (self.cur, self.seg_peak)
        self.seg_peak = self.cur
        self.phase = phase
        return out

    def reset_peak(self) -> None:
        self.peak = self.cur
        self.peak_phase = self.phase
        self.peak_snap = list(self.live.values())
        self._dirty = False

    def peak_records(self) -> list[_Rec]:
        if self._dirty:
            self.peak_snap = list(self.live.values())
            self._dirty = False
        return list(self.peak_snap)

    def live_records(self) -> list[_Rec]:
        return list(self.live.values())

    # dispatch ------------------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.n_ops += 1
        if self._on_ops is not None and self.n_ops % self._every == 0:
            self._on_ops(self.n_ops)
        flat, _ = tree_flatten(out)
        for t in flat:
            self.track(t)
        return out


def by_category(recs, classify: Callable[[_Rec], str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in recs:
        k = classify(r)
        out[k] = out.get(k, 0) + r.nbytes
    return out
