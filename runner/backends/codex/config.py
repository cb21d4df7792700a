"""How codex is started: its command line, its `-c` overrides and its environment.

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
import os
import shutil
from pathlib import Path
from typing import Any

DEFAULT_COMMAND = ["codex", "app-server", "--listen", "stdio://"]
LOCAL_CODEX = Path(__file__).resolve().parents[3] / ".codex-cli" / "node_modules" / ".bin" / "codex"
# Variables never passed to codex: the runner's credentials and the control plane's
# settings, any OpenAI/Codex configuration of the host, and proxies.
_STRIPPED_PREFIXES = ("AGENTRUN_", "OPENAI_", "CODEX_", "DJANGO_", "CELERY_")
_STRIPPED_NAMES = {"DATABASE_URL", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "FTP_PROXY"}
_DEFAULT_CONFIG = {"features.shell_snapshot": False, "analytics.enabled": False}
_FORCED_CONFIG = {"features.plugins": False, "check_for_update_on_startup": False}


def codex_argv(policy: dict[str, Any]) -> list[str]:
    """The app-server's command line: AGENTRUN_CODEX_COMMAND plus the policy's overrides."""
    raw = os.environ.get("AGENTRUN_CODEX_COMMAND")
    argv = [str(part) for part in json.loads(raw)] if raw else list(DEFAULT_COMMAND)
    if argv[0] == "codex" and shutil.which("codex") is None and LOCAL_CODEX.exists():
        argv[0] = str(LOCAL_CODEX)
    # The model and provider also become the process defaults, so nothing at start-up
    # works against a provider the run did not ask for.
    chosen: dict[str, Any] = {
        key: policy[key] for key in ("model", "model_provider") if key in policy
    }
    config = {**_DEFAULT_CONFIG, **chosen, **flatten(policy.get("codex_config") or {})}
    for key, value in {**config, **_FORCED_CONFIG}.items():
        if value is not None:
            argv += ["-c", f"{key}={toml_value(value)}"]
    return argv


def thread_params(policy: dict[str, Any], cwd: str) -> dict[str, Any]:
    """The `thread/start` and `thread/resume` parameters the policy sets."""
    params: dict[str, Any] = {
        "cwd": cwd,
        "approvalPolicy": policy.get("approval_policy", "never"),
        "model": policy.get("model"),
        "modelProvider": policy.get("model_provider"),
        "sandbox": policy.get("sandbox"),
        "developerInstructions": policy.get("developer_instructions"),
    }
    return {key: value for key, value in params.items() if value is not None}


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
