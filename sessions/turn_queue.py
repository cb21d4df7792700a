"""The one door from sessions into the work queue: `when_busy=enqueue`.

Admission files a busy session's turn as a work-queue task, in its own transaction and
under the session's admission lock. But the work queue sits above sessions (SPEC §9.1:
runs < dispatch, outbox < sessions < queues), and its scheduler admits queued turns
through `sessions.services.admission`; an import of queues from here would close a cycle.
So sessions names what it needs (`TurnQueue`) and the queues app installs its
implementation when Django starts (`queues.apps.QueuesConfig.ready`). Admission calls it
explicitly, like any other function; nothing else in sessions reaches into queues.
"""

from __future__ import annotations

from typing import Protocol

from django.core.exceptions import ImproperlyConfigured

from agentrun.tenancy import Scope
from sessions.turns import Admission, TurnRequest


class TurnQueue(Protocol):
    def has_queued_turns(self, *, scope: Scope, session_id: str) -> bool:
        """Whether turns of this session, filed by the scope's tenant, wait in the queue."""
        ...

    def enqueue_turn_locked(self, request: TurnRequest) -> Admission:
        """File the turn as a queued task (or replay it by key): a `queued` admission.
        Needs the admission transaction and the session's admission lock."""
        ...


_installed: list[TurnQueue] = []


def install_turn_queue(queue: TurnQueue) -> None:
    """Called once per process by the queues app; a second call replaces the first."""
    _installed[:] = [queue]


def turn_queue() -> TurnQueue:
    if not _installed:
        raise ImproperlyConfigured("when_busy=enqueue needs the queues app installed")
    return _installed[0]
