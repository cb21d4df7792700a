"""The runner program: claim, heartbeat, execute commands, finish.

1. Claim the run (a new lease epoch) and register the runner.
2. A heartbeat thread extends the lease every third of it. A terminal run in the answer
   means it was cancelled; a 409 means the lease was lost; an unreachable API is retried
   until the lease runs out. Any of these stops the runner and interrupts the backend.
3. Commands are executed in seq order: each is acknowledged, a `turn` runs on the backend
   while a poller feeds later `steer`s into it and turns an `interrupt` into an interrupt,
   and the command is finished with the thread and turn ids the backend reported. Under
   `approval_policy: ask` a backend's approval request waits for a person's answer through
   the API (`runner/approvals.py`); with `budget.max_total_tokens` the turn is stopped
   (`budget_reached`, failed `budget-exceeded`) once the run's usage crosses it.
4. When no command is left, the run is finished with the last turn's outcome.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from typing import Any

from runner.approvals import PersonApprovals
from runner.backends import backend_for
from runner.backends.base import Backend, TurnControl, TurnInput, TurnOutcome
from runner.client import ApiClient, ApiError, ApiUnavailable
from runner.stream import EventStream

log = logging.getLogger("agentrun.runner")

EXIT_FINISHED, EXIT_CANCELLED, EXIT_LOST = 0, 3, 4
POLL_S = 0.25


class Runner:
    def __init__(
        self, api: ApiClient, run_id: str, *, lease_ms: int = 30_000, runner_id: str | None = None
    ) -> None:
        self.api, self.run_id, self.lease_ms = api, run_id, lease_ms
        self.runner_id = runner_id or f"runner_{uuid.uuid4().hex[:20]}"
        self.stopped = threading.Event()
        self.stop_reason = ""
        self.lease_deadline = time.monotonic()
        self.fence: dict[str, Any] = {}
        self.control: TurnControl | None = None
        self.last_seq = 0
        self.policy: dict[str, Any] = {}

    # ---- lifecycle -------------------------------------------------------------------

    def run(self) -> int:
        run = self._claim()
        if run is None:
            return EXIT_FINISHED
        self.policy = dict(run.get("execution_policy") or {})
        backend = backend_for(run, self._capabilities(run["backend_profile"]))
        stream = EventStream(
            self.api,
            path=f"/runs/{self.run_id}/events",
            fence=self.fence,
            deadline=lambda: self.lease_deadline,
            on_stop=self.stop,
        )
        stream.start()
        beat = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        beat.start()
        try:
            outcome = self._execute_all(run, backend, stream)
        finally:
            backend.close()
            stream.close()
        return self._finish(outcome)

    def stop(self, reason: str) -> None:
        if not self.stopped.is_set():
            log.info("runner %s stopping: %s", self.runner_id, reason)
            self.stop_reason = reason
            self.stopped.set()
        if self.control is not None:
            self.control.interrupted.set()

    def _claim(self) -> dict[str, Any] | None:
        self.lease_deadline = time.monotonic() + self.lease_ms / 1000
        try:
            run = self.api.post(
                f"/runs/{self.run_id}/claim",
                {"runner_id": self.runner_id, "lease_ms": self.lease_ms},
                deadline=self.lease_deadline,
            )
        except ApiError as error:
            if error.code == "run_terminal" or error.status == 401:
                # A runner key is revoked when its run ends: nothing is left to do.
                log.info("run %s is already terminal (%s); nothing to do", self.run_id, error)
                return None
            raise
        self.fence.update(runner_id=self.runner_id, lease_epoch=run["lease_epoch"])
        self.api.post(
            "/runners",
            {"id": self.runner_id, "backend_profile": run["backend_profile"], "placement": "local"},
            deadline=self.lease_deadline,
        )
        return dict(run)

    def _capabilities(self, profile: str) -> dict[str, Any]:
        backends = self.api.get("/backends", deadline=self.lease_deadline)["items"]
        return next((b["capabilities"] for b in backends if b["profile"] == profile), {})

    def _heartbeat_loop(self) -> None:
        interval = self.lease_ms / 3000
        while not self.stopped.wait(interval):
            # The lease runs from when the server renewed it, at the latest from now: a
            # runner frozen with the answer in flight must not start its lease at the
            # moment it reads it (it would take the takeover's 401s for a cancel).
            sent = time.monotonic()
            run = self.api.post_or_stop(
                f"/runs/{self.run_id}/heartbeat",
                {**self.fence, "lease_ms": self.lease_ms},
                deadline=self.lease_deadline,
                on_stop=self.stop,
                refusal=self._refusal,
            )
            if run is None:
                return
            if run["status"] in ("completed", "failed", "blocked", "cancelled"):
                self.stop("cancelled" if run["status"] == "cancelled" else "run-terminal")
                return
            self.lease_deadline = sent + self.lease_ms / 1000

    def _refusal(self, error: ApiError) -> str:
        """Why a refused heartbeat stops the runner. A 401 means the key was revoked: while
        our lease still held, the control plane ended the run (as a cancel does)."""
        if error.status == 401:
            return "lost-lease" if time.monotonic() > self.lease_deadline else "cancelled"
        return "lost-lease" if error.status == 409 else f"heartbeat: {error}"

    def _finish(self, outcome: TurnOutcome | None) -> int:
        if self.stop_reason in ("lost-lease", "lost-api"):
            return EXIT_LOST
        result = outcome or TurnOutcome("completed")
        try:
            self.api.post(
                f"/runs/{self.run_id}/finish",
                {**self.fence, **_result(result)},
                deadline=self.lease_deadline,
            )
        except ApiError as error:
            if error.status == 401 and self.stop_reason == "cancelled":
                return EXIT_CANCELLED  # the run ended, and its key with it
            log.warning("finishing run %s failed: %s", self.run_id, error)
            return EXIT_LOST
        except ApiUnavailable as error:
            log.warning("finishing run %s failed: %s", self.run_id, error)
            return EXIT_LOST
        return EXIT_CANCELLED if self.stop_reason == "cancelled" else EXIT_FINISHED

    # ---- commands --------------------------------------------------------------------

    def _commands_after(self, seq: int) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api.get(
            f"/runs/{self.run_id}/commands", after_seq=seq, limit=100, deadline=self.lease_deadline
        )["items"]
        return items

    def _pending_commands(self) -> list[dict[str, Any]]:
        items = self._commands_after(self.last_seq)
        return [c for c in items if c["state"] in ("pending", "acknowledged")]

    def _execute_all(
        self, run: dict[str, Any], backend: Backend, stream: EventStream
    ) -> TurnOutcome | None:
        thread_id = (run.get("session_ref") or {}).get("thread_id")
        outcome: TurnOutcome | None = None
        while not self.stopped.is_set():
            commands = self._pending_commands()
            if not commands:
                return outcome
            for command in commands:
                self.last_seq = command["seq"]
                if self.stopped.is_set():
                    return outcome
                self._ack(command)
                if command["type"] == "interrupt":
                    self._finish_command(command, TurnOutcome("completed"))
                    continue
                outcome = self._run_turn(command, backend, stream, thread_id)
                thread_id = outcome.thread_id or thread_id
                self._finish_command(command, outcome)
        return outcome

    def _run_turn(
        self, command: dict[str, Any], backend: Backend, stream: EventStream, thread_id: str | None
    ) -> TurnOutcome:
        control = self._control(command, stream)
        self.control = control
        if self.stopped.is_set():
            control.interrupted.set()
        if control.usage_limit is not None and control.usage_limit <= 0:
            control.stop_for_budget(0)  # the run's budget is already spent: no turn at all
        poller = _SteerPoller(self, control, turn_seq=command["seq"])
        poller.start()
        try:
            turn = TurnInput(
                command["id"],
                str(command["payload"].get("text", "")),
                command["payload"],
                thread_id,
            )
            outcome = backend.run_turn(turn, control)
        except Exception as error:  # a backend crash fails the turn, not the runner
            log.exception("backend failed on command %s", command["id"])
            stream.emit("error", {"command_id": command["id"], "message": str(error)})
            outcome = TurnOutcome("failed", "backend-failed", str(error), thread_id)
        poller.stop()
        stream.flush()
        self.control = None
        if control.over_budget.is_set():
            outcome = TurnOutcome(
                "failed",
                "budget-exceeded",
                "the run's token budget was reached",
                outcome.thread_id or thread_id,
                outcome.turn_id,
            )
        # Steers and interrupts absorbed by this turn end with it.
        absorbed = TurnOutcome(
            "cancelled" if outcome.terminal_status == "cancelled" else "completed"
        )
        for steer in poller.absorbed:
            self._finish_command(steer, absorbed)
        return outcome

    def _control(self, command: dict[str, Any], stream: EventStream) -> TurnControl:
        """The turn's control: a person's approvals through the API, the budget left."""
        control = TurnControl(emit=stream.emit)
        control.ask = PersonApprovals(
            self.api,
            self.run_id,
            command_id=command["id"],
            fence=self.fence,
            deadline=lambda: self.lease_deadline,
            interrupted=control.interrupted,
        )
        budget = (self.policy.get("budget") or {}).get("max_total_tokens")
        if isinstance(budget, int):
            usage = self.api.get(f"/runs/{self.run_id}/usage", deadline=self.lease_deadline)
            used = int(usage["total_tokens"])
            control.usage_limit = budget - used

            def reached(turn_tokens: int) -> None:
                stream.emit(
                    "budget_reached",
                    {
                        "command_id": command["id"],
                        "max_total_tokens": budget,
                        "run_tokens_before_turn": used,
                        "turn_tokens": turn_tokens,
                        "total_tokens": used + turn_tokens,
                    },
                )

            control.on_budget = reached
        return control

    def _ack(self, command: dict[str, Any]) -> None:
        self.api.post(f"/commands/{command['id']}/ack", self.fence, deadline=self.lease_deadline)

    def _finish_command(self, command: dict[str, Any], outcome: TurnOutcome) -> None:
        self.api.post_or_stop(
            f"/commands/{command['id']}/finish",
            {**self.fence, **_result(outcome)},
            deadline=self.lease_deadline,
            on_stop=self.stop,
            refusal=_finish_refusal,
        )


def _finish_refusal(error: ApiError) -> str:
    return "lost-lease" if error.code == "stale_lease" else f"finish: {error}"


class _SteerPoller(threading.Thread):
    """While a turn runs, feed later steers into it and honour interrupts; a cancel of the
    turn itself (its command turned `cancelled`) stops the runner at once, not at the next
    heartbeat. A daemon thread: `start()` it with the turn, `stop()` it when the turn ends."""

    def __init__(self, runner: Runner, control: TurnControl, *, turn_seq: int) -> None:
        super().__init__(name="steer-poller", daemon=True)
        self.runner, self.control, self.turn_seq = runner, control, turn_seq
        self.absorbed: list[dict[str, Any]] = []
        self._done = threading.Event()

    def stop(self) -> None:
        """End the polling and wait for a poll in flight (the turn has ended)."""
        self._done.set()
        self.join(timeout=30)

    def run(self) -> None:
        while not self._done.wait(POLL_S):
            try:
                seen = self.runner._commands_after(self.turn_seq - 1)
            except ApiError as error:
                if error.status == 401:
                    # The run ended and its key with it. Stop now, not at the next heartbeat
                    # (a third of the lease away): a poll every 250 ms with a dead key would
                    # trip the failed-auth throttle for every runner of this host.
                    self.runner.stop(self.runner._refusal(error))
                    return
                continue
            except ApiUnavailable:
                continue
            if seen and seen[0]["seq"] == self.turn_seq and seen[0]["state"] == "cancelled":
                self._turn_cancelled()
                return
            commands = [
                c
                for c in seen
                if c["seq"] > self.runner.last_seq and c["state"] in ("pending", "acknowledged")
            ]
            for command in commands:
                if command["type"] not in ("steer", "interrupt"):
                    break  # a later turn waits for this one to end
                self.runner.last_seq = command["seq"]
                self.runner._ack(command)
                self.absorbed.append(command)
                if command["type"] == "interrupt":
                    self.control.interrupted.set()
                else:
                    self.control.steers.put(str(command["payload"].get("text", "")))

    def _turn_cancelled(self) -> None:
        """The turn was cancelled: interrupt it; if its whole run was, stop the runner."""
        self.control.interrupted.set()
        try:
            run = self.runner.api.get(f"/runs/{self.runner.run_id}")
        except (ApiError, ApiUnavailable):
            return  # the heartbeat will tell
        if run["status"] in ("completed", "failed", "blocked", "cancelled"):
            self.runner.stop("cancelled" if run["status"] == "cancelled" else "run-terminal")


def _result(outcome: TurnOutcome) -> dict[str, Any]:
    """The terminal report's body: every field of the outcome, under its own name."""
    return dataclasses.asdict(outcome)
