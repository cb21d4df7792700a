"""The `codex` backend: drives `codex app-server` over JSON-RPC on stdio.

- `backend.py`: `CodexBackend`, one app-server process per run and the session's thread;
- `turn.py`: one turn, notifications mapped to agentrun events, steers and interrupts;
- `events.py`: codex items as event payloads (pure);
- `approvals.py`: answers to the server's approval and other requests, by the policy;
- `config.py`: codex's command line (the operator's config), parameters and environment;
- `rpc.py`: the JSON-RPC client over the process's stdio.
"""

from runner.backends.codex.backend import CodexBackend

__all__ = ["CodexBackend"]
