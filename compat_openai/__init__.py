"""The OpenAI Agents API surface (`client.beta.agents.sessions` of the `openai` package)
served under `/openai/v1/` on top of agentrun's sessions, turns, cancel and approvals
(SPEC §9.6). Not named `openai`: a top-level package of that name would shadow the SDK.

It sits at the top of the layers below `ops`: it composes `sessions` and `runs` (their
services and selectors) and nothing below imports it.
"""
