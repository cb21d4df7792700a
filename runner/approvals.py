"""A person's answer to a backend's approval request, through the API (SPEC §9.3).

Under `approval_policy: ask` the runner records what the backend asked
(`POST /runs/{id}/approvals`) and polls the record (`GET …/approvals/{id}`, every
`POLL_S`) until a person answers, it expires or is cancelled, or the turn is interrupted.
The record's `request_key` is what was asked — the command, the kind, a digest of the
summary and the how-many-th time this turn asked it — so the next runner of the run, asking
the same thing after this one died, gets the same record: the decision given meanwhile, or
the same pending approval, never a second one for a person to answer.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from runner.client import ApiClient, ApiError, ApiUnavailable

log = logging.getLogger("agentrun.runner")
POLL_S = 0.25


class PersonApprovals:
    """`TurnControl.ask` for one turn: records, waits, answers "approve" or "deny"."""

    def __init__(
        self,
        api: ApiClient,
        run_id: str,
        *,
        command_id: str,
        fence: dict[str, Any],
        deadline: Callable[[], float],
        interrupted: threading.Event,
    ) -> None:
        self.api, self.run_id, self.command_id = api, run_id, command_id
        self.fence, self.deadline, self.interrupted = fence, deadline, interrupted
        self._asked: dict[str, int] = {}

    def __call__(self, kind: str, summary: str, details: dict[str, Any]) -> str:
        key = self._request_key(kind, summary)
        body = {
            **self.fence,
            "command_id": self.command_id,
            "request_key": key,
            "kind": kind,
            "summary": summary[:4000],
            "details": details,
        }
        try:
            approval = self.api.post(
                f"/runs/{self.run_id}/approvals", body, deadline=self.deadline()
            )
        except (ApiError, ApiUnavailable) as error:
            log.warning("recording an approval failed (%s): denied", error)
            return "deny"
        return self._wait(approval)

    def _request_key(self, kind: str, summary: str) -> str:
        digest = hashlib.sha256(f"{kind}\n{summary}".encode()).hexdigest()[:24]
        self._asked[digest] = self._asked.get(digest, 0) + 1
        return f"{self.command_id}:{kind}:{digest}:{self._asked[digest]}"

    def _wait(self, approval: dict[str, Any]) -> str:
        path = f"/runs/{self.run_id}/approvals/{approval['id']}"
        while approval["state"] == "pending":
            if self.interrupted.wait(POLL_S):
                return "deny"  # the turn is ending: its approvals are cancelled server-side
            try:
                approval = self.api.get(path, deadline=time.monotonic() + 5)
            except (ApiError, ApiUnavailable) as error:
                log.info("polling approval %s: %s", approval["id"], error)
        return "approve" if approval["state"] == "approved" else "deny"
