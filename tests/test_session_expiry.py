"""Sessions that end free their caches: the app's memory returns near its baseline once their time-to-live passes
(shortened here to a few seconds), through gr.State's delete_callback."""

from __future__ import annotations

import re
import time
from pathlib import Path

import psutil
from gradio_client import Client

from scripts.load_test import Server

SAMPLE = Path(__file__).parent.parent / "assets" / "declaration-of-independence.md"
TTL = 15  # seconds: a session's time-to-live, shortened (the app's default is an hour)
RESERVE = 512 + 8  # the server's question and answer reserve: KVQA_MAX_QUESTION_TOKENS default + max_new_tokens=8


def rss(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


def test_memory_returns_near_its_baseline_after_sessions_expire(monkeypatch, default_lm):
    monkeypatch.setenv("KVQA_SESSION_TTL", str(TTL))
    monkeypatch.setenv("KVQA_CACHES_PER_CLIENT", "4")  # the four sessions below share one address (the default: 3)
    server = Server(max_new_tokens=8, concurrency=None)
    try:
        server.wait_ready(time.monotonic() + 180)
        warm = Client(server.url, verbose=False)  # loads everything a session needs once, then expires too
        warm.predict(text="A warm-up document.", api_name="/prefill")
        time.sleep(TTL + 4)  # Gradio looks for expired sessions every second
        baseline = rss(server.pid)
        clients = [Client(server.url, verbose=False) for _ in range(4)]
        texts = [SAMPLE.read_text() + f"\nCopy {n}." for n in range(4)]  # four documents: four caches of ~80 MB
        touched, loads = [], []  # per session: when it was last asked something, the bytes its cache wrote
        for n, client in enumerate(clients):
            touched.append(time.monotonic())
            status = client.predict(text=texts[n], api_name="/prefill")
            tokens, nbytes = (int(x) for x in re.search(r": (\d+) tokens.*cache (\d+) bytes", status).groups())
            loads.append(nbytes * tokens // (tokens + RESERVE))  # the reserve's pages are never touched
            for k in range(n):  # the earlier sessions kept alive: their document again only renews their TTL
                touched[k] = time.monotonic()
                assert "already loaded" in clients[k].predict(text=texts[k], api_name="/prefill")
        measured = time.monotonic()
        loaded = rss(server.pid)
        # only the sessions surely alive now count: asked something less than TTL ago (Gradio's clock starts after)
        alive = [nbytes for asked, nbytes in zip(touched, loads) if measured - asked < TTL]
        assert len(alive) >= 2, f"a prefill took longer than the {TTL} s TTL: {touched}, measured at {measured}"
        written = sum(alive)
        # the caches must show in RSS for the check below to mean anything; not all of them do: the allocator may
        # reuse pages the warm-up session (or an expired one) freed (seen once at 0.49 of `written`, loaded machine)
        assert loaded - baseline > 0.35 * written, (baseline, loaded, written, len(alive))
        deadline = time.monotonic() + TTL + 20
        while time.monotonic() < deadline and rss(server.pid) - baseline > 0.25 * (loaded - baseline):
            time.sleep(1)
        after = rss(server.pid)
        print(f"server RSS: baseline {baseline / 2**20:.0f} MiB, 4 sessions {loaded / 2**20:.0f} MiB "
              f"(caches written {sum(loads) / 2**20:.0f} MiB), after they expired {after / 2**20:.0f} MiB")
        assert after - baseline < 0.25 * (loaded - baseline), (baseline, loaded, after)
    finally:
        server.stop()
