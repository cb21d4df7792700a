"""From the SDK's agent settings to agentrun's choices: which backend profile runs the
session and the execution policy of its turns (SPEC §9.6).

`agent.model` names a backend profile (`scripted`, `codex`) or one of the models a profile
lists in its capabilities (`gpt-5.1-codex` → `codex`). The rest maps onto the policy keys
a client may choose (`runs.policy`): `reasoning.effort` → `reasoning_effort`,
`reasoning.summary` → `reasoning_summary`, `instructions` → `developer_instructions`, the
model itself → `model` when it is not the profile's name. A choice the profile refuses is
a 400 naming the SDK's field.
"""

from __future__ import annotations

from typing import Any

from agentrun.errors import invalid
from runs.models import Backend
from runs.policy import policy_errors

# SDK field → agentrun execution-policy key.
_POLICY_KEYS = {
    "instructions": "developer_instructions",
    "reasoning.effort": "reasoning_effort",
    "reasoning.summary": "reasoning_summary",
}


def backend_for_model(model: str) -> Backend:
    """The backend profile named by `model`, or the one listing it. Errors: 400."""
    named = Backend.objects.filter(profile=model).first()
    if named is not None:
        return named
    for backend in Backend.objects.order_by("profile"):
        if model in ((backend.capabilities or {}).get("models") or []):
            return backend
    raise invalid(
        f"agent.model: {model!r} is neither a backend profile nor a model one lists",
        field="agent.model",
    )


def policy_for(
    agent: dict[str, Any], backend: Backend, extension: dict[str, Any] | None
) -> dict[str, Any]:
    """The execution policy of the session's turns: the agentrun `execution_policy`
    extension, overlaid with what the SDK's agent settings say. Errors: 400."""
    policy = dict(extension or {})
    sources: dict[str, str] = {key: f"execution_policy.{key}" for key in policy}
    model = agent.get("model")
    if model and model != backend.profile:
        policy["model"], sources["model"] = model, "agent.model"
    reasoning = agent.get("reasoning") or {}
    values = {
        "instructions": agent.get("instructions"),
        "reasoning.effort": reasoning.get("effort"),
        "reasoning.summary": reasoning.get("summary"),
    }
    for field, value in values.items():
        if value:
            policy[_POLICY_KEYS[field]] = value
            sources[_POLICY_KEYS[field]] = f"agent.{field}"
    errors = policy_errors(policy, backend=backend)
    if errors:
        key = sorted(errors)[0]
        raise invalid(f"{sources[key]}: {errors[key][0]}", field=sources[key], errors=errors)
    return policy
