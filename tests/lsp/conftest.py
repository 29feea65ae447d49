"""End-to-end fixtures: the real server (`python -m vramlens serve --stdio`) driven over stdio by
pytest-lsp, as VS Code and as Neovim (each client's recorded capabilities)."""

from __future__ import annotations

import sys

import pytest
import pytest_lsp
from lsp_editor import Editor, make_client, start
from pytest_lsp import ClientServerConfig, LanguageClient

SERVER = ClientServerConfig(
    server_command=[sys.executable, "-m", "vramlens", "serve", "--stdio"], client_factory=make_client
)
CLIENTS = ["visual-studio-code", "neovim"]


@pytest_lsp.fixture(config=SERVER)
async def bare_client(lsp_client: LanguageClient):
    """A started server whose session the test initializes itself (settings tests)."""
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=SERVER, params=CLIENTS, scope="module")
async def shared_session(lsp_client: LanguageClient, request: pytest.FixtureRequest):
    """One server per client profile for a whole test module (documents are closed after each test)."""
    # a trusted workspace, as the VS Code extension says for one (and the README's Neovim setup)
    lsp_client.editor = await start(
        lsp_client,
        request.param,  # type: ignore[attr-defined]
        initialization_options={"trusted": True},
    )
    yield
    await lsp_client.shutdown_session()


@pytest.fixture
def editor(shared_session: LanguageClient):
    """The module's editor session (VS Code or Neovim); documents a test opened are closed after it.
    Test modules using it run in the module's event loop: `pytest.mark.asyncio(loop_scope="module")`."""
    ed: Editor = shared_session.editor  # type: ignore[attr-defined]
    yield ed
    ed.close_all()
