"""The tenant gate, written once: which tenants' rows a caller may see and touch.

Every selector and service that acts on someone's behalf takes a required `scope: Scope`
(no default), so a forgotten argument is a `TypeError`, never every tenant. Seeing every
tenant is spelled out: `Scope.operator()`, at the call sites that mean it (operator keys
through `Scope.of`, admin actions, management commands, Celery tasks, the doctor).
`Scope.tenant(id)` sees one tenant; a runner key's scope sees only its one run, so rows
not addressed by a run are outside it. Anything outside the scope is a 404 (`not_found`),
never a 403 that would tell the caller it exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from django.db.models import Model, QuerySet

from agentrun.errors import not_found
from agentrun.models import ApiKey, ApiKeyRole

M = TypeVar("M", bound=Model)
R = TypeVar("R")


@dataclass(frozen=True, kw_only=True)
class Scope:
    """Whose rows a caller reaches: every tenant's (`everyone`), or one tenant's, and with
    `run_id` only that run's. Build one with the class methods, not the constructor."""

    tenant_id: str | None
    run_id: str | None = None
    everyone: bool = False

    def __post_init__(self) -> None:
        if self.everyone and (self.tenant_id is not None or self.run_id is not None):
            raise ValueError("the operator scope names no tenant and no run")
        if not self.everyone and not self.tenant_id:
            raise ValueError("a tenant scope needs a tenant id; use Scope.operator() for all")
        if self.run_id == "":
            raise ValueError("a run scope needs a run id")

    @classmethod
    def operator(cls) -> Scope:
        """Every tenant: operator keys, admin actions, commands, Celery tasks."""
        return cls(tenant_id=None, everyone=True)

    @classmethod
    def tenant(cls, tenant_id: str) -> Scope:
        return cls(tenant_id=tenant_id)

    @classmethod
    def of(cls, api_key: ApiKey) -> Scope:
        """An API key's scope: an operator's is every tenant, a client's its tenant, a
        runner's its tenant's one run."""
        if api_key.role == ApiKeyRole.OPERATOR:
            return cls.operator()
        if api_key.role == ApiKeyRole.RUNNER:
            return cls(tenant_id=api_key.tenant_id, run_id=api_key.run_id or "")
        return cls.tenant(api_key.tenant_id)

    @property
    def is_operator(self) -> bool:
        return self.everyone

    def allows(self, tenant_id: str, *, run_id: str | None = None) -> bool:
        """Whether a row of `tenant_id` (and, for a run's row, `run_id`) is in scope."""
        if self.everyone:
            return True
        if tenant_id != self.tenant_id:
            return False
        return self.run_id is None or run_id == self.run_id

    def filter(
        self, queryset: QuerySet[M], field: str = "tenant_id", *, run_field: str | None = None
    ) -> QuerySet[M]:
        """The rows of `queryset` in scope; `run_field` names the run a row belongs to
        (without it a runner's scope holds none of them)."""
        if self.everyone:
            return queryset
        queryset = queryset.filter(**{field: self.tenant_id})
        if self.run_id is None:
            return queryset
        if run_field is None:
            return queryset.none()
        return queryset.filter(**{run_field: self.run_id})

    def get_or_404(
        self,
        queryset: QuerySet[M],
        object_id: str,
        *,
        kind: str,
        field: str = "tenant_id",
        run_field: str | None = None,
    ) -> M:
        """The row `object_id` of `queryset` if it is in scope, else 404 `kind`."""
        row = self.filter(queryset.filter(pk=object_id), field, run_field=run_field).first()
        return _found(row, kind, object_id)

    def require(self, row: R | None, *, kind: str, object_id: str, field: str = "tenant_id") -> R:
        """A row already read (or locked) if it exists and is in scope, else 404 `kind`."""
        visible = row is not None and self.allows(_tenant_of(row, field))
        return _found(row if visible else None, kind, object_id)


def _tenant_of(row: Any, field: str) -> str:
    tenant_id = getattr(row, field)
    assert isinstance(tenant_id, str), f"{field} is a tenant id"
    return tenant_id


def _found(row: R | None, kind: str, object_id: str) -> R:
    if row is None:
        raise not_found(kind, object_id)
    return row
