"""Settings reach the analysis through every channel: workspace/configuration (pull),
workspace/didChangeConfiguration (push), initializationOptions and project files."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from lsp_editor import EXAMPLES, start
from lsprotocol import types
from pytest_lsp import LanguageClient

OOM_EXAMPLE = EXAMPLES / "llama3-8b-full-adamw-a100-40gb.yaml"
BOTH = pytest.mark.parametrize("profile", ["visual-studio-code", "neovim"])


async def push_settings(editor, uri: str, section: dict) -> dict:
    """Push the `vramlens` section (workspace/didChangeConfiguration) and wait for the document's next estimate."""
    client = editor.client
    count = len(client.estimates)
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"vramlens": section}))

    def republished():
        new = [e for e in client.estimates[count:] if e["uri"] == uri]
        return new[-1] if new else None

    return await editor._until(republished, f"estimate after pushing {section}")


@BOTH
async def test_settings_pull_sets_the_gpu(bare_client: LanguageClient, tmp_path: Path, profile: str):
    bare_client.set_configuration({"gpu": "H100-SXM", "gpuCount": 1}, section="vramlens")
    editor = await start(bare_client, profile, tmp_path)
    uri = editor.open(OOM_EXAMPLE)
    est = await editor.estimate(uri)
    assert est["gpu"]["name"] == "H100-SXM"


@pytest.mark.parametrize("profile", ["neovim@v0.7.0", "visual-studio-code"])
async def test_settings_push_changes_the_gpu(bare_client: LanguageClient, tmp_path: Path, profile: str):
    """Neovim 0.7 never answers workspace/configuration: settings arrive by didChangeConfiguration
    (VS Code with `synchronize.configurationSection` pushes the section too)."""
    editor = await start(bare_client, profile, tmp_path)
    uri = editor.open(OOM_EXAMPLE)
    first = await editor.estimate(uri)
    assert first["gpu"]["name"] == "A100-40GB"  # the document's own directive
    est = await push_settings(editor, uri, {"gpu": "A100-80GB"})
    assert est["gpu"]["name"] == "A100-80GB"


@BOTH
async def test_settings_pull_again_on_change_notification(bare_client: LanguageClient, tmp_path: Path, profile: str):
    """VS Code sends didChangeConfiguration with null settings: the server asks again."""
    bare_client.set_configuration({"gpu": "A100-40GB"}, section="vramlens")
    editor = await start(bare_client, profile, tmp_path)
    uri = editor.open(OOM_EXAMPLE)
    assert (await editor.estimate(uri))["gpu"]["name"] == "A100-40GB"
    count = len(bare_client.estimates)
    bare_client.set_configuration({"gpu": "H100-SXM"}, section="vramlens")
    bare_client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))

    def republished():
        new = [e for e in bare_client.estimates[count:] if e["uri"] == uri]
        return new[-1] if new else None

    assert (await editor._until(republished, "estimate after re-pull"))["gpu"]["name"] == "H100-SXM"


@BOTH
async def test_initialization_options_and_project_file(bare_client: LanguageClient, tmp_path: Path, profile: str):
    config = tmp_path / "llama.yaml"
    config.write_text(OOM_EXAMPLE.read_text().replace("# vramlens: gpu=A100-40GB\n", ""))
    editor = await start(bare_client, profile, tmp_path, initialization_options={"vramlens": {"gpu": "L40S"}})
    uri = editor.open(config)
    assert (await editor.estimate(uri))["gpu"]["name"] == "L40S"
    other = tmp_path / "team" / "llama.yaml"
    other.parent.mkdir()
    other.write_text(config.read_text())
    (other.parent / ".vramlens.toml").write_text('gpu = "H100-SXM"\nheadroom = 0.2\n')
    uri2 = editor.open(other)
    assert (await editor.estimate(uri2))["gpu"]["name"] == "H100-SXM"


@BOTH
async def test_first_diagnostics_wait_for_pulled_settings(bare_client: LanguageClient, tmp_path: Path, profile: str):
    """didOpen right after initialized, before the configuration answer: the first estimate already uses
    the user's GPU, not a default."""
    bare_client.set_configuration({"gpu": "RTX 4090"}, section="vramlens")
    config = tmp_path / "cfg.yaml"
    config.write_text(OOM_EXAMPLE.read_text().replace("# vramlens: gpu=A100-40GB\n", ""))
    editor = await start(bare_client, profile, tmp_path)
    uri = editor.open(config)
    first = await editor.estimate(uri)
    assert "4090" in first["gpu"]["name"]
    assert all("4090" in e["gpu"]["name"] for e in bare_client.estimates if e["uri"] == uri)


@BOTH
async def test_rules_switched_off_by_severity_setting(bare_client: LanguageClient, tmp_path: Path, profile: str):
    bare_client.set_configuration({"severity": {"VL001": "off", "VL004": "hint"}}, section="vramlens")
    editor = await start(bare_client, profile, tmp_path)
    uri = editor.open(OOM_EXAMPLE)
    diagnostics = await editor.diagnostics(uri)
    assert "VL001" not in {d.code for d in diagnostics}
    assert all(d.severity == types.DiagnosticSeverity.Hint for d in diagnostics if d.code == "VL004")


@BOTH
async def test_project_file_change_on_disk_is_picked_up(bare_client: LanguageClient, tmp_path: Path, profile: str):
    config = tmp_path / "cfg.yaml"
    config.write_text(OOM_EXAMPLE.read_text().replace("# vramlens: gpu=A100-40GB\n", ""))
    project = tmp_path / ".vramlens.toml"
    project.write_text('gpu = "A10G"\n')
    editor = await start(bare_client, profile, tmp_path)
    uri = editor.open(config)
    assert (await editor.estimate(uri))["gpu"]["name"] == "A10G"
    count = len(bare_client.estimates)
    project.write_text('gpu = "L40S"\n')
    bare_client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=project.as_uri(), type=types.FileChangeType.Changed)]
        )
    )

    def republished():
        new = [e for e in bare_client.estimates[count:] if e["uri"] == uri]
        return new[-1] if new else None

    assert (await editor._until(republished, "estimate after the project file changed"))["gpu"]["name"] == "L40S"


async def test_untrusted_workspace_never_runs_traces(bare_client: LanguageClient, tmp_path: Path):
    editor = await start(bare_client, "visual-studio-code", tmp_path, initialization_options={"trusted": False})
    uri = editor.open(OOM_EXAMPLE)
    await editor.diagnostics(uri)
    for command in ("vramlens.runTrace", "vramlens.runProbe"):
        with pytest.raises(Exception, match="trusted"):
            await bare_client.workspace_execute_command_async(
                types.ExecuteCommandParams(command=command, arguments=[uri])
            )


# Everything but a JSON `true` leaves the workspace untrusted: no option at all, the strings "false"/"true",
# 0 and 1, null, and spellings nested where only a top-level or `vramlens`-section `true` counts.
NOT_TRUSTED = {
    "missing": None,
    "empty": {},
    "false": {"trusted": False},
    "string false": {"trusted": "false"},
    "string true": {"trusted": "true"},
    "zero": {"trusted": 0},
    "one": {"trusted": 1},
    "null": {"trusted": None},
    "nested false": {"vramlens": {"trusted": False}},
    "nested string": {"vramlens": {"trusted": "true"}},
    "in settings": {"settings": {"trusted": 1}},
}


@pytest.mark.parametrize("options", list(NOT_TRUSTED.values()), ids=list(NOT_TRUSTED))
async def test_only_trusted_true_runs_traces_and_probes(bare_client: LanguageClient, tmp_path: Path, options):
    (tmp_path / ".vramlens.toml").write_text("trusted = true\n")  # a repository cannot say it
    bare_client.set_configuration({"trusted": True}, section="vramlens")  # nor its editor settings
    editor = await start(bare_client, "visual-studio-code", tmp_path, initialization_options=options)
    uri = editor.open(OOM_EXAMPLE)
    await editor.diagnostics(uri)
    for command in ("vramlens.runTrace", "vramlens.runProbe"):
        with pytest.raises(Exception, match="only run in trusted workspaces"):
            await bare_client.workspace_execute_command_async(
                types.ExecuteCommandParams(command=command, arguments=[uri])
            )


@pytest.mark.parametrize(
    "options", [{"trusted": True}, {"vramlens": {"trusted": True, "gpu": "A10G"}}], ids=["top level", "in the section"]
)
async def test_trusted_true_passes_the_trust_check(bare_client: LanguageClient, tmp_path: Path, options):
    editor = await start(bare_client, "neovim", tmp_path, initialization_options=options)
    uri = (tmp_path / "never-opened.yaml").as_uri()  # past the trust check, the command stops here: no torch
    for command in ("vramlens.runTrace", "vramlens.runProbe"):
        with pytest.raises(Exception) as refused:
            await bare_client.workspace_execute_command_async(
                types.ExecuteCommandParams(command=command, arguments=[uri])
            )
        assert "trusted" not in str(refused.value)
        assert "nothing to" in str(refused.value) or "not installed" in str(refused.value)
    assert editor is not None


@BOTH
async def test_an_assumed_gpu_is_said_in_the_editor(bare_client: LanguageClient, tmp_path: Path, profile: str):
    """No GPU named, none detected (no nvidia-smi here): the estimate says the GPU is assumed, the hover on the
    model line says which and how to choose one; naming one in the settings takes it back."""
    config = tmp_path / "train.yaml"
    config.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 2\nbf16: true\n")
    editor = await start(bare_client, profile, tmp_path)
    uri = editor.open(config)
    sent = await editor.estimate(uri)
    assert sent["gpu"]["name"] == "A100-80GB" and sent["gpu"]["assumed"] is True
    hover = await editor.hover(uri, 0, 3)
    text = hover.contents.value if hover is not None else ""
    assert "A100-80GB is assumed" in text and "vramlens.gpu" in text and "# vramlens: gpu=" in text
    named = await push_settings(editor, uri, {"gpu": "T4"})
    assert named["gpu"]["name"] == "T4" and named["gpu"]["assumed"] is False


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="exact trace needs torch (vramlens[trace])")
async def test_trace_python_setting_picks_the_interpreter_and_a_project_file_cannot(
    bare_client: LanguageClient, tmp_path: Path
):
    """`vramlens.trace.python` from the editor's settings runs the trace worker; the same key in a project file
    (checked into a repository) does not choose an executable."""
    config = tmp_path / "small.yaml"
    config.write_text("model_name_or_path: gpt2\nper_device_train_batch_size: 1\nmax_seq_length: 128\n")
    (tmp_path / ".vramlens.toml").write_text('[trace]\npython = "/from/the/repository/python"\n')
    bare_client.set_configuration({"trace": {"python": "/from/the/user/settings/python"}}, section="vramlens")
    editor = await start(bare_client, "visual-studio-code", tmp_path, initialization_options={"trusted": True})
    uri = editor.open(config)
    await editor.estimate(uri)
    with pytest.raises(Exception, match="/from/the/user/settings/python"):
        await bare_client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="vramlens.runTrace", arguments=[uri])
        )
