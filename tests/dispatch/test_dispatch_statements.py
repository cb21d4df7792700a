"""Statements per dispatch claim and per settle, pinned (issue 18 item 1): each is a fixed
number of round trips whatever the batch size."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from psycopg._connection_base import BaseConnection

from agentrun.models import ApiKey
from dispatch.launchers import Launched
from dispatch.models import RunnerDispatchIntent
from dispatch.services.claims import Completion, claim_intents_with_keys, complete_intents
from runs.models import Backend, RunnerJob
from tests.dispatch.helpers import make_dispatch_command


def _launched(runner_id: str) -> Launched:
    return Launched(
        launcher="local", job_name=f"job-{runner_id}", namespace="local", image="img",
        manager_url="http://m", runner_id=runner_id, source_commit="abc",
    )  # fmt: skip


def _statements(queries: CaptureQueriesContext) -> list[str]:
    return [query["sql"].split()[0].upper() for query in queries.captured_queries]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("size", [1, 12])
def test_a_claim_and_its_settle_are_a_fixed_number_of_statements(size: int) -> None:
    Backend.objects.filter(profile="scripted").update(capacity={})
    for _ in range(size):
        make_dispatch_command()
    with CaptureQueriesContext(connection) as claim:
        keyed = claim_intents_with_keys(owner="w", lease_ms=60_000, limit=size)
    # The claim UPDATE and the keys' INSERT in one autocommitted statement: one round trip
    # and one commit before a launch.
    assert _statements(claim) == ["WITH"], claim.captured_queries
    assert ApiKey.objects.filter(run_id__in=[c.run_id for c, _ in keyed]).count() == size
    completions = [Completion(claim, _launched(claim.runner_id)) for claim, _ in keyed]
    sent: list[bytes] = []
    real = BaseConnection._exec_command

    def exec_command(self: BaseConnection, command: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(bytes(command))
        return real(self, command, *args, **kwargs)

    with (
        patch.object(BaseConnection, "_exec_command", exec_command),
        CaptureQueriesContext(connection) as settle,
    ):
        outcome = complete_intents(completions=completions)
    assert len(outcome.completed) == size
    # Four round trips: BEGIN; the locks (every run, then every command: two statements
    # in one string, `runs.locks.lock_runs_and_commands`); the jobs + intents write
    # (`dispatch.sql`: the intents' lock is its compare-and-set, no SELECT of their own
    # since issue 18); the events' append (no webhook endpoint here, so no delivery
    # INSERT); the COMMIT and, after it, the runs' NOTIFY in one string
    # (`runs.services.event_log.commit_appends`). Then Django logs its own COMMIT, which
    # psycopg does not send. Until issue 18's seventh round the locks were two round trips
    # and the NOTIFY a round trip after the COMMIT.
    sqls = [query["sql"] for query in settle.captured_queries]
    assert _statements(settle) == ["BEGIN", "SELECT", "WITH", "WITH", "COMMIT;", "COMMIT"], sqls
    assert 'FROM "agentrun_runs"' in sqls[1] and "FROM agentrun_commands" in sqls[1]
    assert sqls[4].startswith("COMMIT;\n") and "pg_notify" in sqls[4]
    assert sent == [b"BEGIN"]  # psycopg sent no COMMIT of its own
    assert RunnerJob.objects.count() == size
    dispatched = RunnerDispatchIntent.objects.filter(state="dispatched")
    assert sorted(dispatched.values_list("actual_runner_job_id", flat=True)) == sorted(
        RunnerJob.objects.values_list("id", flat=True)
    )
