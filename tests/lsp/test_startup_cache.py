"""The startup cache (vramlens.lsp.startup_cache): real server sessions over stdio with a cold cache, a warm
one, a damaged file and a cache folder that cannot be written, each pointed at by XDG_CACHE_HOME; a warm
start compiles none of the code attrs/cattrs generate before `initialized`; and what the hook hands to
attrs and cattrs is the code object their own `compile()` call would have made."""
from __future__ import annotations

import asyncio
import os
import re
import sys
import tempfile
from pathlib import Path

import attrs
import cattrs
from lsp_editor import EXAMPLES, Editor, plain
from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pytest_lsp import client_capabilities

from vramlens.lsp import startup_cache

OOM_EXAMPLE = EXAMPLES / "llama3-8b-full-adamw-a100-40gb.yaml"
SUMMARY = re.compile(r"startup cache at initialized: (\d+) generated code objects reused, (\d+) compiled, "
                     r"(\d+) rebuilt")


class Session:
    """One `vramlens serve --stdio --log-level INFO` process, driven like Neovim (pushed diagnostics),
    with the cache folder it is given; keeps the server's stderr to read the cache summary from."""

    def __init__(self, cache_home: Path):
        self.cache_home = cache_home
        self.client = LanguageClient("startup-cache-test", "1")
        self.client.published = []           # type: ignore[attr-defined]
        self.client.estimates = []           # type: ignore[attr-defined]
        self.stderr = ""

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_publish(params: types.PublishDiagnosticsParams) -> None:
            self.client.published.append(params)      # type: ignore[attr-defined]

        @self.client.feature("vramlens/estimate")
        def on_estimate(params) -> None:
            self.client.estimates.append(plain(params))     # type: ignore[attr-defined]

        @self.client.feature(types.WORKSPACE_CONFIGURATION)
        def on_configuration(params: types.ConfigurationParams) -> list:
            return [{} for _ in params.items]

        for method in (types.CLIENT_REGISTER_CAPABILITY, types.WINDOW_LOG_MESSAGE, types.WORKSPACE_CODE_LENS_REFRESH,
                       types.WORKSPACE_INLAY_HINT_REFRESH):
            self.client.feature(method)(lambda params: None)

    async def run(self) -> tuple[int, int]:
        """initialize, open the OOM example (diagnostics, estimate, hover), shutdown, exit.
        Returns (reused, compiled) as the server reported them at `initialized`."""
        env = {**os.environ, "XDG_CACHE_HOME": str(self.cache_home)}
        await self.client.start_io(sys.executable, "-m", "vramlens", "serve", "--stdio", "--log-level", "INFO",
                                   env=env)
        process = self.client._server          # type: ignore[attr-defined]
        stderr = asyncio.create_task(process.stderr.read())
        try:
            result = await asyncio.wait_for(self.client.initialize_async(types.InitializeParams(
                capabilities=client_capabilities("neovim"), process_id=os.getpid(),
                root_uri=EXAMPLES.resolve().as_uri())), 30)
            self.client.initialized(types.InitializedParams())
            editor = Editor(self.client, result)      # type: ignore[arg-type]
            uri = editor.open(OOM_EXAMPLE)
            codes = {d.code for d in await editor.diagnostics(uri)}
            estimate = await editor.estimate(uri)
            assert "VL001" in codes and estimate["fits"] is False       # the 8B full fine-tune does not fit 40 GB
            hover = await editor.hover(uri, *_position_of(editor.texts[uri], "per_device_train_batch_size"))
            assert hover is not None
            await asyncio.wait_for(self.client.shutdown_async(None), 10)
            self.client.exit(None)
            assert await asyncio.wait_for(process.wait(), 10) == 0
            self.stderr = (await asyncio.wait_for(stderr, 10)).decode("utf-8", "replace")
        finally:
            stderr.cancel()
            await self.client.stop()
        found = SUMMARY.search(self.stderr)
        assert found, f"no startup cache summary in the server's log:\n{self.stderr[-2000:]}"
        return int(found.group(1)), int(found.group(2))


def _position_of(text: str, needle: str) -> tuple[int, int]:
    for i, line in enumerate(text.splitlines()):
        if needle in line:
            return i, line.index(needle) + 1
    raise AssertionError(needle)


def _cache_files(cache_home: Path) -> list[Path]:
    return sorted((cache_home / "vramlens").glob("codecache-*"))


async def test_cold_then_warm_start(tmp_path: Path):
    reused, compiled = await Session(tmp_path).run()
    assert compiled > 500                       # every lsprotocol class was compiled: nothing to reuse
    files = _cache_files(tmp_path)
    assert len(files) == 1, files               # written once, atomically (no temporary left behind)
    assert f"cpython-{sys.version_info.major}.{sys.version_info.minor}" in files[0].name
    assert "attrs" in files[0].name and "cattrs" in files[0].name and "lsprotocol" in files[0].name

    reused_warm, compiled_warm = await Session(tmp_path).run()
    assert compiled_warm == 0                   # nothing compiled before `initialized` on a warm start
    assert reused_warm >= reused + compiled - 50


async def test_damaged_cache_file_is_ignored_and_rewritten(tmp_path: Path):
    await Session(tmp_path).run()
    [path] = _cache_files(tmp_path)
    good = path.read_bytes()
    for damaged in (good[: len(good) // 2],                                  # cut short
                    good[:40] + bytes(b ^ 0x5A for b in good[40:200]) + good[200:],   # bytes flipped
                    b"not a cache at all",
                    b""):
        path.write_bytes(damaged)
        _, compiled = await Session(tmp_path).run()
        assert compiled > 500
        assert path.read_bytes() != damaged     # replaced by a good file
    _, compiled = await Session(tmp_path).run()
    assert compiled == 0


async def test_cache_file_others_can_write_is_not_used(tmp_path: Path):
    await Session(tmp_path).run()
    [path] = _cache_files(tmp_path)
    path.chmod(0o666)
    _, compiled = await Session(tmp_path).run()
    assert compiled > 500


async def test_cache_as_a_git_checkout_leaves_it_is_not_used(tmp_path: Path):
    """0644 files in a 0755 folder, owned by this user: what cloning a repository that ships a cache gives."""
    await Session(tmp_path).run()
    [path] = _cache_files(tmp_path)
    path.chmod(0o644)
    path.parent.chmod(0o755)
    _, compiled = await Session(tmp_path).run()
    assert compiled > 500
    path.chmod(0o600)
    _, compiled = await Session(tmp_path).run()          # a 0600 file is still refused in a 0755 folder
    assert compiled > 500


async def test_cache_folder_that_cannot_be_written(tmp_path: Path):
    (tmp_path / "vramlens").write_text("a file where the cache folder would go\n")
    _, compiled = await Session(tmp_path).run()
    assert compiled > 500
    _, compiled = await Session(tmp_path).run()
    assert compiled > 500                       # still works, just never warm
    assert (tmp_path / "vramlens").read_text() == "a file where the cache folder would go\n"


# ----------------------------------------------------------------------------------- the hook itself


def _define():
    @attrs.define
    class Point:
        x: int
        tags: "list[str]" = attrs.field(factory=list)
        note: str | None = None
    return Point


def test_hooked_code_is_what_attrs_and_cattrs_make_themselves():
    """The libraries' own `compile()` inherits their `from __future__ import annotations`: the hook must
    compile with the same flags, or the generated methods would differ."""
    plain_cls = _define()
    plain_fn = cattrs.Converter().get_structure_hook(plain_cls)
    with tempfile.TemporaryDirectory() as folder:
        cache = startup_cache.CodeCache(Path(folder) / "cache")
        assert cache.install()
        try:
            hooked_cls = _define()
            hooked_fn = cattrs.Converter().get_structure_hook(hooked_cls)
        finally:
            cache.uninstall()
    assert cache.compiled >= 2
    for name in ("__init__", "__eq__", "__repr__"):
        a, b = getattr(plain_cls, name).__code__, getattr(hooked_cls, name).__code__
        assert (a.co_flags, a.co_code, a.co_consts, a.co_names) == (b.co_flags, b.co_code, b.co_consts, b.co_names)
    a, b = plain_fn.__code__, hooked_fn.__code__
    assert (a.co_flags, a.co_code, a.co_names) == (b.co_flags, b.co_code, b.co_names)
    assert hooked_cls(1) == hooked_cls(1, []) and repr(hooked_cls(2)) == "Point(x=2, tags=[], note=None)"
    assert hooked_fn({"x": 3, "tags": ["a"]}, hooked_cls) == hooked_cls(3, ["a"])


def test_not_hooked_when_the_library_internals_differ(monkeypatch):
    """A library version whose function no longer calls `compile` by name is left alone."""
    monkeypatch.setattr(startup_cache, "HOOKS", (("attr._make", "_make_attr_tuple_class"),
                                                 ("cattrs.gen", "no_such_function")))
    with tempfile.TemporaryDirectory() as folder:
        cache = startup_cache.CodeCache(Path(folder) / "cache")
        assert not cache.install()
    import attr._make
    import cattrs.gen
    assert "compile" not in vars(attr._make) and "compile" not in vars(cattrs.gen)
    assert _define()(1).x == 1
