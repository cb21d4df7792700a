"""Attack: tenant A files a backlog of dispatched turns on a profile limited to four
runner slots before tenant B files two, so that A holds every slot and B's runs wait
behind A's whole backlog (issue 16, finding 6). Each tenant gets a share of a profile's
slots: while both contend, the limit divided among them (two each here), decided under
the runner-create fence by concurrent dispatch workers (real threads); A's surplus waits,
deferred and not failed, and a tenant alone still uses every slot."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.test import override_settings

from dispatch.launchers import LaunchRequest
from dispatch.models import RunnerDispatchIntent
from dispatch.services.launch import dispatch_batch
from runs.models import Run
from tests.dispatch.helpers import RecordingLauncher, make_dispatch_command, set_capacity
from tests.runs.threads import race

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("short_waits"),
]


@pytest.fixture
def short_waits() -> object:
    """Deferred intents are due again at once, so every round sees all of them."""
    with override_settings(AGENTRUN_DISPATCH_CAPACITY_WAIT_MS=0):
        yield


class TenantWatch:
    """Runner slots held per tenant at every launch (no run finishes in these tests)."""

    def __init__(self) -> None:
        self.held: Counter[str] = Counter()
        self._lock = threading.Lock()

    def on_launch(self, request: LaunchRequest) -> None:
        tenant = Run.objects.values_list("tenant_id", flat=True).get(pk=request.run_id)
        with self._lock:
            self.held[tenant] += 1


def _dispatch_rounds(launcher: RecordingLauncher, rounds: int = 3) -> None:
    for _ in range(rounds):
        race([lambda: dispatch_batch(launchers={"local": launcher}) for _ in range(3)])


def test_one_tenants_backlog_cannot_take_every_slot_of_a_profile() -> None:
    set_capacity("scripted", 4)
    for _ in range(8):
        make_dispatch_command(tenant_id="tenant-a")
    for _ in range(2):
        make_dispatch_command(tenant_id="tenant-b")
    watch = TenantWatch()
    _dispatch_rounds(RecordingLauncher(on_launch=watch.on_launch))

    assert watch.held == {"tenant-a": 2, "tenant-b": 2}
    waiting = RunnerDispatchIntent.objects.exclude(state="dispatched")
    assert set(waiting.values_list("run__tenant_id", flat=True)) == {"tenant-a"}
    assert set(waiting.values_list("state", "attempt_count")) == {("pending", 0)}  # waits
    assert waiting.count() == 6


def test_a_tenant_alone_uses_every_slot() -> None:
    set_capacity("scripted", 4)
    for _ in range(6):
        make_dispatch_command(tenant_id="tenant-a")
    watch = TenantWatch()
    _dispatch_rounds(RecordingLauncher(on_launch=watch.on_launch), rounds=2)
    assert watch.held == {"tenant-a": 4}


@override_settings(AGENTRUN_TENANT_RUNNER_SHARE_PERCENT=50)
def test_the_operator_ceiling_holds_a_lone_tenant_to_its_share() -> None:
    set_capacity("scripted", 4)
    for _ in range(6):
        make_dispatch_command(tenant_id="tenant-a")
    watch = TenantWatch()
    _dispatch_rounds(RecordingLauncher(on_launch=watch.on_launch), rounds=2)
    assert watch.held == {"tenant-a": 2}
