"""Answers to the app-server's own requests (approvals and the like), by the run's policy.

Approval requests (commands, file changes, permissions) are decided by the run's
`approval_policy` (`runner.backends.base.approval_decision`): `ask` waits for a person's
answer through the API, `deny` declines all, otherwise the policy's `approvals` answers
(`decline`, the default, or `accept`). Forms and user-input requests get an empty answer,
and requests agentrun does not know get a JSON-RPC "method not found" error. Each request
and its answer is recorded by the turn as `backend_status` {phase: approval-requested |
approval-answered, method, decision}, or server-request | server-request-answered for
requests that are not approvals.
"""

from __future__ import annotations

from typing import Any

_KINDS = {
    "item/commandExecution/requestApproval": "command",
    "execCommandApproval": "command",
    "item/fileChange/requestApproval": "file_change",
    "applyPatchApproval": "file_change",
    "item/permissions/requestApproval": "other",
}


def approval_ask(
    method: str, params: dict[str, Any], item: dict[str, Any] | None
) -> tuple[str, str, dict[str, Any]] | None:
    """(kind, summary, details) of an approval request a person could decide, or None for
    a request that is not one. The summary is what was asked — the command line, or the
    files a change touches — so the same request asked again has the same summary."""
    kind = _KINDS.get(method)
    if kind is None:
        return None
    command = params.get("command")
    if isinstance(command, list):
        command = " ".join(str(part) for part in command)
    raw = (item or {}).get("changes") or {}
    if isinstance(raw, list):  # a list of {path, kind, diff}; or a map path → change
        changes = sorted(str(c.get("path")) for c in raw if isinstance(c, dict))
    else:
        changes = sorted(str(path) for path in raw)
    reason = params.get("reason")
    if kind == "command":
        summary = f"run: {command}"
    elif kind == "file_change":
        summary = f"change files: {', '.join(changes) or reason or 'unspecified'}"
    else:
        summary = f"grant permissions: {reason or method}"
    details = {
        "method": method,
        "item_id": params.get("itemId"),
        "command": command,
        "cwd": params.get("cwd"),
        "reason": reason,
        "changes": changes,
        "permissions": params.get("permissions"),
    }
    return kind, summary, {key: value for key, value in details.items() if value}


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
