"""Abstract column groups that several apps' tables share, declared once.

Each base adds exactly the columns its models declared one by one before, so the
migrations see no change (Django lists inherited columns first; column order is not part
of a migration's state). But an output that lists all of a model's fields
(`exclude = []`: `SessionOut`, `TaskOut`) would change its key order, so `Session` and
`QueueTask` keep declaring their own timestamps.

- `TextIdModel`: the seed's text primary key `id`, and a row that reads as its id.
- `Timestamped`: `created_at` / `updated_at`, both set by Python at insert; the services
  move `updated_at` themselves on every write.
- `CancelMarked`: the mark a cancel request leaves on the run or command it targets.
- `ReadMark`: who marked a row read, and when (a reader's cursor row; the concrete model
  adds the row read and the version it was at).
- `LeasedWork`: a row that workers claim under a lease and retry with backoff (dispatch
  intents, outbox records): how often it was tried, by whom until when, its last error.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class TextIdModel(models.Model):
    id = models.TextField(primary_key=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return self.id


class Timestamped(models.Model):
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        abstract = True


class CancelMarked(models.Model):
    """A cancel request's mark on the run or command it targets (SPEC §9.7; the names are
    `runs.models.CANCEL_MARK_FIELDS`)."""

    cancel_epoch = models.IntegerField(default=0, db_default=0)
    cancel_request_id = models.TextField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_reason = models.TextField(null=True, blank=True)

    class Meta:
        abstract = True


class ReadMark(models.Model):
    reader_id = models.TextField()
    read_at = models.DateTimeField(default=timezone.now)

    class Meta:
        abstract = True


class LeasedWork(models.Model):
    attempt_count = models.IntegerField(default=0)
    lease_owner = models.TextField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    last_error = models.JSONField(null=True, blank=True)

    class Meta:
        abstract = True
