"""A runtime-only install runs a turn on Redis and on RabbitMQ (issue 15).

`pip install -r requirements.txt` into a new venv, nothing else: no editable install, no
test or lint tools. That venv's python runs `manage.py up` from the project directory
(so `agentrun`, `runner` and the apps import from the working directory, as in a
deployment from a checkout) with `CELERY_BROKER_URL` naming each broker, and one session
turn on the scripted backend must complete through the API. A transport library that
requirements.txt forgets (kombu's Redis transport needs `redis` and `packaging`, which
only its `redis` extra declares) fails here and nowhere else: the shared dev venv has it
from some other package.

The venv is built once per machine per requirements.txt, under
~/.cache/agentrun-runtime-venv/<sha256 of requirements.txt>: in a temporary directory
beside it, then renamed into place, so a half-built venv is never used; a file lock keeps
two test runs from building at once. Only `bin/python` of that venv is ever run (its
scripts' shebangs still name the temporary directory).
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.up_process import ROOT, Api, UpProcess
from tests.runtime.server import database_url_of_tests

pytestmark = pytest.mark.django_db(transaction=True)
REQUIREMENTS = ROOT / "requirements.txt"
CACHE = Path.home() / ".cache" / "agentrun-runtime-venv"
BROKERS = {
    "redis": "redis://127.0.0.1:6379/7",
    "rabbitmq": "amqp://guest:guest@127.0.0.1:5672//",
}


def _build(venv: Path) -> None:
    """A new venv at `venv` with requirements.txt installed, or nothing there at all."""
    building = Path(tempfile.mkdtemp(prefix=f"{venv.name}.building-", dir=venv.parent))
    try:
        subprocess.run([sys.executable, "-m", "venv", str(building)], check=True)
        pip = [str(building / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        installed = subprocess.run([*pip, "-r", str(REQUIREMENTS)], capture_output=True, text=True)
        assert installed.returncode == 0, f"pip failed:\n{installed.stdout}{installed.stderr}"
        building.rename(venv)
    finally:
        shutil.rmtree(building, ignore_errors=True)


def runtime_python() -> Path:
    """The runtime venv's python, built first if this requirements.txt has none yet."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    venv = CACHE / digest
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{digest}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second run waits here, then finds it built
        if not venv.exists():
            print(f"building the runtime venv {venv} (first run: a few minutes)", flush=True)
            started = time.monotonic()
            _build(venv)
            print(f"built the runtime venv in {time.monotonic() - started:.0f} s", flush=True)
    return venv / "bin" / "python"


@pytest.fixture(scope="module")
def python() -> str:
    interpreter = runtime_python()
    # The point of this venv: what only the dev requirements bring is absent.
    probe = [str(interpreter), "-c", "import pytest"]
    absent = subprocess.run(probe, capture_output=True, cwd="/", check=False)
    assert absent.returncode != 0, "the runtime venv has pytest: not a runtime-only install"
    return str(interpreter)


@pytest.fixture(params=sorted(BROKERS))
def up(request: pytest.FixtureRequest, python: str, tmp_path: Path) -> Iterator[UpProcess]:
    env = {"DATABASE_URL": database_url_of_tests(), "CELERY_BROKER_URL": BROKERS[request.param]}
    process = UpProcess(tmp_path, env, python=python)
    try:
        yield process.start()
    finally:
        assert process.stop() == 0, process.log()[-4000:]


def test_a_runtime_only_install_runs_a_turn(up: UpProcess) -> None:
    api = Api(up.url, up.client_key())
    run_id = api.turn("runtime-install", "a turn on a runtime-only install")
    assert api.wait_terminal([run_id], timeout=180) == {run_id: "completed"}, up.log()[-4000:]
    banner = re.search(r"broker: +(\S+)", up.log())
    assert banner, "the banner names no broker"
    scheme = up.env["CELERY_BROKER_URL"].partition("://")[0]
    assert banner.group(1).startswith(f"{scheme}://"), banner.group(0)  # not the database
