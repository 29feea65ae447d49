"""The trace worker: `python -m vramlens.trace.worker`, one JSON object per line on stdin and stdout.

Requests (stdin):
  {"op": "trace", "id": "…", "plan": <ResolvedPlan as JSON>, "steps": null | 1 | 2,
   "backend": "auto" | "fsdp" | "transformers" | "torchtune" | "synthetic"}
                                       auto: the real libraries where they can run the step (fsdp: an FSDP plan's
                                       ranks, rank 0 traced)
  {"op": "cancel", "id": "…"}          stop that trace (queued or running) as soon as possible
  {"op": "ping", "id": "…"}            answered with {"type": "pong", "id": "…"}
  {"op": "shutdown"}
Messages (stdout):
  {"type": "hello", "protocol": 1, "vramlens": "…"}                  at once
  {"type": "ready", "torch": "…", "versions": {"transformers": "…" | null, …}}
      or  {"type": "fatal", "kind": "torch-missing", "message": "…"}
  {"type": "progress", "id", "message", "fraction"}                  fraction < 0: no estimate
  {"type": "result", "id", "result": {…}}                            see `report.result_json`
  {"type": "error", "id", "kind": "cancelled" | "invalid" | "failed", "message"}

Traces run one at a time on the main thread; a reader thread takes requests and cancellations. Anything a
library prints to stdout is sent to stderr, so the protocol stream stays clean.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import traceback

PROTOCOL = 1


class Channel:
    def __init__(self):
        self._out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        os.dup2(2, 1)  # stray prints (libraries) go to stderr
        sys.stdout = sys.stderr
        self._lock = threading.Lock()

    def send(self, msg: dict) -> None:
        line = json.dumps(msg, separators=(",", ":"))
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


def main() -> int:
    from vramlens import __version__

    ch = Channel()
    ch.send({"type": "hello", "protocol": PROTOCOL, "vramlens": __version__, "pid": os.getpid()})
    try:
        import torch
    except ImportError as exc:
        ch.send(
            {
                "type": "fatal",
                "kind": "torch-missing",
                "message": f"torch is not installed for {sys.executable} ({exc}); install `vramlens[trace]`",
            }
        )
        return 3
    from vramlens.trace.hf import versions  # installed distributions, read from their metadata

    ch.send({"type": "ready", "torch": torch.__version__, "versions": versions()})

    requests: queue.Queue = queue.Queue()
    cancels: dict[str, threading.Event] = {}
    lock = threading.Lock()

    def cancel_event(rid: str) -> threading.Event:
        with lock:
            return cancels.setdefault(rid, threading.Event())

    def reader() -> None:
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                ch.send({"type": "error", "id": None, "kind": "invalid", "message": "not JSON"})
                continue
            op = msg.get("op")
            if op == "cancel":
                cancel_event(str(msg.get("id"))).set()
            elif op == "ping":
                ch.send({"type": "pong", "id": msg.get("id")})
            elif op == "shutdown":
                break
            else:
                requests.put(msg)
        requests.put(None)

    threading.Thread(target=reader, name="requests", daemon=True).start()
    while True:
        msg = requests.get()
        if msg is None:
            return 0
        rid = str(msg.get("id"))
        if msg.get("op") != "trace":
            ch.send({"type": "error", "id": rid, "kind": "invalid", "message": f"unknown op {msg.get('op')!r}"})
            continue
        stop = cancel_event(rid)
        try:
            if stop.is_set():
                raise _Cancelled()
            ch.send({"type": "result", "id": rid, "result": run_trace(msg, stop, ch)})
        except _Cancelled:
            ch.send({"type": "error", "id": rid, "kind": "cancelled", "message": "trace cancelled"})
        except Exception as exc:  # report, keep serving
            if stop.is_set():
                ch.send({"type": "error", "id": rid, "kind": "cancelled", "message": "trace cancelled"})
            else:
                kind = "invalid" if exc.__class__.__name__ == "ValidationError" else "failed"
                ch.send(
                    {
                        "type": "error",
                        "id": rid,
                        "kind": kind,
                        "message": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc(limit=8),
                    }
                )
        finally:
            with lock:
                cancels.pop(rid, None)


class _Cancelled(Exception):
    pass


def run_trace(msg: dict, stop: threading.Event, ch: Channel) -> dict:
    from vramlens.resolved import ResolvedPlan
    from vramlens.trace import report
    from vramlens.trace.config import step_config
    from vramlens.trace.tracker import TraceCancelled

    rid = str(msg.get("id"))
    rp = ResolvedPlan.model_validate(msg["plan"])

    def progress(message: str, fraction: float) -> None:
        ch.send({"type": "progress", "id": rid, "message": message, "fraction": fraction})

    cfg = step_config(rp)
    try:
        raw = run_backends(cfg, msg, progress, stop)
    except TraceCancelled:
        raise _Cancelled() from None
    return report.result_json(rp, raw)


def real_backends(cfg) -> list[tuple[str, object]]:
    """The real-library backends that could run this step, in the order they are tried: torchtune's own model and
    loss for a torchtune config, then the Hugging Face libraries, except where a torchtune config's chunked loss
    would become TRL's fused head there (a different loss: the synthetic model runs torchtune's)."""
    from vramlens.trace import hf, sharded, torchtune_backend

    out: list[tuple[str, object]] = []
    if cfg.fsdp_version and cfg.framework != "torchtune":
        out.append(("fsdp", sharded))  # rank 0 of the plan's FSDP ranks
    if cfg.framework == "torchtune":
        out.append(("torchtune", torchtune_backend))
    if not (cfg.framework == "torchtune" and cfg.loss == "chunked"):
        out.append(("transformers", hf))
    return out


def run_backends(cfg, msg: dict, progress, stop: threading.Event) -> dict:
    """The first real-library backend that can run this step (`real_backends`), else the synthetic model with the
    reason in `not_traced` (the report is then `exact: false`, forced or not). `backend` names one backend to use
    without falling back ("transformers", "torchtune", "synthetic"); "auto" tries them in order."""
    from vramlens.trace import engine, hf, report
    from vramlens.trace.config import PARALLELISM_NOTE, replica_note
    from vramlens.trace.tracker import TraceCancelled

    backend = msg.get("backend") or "auto"
    candidates = [(name, B) for name, B in real_backends(cfg) if backend in ("auto", name)]
    if backend not in ("auto", "synthetic") and not candidates:
        raise RuntimeError(
            f"the {backend} backend does not run this plan's step (framework {cfg.framework!r}, loss {cfg.loss!r})"
        )
    reasons = ["the synthetic model was requested"] if backend == "synthetic" else []
    raw = None
    for name, B in candidates:
        reason = B.unsupported(cfg)
        if reason is None:
            try:
                raw = engine.run(cfg, steps=msg.get("steps"), progress=progress, should_stop=stop.is_set, backend=name)
                raw["assumptions"] = B.description(cfg) + [
                    a
                    for a in raw["assumptions"]
                    if not a.startswith(("chunked cross-entropy traced as torchtune", "attention `"))
                ]
                if name == "fsdp":  # the ranks were traced, not one replica (on a dp × tp mesh: trace.sharded)
                    notes = {replica_note("fsdp", cfg.world_size)}
                    if cfg.tensor_parallel > 1:
                        notes.add(PARALLELISM_NOTE)
                    raw["not_traced"] = [n for n in raw["not_traced"] if n not in notes]
                break
            except TraceCancelled:
                raise
            except Exception as exc:  # a data-dependent op, a kernel without a CPU path, ...
                if stop.is_set():
                    raise TraceCancelled() from None
                reason = f"the real libraries failed on this step ({type(exc).__name__}: {str(exc)[:300]})"
        reasons.append(f"{name}: {reason}" if len(candidates) > 1 else reason)
    if raw is None:
        if backend not in ("auto", "synthetic"):
            raise RuntimeError(f"the {backend} backend cannot trace this step: {'; '.join(reasons)}")
        raw = engine.run(cfg, steps=msg.get("steps"), progress=progress, should_stop=stop.is_set)
        reason = "; ".join(reasons)
        raw["not_traced"] = list(raw["not_traced"]) + [f"{report.SYNTHETIC_PREFIX}{reason}"]
        raw["fallback_reason"] = reason
    raw["versions"] = hf.versions()
    return raw


if __name__ == "__main__":
    sys.exit(main())
