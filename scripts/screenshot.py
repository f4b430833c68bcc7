"""The README's screenshot (assets/screenshot.png): the real app with the model it picks here, in Debian's chromium.

Serves app.py with an empty store (the sample is read, not restored), uploads the sample, waits for the best model
to take over where a faster one stands in, asks the two questions the browser test asks, opens the second answer's
sources and shows the latency panel. Prints what the page said (read time, take-over, each answer's timings) for the
README's caption. Take it on a quiet machine.

    .venv/bin/python scripts/screenshot.py [--out assets/screenshot.png] [--port 7873] [app.py's options...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ("What rights are unalienable?", "What do the signers pledge to each other?")
BOT = '[data-testid="bot"]'


def asked(page, question: str, before: int) -> str:
    """Ask, wait for the answer's line of timings, and return the answer's text."""
    page.locator("#question textarea").fill(question)
    page.locator("#ask").click()
    page.wait_for_function(f"n => document.querySelectorAll('{BOT}').length > n && "
                           f"document.querySelectorAll('{BOT}')[n].innerText.includes('first token')",
                           arg=before, timeout=600_000)
    return page.locator(BOT).nth(before).inner_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "assets" / "screenshot.png")
    parser.add_argument("--port", type=int, default=7873)
    args, app_options = parser.parse_known_args(argv)
    from playwright.sync_api import sync_playwright

    store = tempfile.TemporaryDirectory()
    app = subprocess.Popen([sys.executable, "app.py", "--port", str(args.port), *app_options], cwd=ROOT,
                           env=dict(os.environ, GRADIO_SERVER_PORT=str(args.port), KVQA_STORE_DIR=store.name))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 1200}).new_page()
            for _ in range(150):  # the app loads its model first
                try:
                    page.goto(f"http://127.0.0.1:{args.port}/")
                    break
                except Exception:
                    time.sleep(2)
            status = page.locator("#doc-status")
            sample = ROOT / "assets" / "declaration-of-independence.md"
            page.locator("#upload input[type=file]").set_input_files(str(sample))
            status.get_by_text("ready").wait_for(timeout=600_000)
            while "in the background" in status.inner_text():  # a faster model stands in: wait for the best one
                time.sleep(2)
            status.locator("details summary").click()
            print(status.inner_text(), "\n")
            status.locator("details summary").click()
            for i, question in enumerate(QUESTIONS):
                print(asked(page, question, i).splitlines()[-1])
            page.locator(BOT).nth(1).locator("details.sources summary").click()
            page.locator("#latency-plot").scroll_into_view_if_needed()
            page.wait_for_timeout(800)
            page.screenshot(path=str(args.out), full_page=True)
            browser.close()
    finally:
        app.terminate()
        app.wait(30)
        store.cleanup()
    print(f"\n{args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
