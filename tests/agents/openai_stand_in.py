"""The stand-in Chat Completions API: a real HTTP server on 127.0.0.1 that plays POST /v1/chat/completions from a
script, written from OpenAI's published API reference (function calling guide, chat object, error codes).

Requests are checked as the API checks them, and refused with its 400 and words when they break its rules: a
`tool` message must answer a tool call of the assistant message before it (only tool messages between), an
assistant message with `tool_calls` must be followed by a tool message for each of its ids, a tool call's
function arguments are a JSON string, a tool is {"type": "function", "function": {"name", ...}}, and a message
carries only the fields its role has (a thinking block or a cache marker from another protocol is refused).
Replies are `chat.completion` objects: choices[0].message (content, tool_calls with id, type "function",
function name and arguments as JSON text, refusal), finish_reason (stop, tool_calls, length, content_filter)
and usage (prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details.cached_tokens). Errors are
{"error": {"message", "type", "param", "code"}} with their status and, for a rate limit, retry-after.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web

from tests.agents.stand_in import serve_routes

ROLE_FIELDS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "refusal", "audio"},
    "tool": {"role", "content", "tool_call_id"},
}


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    """A tool call as the API returns it."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


class InvalidRequest(ValueError):
    pass


def check_request(body: dict[str, Any]) -> None:
    """Raise InvalidRequest with the API's words for a request it refuses."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array")
    if not isinstance(body.get("model"), str):
        raise InvalidRequest("you must provide a model parameter")
    for tool in body.get("tools") or []:
        if tool.get("type") != "function" or not isinstance(tool.get("function"), dict) or not isinstance(
                tool["function"].get("name"), str):
            raise InvalidRequest("Invalid 'tools': each tool must be {'type': 'function', 'function': {'name': ...}}")
    waiting: list[str] = []  # tool_call_ids of the last assistant message not yet answered
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in ROLE_FIELDS:
            raise InvalidRequest(f"Invalid value for 'messages[{index}].role': {role!r}")
        extra = set(message) - ROLE_FIELDS[role]
        if extra:
            raise InvalidRequest(f"Unrecognized request argument supplied: messages[{index}].{sorted(extra)[0]}")
        if role == "tool":
            if message.get("tool_call_id") not in waiting:
                raise InvalidRequest("Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                                     "message with 'tool_calls'.")
            waiting.remove(message["tool_call_id"])
            if not isinstance(message.get("content"), str | list):
                raise InvalidRequest(f"Invalid type for 'messages[{index}].content'")
            continue
        if waiting:
            raise InvalidRequest("An assistant message with 'tool_calls' must be followed by tool messages responding "
                                 f"to each 'tool_call_id'. The following tool_call_ids did not have response "
                                 f"messages: {', '.join(waiting)}")
        content = message.get("content")
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if content is None and not calls:
                raise InvalidRequest(f"Invalid value for 'messages[{index}].content': expected a string, got null.")
            for tool_call in calls:
                function = tool_call.get("function") or {}
                if tool_call.get("type") != "function" or not isinstance(tool_call.get("id"), str) or not isinstance(
                        function.get("arguments"), str) or not isinstance(function.get("name"), str):
                    raise InvalidRequest(f"Invalid 'messages[{index}].tool_calls': each needs id, type 'function' "
                                         "and function name and arguments (a JSON string)")
            waiting = [tool_call["id"] for tool_call in calls]
        elif isinstance(content, list):
            for part in content:
                if part.get("type") != "text" or set(part) - {"type", "text"}:
                    raise InvalidRequest(f"Invalid content part in 'messages[{index}].content'")
        elif not isinstance(content, str):
            raise InvalidRequest(f"Invalid type for 'messages[{index}].content': expected a string")
    if waiting:
        raise InvalidRequest("An assistant message with 'tool_calls' must be followed by tool messages responding to "
                             f"each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                             f"{', '.join(waiting)}")


class FakeOpenAI:
    """Enough of POST /v1/chat/completions: the scripted replies in order, and every request recorded."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict[str, Any], dict[str, str]]] = []
        self.requests: list[dict[str, Any]] = []
        self.keys: list[str] = []
        self.refused: list[str] = []  # the 400s it gave for requests it found invalid
        self.url = ""
        self.on_request: Callable[[dict[str, Any]], None] | None = None  # called (in a thread) as each one arrives
        self.responder: Callable[[dict[str, Any]], tuple[int, dict[str, Any], dict[str, str]]] | None = None

    def reply(self, content: str | None = None, *calls: dict[str, Any], finish: str | None = None,
              refusal: str | None = None, model: str | None = None, cached_tokens: int = 0) -> None:
        self.script.append((200, self.completion(content, *calls, finish=finish, refusal=refusal, model=model,
                                                 cached_tokens=cached_tokens), {}))

    def completion(self, content: str | None = None, *calls: dict[str, Any], finish: str | None = None,
                   refusal: str | None = None, model: str | None = None, cached_tokens: int = 0) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
        if calls:
            message["tool_calls"] = list(calls)
        n = len(self.requests) + len(self.script) + 1
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 1_790_000_000, "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": finish or ("tool_calls" if calls else "stop")}],
                "usage": {"cached_tokens": cached_tokens}}

    def fail(self, status: int, message: str, *, kind: str = "invalid_request_error", code: str | None = None,
             headers: dict[str, str] | None = None) -> None:
        self.script.append((status, error_body(message, kind, code), headers or {}))

    async def handle(self, request: web.Request) -> web.Response:
        sent = await request.json()
        self.requests.append(sent)
        self.keys.append(request.headers.get("authorization", "").removeprefix("Bearer "))
        if self.on_request is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.on_request, sent)
        try:
            check_request(sent)
        except InvalidRequest as exc:
            self.refused.append(str(exc))
            return web.json_response(error_body(str(exc), "invalid_request_error", None), status=400)
        if not self.script and self.responder is not None:
            self.script.append(self.responder(sent))
        if not self.script:
            return web.json_response(error_body("unscripted", "server_error", None), status=500)
        status, body, headers = self.script.pop(0)
        if status == 200:
            body = self._billed(sent, body)
        return web.json_response(body, status=status, headers=headers)

    def _billed(self, sent: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        prompt = math.ceil(len(json.dumps(sent["messages"]).encode()) / 4)
        cached = int(body["usage"].get("cached_tokens") or 0)
        message = body["choices"][0]["message"]
        completion = 10 + math.ceil(len(json.dumps(message).encode()) / 4)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                 "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0}}
        return {**body, "model": body["model"] or sent["model"], "usage": usage}


def error_body(message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


@contextmanager
def serve_openai() -> Iterator[FakeOpenAI]:
    """The fake Chat Completions API on 127.0.0.1 (stand_in.serve_routes); its url is the /v1 base."""
    fake = FakeOpenAI()
    with serve_routes({"/v1/chat/completions": fake.handle}) as url:
        fake.url = f"{url}/v1"
        yield fake
