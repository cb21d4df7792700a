"""State the cells start from, made through agentrun's own services (untimed).

Also the raw psycopg connection the reference sides use: the same server and database as
Django's default connection at that moment (`env.using_database` may have switched it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import connections

from agentrun.ids import new_id
from bench import env
from runs.services.lifecycle import RunSpec, claim_run, create_run

BENCH_TENANT = "bench"
LEASE_MS = 30 * 60_000


@dataclass(frozen=True)
class ClaimedRun:
    run_id: str
    runner_id: str
    lease_epoch: int
    session_id: str | None


def run_spec(session_id: str | None = None) -> RunSpec:
    return RunSpec(
        project_id="bench-project",
        workspace_ref={"path": "/work/bench"},
        provider_id="openai",
        backend_profile="scripted",
        execution_policy={"sandbox": "workspace-write"},
        session_ref={"session_id": session_id} if session_id else None,
    )


def claimed_runs(count: int, *, with_session: bool = True) -> list[ClaimedRun]:
    """`count` runs (each in its own session), each claimed by its own runner."""
    made = []
    for _ in range(count):
        session_id = new_id("ses") if with_session else None
        run = create_run(tenant_id=BENCH_TENANT, spec=run_spec(session_id)).run
        runner_id = new_id("runner")
        claimed = claim_run(run_id=run.id, runner_id=runner_id, lease_ms=LEASE_MS)
        made.append(ClaimedRun(run.id, runner_id, claimed.lease_epoch, session_id))
    return made


def raw_dsn() -> str:
    return env.url_for(connections.settings["default"]["NAME"])


def raw_connect(**kwargs: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(raw_dsn(), **kwargs)


def close_django_connection() -> None:
    connections["default"].close()
