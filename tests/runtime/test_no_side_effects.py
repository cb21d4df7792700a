"""Importing the settings starts nothing (SPEC §9.1): with DATABASE_URL unset,
`manage.py --help` and `check` start no PostgreSQL, and a command that needs the database
fails with what to do instead of a socket error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env["AGENTRUN_DATA_DIR"] = str(data_dir)
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _postgres_processes(data_dir: Path) -> list[int]:
    """postgres processes serving a cluster under `data_dir` (other people's servers on the
    machine are left out: they come and go on their own)."""
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if process.info["name"] == "postgres" and str(data_dir) in cmdline:
            found.append(process.pid)
    return found


def test_help_and_check_start_no_postgres(tmp_path: Path) -> None:
    before = _postgres_processes(tmp_path)
    for args in (("--help",), ("check",), ("help", "migrate")):
        result = _manage(*args, data_dir=tmp_path)
        assert result.returncode == 0, result.stderr
    assert _postgres_processes(tmp_path) == before == []
    assert not (tmp_path / "pgdata").exists(), "a cluster was initialised"


def test_a_database_command_says_none_is_configured(tmp_path: Path) -> None:
    result = _manage("migrate", data_dir=tmp_path)
    assert result.returncode != 0
    assert "DATABASE_URL is not set" in result.stderr
    assert "embedded PostgreSQL" in result.stderr
    assert not (tmp_path / "pgdata").exists()
