"""A run's execution policy is tenant input: an allow-list of per-turn choices, under the
operator's ceilings (SPEC §9.7, issue 16 finding 1).

A client may choose, per backend protocol, only the keys below; anything else (Codex's
`codex_config`, `mcp_servers`, `notify`, a `model_provider` or its URL) is a 400 naming
the key, because a runner used to turn such keys into Codex configuration that starts
processes outside the agent's sandbox. What the agent may do on the host is the operator's
call: each backend profile's `policy_ceiling` caps the sandbox and lists the approval
policies and auto-answers a client may pick; a key it leaves out takes `DEFAULT_CEILING`
(workspace-write, approvals asked or never, escalations declined — never full access).

`policy_errors` is pure (tests call it directly); `check_execution_policy` is what the
API's input serializers call from their `validate`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from rest_framework import serializers

from runs.models import Backend

SANDBOX_LEVELS = ("read-only", "workspace-write", "danger-full-access")
# Codex's own policies, then agentrun's (SPEC §9.3): `auto` answers from `approvals`, `ask`
# lets a person decide through the approvals API, `deny` refuses every request.
CODEX_APPROVAL_POLICIES = ("never", "on-request", "untrusted")
APPROVAL_POLICIES = (*CODEX_APPROVAL_POLICIES, "auto", "ask", "deny")
APPROVAL_ANSWERS = ("decline", "accept")
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
REASONING_SUMMARIES = ("auto", "concise", "detailed", "none")
MAX_INSTRUCTIONS = 64 * 1024
MAX_TURN_TIMEOUT_S = 24 * 3600
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}")

CODEX_PROTOCOL = "codex-app-server-jsonrpc-stdio"
SCRIPTED_PROTOCOL = "agentrun-scripted"

# `never` is allowed by default: under a capped sandbox it means the agent can never
# escalate, which is stricter than being asked. `accept` (approve every escalation) is not,
# nor is `ask`: a tenant's person approving an escalation runs it outside the sandbox, so
# an operator lists `ask` in a profile's ceiling to allow it. The scripted backend runs
# nothing on the host, so it allows `ask` by default (tests and demos).
DEFAULT_CEILING: dict[str, Any] = {
    "sandbox": "workspace-write",
    "approval_policy": [policy for policy in APPROVAL_POLICIES if policy != "ask"],
    "approvals": ["decline"],
}
SCRIPTED_CEILING: dict[str, Any] = {**DEFAULT_CEILING, "approval_policy": list(APPROVAL_POLICIES)}


Check = Callable[[Any], str | None]  # a value → why it is refused, or None


def _one_of(choices: tuple[str, ...]) -> Check:
    def check(value: Any) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}"

    return check


def _model(value: Any) -> str | None:
    ok = isinstance(value, str) and _MODEL.fullmatch(value)
    return None if ok else "must be a model name (letters, digits, . _ : / -; at most 200)"


def _instructions(value: Any) -> str | None:
    ok = isinstance(value, str) and len(value.encode()) <= MAX_INSTRUCTIONS
    return None if ok else f"must be a string of at most {MAX_INSTRUCTIONS} bytes"


def _timeout(value: Any) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok and 1 <= value <= MAX_TURN_TIMEOUT_S:
        return None
    return f"must be a number of seconds from 1 to {MAX_TURN_TIMEOUT_S}"


def _budget(value: Any) -> str | None:
    """`{"max_total_tokens": N}`, N a positive integer (SPEC §9.4)."""
    tokens = value.get("max_total_tokens") if isinstance(value, dict) else None
    ok = isinstance(value, dict) and set(value) == {"max_total_tokens"}
    if ok and isinstance(tokens, int) and not isinstance(tokens, bool) and 0 < tokens < 2**62:
        return None
    return 'must be {"max_total_tokens": N} with N a positive integer'


def _approval_policy(value: Any) -> str | None:
    if isinstance(value, dict) and set(value) == {"granular"}:
        return None  # codex checks the granular flags; the ceiling decides if it is allowed
    return _one_of(APPROVAL_POLICIES)(value)


# Keys every backend understands: where the agent may write and who approves escalations.
_COMMON: dict[str, Check] = {
    "sandbox": _one_of(SANDBOX_LEVELS),
    "approval_policy": _approval_policy,
    "approvals": _one_of(APPROVAL_ANSWERS),
    "turn_timeout_s": _timeout,
    "budget": _budget,
}
ALLOWED_KEYS: dict[str, dict[str, Check]] = {
    CODEX_PROTOCOL: {
        **_COMMON,
        "model": _model,
        "reasoning_effort": _one_of(REASONING_EFFORTS),
        "reasoning_summary": _one_of(REASONING_SUMMARIES),
        "developer_instructions": _instructions,
    },
    # The scripted backend's test modes travel in the command payload; its policy is the
    # common choices plus its one model name.
    SCRIPTED_PROTOCOL: {**_COMMON, "model": _model},
}


def ceiling_of(backend: Backend) -> dict[str, Any]:
    """The profile's ceiling, completed from `DEFAULT_CEILING`."""
    own = backend.policy_ceiling if isinstance(backend.policy_ceiling, dict) else {}
    default = SCRIPTED_CEILING if _protocol(backend) == SCRIPTED_PROTOCOL else DEFAULT_CEILING
    return {**default, **own}


def _protocol(backend: Backend) -> str:
    protocol = (backend.capabilities or {}).get("protocol")
    return SCRIPTED_PROTOCOL if backend.profile == "scripted" else str(protocol)


def _over_ceiling(key: str, value: Any, ceiling: Mapping[str, Any]) -> str | None:
    if key == "sandbox":
        cap = str(ceiling.get("sandbox"))
        top = SANDBOX_LEVELS.index(cap) if cap in SANDBOX_LEVELS else 0
        if SANDBOX_LEVELS.index(value) > top:
            return f"{value} is above this backend profile's ceiling ({cap})"
    if key in ("approval_policy", "approvals"):
        allowed = list(ceiling.get(key) or [])
        name = "granular" if isinstance(value, dict) else value
        if name not in allowed:
            return f"{name} is not allowed on this backend profile (allowed: {allowed})"
    return None


def policy_errors(policy: Mapping[str, Any], *, backend: Backend) -> dict[str, list[str]]:
    """Key → why it is refused; empty when a client may send this policy to `backend`."""
    allowed = ALLOWED_KEYS.get(_protocol(backend), _COMMON)
    ceiling = ceiling_of(backend)
    errors: dict[str, list[str]] = {}
    for key in sorted(policy):
        check = allowed.get(key)
        value = policy[key]
        if check is None:
            errors[key] = [f"not a choice a client may make on {backend.profile!r}"]
        elif (problem := check(value)) or (problem := _over_ceiling(key, value, ceiling)):
            errors[key] = [problem]
    return errors


def check_execution_policy(policy: Mapping[str, Any] | None, *, backend_profile: str) -> None:
    """Raise a `ValidationError` under `execution_policy.<key>` for each refused key. An
    unknown profile is left to the service, which reports it by name."""
    if not policy:
        return
    backend = Backend.objects.filter(profile=backend_profile).first()
    if backend is None:
        return
    errors = policy_errors(policy, backend=backend)
    if errors:
        raise serializers.ValidationError({"execution_policy": errors})
