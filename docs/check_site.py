"""The built documentation site in a real headless Chromium (``make docs-check``).

Serves ``site/`` on a local port and opens every page in Chromium (Debian's build, driven by Playwright, which
brings no browser of its own here): each page must load with no console error, no uncaught script error, no
failed request and no request leaving this machine, and each of its ``<img>`` must display (``naturalWidth >
0``). Writes a screenshot of the home page. Exit status 1, with every problem listed, when any page fails.

    python docs/check_site.py site --chromium /usr/bin/chromium --screenshot /tmp/aioenv-site-home.png
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import pathlib
import sys
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

from playwright.sync_api import ConsoleMessage, Page, Request, sync_playwright

#: Chromium on a machine with no network but the package registries: no GPU, no QUIC, nothing fetched in the
#: background (component updates, sync, first-run pages). Playwright adds --headless and the profile folder.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: A hang guard for one page's load, in ms.
PAGE_TIMEOUT_MS = 60_000


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serving(site: pathlib.Path) -> Iterator[str]:
    """``site`` over HTTP on 127.0.0.1, on a free port; yields the base URL."""
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def check_page(page: Page, url: str, base: str) -> tuple[list[str], int]:
    """Load ``url``; return its problems and how many pictures it shows."""
    problems: list[str] = []
    host = urllib.parse.urlsplit(base).netloc

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(f"console error: {message.text}")

    def on_request(request: Request) -> None:
        target = urllib.parse.urlsplit(request.url)
        if target.scheme in ("http", "https", "ws", "wss") and target.netloc != host:
            problems.append(f"a request leaves the machine: {request.url}")

    def on_failed(request: Request) -> None:
        # A request the browser cancels itself (net::ERR_ABORTED: seen at times for the theme's search worker on a
        # page that had loaded) is no failure of the site; a file that is missing answers 404, a console error.
        if request.failure != "net::ERR_ABORTED":
            problems.append(f"request failed: {request.url} ({request.failure})")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"uncaught error: {error}"))
    page.on("request", on_request)
    page.on("requestfailed", on_failed)
    try:
        response = page.goto(url, wait_until="networkidle", timeout=PAGE_TIMEOUT_MS)
        if response is None or not response.ok:
            problems.append(f"HTTP {response.status if response else 'no response'}")
        page.wait_for_function(
            "Array.from(document.images).every(i => i.complete)", timeout=PAGE_TIMEOUT_MS, polling=100
        )
        images: list[list[Any]] = page.evaluate(
            "Array.from(document.images).map(i => [i.getAttribute('src'), i.naturalWidth, i.naturalHeight])"
        )
    finally:
        page.remove_listener("console", on_console)
        page.remove_listener("request", on_request)
        page.remove_listener("requestfailed", on_failed)
    for src, width, height in images:
        if not width or not height:
            problems.append(f"picture does not display: {src} ({width}x{height})")
    return problems, len(images)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("site", type=pathlib.Path, help="the built site (make docs: site/)")
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the Chromium executable")
    parser.add_argument("--screenshot", type=pathlib.Path, required=True, help="where the home page's PNG goes")
    args = parser.parse_args(argv)
    pages = sorted(p.relative_to(args.site).as_posix() for p in args.site.rglob("*.html"))
    if "index.html" not in pages:
        print(f"{args.site}: no index.html; run make docs first", file=sys.stderr)
        return 1
    failures: dict[str, list[str]] = {}
    pictures = 0
    with serving(args.site) as base, sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
        browser = pw.chromium.launch_persistent_context(
            profile, executable_path=args.chromium, headless=True, args=FLAGS, viewport={"width": 1280, "height": 900}
        )
        try:
            page = browser.new_page()
            for name in pages:
                problems, shown = check_page(page, base + name, base)
                pictures += shown
                if problems:
                    failures[name] = problems
            page.goto(base + "index.html", wait_until="networkidle", timeout=PAGE_TIMEOUT_MS)
            args.screenshot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.screenshot), full_page=True)
        finally:
            browser.close()
    for name, problems in failures.items():
        for problem in problems:
            print(f"{name}: {problem}", file=sys.stderr)
    print(
        f"{len(pages)} pages, {pictures} pictures in {args.chromium}: "
        f"{len(pages) - len(failures)} clean, {len(failures)} with problems; home page: {args.screenshot}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
