"""`manage.py gc_sessions [--limit N] [--dry-run] [--json]`: delete expired local session
storage and mark it evicted. Only a session's own directory,
`<AGENTRUN_SESSION_STORAGE_ROOT>/<tenant id>/<session id>`, is ever deleted (issue 16): a
recorded path outside it (another tenant's storage, a symlink out) is counted as
`skipped_outside_root` and left alone.

PVC storage is only counted here; the Kubernetes launcher deletes it (the dispatch issue).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

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

    def handle(self, *args: Any, **options: Any) -> None:
        limit, dry_run = options["limit"], options["dry_run"]
        if limit < 1:
            raise CommandError("--limit must be at least 1")
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
