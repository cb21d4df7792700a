"""Launchers: how a dispatch intent becomes a running runner job.

`local` (default) starts the reference runner as a subprocess; `kubernetes` creates a
batch/v1 Job. An intent picks one with its `launcher` key; otherwise
`AGENTRUN_LAUNCHER` decides. Callers may pass their own mapping of launchers (the
dispatch step takes one), which is how a deployment adds another kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings

from dispatch.launchers.base import JobState, Launched, Launcher, LaunchError, LaunchRequest
from dispatch.launchers.kubernetes import KubernetesLauncher
from dispatch.launchers.local import LocalLauncher

__all__ = [
    "JobState",
    "LaunchError",
    "LaunchRequest",
    "Launched",
    "Launcher",
    "default_launchers",
    "launcher_for",
]


def default_launchers() -> dict[str, Launcher]:
    return {"local": LocalLauncher(), "kubernetes": KubernetesLauncher()}


def launcher_for(options: Mapping[str, Any], launchers: Mapping[str, Launcher]) -> Launcher:
    """The launcher an intent asks for (`options["launcher"]`), else the deployment's.
    Errors: `LaunchError` naming an unknown launcher (so the intent fails, visibly)."""
    name = options.get("launcher") or settings.AGENTRUN_LAUNCHER
    launcher = launchers.get(str(name))
    if launcher is None:
        raise LaunchError(
            f"unknown launcher {name!r}; known: {', '.join(sorted(launchers))}",
            reason="unknown-launcher",
        )
    return launcher
