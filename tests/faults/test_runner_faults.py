"""Faults of the runner process, against a live API server.

- Killed mid-turn (SIGKILL): its lease expires, the lease reaper (runs/services/reaper.py)
  fails the run `infra-failed` with its open command, the session goes terminal, and the
  session admits the next turn, which runs to completion.
- Frozen (SIGSTOP) past its lease while another runner claims the run and finishes the
  turn, then resumed (SIGCONT): the run's end revoked its key, so each of its late writes is
  refused (401) before it reaches the run; none of its output is accepted.
"""

from __future__ import annotations

import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from agentrun.auth import issue_api_key
from agentrun.models import ApiKey
from runs.models import Command, Event, Run
from runs.services.reaper import reap_expired_leases
from sessions.models import Session
from sessions.services.admission import admit_turn
from sessions.turns import TurnRequest
from tests.builders import run_spec
from tests.faults.harness import Proc, child_env, process, wait_for
from tests.faults.invariants import assert_invariants

pytestmark = pytest.mark.django_db(transaction=True)
LONG = {"mode": "long", "ticks": 40, "tick_ms": 100}


def _turn(session_id: str, text: str, **payload: Any) -> Run:
    admission = admit_turn(
        request=TurnRequest(
            session_id=session_id,
            tenant_id="tenant-f4",
            spec=run_spec(session_ref={"session_id": session_id}),
            payload={"text": text, **payload},
            dispatch=None,
        )
    )
    assert admission.disposition == "created", admission.disposition
    assert admission.run is not None
    return admission.run


def _runner(live: Any, run: Run, name: str, tmp: Path) -> Any:
    key = issue_api_key(tenant_id=run.tenant_id, role="runner", run_id=run.id).secret
    env = child_env(tmp, f"fault-{name}", AGENTRUN_API_URL=live.url, AGENTRUN_RUNNER_KEY=key)
    argv = [sys.executable, "-m", "runner", "run", "--run", run.id, "--lease-ms", "1500"]
    argv += ["--runner-id", name]  # as the launchers start it: `python -m runner`
    return process(argv, env, tmp / f"{name}.log", f"fault-{name}")


def _deltas(run: Run) -> int:
    return Event.objects.filter(run=run, type="agent_message_delta").count()


def _status(run: Run) -> str:
    return Run.objects.get(pk=run.pk).status


def test_runner_killed_mid_turn_is_reaped_and_the_session_admits_the_next_turn(
    live_server: Any, tmp_path: Path
) -> None:
    run = _turn("sess-f4", "count", scripted=LONG)
    with _runner(live_server, run, "runner-killed", tmp_path) as runner:
        wait_for(lambda: _deltas(run) >= 3, 60, "the turn to stream", 0.05)
        runner.kill()
    run.refresh_from_db()
    assert run.status == "running" and run.lease_expires_at is not None
    grace = timedelta(milliseconds=200)
    wait_for(lambda: Run.objects.get(pk=run.pk).lease_expires_at < timezone.now() - grace, 5, "")
    reaped = reap_expired_leases(limit=100, grace_ms=200)
    assert reaped.reaped == 1
    run.refresh_from_db()
    assert (run.status, run.failure_kind) == ("failed", "infra-failed")
    assert Event.objects.filter(run=run, payload__phase="lease-expired").count() == 1
    assert Command.objects.get(run=run).state == "failed"
    session = Session.objects.get(pk="sess-f4")
    assert (session.execution_state, session.active_run_id) == ("terminal", None)

    following = _turn("sess-f4", "after the crash")  # created, not busy
    with _runner(live_server, following, "runner-next", tmp_path):
        wait_for(lambda: _status(following) == "completed", 60, "the next turn", 0.1)
    session.refresh_from_db()
    assert (session.execution_state, session.terminal_status) == ("terminal", "completed")
    print(f"\nkilled runner run reaped as {run.failure_kind}; next turn {_status(following)}")
    assert_invariants()


def _turn_id_of(run: Run, after_seq: int = 0) -> str:
    event = Event.objects.filter(run=run, type="agent_message_delta", seq__gt=after_seq).first()
    assert event is not None
    return str(event.payload["turn_id"])


def _frozen_past_lease(frozen: Proc, run: Run) -> None:
    wait_for(lambda: _deltas(run) >= 3, 60, "the turn to stream", 0.05)
    frozen.signal(signal.SIGSTOP)
    # The runner's own deadline counts from the heartbeat's answer, the server's expiry from
    # its request: on a loaded machine the answer can come a good while later. One lease
    # past the server's expiry, the frozen runner's deadline has surely passed too, so on
    # resuming it knows it lost the lease (exit 4) rather than taking the 401 for a cancel.
    margin = timedelta(milliseconds=1500)
    wait_for(
        lambda: Run.objects.get(pk=run.pk).lease_expires_at + margin < timezone.now(), 8, "expiry"
    )


def test_runner_frozen_past_its_lease_is_fenced_when_it_resumes(
    live_server: Any, tmp_path: Path
) -> None:
    run = _turn("sess-f9", "count", scripted=LONG)
    with _runner(live_server, run, "runner-frozen", tmp_path) as frozen:
        _frozen_past_lease(frozen, run)
        frozen_turn = _turn_id_of(run)
        with _runner(live_server, run, "runner-takeover", tmp_path):
            wait_for(lambda: _status(run) == "completed", 60, "the takeover to finish", 0.1)
        taken_at = Event.objects.get(run=run, payload__phase="run-claimed", payload__lease_epoch=2)
        frozen.signal(signal.SIGCONT)
        wait_for(lambda: frozen.popen.poll() is not None, 30, "the resumed runner to exit")
    refused = Event.objects.filter(
        run=run, payload__phase="late-write-rejected", payload__runner_id="runner-frozen"
    )
    accepted_late = Event.objects.filter(
        run=run, seq__gt=taken_at.seq, payload__turn_id=frozen_turn
    ).count()
    sources = sorted({e.payload["source"] for e in refused})
    print(
        f"\nfrozen runner resumed after the takeover: {refused.count()} late writes refused "
        f"and recorded ({', '.join(sources)}); stale writes accepted: {accepted_late}; "
        f"exit code {frozen.popen.returncode}"
    )
    # The takeover ended the run, which revoked every runner key of it: the frozen runner's
    # writes are refused at the door (401), before there is a run write to record.
    assert accepted_late == 0
    assert not ApiKey.objects.filter(run_id=run.id, revoked_at__isnull=True).exists()
    assert frozen.popen.returncode == 4  # EXIT_LOST: it knows it lost the lease
    assert Run.objects.get(pk=run.pk).status == "completed"
    assert_invariants()
