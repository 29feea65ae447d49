"""The trace worker and its client: start on demand, trace, cache, cancel, time out, keep serving."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from trace_plans import BIG, need, plan


@pytest.fixture(autouse=True)
def _no_calibration(monkeypatch):
    monkeypatch.setenv("VRAMLENS_CALIBRATION", "off")


@pytest.fixture
async def client():
    need("torch")
    from vramlens.trace.client import TraceClient

    c = TraceClient(timeout=240)
    yield c
    await c.close()


async def test_trace_reports_the_estimate_contract_with_progress_and_a_cache(client):
    progress: list[tuple[str, float]] = []
    rp = plan()
    first = await client.trace(rp, lambda m, f: progress.append((m, f)))
    assert first["cached"] is False and first["exact"] is True
    for key in (
        "model",
        "gpu",
        "peak",
        "phase",
        "components_gib",
        "fits",
        "headroom_gib",
        "max_micro_batch",
        "max_seq_len",
        "assumptions",
        "timeline",
    ):
        assert key in first
    peak = first["peak"]
    assert 0 < peak["allocated_gib"] <= peak["reserved_gib"] <= peak["device_gib"]
    assert first["phase"] in ("forward-backward", "optimizer-step")
    assert any("forward" in m for m, _ in progress) and any(f == 1.0 for _, f in progress)

    again = await client.trace(rp)
    assert again["cached"] is True  # answered from the cache, no worker round trip
    assert again["trace"]["allocated_bytes"] == first["trace"]["allocated_bytes"]
    assert client.starts == 1

    other = await client.trace(plan(micro_batch=4))  # a different plan is traced, by the same worker
    assert other["cached"] is False
    assert other["trace"]["allocated_bytes"] > first["trace"]["allocated_bytes"]
    assert client.starts == 1


@pytest.mark.parametrize("during", ["forward", "backward"])
async def test_cancel_stops_the_trace_and_the_worker_keeps_serving(client, during):
    from vramlens.trace.client import TraceError

    await client.start()
    cancel = asyncio.Event()
    started = asyncio.Event()

    def on_progress(message: str, fraction: float) -> None:
        if during in message:
            started.set()

    async def cancel_when_running():
        await started.wait()
        cancel.set()

    helper = asyncio.create_task(cancel_when_running())
    with pytest.raises(TraceError) as info:
        await client.trace(plan(arch=BIG, seq_len=4096), on_progress, cancel)
    await helper
    assert info.value.kind == "cancelled"  # stopped mid-trace, not run to its end
    assert client.running, "\n".join(client._stderr)
    result = await client.trace(plan())
    assert result["peak"]["allocated_gib"] > 0 and client.starts == 1


async def test_timeout_stops_a_long_trace(client):
    from vramlens.trace.client import TraceError

    await client.start()
    with pytest.raises(TraceError) as info:
        await client.trace(plan(arch=BIG, seq_len=2048), timeout=1.0)
    assert info.value.kind == "timeout"
    result = await client.trace(plan())  # still usable (restarted if it had to be killed)
    assert result["cached"] is False


async def test_language_server_entry_point_reports_percentages_and_a_summary(client):
    seen = []
    out = await client.run(plan(), progress=lambda m, p: seen.append(p))
    assert out["exact_gib"] == out["peak"]["device_gib"]
    assert out["message"].startswith("exact trace (")
    on = "transformers " if out["trace"]["backend"] == "transformers" else "the synthetic model"
    assert on in out["message"]
    assert 100 in seen


def test_sync_client_keeps_one_worker_between_calls():
    need("torch")
    from vramlens.trace.client import SyncTraceClient

    with SyncTraceClient(timeout=240) as c:
        a = c.trace(plan())
        b = c.trace(plan(seq_len=256))
        assert c.client.starts == 1
    assert b["trace"]["allocated_bytes"] > a["trace"]["allocated_bytes"]


def test_worker_protocol_answers_bad_requests_and_pings():
    need("torch")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vramlens.trace.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        out, _ = proc.communicate(
            "\n".join(
                [
                    json.dumps({"op": "ping", "id": "p"}),
                    "not json",
                    json.dumps({"op": "trace", "id": "bad", "plan": {"arch": "nope"}}),
                    json.dumps({"op": "shutdown"}),
                ]
            )
            + "\n",
            timeout=120,
        )
    finally:
        proc.kill()
    msgs = [json.loads(line) for line in out.splitlines()]
    kinds = [m["type"] for m in msgs]
    assert kinds[0] == "hello" and "ready" in kinds and {"type": "pong", "id": "p"} in msgs
    bad = [m for m in msgs if m.get("id") == "bad"]
    assert bad and bad[0]["type"] == "error" and bad[0]["kind"] == "invalid"
