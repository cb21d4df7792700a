"""The pooling backend (`agentrun.pooled_db`): a lent connection costs no round trip while
its socket is quiet, and one the server closed while it sat in the pool is replaced, not
lent (the request that draws it still works)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections

from agentrun.pooled_db.base import DatabaseWrapper, connection_alive

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pooled() -> Iterator[DatabaseWrapper]:
    settings = dict(connections["default"].settings_dict)
    options = dict(settings["OPTIONS"])
    options["pool"] = {"min_size": 1, "max_size": 1, "timeout": 5}
    settings.update(OPTIONS=options, CONN_HEALTH_CHECKS=False, ENGINE="agentrun.pooled_db")
    # Alias "default": django.contrib.postgres looks the alias up when it connects. The
    # test connection itself does not pool, so this pool (kept per alias) is only ours.
    wrapper = DatabaseWrapper(settings, alias="default")
    yield wrapper
    wrapper.close()
    wrapper.close_pool()


def backend_pid(wrapper: DatabaseWrapper) -> int:
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid: int = cursor.fetchone()[0]
    wrapper.close()  # back to the pool
    return pid


def test_a_quiet_pooled_connection_is_lent_without_a_round_trip(pooled: DatabaseWrapper) -> None:
    backend_pid(pooled)
    lent = pooled.pool.getconn()
    try:

        def no_round_trip(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("a quiet connection was sent a statement")

        lent.execute = no_round_trip  # type: ignore[method-assign]
        assert connection_alive(lent)
    finally:
        del lent.execute
        pooled.pool.putconn(lent)


def test_a_pooled_connection_the_server_ended_is_replaced_before_it_is_lent(
    pooled: DatabaseWrapper,
) -> None:
    first = backend_pid(pooled)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [first])
    time.sleep(0.2)  # the FATAL message and the close reach the socket
    second = backend_pid(pooled)
    assert second != first
