"""Input serializers of the Agents API routes: the bodies and queries the `openai` SDK sends.

Every field the SDK's `session_create_params`, `session_update_params`,
`event_create_params` and list params declare is declared here, so an SDK call is never
refused for a key it may send; a field agentrun cannot honour is either accepted and
ignored (documented in the README) or, where ignoring it would mislead, a 400 naming it.
Anything else is an unknown field (400), as everywhere in agentrun.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from agentrun.validation import BoundedJSONObjectField, IdField, StrictSerializer
from compat_openai.actions import Action, ApprovalAnswer, Cancel, Message

METADATA_PAIRS = 16
EXTENSION_MAX = 64 * 1024
TEXT_MAX = 256 * 1024
REVIEW = ("none", "auto_review")
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
SUMMARIES = ("concise", "detailed", "auto")
SERVICE_TIERS = ("auto", "default", "flex", "priority", "fast", "ultrafast")


class MetadataField(serializers.DictField):
    """Up to 16 string pairs, keys up to 64 and values up to 512 characters (the SDK's
    rule); null is an empty map."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("allow_null", True)
        super().__init__(child=serializers.CharField(max_length=512, allow_blank=True), **kwargs)

    def to_internal_value(self, data: Any) -> dict[str, str]:
        value = super().to_internal_value(data)
        if len(value) > METADATA_PAIRS:
            raise serializers.ValidationError(f"at most {METADATA_PAIRS} pairs")
        if any(not key or len(key) > 64 for key in value):
            raise serializers.ValidationError("keys must be 1 to 64 characters")
        return dict(value)


class ReasoningIn(StrictSerializer):
    effort = serializers.ChoiceField(choices=EFFORTS, required=False, allow_null=True)
    summary = serializers.ChoiceField(choices=SUMMARIES, required=False, allow_null=True)


class AgentIn(StrictSerializer):
    """`agent` of a create: `model` names an agentrun backend profile or one of its models.
    `tools`, `multi_agent` and `text` are not served (agentrun's agent brings its own
    tools): accepted when empty, refused otherwise."""

    model = serializers.CharField(max_length=200, required=False)
    instructions = serializers.CharField(
        max_length=TEXT_MAX, required=False, allow_null=True, allow_blank=True
    )
    reasoning = ReasoningIn(required=False, allow_null=True)
    service_tier = serializers.ChoiceField(choices=SERVICE_TIERS, required=False, allow_null=True)
    tools = serializers.ListField(required=False, allow_null=True, max_length=0)
    multi_agent = serializers.JSONField(required=False, allow_null=True)
    text = serializers.JSONField(required=False, allow_null=True)
    compaction = serializers.JSONField(required=False, allow_null=True)
    experimental = serializers.JSONField(required=False, allow_null=True)

    def validate_multi_agent(self, value: Any) -> Any:
        if isinstance(value, dict) and value.get("enabled"):
            raise serializers.ValidationError("subagents are not served by agentrun")
        return value


class AgentUpdateIn(StrictSerializer):
    model = serializers.CharField(max_length=200, required=False)
    reasoning = ReasoningIn(required=False)
    service_tier = serializers.ChoiceField(choices=SERVICE_TIERS, required=False, allow_null=True)
    tools = serializers.ListField(required=False, allow_null=True, max_length=0)


class EnvironmentIn(StrictSerializer):
    """Only `self_hosted`: agentrun's runners are the self-hosted environment, and
    `workspace_directory` is the turn's workspace. `none` and `openai_hosted` are 400s."""

    type = serializers.CharField(max_length=40)
    workspace_directory = serializers.CharField(max_length=4096, required=False)
    capability_directories = serializers.ListField(
        child=serializers.CharField(max_length=4096), required=False, allow_null=True
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["type"] != "self_hosted":
            raise serializers.ValidationError(
                {
                    "type": [
                        f"{attrs['type']!r} is not served: agentrun runs agents on its own "
                        "runners; use {'type': 'self_hosted', 'workspace_directory': …}"
                    ]
                }
            )
        path = attrs.get("workspace_directory")
        if not path or not path.startswith("/"):
            raise serializers.ValidationError(
                {"workspace_directory": ["required: an absolute directory"]}
            )
        return attrs


class CacheOptionsIn(StrictSerializer):
    ttl = serializers.ChoiceField(choices=("30m", "12h"), required=False)


class SessionCreateIn(StrictSerializer):
    environment = EnvironmentIn()
    agent = AgentIn(required=False)
    agent_id = IdField(required=False)
    input = serializers.JSONField(required=False, allow_null=True)
    metadata = MetadataField(required=False)
    prompt_cache_options = CacheOptionsIn(required=False, allow_null=True)
    review = serializers.ChoiceField(choices=REVIEW, required=False, default="none")
    stream = serializers.BooleanField(required=False, default=False)
    stream_options = serializers.JSONField(required=False)
    vault_ids = serializers.ListField(
        child=IdField(), required=False, allow_null=True, max_length=0
    )
    # agentrun's extension: the execution policy every turn of the session runs with.
    execution_policy = BoundedJSONObjectField(max_bytes=EXTENSION_MAX, required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "agent_id" in attrs:
            raise serializers.ValidationError(
                {"agent_id": ["saved agents are not served; send agent.model"]}
            )
        if not (attrs.get("agent") or {}).get("model"):
            raise serializers.ValidationError({"agent": ["agent.model is required"]})
        if attrs.get("stream"):
            raise serializers.ValidationError(
                {"stream": ["create with stream=false, then follow sessions.events.stream"]}
            )
        return attrs


class SessionUpdateIn(StrictSerializer):
    agent = AgentUpdateIn(required=False)
    metadata = MetadataField(required=False)
    prompt_cache_options = CacheOptionsIn(required=False, allow_null=True)
    review = serializers.ChoiceField(choices=REVIEW, required=False)


class CursorQuery(StrictSerializer):
    """`after`, `limit` (1-100, default 20) and `order` (default `desc`) of every list."""

    after = IdField(required=False)
    limit = serializers.IntegerField(min_value=1, max_value=100, default=20)
    order = serializers.ChoiceField(choices=("asc", "desc"), default="desc")


class SessionListQuery(CursorQuery):
    agent_id = IdField(required=False)


class TurnItemsQuery(CursorQuery):
    pass


class StreamQuery(StrictSerializer):
    include_obfuscation = serializers.BooleanField(required=False)


class EventsIn(StrictSerializer):
    events = serializers.ListField(
        child=serializers.JSONField(), min_length=1, max_length=32, allow_empty=False
    )


def parse_events(raw: list[Any]) -> list[Action]:
    """The SDK's input events as the actions `services.events` applies, all checked before
    any is applied (a bad third event writes nothing for the first two)."""
    actions: list[Action] = []
    for index, event in enumerate(raw):
        where = f"events[{index}]"
        if not isinstance(event, dict):
            raise serializers.ValidationError({where: ["expected an object"]})
        kind = event.get("type")
        if kind == "agent.session.input.message":
            actions.append(Message(text=_message_text(event, where), extra=_extra(event, where)))
        elif kind == "agent.session.input.cancel":
            _only(event, {"type"}, where)
            actions.append(Cancel())
        elif kind in APPROVAL_EVENTS:
            actions.append(_approval(event, where))
        elif kind == "agent.session.input.tool_result":
            raise serializers.ValidationError(
                {where: ["function tools are not served: agentrun's agent runs its own tools"]}
            )
        else:
            raise serializers.ValidationError({f"{where}.type": [f"unknown event type {kind!r}"]})
    return actions


APPROVAL_EVENTS = ("agent.session.input.mcp_approval_request_result",)


def _only(event: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(event) - allowed)
    if unknown:
        raise serializers.ValidationError({f"{where}.{unknown[0]}": ["unknown field"]})


def _message_text(event: dict[str, Any], where: str) -> str:
    """The turn's text: the user messages' `input_text` parts, joined by blank lines."""
    _only(event, {"type", "input", "agentrun_payload"}, where)
    messages = event.get("input")
    if not isinstance(messages, list) or not messages:
        raise serializers.ValidationError({f"{where}.input": ["a non-empty list of messages"]})
    texts = []
    for m, message in enumerate(messages):
        at = f"{where}.input[{m}]"
        if not isinstance(message, dict) or message.get("role") != "user":
            raise serializers.ValidationError({f"{at}.role": ["must be 'user'"]})
        _only(message, {"type", "role", "content"}, at)
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "input_text", "text": content}]
        if not isinstance(content, list) or not content:
            raise serializers.ValidationError({f"{at}.content": ["a non-empty list of parts"]})
        for p, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "input_text":
                raise serializers.ValidationError(
                    {f"{at}.content[{p}].type": ["only input_text is served"]}
                )
            if not isinstance(part.get("text"), str) or not part["text"]:
                raise serializers.ValidationError(
                    {f"{at}.content[{p}].text": ["a non-empty string"]}
                )
            texts.append(part["text"])
    text = "\n\n".join(texts)
    if len(text.encode()) > TEXT_MAX:
        raise serializers.ValidationError({f"{where}.input": [f"at most {TEXT_MAX} bytes"]})
    return text


def _extra(event: dict[str, Any], where: str) -> dict[str, Any]:
    """agentrun's extension on a message: more command payload keys, never `text`."""
    field = BoundedJSONObjectField(max_bytes=EXTENSION_MAX, required=False)
    extra = event.get("agentrun_payload")
    if extra is None:
        return {}
    try:
        value = field.run_validation(extra)
    except serializers.ValidationError as error:
        raise serializers.ValidationError({f"{where}.agentrun_payload": error.detail}) from error
    if not isinstance(value, dict) or "text" in value:
        raise serializers.ValidationError(
            {f"{where}.agentrun_payload": ["an object without 'text' (the message is the text)"]}
        )
    return dict(value)


def _approval(event: dict[str, Any], where: str) -> ApprovalAnswer:
    _only(event, {"type", "request_id", "response"}, where)
    request_id, response = event.get("request_id"), event.get("response")
    if not isinstance(request_id, str) or not request_id or len(request_id) > 200:
        raise serializers.ValidationError({f"{where}.request_id": ["an approval id"]})
    decision = response.get("decision") if isinstance(response, dict) else None
    if decision not in ("approve", "deny", "cancel"):
        raise serializers.ValidationError(
            {f"{where}.response.decision": ["one of approve, deny, cancel"]}
        )
    return ApprovalAnswer(request_id=request_id, decision=decision)
