"""A JSON-RPC client for `codex app-server` over stdio.

One JSON object per line in each direction. A reader thread parses the server's stdout:
responses (an `id`, no `method`) complete the request waiting for them; notifications and
the server's own requests (a `method`, with an `id` for requests) are queued in arrival
order for the turn loop, which answers the requests with `respond`. A second thread drains
stderr into a bounded tail, so a chatty server never blocks and a dying one can say why.

Every wait has a timeout, and every wait ends early when the process exits: a request
then raises `CodexExited` with the exit code and the stderr tail, never hangs.

The process is started in its own session (process group), so `close` can end whatever it
left behind (tool processes, a test's mock model server) by that group id.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import logging
import os
import queue
import re
import signal
import subprocess
import threading
import time
from typing import IO, Any

log = logging.getLogger("agentrun.runner.codex")

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NOISE = re.compile(r"^\s*(Stack backtrace:|\d+: <unknown>)\s*$")
_EOF = object()


class CodexError(Exception):
    """Base of the errors talking to codex."""


class CodexExited(CodexError):
    def __init__(self, returncode: int | None, stderr_tail: str) -> None:
        self.returncode, self.stderr_tail = returncode, stderr_tail
        tail = f": {stderr_tail}" if stderr_tail else ""
        super().__init__(f"codex app-server exited (rc={returncode}){tail}")


class RpcTimeout(CodexError):
    pass


class RpcError(CodexError):
    def __init__(self, method: str, error: dict[str, Any]) -> None:
        self.method, self.code = method, error.get("code")
        self.message = str(error.get("message", error))
        super().__init__(f"{method}: {self.message} (code {self.code})")


class _Pending:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.message: dict[str, Any] | None = None


class CodexProcess:
    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: str | None) -> None:
        self.argv = argv
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        self.messages: queue.Queue[Any] = queue.Queue()
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._stderr: collections.deque[str] = collections.deque(maxlen=40)
        self.exited = threading.Event()
        assert self.proc.stdout is not None and self.proc.stderr is not None
        for target, stream in ((self._read, self.proc.stdout), (self._drain, self.proc.stderr)):
            threading.Thread(target=target, args=(stream,), name="codex-io", daemon=True).start()

    # ---- calls -----------------------------------------------------------------------

    def request(self, method: str, params: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        """Send a request and wait for its result; raise RpcError, RpcTimeout or
        CodexExited."""
        request_id = next(self._ids)
        pending = _Pending()
        with self._lock:
            self._pending[request_id] = pending
        if self.exited.is_set():  # the reader has gone: nobody would ever answer
            raise self.exit_error()
        self._write({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        if not pending.done.wait(timeout_s):
            with self._lock:
                self._pending.pop(request_id, None)
            raise RpcTimeout(f"{method}: no answer from codex in {timeout_s:g}s")
        if pending.message is None:
            raise self.exit_error()
        if "error" in pending.message:
            raise RpcError(method, pending.message["error"] or {})
        return pending.message.get("result") or {}

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._write(message)

    def respond(
        self, request_id: Any, result: Any = None, error: dict[str, Any] | None = None
    ) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        message.update({"error": error} if error is not None else {"result": result})
        self._write(message)

    def next_message(self, timeout_s: float) -> dict[str, Any] | None:
        """The next notification or server request, None if none came in time; raises
        CodexExited once the process has gone and everything it said was consumed."""
        try:
            message = self.messages.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if message is _EOF:
            self.messages.put(_EOF)
            raise self.exit_error()
        return message  # type: ignore[no-any-return]

    # ---- process ---------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return not self.exited.is_set() and self.proc.poll() is None

    def stderr_tail(self, max_chars: int = 2000) -> str:
        """The last lines codex wrote to stderr, without Rust's unsymbolised backtrace."""
        lines = [line for line in self._stderr if not _NOISE.match(line)]
        return "\n".join(lines)[-max_chars:].strip()

    def exit_error(self) -> CodexExited:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)
        return CodexExited(self.proc.returncode, self.stderr_tail())

    def close(self, grace_s: float = 2.0) -> None:
        """Close stdin (app-server then exits by itself), wait `grace_s`, then terminate;
        finally end anything left in the process group."""
        with contextlib.suppress(OSError), self._write_lock:
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=grace_s)
        self._end_group()

    def _end_group(self) -> None:
        pgid = self.proc.pid  # the session leader's pid is the group id
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                return
            deadline = time.monotonic() + 1.0
            while _group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.02)
            if not _group_alive(pgid):
                return

    # ---- I/O threads -----------------------------------------------------------------

    def _write(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":")) + "\n"
        log.debug("codex <- %s", line.rstrip())
        try:
            with self._write_lock:
                assert self.proc.stdin is not None
                self.proc.stdin.write(line.encode())
                self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as error:
            raise self.exit_error() from error

    def _read(self, stream: IO[bytes]) -> None:
        try:
            for raw in stream:
                self._dispatch(raw)
        finally:
            self.exited.set()
            with self._lock:
                pending, self._pending = list(self._pending.values()), {}
            for waiter in pending:
                waiter.done.set()
            self.messages.put(_EOF)

    def _dispatch(self, raw: bytes) -> None:
        try:
            message = json.loads(raw)
        except ValueError:
            log.warning("codex printed a non-JSON line: %r", raw[:200])
            return
        log.debug("codex -> %s", raw.decode(errors="replace").rstrip()[:2000])
        if not isinstance(message, dict):
            return
        if "method" not in message and "id" in message:
            with self._lock:
                waiter = self._pending.pop(message["id"], None)
            if waiter is not None:
                waiter.message = message
                waiter.done.set()
            return
        self.messages.put(message)

    def _drain(self, stream: IO[bytes]) -> None:
        for raw in stream:
            line = _ANSI.sub("", raw.decode(errors="replace")).rstrip()
            if line:
                self._stderr.append(line)
                log.debug("codex stderr: %s", line)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` is still running. Zombies do not count: orphans
    are reparented to PID 1, which may be slow to reap them."""
    try:
        entries = os.listdir("/proc")
    except OSError:  # no procfs: ask the kernel (zombies then count as alive)
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False
