"""A real API server for tests: uvicorn started from `ops.server.server_argv`, the command
line production runs, on a free loopback port and the test database."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import connection

from agentrun.settings import BASE_DIR
from ops.server import server_argv
from runs.waiting import APPLICATION_NAME

SERVER_APPLICATION_NAME = "agentrun-test-server"


@dataclass(frozen=True)
class Server:
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> Reply:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            headers = {k.lower(): v for k, v in response.getheaders()}
            return Reply(response.status, headers, response.read())
        finally:
            conn.close()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def database_url_of_tests() -> str:
    """The test database (pytest-django's), which the server process must use too."""
    params = connection.settings_dict
    return f"postgres://{params['USER']}@{params['HOST']}:{params['PORT']}/{params['NAME']}"


@contextmanager
def serving(*, port: int | None = None, **env: str) -> Iterator[Server]:
    """uvicorn on the test database with `env` on top; stopped (TERM, then KILL) after.
    `port`: that one (a restart on the same address), else a free one."""
    port = port or free_port()
    data_dir = tempfile.mkdtemp(prefix="agentrun-srv-")
    log = Path(data_dir) / "server.log"
    child_env = {
        **os.environ,
        "DATABASE_URL": database_url_of_tests(),
        "AGENTRUN_DATA_DIR": data_dir,
        "AGENTRUN_DISPATCH_WAKE_ON_COMMIT": "false",
        "AGENTRUN_QUEUE_WAKE_ON_COMMIT": "false",
        "AGENTRUN_DB_APPLICATION_NAME": SERVER_APPLICATION_NAME,
        **env,
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            server_argv(host="127.0.0.1", port=port),
            cwd=BASE_DIR,
            env=child_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Server(port, process, log)
    try:
        _wait_until_answering(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_until_answering(server: Server, within_s: float = 60) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"the server exited: {server.log_text()}")
        try:
            if server.request("GET", "/healthz", timeout=5).status == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the server did not answer /healthz: {server.log_text()}")


def server_backends() -> list[tuple[int, str]]:
    """(pid, application_name) of the server's sessions on the test database now: its
    pool's and its listener's (the only listener: the test process waits on none)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, application_name FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name IN (%s, %s)",
            [SERVER_APPLICATION_NAME, APPLICATION_NAME],
        )
        return [(int(pid), str(name)) for pid, name in cursor.fetchall()]


def wait_for(condition: Any, *, within_s: float = 60, what: str = "a condition") -> Any:
    """Poll `condition()` until it returns something truthy; that value."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def raw_request(
    port: int, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> Reply:
    """One HTTP/1.1 request on its own connection (Connection: close), read to the end."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    headers = {"Host": "127.0.0.1", "Connection": "close", **headers}
    lines = [f"{method} {path} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, content = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    pairs = (line.split(": ", 1) for line in header_lines if ": " in line)
    parsed = {name.lower(): value for name, value in pairs}
    return Reply(int(status_line.split()[1]), parsed, content)
