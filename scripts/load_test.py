#!/usr/bin/env python
"""Load test for the kvqa app, on loopback only: M concurrent gradio_client sessions x K questions through the queue.

Each session is its own gradio_client.Client (so its own server-side Session) with its own generated document,
which holds a secret code word no other session's document has. A session prefills its document with /prefill,
then asks its K questions one after the other with /ask; the first question asks for the secret code, so its answer
proves which document it came from. All sessions run at once, one thread each.

    .venv/bin/python scripts/load_test.py                        # launches app.py on a free 127.0.0.1 port
    .venv/bin/python scripts/load_test.py --sessions 2 --questions 2 --max-new-tokens 8 --json
    .venv/bin/python scripts/load_test.py --url http://127.0.0.1:7860/   # a server that is already running

Reported (per /ask, as the client sees it): queue_wait_s, from submit until the client hears that processing
started (each status update is observed as the client receives it, and Job.status() is also polled every 20 ms;
a busy server may send that message late), and
first_text_s, from submit until the client receives the first piece of the streamed answer (its time to first
token, queue wait included), and time_to_result_s, from submit to the whole answer; the server-side time to first
token of each answer is shown in the UI's latency table, and the public API does not return it. Also: answered,
failed (the server answered with an error message), lost
(submitted but neither answered nor failed with an error by the end, e.g. cancelled when --timeout passed; must
be 0), cross_talk (answers naming another session's code word, or a code answer without its own; must be 0), and
the server process's peak resident memory (RSS, with its children), sampled with psutil every 50 ms while the run
goes (--url: the process listening on that port, when it can be found).

The run is bounded: at most 48 sessions and 20 questions each, and --timeout seconds in all (server start
included); when it passes, outstanding jobs are cancelled and counted honestly. A server this script launched is
always stopped at the end, also on errors, Ctrl+C and SIGTERM. Exit code: 0 when every question was answered with
no cross-talk, 1 otherwise, 2 for bad arguments (such as a --url that is not 127.0.0.1 or localhost).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_SESSIONS = 48
MAX_QUESTIONS = 20
POLL_S = 0.02  # job status polling interval
SAMPLE_S = 0.05  # server memory sampling interval
STARTUP_S = 180.0  # longest wait for a launched server to answer (also bounded by --timeout)
GRACE_S = 15.0  # after the deadline: how long to wait for session threads to record their cancelled jobs

# one code word per session: none is a substring of another, none occurs in the filler or the questions
WORDS = [
    "pelican", "marigold", "tangerine", "walrus", "saffron", "obsidian", "juniper", "kestrel", "lantern", "mosaic",
    "quartz", "violet", "zeppelin", "cobalt", "hazelnut", "igloo", "jasmine", "kiwi", "lobster", "magnolia",
    "nebula", "origami", "pistachio", "quokka", "raccoon", "sapphire", "tornado", "umbrella", "velvet", "wombat",
    "xylophone", "yodel", "zucchini", "avocado", "buffalo", "cactus", "dolphin", "emerald", "flamingo", "gondola",
    "harmonica", "iguana", "jellyfish", "koala", "lemur", "meteor", "narwhal", "octopus",
]
FILLER = [
    "The harbour town keeps a small lighthouse that is painted white and red.",
    "Every spring the market square hosts a fair with music, bread and cheese.",
    "The river that crosses the valley freezes only in the coldest winters.",
    "A narrow railway connects the town to the capital in about three hours.",
    "The library opens at nine in the morning and closes at six in the evening.",
    "Local farmers grow apples, pears and barley on the terraced hills.",
    "The old bridge was rebuilt in stone after a flood carried the wooden one away.",
    "Children learn to sail on the lake during the long summer holidays.",
    "The town council meets on the first Monday of every month.",
    "A bakery near the station is famous for its honey cakes.",
    "Fishing boats leave before dawn and return in the early afternoon.",
    "The museum displays maps, coins and tools from the last three centuries.",
]
PROOF_QUESTION = "What is the secret code?"
OTHER_QUESTIONS = [
    "When does the library open?",
    "What do local farmers grow?",
    "How long does the railway take to reach the capital?",
    "What is the bakery near the station famous for?",
    "When does the town council meet?",
    "What does the museum display?",
]
RUNNING = ("PROCESSING", "PROGRESS", "ITERATING")  # status codes that mean the job left the queue
NOTE = ("/ask streams: first_text_s is from submit to the client's first piece of the answer (queue wait "
        "included), time_to_result_s to the whole answer. The server-side time to first token of each answer, "
        "without the queue, is shown in the UI's latency table; the public API does not return it.")

assert len(set(WORDS)) == len(WORDS) == MAX_SESSIONS
assert not any(a != b and a in b for a in WORDS for b in WORDS)
assert not any(w in " ".join(FILLER + OTHER_QUESTIONS + [PROOF_QUESTION]).lower() for w in WORDS)


def document(i: int) -> str:
    """Session i's document: its code word at the start and the end, filler in a session-specific order between
    (about 400 tokens)."""
    word = WORDS[i]
    k = i % len(FILLER)
    body = " ".join((FILLER[k:] + FILLER[:k]) * 2)
    return (f"This is the briefing for session {i}. The secret code of session {i} is {word}.\n\n{body}\n\n"
            f"Remember: the secret code is {word}.")


def questions(k: int) -> list[str]:
    return [PROOF_QUESTION] + [OTHER_QUESTIONS[n % len(OTHER_QUESTIONS)] for n in range(k - 1)]


def mentions(text: str, word: str) -> bool:
    return re.search(rf"\b{re.escape(word)}\b", text, re.IGNORECASE) is not None


# ---- loopback only ----------------------------------------------------------------------------------------------

def loopback_url(url: str) -> str:
    """The URL with its host checked to be 127.0.0.1 or localhost (then written 127.0.0.1); ValueError otherwise."""
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"--url must be http:// or https://, not {parts.scheme!r}")
    if parts.hostname not in ("127.0.0.1", "localhost"):
        raise ValueError(f"--url must point at 127.0.0.1 or localhost (loopback only), not {parts.hostname!r}")
    if parts.port is None:
        raise ValueError("--url must include the port, e.g. http://127.0.0.1:7860/")
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    return f"{parts.scheme}://127.0.0.1:{parts.port}{path}"


def keep_off_proxies() -> None:
    """Loopback requests must never go through a proxy named in the environment (httpx and urllib honour them)."""
    for var in ("NO_PROXY", "no_proxy"):
        current = [h for h in os.environ.get(var, "").split(",") if h]
        os.environ[var] = ",".join(current + [h for h in ("127.0.0.1", "localhost") if h not in current])


def http_ok(url: str, timeout: float) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


# ---- the server ---------------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child before exec: SIGTERM it if this script dies, even by SIGKILL
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class Server:
    """app.py in a subprocess on a free loopback port; stop() always ends it (terminate, then kill)."""

    def __init__(self, *, max_new_tokens: int, concurrency: int | None, extra_args: tuple[str, ...] = ()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = dict(os.environ, KVQA_MAX_NEW_TOKENS=str(max_new_tokens), GRADIO_ANALYTICS_ENABLED="False")
        for var in ("KVQA_SHARE", "GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT", "GRADIO_SHARE"):
            env.pop(var, None)  # never a share link, never another host or port
        command = [sys.executable, str(ROOT / "app.py"), "--host", "127.0.0.1", "--port", str(self.port)]
        if concurrency is not None:
            command += ["--concurrency", str(concurrency)]
        command += list(extra_args)
        self.log = tempfile.NamedTemporaryFile(prefix="kvqa-load-server-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(Path(self.log.name).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self, deadline: float, *, path: str = "gradio_api/info") -> None:
        end = min(deadline, time.monotonic() + STARTUP_S)
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"app.py exited with code {self.proc.returncode} while starting:\n"
                                   f"{self.log_tail()}")
            if http_ok(self.url + path, timeout=2):
                return
            time.sleep(0.25)
        raise RuntimeError(f"app.py did not answer {self.url}{path} in time:\n{self.log_tail()}")

    def stop(self, *, keep_log: bool = False) -> None:
        """End the server; its log is removed unless keep_log (then remove_log() later, or keep it to read)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()
        if not keep_log:
            self.remove_log()

    def remove_log(self) -> None:
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


def listening_pid(port: int) -> int | None:
    """The process listening on a loopback port, when psutil may see it."""
    import psutil

    try:
        for c in psutil.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
                return c.pid
    except (psutil.AccessDenied, OSError):
        pass
    return None


class MemorySampler(threading.Thread):
    """Samples a process's RSS (with its children's) every 50 ms until stopped; keeps the first and the peak."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        import psutil

        self.process = psutil.Process(pid)
        self.start_bytes: int | None = None
        self.peak_bytes = 0
        self.samples = 0
        self._halt = threading.Event()

    def sample(self) -> None:
        import psutil

        try:
            rss = self.process.memory_info().rss
            for child in self.process.children(recursive=True):
                try:
                    rss += child.memory_info().rss
                except psutil.Error:
                    pass
        except psutil.Error:
            return
        if self.start_bytes is None:
            self.start_bytes = rss
        self.peak_bytes = max(self.peak_bytes, rss)
        self.samples += 1

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(SAMPLE_S)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2)
        self.sample()


# ---- the sessions -------------------------------------------------------------------------------------------------

@dataclass
class Call:
    """One submitted job (a prefill or a question) and what became of it."""

    session: int
    endpoint: str
    question: str | None = None
    state: str = "pending"  # pending -> answered | failed (error message) | cancelled (deadline or interrupt)
    answer: str | None = None
    error: str | None = None
    queue_wait_s: float | None = None
    first_text_s: float | None = None
    time_to_result_s: float | None = None
    queue_size_seen: int = 0


class StatusWatch:
    """Every status update of one job as the client receives it. Job.status() keeps only the latest, and the client
    can receive 'processing started' and 'completed' within one 20 ms poll (its job thread reads messages in 50 ms
    batches, and a busy server can flush both at once), so the updates are also observed as they arrive: the
    job's update queue is wrapped. The 20 ms poll of Job.status() stays as the fallback."""

    def __init__(self, job):
        self.started: datetime | None = None  # when the client heard that processing started
        self.first_output: datetime | None = None  # when the first streamed piece of the answer arrived
        self.queue_size = 0
        communicator = getattr(job, "communicator", None)
        updates = getattr(communicator, "updates", None)
        if updates is not None:
            put_nowait = updates.put_nowait

            def observe(update, _put_nowait=put_nowait):
                self.note(update)
                return _put_nowait(update)

            updates.put_nowait = observe
        self.note(job.status())  # what arrived before the wrapper was in place

    def note(self, update) -> None:
        code = getattr(update, "code", None)
        if code is None:
            return
        if getattr(update, "queue_size", None):
            self.queue_size = max(self.queue_size, update.queue_size)
        if self.started is None and code.name in RUNNING:
            self.started = update.time or datetime.now()
        if self.first_output is None and code.name == "ITERATING":
            self.first_output = update.time or datetime.now()


def run_call(job, call: Call, submitted: datetime, deadline: float, stop: threading.Event) -> None:
    """Wait for a job, polling its status every 20 ms; fill in the call. Cancels the job at the deadline."""
    finished: list[datetime] = []
    job.future.add_done_callback(lambda _: finished.append(datetime.now()))
    watch = StatusWatch(job)
    try:
        while not job.done():
            if time.monotonic() >= deadline or stop.is_set():
                job.cancel()
                call.state = "cancelled"
                return
            watch.note(job.status())
            time.sleep(POLL_S)
    finally:
        call.queue_size_seen = watch.queue_size
    done = finished[0] if finished else datetime.now()
    call.time_to_result_s = (done - submitted).total_seconds()
    if watch.started is not None:
        call.queue_wait_s = (min(watch.started, done) - submitted).total_seconds()
    call.first_text_s = ((min(watch.first_output, done) if watch.first_output else done) - submitted).total_seconds()
    try:
        result = job.result(timeout=0)
    except Exception as e:  # the server's gr.Error message, or a client-side failure
        call.state, call.error = "failed", f"{type(e).__name__}: {e}"
        return
    call.state = "answered"
    call.answer = result if isinstance(result, str) else str(result)


@dataclass
class SessionRun:
    index: int
    questions: list[str]
    document: int = -1  # whose document it reads: its own (-1), or one all sessions share (--shared)
    calls: list[Call] = field(default_factory=list)
    error: str | None = None  # why the session could not start (connect or prefill)


def run_session(run: SessionRun, url: str, start: threading.Barrier, deadline: float, stop: threading.Event,
                lock: threading.Lock) -> None:
    from gradio_client import Client

    client = None
    try:
        client = Client(url, verbose=False)
        try:
            start.wait(timeout=max(0.0, deadline - time.monotonic()))
        except threading.BrokenBarrierError:
            pass
        prefill = Call(run.index, "/prefill")
        with lock:
            run.calls.append(prefill)
        submitted = datetime.now()
        text = document(run.index if run.document < 0 else run.document)
        run_call(client.submit(text=text, api_name="/prefill"), prefill, submitted, deadline, stop)
        if prefill.state != "answered":
            run.error = prefill.error or "prefill cancelled"
            return
        for question in run.questions:
            if time.monotonic() >= deadline or stop.is_set():
                return
            call = Call(run.index, "/ask", question)
            with lock:
                run.calls.append(call)
            submitted = datetime.now()
            run_call(client.submit(question=question, api_name="/ask"), call, submitted, deadline, stop)
            if call.state == "cancelled":
                return
    except Exception as e:  # connecting, or submitting: recorded, never raised out of the thread
        run.error = f"{type(e).__name__}: {e}"
        try:
            start.abort()
        except Exception:
            pass
    finally:
        if client is not None:
            try:
                client.close()
            except Exception:
                pass


# ---- figures ------------------------------------------------------------------------------------------------------

def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    values = sorted(values)
    pos = (len(values) - 1) * q / 100
    lo, hi = int(pos), min(int(pos) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def spread(values: list[float]) -> dict:
    def r(x):
        return None if x is None else round(x, 4)

    return {"n": len(values), "p50": r(percentile(values, 50)), "p95": r(percentile(values, 95)),
            "max": r(max(values) if values else None)}


def check_answer(call: Call, index: int, sessions: int) -> str | None:
    """Why this answer is cross-talk, or None: it names another session's code word, or it is the answer to the
    code question and lacks its own."""
    text = call.answer or ""
    foreign = [WORDS[j] for j in range(sessions) if j != index and mentions(text, WORDS[j])]
    if foreign:
        return f"names other sessions' code words {foreign}"
    if call.question == PROOF_QUESTION and not mentions(text, WORDS[index]):
        return f"does not name its own code word {WORDS[index]!r}"
    return None


def summarize(runs: list[SessionRun], *, sessions: int, questions_per_session: int, wall_s: float) -> dict:
    asks = [c for r in runs for c in r.calls if c.endpoint == "/ask"]
    prefills = [c for r in runs for c in r.calls if c.endpoint == "/prefill"]
    answered = [c for c in asks if c.state == "answered"]
    failed = [c for c in asks if c.state == "failed"]
    cross = []
    for c in answered:
        owner = next((r.document for r in runs if r.index == c.session), -1)
        why = check_answer(c, c.session if owner < 0 else owner, sessions)
        if why:
            cross.append({"session": c.session, "question": c.question, "answer": c.answer, "why": why})
    errors = [f"session {c.session} {c.endpoint}: {c.error}" for c in prefills + failed if c.error]
    errors += [f"session {r.index}: {r.error}" for r in runs if r.error and not any(c.error for c in r.calls)]
    planned = sessions * questions_per_session
    return {
        "sessions": sessions,
        "questions_per_session": questions_per_session,
        "planned": planned,
        "submitted": len(asks),
        "answered": len(answered),
        "failed": len(failed),
        # submitted but neither answered nor failed with an error message: cancelled at the deadline, or never heard
        "lost": len(asks) - len(answered) - len(failed),
        "not_submitted": planned - len(asks),
        "cross_talk": len(cross),
        "cross_talk_examples": cross[:5],
        "prefill": {"ok": sum(c.state == "answered" for c in prefills),
                    "failed": sum(c.state == "failed" for c in prefills),
                    "lost": sum(c.state not in ("answered", "failed") for c in prefills),
                    "queue_wait_s": spread([c.queue_wait_s for c in prefills if c.queue_wait_s is not None]),
                    "time_to_result_s": spread([c.time_to_result_s for c in prefills
                                                if c.state == "answered"])},
        "queue_wait_s": spread([c.queue_wait_s for c in answered if c.queue_wait_s is not None]),
        "queue_wait_missing": sum(c.queue_wait_s is None for c in answered),  # never heard 'processing started'
        "first_text_s": spread([c.first_text_s for c in answered]),
        "time_to_result_s": spread([c.time_to_result_s for c in answered]),
        "max_queue_size_seen": max([c.queue_size_seen for r in runs for c in r.calls], default=0),
        "wall_s": round(wall_s, 3),
        "answers_per_s": round(len(answered) / wall_s, 3) if wall_s > 0 else None,
        "errors": errors[:10],
        "answers": [{"session": c.session, "question": c.question, "answer": c.answer} for c in answered][:3],
    }


def mib(n) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.0f} MiB"


def fmt(s: dict) -> str:
    if not s["n"]:
        return "n/a"
    return f"p50 {s['p50']:.3f} s, p95 {s['p95']:.3f} s, max {s['max']:.3f} s (n={s['n']})"


def text_report(r: dict) -> str:
    how = (f"launched app.py, pid {r['server_pid']}, concurrency {r['concurrency'] or 'app default'}, "
           f"max new tokens {r['max_new_tokens']}" if r["launched"]
           else f"server already running, pid {r['server_pid']}" if r["server_pid"]
           else "server already running, its process not found: no memory figures")
    lines = [
        f"kvqa load test: {r['sessions']} sessions x {r['questions_per_session']} questions on {r['url']} ({how})",
        f"questions:  {r['planned']} planned, {r['submitted']} submitted, {r['answered']} answered, "
        f"{r['failed']} failed, {r['lost']} lost, {r['not_submitted']} not submitted; cross-talk {r['cross_talk']}",
        f"prefill:    {r['prefill']['ok']} ok, {r['prefill']['failed']} failed, {r['prefill']['lost']} lost; "
        f"time to result {fmt(r['prefill']['time_to_result_s'])}",
        f"/ask queue wait:      {fmt(r['queue_wait_s'])}"
        + (f"; {r['queue_wait_missing']} answers without a 'processing started' status"
           if r["queue_wait_missing"] else ""),
        f"/ask first text:      {fmt(r['first_text_s'])}",
        f"/ask time to result:  {fmt(r['time_to_result_s'])}",
        f"run:        {r['wall_s']:.1f} s wall, {r['answers_per_s'] or 0:.2f} answers/s, largest queue seen "
        f"{r['max_queue_size_seen']}",
        f"server RSS: {mib(r['server_rss_start_bytes'])} at start, {mib(r['server_rss_peak_bytes'])} peak "
        f"({r['server_rss_samples']} samples)",
    ]
    if r["timed_out"]:
        lines.append(f"TIMED OUT after --timeout {r['timeout_s']} s: outstanding jobs were cancelled")
    if r["interrupted"]:
        lines.append("INTERRUPTED: outstanding jobs were cancelled")
    if r["error"]:
        lines.append(f"ERROR: {r['error']}")
    for e in r["errors"]:
        lines.append(f"  error: {e}")
    for x in r["cross_talk_examples"]:
        lines.append(f"  cross-talk: session {x['session']} {x['question']!r} -> {x['answer']!r} ({x['why']})")
    if r.get("server_log"):
        lines.append(f"server log kept at {r['server_log']}; its last lines:")
        lines += [f"  | {line}" for line in r["server_log_tail"].splitlines()]
    lines.append(f"note: {NOTE}")
    lines.append("result: " + ("OK" if r["ok"] else "FAILED"))
    return "\n".join(lines)


# ---- main ---------------------------------------------------------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(description="Load-test the kvqa app on loopback: M concurrent gradio_client "
                                                 "sessions x K questions through the queue.")
    parser.add_argument("--url", help="test a server already running at this 127.0.0.1/localhost URL "
                                      "(default: launch app.py on a free loopback port)")
    parser.add_argument("--sessions", type=int, default=8, help=f"concurrent sessions M (1-{MAX_SESSIONS}, default 8)")
    parser.add_argument("--questions", type=int, default=3,
                        help=f"questions per session K (1-{MAX_QUESTIONS}, default 3)")
    parser.add_argument("--timeout", type=float, default=900.0, help="bound for the whole run, server start included "
                                                                     "(seconds, default 900, at most 3600)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="answer length for the launched server (KVQA_MAX_NEW_TOKENS; default 48)")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="answers computed at once by the launched server (app.py --concurrency; default: app's)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    parser.add_argument("--shared", action="store_true", help="every session reads the same document (session 0's): "
                        "one prefill shared by all")
    args = parser.parse_args(argv)
    if not 1 <= args.sessions <= MAX_SESSIONS:
        parser.error(f"--sessions must be between 1 and {MAX_SESSIONS}")
    if not 1 <= args.questions <= MAX_QUESTIONS:
        parser.error(f"--questions must be between 1 and {MAX_QUESTIONS}")
    if not 0 < args.timeout <= 3600:
        parser.error("--timeout must be more than 0 and at most 3600 seconds")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        parser.error("--max-new-tokens must be at least 1")
    if args.concurrency is not None and args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    if args.url:
        if args.max_new_tokens is not None or args.concurrency is not None:
            parser.error("--max-new-tokens and --concurrency apply only to a server this script launches, not --url")
        try:
            args.url = loopback_url(args.url)
        except ValueError as e:
            parser.error(str(e))
    elif args.max_new_tokens is None:
        args.max_new_tokens = 48
    return args


def _sigterm(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    keep_off_proxies()
    began = time.monotonic()
    deadline = began + args.timeout
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _sigterm) if in_main else None  # SIGTERM stops the server too
    server = sampler = None
    stop = threading.Event()
    runs = [SessionRun(i, questions(args.questions), document=0 if args.shared else -1) for i in range(args.sessions)]
    error = None
    interrupted = False
    unfinished = 0
    run_start = run_end = None
    try:
        if args.url:
            url = args.url
            if not http_ok(url + "gradio_api/info", timeout=10):
                raise RuntimeError(f"no kvqa app answers at {url}gradio_api/info")
            pid = listening_pid(urllib.parse.urlsplit(url).port)
        else:
            server = Server(max_new_tokens=args.max_new_tokens, concurrency=args.concurrency)
            url, pid = server.url, server.pid
            server.wait_ready(deadline)
        if pid is not None:
            sampler = MemorySampler(pid)
            sampler.start()
        lock = threading.Lock()
        barrier = threading.Barrier(args.sessions)
        threads = [threading.Thread(target=run_session, args=(r, url, barrier, deadline, stop, lock), daemon=True,
                                    name=f"session-{r.index}") for r in runs]
        run_start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:  # past the deadline the threads cancel their jobs; give them GRACE_S in all to record it
            t.join(max(0.0, deadline + GRACE_S - time.monotonic()))
        unfinished = sum(t.is_alive() for t in threads)
        stop.set()  # anything still outstanding past deadline + grace is cancelled and counted as lost
        run_end = time.monotonic()
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        time.sleep(3 * POLL_S)  # let the session threads cancel and record their jobs
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
        stop.set()
    finally:
        if sampler is not None:
            sampler.stop()
        if server is not None:
            server.stop(keep_log=True)  # kept if the run failed: a server-side error's traceback is only there
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if run_start is not None and run_end is None:
        run_end = time.monotonic()
    with_url = args.url or (server.url if server else None)
    report = {
        "url": with_url,
        "launched": server is not None,
        "server_pid": server.pid if server else (sampler.process.pid if sampler else None),
        "concurrency": args.concurrency,
        "max_new_tokens": args.max_new_tokens,
        "timeout_s": args.timeout,
        **summarize(runs, sessions=args.sessions, questions_per_session=args.questions,
                    wall_s=(run_end - run_start) if run_start is not None else 0.0),
        "server_rss_start_bytes": sampler.start_bytes if sampler else None,
        "server_rss_peak_bytes": sampler.peak_bytes if sampler else None,
        "server_rss_samples": sampler.samples if sampler else 0,
        "timed_out": time.monotonic() >= deadline and (
            unfinished > 0 or error is not None or any(c.state == "cancelled" for r in runs for c in r.calls)),
        "interrupted": interrupted,
        "error": error,
        "note": NOTE,
    }
    report["ok"] = (error is None and not interrupted and report["answered"] == report["planned"]
                    and report["failed"] == report["lost"] == report["cross_talk"] == 0)
    if server is not None:
        if report["ok"]:
            server.remove_log()
        else:  # Gradio hides an unexpected server error's message from clients: its traceback is in this log
            report["server_log"], report["server_log_tail"] = server.log.name, server.log_tail(40)
    print(json.dumps(report) if args.json else text_report(report), flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
