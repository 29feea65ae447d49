"""The Hub lookup of an unknown model is bounded: it asks for config.json (and a PEFT adapter's
adapter_config.json) and nothing else, writes nothing but that file's cache entry, reads at most
`hub.MAX_CONFIG_BYTES` and gives up after `hub.DEADLINE_S` — against a Hub on loopback (`fake_hub.py`) that
answers with a huge body or one byte at a time. Timeouts here are hang guards, not measurements."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fake_hub import COMMIT, ZEPHYR_7B, Drip, FakeHub, Huge
from vramlens.knowledge import hub as hub_module

HANG_GUARD_S = 120
ADAPTER = {
    "files": {
        "adapter_config.json": {"peft_type": "LORA", "r": 16, "base_model_name_or_path": "mistralai/Mistral-7B-v0.1"}
    }
}


def _env(hub: FakeHub, tmp_path: Path) -> dict[str, str]:
    """A user's environment (no telemetry switch, no offline flag) with every cache and home under tmp_path."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_HUB_DISABLE_TELEMETRY")}
    return {
        **env,
        **hub.env(tmp_path),
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "HOME": str(tmp_path / "home"),
        "VRAMLENS_CALIBRATION": "off",
    }


def _run(command: str, model: str, hub: FakeHub, tmp_path: Path) -> subprocess.CompletedProcess:
    config = tmp_path / "project" / f"{model.replace('/', '_')}.yaml"
    config.parent.mkdir(exist_ok=True)
    config.write_text(f"model_name_or_path: {model}\nper_device_train_batch_size: 1\nbf16: true\n", encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "vramlens", command, config.name],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        env=_env(hub, tmp_path),
    )


def _written(tmp_path: Path) -> dict[str, int]:
    """Every file under tmp_path but the configs: relative path → size."""
    return {
        str(p.relative_to(tmp_path)): p.stat().st_size
        for p in tmp_path.rglob("*")
        if p.is_file() and not p.is_relative_to(tmp_path / "project")
    }


def _in_process(hub: FakeHub, tmp_path: Path, monkeypatch) -> None:
    """This process looks up on `hub`, with a 1 s deadline."""
    env = _env(hub, tmp_path)
    for key in ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_HUB_DISABLE_TELEMETRY"):
        monkeypatch.delenv(key, raising=False)
    for key in ("HF_ENDPOINT", "HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.setattr(hub_module, "DEADLINE_S", 1.0)
    hub_module.forget_answers()


@pytest.fixture
def fake_hub():
    servers: list[FakeHub] = []

    def start(repos: dict) -> FakeHub:
        servers.append(FakeHub(repos))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_only_config_json_is_asked_for_and_only_its_cache_entry_written(fake_hub, tmp_path):
    hub = fake_hub(
        {"alignment-handbook/zephyr-7b-sft-full": ZEPHYR_7B, "alignment-handbook/zephyr-7b-sft-qlora": ADAPTER}
    )
    for command, model in (
        ("estimate", "alignment-handbook/zephyr-7b-sft-full"),
        ("check", "alignment-handbook/zephyr-7b-sft-qlora"),
    ):
        out = _run(command, model, hub, tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "No memory estimate" not in out.stdout, out.stdout
    assert sorted(hub.requests) == [
        ("GET", "/alignment-handbook/zephyr-7b-sft-full/resolve/main/config.json"),
        ("GET", "/alignment-handbook/zephyr-7b-sft-qlora/resolve/main/adapter_config.json"),
        ("GET", "/alignment-handbook/zephyr-7b-sft-qlora/resolve/main/config.json"),
    ]
    cache = "hub-cache/models--alignment-handbook--"
    assert sorted(_written(tmp_path)) == [
        f"{cache}zephyr-7b-sft-full/refs/main",
        f"{cache}zephyr-7b-sft-full/snapshots/{COMMIT}/config.json",
        f"{cache}zephyr-7b-sft-qlora/refs/main",
        f"{cache}zephyr-7b-sft-qlora/snapshots/{COMMIT}/adapter_config.json",
    ]


@pytest.mark.parametrize("announce", [True, False], ids=["content-length", "no-length"])
@pytest.mark.parametrize("command", ["check", "estimate"])
def test_a_huge_config_json_is_refused_and_not_stored(fake_hub, tmp_path, command, announce):
    hub = fake_hub({"evil/huge": Huge(300_000_000, announce=announce)})
    out = _run(command, "evil/huge", hub, tmp_path)
    said = out.stdout + out.stderr
    assert "`evil/huge`'s config.json on the Hugging Face Hub is larger than 4 MiB" in said, said
    assert "Traceback" not in said
    assert _written(tmp_path) == {}  # nothing in the cache, not even a partial file
    if not announce:
        assert hub.hung_up  # it stopped reading (the body had no announced length)


@pytest.mark.parametrize("where", ["body", "headers"])
def test_a_hub_that_trickles_is_given_up_on_at_the_deadline(fake_hub, tmp_path, monkeypatch, where):
    hub = fake_hub({"slow/drip": Drip(0.2, where=where)})
    _in_process(hub, tmp_path, monkeypatch)
    answers: list = []
    worker = threading.Thread(target=lambda: answers.append(hub_module.fetch_config("slow/drip")), daemon=True)
    worker.start()
    worker.join(HANG_GUARD_S)
    hub_module.forget_answers()
    assert answers, "the lookup did not end"
    assert answers[0].config is None and answers[0].transient
    assert answers[0].problem == "the Hugging Face Hub did not send `slow/drip`'s config.json within 1 s"
    assert _written(tmp_path) == {}


def test_the_server_lookup_thread_is_released_at_the_deadline(fake_hub, tmp_path, monkeypatch):
    hub = fake_hub({"slow/drip": Drip(0.2)})
    _in_process(hub, tmp_path, monkeypatch)
    done = threading.Event()
    lookups = hub_module.BackgroundLookups(lambda _repo: done.set())
    try:
        assert lookups("slow/drip").pending
        assert done.wait(HANG_GUARD_S), "the lookup thread is still held"
        assert "within 1 s" in (lookups("slow/drip").problem or "")
    finally:
        lookups.shutdown()
        hub_module.forget_answers()


def test_the_cli_gives_up_on_a_trickling_hub_and_says_why(fake_hub, tmp_path):
    """At the real deadline, as a user runs it: `vramlens check` ends and names the reason."""
    hub = fake_hub({"slow/drip": Drip(1.0)})
    out = _run("check", "slow/drip", hub, tmp_path)
    assert (
        f"the Hugging Face Hub did not send `slow/drip`'s config.json within {hub_module.DEADLINE_S:g} s" in out.stdout
    ), out.stdout + out.stderr
    assert hub.requests == [("GET", "/slow/drip/resolve/main/config.json")]
    assert _written(tmp_path) == {}
