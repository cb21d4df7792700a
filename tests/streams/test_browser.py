"""A real browser: headless Chromium (Debian's) opens a page that uses `EventSource` with a
stream ticket, receives a turn's events, lives through a restart of the API server by
reconnecting by itself (its `Last-Event-ID`), and reports every event it saw to a
loopback receiver in the test; the test compares that with the events API."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agentrun.auth import issue_api_key
from runs.models import EventType
from runs.services.event_log import NewEvent, append_runner_events
from tests.runtime.server import free_port, serving, wait_for
from tests.sessions.helpers import admit
from tests.sessions.world import claim, finish_turn, finish_whole_run
from tests.streams.world import TENANT, events_api

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",  # keeps the headless browser open on the page
]
PAGE = """<!doctype html><html><body><script>
let received = 0;  // the order the page received them in (reports may arrive out of order)
const report = (body) => fetch("/report", {method: "POST", body: JSON.stringify(body)});
const source = new EventSource(%(url)s);
source.onopen = () => report({kind: "open"});
source.onerror = () => report({kind: "error", state: source.readyState});
for (const type of %(types)s) {
  source.addEventListener(type, (message) =>
    report({kind: "event", n: received++, id: message.lastEventId, type,
            data: JSON.parse(message.data)}));
}
</script></body></html>"""


class Receiver(ThreadingHTTPServer):
    """Serves the page and records what the page reports, in arrival order."""

    def __init__(self, page: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.page = page.encode()
        self.reports: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.reports if r["kind"] == kind]


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(self.server.page)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.reports.append(body)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def _say(run: Any, *texts: str) -> None:
    events = [NewEvent("agent_message", {"text": text}) for text in texts]
    append_runner_events(
        run_id=run.id, runner_id="runner-1", lease_epoch=run.lease_epoch, events=events
    )


@pytest.mark.skipif(
    not shutil.which("chromium"), reason="chromium is not installed (.ci/run installs it)"
)
@pytest.mark.django_db(transaction=True)
def test_a_browser_event_source_with_a_ticket_sees_every_event_once_across_a_restart() -> None:
    issued = issue_api_key(tenant_id=TENANT, role="client")
    turn = admit("s-browser", "hello browser")
    assert turn.run is not None and turn.command is not None
    run = claim(turn.run.id)
    _say(run, "one", "two")
    api_port = free_port()
    receiver = Receiver("")
    origin = f"http://127.0.0.1:{receiver.server_address[1]}"
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    env = {"AGENTRUN_STREAM_ALLOWED_ORIGINS": origin, "AGENTRUN_STREAM_RETRY_MS": "300"}
    browser = None
    try:
        with serving(port=api_port, **env) as server:
            reply = server.request(
                "POST",
                "/api/v1/stream-tickets",
                body=b'{"session_id": "s-browser"}',
                headers={
                    "Authorization": f"Bearer {issued.secret}",
                    "Content-Type": "application/json",
                },
            )
            assert reply.status == 201, reply.body
            url = f"http://127.0.0.1:{api_port}/api/v1/sessions/s-browser/stream?ticket="
            url += reply.json()["ticket"]
            receiver.page = (
                PAGE % {"url": json.dumps(url), "types": json.dumps(list(EventType.values))}
            ).encode()
            profile = tempfile.mkdtemp(prefix="agentrun-chromium-")
            browser = subprocess.Popen(
                [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"{origin}/page"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wait_for(lambda: len(receiver.kinds("event")) >= 6, within_s=60, what="6 events")
        # The server is down: the page sees an error and keeps retrying by itself.
        wait_for(lambda: receiver.kinds("error"), within_s=30, what="the page's error")
        _say(run, "three")
        with serving(port=api_port, **env) as server:
            _say(run, "four")
            finish_turn(run, turn.command.id)
            finish_whole_run(run)
            wait_for(
                lambda: len(receiver.kinds("event"))
                >= len(events_api(server, run.id, issued.secret))
                and any(r["type"] == "terminal_status" for r in receiver.kinds("event")),
                within_s=60,
                what="the terminal event in the browser",
            )
            expected = events_api(server, run.id, issued.secret)
    finally:
        if browser is not None:
            browser.kill()
            browser.wait()
        receiver.shutdown()
    seen = sorted(receiver.kinds("event"), key=lambda report: report["n"])
    assert [r["data"] for r in seen] == expected  # every event, once, in order
    assert [r["id"] for r in seen] == [f"{run.id}:{e['seq']}" for e in expected]
    assert len(receiver.kinds("open")) >= 2  # it reconnected by itself
