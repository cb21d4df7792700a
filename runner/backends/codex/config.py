"""How codex is started: its command line, its configuration and its environment.

A run's execution policy is a tenant's input, so nothing in it becomes a `-c` flag, a
process to start or a provider to call (issue 16 finding 1): the API admits only the
allow-listed choices of `runs/policy.py`, and this module reads only those, as JSON-RPC
parameters. Codex's own configuration is the operator's, from the runner's environment:
  AGENTRUN_CODEX_COMMAND  JSON list, default ["codex", "app-server", "--listen", "stdio://"]
                          (a bare `codex` not on PATH falls back to the project's
                          .codex-cli/node_modules/.bin/codex); `-c key=value` overrides
                          are appended to it, so a wrapper must pass its arguments on.
  AGENTRUN_CODEX_CONFIG   JSON object of codex configuration (nested or dotted keys), e.g.
                          the model provider: {"model_provider": "p", "model_providers":
                          {"p": {"base_url": …, "env_key": "P_API_KEY"}}}. It becomes `-c`
                          flags, which `ps` shows: never put a credential here, name it with
                          `env_key` and let it through AGENTRUN_CODEX_ENV_PASSTHROUGH.
  AGENTRUN_CODEX_ENV_PASSTHROUGH  comma-separated names of runner variables codex gets.
  AGENTRUN_CODEX_HOME, CODEX_HOME  codex's home (the local launcher sets CODEX_HOME, one
                          per session); default a fresh temp dir per run, removed at close.
From the policy (already checked against the profile's ceilings by the API):
  model, sandbox, approval_policy, developer_instructions  → `thread/start`/`thread/resume`;
  reasoning_effort, reasoning_summary                       → `turn/start` (effort, summary);
  approvals (decline | accept) and turn_timeout_s are the runner's own (`approvals.py`,
  `turn.py`); approval_policy `auto | ask | deny` (agentrun's) runs codex `on-request`
  and is the runner's to apply.
Codex always runs with `features.plugins=false` and `check_for_update_on_startup=false`
(no start-up network traffic), and with an allow-listed environment: `PATH`, `HOME`, the
locale, `TZ`, its home, `TMPDIR` and the operator's passthrough names, nothing else of the
runner's (no runner key, no `DATABASE_URL`, `SECRET_KEY`, `AWS_*`, proxies …).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

DEFAULT_COMMAND = ["codex", "app-server", "--listen", "stdio://"]
LOCAL_CODEX = Path(__file__).resolve().parents[3] / ".codex-cli" / "node_modules" / ".bin" / "codex"
# The shell basics. SHLVL too: codex's tool shell sources the host's login profile, and
# e.g. pyenv's init there tries a rehash (which the sandbox refuses, noisily) unless the
# shell is nested.
_ENV_NAMES = ("PATH", "HOME", "LANG", "TZ", "TERM", "USER", "LOGNAME", "SHELL", "SHLVL")
_DEFAULT_CONFIG = {"features.shell_snapshot": False, "analytics.enabled": False}
_FORCED_CONFIG = {"features.plugins": False, "check_for_update_on_startup": False}


def operator_config() -> dict[str, Any]:
    """AGENTRUN_CODEX_CONFIG, flattened to dotted keys."""
    raw = os.environ.get("AGENTRUN_CODEX_CONFIG")
    config = json.loads(raw) if raw else {}
    if not isinstance(config, dict):
        raise ValueError("AGENTRUN_CODEX_CONFIG must be a JSON object")
    return flatten(config)


def codex_argv() -> list[str]:
    """The app-server's command line: AGENTRUN_CODEX_COMMAND plus the operator's config."""
    raw = os.environ.get("AGENTRUN_CODEX_COMMAND")
    argv = [str(part) for part in json.loads(raw)] if raw else list(DEFAULT_COMMAND)
    if argv[0] == "codex" and shutil.which("codex") is None and LOCAL_CODEX.exists():
        argv[0] = str(LOCAL_CODEX)
    for key, value in {**_DEFAULT_CONFIG, **operator_config(), **_FORCED_CONFIG}.items():
        if value is not None:
            argv += ["-c", f"{key}={toml_value(value)}"]
    return argv


def thread_params(policy: dict[str, Any], cwd: str) -> dict[str, Any]:
    """The `thread/start` and `thread/resume` parameters the policy sets."""
    params: dict[str, Any] = {
        "cwd": cwd,
        "approvalPolicy": codex_approval_policy(policy),
        "model": policy.get("model"),
        "sandbox": policy.get("sandbox"),
        "developerInstructions": policy.get("developer_instructions"),
    }
    return {key: value for key, value in params.items() if value is not None}


# agentrun's own approval policies (SPEC §9.3): codex must ask for each of them to apply.
AGENTRUN_APPROVAL_POLICIES = ("auto", "ask", "deny")


def codex_approval_policy(policy: dict[str, Any]) -> Any:
    """Codex's `approvalPolicy`: `on-request` under agentrun's `auto | ask | deny` (codex
    asks; the runner answers, asks a person, or refuses), else codex's own as given
    (default `never`)."""
    chosen = policy.get("approval_policy", "never")
    return "on-request" if chosen in AGENTRUN_APPROVAL_POLICIES else chosen


def turn_params(policy: dict[str, Any]) -> dict[str, Any]:
    """The per-turn choices `turn/start` takes (besides the thread and the input)."""
    params = {"effort": policy.get("reasoning_effort"), "summary": policy.get("reasoning_summary")}
    return {key: value for key, value in params.items() if value is not None}


def codex_env(home: str, workdir: str) -> dict[str, str]:
    """Codex's whole environment: an allow-list, never the runner's own."""
    raw = os.environ.get("AGENTRUN_CODEX_ENV_PASSTHROUGH", "")
    names = {*_ENV_NAMES, *(name.strip() for name in raw.split(",") if name.strip())}
    env = {key: value for key, value in os.environ.items() if key in names or key.startswith("LC_")}
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
