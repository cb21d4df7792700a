"""Attack: tenant B points its own session's storage path at tenant A's session storage
(directly, through `..`, or through a symlink), lets its session expire, and waits for
`gc_sessions` to delete A's files (issue 16, finding 6). Paths are confined to the
session's own directory, `<storage root>/<tenant>/<session>`: every such path is a 400
naming `storage_path`, and GC deletes only a session's own directory, so A's files
survive even a path recorded before the check or a symlink planted after it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from sessions.models import Session
from sessions.services.lifecycle import session_storage_dir
from tests.api.helpers import error_of
from tests.builders import key_client
from tests.sessions.world import API, idle_session

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    with override_settings(AGENTRUN_SESSION_STORAGE_ROOT=tmp_path / "sessions"):
        yield tmp_path / "sessions"


@pytest.fixture
def victims_files(root: Path) -> Path:
    """Tenant A's live session with its rollout on disk."""
    directory = root / "tenant-a" / "sess-a"
    (directory / "sessions").mkdir(parents=True)
    (directory / "sessions" / "rollout.jsonl").write_text('{"secret": "A"}\n')
    idle_session("sess-a", tenant_id="tenant-a")
    return directory


def _expired_session_of_b() -> None:
    idle_session("sess-b", tenant_id="tenant-b", expires_at=timezone.now() - timedelta(hours=1))
    (Path(_own_dir()) / "x").mkdir(parents=True)


def _own_dir() -> str:
    return str(session_storage_dir("tenant-b", "sess-b"))


def _point_storage_at(path: str) -> object:
    body = {"storage_kind": "local", "storage_path": path}
    client = key_client(role="client", tenant_id="tenant-b")
    return client.put(f"{API}/sessions/sess-b/storage", body, format="json")


def _gc() -> None:
    call_command("gc_sessions", stdout=StringIO())


def _paths(root: Path, victim: Path) -> dict[str, str]:
    link = Path(_own_dir()) / "x" / "link"
    link.symlink_to(victim, target_is_directory=True)
    return {
        "direct": str(victim),
        "dotdot": f"{_own_dir()}/../../tenant-a/sess-a",
        "symlink": str(link),
        "relative": "tenant-a/sess-a",
        "the root": str(root),
    }


@pytest.mark.parametrize("how", ["direct", "dotdot", "symlink", "relative", "the root"])
def test_a_storage_path_outside_my_sessions_directory_is_a_400(
    root: Path, victims_files: Path, how: str
) -> None:
    _expired_session_of_b()
    response = _point_storage_at(_paths(root, victims_files)[how])
    assert error_of(response, 400)["details"]["field"] == "storage_path"
    assert Session.objects.get(pk="sess-b").storage_kind == "none"
    _gc()
    assert (victims_files / "sessions" / "rollout.jsonl").exists()


def test_gc_never_deletes_another_tenants_storage_recorded_before_the_check(
    root: Path, victims_files: Path
) -> None:
    _expired_session_of_b()
    Session.objects.filter(pk="sess-b").update(
        storage_kind="local", storage_path=str(victims_files)
    )
    _gc()
    assert (victims_files / "sessions" / "rollout.jsonl").exists()
    assert Session.objects.get(pk="sess-b").storage_kind == "local"  # left for an operator


def test_gc_never_follows_a_symlink_planted_after_the_check(
    root: Path, victims_files: Path
) -> None:
    _expired_session_of_b()
    inside = Path(_own_dir()) / "x" / "state"
    assert _point_storage_at(str(inside)).status_code == 200  # type: ignore[attr-defined]
    inside.symlink_to(victims_files, target_is_directory=True)  # the agent swaps it in
    _gc()
    assert (victims_files / "sessions" / "rollout.jsonl").exists()


def test_my_own_expired_storage_is_still_collected(root: Path, victims_files: Path) -> None:
    _expired_session_of_b()
    assert _point_storage_at(f"{_own_dir()}/x").status_code == 200  # type: ignore[attr-defined]
    _gc()
    assert not Path(_own_dir()).exists()
    assert Session.objects.get(pk="sess-b").storage_kind == "evicted"
    assert (victims_files / "sessions" / "rollout.jsonl").exists()
