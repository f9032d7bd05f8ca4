"""The MCP tests' fixtures: one daemon per test module, with the agents the tests' trees use
(``harness.data_dir``), and ``treemail mcp`` over streamable HTTP beside it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.daemon.conftest import DaemonProcess, served
from tests.daemon.mcp.harness import HttpServer, data_dir


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """One daemon per test module that imports this fixture, with the MCP tests' agents."""
    yield from served(data_dir(tmp_path_factory.mktemp("mcp")))


@pytest.fixture(scope="module")
def http(daemon: DaemonProcess) -> Iterator[HttpServer]:
    """``treemail mcp`` over streamable HTTP beside that daemon."""
    server = HttpServer(daemon)
    yield server
    server.stop()
