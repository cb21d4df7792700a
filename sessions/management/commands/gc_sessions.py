"""`manage.py gc_sessions [--limit N] [--dry-run] [--json]`: delete expired local session
storage and mark it evicted. Only a session's own directory,
`<AGENTRUN_SESSION_STORAGE_ROOT>/<tenant id>/<session id>`, is ever deleted (issue 16): a
recorded path outside it (another tenant's storage, a symlink out) is counted as
`skipped_outside_root` and left alone.

PVC storage is only counted here; the Kubernetes launcher deletes it (the dispatch issue).
`--list-pvcs` lists the expired PVC-backed sessions instead (seed `listGcExpiredSessions`:
session, tenant, namespace, claim name, expiry), oldest update first, and changes nothing:
no code here deletes a PersistentVolumeClaim.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from sessions.selectors import expired_pvc_sessions
from sessions.services.lifecycle import gc_expired_local_storage


class Command(BaseCommand):
    help = "Delete expired sessions' own storage directories; mark them evicted."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--limit", type=int, default=100, help="evict at most this many sessions (100)"
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would be evicted; change nothing"
        )
        parser.add_argument("--json", action="store_true", help="print a JSON object")
        parser.add_argument(
            "--list-pvcs",
            action="store_true",
            help="list expired PVC-backed sessions (at most --limit); change nothing",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        limit, dry_run = options["limit"], options["dry_run"]
        if limit < 1:
            raise CommandError("--limit must be at least 1")
        if options["list_pvcs"]:
            self._list_pvcs(limit, as_json=options["json"])
            return
        counts = gc_expired_local_storage(limit=limit, dry_run=dry_run)
        if options["json"]:
            self.stdout.write(json.dumps({**counts, "dry_run": dry_run}, sort_keys=True))
            return
        verb = "would evict" if dry_run else "evicted"
        self.stdout.write(
            f"{verb} {counts['evicted']} expired local session dirs; "
            f"skipped {counts['skipped_outside_root']} outside their session's directory; "
            f"{counts['pvc_pending']} expired PVCs left to the Kubernetes launcher"
        )

    def _list_pvcs(self, limit: int, *, as_json: bool) -> None:
        rows = [
            {
                "session_id": session.session_id,
                "tenant_id": session.tenant_id,
                "storage_namespace": session.storage_namespace,
                "storage_pvc_name": session.storage_pvc_name,
                "expires_at": session.expires_at.isoformat() if session.expires_at else None,
            }
            for session in expired_pvc_sessions(now=timezone.now(), limit=limit)
        ]
        if as_json:
            self.stdout.write(json.dumps({"expired_pvc_sessions": rows}, sort_keys=True))
            return
        for row in rows:
            self.stdout.write(
                f"{row['session_id']}\t{row['tenant_id']}\t{row['storage_namespace']}\t"
                f"{row['storage_pvc_name']}\t{row['expires_at']}"
            )
        self.stdout.write(f"{len(rows)} expired PVC-backed sessions (nothing deleted)")
