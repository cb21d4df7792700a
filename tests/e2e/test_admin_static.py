"""The admin under `manage.py up` loads its CSS and JS: headless Chromium renders
/admin/login/ and reports the header's computed background colour (the admin stylesheet's
`--header-bg`, #417690 = rgb(65, 118, 144); unstyled it is transparent) and whether the
admin's `theme.js` ran (it sets `data-theme` on `<html>`, "auto" on a fresh profile).

Chromium's `--dump-dom` prints the DOM after scripts ran, but the page has no script of
ours; a loopback proxy in front of `up` appends one to the login page's HTML that writes
those two facts into `<body>` attributes. Every other request (the stylesheets and
scripts, served by whitenoise) passes through the proxy untouched, from the same origin.
"""

from __future__ import annotations

import re
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from django.db import connection

from tests.e2e.up_process import UpProcess
from tests.ops.test_dashboard_screenshot import FLAGS, find_chromium

pytestmark = pytest.mark.django_db(transaction=True)
PROBE = (
    b"<script>window.addEventListener('load', () => {"
    b"const header = getComputedStyle(document.getElementById('header'));"
    b"document.body.dataset.headerBg = header.backgroundColor;"
    b"document.body.dataset.theme = document.documentElement.dataset.theme || 'none';"
    b"});</script></body>"
)


@contextmanager
def probing_proxy(upstream: str) -> Iterator[str]:
    """A loopback proxy to `upstream` that appends PROBE to HTML pages; yields its URL."""

    class Forward(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            try:
                with urllib.request.urlopen(upstream + self.path, timeout=30) as answer:
                    status, body, headers = answer.status, answer.read(), answer.headers
            except urllib.error.HTTPError as error:
                status, body, headers = error.code, error.read(), error.headers
            kind = headers.get("Content-Type", "application/octet-stream")
            if kind.startswith("text/html"):
                body = body.replace(b"</body>", PROBE)
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    process = UpProcess(tmp_path / "data", {"DATABASE_URL": url})
    try:
        yield process.start()
    finally:
        assert process.stop() == 0, process.log()[-4000:]


def test_the_admin_login_page_is_styled_and_runs_its_scripts(up: UpProcess, tmp_path: Path) -> None:
    binary, why = find_chromium()
    if binary is None:
        pytest.skip(why)
    css = requests.get(f"{up.url}/static/admin/css/base.css", timeout=30)
    assert css.status_code == 200 and css.headers["Content-Type"].startswith("text/css")
    with probing_proxy(up.url) as proxy:
        args = [binary, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom"]
        done = subprocess.run(
            [*args, "--virtual-time-budget=10000", f"{proxy}/admin/login/"],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    body = re.search(r"<body[^>]*>", done.stdout)
    assert body, done.stderr[-2000:]
    assert 'data-header-bg="rgb(65, 118, 144)"' in body.group(0), body.group(0)
    assert 'data-theme="auto"' in body.group(0), body.group(0)
