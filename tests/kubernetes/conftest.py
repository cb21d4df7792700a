"""The Kubernetes tests share one real API server (tests/support/kube_cluster.py) and
send dispatcher wake-ups to an in-memory broker, as the dispatch tests do."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.dispatch.helpers import celery_broker
from tests.support.kube_cluster import KubeCluster, PodStandIn, kube_cluster  # noqa: F401


@pytest.fixture(autouse=True)
def memory_broker() -> Iterator[None]:
    with celery_broker("memory://localhost/"):
        yield


@pytest.fixture(scope="module")
def namespace(kube_cluster: KubeCluster) -> str:  # noqa: F811
    """A namespace of the module's own, so tests never see each other's objects."""
    return kube_cluster.create_namespace("agentrun-test")


@pytest.fixture
def clients(kube_cluster: KubeCluster) -> Any:  # noqa: F811
    return kube_cluster.clients()


@pytest.fixture
def pods(clients: Any) -> PodStandIn:
    return PodStandIn(clients[1])
