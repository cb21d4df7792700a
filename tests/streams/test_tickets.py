"""Stream tickets through the real server: a ticket opens its one stream and nothing else
(another run, another tenant's run, another route), expires, and a forged or expired one
is a 401 envelope. The attacks are made with real HTTP requests."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from agentrun.auth import issue_api_key
from agentrun.stream_tickets import issue_ticket
from runner.sse import StreamRefused, messages, open_stream
from tests.builders import make_claimed_run, make_run
from tests.runtime.server import Reply, Server, serving
from tests.streams.world import TENANT, worked_turn


def _ask(server: Server, secret: str, **resource: str) -> Reply:
    return server.request(
        "POST",
        "/api/v1/stream-tickets",
        body=json.dumps(resource).encode(),
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )


def _ticket(server: Server, secret: str, **resource: str) -> str:
    reply = _ask(server, secret, **resource)
    assert reply.status == 201, reply.body
    assert reply.json()["expires_at"]
    return str(reply.json()["ticket"])


def _first_event(server: Server, path: str) -> str:
    connection, response = open_stream(f"http://127.0.0.1:{server.port}{path}")
    try:
        return next(m for m in messages(response) if m is not None).event
    finally:
        connection.close()


def _refused(server: Server, path: str) -> tuple[int, dict[str, str]]:
    with pytest.raises(StreamRefused) as refused:
        open_stream(f"http://127.0.0.1:{server.port}{path}")
    return refused.value.status, json.loads(refused.value.body)["error"]


@pytest.mark.django_db(transaction=True)
def test_a_ticket_opens_its_one_stream_only_and_bad_tickets_are_401() -> None:
    run_a, run_b = make_claimed_run(runner_id="r1"), make_run()
    other_tenant = make_run(tenant_id="tenant-b")
    worked_turn("s-ticket", "hi")
    issued = issue_api_key(tenant_id=TENANT, role="client")
    with serving() as server:
        ticket = _ticket(server, issued.secret, run_id=run_a.id)
        assert _first_event(server, f"/api/v1/runs/{run_a.id}/stream?ticket={ticket}")
        # Another run of the same tenant, another tenant's run: not found.
        for run in (run_b, other_tenant):
            status, error = _refused(server, f"/api/v1/runs/{run.id}/stream?ticket={ticket}")
            assert (status, error["code"]) == (404, "not_found")
        # Not a key: a ticket is refused on every other route.
        reply = server.request("GET", f"/api/v1/runs/{run_a.id}/events?ticket={ticket}")
        assert reply.status == 401 and reply.json()["error"]["code"] == "unauthorized"
        # Nor for a session with a run's ticket.
        status, _ = _refused(server, f"/api/v1/sessions/s-ticket/stream?ticket={ticket}")
        assert status == 404
        session_ticket = _ticket(server, issued.secret, session_id="s-ticket")
        path = f"/api/v1/sessions/s-ticket/stream?ticket={session_ticket}"
        assert _first_event(server, path) == "user_message"
        # A ticket is never issued for what the key cannot see.
        assert _ask(server, issued.secret, run_id=other_tenant.id).status == 404
        both = _ask(server, issued.secret, run_id=run_a.id, session_id="s-ticket")
        assert both.status == 400
        # Forged: a changed character, or a ticket signed with another secret.
        forged = ticket[:-3] + ("AAA" if not ticket.endswith("AAA") else "BBB")
        status, error = _refused(server, f"/api/v1/runs/{run_a.id}/stream?ticket={forged}")
        assert (status, error["code"]) == (401, "unauthorized")
        with override_settings(SECRET_KEY="not-the-servers-secret"):
            alien, _ = issue_ticket(api_key=issued.api_key, kind="run", resource_id=run_a.id)
        status, error = _refused(server, f"/api/v1/runs/{run_a.id}/stream?ticket={alien}")
        assert (status, error["message"]) == (401, "invalid stream ticket")
        # Expired: signed by the same secret, past its time.
        with override_settings(AGENTRUN_STREAM_TICKET_TTL_S=-1):
            expired, _ = issue_ticket(api_key=issued.api_key, kind="run", resource_id=run_a.id)
        status, error = _refused(server, f"/api/v1/runs/{run_a.id}/stream?ticket={expired}")
        assert status == 401 and "expired" in error["message"]
        # A revoked key's tickets die with it.
        issued.api_key.revoked_at = issued.api_key.created_at
        issued.api_key.save(update_fields=["revoked_at"])
        status, _ = _refused(server, f"/api/v1/runs/{run_a.id}/stream?ticket={ticket}")
        assert status == 401
