"""The OpenAI Agents API surface (`client.beta.agents.sessions` of the `openai` package)
served under `/openai/v1/` on top of agentrun's sessions, turns, cancel and approvals
(SPEC §9.6). Not named `openai`: a top-level package of that name would shadow the SDK.

It sits at the top of the layers below `ops`: it composes `sessions` and `runs` (their
services and selectors) and nothing below imports it (`tests/test_layers.py`).
`compat_openai.api` is the `/openai/v1/` routes and the SDK's error shapes;
`compat_openai.services` writes (sessions; events: a message is a turn admission, a cancel
a session cancel), `compat_openai.selectors` reads, both through `actions` (input events
parsed), `agents` (agent settings to a backend profile and policy), `shapes` and `items`
(rows in the SDK's shapes); `compat_openai.stream` the session stream as SDK events
(`events_map`); `compat_openai.locks` the profile row lock.
"""
