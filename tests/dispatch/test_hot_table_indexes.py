"""The indexes of the tables a dispatched intent writes, pinned (issue 18, cells 3 and 6).

Every index of a table takes an entry per inserted row and per non-HOT row version, and a
pinned snapshot (cell 6) keeps the dead ones. These tables carry no duplicate: no Django
`text_pattern_ops` copy (`*_like`) of an id, and no single-column run_id index beside a
composite one that leads with run_id (dispatch 0005, runs 0011 and 0012, agentrun 0003,
sessions 0004, queues 0004). The run foreign keys keep an index led by run_id, for a run's
lookups and its cascading delete."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db

INDEXES = {
    "agentrun_runner_dispatch_intents": {
        "agentrun_runner_dispatch_intents_pkey": ["id"],
        "agentrun_runner_dispatch_intents_command_id_key": ["command_id"],
        # The claim's two (dispatch 0006): waiting intents by due time, claimed ones by
        # lease expiry.
        "agentrun_rdi_due_idx": ["next_attempt_at", "created_at"],
        "agentrun_rdi_lease_idx": ["lease_expires_at"],
        "agentrun_rdi_run_state_idx": ["run_id", "state"],
    },
    "agentrun_runner_jobs": {
        "agentrun_runner_jobs_pkey": ["id"],
        "agentrun_rjobs_run_cmd_idx": ["run_id", "command_id", "created_at"],
        "agentrun_runner_jobs_run_idempotency_key_idx": ["run_id", "idempotency_key"],
        # The command foreign key's own index: nothing else leads with command_id.
        "agentrun_runner_jobs_command_id_ff0a4848": ["command_id"],
    },
    "agentrun_events": {
        "agentrun_events_pkey": ["id"],
        "agentrun_events_run_seq_key": ["run_id", "seq"],
    },
    "agentrun_commands": {
        "agentrun_commands_pkey": ["id"],
        "agentrun_commands_run_seq_key": ["run_id", "seq"],
        "agentrun_commands_run_idempotency_key_idx": ["run_id", "idempotency_key"],
    },
    "agentrun_api_keys": {
        "agentrun_api_keys_pkey": ["id"],
        "agentrun_api_keys_key_digest_key": ["key_digest"],
    },
}


def indexes(table: str) -> dict[str, list[str]]:
    """Each index of `table` by name: its columns in key order."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indexrelid::regclass::text, array(SELECT a.attname"
            "   FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)"
            "   JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
            "   ORDER BY k.n)"
            " FROM pg_index i WHERE i.indrelid = %s::regclass",
            [table],
        )
        return dict(cursor.fetchall())


@pytest.mark.parametrize("table", INDEXES)
def test_a_hot_table_has_no_duplicate_index(table: str) -> None:
    assert indexes(table) == INDEXES[table]


# Tables updated on the hot paths whose other indexes are the product's (run lists, queue
# order, session control): only the `LIKE` copies are pinned away.
NO_LIKE_COPY = (
    "agentrun_runs",
    "agentrun_sessions",
    "agentrun_leases",
    "agentrun_runners",
    "agentrun_queue_tasks",
    *INDEXES,
)


@pytest.mark.parametrize("table", NO_LIKE_COPY)
def test_a_hot_table_has_no_like_copy_of_an_index(table: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexrelid::regclass::text FROM pg_index i"
            " JOIN pg_opclass o ON o.oid = ANY (i.indclass::oid[])"
            " WHERE i.indrelid = %s::regclass AND o.opcname LIKE '%%pattern_ops'",
            [table],
        )
        assert cursor.fetchall() == []


def test_the_run_foreign_keys_keep_an_index_led_by_run_id_and_their_cascade() -> None:
    tables = ("agentrun_runner_dispatch_intents", "agentrun_runner_jobs", "agentrun_events")
    for table in (*tables, "agentrun_commands"):
        assert any(columns[0] == "run_id" for columns in indexes(table).values()), table
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                " WHERE contype = 'f' AND conrelid = %s::regclass",
                [table],
            )
            keys = [row[0] for row in cursor.fetchall()]
        assert keys and all("ON DELETE CASCADE" in key for key in keys), (table, keys)
