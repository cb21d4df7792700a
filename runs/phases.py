"""Every `backend_status` phase, spelled once: what the server writes and what a runner may.

A `backend_status` event's `phase` is how a reader (the terminal client, the dashboard,
a Kafka consumer) learns what a run went through, so its spelling is part of the API.
The server wrote these as string literals in eleven modules; one typo would have made a
new phase nobody reads. `Phase` names every phase a server module writes, and
`tests/runs/test_phases.py` fails on a literal written anywhere else.

Runners post their own phases (thread and turn milestones, approvals). `runner/` may not
import a server package (SPEC §9.1), so it spells them in `runner/phases.py`; the same test
checks that set against `RUNNER_PHASES` here, and that no runner phase collides with a
server one. A runner may not post a server phase (`SERVER_PHASES`: a 400); its own phases are
stored as given.

Django-free on purpose (nothing here needs it), so the test and any client can import it.
"""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    """A phase the server writes."""

    # Creation and claims (runs.services).
    RUN_CREATED = "run-created"
    COMMAND_CREATED = "command-created"
    COMMAND_TERMINAL = "command-terminal"
    RUN_CLAIMED = "run-claimed"
    SESSION_UPDATED = "session-updated"
    LATE_WRITE_REJECTED = "late-write-rejected"
    # A live run failed `infra-failed` without its runner's word.
    LEASE_EXPIRED = "lease-expired"
    RUNNER_GONE = "runner-gone"
    CLAIM_LOST = "claim-lost"
    SESSION_TURN_ADMISSION_STALE_TERMINALIZED = "session-turn-admission-stale-terminalized"
    # Cancellation, one per `runs.models.CancelStage` (see `cancel_stage`).
    CANCEL_ACCEPTED = "cancel-accepted"
    CANCEL_PERSISTED = "cancel-persisted"
    CANCEL_FENCED = "cancel-fenced"
    CANCEL_DELIVERED = "cancel-delivered"
    CANCEL_ABORTING = "cancel-aborting"
    CANCEL_TERMINALIZED = "cancel-terminalized"
    # Runner dispatch (dispatch.services, sessions.services.admission).
    RUNNER_DISPATCHED = "runner-dispatched"
    RUNNER_DISPATCH_RETRY = "runner-dispatch-retry"
    RUNNER_DISPATCH_FAILED = "runner-dispatch-failed"
    RUNNER_DISPATCH_RECOVERED = "runner-dispatch-recovered"
    RUNNER_DISPATCH_RETRY_REQUESTED = "runner-dispatch-retry-requested"

    @classmethod
    def cancel_stage(cls, stage: str) -> Phase:
        """The phase recording a cancel request reaching `stage` (a `CancelStage` value);
        a stage with no phase here is a `ValueError`, not a new spelling."""
        return cls(f"cancel-{stage}")


# What runners post (`runner/phases.py` is the runner's own spelling of the same set).
RUNNER_PHASES = frozenset(
    {
        # The Codex backend's thread.
        "thread-started",
        "thread-resumed",
        "thread-resume-failed",
        # A turn's milestones.
        "retrying",
        "items-abandoned",
        "steer-accepted",
        "steer-rejected",
        # The app-server's own requests and their answers.
        "approval-requested",
        "approval-answered",
        "server-request",
        "server-request-answered",
    }
)

# What only the server writes: a runner posting one of these is a 400 (issue 16, finding 7).
SERVER_PHASES = frozenset(phase.value for phase in Phase) - RUNNER_PHASES
