"""Per-client limits through the app's own handlers, with real request objects: who a client is (its address, or
behind a proxy the last X-Forwarded-For hop, never a hop the client wrote), the refusal past the sessions a client
may hold, and a closed session freeing its slot. The engine is a fake at the seam: no model is loaded."""

from __future__ import annotations

import gradio as gr
import pytest
from starlette.requests import Request

import app as app_module
from fakes import FakeEngine
from kvqa import KvqaError, document_from_text
from kvqa.cache.budget import CacheBudget
from kvqa.config import Config
from kvqa.session.limits import client_of


def request(host: str, forwarded: str | None = None) -> gr.Request:
    headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded else []
    return gr.Request(request=Request({"type": "http", "method": "POST", "path": "/", "headers": headers,
                                       "client": (host, 50000), "query_string": b""}))


def make(behind_proxy: bool, *, limit: int = 16) -> app_module.KvqaApp:
    config = Config.of(sessions_per_client=limit)
    return app_module.KvqaApp(config, FakeEngine(), budget=CacheBudget(2**30, per_client=limit),
                              behind_proxy=behind_proxy)


def read(kvqa_app, req, text="A short document about ferries and bridges.") -> object:
    session, _ = kvqa_app.service.read(document_from_text(text), None, req, lambda *a, **k: None)
    return session


@pytest.mark.parametrize("behind_proxy, host, forwarded, client", [
    (False, "10.0.0.7", None, "10.0.0.7"),
    (False, "10.0.0.7", "1.2.3.4", "10.0.0.7"),  # not behind a proxy: the header is the client's own words
    (True, "10.0.0.1", "203.0.113.9", "203.0.113.9"),  # the proxy's hop
    (True, "10.0.0.1", "6.6.6.6, 203.0.113.9", "203.0.113.9"),  # a spoofed first hop is ignored: the last counts
    (True, "10.0.0.1", None, "10.0.0.1"),
])
def test_who_the_client_is(behind_proxy, host, forwarded, client):
    assert client_of(request(host, forwarded), behind_proxy=behind_proxy) == client
    assert read(make(behind_proxy), request(host, forwarded)).client == client


def test_a_client_past_its_sessions_is_refused_and_others_are_not():
    kvqa_app = make(True, limit=3)
    mine = [read(kvqa_app, request("10.0.0.1", f"{i}.0.0.1, 198.51.100.5")) for i in range(3)]  # spoofing varies
    assert {s.client for s in mine} == {"198.51.100.5"}
    with pytest.raises(KvqaError) as refused:
        read(kvqa_app, request("10.0.0.1", "9.9.9.9, 198.51.100.5"))
    assert "3" in str(refused.value)
    assert read(kvqa_app, request("10.0.0.1", "198.51.100.6")).client == "198.51.100.6"  # another client is served
    mine[0].close()  # a closed session frees its slot
    assert read(kvqa_app, request("10.0.0.1", "198.51.100.5")).client == "198.51.100.5"
    with pytest.raises(KvqaError):
        read(kvqa_app, request("10.0.0.1", "198.51.100.5"))


def test_make_app_is_behind_a_proxy_on_a_space_or_when_told(monkeypatch):
    monkeypatch.setattr(app_module, "make_engine", lambda *a, **k: FakeEngine())
    assert app_module.make_app({}).service.behind_proxy is False
    assert app_module.make_app({"KVQA_BEHIND_PROXY": "1"}).service.behind_proxy is True
    assert app_module.make_app({"SPACE_ID": "a/b"}).service.behind_proxy is True
