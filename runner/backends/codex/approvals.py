"""Answers to the app-server's own requests (approvals and the like), by the run's policy.

The policy's `approvals` is `decline` (the default) or `accept`; agentrun has nobody to ask,
so forms and user-input requests get an empty answer, and requests it does not know get a
JSON-RPC "method not found" error. Each request and its answer is recorded by the turn as
`backend_status` {phase: approval-requested | approval-answered, method, decision}, or
server-request | server-request-answered for requests that are not approvals.
"""

from __future__ import annotations

from typing import Any


def policy_decision(policy: dict[str, Any]) -> str:
    """`accept` only when the policy says so; anything else declines."""
    return "accept" if policy.get("approvals", "decline") == "accept" else "decline"


def approval_answer(method: str, params: dict[str, Any], decision: str) -> tuple[Any, str]:
    """The result for a server request under an accept/decline policy, and the decision
    as recorded; (None, "unsupported") for requests agentrun cannot answer."""
    accept = decision == "accept"
    if method in ("item/commandExecution/requestApproval", "item/fileChange/requestApproval"):
        return {"decision": decision}, decision
    if method in ("execCommandApproval", "applyPatchApproval"):  # the legacy API
        answer = "approved" if accept else "denied"
        return {"decision": answer}, answer
    if method == "item/permissions/requestApproval":
        granted = params.get("permissions") if accept else {}
        return {"permissions": granted or {}, "scope": "turn"}, decision
    if method == "mcpServer/elicitation/request":  # nobody to fill in a form
        return {"action": "decline"}, "decline"
    if method == "item/tool/requestUserInput":
        return {"answers": {}}, "no-answer"
    return None, "unsupported"


def unsupported_error(method: str) -> dict[str, Any]:
    return {"code": -32601, "message": f"{method} is not supported by agentrun"}
