"""The `backend_status` phases a runner posts, and the one server phase it reads.

The server's spelling is `runs.phases`; `runner/` imports no server package (SPEC §9.1),
so the runner spells its own here, once. `tests/runner/test_phases.py` checks that every
`RunnerPhase` is one the server lists in `runs.phases.RUNNER_PHASES`, and that
`LATE_WRITE_REJECTED` is the server's.
"""

from __future__ import annotations

from enum import StrEnum


class RunnerPhase(StrEnum):
    # The Codex backend's thread.
    THREAD_STARTED = "thread-started"
    THREAD_RESUMED = "thread-resumed"
    THREAD_RESUME_FAILED = "thread-resume-failed"
    # A turn's milestones.
    RETRYING = "retrying"
    ITEMS_ABANDONED = "items-abandoned"
    STEER_ACCEPTED = "steer-accepted"
    STEER_REJECTED = "steer-rejected"
    # The app-server's own requests and their answers.
    APPROVAL_REQUESTED = "approval-requested"
    APPROVAL_ANSWERED = "approval-answered"
    SERVER_REQUEST = "server-request"
    SERVER_REQUEST_ANSWERED = "server-request-answered"


# The server marks a runner's write it refused with this phase (`runs.phases.Phase`); the
# runner reads it to learn that it lost the run.
LATE_WRITE_REJECTED = "late-write-rejected"
