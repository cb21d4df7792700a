"""`CodexBackend`: one app-server process per run, and the session's thread inside it.

The process is started at the first turn (`initialize` → `initialized`) and replaced if it
dies. Per turn, the session's thread is resumed (`thread/resume`, once per process) or a new
one started (`thread/start`, never ephemeral: an ephemeral thread has no rollout and cannot
be resumed by the next run's process); the turn itself is `Turn`'s job. Thread milestones
are `backend_status` {phase: thread-started | thread-resumed | thread-resume-failed}.
A codex that exits or stops answering fails the turn `infra-failed` with its stderr tail; a
request codex refuses fails it `backend-failed`. Thread id and turn id are always reported.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from runner.backends.base import TurnControl, TurnInput, TurnOutcome
from runner.backends.codex.config import codex_argv, codex_env, thread_params
from runner.backends.codex.rpc import CodexError, CodexProcess, RpcError
from runner.backends.codex.turn import RPC_TIMEOUT_S, Turn
from runner.phases import RunnerPhase


class CodexBackend:
    def __init__(self, run: dict[str, Any]) -> None:
        self.run = run
        self.policy: dict[str, Any] = dict(run.get("execution_policy") or {})
        self._process: CodexProcess | None = None
        self._thread_id: str | None = None  # the thread loaded in the current process
        self._workdir: str | None = None
        self._model: str | None = None  # the thread's model, as codex reported it

    # ---- the Backend interface -------------------------------------------------------

    def run_turn(self, turn: TurnInput, control: TurnControl) -> TurnOutcome:
        if control.interrupted.is_set():
            return TurnOutcome("cancelled", "cancelled", "interrupted", turn.thread_id)
        ids: dict[str, Any] = {"thread_id": turn.thread_id, "turn_id": None}
        try:
            process = self._ensure_process()
            ids["thread_id"] = self._ensure_thread(process, turn, control)
            ids["model"] = self._model
            return Turn(
                process, ids, turn, control, policy=self.policy, on_stuck=self._discard
            ).run()
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
        home = (
            os.environ.get("AGENTRUN_CODEX_HOME")
            or os.environ.get("CODEX_HOME")  # the launcher's: one per session
            or str(Path(workdir, "home"))
        )
        Path(home).mkdir(mode=0o700, parents=True, exist_ok=True)
        process = CodexProcess(codex_argv(), env=codex_env(home, workdir), cwd=self._cwd())
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

    def _cwd(self) -> str:
        path = (self.run.get("workspace_ref") or {}).get("path")
        if path and Path(path).is_dir():
            return str(path)
        return str(Path(self._work_dir(), "workspace"))

    def _thread_params(self) -> dict[str, Any]:
        return thread_params(self.policy, self._cwd())

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
                self._model = result.get("model") or self._model
                control.emit(
                    "backend_status",
                    {**ids, "phase": RunnerPhase.THREAD_RESUMED, "thread_id": self._thread_id},
                )
                return self._thread_id
            except RpcError as error:  # e.g. "no rollout found": the home was not kept
                control.emit(
                    "backend_status",
                    {
                        **ids,
                        "phase": RunnerPhase.THREAD_RESUME_FAILED,
                        "thread_id": wanted,
                        "message": error.message,
                    },
                )
        result = process.request("thread/start", self._thread_params(), timeout_s=RPC_TIMEOUT_S)
        self._thread_id = str(result["thread"]["id"])
        self._model = result.get("model") or self._model
        control.emit(
            "backend_status",
            {
                **ids,
                "phase": RunnerPhase.THREAD_STARTED,
                "thread_id": self._thread_id,
                "model": result.get("model"),
            },
        )
        return self._thread_id
