"""Launchers: how a dispatch intent becomes a running runner job.

`local` (default) starts the reference runner as a subprocess; `kubernetes` creates a
batch/v1 Job. Which one, and with which image, namespace and service account, is the
operator's launch profile (`AGENTRUN_LAUNCH_PROFILES`); an intent only names a profile
(`launch_profile`, else `default`), and a profile without a `launcher` takes
`AGENTRUN_LAUNCHER`. Any other key an older intent recorded is ignored. A deployment adds
another kind with `AGENTRUN_EXTRA_LAUNCHERS` (`name=dotted.path.Class`); callers (tests)
may also pass their own mapping to the dispatch step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from agentrun import conf
from dispatch.launchers.base import (
    JobState,
    Launched,
    Launcher,
    LaunchError,
    LaunchRequest,
    launch_profile,
)
from dispatch.launchers.kubernetes import KubernetesLauncher
from dispatch.launchers.local import LocalLauncher

__all__ = [
    "JobState",
    "LaunchError",
    "LaunchRequest",
    "Launched",
    "Launcher",
    "default_launchers",
    "launch_profile",
    "launcher_for",
]


def default_launchers() -> dict[str, Launcher]:
    """`local`, `kubernetes`, and the deployment's `AGENTRUN_EXTRA_LAUNCHERS`."""
    launchers: dict[str, Launcher] = {"local": LocalLauncher(), "kubernetes": KubernetesLauncher()}
    for name, path in conf.extra_launchers().items():
        try:
            launchers[name] = import_string(path)()
        except ImportError as error:
            raise ImproperlyConfigured(
                f"AGENTRUN_EXTRA_LAUNCHERS: launcher {name!r} = {path!r} cannot be imported: "
                f"{error}"
            ) from error
    return launchers


def launcher_for(options: Mapping[str, Any], launchers: Mapping[str, Launcher]) -> Launcher:
    """The launcher of the launch profile an intent names, else the deployment's.
    Errors: `LaunchError` naming an unknown profile or launcher (the intent fails, visibly)."""
    name = launch_profile(options).get("launcher") or conf.launcher()
    launcher = launchers.get(str(name))
    if launcher is None:
        raise LaunchError(
            f"unknown launcher {name!r}; known: {', '.join(sorted(launchers))}",
            reason="unknown-launcher",
        )
    return launcher
