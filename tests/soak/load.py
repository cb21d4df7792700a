"""One soak load process: `python -m tests.soak.load --seed N --seconds S`.

For S seconds it picks operations at random (seeded) and calls the same services the API,
the runners and the workers call: session turns (every `when_busy`), steers, cancels,
runner work (claim, ack, append event batches, finish), queue tasks (some queued behind a
session), scheduler passes and reaper passes. Sessions are shared by every process, so
they race for real. A refusal the API would answer with a 4xx (busy, stale lease, lease
conflict, terminal run…) is counted by code; any other exception is an error. Prints one
JSON object with the counts at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import django

SESSIONS = [f"soak-sess-{n}" for n in range(8)]
TENANT = "tenant-soak"
WHEN_BUSY = ["reject", "steer", "interrupt", "enqueue"]


class Load:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.runner_id = f"soak-runner-{seed}"
        self.ops: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.seq = 0

    def step(self) -> None:
        kinds: list[tuple[str, Callable[[], None], int]] = [
            ("turn", self.turn, 5),
            ("steer", self.steer, 2),
            ("cancel", self.cancel, 1),
            ("runner", self.runner, 8),
            ("append", self.append, 6),
            ("queue_task", self.queue_task, 2),
            ("schedule", self.schedule, 1),
            ("reap", self.reap, 1),
        ]
        name, action, _ = self.rng.choices(kinds, weights=[w for *_, w in kinds])[0]
        from agentrun.errors import AgentRunError

        try:
            action()
            self.ops[name] += 1
        except AgentRunError as refusal:
            self.refused[f"{name}:{refusal.code}"] += 1
        except Exception as error:  # counted: the soak test requires zero
            self.errors[f"{name}:{type(error).__name__}:{str(error)[:120]}"] += 1

    def _key(self) -> str:
        self.seq += 1
        return f"{self.runner_id}-{self.seq}"

    def turn(self) -> None:
        from sessions.services.admission import admit_turn
        from sessions.turns import TurnRequest
        from tests.builders import run_spec

        session = self.rng.choice(SESSIONS)
        admit_turn(
            request=TurnRequest(
                session_id=session,
                tenant_id=TENANT,
                spec=run_spec(session_ref={"session_id": session}),
                payload={"text": f"turn {self._key()}"},
                dispatch=None,
                when_busy=self.rng.choice(WHEN_BUSY),
                idempotency_key=self._key() if self.rng.random() < 0.5 else None,
            )
        )

    def steer(self) -> None:
        from agentrun.tenancy import Scope
        from sessions.services.steering import admit_steer

        session = self.rng.choice(SESSIONS)
        admit_steer(session_id=session, scope=Scope.tenant(TENANT), payload={"text": "steer"})

    def cancel(self) -> None:
        from agentrun.tenancy import Scope
        from runs.services.cancellation import cancel_run
        from sessions.services.steering import cancel_session

        if self.rng.random() < 0.5:
            cancel_session(
                session_id=self.rng.choice(SESSIONS),
                scope=Scope.tenant(TENANT),
                reason="soak",
                requested_by=None,
            )
            return
        run = self._live_run()
        if run is not None:
            cancel_run(run_id=run.id, reason="soak")

    def _live_run(self, *, mine: bool = False) -> Any:
        from runs.models import Run

        runs = Run.objects.filter(tenant_id=TENANT, status__in=["pending", "claimed", "running"])
        if mine:
            runs = runs.filter(claimed_by=self.runner_id)
        ids = list(runs.values_list("id", flat=True)[:50])
        return Run.objects.get(pk=self.rng.choice(ids)) if ids else None

    def runner(self) -> None:
        """Claim a live run (short lease) and take its next command one step further."""
        from runs.models import Command
        from runs.services.command_lifecycle import ack_command, finish_command
        from runs.services.lifecycle import claim_run, finish_run
        from runs.services.terminal import TurnResult

        run = self._live_run()
        if run is None:
            return
        run = claim_run(run_id=run.id, runner_id=self.runner_id, lease_ms=2_000)
        epoch = run.lease_epoch
        fence = {"runner_id": self.runner_id, "lease_epoch": epoch}
        open_commands = 0
        for command in Command.objects.filter(run=run).order_by("seq"):
            if command.state == "pending":
                ack_command(command_id=command.id, **fence)
                open_commands += 1
            elif command.state == "acknowledged":
                finish_command(command_id=command.id, result=TurnResult("completed"), **fence)
        # As the reference runner does: the run is finished once its commands are; a run
        # with open commands is left to its lease (some are abandoned for the reaper).
        if open_commands == 0 and self.rng.random() < 0.5:
            finish_run(run_id=run.id, result=TurnResult(self._outcome()), **fence)

    def _outcome(self) -> str:
        return self.rng.choice(["completed", "completed", "completed", "failed"])

    def append(self) -> None:
        from runs.services.event_log import NewEvent, append_runner_events

        run = self._live_run(mine=True)
        if run is None:
            return
        events = [
            NewEvent("agent_message_delta", {"delta": f"{self.seq}-{n}"})
            for n in range(self.rng.randint(1, 8))
        ]
        append_runner_events(
            run_id=run.id, runner_id=self.runner_id, lease_epoch=run.lease_epoch, events=events
        )

    def queue_task(self) -> None:
        from queues.services.tasks import TaskSpec, create_task

        session = self.rng.choice(SESSIONS) if self.rng.random() < 0.3 else None
        create_task(
            tenant_id=TENANT,
            spec=TaskSpec(
                project_id="proj-1",
                queue=self.rng.choice(["default", "nightly"]),
                lane="default",
                title="soak task",
                priority=self.rng.randint(0, 3),
                backend_profile="scripted",
                provider_id="openai",
                workspace_ref={"path": "/work/repo"},
                session_ref={"session_id": session} if session else None,
                payload={"text": f"task {self._key()}"},
                dispatch=None,
                idempotency_key=self._key(),
            ),
        )

    def schedule(self) -> None:
        from queues.services.scheduler import scheduler_pass

        scheduler_pass(limit=5)

    def reap(self) -> None:
        from runs.services.reaper import reap_expired_leases

        reap_expired_leases(limit=20, grace_ms=0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentrun.settings")
    django.setup()
    load = Load(args.seed)
    ends = time.monotonic() + args.seconds
    while time.monotonic() < ends:
        load.step()
    print(json.dumps({"ops": load.ops, "refused": load.refused, "errors": load.errors}))


if __name__ == "__main__":
    main()
