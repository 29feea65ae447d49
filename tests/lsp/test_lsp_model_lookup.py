"""In the editor a model unknown to the catalog is looked up on the Hub (a fake one on loopback) without blocking
the document: the first diagnostics say the lookup is running, the estimate follows when the Hub answers."""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
from pathlib import Path

import pytest
import pytest_lsp
from fake_hub import ZEPHYR_7B, FakeHub
from lsp_editor import Editor, make_client, start
from pytest_lsp import ClientServerConfig, LanguageClient

HUB = FakeHub({"alignment-handbook/zephyr-7b-sft-full": ZEPHYR_7B, "meta-llama/gated-70b": 403})
atexit.register(HUB.close)
_TMP = Path(tempfile.mkdtemp(prefix="vramlens-fake-hub-"))
ENV = {**{k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN")}, **HUB.env(_TMP)}
SERVER = ClientServerConfig(
    server_command=[sys.executable, "-m", "vramlens", "serve", "--stdio"], client_factory=make_client, server_env=ENV
)


@pytest_lsp.fixture(config=SERVER, params=[True, False], ids=["trusted", "untrusted"])
async def session(lsp_client: LanguageClient, request):
    lsp_client.editor = await start(
        lsp_client,
        "visual-studio-code",  # type: ignore[attr-defined]
        initialization_options={"trusted": request.param},
    )
    lsp_client.trusted = request.param  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


@pytest.fixture
def editor(session: LanguageClient) -> Editor:
    return session.editor  # type: ignore[attr-defined]


async def test_the_estimate_arrives_when_the_hub_answers(editor: Editor, session: LanguageClient, tmp_path):
    if not session.trusted:  # type: ignore[attr-defined]
        pytest.skip("an untrusted workspace does not ask the Hub: test_an_untrusted_workspace_never_asks_the_hub")
    text = (
        "model_name_or_path: alignment-handbook/zephyr-7b-sft-full\nper_device_train_batch_size: 1\n"
        "bf16: true\ngradient_checkpointing: true\n"
    )
    uri = editor.open(tmp_path / "sft.yaml", text)
    first = await editor.diagnostics(uri)
    messages = [d.message for d in first]
    looked_up = any("looking up `alignment-handbook/zephyr-7b-sft-full` on the Hugging Face Hub" in m for m in messages)
    estimate = await editor._until(
        lambda: next((e for e in reversed(editor.client.estimates) if e["uri"] == uri and "peak" in e), None),
        "the estimate",
    )
    assert looked_up or estimate  # the Hub may have answered before the first analysis ended
    weights = estimate["components_gib"]["weights"]
    assert weights == pytest.approx(7_241_732_096 * 2 / 2**30, abs=0.02)  # Mistral-7B's shapes in bf16
    assert ("GET", "/alignment-handbook/zephyr-7b-sft-full/resolve/main/config.json") in HUB.requests
    # later edits use the answer: no second request
    editor.replace_all(uri, text.replace("per_device_train_batch_size: 1", "per_device_train_batch_size: 2"))
    assert "peak" in await editor.estimate(uri)
    assert sum(1 for r in HUB.requests if "zephyr" in r[1]) == 1


async def test_an_untrusted_workspace_never_asks_the_hub(editor: Editor, session: LanguageClient, tmp_path):
    """A repository the editor does not trust cannot make it reach the network by naming a model."""
    if session.trusted:  # type: ignore[attr-defined]
        pytest.skip("trusted: the Hub is asked (test_the_estimate_arrives_when_the_hub_answers)")
    uri = editor.open(
        tmp_path / "sft.yaml", "model_name_or_path: untrusted-org/never-asked-7b\nper_device_train_batch_size: 1\n"
    )
    diagnostics = await editor.diagnostics(uri)
    assert any("trusted workspace" in d.message for d in diagnostics), [d.message for d in diagnostics]
    assert not [r for r in HUB.requests if "never-asked" in r[1]]


async def test_a_gated_model_names_what_is_missing(editor: Editor, session: LanguageClient, tmp_path):
    if not session.trusted:  # type: ignore[attr-defined]
        pytest.skip("an untrusted workspace does not ask the Hub")
    uri = editor.open(
        tmp_path / "gated.yaml", "model_name_or_path: meta-llama/gated-70b\nper_device_train_batch_size: 1\n"
    )

    def told():
        for p in reversed(editor.client.published):
            if p.uri == uri and any("huggingface-cli login" in d.message for d in p.diagnostics):
                return p.diagnostics
        return None

    diagnostics = await editor._until(told, "the gated-model message")
    assert all(d.code != "VL016" for d in diagnostics)
