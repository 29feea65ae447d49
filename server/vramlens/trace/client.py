"""Talk to the trace worker from a process that must not import torch (the language server, the CLI).

    client = TraceClient()                       # the worker starts on the first trace and stays up
    result = await client.trace(resolved_plan, progress_cb, cancel_event)
    await client.close()

`trace` returns `report.result_json(...)`: the estimate contract without file-level fields, plus
`timeline`, `exact`, `trace` and `estimate` (the full `Estimate` in bytes; `report.estimate_from_result`).
Results are cached per plan (SHA-256 of the ResolvedPlan JSON); a cached result carries "cached": true.
Failures raise `TraceError` with `kind`: "cancelled", "timeout", "torch-missing", "worker-exited",
"invalid" or "failed". `SyncTraceClient` offers the same on a private event-loop thread.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import hashlib
import itertools
import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable

from vramlens import __version__, calibration
from vramlens.estimate import estimate
from vramlens.resolved import ResolvedPlan

log = logging.getLogger(__name__)
ProgressCallback = Callable[[str, float], Any]
CANCEL_GRACE_S = 5.0


class TraceError(RuntimeError):
    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def plan_key(rp: ResolvedPlan) -> str:
    """Cache key: the ResolvedPlan JSON, hashed, with the tracer's version (without the labels of what is not
    modelled: where a setting sits in the file does not change the step)."""
    text = rp.model_dump_json(exclude={"unmodelled", "approximate"})
    return hashlib.sha256(f"{__version__}\n{text}".encode()).hexdigest()


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


class TraceClient:
    def __init__(
        self,
        python: str | None = None,
        *,
        timeout: float = 300.0,
        start_timeout: float = 120.0,
        cache_size: int = 64,
        calibrate: bool = True,
        env: dict[str, str] | None = None,
        backend: str = "auto",
    ):
        self.python = python or sys.executable
        self.backend = backend  # "auto" | "transformers" | "torchtune" | "synthetic"
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.calibrate = calibrate
        self._env = env
        self._cache: collections.OrderedDict[str, dict] = collections.OrderedDict()
        self._cache_size = cache_size
        self._proc: asyncio.subprocess.Process | None = None
        self._pending: dict[str, tuple[asyncio.Future, ProgressCallback | None]] = {}
        self._ready: asyncio.Future | None = None
        self._tasks: list[asyncio.Task] = []
        self._stderr: collections.deque[str] = collections.deque(maxlen=40)
        self._ids = itertools.count(1)
        self._lock: asyncio.Lock | None = None
        self.torch_version: str | None = None
        self.versions: dict[str, str | None] = {}  # the trace interpreter's torch/transformers/peft/… versions
        self.starts = 0  # how many workers this client has started

    @staticmethod
    def available() -> bool:
        """Whether this interpreter has torch (checked without importing it)."""
        import importlib.util

        return importlib.util.find_spec("torch") is not None

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self) -> None:
        if self.running:
            return
        env = dict(os.environ if self._env is None else self._env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env["PYTHONSAFEPATH"] = "1"  # never import modules from the workspace the server runs in
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._stderr.clear()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                self.python,
                "-m",
                "vramlens.trace.worker",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                limit=64 * 2**20,
                cwd=_package_root(),
            )
        except OSError as exc:
            self._ready = None
            raise TraceError(
                f"cannot start the trace interpreter {self.python}: {exc.strerror or exc}", "worker-exited"
            ) from None
        self.starts += 1
        proc = self._proc
        self._tasks = [asyncio.create_task(self._read_stdout(proc)), asyncio.create_task(self._read_stderr(proc))]
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self.start_timeout)
        except asyncio.TimeoutError:
            await self._kill()
            raise TraceError(f"the trace worker did not start within {self.start_timeout:.0f} s", "worker-exited")
        except TraceError:
            await self._kill()
            raise

    async def close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            try:
                self._write({"op": "shutdown"})
                await asyncio.wait_for(proc.wait(), 5)
            except (asyncio.TimeoutError, ConnectionError, RuntimeError):
                await self._kill()
        await self._reap()

    async def _kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        await self._reap()

    async def _reap(self) -> None:
        for t in self._tasks:
            try:
                await asyncio.wait_for(t, 2)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                t.cancel()
        self._tasks = []
        self._proc = None

    # -- the stream --------------------------------------------------------------------------------
    def _write(self, msg: dict) -> None:
        if self._proc is None or self._proc.stdin is None:
            raise TraceError("the trace worker is not running", "worker-exited")
        self._proc.stdin.write((json.dumps(msg) + "\n").encode())

    async def _read_stderr(self, proc) -> None:
        async for line in proc.stderr:
            self._stderr.append(line.decode(errors="replace").rstrip())

    async def _read_stdout(self, proc) -> None:
        async for line in proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind, rid = msg.get("type"), msg.get("id")
            if kind == "ready":
                self.torch_version = msg.get("torch")
                self.versions = msg.get("versions") or {}
                if self._ready and not self._ready.done():
                    self._ready.set_result(True)
            elif kind == "fatal":
                err = TraceError(msg.get("message", "the trace worker failed"), msg.get("kind", "failed"))
                if self._ready and not self._ready.done():
                    self._ready.set_exception(err)
            elif kind == "progress" and rid in self._pending:
                cb = self._pending[rid][1]
                if cb is not None:
                    try:
                        r = cb(msg.get("message", ""), float(msg.get("fraction", -1.0)))
                        if asyncio.iscoroutine(r):
                            await r
                    except Exception:  # a broken callback must not stop the stream
                        pass
            elif kind in ("result", "error") and rid in self._pending:
                fut = self._pending.pop(rid)[0]
                if fut.done():
                    continue
                if kind == "result":
                    fut.set_result(msg["result"])
                else:
                    fut.set_exception(TraceError(msg.get("message", "trace failed"), msg.get("kind", "failed")))
        await proc.wait()
        tail = "\n".join(list(self._stderr)[-10:])
        err = TraceError(
            f"the trace worker exited (code {proc.returncode})" + (f":\n{tail}" if tail else ""), "worker-exited"
        )
        if self._ready and not self._ready.done():
            self._ready.set_exception(err)
        for fut, _ in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()

    # -- tracing -----------------------------------------------------------------------------------
    def cached(self, rp: ResolvedPlan) -> dict | None:
        hit = self._cache.get(plan_key(rp))
        if hit is None:
            return None
        out = copy.deepcopy(hit)
        out["cached"] = True
        return out

    async def trace(
        self,
        resolved_plan: ResolvedPlan,
        progress_cb: ProgressCallback | None = None,
        cancel_event: asyncio.Event | None = None,
        *,
        timeout: float | None = None,
        steps: int | None = None,
    ) -> dict:
        key = plan_key(resolved_plan)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self.cached(resolved_plan)
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if key in self._cache:
                return self.cached(resolved_plan)
            if progress_cb is not None and not self.running:
                progress_cb("starting the trace worker (imports torch)", 0.0)
            await self.start()
            result = await self._request(
                resolved_plan, progress_cb, cancel_event, self.timeout if timeout is None else timeout, steps
            )
        self._cache[key] = result
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        if self.calibrate:
            _record_calibration(resolved_plan, result)
        out = copy.deepcopy(result)
        out["cached"] = False
        return out

    async def run(self, resolved_plan: ResolvedPlan, progress: Callable[[str, int | None], Any] | None = None) -> dict:
        """The language server's entry point: `trace` with percentage progress and a one-line summary.
        Adds "traced_gib" (device level, comparable with the estimate's device peak), "exact_gib" (the same, only
        for an exact trace; else None) and "message"."""

        def on_progress(message: str, fraction: float) -> None:
            if progress is not None:
                progress(message, int(fraction * 100) if fraction >= 0 else None)

        result = await self.trace(resolved_plan, on_progress)
        peak = result["peak"]
        result["traced_gib"] = peak["device_gib"]
        result["exact_gib"] = peak["device_gib"] if result["exact"] else None
        result["message"] = summary_line(result)
        return result

    async def _request(self, rp, progress_cb, cancel_event, timeout, steps) -> dict:
        rid = f"t{next(self._ids)}"
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = (fut, progress_cb)
        self._write(
            {
                "op": "trace",
                "id": rid,
                "plan": json.loads(rp.model_dump_json()),
                "steps": steps,
                "backend": self.backend,
            }
        )
        waiters: set = {fut}
        cancel_task = asyncio.create_task(cancel_event.wait()) if cancel_event is not None else None
        if cancel_task is not None:
            waiters.add(cancel_task)
        try:
            done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            await self._stop(rid, fut)
            raise
        finally:
            if cancel_task is not None:
                cancel_task.cancel()
        if fut in done:
            return fut.result()
        reason = "cancelled" if (cancel_task is not None and cancel_task in done) else "timeout"
        await self._stop(rid, fut)
        if reason == "timeout":
            raise TraceError(f"the trace took longer than {timeout:.0f} s and was stopped", "timeout")
        raise TraceError("trace cancelled", "cancelled")

    async def _stop(self, rid: str, fut: asyncio.Future) -> None:
        """Ask the worker to stop `rid`; kill it when it does not answer within the grace period."""
        try:
            self._write({"op": "cancel", "id": rid})
            await asyncio.wait_for(asyncio.shield(fut), CANCEL_GRACE_S)
        except TraceError:
            pass  # the expected "cancelled" answer
        except (asyncio.TimeoutError, ConnectionError, RuntimeError):
            await self._kill()
        finally:
            self._pending.pop(rid, None)
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # mark retrieved


def summary_line(result: dict) -> str:
    """One line: what the trace was (its title), the traced peak and — when the trace ran the config's own
    objective — whether it fits."""
    peak = result["peak"]
    t = result["trace"]
    if result["fits"] is None:
        verdict = "no fit verdict from a stand-in step"
    else:
        verdict = f"{'fits' if result['fits'] else 'does not fit'} {result['gpu']['name']}"
    return (
        f"{t['title']}: {peak['allocated_gib']:.2f} GiB allocated, {peak['device_gib']:.2f} GiB on the "
        f"device ({verdict}, peak in {t['peak_at']})"
    )


def _record_calibration(rp: ResolvedPlan, result: dict) -> None:
    """Add an exact trace to the calibration file: only a step that ran whole on the real libraries, with the
    config's own objective, measures what the formulas estimate (a stand-in's ratio would scale every later
    estimate of the model by the stand-in's error)."""
    if result.get("exact") is not True:
        return
    try:
        est = estimate(rp.with_changes(correction=1.0), limits=False)  # record against the uncorrected model
        calibration.record(
            rp,
            source="trace",
            estimated_allocated=est.allocated_bytes,
            measured_allocated=int(result["trace"]["allocated_bytes"]),
            extra={
                "torch": result["trace"].get("torch"),
                "exact": result.get("exact"),
                "backend": result["trace"].get("backend"),
                "versions": result["trace"].get("versions"),
            },
        )
    except Exception:  # calibration is best effort, never a trace failure
        log.warning("recording the trace in the calibration file failed", exc_info=True)


class SyncTraceClient:
    """`TraceClient` for synchronous callers: a private event loop on a daemon thread keeps the worker alive
    between calls."""

    def __init__(self, *args, **kwargs):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="trace-client", daemon=True)
        self._thread.start()
        self.client = TraceClient(*args, **kwargs)

    def _run(self, coro, timeout: float | None = None):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def trace(
        self,
        resolved_plan: ResolvedPlan,
        progress_cb: ProgressCallback | None = None,
        *,
        timeout: float | None = None,
        steps: int | None = None,
    ) -> dict:
        return self._run(self.client.trace(resolved_plan, progress_cb, timeout=timeout, steps=steps))

    def close(self) -> None:
        try:
            self._run(self.client.close(), 30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
