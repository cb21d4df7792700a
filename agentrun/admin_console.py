"""What every operator admin screen shares: links between related objects, bounded tables of
a parent's children, and a paginator that never counts a big table.

- `link` / `changelist_link`: an object's change page, or a changelist filtered to a
  parent (`?run__id__exact=…`), so an operator walks run ↔ session ↔ task ↔ intent ↔
  outbox without typing ids.
- `recent_table`: the newest `limit` rows of a relation, shown oldest first (newest last)
  with a link to the full, paged changelist: a run can have thousands of events, and an
  inline formset would load every one of them.
- `EstimatedCountPaginator`: the changelist's count without `COUNT(*)` over the table —
  PostgreSQL's row estimate when the list is unfiltered, else a count of at most `cap`
  rows (a `LIMIT`ed subquery). Paired with `show_full_result_count = False`.
- `RunLinkColumn`: the `run_link` column of every screen whose rows belong to a run.
- `ReadOnlyAdmin` / `BigTableAdmin`: the base of every app's screens. The store owns the
  state and the services write it, so a screen changes nothing; a big table (events,
  outbox, runs) also never counts itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

EMPTY = mark_safe("—")  # a constant: nothing to escape


def link(viewname: str, pk: Any, text: Any = None) -> SafeString:
    """A link to an admin change page (`viewname` like "runs_run"); a dash for no pk."""
    if pk is None or pk == "":
        return EMPTY
    try:
        url = reverse(f"admin:{viewname}_change", args=[pk])
    except NoReverseMatch:
        return format_html("{}", text if text is not None else pk)
    return format_html('<a href="{}">{}</a>', url, text if text is not None else pk)


def changelist_link(viewname: str, text: str, **params: Any) -> SafeString:
    """A link to an admin changelist with query parameters (filters)."""
    url = reverse(f"admin:{viewname}_changelist")
    query = f"?{urlencode(params)}" if params else ""
    return format_html('<a href="{}{}">{}</a>', url, query, text)


def links(*parts: SafeString | None) -> SafeString:
    """Links joined with a separator, skipping missing ones."""
    shown = [(part,) for part in parts if part and part != EMPTY]
    return format_html_join(" · ", "{}", shown) if shown else EMPTY


def recent_table(
    rows: QuerySet[Any],
    *,
    order: str,
    limit: int,
    columns: Sequence[tuple[str, Callable[[Any], Any]]],
    more: SafeString,
) -> SafeString:
    """The newest `limit` rows by `order` (a field, newest = highest), shown newest last,
    then `more` (a link to all of them)."""
    newest = list(rows.order_by(f"-{order}")[:limit])[::-1]
    if not newest:
        return format_html("<p>none</p>")
    header = format_html_join("", "<th>{}</th>", ((name,) for name, _ in columns))
    cells = [
        format_html_join("", "<td>{}</td>", ((cell(row),) for _, cell in columns)) for row in newest
    ]
    body = format_html_join("", "<tr>{}</tr>", ((row,) for row in cells))
    note = f"the latest {len(newest)}, newest last" if len(newest) == limit else "all, newest last"
    return format_html(
        "<table><thead><tr>{}</tr></thead><tbody>{}</tbody></table><p>{} — {}</p>",
        header,
        body,
        note,
        more,
    )


def short_json(value: Any, size: int = 160) -> str:
    """A JSON value cut to `size` characters for a table cell."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= size else text[: size - 1] + "…"


class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]
    """Counts without `COUNT(*)` over the whole table (see module doc)."""

    cap = 10_000

    @cached_property
    def count(self) -> int:
        rows: Any = self.object_list
        if isinstance(rows, QuerySet) and not rows.query.where:
            estimate = _estimated_rows(rows.model)
            if estimate >= self.cap:
                return estimate
        return int(rows[: self.cap].count())


def _estimated_rows(model: type[Model]) -> int:
    """PostgreSQL's planner estimate of the table's rows (-1 before the first ANALYZE)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)",
            [model._meta.db_table],
        )
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] is not None else -1


def link_column(viewname: str, attr: str, description: str) -> Callable[[Any, Any], SafeString]:
    """A column (list or detail) that links the row's `attr`, another row's id, to that
    row's change page: assigned in a ModelAdmin's body, it is one of its display methods."""

    @admin.display(description=description)
    def column(self: Any, obj: Any) -> SafeString:
        return link(viewname, getattr(obj, attr))

    return column


class RunLinkColumn:
    """A `run_link` column (list or detail): the row's run, by its `run_id`, linked to the
    run's change page. Mixed into the screen of every model that belongs to a run."""

    run_link = link_column("runs_run", "run_id", "run")


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Shows everything, changes nothing: writes go through the services."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class BigTableAdmin(ReadOnlyAdmin):
    """A read-only table that grows with traffic: no full count, ever."""

    show_full_result_count = False
    paginator = EstimatedCountPaginator
