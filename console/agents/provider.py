"""What every model of the chain is to the agent: one turn asked in the Messages API's own terms, and its
failures sorted the same way whatever protocol the model speaks.

The conversation is kept in one form, the Messages API's (text, tool_use and tool_result blocks), and so is
each reply the journal stores (id, model, stop_reason, content, usage, stop_details). A model that speaks
another protocol (console/agents/openai_model.py) maps both ways at its own edge, so a conversation can go
on with another model at a turn boundary, and what one provider's turn carries that another could not
read (thinking blocks and their signatures, cache markers) never enters it.

A failure is one of four, and the chain (console/agents/chain.py) decides from that alone:
- ModelBusy: back-pressure (rate limited, overloaded, unreachable): the same model again after its
  retry-after, or the next model once it has kept failing past failover_after;
- ModelPaused: the provider refuses this model's configuration (kind "key": the key; "model": the model id
  is unknown or retired; "budget": its account's quota or credit is spent): the next model;
- ModelError with transient=True (a server error, no reply in time): the next model when there is one;
- any other ModelError: the events' failure (a request the API calls invalid), as a one-model agent had it.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Mapping
from typing import Any, Protocol

from console import telemetry
from console.agents.errors import AgentPaused, ProviderBusy
from console.agents.spending import Meter
from console.modelspec import ModelSpec

# The stop reasons a committed turn may carry; any other fails the run with its name, never guessed at.
# max_tokens is not among them: a cut-off reply is asked again, never used.
HANDLED_STOP_REASONS = ("end_turn", "tool_use", "stop_sequence", "pause_turn", "refusal")
# The system prompt a provider adds when tools are offered (a few hundred tokens on current models), counted
# in a call's worst case on top of the request's own bytes.
TOOL_USE_PROMPT_TOKENS = 1_000


class ModelError(RuntimeError):
    """A model turn failed: the run fails and is retried, unless the chain can ask another model.

    transient: the model's own trouble this time (a server error, no reply in time), not the request's."""

    transient = False

    def __init__(self, reason: str, *, transient: bool = False) -> None:
        super().__init__(reason)
        self.transient = transient


class ModelBusy(ProviderBusy, ModelError):
    """Rate limited, overloaded or unreachable: this model again after retry_after, or the next one."""


class ModelPaused(AgentPaused, ModelError):
    """The provider refuses this model's configuration; kind says what: "key", "model" or "budget"."""

    def __init__(self, reason: str, *, notice_key: str, kind: str) -> None:
        super().__init__(reason, notice_key=notice_key)
        self.kind = kind


class Model(Protocol):
    """One model of the chain, with its own client and credential."""

    spec: ModelSpec
    credential: str  # its name, address and key as a fingerprint: what a cooldown is kept under
    provider: str    # gen_ai.provider.name: "anthropic", "openai"

    def request(self, messages: list[dict[str, Any]], max_tokens: int, meter: Meter, *, system: str,
                tools: list[dict[str, Any]]) -> dict[str, Any]:
        """One request, reserved against the budgets before it is made and settled after; the reply in the
        Messages API's form. Raises ModelError (and its kinds above) when there is no reply to use."""
        ...

    def close(self) -> None:
        ...


class SpannedModel:
    """What the models share: request() is the model's _request_in_span in its `chat {model}` span, which names
    the provider and the model asked; the content goes on it only on the telemetry's content opt-in."""

    provider: str
    model: str
    _server_address: str | None

    def request(self, messages: list[dict[str, Any]], max_tokens: int, meter: Meter, *, system: str,
                tools: list[dict[str, Any]]) -> dict[str, Any]:
        with telemetry.chat_span(self.model, conversation=meter.step_key.rsplit(":turn:", 1)[0],
                                 max_tokens=max_tokens, server=self._server_address, provider=self.provider) as span:
            if telemetry.capture_content():
                span.content("gen_ai.input.messages", messages)
                span.content("gen_ai.system_instructions", system)
            reply = self._request_in_span(span, messages, max_tokens, meter, system=system, tools=tools)
            span.content("gen_ai.output.messages", reply["content"])
            return reply

    def _request_in_span(self, span: telemetry.Span, messages: list[dict[str, Any]], max_tokens: int, meter: Meter,
                         *, system: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError


def retry_after_seconds(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The provider's retry-after: retry-after-ms, or retry-after in seconds or as an HTTP date. None when
    absent or unreadable (the caller then picks its own wait)."""
    lowered = {name.lower(): value for name, value in headers.items()}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = lowered.get(name, "").strip()
        if not value:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            if name == "retry-after-ms":
                continue
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                continue
            seconds = when.timestamp() - (time.time() if now is None else now)
        if seconds == seconds and seconds != float("inf"):  # not NaN, not infinite
            return max(0.0, seconds)
    return None


def worst_case_prompt_tokens(parts: Mapping[str, Any]) -> int:
    """The most prompt tokens a request can be billed for: a token a byte of its parts as JSON (no token is
    shorter than a byte, and JSON only adds bytes), plus the provider's own tool-use prompt. A prompt of CJK,
    emoji or base64 can be a token every byte or two, so this is a bound for money, not an estimate."""
    prompt = json.dumps(dict(parts), ensure_ascii=False)
    return len(prompt.encode("utf-8", "surrogatepass")) + TOOL_USE_PROMPT_TOKENS


def plain_blocks(content: Any) -> list[dict[str, Any]]:
    """A turn's content as the blocks every protocol can carry (text, tool_use, tool_result), each with only
    the fields the Messages API defines for it: thinking blocks, their signatures and cache markers go."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks: list[dict[str, Any]] = []
    for block in content or []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            blocks.append({"type": "text", "text": str(block.get("text") or "")})
        elif kind == "tool_use":
            blocks.append({"type": "tool_use", "id": str(block["id"]), "name": str(block["name"]),
                           "input": block.get("input") if isinstance(block.get("input"), dict) else {}})
        elif kind == "tool_result":
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": str(block["tool_use_id"]),
                                      "content": _result_text(block.get("content"))}
            if block.get("is_error"):
                result["is_error"] = True
            blocks.append(result)
    return blocks


def plain_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A conversation as any model of the chain may read it (plain_blocks on each turn)."""
    return [{"role": message["role"], "content": message["content"] if isinstance(message["content"], str)
             else plain_blocks(message["content"])} for message in messages]


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)
