"""The typed settings accessors: each names a real setting, returns its one type, and reads
the settings at call time (so test overrides apply)."""

from __future__ import annotations

import inspect
import types
import typing
from pathlib import Path
from typing import Any

from pytest_django.fixtures import Settings as SettingsWrapper

from agentrun import conf

ACCESSORS: list[Any] = [
    accessor
    for name, accessor in inspect.getmembers(conf)
    if not name.startswith("_")
    and (
        isinstance(accessor, conf.Setting)
        or (inspect.isfunction(accessor) and accessor.__module__ == conf.__name__)
    )
]


def _declared(accessor: Any) -> Any:
    """A function's return annotation; a `Setting` row's cast (a type, or a function's)."""
    if isinstance(accessor, conf.Setting):
        cast = accessor.cast
        return cast if isinstance(cast, type) else typing.get_type_hints(cast)["return"]
    return typing.get_type_hints(accessor)["return"]


def _runtime_types(declared: Any) -> tuple[type, ...]:
    """`str | None` → (str, NoneType); `dict[str, str]` → (dict,)."""
    members = typing.get_args(declared) if isinstance(declared, types.UnionType) else (declared,)
    return tuple(typing.get_origin(t) or t for t in members)


def test_every_accessor_reads_a_real_setting_as_its_declared_type() -> None:
    assert len(ACCESSORS) > 30
    for accessor in ACCESSORS:
        declared = _declared(accessor)
        value = accessor()  # a misspelt setting name raises AttributeError here
        if declared is object:
            continue
        assert isinstance(value, _runtime_types(declared)), (accessor, value)


def test_accessors_read_the_settings_at_call_time(settings: SettingsWrapper) -> None:
    settings.AGENTRUN_DISPATCH_BATCH_SIZE = "7"  # as an environment would give it
    settings.AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT = False
    settings.AGENTRUN_DATA_DIR = "/tmp/agentrun-conf-test"
    assert conf.dispatch_batch_size() == 7
    assert conf.outbox_wake_on_commit() is False
    assert conf.data_dir() == Path("/tmp/agentrun-conf-test")
