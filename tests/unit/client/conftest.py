"""Fixtures shared by the tests of this folder."""

from __future__ import annotations

import pytest
from cli_server import TOKEN, Server

from service.web.app import create_app


@pytest.fixture
async def server(tmp_path, aiohttp_server, monkeypatch):
    srv = Server(tmp_path)
    app = create_app(srv.settings, srv.store, srv.cluster, srv.artifacts, token=TOKEN,
                     clock=lambda: srv.now)
    test_server = await aiohttp_server(app)
    srv.url = str(test_server.make_url("/"))
    monkeypatch.setenv("ARGUS_API_TOKEN", TOKEN)
    yield srv
    srv.store.close()
