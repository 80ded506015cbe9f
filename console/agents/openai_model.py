"""A model of the chain that speaks OpenAI's Chat Completions with tools (OpenAI itself, or the many hosts and
local servers that speak it: Ollama's /v1, llama.cpp's server, vLLM), through the official `openai` SDK.

The conversation stays in the Messages API's form (console/agents/provider.py) and is mapped at this edge,
both ways:
- out: the system prompt is the first message; a user turn's tool_result blocks become one `tool` message
  each (tool_call_id, the result's text, "Error: " before a failed call's), right after the assistant turn
  that called them, and its text follows as a `user` message; an assistant turn's text is its `content` and
  its tool_use blocks its `tool_calls` (id, type "function", function name and arguments as JSON text);
  tools are `{"type": "function", "function": {name, description, parameters}}`;
- back: `content` is a text block, each tool call a tool_use block (its arguments parsed; a call without an
  id, as some servers answer, gets one made from the reply's); finish_reason stop -> end_turn, tool_calls
  -> tool_use, length -> max_tokens, content_filter or a `refusal` -> refusal; usage's prompt_tokens less
  its cached_tokens are input, cached_tokens cache reads, completion_tokens output.
Errors are sorted as the Anthropic model's are: 401/403 the key; insufficient_quota or 402 the budget; 404
or model_not_found the model; 429 and 502/503/504/529 back-pressure with retry-after; a 500 or no reply in
time transient; any other 4xx the events' failure.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from typing import Any
from urllib.parse import urlsplit

import openai

from console import telemetry
from console.agents.provider import (
    ModelBusy,
    ModelError,
    ModelPaused,
    SpannedModel,
    plain_messages,
    retry_after_seconds,
    worst_case_prompt_tokens,
)
from console.agents.spending import Meter, SpendGuard
from console.modelspec import ModelSpec
from console.pricing import Usage
from console.redact import install_log_redaction, redact_url, redact_urls
from console.spendfmt import money

log = logging.getLogger("agent_console.openai")

NO_KEY = "no-key"  # what a keyless local server is sent: the SDK wants some key
BUSY_STATUSES = (429, 502, 503, 504, 529)
STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens",
                "content_filter": "refusal"}
_TOOL_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what the Messages API takes as a tool_use id
_NOT_A_MODEL = r"(?:invalid|unknown|unsupported|not (?:found|supported|available)|does not exist)"
_MODEL_REJECTED = re.compile(rf"{_NOT_A_MODEL}\W+(?:\w+\W+)?model\b|\bmodel\b[^.;]*?\b{_NOT_A_MODEL}")


class OpenAIModelError(ModelError):
    """The model's API failed or refused, or its reply could not be read."""


class OpenAIBusy(ModelBusy, OpenAIModelError):
    """Rate limited, overloaded or unreachable."""


class OpenAIPaused(ModelPaused, OpenAIModelError):
    """The API refuses the key, the model or the account."""


class OpenAIModel(SpannedModel):
    provider = "openai"

    def __init__(self, spec: ModelSpec, api_key: str | None, *, spend: SpendGuard, timeout: float) -> None:
        self.spec = spec
        self.model = spec.model
        self.spend = spend
        self.timeout = timeout
        self._api = f"model {spec.name!r}"
        self._where = redact_url(spec.address)
        self._server_address = urlsplit(spec.address).hostname
        # OpenAI's own API wants max_completion_tokens (its reasoning models refuse max_tokens); the servers
        # that copy the protocol know max_tokens.
        self._limit_field = "max_completion_tokens" if self._server_address == "api.openai.com" else "max_tokens"
        self.credential = spec.credential(api_key)
        self._configuration = hashlib.sha256(f"{spec.model}\0{spec.address}\0{api_key}".encode()).hexdigest()[:16]
        install_log_redaction()
        self._client = openai.OpenAI(api_key=api_key or NO_KEY, base_url=spec.address, max_retries=0,
                                     timeout=timeout)

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:  # the client holds the key: never let a repr show it
        return f"OpenAIModel(name={self.spec.name!r}, model={self.model!r})"

    def build_request(self, messages: list[dict[str, Any]], max_tokens: int, system: str,
                      tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The Chat Completions request for one turn."""
        request: dict[str, Any] = {"model": self.model, "messages": chat_messages(system, messages),
                                   self._limit_field: max_tokens}
        if tools:
            request["tools"] = [{"type": "function", "function": {
                "name": tool["name"], "description": tool.get("description") or "",
                "parameters": tool.get("input_schema") or {"type": "object", "properties": {}}}} for tool in tools]
        return request

    def _request_in_span(
        self, span: telemetry.Span, messages: list[dict[str, Any]], max_tokens: int, meter: Meter, *, system: str,
        tools: list[dict[str, Any]],
    ) -> dict[str, Any]:
        request = self.build_request(messages, max_tokens, system, tools)
        worst = worst_case_prompt_tokens({"messages": request["messages"], "tools": request.get("tools") or []})
        reservation = self.spend.reserve(meter, self.model, worst, max_tokens)
        try:
            reply = self._client.chat.completions.create(**request)
        except openai.APIStatusError as exc:
            self.spend.release(meter, reservation)  # the API answered with an error: nothing was billed
            raise self._classify(exc) from exc
        except openai.APITimeoutError as exc:
            raise OpenAIModelError(f"no reply from {self._where} within {self.timeout:g} s (claude_timeout)",
                                   transient=True) from exc
        except openai.APIConnectionError as exc:
            if type(exc.__cause__).__name__ in ("ConnectError", "ConnectTimeout"):
                self.spend.release(meter, reservation)  # it never left this machine
            raise OpenAIBusy(redact_urls(f"could not reach {self._where}: {exc}")) from exc
        # A server that leaves usage out is paid for at the worst case reserved, never at nothing.
        billed = _usage(reply.usage) if reply.usage is not None else Usage(worst, max_tokens)
        if not reply.choices:
            self.spend.settle(meter, reservation, reply.model, billed)
            raise OpenAIModelError(f"{self._api} answered with no choice", transient=True)
        choice = reply.choices[0]
        content = reply_blocks(choice.message, reply.id)
        refusal = getattr(choice.message, "refusal", None)
        stop = "refusal" if refusal else STOP_REASONS.get(str(choice.finish_reason), str(choice.finish_reason))
        if stop == "end_turn" and any(block["type"] == "tool_use" for block in content):
            stop = "tool_use"  # some servers say "stop" after tool calls
        cost = self.spend.settle(meter, reservation, reply.model, billed)
        telemetry.chat_reply(span, response_id=reply.id, model=reply.model, finish_reason=choice.finish_reason,
                             input_tokens=billed.input_tokens, output_tokens=billed.output_tokens,
                             cache_read_tokens=billed.cache_read_tokens, cache_creation_tokens=0,
                             cost_usd=None if cost is None else cost / 1e9, request_model=self.model,
                             provider=self.provider)
        log.info("model turn: %s, finish %s, %s in (%s cache read) / %s out tokens, %s", reply.model,
                 choice.finish_reason, billed.input_tokens, billed.cache_read_tokens, billed.output_tokens,
                 money(cost, unknown="cost unknown"))
        return {"id": reply.id, "model": reply.model or self.model, "stop_reason": stop, "content": content,
                "usage": {"input_tokens": billed.input_tokens, "output_tokens": billed.output_tokens,
                          "cache_creation_input_tokens": 0, "cache_read_input_tokens": billed.cache_read_tokens},
                "stop_details": {"category": "refusal", "explanation": refusal} if refusal else (
                    {"category": "content_filter", "explanation": None} if stop == "refusal" else None)}

    def _classify(self, exc: openai.APIStatusError) -> OpenAIModelError:
        body: dict[str, Any] = exc.body if isinstance(exc.body, dict) else {}
        inner = body.get("error")
        error: dict[str, Any] = inner if isinstance(inner, dict) else body
        detail = str(error.get("message") or error.get("type") or error.get("code") or "no details")
        code, kind = str(error.get("code") or ""), str(error.get("type") or "")
        status = exc.status_code
        key_setting = self.spec.api_key_env or f"the key of [[models]] {self.spec.name!r}"
        model_setting = f"the model of [[models]] {self.spec.name!r}"
        pause: str | None = None
        if status in (401, 403):
            pause, reason = "key", f"{self._api} refused the key ({status}: {detail}); check {key_setting}"
        elif status == 402 or "insufficient_quota" in (code, kind) or "billing" in code:
            pause, reason = "budget", f"{self._api} refused for lack of budget ({status}: {detail})"
        elif status == 404 or code == "model_not_found" or (status == 400 and _MODEL_REJECTED.search(detail.lower())):
            pause, reason = "model", f"{self._api} rejected the model ({status}: {detail}); check {model_setting}"
        elif status == 429:
            reason = f"{self._api} is rate limiting ({status}: {detail})"
        elif status in BUSY_STATUSES:
            reason = f"{self._api} is overloaded ({status}: {detail})"
        elif status >= 500:
            reason = f"{self._api} failed ({status}: {detail})"
        else:
            reason = f"{self._api} rejected the request ({status}: {detail})"
        reason = redact_urls(reason)
        if pause is not None:
            return OpenAIPaused(reason, notice_key=f"{self._configuration}:{pause}", kind=pause)
        if status in BUSY_STATUSES:
            return OpenAIBusy(reason, retry_after=retry_after_seconds(exc.response.headers))
        return OpenAIModelError(reason, transient=status >= 500)


def chat_messages(system: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A conversation in the Messages API's form as Chat Completions messages (see the module's doc)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for message in plain_messages(messages):
        content = message["content"]
        if isinstance(content, str):
            out.append({"role": message["role"], "content": content})
            continue
        if message["role"] == "assistant":
            text = "".join(block["text"] for block in content if block["type"] == "text")
            calls = [{"id": block["id"], "type": "function",
                      "function": {"name": block["name"], "arguments": json.dumps(block["input"], ensure_ascii=False)}}
                     for block in content if block["type"] == "tool_use"]
            turn: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                turn["tool_calls"] = calls
            out.append(turn)
            continue
        for block in content:
            if block["type"] == "tool_result":
                text = str(block["content"])
                out.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                            "content": f"Error: {text}" if block.get("is_error") else text})
        text = "\n\n".join(block["text"] for block in content if block["type"] == "text")
        if text:
            out.append({"role": "user", "content": text})
    return out


def reply_blocks(message: Any, reply_id: str) -> list[dict[str, Any]]:
    """A Chat Completions reply message as Messages API blocks: its text, then its tool calls."""
    blocks: list[dict[str, Any]] = []
    text = getattr(message, "content", None)
    if isinstance(text, str) and text:
        blocks.append({"type": "text", "text": text})
    for index, call in enumerate(getattr(message, "tool_calls", None) or []):
        function = getattr(call, "function", None)
        name = str(getattr(function, "name", "") or "")
        raw = getattr(function, "arguments", None)
        if isinstance(raw, dict):
            arguments: Any = raw
        else:
            try:
                arguments = json.loads(raw or "{}")
            except ValueError:
                raise OpenAIModelError(f"the model's call to {name!r} carried arguments that are not JSON",
                                       transient=True) from None
        if not isinstance(arguments, dict):
            raise OpenAIModelError(f"the model's call to {name!r} carried arguments that are not an object",
                                   transient=True)
        use_id = str(getattr(call, "id", "") or "")
        if not _TOOL_ID.match(use_id):  # missing, or a character another protocol refuses
            use_id = "call_" + hashlib.sha256(f"{reply_id}:{index}:{use_id}".encode()).hexdigest()[:24]
        blocks.append({"type": "tool_use", "id": use_id, "name": name, "input": arguments})
    return blocks


def _usage(usage: Any) -> Usage:
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    return Usage(max(0, prompt - cached), int(getattr(usage, "completion_tokens", 0) or 0), 0, cached)

