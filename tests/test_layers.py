"""Which package may import which (SPEC §9.1), checked on the source, not described.

Each rule is one test over the import graph that `tests/layering.py` reads from the AST
(every module, migrations excluded; imports at any depth, under `if TYPE_CHECKING:` and in
`try` blocks too). Add new rules the same way.
"""

from __future__ import annotations

from tests.layering import CODE_PACKAGES, LAYERS, imports_of_package

SERVER_APPS = (
    "runs",
    "sessions",
    "queues",
    "dispatch",
    "outbox",
    "webhooks",
    "compat_openai",
    "ops",
    "runner",
)


def _offenders(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        str(found)
        for found in imports_of_package(package, type_checking=True)
        if found.package in forbidden
    )


def test_agentrun_imports_no_app() -> None:
    """The foundation imports no app, not even inside a function: every app imports it."""
    assert _offenders("agentrun", SERVER_APPS) == []


def test_nothing_imports_ops() -> None:
    """`ops` composes every app, so it is the top: only ops itself and the tests import it."""
    offenders = [
        line
        for package in CODE_PACKAGES
        if package != "ops"
        for line in _offenders(package, ("ops",))
    ]
    assert offenders == []


def test_only_ops_imports_the_agents_api_surface() -> None:
    """`compat_openai` (issue 22) composes sessions and runs under `ops`: no app below it
    imports it."""
    offenders = [
        line
        for package in CODE_PACKAGES
        if package not in ("compat_openai", "ops")
        for line in _offenders(package, ("compat_openai",))
    ]
    assert offenders == []


def test_packages_of_the_layer_table_import_only_their_layers() -> None:
    """A package listed in `tests/layering.py` `LAYERS` imports only what its row allows."""
    offenders = [
        str(found)
        for package, (allowed, _why) in LAYERS.items()
        for found in imports_of_package(package, type_checking=True)
        if found.package in CODE_PACKAGES and found.package not in allowed | {package}
    ]
    assert offenders == []
