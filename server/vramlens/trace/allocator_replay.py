"""PyTorch's CUDA caching allocator, replayed on a sequence of allocations and frees. Pure Python (no torch).

The traced step knows every storage it allocates and frees, in order; replaying that sequence through the
allocator's own rules gives the reserved level (`torch.cuda.max_memory_reserved`), the fragmentation and the
number of segments, instead of a slack factor on the allocated peak.

The rules are those of `c10/cuda/CUDACachingAllocator.cpp` (`DeviceCachingAllocator`), read at pytorch/pytorch
commit 001074d25084fdb87a799823e395a50f5ec044d3, and of the option parser `c10/core/AllocatorConfig.cpp` at commit
065861fba7598880aa3216822742a1172d0a197c (where torch 2.8 and later read `PYTORCH_CUDA_ALLOC_CONF`; it adds
`max_non_split_rounding_mb`, whose default, `kLargeBuffer`, is the fixed limit of the older allocator):

- `round_size`: every request is rounded up to a multiple of `kMinBlockSize` = 512 B, or, where
  `roundup_power2_divisions` gives the request's power-of-two interval n > 1 divisions and the request is above
  512·n, up to the next of n equal divisions between two powers of two (`roundup_power2_next_division`).
- `get_pool`: requests of at most `kSmallSize` = 1 MiB use the small pool, larger ones the large pool.
- `get_allocation_size`: a new segment is `kSmallBuffer` = 2 MiB for the small pool, `kLargeBuffer` = 20 MiB for
  requests under `kMinLargeAlloc` = 10 MiB, else the request rounded up to `kRoundLarge` = 2 MiB.
- `get_free_block`: best fit, the first cached block of the same stream in (stream, size, address) order that is
  at least as large; a block of `max_split_size` or more never serves a smaller request, and serves a larger one
  only when it is less than `max_non_split_rounding` larger.
- `should_split`: the rest of a block is split off when it is at least 512 B (small pool, expandable segments),
  else when the request is under `max_split_size` and the rest is more than 1 MiB (large pool).
- `free_block` / `try_merge_blocks`: a freed block merges with free neighbours of its segment.
- `malloc`: no cached block → `garbage_collect_cached_blocks` (only under a memory limit with
  `garbage_collection_threshold` set) → `alloc_block` (a new segment, refused when it would pass the limit) →
  `release_available_cached_blocks` (oversize cached blocks, when `max_split_size` is set) and retry →
  `release_cached_blocks` (every unsplit cached block) and retry → out of memory.
- `expandable_segments:True`: one segment per stream and pool that grows by mapping pages (2 MiB for the small
  pool, 20 MiB for the large: `segment_size` of `find_expandable_block`), `try_allocate_expandable_block`,
  `map_block`, `unmap_block` and `release_blocks` as written there.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass, field
from typing import Iterable, Sequence

MIB = 1 << 20
K_MIN_BLOCK_SIZE = 512  # all sizes are rounded to at least 512 bytes
K_SMALL_SIZE = 1 * MIB  # largest "small" allocation is 1 MiB
K_SMALL_BUFFER = 2 * MIB  # "small" allocations are packed in 2 MiB blocks
K_LARGE_BUFFER = 20 * MIB  # "large" allocations may be packed in 20 MiB blocks
K_MIN_LARGE_ALLOC = 10 * MIB  # allocations between 1 and 10 MiB may use kLargeBuffer
K_ROUND_LARGE = 2 * MIB  # round up large allocations to 2 MiB
ROUNDUP_INTERVALS = 16  # kRoundUpPowerOfTwoIntervals: 1 MiB … 64 GiB (AllocatorConfig.cpp)
NO_LIMIT = (1 << 64) - 1  # max_split_size when unset: std::numeric_limits<size_t>::max()
ADDRESS_SPACE = 1 << 44  # virtual space of one expandable segment when no device size is given


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class AllocatorSettings:
    """The `PYTORCH_CUDA_ALLOC_CONF` options the native allocator's sizes depend on."""

    max_split_size: int = NO_LIMIT
    max_non_split_rounding: int = K_LARGE_BUFFER
    garbage_collection_threshold: float = 0.0
    roundup_power2_divisions: tuple[int, ...] = (0,) * ROUNDUP_INTERVALS
    expandable_segments: bool = False

    @classmethod
    def from_conf(cls, conf: str | None) -> "AllocatorSettings":
        """Read a `PYTORCH_CUDA_ALLOC_CONF` value (the project's parser, `vramlens.rules.alloc_conf`). Raises
        ValueError on a value torch would refuse, and for `backend:cudaMallocAsync` (the CUDA driver's allocator,
        whose rules are not these)."""
        from vramlens.rules import alloc_conf

        conf = conf or ""
        errors = alloc_conf.check(conf)
        if errors:
            raise ValueError(f"PYTORCH_CUDA_ALLOC_CONF={conf!r}: {errors[0].message}")
        values: dict = {}
        for opt in alloc_conf.split_options(conf):
            key, value = opt.key, opt.value
            if key == "max_split_size_mb":
                values["max_split_size"] = int(value) * MIB
            elif key == "max_non_split_rounding_mb":
                if not value.isdigit() or int(value) < K_LARGE_BUFFER // MIB:
                    raise ValueError(f"`max_non_split_rounding_mb` must be at least 20 (MiB), got `{value}`")
                values["max_non_split_rounding"] = int(value) * MIB
            elif key == "garbage_collection_threshold":
                values["garbage_collection_threshold"] = float(value)
            elif key == "roundup_power2_divisions":
                values["roundup_power2_divisions"] = _parse_divisions(value)
            elif key == "expandable_segments":
                values["expandable_segments"] = value.lower() == "true"
            elif key == "backend" and value != "native":
                raise ValueError(
                    "backend:cudaMallocAsync uses the CUDA driver's allocator: its reserved level is not replayed"
                )
        return cls(**values)

    def divisions(self, size: int) -> int:
        """`AllocatorConfig::roundup_power2_divisions(size)`: the entry of size's power-of-two interval."""
        index = size.bit_length() - 1 - 20  # log2(size) − log2(1 MiB)
        return self.roundup_power2_divisions[min(max(index, 0), ROUNDUP_INTERVALS - 1)]


def _parse_divisions(value: str) -> tuple[int, ...]:
    """`AllocatorConfig::parseRoundUpPower2Divisions`: one power of two for every interval, or a list
    `[size_mb:divisions, …, >:divisions]` whose first entry also fills the intervals below it and whose `>` fills
    from the last named interval on."""
    if not value.startswith("["):
        return (int(value),) * ROUNDUP_INTERVALS
    out = [0] * ROUNDUP_INTERVALS
    first, last = True, 0
    for item in filter(None, (p.strip() for p in value[1:-1].split(","))):
        size, _, div = (x.strip() for x in item.partition(":"))
        if size == ">":
            out[last:] = [int(div)] * (ROUNDUP_INTERVALS - last)
            continue
        index = min(int(size).bit_length() - 1, ROUNDUP_INTERVALS - 1)
        if first:
            out[:index] = [int(div)] * index
            first = False
        out[index] = int(div)
        last = index
    return tuple(out)


def round_size(size: int, settings: AllocatorSettings) -> int:
    """`DeviceCachingAllocator::round_size`."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    divisions = settings.divisions(size)
    if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
        return _roundup_power2_next_division(size, divisions)
    return -(-size // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE


def _roundup_power2_next_division(size: int, divisions: int) -> int:
    if _pow2(size):
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


def allocation_size(size: int) -> int:
    """`get_allocation_size`: the size of the segment a (rounded) request of `size` creates."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE


class _Segment:
    """An expandable segment: its base address, page size and virtual size."""

    __slots__ = ("base", "page", "size")

    def __init__(self, base: int, page: int, size: int):
        self.base, self.page, self.size = base, page, size


class _Block:
    __slots__ = ("size", "ptr", "stream", "pool", "allocated", "prev", "next", "mapped", "seg", "gc_base")

    def __init__(self, size: int, ptr: int, stream: int, pool: "_Pool", seg: _Segment | None = None):
        self.size, self.ptr, self.stream, self.pool, self.seg = size, ptr, stream, pool, seg
        self.allocated, self.mapped = False, True
        self.prev: _Block | None = None
        self.next: _Block | None = None
        self.gc_base = 0

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def splice(self, before: "_Block | None", after: "_Block | None") -> None:
        if before is not None:
            before.next = self
        self.prev = before
        if after is not None:
            after.prev = self
        self.next = after


# A cached block's place in its pool, (stream, size, address) in that order, packed into one integer (stream above
# bit 128, size above bit 64, address below): the order of the tuple, compared as one int (sizes and addresses stay
# below 2**64). An unmapped range's place, (stream, address), likewise with the stream above bit 64.
_STREAM, _SIZE = 128, 64


def _stream_of(key: int) -> int:
    return key >> _STREAM


class _Pool:
    """A `BlockPool`: the cached free blocks in (stream, size, address) order and, for expandable segments, the
    unmapped ranges in (stream, address) order."""

    def __init__(self, small: bool):
        self.small = small
        self.keys: list[int] = []
        self.blocks: dict[int, _Block] = {}
        self.unmapped_keys: list[int] = []
        self.unmapped: dict[int, _Block] = {}
        self.free_calls = 0  # get_free_blocks_call_count

    def insert(self, b: _Block) -> None:  # insert_into_blocks
        b.gc_base = self.free_calls
        key = (b.stream << _STREAM) | (b.size << _SIZE) | b.ptr
        insort(self.keys, key)
        self.blocks[key] = b

    def erase(self, b: _Block) -> None:
        key = (b.stream << _STREAM) | (b.size << _SIZE) | b.ptr
        del self.blocks[key]
        del self.keys[bisect_left(self.keys, key)]

    def insert_unmapped(self, b: _Block) -> None:
        key = (b.stream << _SIZE) | b.ptr
        insort(self.unmapped_keys, key)
        self.unmapped[key] = b

    def erase_unmapped(self, b: _Block) -> None:
        key = (b.stream << _SIZE) | b.ptr
        del self.unmapped[key]
        del self.unmapped_keys[bisect_left(self.unmapped_keys, key)]


class OutOfMemory(Exception):
    pass


@dataclass
class ReplayResult:
    """What `torch.cuda.memory_stats()` would show after the sequence (bytes)."""

    peak_reserved: int = 0
    end_reserved: int = 0
    peak_allocated: int = 0
    end_allocated: int = 0
    fragmentation: int = 0  # reserved − allocated when the reserved peak was reached
    peak_segments: int = 0  # cudaMalloc segments (an expandable segment counts once)
    end_segments: int = 0
    oom: bool = False  # a request could not be served under the limit, even after freeing the cache
    oom_event: int | None = None  # index of that request in the sequence; the replay stops there
    oom_request: int | None = None  # its size in bytes
    alloc_retries: int = 0  # num_alloc_retries: allocations that needed the whole cache freed
    events: int = 0  # events replayed
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class CachingAllocator:
    """One device's `DeviceCachingAllocator` (the native backend, no CUDA graphs, no cross-stream uses)."""

    def __init__(self, settings: AllocatorSettings | None = None, limit: int | None = None):
        self.s = settings or AllocatorSettings()
        self.limit = limit  # allowed_memory_maximum (set_fraction when not None)
        self.small, self.large = _Pool(True), _Pool(False)
        self.reserved = 0  # total_allocated_memory
        self.allocated = 0
        self.segments = 0
        self.retries = 0
        self._next_address = 1 << 32  # cudaMalloc / cuMemAddressReserve hand out fresh ranges
        # no `roundup_power2_divisions` above 1: round_size is the 512 B rounding alone
        self._plain = all(d <= 1 for d in self.s.roundup_power2_divisions)

    # ------------------------------------------------------------------------------------------- public
    def malloc(self, orig_size: int, stream: int = 0) -> _Block:
        if not self._plain:
            size = round_size(orig_size, self.s)
        elif orig_size < K_MIN_BLOCK_SIZE:
            size = K_MIN_BLOCK_SIZE
        else:
            size = -(-orig_size // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE
        pool = self.small if size <= K_SMALL_SIZE else self.large
        block = self._get_free_block(pool, size, stream)
        if block is None:
            alloc_size = allocation_size(size)
            if self.limit is not None and self.s.garbage_collection_threshold > 0:
                self._garbage_collect()
            block = (
                self._alloc_block(pool, size, alloc_size, stream)
                or (
                    self._release_available_cached_blocks(pool, size, stream)
                    and self._alloc_block(pool, size, alloc_size, stream)
                )
                or (self._release_cached_blocks() and self._alloc_block(pool, size, alloc_size, stream, retry=True))
            )
            if not block:
                raise OutOfMemory(alloc_size)
        return self._alloc_found_block(block, size, stream, self._should_split(block, size))

    def free(self, block: _Block) -> None:
        block.allocated = False
        self.allocated -= block.size
        pool = block.pool
        for candidate in (block.prev, block.next):
            self._try_merge(block, candidate, pool)
        pool.insert(block)

    # ------------------------------------------------------------------------------------------- search
    def _get_free_block(self, pool: _Pool, size: int, stream: int) -> _Block | None:
        if self.limit is not None and self.s.garbage_collection_threshold > 0:
            pool.free_calls += 1
        keys = pool.keys
        i = bisect_left(keys, (stream << _STREAM) | (size << _SIZE))
        if i == len(keys) or keys[i] >> _STREAM != stream:
            return None
        b = pool.blocks[keys[i]]
        if b.seg is not None:
            # an expandable block counts as the size it can grow to (itself and the unmapped range after it)
            def grows_to(x: _Block) -> int:
                return x.size + (x.next.size if x.next is not None and not x.next.mapped else 0)

            while (
                b.seg is not None
                and i + 1 < len(keys)
                and _stream_of(keys[i + 1]) == stream
                and grows_to(pool.blocks[keys[i + 1]]) < grows_to(b)
            ):
                i += 1
                b = pool.blocks[pool.keys[i]]
        s = self.s
        if size < s.max_split_size and b.size >= s.max_split_size:
            return None  # do not return an oversized block for a smaller request
        if size >= s.max_split_size and b.size >= size + s.max_non_split_rounding:
            return None
        pool.erase(b)
        return b

    def _should_split(self, b: _Block, size: int) -> bool:
        remaining = b.size - size
        if b.pool.small or self.s.expandable_segments:
            return remaining >= K_MIN_BLOCK_SIZE
        return size < self.s.max_split_size and remaining > K_SMALL_SIZE

    def _alloc_found_block(self, b: _Block, size: int, stream: int, split: bool) -> _Block:
        if split:
            rest = b
            b = _Block(size, rest.ptr, stream, rest.pool, rest.seg)
            b.prev = rest.prev
            if b.prev is not None:
                b.prev.next = b
            b.next = rest
            rest.prev = b
            rest.ptr += size
            rest.size -= size
            rest.pool.insert(rest)
        b.allocated = True
        self.allocated += b.size
        return b

    def _try_merge(self, dst: _Block, src: _Block | None, pool: _Pool) -> int:
        if src is None or src.allocated or dst.mapped != src.mapped:
            return 0
        if dst.prev is src:  # [src dst]
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:  # [dst src]
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        if src.mapped:
            pool.erase(src)
        else:
            pool.erase_unmapped(src)
        dst.size += src.size
        return src.size

    # ------------------------------------------------------------------------------------------- segments
    def _take_address(self, size: int) -> int:
        ptr = self._next_address
        self._next_address += -(-size // K_LARGE_BUFFER) * K_LARGE_BUFFER + K_LARGE_BUFFER
        return ptr

    def _alloc_block(self, pool: _Pool, size: int, alloc_size: int, stream: int, retry: bool = False):
        if retry:
            self.retries += 1
        if self.limit is not None and self.reserved + alloc_size > self.limit:
            return None
        if self.s.expandable_segments:
            return self._try_allocate_expandable(pool, size, stream)
        b = _Block(alloc_size, self._take_address(alloc_size), stream, pool)
        self.reserved += alloc_size
        self.segments += 1
        return b

    def _release_block(self, b: _Block) -> None:
        self.reserved -= b.size
        self.segments -= 1
        b.pool.erase(b)

    def _release_available_cached_blocks(self, pool: _Pool, size: int, stream: int) -> bool:
        s = self.s
        if s.max_split_size == NO_LIMIT or s.expandable_segments:
            return False
        want = max(size, s.max_split_size)
        i = bisect_left(pool.keys, (stream << _STREAM) | (want << _SIZE))
        if i < len(pool.keys) and _stream_of(pool.keys[i]) == stream:
            self._release_block(pool.blocks[pool.keys[i]])
            return True
        # no single block is large enough: free oversize blocks, the largest first
        released = 0
        i -= 1
        while i >= 0 and released < want:
            b = pool.blocks[pool.keys[i]]
            if b.size < s.max_split_size or b.stream != stream:
                break
            released += b.size
            self._release_block(b)
            i -= 1
        return released >= want

    def _release_cached_blocks(self) -> bool:
        for pool in (self.large, self.small):
            to_unmap = []
            for key in list(pool.keys):
                b = pool.blocks[key]
                if b.seg is not None:
                    to_unmap.append(b)
                elif not b.is_split():
                    self._release_block(b)
            for b in to_unmap:
                self._unmap_block(b)
                if not b.is_split() and not b.mapped:  # the whole expandable segment is unmapped
                    pool.erase_unmapped(b)
                    self.segments -= 1
        return True

    def _garbage_collect(self) -> None:
        threshold = int(self.s.garbage_collection_threshold * self.limit)
        if self.reserved <= threshold:
            return
        target, reclaimed = self.reserved - threshold, 0
        pool = self.large

        def age(b: _Block) -> int:
            return pool.free_calls - b.gc_base

        freeable = [pool.blocks[k] for k in pool.keys if not pool.blocks[k].is_split()]  # never expandable ones
        if not freeable:
            return
        total_age, count, freed = sum(age(b) for b in freeable), len(freeable), True
        while reclaimed < target and freed and count > 0:
            threshold_age = total_age / count
            freed = False
            for key in list(pool.keys):
                b = pool.blocks.get(key)
                if b is not None and not b.is_split() and age(b) >= threshold_age:
                    freed = True
                    reclaimed += b.size
                    total_age -= age(b)
                    count -= 1
                    self._release_block(b)

    # ------------------------------------------------------------------------------------------- expandable
    def _find_expandable_block(self, pool: _Pool, size: int, stream: int) -> _Block:
        def free(b: _Block | None) -> bool:
            return b is not None and not b.allocated

        def room(b: _Block | None) -> bool:
            total = 0
            while total < size and free(b):
                total += b.size
                b = b.next
            return total >= size

        i = bisect_left(pool.unmapped_keys, stream << _SIZE)
        while i < len(pool.unmapped_keys) and pool.unmapped_keys[i] >> _SIZE == stream:
            c = pool.unmapped[pool.unmapped_keys[i]]
            if free(c.prev):
                c = c.prev
            if room(c):
                return c
            i += 1
        page = K_SMALL_BUFFER if pool.small else K_LARGE_BUFFER
        space = (self.limit + self.limit // 8) if self.limit else ADDRESS_SPACE
        space = -(-space // page) * page
        seg = _Segment(self._take_address(space), page, space)
        c = _Block(space, seg.base, stream, pool, seg)
        c.mapped = False
        pool.insert_unmapped(c)
        self.segments += 1
        return c

    def _map_block(self, b: _Block, size: int) -> bool:
        seg = b.seg
        rel = b.ptr - seg.base
        end = -(-(rel + size) // seg.page) * seg.page
        mapped = end - rel
        if self.limit is not None and self.reserved + mapped > self.limit:
            return False  # cuMemCreate out of memory
        pool = b.pool
        pool.erase_unmapped(b)
        b.mapped = True
        if mapped < b.size:
            rest = _Block(b.size - mapped, b.ptr + mapped, b.stream, pool, seg)
            rest.mapped = False
            rest.splice(b, b.next)
            pool.insert_unmapped(rest)
            b.size = mapped
        self._try_merge(b, b.prev, pool)
        self._try_merge(b, b.next, pool)
        pool.insert(b)
        self.reserved += mapped
        return True

    def _try_allocate_expandable(self, pool: _Pool, size: int, stream: int) -> _Block | None:
        c = self._find_expandable_block(pool, size, stream)
        if not c.mapped and not self._map_block(c, min(c.size, size)):
            return None
        while c.size < size:
            nxt = c.next
            if not self._map_block(nxt, min(size - c.size, nxt.size)):
                return None
            c = nxt  # map_block merged c into nxt
        pool.erase(c)
        return c

    def _unmap_block(self, b: _Block) -> None:
        seg, pool = b.seg, b.pool
        rel = b.ptr - seg.base
        begin = -(-rel // seg.page) * seg.page
        end = (rel + b.size) // seg.page * seg.page
        if begin >= end:
            return
        pool.erase(b)
        before = begin - rel
        after = rel + b.size - end
        if before > 0:
            x = _Block(before, b.ptr, b.stream, pool, seg)
            x.splice(b.prev, b)
            pool.insert(x)
        if after > 0:
            x = _Block(after, seg.base + end, b.stream, pool, seg)
            x.splice(b, b.next)
            pool.insert(x)
        b.ptr, b.size, b.mapped = seg.base + begin, end - begin, False
        self._try_merge(b, b.prev, pool)
        self._try_merge(b, b.next, pool)
        pool.insert_unmapped(b)
        self.reserved -= end - begin


def replay(
    events: Iterable[Sequence], settings: AllocatorSettings | None = None, limit: int | None = None
) -> ReplayResult:
    """Replay `events`, each `(op, id, size, stream, …)` with op "alloc" or "free" (a free's size is not read),
    through the caching allocator; `limit` is the memory the allocator may reserve (the device's, or a memory
    fraction's), None for no limit. A zero-byte request allocates nothing (`NativeCachingAllocator::allocate`)."""
    a = CachingAllocator(settings, limit)
    out = ReplayResult()
    live: dict = {}
    malloc, free, pop = a.malloc, a.free, live.pop
    # only a request can raise the allocated, reserved or segment count (a free releases no segment), so the peaks
    # are read after requests alone
    peak_allocated = peak_reserved = peak_segments = fragmentation = done = 0
    for n, ev in enumerate(events):
        op = ev[0]
        if op == "alloc":
            size = ev[2]
            if size <= 0:
                continue
            try:
                live[ev[1]] = malloc(int(size), int(ev[3]) if len(ev) > 3 and ev[3] is not None else 0)
            except OutOfMemory:
                out.oom, out.oom_event, out.oom_request = True, n, int(size)
                break
            if a.allocated > peak_allocated:
                peak_allocated = a.allocated
            if a.segments > peak_segments:
                peak_segments = a.segments
            if a.reserved > peak_reserved:
                peak_reserved = a.reserved
                fragmentation = a.reserved - a.allocated
        elif op == "free":
            block = pop(ev[1], None)
            if block is not None:
                free(block)
        else:
            raise ValueError(f"unknown allocator event {op!r} (expected 'alloc' or 'free')")
        done = n + 1
    out.events, out.peak_allocated, out.peak_reserved = done, peak_allocated, peak_reserved
    out.peak_segments, out.fragmentation = peak_segments, fragmentation
    out.end_reserved, out.end_allocated, out.end_segments = a.reserved, a.allocated, a.segments
    out.alloc_retries = a.retries
    return out
