"""The app reads only files uploaded to it. Server paths sent through the API (absolute, relative, `..`,
symlinks leading out) are refused without being read, through gradio_client, raw HTTP and the browser's own
(private) events; per-client limits keep one client from evicting everyone else's caches; --auth asks for a login."""

from __future__ import annotations

import logging
import secrets
import time
from pathlib import Path

import gradio as gr
import httpx
import pytest
from gradio_client import Client

import app
import kvqa
from kvqa.cache.budget import CacheBudget
from kvqa.documents.uploads import NOT_AN_UPLOAD, upload_folder, uploaded_file
from kvqa.engines import LocalEngine
from kvqa.model.kv_cache import bytes_per_token
from kvqa.session.session import Session
from scripts.load_test import Server

ROOT = Path(__file__).parent.parent


def file_data(path) -> dict:
    return {"path": str(path), "meta": {"_type": "gradio.FileData"}}


@pytest.fixture
def secret(tmp_path):
    """A readable .md file outside the upload folder, holding a word no answer could guess."""
    word = f"zebra{secrets.token_hex(4)}"
    path = tmp_path / "secret.md"
    path.write_text(f"The server's secret word is {word}.")
    return path


@pytest.fixture
def reads(monkeypatch):
    """Every document the app reads, by path (the server runs in this process)."""
    import kvqa.documents.reading
    import kvqa.ui.loading

    seen = []
    real = kvqa.documents.reading.load_document
    spy = lambda path, **kw: seen.append(str(path)) or real(path, **kw)  # noqa: E731
    monkeypatch.setattr(kvqa.ui.loading, "load_document", spy)  # the sample
    monkeypatch.setattr(kvqa.documents.reading, "load_document", spy)  # what load_documents() calls for uploads
    return seen


def outside_paths(secret: Path, tmp_path: Path) -> dict[str, str]:
    folder = upload_folder()
    folder.mkdir(parents=True, exist_ok=True)
    link_dir = folder / f"kvqa-test-{secrets.token_hex(4)}"
    link_dir.mkdir()
    (link_dir / "innocent.md").symlink_to(secret)
    (link_dir / "subdir").symlink_to(secret.parent, target_is_directory=True)
    return {
        "absolute": str(secret),
        "relative": "README.md",  # the app's own file, relative to the server's working folder
        "dot-dot": str(folder / ".." / ".." / ".." / ".." / ".." / secret.relative_to("/")),
        "symlink out": str(link_dir / "innocent.md"),
        "symlinked folder out": str(link_dir / "subdir" / "secret.md"),
        "missing": str(tmp_path / "does-not-exist.md"),
        "the upload folder": str(folder),
    }


def test_uploaded_file_accepts_only_files_inside_the_upload_folder(secret, tmp_path):
    for kind, path in outside_paths(secret, tmp_path).items():
        with pytest.raises(kvqa.DocumentError) as e:
            uploaded_file(path)
        assert str(e.value) == NOT_AN_UPLOAD, kind  # the same words whether or not the file exists
    inside = upload_folder() / f"kvqa-test-{secrets.token_hex(4)}"
    inside.mkdir(parents=True)
    (inside / "notes.txt").write_text("notes")
    (inside / "link.txt").symlink_to(inside / "notes.txt")  # a symlink that stays inside is fine
    assert uploaded_file(inside / "notes.txt") == (inside / "notes.txt").resolve()
    assert uploaded_file(inside / "link.txt") == (inside / "notes.txt").resolve()
    with pytest.raises(kvqa.DocumentError, match="no longer on the server"):
        uploaded_file(inside / "gone.txt")


def test_paths_that_cannot_be_resolved_are_refused_and_the_refusal_logged(caplog):
    """A NUL byte, a symlink loop inside the upload folder, something that is not a path: refused with the same words,
    never accepted because resolving failed; every refusal is logged with the path as given (cut at 300 characters).
    Kills: the failure branch of `uploaded_file` counting as inside, the log line's path dropped or cut elsewhere."""
    folder = upload_folder()
    loop = folder / f"kvqa-test-{secrets.token_hex(4)}"
    loop.mkdir(parents=True)
    (loop / "a.md").symlink_to(loop / "b.md")
    (loop / "b.md").symlink_to(loop / "a.md")
    cases = {"NUL byte": str(folder / "notes\0.md"), "symlink loop": str(loop / "a.md"), "not a path": 42,
             "a long path outside": "/etc/" + "x" * 400}
    for kind, path in cases.items():
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kvqa.documents.uploads"), pytest.raises(kvqa.DocumentError) as e:
            uploaded_file(path)
        assert str(e.value) == NOT_AN_UPLOAD, kind
        assert [r.getMessage() for r in caplog.records] == [
            f"refused a file path that is not an upload: {str(path)[:300]!r}"], kind


def test_the_app_handlers_refuse_server_paths(secret, tmp_path, reads):
    """What every handler does with a path, also if a deployment bypasses Gradio's own check (see the next test)."""
    for kind, path in outside_paths(secret, tmp_path).items():
        with pytest.raises(gr.Error, match="was not uploaded to this app") as e:
            app.kvqa_app.api.api_prefill(file=path, session=None)
        assert str(secret) not in str(e.value), kind
        with pytest.warns(UserWarning, match="was not uploaded to this app"):
            outputs = app.kvqa_app.reads.on_upload(path, None)
        assert outputs == gr.skip()  # no session created, nothing on screen changes
    assert reads == []  # nothing was read


def test_every_handler_that_takes_a_file_refuses_server_paths(secret, tmp_path, reads):
    """Walk the Blocks' events: every handler with a file input is called with each server path in that input (the
    rest as a browser would send them); each refuses it, names no path, and reads nothing. A new file input makes
    this test call its handler too, or fail until it knows how."""
    calls = {
        "on_upload": lambda path: app.kvqa_app.reads.on_upload(path, None),
        "on_paste": lambda path: app.kvqa_app.reads.on_paste("", None, [path]),
        "api_prefill": lambda path: app.kvqa_app.api.api_prefill(file=path, session=None),
    }
    with_files = {getattr(f.fn, "__name__", str(f.fn)) for f in app.demo.fns.values()
                  if any(isinstance(c, (gr.File, gr.UploadButton)) for c in f.inputs)}
    assert with_files == set(calls), f"handlers taking files: {with_files}; teach this test the new ones"
    for name, call in calls.items():
        for kind, path in outside_paths(secret, tmp_path).items():
            if name.startswith("api_"):  # the API refuses with an error the client sees
                with pytest.raises(gr.Error, match="was not uploaded to this app") as refused:
                    call(path)
                assert str(secret) not in str(refused.value), (name, kind)
                continue
            with pytest.warns(UserWarning, match="was not uploaded to this app") as warned:  # the page: a toast
                outputs = call(path)
            assert outputs == gr.skip(), (name, kind)  # no session made, nothing on screen changes
            assert all(str(secret) not in str(w.message) for w in warned), (name, kind)
    assert reads == []  # nothing was read


def sse_text(http: httpx.Client, url: str, **params) -> str:
    with http.stream("GET", url, params=params) as response:
        lines = []
        for line in response.iter_lines():
            lines.append(line)
            if "process_completed" in line or (len(lines) > 1 and lines[-2].startswith("event: error")):
                break
        return "\n".join(lines)


def upload_handler(config: dict) -> int:
    """The index of the upload box's reading handler (on_upload runs after the read is announced, in a `.then`)."""
    return next(n for n, d in enumerate(config["dependencies"]) if d.get("api_name") == "on_upload")


def test_raw_http_calls_naming_server_paths_are_refused(server, secret, tmp_path, reads):
    """A remote client can only name a path, not upload it: through the public endpoint and through the browser's
    private upload event, every server path is refused, with no path or traceback in the reply."""
    with httpx.Client(base_url=server, timeout=60) as http:
        config = http.get("config").json()
        upload_id = next(c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == "upload")
        upload_event = upload_handler(config)
        for kind, path in outside_paths(secret, tmp_path).items():
            event = http.post("gradio_api/call/prefill", json={"data": [file_data(path), None, None]}).json()
            reply = sse_text(http, f"gradio_api/call/prefill/{event['event_id']}")
            assert "event: error" in reply, (kind, reply)
            session_hash = secrets.token_hex(6)
            joined = http.post("gradio_api/queue/join", json={
                "data": [[file_data(path)], None, "en"], "fn_index": upload_event, "session_hash": session_hash,
                "event_data": None, "trigger_id": upload_id})
            assert joined.status_code == 200, joined.text
            page = sse_text(http, "gradio_api/queue/data", session_hash=session_hash)
            # refused by Gradio (an error, no path named) or by kvqa (its warning, the page left as it was)
            assert '"success":false' in page.replace(" ", "") or "was not uploaded to this app" in page, (kind, page)
            reply += page
            assert secret.read_text() not in reply and "Traceback" not in reply and str(secret) not in reply, kind
    assert reads == []


def test_gradio_client_uploads_local_files_itself(server, tmp_path, reads):
    """The issue's reproduction ran gradio_client on the server's machine: the client uploads a FileData path from
    its own disk before calling, so the app reads the client's upload, never the server path itself."""
    client = Client(server, verbose=False)
    mine = tmp_path / "mine.md"
    mine.write_text("The museum opens at 9 am.")
    assert "prefilled mine.md" in client.predict(file=file_data(mine), api_name="/prefill")
    assert len(reads) == 1 and Path(reads[0]).is_relative_to(upload_folder().resolve())
    assert Path(reads[0]) != mine


def test_a_client_with_many_sessions_evicts_only_its_own_caches(tiny_lm):
    config = kvqa.Config.of(max_new_tokens=8, max_question_tokens=32)
    docs = [kvqa.document_from_text(f"Document number {i}. " * 30) for i in range(8)]
    one = bytes_per_token(tiny_lm.config, tiny_lm.dtype) * (len(kvqa.prefill(tiny_lm, docs[0], config=config).ids)
                                                            + config.limits.reserve_tokens)
    budget = CacheBudget(int(one * 6.5), per_client=2)  # room for six caches; two per client
    engine = LocalEngine(config, lm=tiny_lm)
    others = [Session(engine, budget, client="10.0.0.1"), Session(engine, budget, client="10.0.0.2")]
    for session, doc in zip(others, docs):
        session.load(doc)
    greedy = [Session(engine, budget, client="10.0.0.9") for _ in range(6)]
    for session, doc in zip(greedy, docs[2:]):
        session.load(doc)
        assert budget.used_bytes <= budget.limit_bytes
    assert all(s.prefilled is not None for s in others)  # everyone else's caches are untouched
    assert [s.prefilled is not None for s in greedy] == [False] * 4 + [True] * 2
    assert all(s.document is not None for s in greedy)  # evicted, not lost: read again on the next question


def test_parse_auth():
    assert app.parse_auth(None) is None and app.parse_auth("  ") is None
    assert app.parse_auth("ann:pw1, bob:p:w") == [("ann", "pw1"), ("bob", "p:w")]
    for bad in ("ann", "ann:", ":pw"):
        with pytest.raises(ValueError, match="user:password"):
            app.parse_auth(bad)


def test_auth_asks_for_a_login_before_any_api_call(default_lm):
    server = Server(max_new_tokens=8, concurrency=None, extra_args=("--auth", "ann:s3cret"))
    try:
        server.wait_ready(time.monotonic() + 180, path="")  # the login page: the API needs a login
        with httpx.Client(base_url=server.url, timeout=30) as http:
            refused = http.post("gradio_api/call/prefill", json={"data": [None, "Some text."]})
            assert refused.status_code == 401
            assert http.post("login", data={"username": "ann", "password": "wrong"}).status_code == 400
            assert http.post("login", data={"username": "ann", "password": "s3cret"}).status_code == 200
            assert http.post("gradio_api/call/prefill", json={"data": [None, "Some text."]}).status_code == 200
    finally:
        server.stop()


@pytest.fixture
def served_fake():
    """The app served as `python app.py` serves it, on loopback, with the fake engine (no model)."""
    import socket

    from fakes import FakeEngine
    from kvqa.config import Config

    kvqa_app = app.KvqaApp(Config(), FakeEngine(), budget=CacheBudget(2**30))
    page = kvqa_app.demo
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app.serve(page, kvqa_app, concurrency=1, queue_size=8, host="127.0.0.1", port=port, prevent_thread_lock=True,
              quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        page.close()


def test_paths_gradio_lets_through_are_refused_by_kvqa_itself(served_fake, secret, reads):
    """The check kvqa keeps itself, beside Gradio's: over raw HTTP, paths Gradio 6.31 hands on to the handler (inside
    its upload folder by name: the folder itself, a folder in it, a URL-encoded `..`) meet kvqa's own check, which
    refuses them without reading and without naming a path; the forms Gradio refuses first (URL-encoded, `file=` routes,
    `file://`, `~`, NUL) are refused too. Kills: kvqa's path check removed (`uploaded_file` returning the path as given:
    the replies would then say "is a folder" or "No such file" with the server's path, and a document would be read)."""
    folder = upload_folder()
    inside = folder / f"kvqa-test-{secrets.token_hex(4)}"
    inside.mkdir(parents=True)
    up = "..%2F" * 6 + "%2F".join(secret.parts[1:])
    reaches_kvqa = {"the upload folder": str(folder), "a folder in it": str(inside),
                    "URL-encoded ..": f"{inside}/{up}"}
    gradio_refuses = {"URL-encoded": str(secret).replace("/", "%2F"), "file= route": f"file={secret}",
                      "gradio_api/file=": f"{served_fake}gradio_api/file={secret}", "file://": f"file://{secret}",
                      "~": "~/secret.md", "NUL": f"{secret}\x00.md",
                      "NUL, then ..": f"{inside}/x.md\x00/../../../{secret}"}
    with httpx.Client(base_url=served_fake, timeout=60) as http:
        for kind, path in (reaches_kvqa | gradio_refuses).items():
            event = http.post("gradio_api/call/prefill", json={"data": [file_data(path), None, None]}).json()
            reply = sse_text(http, f"gradio_api/call/prefill/{event['event_id']}")
            assert "event: error" in reply, (kind, reply)
            if kind in reaches_kvqa:  # kvqa's own words: not an upload, or no upload there (uploads expire)
                assert "not uploaded to this app" in reply or "no longer on the server" in reply, (kind, reply)
            assert str(folder) not in reply and str(secret) not in reply and "Traceback" not in reply, (kind, reply)
            assert secret.read_text() not in reply, kind
    assert reads == []


def test_another_sessions_upload_is_refused_by_its_real_path(served_fake, tmp_path, reads):
    """A file one browser session uploaded is read for that session only: another session (and an API call) naming
    its real path in the upload folder is refused with kvqa's words, nothing read. Kills: the ownership check removed
    (Uploads.file not asking claim), or every upload counted as claimable again."""
    mine = tmp_path / "private.md"
    mine.write_text(f"The owner's secret word is zebra{secrets.token_hex(4)}.")
    with httpx.Client(base_url=served_fake, timeout=60) as http:
        config = http.get("config").json()
        upload_id = next(c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == "upload")
        upload_event = upload_handler(config)

        def upload_event_as(session_hash: str, path: str) -> str:
            joined = http.post("gradio_api/queue/join", json={
                "data": [[file_data(path)], None, "en"], "fn_index": upload_event, "session_hash": session_hash,
                "event_data": None, "trigger_id": upload_id})
            assert joined.status_code == 200, joined.text
            return sse_text(http, "gradio_api/queue/data", session_hash=session_hash)

        with open(mine, "rb") as f:  # as a browser uploads: the bytes, then the upload event naming the path given
            path = http.post("gradio_api/upload", files=[("files", (mine.name, f))]).json()[0]
        owner, other = secrets.token_hex(6), secrets.token_hex(6)
        assert '"success":true' in upload_event_as(owner, path).replace(" ", "")
        assert len(reads) == 1
        assert '"success":true' in upload_event_as(owner, path).replace(" ", "")  # its owner may use it again
        refused = upload_event_as(other, path)
        assert '"success":false' not in refused.replace(" ", "")  # a warning on the page, no error state
        assert "was not uploaded to this app" in refused and path not in refused
        event = http.post("gradio_api/call/prefill", json={"data": [file_data(path), None, None]}).json()
        reply = sse_text(http, f"gradio_api/call/prefill/{event['event_id']}")
        assert "event: error" in reply and "was not uploaded to this app" in reply, reply
    assert len(reads) == 2  # the owner's two reads; nothing for the others
