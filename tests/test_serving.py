"""The app served as `python app.py` serves it (app.serve), spoken to over raw HTTP: an unexpected error's text never
reaches the client, a full queue turns requests away, an upload over the size limit is refused (the fake engine
stands in for the model)."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

import app as app_module
from fakes import FakeEngine
from kvqa.cache.budget import CacheBudget
from kvqa.config import Config


class GatedEngine(FakeEngine):
    """Reads a document only when the gate opens: a request can be held in progress as long as the test wants."""

    def __init__(self):
        super().__init__()
        self.gate, self.entered = threading.Event(), threading.Event()

    def prefill(self, document, **kwargs):
        self.entered.set()
        self.gate.wait(timeout=60)
        return super().prefill(document, **kwargs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served():
    """A fresh app on loopback with a queue of one, a 1 MB upload limit and a gated engine."""
    engine = GatedEngine()
    kvqa_app = app_module.KvqaApp(Config.of(max_file_mb=1), engine, budget=CacheBudget(2**30))
    page = kvqa_app.demo
    port = free_port()
    app_module.serve(page, kvqa_app, concurrency=1, queue_size=1, host="127.0.0.1", port=port,
                     prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/", kvqa_app, engine
    finally:
        engine.gate.set()
        page.close()


def call(http: httpx.Client, api: str, data: list) -> str:
    """POST gradio_api/call/<api>, then read its event stream to the end: the reply as text."""
    posted = http.post(f"gradio_api/call/{api}", json={"data": data})
    if posted.status_code != 200:
        return posted.text
    event = posted.json()["event_id"]
    with http.stream("GET", f"gradio_api/call/{api}/{event}") as response:
        return "\n".join(response.iter_lines())


def test_an_unexpected_error_says_nothing_of_its_internals(served, monkeypatch):
    url, kvqa_app, engine = served
    engine.gate.set()

    def broken(*args, **kwargs):
        raise RuntimeError("internal detail /srv/secret/path")

    with httpx.Client(base_url=url, timeout=60) as http:
        assert "prefilled" in call(http, "prefill", [None, "A short document about ferries.", None])
        # /prefill now fails inside, as a bug would
        monkeypatch.setattr("kvqa.session.service.document_from_text", broken)
        reply = call(http, "prefill", [None, "Another document about ferries.", None])
    assert "event: error" in reply and "internal detail" not in reply and "Traceback" not in reply


def test_a_full_queue_turns_requests_away(served):
    url, kvqa_app, engine = served
    replies: dict[int, str] = {}

    def ask(n: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            replies[n] = call(http, "prefill", [None, f"Document number {n} about ferries.", None])

    first = threading.Thread(target=ask, args=(1,))
    first.start()
    assert engine.entered.wait(timeout=30)  # the first request is being worked on
    second = threading.Thread(target=ask, args=(2,))
    second.start()
    with httpx.Client(base_url=url, timeout=30) as http:  # wait until the second one waits in the queue
        deadline = time.monotonic() + 60  # a busy machine may take a while to queue it
        while http.get("gradio_api/queue/status").json().get("queue_size", 0) < 1:
            assert time.monotonic() < deadline, "the second request never reached the queue"
            time.sleep(0.05)
        third = call(http, "prefill", [None, "Document number 3 about ferries.", None])
    assert "queue is full" in third.lower(), third  # the third is turned away, with a message
    engine.gate.set()
    first.join(60)
    second.join(60)
    assert "prefilled" in replies[1] and "prefilled" in replies[2]  # the others are served


def test_an_upload_over_the_limit_is_refused(served):
    url, kvqa_app, engine = served
    engine.gate.set()
    with httpx.Client(base_url=url, timeout=60) as http:
        too_big = http.post("gradio_api/upload", files={"files": ("big.txt", b"x" * (2 * 2**20), "text/plain")})
        small = http.post("gradio_api/upload", files={"files": ("small.txt", b"ferries", "text/plain")})
    assert too_big.status_code == 413, too_big.text
    assert small.status_code == 200 and json.loads(small.text)


@pytest.fixture(params=[True, False], ids=["behind a proxy", "direct"])
def one_document_each(request, monkeypatch):
    """An app served with one open document per client address, trusting X-Forwarded-For only behind a proxy. Uvicorn
    (under Gradio) itself takes the client's address from X-Forwarded-For on connections from FORWARDED_ALLOW_IPS,
    loopback by default; told to trust another address, it leaves loopback connections as a remote client's are, so
    what is tested is kvqa's own reading of the header."""
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "192.0.2.1")
    kvqa_app = app_module.KvqaApp(Config.of(sessions_per_client=1), FakeEngine(), budget=CacheBudget(2**30),
                                  behind_proxy=request.param)
    page = kvqa_app.demo
    port = free_port()
    app_module.serve(page, kvqa_app, concurrency=2, queue_size=8, host="127.0.0.1", port=port,
                     prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/", request.param
    finally:
        page.close()


def test_per_client_limits_hold_through_a_served_app(one_document_each):
    """Per-client limits behind a proxy: several clients by X-Forwarded-For (the proxy appends the address it saw,
    last), each /prefill call a new session: behind a trusted proxy, a client past its limit is refused and the others
    are served; served directly, the header is the client's own word and is ignored, so it cannot buy a second document.
    Kills: the per-client limit removed; X-Forwarded-For ignored behind a proxy; trusted when not behind one."""
    url, behind_proxy = one_document_each

    def prefill(forwarded_for: str, n: int) -> str:
        with httpx.Client(base_url=url, timeout=60, headers={"X-Forwarded-For": forwarded_for}) as http:
            return call(http, "prefill", [None, f"Document number {n} about ferries.", None])

    first = prefill("198.51.100.9, 10.0.0.1", 1)
    again = prefill("10.0.0.1", 2)  # the same client (the proxy's last entry), another tab
    other = prefill("198.51.100.9, 10.0.0.2", 3)  # the first entry is the client's own word: not who it is
    assert "prefilled" in first and "event: error" in again and "1 documents open" in again, again
    if behind_proxy:
        assert "prefilled" in other, other
    else:
        assert "event: error" in other and "1 documents open" in other, other
