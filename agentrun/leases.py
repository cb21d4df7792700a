"""Lease owners: the one spelling of who holds a claim.

Every claim (a dispatch batch's intents, a relay batch's outbox records) is fenced by
(id, lease owner, attempt count), so an owner must never be shared by two batches that can
be live at once: the relay loop keeps two batches in flight, and a dispatch worker runs
one per thread. An owner is `host:pid:<kind>_<unique id>[:tag]`, so an operator reading a
lease (or a `runner-dispatched` event's `dispatcher`) sees which machine and process holds
it, and the tag says what started the batch (`commit`, `beat`, `cli`). Fault tests find a
process's leases by its `:pid:`.
"""

from __future__ import annotations

import os
import socket

from agentrun.ids import new_id


def lease_owner(kind: str, *, tag: str = "") -> str:
    """A new lease owner for one batch of `kind` (`dispatch`, `relay`), optionally tagged."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{new_id(kind)}"
    return f"{owner}:{tag}" if tag else owner
