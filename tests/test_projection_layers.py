"""The projection tier is fenced, not only described (SPEC §9.1, HOUSE-STYLE "layering").

`runs/` is the bottom domain layer, yet its services write other apps' rows in the run's
transaction. It may do that only through those apps' projection modules (and build
CloudEvents with `outbox.cloudevents`); any other import from an app above it is an arrow
running back up the layers. The projection modules in turn import only the models, locks
and versions of `runs` and of their own app, plus `agentrun`, so calling one from `runs`
can never import a `runs` service back.

Imports are read by `tests/layering.py` at any depth (a function-level import counts), from
every module outside migrations. An import under `if TYPE_CHECKING:` is a type only and is
not counted here: it never runs.
"""

from __future__ import annotations

from tests.layering import CODE_PACKAGES, ROOT, Import, imports_of, imports_of_package, is_module

# Found, not listed: a new app (as `compat_openai` was) is first-party from its first commit.
FIRST_PARTY = set(CODE_PACKAGES)
PROJECTION_MODULES = {
    "sessions.projection",
    "queues.projection",
    "dispatch.intents",
    "outbox.record",
    "webhooks.record",
}
RUNS_MAY_IMPORT = PROJECTION_MODULES | {"outbox.cloudevents"}
RUNS_FOUNDATION = {"runs.models", "runs.locks", "runs.versions"}


def _first_party(found: list[Import]) -> list[Import]:
    return [one for one in found if one.package in FIRST_PARTY]


def test_runs_imports_only_projection_modules() -> None:
    offenders = [
        str(found)
        for found in _first_party(imports_of_package("runs", type_checking=False))
        if found.package not in {"runs", "agentrun", "runner"} and not found.within(RUNS_MAY_IMPORT)
    ]
    assert offenders == []


def test_projection_modules_import_only_models_locks_versions() -> None:
    offenders = []
    for projection in sorted(PROJECTION_MODULES):
        app = projection.split(".")[0]
        path = ROOT.joinpath(*projection.split(".")).with_suffix(".py")
        allowed = RUNS_FOUNDATION | {app, "agentrun"}
        offenders += [
            str(found)
            for found in _first_party(imports_of(path, type_checking=False))
            if not found.within(allowed)
        ]
    assert offenders == []


def test_every_projection_module_exists() -> None:
    """The fence above is only as good as its list: a moved module must move the list."""
    assert [name for name in sorted(PROJECTION_MODULES) if not is_module(name)] == []
