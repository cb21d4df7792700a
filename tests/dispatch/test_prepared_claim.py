"""The dispatch claim is prepared on its connection (`agentrun.raw_sql.prepared_cursor`):
planning its join was ~70 % of its server time when every claim was planned again (bench
cell 4, issue 18). Prepared or not, it claims what it claimed."""

from __future__ import annotations

import pytest
from django.db import connection

from agentrun.models import ApiKey
from dispatch.models import RunnerDispatchIntent
from dispatch.services.claims import claim_intents, claim_intents_with_keys
from runs.models import Backend
from tests.dispatch.helpers import make_dispatch_command


def _prepared_claims() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements"
            " WHERE statement LIKE '%%agentrun_runner_dispatch_intents%%'"
        )
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.django_db(transaction=True)
def test_the_claim_with_keys_is_prepared_once_and_reused_on_its_connection() -> None:
    Backend.objects.filter(profile="scripted").update(capacity={})
    for _ in range(3):
        make_dispatch_command()
    first = claim_intents_with_keys(owner="w1", lease_ms=60_000, limit=2)
    assert len(first) == 2
    prepared = _prepared_claims()
    assert len(prepared) == 1 and "agentrun_api_keys" in prepared[0], prepared
    second = claim_intents_with_keys(owner="w2", lease_ms=60_000, limit=2)
    assert len(second) == 1  # the one left
    assert _prepared_claims() == prepared  # the same statement, not a second one
    claimed = {claim.id for claim, _ in first + second}
    assert RunnerDispatchIntent.objects.filter(id__in=claimed, state="dispatching").count() == 3
    keys = {key.api_key.id for _, key in first + second}
    assert set(ApiKey.objects.filter(id__in=keys).values_list("run_id", flat=True)) == {
        claim.run_id for claim, _ in first + second
    }


@pytest.mark.django_db(transaction=True)
def test_the_claim_in_a_transaction_is_prepared_and_returns_typed_rows() -> None:
    Backend.objects.filter(profile="scripted").update(capacity={"max_concurrent_runs": 3})
    make_dispatch_command()
    (claim,) = claim_intents(owner="w", lease_ms=60_000, limit=5)
    assert claim.capacity_limit == 3  # the jsonb column read as the ORM path reads it
    assert claim.attempt_count == 1 and claim.lease_owner == "w"
    assert len(_prepared_claims()) == 1
