"""A picture of what operators see: headless Chromium renders the status dashboard of a
live server (a small world in the database) to tests/output/dashboard.png.

Chromium's command line cannot carry a login cookie, so it loads the page through a tiny
loopback proxy that adds the staff user's session cookie to every request. The test skips,
saying why, only when no Chromium can be found or installed (Debian's `chromium`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.ops.world import build_world, stale_runner

OUTPUT = Path(__file__).resolve().parents[1] / "output"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--window-size=1400,1400",  # tall enough for every card
]


def find_chromium() -> tuple[str | None, str]:
    """The Chromium binary, installing Debian's package if need be; else None and why."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found, ""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None, "no chromium on PATH, and apt-get is not available to root here"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "chromium"]
    for step in (install, ["apt-get", "update", "-q"], install):
        done = subprocess.run(step, env=env, capture_output=True, text=True, timeout=900)
        if step is install and done.returncode == 0:
            break
    found = shutil.which("chromium")
    return found, "" if found else f"apt-get install chromium failed: {done.stderr[-300:]}"


@contextmanager
def cookie_proxy(upstream: str, cookie: str) -> Iterator[str]:
    """A loopback HTTP proxy for GETs to `upstream` that adds `cookie`; yields its URL."""

    class Forward(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            request = urllib.request.Request(upstream + self.path, headers={"Cookie": cookie})
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    status, body, kind = answer.status, answer.read(), answer.headers
            except urllib.error.HTTPError as error:
                status, body, kind = error.code, error.read(), error.headers
            self.send_response(status)
            self.send_header("Content-Type", kind.get("Content-Type", "text/html"))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_screenshot_of_the_dashboard_is_saved(live_server, tmp_path: Path) -> None:
    binary, why = find_chromium()
    if binary is None:
        print(f"SKIPPED dashboard screenshot: {why}")
        pytest.skip(why)
    build_world()
    stale_runner(minutes=45)
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    OUTPUT.mkdir(exist_ok=True)
    shot = OUTPUT / "dashboard.png"
    shot.unlink(missing_ok=True)
    with cookie_proxy(live_server.url, cookie) as proxy:
        args = [binary, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}"]
        done = subprocess.run([*args, f"{proxy}/admin/status/"], capture_output=True, timeout=120)
    assert shot.exists(), done.stderr.decode()[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"dashboard screenshot: {shot}")
