"""The run list's filters: a FilterSet, never hand-parsed query strings."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter

from runs.models import Run, RunStatus, run_search_document
from runs.selectors import RUN_SORTS, recent_runs

MIN_INDEXED_SEARCH = 3  # pg_trgm indexes three-character grams
SHORT_SEARCH_WINDOW = 1_000


class RunFilter(django_filters.FilterSet):  # type: ignore[misc]  # django-filter is untyped
    # No join to repeat rows, so no DISTINCT (which sorted the tenant's whole history).
    status = django_filters.MultipleChoiceFilter(choices=RunStatus.choices, distinct=False)
    project_id = django_filters.CharFilter(max_length=200)
    workspace = django_filters.CharFilter(field_name="workspace_ref__path", max_length=4096)
    backend_profile = django_filters.CharFilter(max_length=200)
    provider_id = django_filters.CharFilter(max_length=200)
    updated_after = django_filters.IsoDateTimeFilter(field_name="updated_at", lookup_expr="gte")
    search = django_filters.CharFilter(method="filter_search", max_length=200)
    sort = django_filters.ChoiceFilter(
        choices=[(key, key) for key in RUN_SORTS], method="keep", empty_label=None
    )

    class Meta:
        model = Run
        fields: list[str] = []

    def filter_search(self, queryset: QuerySet[Run], name: str, value: str) -> QuerySet[Run]:
        """Case-insensitive substring over the fields a person searches runs by (seed),
        through the trigram index on `run_search_document()`. A term of one or two
        characters has no trigram to look up: it searches the SHORT_SEARCH_WINDOW most
        recently updated runs of the scope, so its cost does not grow with history."""
        matches = queryset.alias(haystack=run_search_document()).filter(
            Q(haystack__contains=value.lower())
        )
        if len(value) >= MIN_INDEXED_SEARCH:
            return matches
        return matches.filter(pk__in=recent_runs(queryset, SHORT_SEARCH_WINDOW).values("pk"))

    def keep(self, queryset: QuerySet[Run], name: str, value: str) -> QuerySet[Run]:
        return queryset  # `sort` is validated here and applied by the selector.


def run_filter_parameters() -> list[OpenApiParameter]:
    """The filters as OpenAPI query parameters (the views are not generic views, so
    drf-spectacular cannot read the FilterSet by itself)."""
    return [
        OpenApiParameter(
            name,
            OpenApiTypes.DATETIME if name == "updated_after" else OpenApiTypes.STR,
            many=name == "status",
            enum=[c[0] for c in getattr(f, "extra", {}).get("choices", [])] or None,
            description=f"filter: {name}",
        )
        for name, f in RunFilter.base_filters.items()
    ]
