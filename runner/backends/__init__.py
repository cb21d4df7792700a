"""Backend adapters, chosen by the run's backend profile's protocol."""

from __future__ import annotations

from typing import Any

from runner.backends.base import Backend


def backend_for(run: dict[str, Any], capabilities: dict[str, Any]) -> Backend:
    """The adapter for a run: `scripted` for the built-in profile, the Codex app-server
    adapter for every `codex-app-server-jsonrpc-stdio` profile."""
    protocol = capabilities.get("protocol")
    if run["backend_profile"] == "scripted" or protocol == "agentrun-scripted":
        from runner.backends.scripted import ScriptedBackend

        return ScriptedBackend(run)
    if protocol == "codex-app-server-jsonrpc-stdio":
        from runner.backends.codex import CodexBackend

        return CodexBackend(run)
    raise ValueError(f"no runner backend for profile {run['backend_profile']!r} ({protocol})")
