"""`agentrun tail` follows a session over SSE and, when the server restarts under it,
resumes after the last line it printed: every output line once, none missing."""

from __future__ import annotations

import io
import threading

import pytest

from agentrun.auth import issue_api_key
from runner.cli import main
from runner.terminal import render
from runs.services.event_log import NewEvent, append_runner_events
from sessions.selectors import OUTPUT_EVENT_TYPES
from tests.runtime.server import free_port, serving, wait_for
from tests.sessions.helpers import admit
from tests.sessions.world import claim, finish_turn, finish_whole_run
from tests.streams.world import TENANT, events_api


class Lines(io.StringIO):
    """The tail's stdout, readable while it writes."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            return super().write(text)

    def lines(self) -> list[str]:
        with self.lock:
            return self.getvalue().splitlines()


def _say(run_id: str, lease_epoch: int, *texts: str) -> None:
    events = [NewEvent("agent_message", {"text": text}) for text in texts]
    append_runner_events(
        run_id=run_id, runner_id="runner-1", lease_epoch=lease_epoch, events=events
    )


@pytest.mark.django_db(transaction=True)
def test_tail_resumes_across_a_server_restart_without_printing_twice() -> None:
    secret = issue_api_key(tenant_id=TENANT, role="client").secret
    turn = admit("s-tail", "tail me")
    assert turn.run is not None and turn.command is not None
    run = claim(turn.run.id)
    _say(run.id, run.lease_epoch, "one", "two")
    port = free_port()
    out = Lines()
    codes: list[int] = []
    url = f"http://127.0.0.1:{port}"
    tail = threading.Thread(
        target=lambda: codes.append(
            main(["tail", "s-tail", "--api-url", url, "--key", secret], out=out)
        )
    )
    with serving(port=port):
        tail.start()
        wait_for(lambda: len(out.lines()) >= 3, within_s=30, what="the first lines")
    # The server is gone; what happens now is only in the database until it is back.
    _say(run.id, run.lease_epoch, "three")
    with serving(port=port) as server:
        _say(run.id, run.lease_epoch, "four")
        finish_turn(run, turn.command.id)
        finish_whole_run(run)
        tail.join(timeout=60)
        assert not tail.is_alive() and codes == [0]
        expected = [
            render(event)
            for event in events_api(server, run.id, secret)
            if event["type"] in OUTPUT_EVENT_TYPES
        ]
    assert out.lines() == expected
    assert [line.split(": ", 1)[1] for line in expected[1:5]] == ["one", "two", "three", "four"]
