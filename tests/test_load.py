"""scripts/load_test.py: a small run against app.py launched on loopback answers everything, from each session's own
document, and reports its figures; a --url off loopback is refused before anything is contacted."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
SCRIPT = ROOT / "scripts" / "load_test.py"


def run_script(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """Run the script; past the timeout, SIGTERM it first so it stops the server it launched."""
    proc = subprocess.Popen([sys.executable, str(SCRIPT), *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        pytest.fail(f"load_test.py ran past {timeout} s:\n{out}\n{err}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.model  # loads the model itself (a subprocess or the app)
def test_two_sessions_two_questions_all_answered_without_cross_talk():
    done = run_script("--sessions", "2", "--questions", "2", "--max-new-tokens", "8", "--timeout", "150", "--json",
                      timeout=200)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["launched"] is True and report["url"].startswith("http://127.0.0.1:")
    assert report["planned"] == report["submitted"] == report["answered"] == 4
    assert report["failed"] == report["lost"] == report["not_submitted"] == report["cross_talk"] == 0
    assert report["prefill"] == {**report["prefill"], "ok": 2, "failed": 0, "lost": 0}
    for figures in (report["queue_wait_s"], report["first_text_s"], report["time_to_result_s"],
                    report["prefill"]["time_to_result_s"]):
        assert figures["n"] > 0 and 0 < figures["p50"] <= figures["p95"] <= figures["max"]
    assert report["queue_wait_s"]["n"] == 4 and report["queue_wait_missing"] == 0
    assert report["queue_wait_s"]["p50"] < report["time_to_result_s"]["max"]
    assert report["first_text_s"]["p50"] <= report["time_to_result_s"]["p50"]
    assert report["wall_s"] > 0 and report["answers_per_s"] > 0
    assert report["server_rss_samples"] > 0 and 0 < report["server_rss_start_bytes"] <= report["server_rss_peak_bytes"]
    assert report["timed_out"] is False and report["interrupted"] is False and report["error"] is None


@pytest.mark.parametrize("url", ["http://10.0.0.1:7860/", "http://example.com:80/", "http://127.0.0.1.example.com:80/",
                                 "ftp://127.0.0.1:21/"])
def test_urls_off_loopback_are_refused(url):
    done = run_script("--url", url, "--json", timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert "--url must" in done.stderr
