"""The `codex` backend: drives `codex app-server` over JSON-RPC on stdio.

One app-server process per backend instance (one run), started at the first turn:
`initialize` → `initialized`; then per turn, the session's thread is resumed
(`thread/resume`, once per process) or a new one started (`thread/start`, never ephemeral:
an ephemeral thread has no rollout and cannot be resumed by the next run's process);
`turn/start`; notifications are mapped to agentrun events until `turn/completed`, which
also closes every item still open (interrupted and steered streams never complete theirs).
Steers become `turn/steer` (with `expectedTurnId`), an interrupt becomes `turn/interrupt`,
and the server's approval requests are answered by the run's execution policy.
The protocol as observed on codex-cli 0.169.0: ../shared/codex-app-server.md (issue 7).

Events (each payload also carries `thread_id`, `turn_id`, `command_id`):
  `item/agentMessage/delta` → agent_message_delta {delta, item_id};
  agentMessage completed → agent_message {text, item_id};
  commandExecution started → tool_call {call_id, tool: "shell", arguments {command, cwd}};
  commandExecution completed → tool_output {call_id, output, exit_code, status}
  (mcpToolCall / dynamicToolCall / webSearch map to the same pair);
  reasoning deltas / completed → reasoning {item_id, delta | text};
  fileChange completed → file_change {item_id, status, changes [{path, kind, diff}]};
  the turn's token usage (from `thread/tokenUsage/updated`, one event when it ends) →
  token_usage {input_tokens, output_tokens, total_tokens, cached_input_tokens,
  reasoning_output_tokens, thread_total_tokens};
  `error` → error {message, codex_error_info} (`backend_status {phase: retrying}` when
  codex will retry); `warning` / `configWarning` → log {level, message};
  thread, steer, approval and abandoned-item milestones → backend_status {phase, ...}
  (thread-started | thread-resumed | thread-resume-failed, steer-accepted | steer-rejected,
  approval-requested | approval-answered {method, decision}, server-request |
  server-request-answered for other server requests, items-abandoned).
Outcome: turn status completed → completed; failed → failed `backend-failed` with the
error message; interrupted → cancelled. A codex that exits or stops answering →
failed `infra-failed` with its stderr tail. Thread id and turn id are always reported.

Configuration, from the runner's environment:
  AGENTRUN_CODEX_COMMAND  JSON list, default ["codex", "app-server", "--listen", "stdio://"]
                          (a bare `codex` not on PATH falls back to the project's
                          .codex-cli/node_modules/.bin/codex); `-c key=value` overrides
                          are appended to it, so a wrapper must pass its arguments on.
  AGENTRUN_CODEX_HOME     CODEX_HOME for codex; default a fresh temp dir per run, removed
                          at close. Resuming a thread in a later run needs a persistent
                          home (the thread's rollout lives there).
and from the run's `execution_policy`:
  model, model_provider   the thread's model and provider (codex's defaults otherwise);
  sandbox                 read-only | workspace-write | danger-full-access;
  approval_policy         never (default) | on-request | {"granular": {...}};
  approvals               how server approval requests are answered: decline (default)
                          | accept; each request and answer is recorded as backend_status;
  codex_config            {key: value}, nested or dotted, passed as `-c key=value`
                          (e.g. model_providers.<id>.base_url for a custom endpoint);
  developer_instructions  extra instructions for the thread;
  turn_timeout_s          a turn still running after this is interrupted and failed
                          `timeout` (default 3600).
Whatever the policy says, codex always runs with `features.plugins=false` and
`check_for_update_on_startup=false` (no start-up network traffic), and without the
runner's own credentials or OpenAI/Codex/proxy variables in its environment.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from runner.backends.base import TurnControl, TurnInput, TurnOutcome
from runner.backends.codex_rpc import CodexError, CodexProcess, RpcError, RpcTimeout

log = logging.getLogger("agentrun.runner.codex")

DEFAULT_COMMAND = ["codex", "app-server", "--listen", "stdio://"]
LOCAL_CODEX = Path(__file__).resolve().parents[2] / ".codex-cli" / "node_modules" / ".bin" / "codex"
RPC_TIMEOUT_S = 30.0
INTERRUPT_GRACE_S = 5.0
POLL_S = 0.05
MAX_TEXT = 200_000  # per string in an event: payloads are capped at 1 MiB by the API
# Variables never passed to codex: the runner's credentials and the control plane's
# settings, any OpenAI/Codex configuration of the host, and proxies.
_STRIPPED_PREFIXES = ("AGENTRUN_", "OPENAI_", "CODEX_", "DJANGO_", "CELERY_")
_STRIPPED_NAMES = {"DATABASE_URL", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "FTP_PROXY"}
_DEFAULT_CONFIG = {"features.shell_snapshot": False, "analytics.enabled": False}
_FORCED_CONFIG = {"features.plugins": False, "check_for_update_on_startup": False}


class CodexBackend:
    def __init__(self, run: dict[str, Any]) -> None:
        self.run = run
        self.policy: dict[str, Any] = dict(run.get("execution_policy") or {})
        self._process: CodexProcess | None = None
        self._thread_id: str | None = None  # the thread loaded in the current process
        self._workdir: str | None = None

    # ---- the Backend interface -------------------------------------------------------

    def run_turn(self, turn: TurnInput, control: TurnControl) -> TurnOutcome:
        if control.interrupted.is_set():
            return TurnOutcome("cancelled", "cancelled", "interrupted", turn.thread_id)
        ids: dict[str, Any] = {"thread_id": turn.thread_id, "turn_id": None}
        try:
            process = self._ensure_process()
            ids["thread_id"] = self._ensure_thread(process, turn, control)
            return _Turn(self, process, ids, turn, control).run()
        except RpcError as error:  # codex refused a request: the turn, not codex, failed
            return self._failed(control, turn, ids, "backend-failed", error)
        except CodexError as error:  # exited, or stopped answering
            self._discard()
            return self._failed(control, turn, ids, "infra-failed", error)

    def _failed(
        self,
        control: TurnControl,
        turn: TurnInput,
        ids: dict[str, Any],
        kind: str,
        error: Exception,
    ) -> TurnOutcome:
        control.emit("error", {**ids, "command_id": turn.command_id, "message": str(error)})
        return TurnOutcome("failed", kind, str(error), ids["thread_id"], ids["turn_id"])

    def close(self) -> None:
        self._discard()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    # ---- process and thread ----------------------------------------------------------

    def _discard(self) -> None:
        process, self._process, self._thread_id = self._process, None, None
        if process is not None:
            process.close()

    def _ensure_process(self) -> CodexProcess:
        if self._process is not None and self._process.alive:
            return self._process
        self._discard()
        workdir = self._work_dir()
        home = os.environ.get("AGENTRUN_CODEX_HOME") or str(Path(workdir, "home"))
        Path(home).mkdir(parents=True, exist_ok=True)
        process = CodexProcess(self._argv(), env=codex_env(home, workdir), cwd=self._cwd())
        self._process = process
        process.request(
            "initialize",
            {"clientInfo": {"name": "agentrun_runner", "title": "agentrun", "version": "0.1"}},
            timeout_s=RPC_TIMEOUT_S,
        )
        process.notify("initialized")
        return process

    def _work_dir(self) -> str:
        if self._workdir is None:
            self._workdir = tempfile.mkdtemp(prefix="agentrun-codex-")
            for sub in ("tmp", "workspace"):
                Path(self._workdir, sub).mkdir()
        return self._workdir

    def _argv(self) -> list[str]:
        raw = os.environ.get("AGENTRUN_CODEX_COMMAND")
        argv = [str(part) for part in json.loads(raw)] if raw else list(DEFAULT_COMMAND)
        if argv[0] == "codex" and shutil.which("codex") is None and LOCAL_CODEX.exists():
            argv[0] = str(LOCAL_CODEX)
        # The model and provider also become the process defaults, so nothing at start-up
        # works against a provider the run did not ask for.
        chosen: dict[str, Any] = {
            key: self.policy[key] for key in ("model", "model_provider") if key in self.policy
        }
        config = {**_DEFAULT_CONFIG, **chosen, **flatten(self.policy.get("codex_config") or {})}
        for key, value in {**config, **_FORCED_CONFIG}.items():
            if value is not None:
                argv += ["-c", f"{key}={toml_value(value)}"]
        return argv

    def _cwd(self) -> str:
        path = (self.run.get("workspace_ref") or {}).get("path")
        if path and Path(path).is_dir():
            return str(path)
        return str(Path(self._work_dir(), "workspace"))

    def _thread_params(self) -> dict[str, Any]:
        policy = self.policy
        params: dict[str, Any] = {
            "cwd": self._cwd(),
            "approvalPolicy": policy.get("approval_policy", "never"),
            "model": policy.get("model"),
            "modelProvider": policy.get("model_provider"),
            "sandbox": policy.get("sandbox"),
            "developerInstructions": policy.get("developer_instructions"),
        }
        return {key: value for key, value in params.items() if value is not None}

    def _ensure_thread(self, process: CodexProcess, turn: TurnInput, control: TurnControl) -> str:
        wanted = turn.thread_id
        if wanted and wanted == self._thread_id:
            return wanted
        ids = {"command_id": turn.command_id}
        if wanted:
            try:
                result = process.request(
                    "thread/resume",
                    {**self._thread_params(), "threadId": wanted, "excludeTurns": True},
                    timeout_s=RPC_TIMEOUT_S,
                )
                self._thread_id = str(result["thread"]["id"])
                control.emit(
                    "backend_status",
                    {**ids, "phase": "thread-resumed", "thread_id": self._thread_id},
                )
                return self._thread_id
            except RpcError as error:  # e.g. "no rollout found": the home was not kept
                control.emit(
                    "backend_status",
                    {
                        **ids,
                        "phase": "thread-resume-failed",
                        "thread_id": wanted,
                        "message": error.message,
                    },
                )
        result = process.request("thread/start", self._thread_params(), timeout_s=RPC_TIMEOUT_S)
        self._thread_id = str(result["thread"]["id"])
        control.emit(
            "backend_status",
            {
                **ids,
                "phase": "thread-started",
                "thread_id": self._thread_id,
                "model": result.get("model"),
            },
        )
        return self._thread_id


class _Turn:
    """One turn: start it, pump notifications into events, steer, interrupt, finish."""

    def __init__(
        self,
        backend: CodexBackend,
        process: CodexProcess,
        ids: dict[str, Any],
        turn: TurnInput,
        control: TurnControl,
    ) -> None:
        self.backend, self.process, self.control = backend, process, control
        self.outer_ids = ids  # shared with run_turn, which reports them on failure
        self.thread_id: str = ids["thread_id"]
        self.turn_id: str | None = None
        self.turn = turn
        self.ids: dict[str, Any] = {"thread_id": self.thread_id, "command_id": turn.command_id}
        self.open_items: dict[str, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        self.usage_base: dict[str, Any] | None = None
        self.last_error: str | None = None
        self.interrupt_at: float | None = None
        self.timed_out = False

    def run(self) -> TurnOutcome:
        result = self.process.request(
            "turn/start",
            {"threadId": self.thread_id, "input": [_text_input(self.turn.text)]},
            timeout_s=RPC_TIMEOUT_S,
        )
        self.turn_id = str(result["turn"]["id"])
        self.ids["turn_id"] = self.outer_ids["turn_id"] = self.turn_id
        timeout_s = float(self.backend.policy.get("turn_timeout_s") or 3600)
        deadline = time.monotonic() + timeout_s
        while True:
            if self._control(deadline):
                # codex did not end the interrupted turn: stop it; the next turn resumes.
                self.backend._discard()
                return self._completed({"status": "interrupted"})
            message = self.process.next_message(POLL_S)
            if message is None:
                continue
            if "id" in message:
                self._answer(message)
                continue
            outcome = self._on_notification(message)
            if outcome is not None:
                return outcome

    # ---- steer, interrupt, timeout ---------------------------------------------------

    def _control(self, deadline: float) -> bool:
        """Forward steers and interrupts; True once an interrupted turn overstays."""
        now = time.monotonic()
        if self.interrupt_at is not None:
            return now - self.interrupt_at > INTERRUPT_GRACE_S
        if now > deadline:
            self.timed_out = True
        if self.control.interrupted.is_set() or self.timed_out:
            self.interrupt_at = now
            try:
                self._request(
                    "turn/interrupt",
                    {"threadId": self.thread_id, "turnId": self.turn_id},
                    timeout_s=INTERRUPT_GRACE_S,
                )
            except RpcTimeout:
                return True
            return False
        while (text := self.control.next_steer()) is not None:
            params: dict[str, Any] = {
                "threadId": self.thread_id,
                "expectedTurnId": self.turn_id,
                "input": [_text_input(text)],
            }
            error = self._request("turn/steer", params)
            phase = "steer-rejected" if error else "steer-accepted"
            self._emit("backend_status", phase=phase, text=text, message=error)
        return False

    def _request(
        self, method: str, params: dict[str, Any], timeout_s: float = RPC_TIMEOUT_S
    ) -> str | None:
        """A request whose refusal is not fatal (the turn may just have ended)."""
        try:
            self.process.request(method, params, timeout_s=timeout_s)
        except RpcError as error:
            log.info("%s refused: %s", method, error)
            return error.message
        return None

    # ---- the server's requests -------------------------------------------------------

    def _answer(self, message: dict[str, Any]) -> None:
        method, params = str(message.get("method")), message.get("params") or {}
        decision = self.backend.policy.get("approvals", "decline")
        decision = "accept" if decision == "accept" else "decline"
        phase = "approval" if "pproval" in method else "server-request"
        self._emit(
            "backend_status",
            phase=f"{phase}-requested" if phase == "approval" else phase,
            method=method,
            request_id=message["id"],
            item_id=params.get("itemId"),
            command=params.get("command"),
            reason=params.get("reason"),
        )
        result, answered = approval_answer(method, params, decision)
        if result is None:
            self.process.respond(
                message["id"],
                error={"code": -32601, "message": f"{method} is not supported by agentrun"},
            )
        else:
            self.process.respond(message["id"], result)
        self._emit(
            "backend_status",
            phase=f"{phase}-answered",
            method=method,
            request_id=message["id"],
            decision=answered,
        )

    # ---- notifications ---------------------------------------------------------------

    def _on_notification(self, message: dict[str, Any]) -> TurnOutcome | None:
        method, params = message.get("method"), message.get("params") or {}
        turn_id = params.get("turnId") or (params.get("turn") or {}).get("id")
        if turn_id is not None and turn_id != self.turn_id:
            return None  # e.g. the usage of an earlier turn, replayed on resume
        if params.get("threadId", self.thread_id) != self.thread_id:
            return None  # a sub-agent's thread
        if method == "turn/completed":
            return self._completed(params.get("turn") or {})
        handler = _HANDLERS.get(str(method))
        if handler is not None:
            handler(self, params)
        return None

    def _item_started(self, params: dict[str, Any]) -> None:
        item = params.get("item") or {}
        self.open_items[str(item.get("id"))] = item
        call = _tool_call(item)
        if call is not None:
            self._emit("tool_call", **call)

    def _item_completed(self, params: dict[str, Any]) -> None:
        item = params.get("item") or {}
        self.open_items.pop(str(item.get("id")), None)
        kind = item.get("type")
        if kind == "agentMessage":
            self._emit("agent_message", item_id=item.get("id"), text=_clip(item.get("text")))
        elif kind == "reasoning":
            text = "\n".join([*item.get("summary", []), *item.get("content", [])])
            self._emit("reasoning", item_id=item.get("id"), text=_clip(text))
        elif kind == "fileChange":
            changes = [
                {
                    "path": c.get("path"),
                    "kind": (c.get("kind") or {}).get("type"),
                    "diff": _clip(c.get("diff")),
                }
                for c in item.get("changes") or []
            ]
            self._emit(
                "file_change", item_id=item.get("id"), status=item.get("status"), changes=changes
            )
        else:
            output = _tool_output(item)
            if output is not None:
                self._emit("tool_output", **output)

    def _delta(self, params: dict[str, Any]) -> None:
        self._emit("agent_message_delta", item_id=params.get("itemId"), delta=params.get("delta"))

    def _reasoning_delta(self, params: dict[str, Any]) -> None:
        self._emit("reasoning", item_id=params.get("itemId"), delta=params.get("delta"))

    def _token_usage(self, params: dict[str, Any]) -> None:
        usage = params.get("tokenUsage") or {}
        total, last = usage.get("total") or {}, usage.get("last") or {}
        if self.usage_base is None:  # the thread's total before this turn's first call
            self.usage_base = {k: total.get(k, 0) - last.get(k, 0) for k in total}
        self.usage = total

    def _error(self, params: dict[str, Any]) -> None:
        error = params.get("error") or {}
        message = str(error.get("message") or "codex reported an error")
        if params.get("willRetry"):
            self._emit("backend_status", phase="retrying", message=message)
            return
        self.last_error = message
        self._emit("error", message=message, codex_error_info=error.get("codexErrorInfo"))

    def _warning(self, params: dict[str, Any]) -> None:
        message = params.get("message") or params.get("summary")
        self._emit("log", level="warning", message=_clip(message))

    def _completed(self, turn: dict[str, Any]) -> TurnOutcome:
        self._close_open_items()
        self._emit_usage()
        status = turn.get("status")
        ids = (self.thread_id, self.turn_id)
        if status == "completed":
            return TurnOutcome("completed", None, None, *ids)
        if status == "interrupted" and self.timed_out:
            return TurnOutcome("failed", "timeout", "the turn exceeded turn_timeout_s", *ids)
        if status == "interrupted":
            return TurnOutcome("cancelled", "cancelled", "interrupted", *ids)
        message = (turn.get("error") or {}).get("message") or self.last_error
        return TurnOutcome("failed", "backend-failed", message or f"turn {status}", *ids)

    def _close_open_items(self) -> None:
        """Interrupted and steered streams never complete their items: the turn's end
        closes them. A tool call still open gets its tool_output (status incomplete)."""
        abandoned = []
        for item_id, item in self.open_items.items():
            if item.get("type") == "userMessage":
                continue
            abandoned.append({"item_id": item_id, "type": item.get("type")})
            if _tool_call(item) is not None:
                self._emit(
                    "tool_output", call_id=item_id, output="", exit_code=None, status="incomplete"
                )
        self.open_items.clear()
        if abandoned:
            self._emit("backend_status", phase="items-abandoned", items=abandoned)

    def _emit_usage(self) -> None:
        if self.usage is None:
            return
        base = self.usage_base or {}
        turn = {key: value - base.get(key, 0) for key, value in self.usage.items()}
        self._emit(
            "token_usage",
            input_tokens=turn.get("inputTokens", 0),
            output_tokens=turn.get("outputTokens", 0),
            total_tokens=turn.get("totalTokens", 0),
            cached_input_tokens=turn.get("cachedInputTokens", 0),
            reasoning_output_tokens=turn.get("reasoningOutputTokens", 0),
            thread_total_tokens=self.usage.get("totalTokens", 0),
        )

    def _emit(self, type: str, **payload: Any) -> None:
        self.control.emit(type, {**self.ids, **payload})


_HANDLERS = {
    "item/started": _Turn._item_started,
    "item/completed": _Turn._item_completed,
    "item/agentMessage/delta": _Turn._delta,
    "item/reasoning/summaryTextDelta": _Turn._reasoning_delta,
    "item/reasoning/textDelta": _Turn._reasoning_delta,
    "thread/tokenUsage/updated": _Turn._token_usage,
    "error": _Turn._error,
    "warning": _Turn._warning,
    "configWarning": _Turn._warning,
}


# ---- pure helpers --------------------------------------------------------------------


def _text_input(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "text_elements": []}


def _clip(text: Any) -> Any:
    if isinstance(text, str) and len(text) > MAX_TEXT:
        return text[:MAX_TEXT] + f"\n[… {len(text) - MAX_TEXT} characters cut by agentrun]"
    return text


def _tool_call(item: dict[str, Any]) -> dict[str, Any] | None:
    kind, call_id = item.get("type"), item.get("id")
    if kind == "commandExecution":
        arguments = {"command": item.get("command"), "cwd": item.get("cwd")}
        return {"call_id": call_id, "tool": "shell", "arguments": arguments}
    if kind == "mcpToolCall":
        tool = f"{item.get('server')}/{item.get('tool')}"
        return {"call_id": call_id, "tool": tool, "arguments": item.get("arguments")}
    if kind == "dynamicToolCall":
        return {"call_id": call_id, "tool": item.get("tool"), "arguments": item.get("arguments")}
    if kind == "webSearch":
        return {"call_id": call_id, "tool": "web_search", "arguments": {"query": item.get("query")}}
    return None


def _tool_output(item: dict[str, Any]) -> dict[str, Any] | None:
    kind, status = item.get("type"), item.get("status")
    if kind == "commandExecution":
        output, exit_code = item.get("aggregatedOutput") or "", item.get("exitCode")
    elif kind == "mcpToolCall":
        output = json.dumps(item.get("error") or item.get("result"))
        exit_code = 0 if status == "completed" else 1
    elif kind == "dynamicToolCall":
        output = json.dumps(item.get("contentItems"))
        exit_code = 0 if item.get("success") else 1
    elif kind == "webSearch":
        output, exit_code = json.dumps(item.get("results")), 0
    else:
        return None
    return {
        "call_id": item.get("id"),
        "output": _clip(output),
        "exit_code": exit_code,
        "status": status,
    }


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


def codex_env(home: str, workdir: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_STRIPPED_PREFIXES) and key.upper() not in _STRIPPED_NAMES
    }
    env.update(
        CODEX_HOME=home,
        TMPDIR=str(Path(workdir, "tmp")),
        NO_PROXY="127.0.0.1,localhost",
        RUST_LOG=os.environ.get("RUST_LOG", "warn"),
    )
    return env


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}, "c.d": 2} -> {"a.b": 1, "c.d": 2}: one `-c` override per leaf."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{toml_value(str(k))} = {toml_value(v)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    # A TOML basic string: JSON's escapes (\", \\, \n, \uXXXX) are valid TOML.
    return json.dumps(str(value), ensure_ascii=False)
