"""A model of the chain that speaks the Anthropic Messages API (Claude, or a local server that speaks it:
Ollama from 0.14, llama.cpp's server), through the official `anthropic` SDK.

API errors raise, sorted (console/agents/provider.py): back-pressure (rate limits, overload, no connection)
raises ClaudeBusy with the API's retry-after; a configuration the API refuses (the key, the model, the
account's credit) raises ClaudePaused; a 500 or no reply within the timeout is a transient ClaudeError (the
chain may ask another model; a chain of one fails the run, which the engine retries with backoff); anything
else (a request the API calls invalid) is the events' failure. The client does not retry on its own
(max_retries=0), so there is one retry policy and it is visible in the console. The key lives only in the
client; it is never logged, journalled or saved.

Requests carry prompt-cache breakpoints (with_cache_breakpoints), so each turn of a conversation reads the
one before it from the cache instead of paying for it again. Every request is reserved against the budgets
before it is made (its worst case: a token a byte of the prompt, or near the limit the API's count of it)
and settled after at the model's price.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import urlsplit

import anthropic
from anthropic.types import MessageParam, TextBlock, ToolParam, ToolUseBlock

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
from console.modelspec import LEGACY_KEY_ENV, LEGACY_NAME, ModelSpec
from console.pricing import Usage
from console.redact import install_log_redaction, redact_url, redact_urls
from console.spendfmt import money

log = logging.getLogger("agent_console.claude")

CACHE_BREAKPOINT: dict[str, str] = {"type": "ephemeral"}
NO_KEY = "no-key"  # what a keyless local server is sent: the SDK wants some key


class ClaudeError(ModelError):
    """The Claude API failed or refused, or the model did not finish: the run fails and is retried."""


class ClaudeBusy(ModelBusy, ClaudeError):
    """Rate limited, overloaded or unreachable: the agent waits, and the events keep their attempts."""


class ClaudePaused(ModelPaused, ClaudeError):
    """The API refuses the key, the model or the account: the agent pauses until the engine restarts."""


class AnthropicModel(SpannedModel):
    provider = "anthropic"

    def __init__(self, spec: ModelSpec, api_key: str | None, *, spend: SpendGuard, timeout: float,
                 prompt_cache: bool = True) -> None:
        self.spec = spec
        self.model = spec.model
        self.spend = spend
        self.timeout = timeout
        self.prompt_cache = prompt_cache
        base_url = spec.base_url
        legacy = spec.name == LEGACY_NAME and spec.api_key_env == LEGACY_KEY_ENV
        # How errors name it and the setting to check: a chain of one keeps the claude_* settings' words.
        self._api = "the Claude API" if legacy else f"model {spec.name!r}"
        self._model_setting = "claude_model" if legacy else f"the model of [[models]] {spec.name!r}"
        self._key_setting = spec.api_key_env or f"the key of [[models]] {spec.name!r}"
        self._where = redact_url(base_url) if base_url else "the Claude API"
        self._server_address = urlsplit(base_url).hostname if base_url else "api.anthropic.com"
        self.credential = spec.credential(api_key)
        # Names this configuration without holding on to the key: a pause is announced once per
        # configuration, and a changed key, model or address that fails again is news.
        self._configuration = hashlib.sha256(f"{spec.model}\0{base_url}\0{api_key}".encode()).hexdigest()[:16]
        install_log_redaction()  # the client's libraries log each request's URL, credentials and all
        self._client = anthropic.Anthropic(api_key=api_key or NO_KEY, base_url=base_url, max_retries=0,
                                           timeout=timeout)

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:  # the client holds the key: never let a repr show it
        return f"AnthropicModel(name={self.spec.name!r}, model={self.model!r})"

    def _build_request(
        self, messages: list[dict[str, Any]], max_tokens: int, system: str, tools: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """The Messages API request for one turn; with prompt caching, its cache breakpoints."""
        plain = plain_messages(messages)
        parts: tuple[Any, Any, list[dict[str, Any]]] = (system, tools, plain)
        if self.prompt_cache:
            parts = with_cache_breakpoints(system, tools, plain)
        cached_system, cached_tools, sent = parts
        return {"model": self.model, "max_tokens": max_tokens, "system": cached_system, "tools": cached_tools,
                "messages": sent}

    def _request_in_span(
        self, span: telemetry.Span, messages: list[dict[str, Any]], max_tokens: int, meter: Meter, *, system: str,
        tools: list[dict[str, Any]],
    ) -> dict[str, Any]:
        request = self._build_request(messages, max_tokens, system, tools)
        reservation = self.spend.reserve(meter, self.model, worst_case_request_tokens(request), max_tokens,
                                         count_tokens=functools.partial(self._count_tokens, request))
        try:
            reply = self._client.messages.create(
                model=self.model, max_tokens=max_tokens, system=request["system"],
                tools=cast("list[ToolParam]", request["tools"]),
                messages=cast("list[MessageParam]", request["messages"]),
            )
        except anthropic.APIStatusError as exc:
            self.spend.release(meter, reservation)  # the API answered with an error: nothing was billed
            raise self._classify(exc) from exc
        except anthropic.APITimeoutError as exc:
            # The model's trouble this time, not back-pressure: a request that always takes too long (a huge
            # conversation) would otherwise hold the whole agent in a wait for ever. The API may have
            # billed a request it got: its worst case stays counted, unless it never left this machine.
            if _never_sent(exc):
                self.spend.release(meter, reservation)
            raise ClaudeError(f"no reply from {self._where} within {self.timeout:g} s (claude_timeout)",
                              transient=True) from exc
        except anthropic.APIConnectionError as exc:
            if _never_sent(exc):
                self.spend.release(meter, reservation)
            raise ClaudeBusy(redact_urls(f"could not reach {self._where}: {exc}")) from exc
        content: list[dict[str, Any]] = []
        for block in reply.content:
            if isinstance(block, TextBlock):
                content.append({"type": "text", "text": block.text})
            elif isinstance(block, ToolUseBlock):
                content.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.input})
        billed = Usage(reply.usage.input_tokens, reply.usage.output_tokens,
                       reply.usage.cache_creation_input_tokens or 0, reply.usage.cache_read_input_tokens or 0)
        cost = self.spend.settle(meter, reservation, reply.model, billed)
        telemetry.chat_reply(span, response_id=reply.id, model=reply.model, finish_reason=reply.stop_reason,
                             input_tokens=billed.input_tokens, output_tokens=billed.output_tokens,
                             cache_read_tokens=billed.cache_read_tokens,
                             cache_creation_tokens=billed.cache_write_tokens,
                             cost_usd=None if cost is None else cost / 1e9, request_model=self.model,
                             provider=self.provider)
        usage = {"input_tokens": billed.input_tokens, "output_tokens": billed.output_tokens,
                 "cache_creation_input_tokens": billed.cache_write_tokens,
                 "cache_read_input_tokens": billed.cache_read_tokens}
        log.info("model turn: %s, stop %s, %s in (%s cache write, %s cache read) / %s out tokens, %s",
                 reply.model, reply.stop_reason, billed.input_tokens, billed.cache_write_tokens,
                 billed.cache_read_tokens, billed.output_tokens, money(cost, unknown="cost unknown"))
        details = reply.stop_details
        return {"id": reply.id, "model": reply.model, "stop_reason": reply.stop_reason, "content": content,
                "usage": usage, "stop_details": None if details is None else {
                    "category": getattr(details, "category", None),
                    "explanation": getattr(details, "explanation", None)}}

    def _count_tokens(self, request: Mapping[str, Any]) -> int | None:
        """The prompt's tokens as the API counts them (POST /v1/messages/count_tokens: free, rate limited), or
        None when it cannot tell (a proxy without the endpoint, an error): the bound then stands."""
        try:
            counted = self._client.messages.count_tokens(
                model=self.model, system=request["system"], tools=cast("list[ToolParam]", request["tools"]),
                messages=cast("list[MessageParam]", request["messages"]))
        except anthropic.APIError as exc:
            log.info("could not count the prompt's tokens (%s); its worst case stays at a token a byte",
                     redact_urls(str(exc)))
            return None
        return int(counted.input_tokens)

    def _classify(self, exc: anthropic.APIStatusError) -> ClaudeError:
        """Which failures are the events' (counted, retried), the provider's back-pressure (the agent
        waits) or the configuration's (the agent pauses): only the first may spend attempts."""
        reason = redact_urls(self._describe(exc))
        status, kind = exc.status_code, _error_field(exc, "type")
        message = _error_field(exc, "message").lower()
        pause = _pause_kind(status, kind, message, exc.error_code)
        if pause is not None:
            if pause == "budget":
                reason = f"{self._api} refused for lack of budget ({status}: {_error_detail(exc)})"
            elif pause == "model" and status == 400:
                reason = f"{self._api} rejected the model ({status}: {_error_detail(exc)}); check {self._model_setting}"
            return ClaudePaused(redact_urls(reason), notice_key=f"{self._configuration}:{pause}", kind=pause)
        if status in BUSY_STATUSES or kind in ("rate_limit_error", "overloaded_error"):
            return ClaudeBusy(reason, retry_after=retry_after_seconds(exc.response.headers))
        return ClaudeError(reason, transient=status >= 500)

    def _describe(self, exc: anthropic.APIStatusError) -> str:
        detail = _error_detail(exc)
        status = exc.status_code
        if status in (401, 403):
            return f"{self._api} refused the key ({status}: {detail}); check {self._key_setting}"
        if status == 429:
            return f"{self._api} is rate limiting ({status}: {detail})"
        if status in BUSY_STATUSES or _error_field(exc, "type") == "overloaded_error":
            return f"{self._api} is overloaded ({status}: {detail})"
        if status >= 500:
            return f"{self._api} failed ({status}: {detail})"
        hint = f"; check {self._model_setting}" if status == 404 else ""
        return f"{self._api} rejected the request ({status}: {detail}){hint}"


# Back-pressure: 429 rate limited, 529 overloaded, and the gateway's 502/503/504. A 500 is the API's own
# error on this request: transient (another model may answer), else the events' failure.
BUSY_STATUSES = (429, 502, 503, 504, 529)


def _pause_kind(status: int, kind: str, message: str, error_code: str | None) -> str | None:
    """What about the configuration the API refuses, or None when it is not the configuration."""
    if status in (401, 403):
        return "key"
    if status == 402 or kind == "billing_error" or error_code == "enforced_spend_limit_reached" or (
            status == 400 and "usage limits" in message):
        return "budget"
    if status == 404 or (status == 400 and MODEL_REJECTED.search(message)):
        return "model"
    return None


# A 400 that says the model id itself is wrong ("invalid model name", "model ... not found"), as proxies
# answer; not one that merely mentions the model ("... output tokens for this model").
_NOT_A_MODEL = r"(?:invalid|unknown|unsupported|not (?:found|supported|available)|does not exist)"
MODEL_REJECTED = re.compile(rf"{_NOT_A_MODEL}\W+(?:\w+\W+)?model\b|\bmodel\b[^.;]*?\b{_NOT_A_MODEL}")


def worst_case_request_tokens(request: Mapping[str, Any]) -> int:
    """The most prompt tokens a request can be billed for (provider.worst_case_prompt_tokens) over its system
    prompt, tools and messages. The batch budget's estimate is for fitting a context window, not for money."""
    return worst_case_prompt_tokens({name: request[name] for name in ("system", "tools", "messages")})


def with_cache_breakpoints(
    system: str, tools: list[dict[str, Any]], messages: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The request's parts with prompt-cache breakpoints (the API caches the prefix tools, system, messages up
    to each marked block): the last tool, the system prompt, the conversation's last block (so the next
    turn reads all of this one from the cache), and the last block of the user turn before it (the previous
    request's breakpoint, found exactly however many blocks the last turn added; the API looks back only
    20 blocks from a breakpoint). Four, the most the API takes. The conversation itself is not changed:
    its journal and saved session stay as they were."""
    marked_tools: list[dict[str, Any]] = [dict(tool) for tool in tools]
    if marked_tools:
        marked_tools[-1]["cache_control"] = CACHE_BREAKPOINT
    marked_system = [{"type": "text", "text": system, "cache_control": CACHE_BREAKPOINT}]
    marked = list(messages)
    if marked:
        marked[-1] = _mark_last_block(marked[-1])
        earlier = next((n for n in range(len(marked) - 2, -1, -1) if marked[n]["role"] == "user"), None)
        if earlier is not None:
            marked[earlier] = _mark_last_block(marked[earlier])
    return marked_system, marked_tools, marked


def _mark_last_block(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": content}] if isinstance(content, str) else [dict(b) for b in content])
    if not blocks:
        return message
    blocks[-1]["cache_control"] = CACHE_BREAKPOINT
    return {**message, "content": blocks}


def _never_sent(exc: anthropic.APIConnectionError) -> bool:
    """The connection was never made (refused, no route, its own timeout): the request did not leave. Told
    by the name of the HTTP library's exception (ConnectError, ConnectTimeout in httpx and its successors),
    so that a change of library under the SDK does not break it; anything else keeps the worst case."""
    return type(exc.__cause__).__name__ in ("ConnectError", "ConnectTimeout")


def _error_field(exc: anthropic.APIStatusError, name: str) -> str:
    """error.type or error.message of the API's error body ({"type": "error", "error": {...}}), or ""."""
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    value = error.get(name) if isinstance(error, dict) else None
    return value if isinstance(value, str) else ""


def _error_detail(exc: anthropic.APIStatusError) -> str:
    return _error_field(exc, "message") or _error_field(exc, "type") or "no details"
