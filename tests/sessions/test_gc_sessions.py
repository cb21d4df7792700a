"""`manage.py gc_sessions`: an expired session's own storage directory
(`<root>/<tenant>/<session>`) is deleted and evicted, nothing else."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from agentrun.tenancy import Scope
from sessions.models import Session
from sessions.services.lifecycle import StorageFacts, refresh_session_storage
from tests.sessions.world import idle_session, session

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(tmp_path: Path) -> Any:
    storage_root = tmp_path / "sessions"
    storage_root.mkdir()
    with override_settings(AGENTRUN_SESSION_STORAGE_ROOT=storage_root):
        yield storage_root


def _session_dir(path: Path) -> Path:
    (path / "sessions" / "2025").mkdir(parents=True)
    (path / "sessions" / "2025" / "rollout.jsonl").write_text("{}\n")
    return path


def _stored_session(session_id: str, path: Path, *, expired: bool = True, kind: str = "local"):  # type: ignore[no-untyped-def]
    when = timezone.now() + (timedelta(hours=-1) if expired else timedelta(hours=1))
    idle_session(session_id, expires_at=when)
    facts = (
        StorageFacts(storage_kind="local", storage_path=str(path))
        if kind == "local"
        else StorageFacts(storage_kind="pvc", storage_pvc_name=f"pvc-{session_id}")
    )
    return refresh_session_storage(
        session_id=session_id, scope=Scope.tenant("tenant-a"), facts=facts
    )


def _legacy_row(session_id: str, path: Path | str) -> None:
    """An expired local session whose path was recorded before paths were confined."""
    idle_session(session_id, expires_at=timezone.now() - timedelta(hours=1))
    Session.objects.filter(pk=session_id).update(storage_kind="local", storage_path=str(path))


def _gc(*args: str) -> str:
    out = StringIO()
    call_command("gc_sessions", *args, stdout=out)
    return out.getvalue()


def test_gc_deletes_an_expired_local_dir_under_the_root_and_evicts_its_session(root: Path) -> None:
    directory = _session_dir(root / "tenant-a" / "s-gc")
    before = _stored_session("s-gc", directory)
    output = _gc()
    assert output.startswith("evicted 1 expired local session dirs"), output
    assert not directory.exists()
    evicted = session("s-gc")
    assert evicted.storage_kind == "evicted" and evicted.storage_evicted_at is not None
    assert evicted.version > before.version


def test_gc_never_deletes_a_path_outside_the_root(root: Path, tmp_path: Path) -> None:
    outside = _session_dir(tmp_path / "elsewhere" / "s-out")
    escaping = _session_dir(tmp_path / "escaping")
    _legacy_row("s-out", outside)
    _legacy_row("s-escape", root / "tenant-a" / "s-escape" / ".." / ".." / ".." / "escaping")
    _legacy_row("s-root", root)  # the root itself is not a session's directory
    report = json.loads(_gc("--json"))
    assert report == {"evicted": 0, "skipped_outside_root": 3, "pvc_pending": 0, "dry_run": False}
    assert outside.exists() and escaping.exists() and root.exists()
    assert {s.storage_kind for s in Session.objects.all()} == {"local"}


def test_gc_leaves_unexpired_storage_alone(root: Path) -> None:
    directory = _session_dir(root / "tenant-a" / "s-fresh")
    _stored_session("s-fresh", directory, expired=False)
    assert json.loads(_gc("--json"))["evicted"] == 0
    assert directory.exists() and session("s-fresh").storage_kind == "local"


def test_a_dry_run_counts_and_changes_nothing(root: Path) -> None:
    directory = _session_dir(root / "tenant-a" / "s-dry")
    before = _stored_session("s-dry", directory)
    output = _gc("--dry-run")
    assert output.startswith("would evict 1 expired local session dirs"), output
    assert directory.exists()
    assert (session("s-dry").storage_kind, session("s-dry").version) == ("local", before.version)


def test_gc_counts_expired_pvcs_but_leaves_them_to_the_launcher(root: Path) -> None:
    _stored_session("s-pvc", root, kind="pvc")
    report = json.loads(_gc("--json"))
    assert (report["pvc_pending"], report["evicted"]) == (1, 0)
    assert session("s-pvc").storage_kind == "pvc"


def test_gc_makes_progress_past_storage_it_cannot_delete(root: Path, tmp_path: Path) -> None:
    """Expired PVCs and outside-root paths are never changed, so they stay the oldest: the
    limit counts evictions, or they would starve the local dirs behind them forever."""
    _stored_session("s-old-pvc", root, kind="pvc")
    _legacy_row("s-old-outside", _session_dir(tmp_path / "outside"))
    directory = _session_dir(root / "tenant-a" / "s-young")
    _stored_session("s-young", directory)
    report = json.loads(_gc("--limit", "1", "--json"))
    assert report["evicted"] == 1
    assert not directory.exists() and session("s-young").storage_kind == "evicted"


def test_gc_spares_a_session_whose_storage_was_refreshed_meanwhile(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner moves the session to a new dir (and a new expiry) between the listing and
    the eviction: the eviction is decided under the session lock, so nothing is deleted."""
    from sessions.services import lifecycle

    old_dir = _session_dir(root / "tenant-a" / "s-moved" / "old")
    new_dir = _session_dir(root / "tenant-a" / "s-moved" / "new")
    _stored_session("s-moved", old_dir)
    listed = list(
        Session.objects.filter(pk="s-moved").values_list("pk", "tenant_id", "storage_path")
    )
    Session.objects.filter(pk="s-moved").update(
        storage_path=str(new_dir), expires_at=timezone.now() + timedelta(days=1)
    )
    monkeypatch.setattr(lifecycle, "_expired_local_candidates", lambda now: listed)
    assert json.loads(_gc("--json"))["evicted"] == 0
    assert old_dir.exists() and new_dir.exists()
    assert session("s-moved").storage_kind == "local"


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(CommandError, match="--limit"):
        _gc("--limit", "0")
