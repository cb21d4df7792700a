"""The run list's filters: a FilterSet, never hand-parsed query strings."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet, TextField, Value
from django.db.models.functions import Concat, Lower
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter

from runs.models import Run, RunStatus
from runs.selectors import RUN_SORTS


class RunFilter(django_filters.FilterSet):  # type: ignore[misc]  # django-filter is untyped
    status = django_filters.MultipleChoiceFilter(choices=RunStatus.choices)
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
        """Case-insensitive substring over the fields a person searches runs by (seed)."""
        haystack = Lower(
            Concat(
                "id",
                Value("\n"),
                "project_id",
                Value("\n"),
                "backend_profile",
                Value("\n"),
                "provider_id",
                Value("\n"),
                "workspace_ref__path",
                Value("\n"),
                "session_ref__session_id",
                Value("\n"),
                "trace_sink__task_id",
                Value("\n"),
                "failure_kind",
                Value("\n"),
                "failure_message",
                # id and the other columns are text, Value("\n") is a CharField: say which.
                output_field=TextField(),
            )
        )
        return queryset.alias(haystack=haystack).filter(Q(haystack__contains=value.lower()))

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
