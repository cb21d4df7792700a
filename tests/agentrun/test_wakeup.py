"""On-commit wake-ups coalesce (`agentrun.wakeup`): a burst of commits sends a few
messages, not one per commit, and the burst's last commit is still followed by one.

A real broker: a child process sends the wake-ups to Redis (a database number of this
test's own) and counts the messages in the queue's list itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings

from agentrun.wakeup import COALESCE_S

BROKER = "redis://127.0.0.1:6379/13"  # this test's own database number; emptied around it
QUEUE = "wakeup-test"

CHILD = """
import json, sys, time
import django
django.setup()
import redis
from agentrun import wakeup
from agentrun.task_queues import TaskName

queue, commits = sys.argv[1], int(sys.argv[2])
broker = redis.Redis.from_url(sys.argv[3])
waker = wakeup.Waker(task=TaskName.RELAY_BATCH, enabled=lambda: True, queue=queue)
started = time.monotonic()
for _ in range(commits):  # a burst of commits, each asking for its wake-up
    waker.wake()
    time.sleep(0.0005)
before_last = broker.llen(queue)  # sent before the burst's last commit asks for one
waker.wake()  # the burst's last commit
burst_s = time.monotonic() - started
waker._sender[1].shutdown(wait=True)  # every queued send is done
print(json.dumps({"burst_s": burst_s, "before_last": before_last, "sent": broker.llen(queue)}))
"""


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(BROKER)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.fail(f"Redis is not running at {BROKER} (one of the machine's services)")
    client.flushdb()
    yield client
    client.flushdb()


def test_a_burst_of_commits_sends_a_few_wake_ups_and_one_after_the_last(
    broker: redis.Redis,
) -> None:
    commits = 400
    child = subprocess.run(
        [sys.executable, "-c", CHILD, QUEUE, str(commits), BROKER],
        env={**os.environ, "CELERY_BROKER_URL": BROKER, "PYTHONPATH": str(settings.BASE_DIR)},
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    facts = json.loads(child.stdout.strip().splitlines()[-1])
    # At most one per coalescing window over the burst (and the first, and the last); the
    # window is 10 ms (without one, a send per two or three commits here).
    assert COALESCE_S == 0.01
    assert 2 <= facts["sent"] <= facts["burst_s"] / 0.01 + 3, facts
    # The burst's last commit is covered: a wake-up was sent after it asked for one.
    assert facts["sent"] >= facts["before_last"] + 1, facts
    messages = [json.loads(raw) for raw in broker.lrange(QUEUE, 0, -1)]
    assert len(messages) == facts["sent"]
    assert {message["headers"]["task"] for message in messages} == {"outbox.relay_batch"}
