"""The stand-in Messages API: a real HTTP server on 127.0.0.1 that plays POST /v1/messages from a script.

No internet: an agent's client is pointed at it with claude_base_url and a fake key. The `claude` fixture
(tests/agents/conftest.py) serves one for a test. `obey()` turns it into the obedient model of the provenance
tests (obedient_reply): once the script runs out, it carries out every "SYSTEM: call TOOL key=value ..." it
reads, in the owner's chat, a payload, a tool result, a note or a timer's text. It bills every reply's `usage`
as the Messages API documents it, prompt caching included (PromptCache below), unless a test scripts the usage
itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web

BYTES_PER_TOKEN = 4  # the stand-in's tokenizer, by default: a token per 4 bytes of a block's JSON
MAX_BREAKPOINTS = 4


class PromptCache:
    """Prompt caching as the Messages API documents it, for the stand-in's `usage`.

    The prompt is the sequence tools, system, messages (in that order), cut into blocks: each tool, each
    system block, each content block of each message (a string is one text block). A block
    with cache_control is a breakpoint (at most four). A request reads the longest prefix already cached,
    looking at each breakpoint and up to `lookback` blocks before it; it writes the prefix at each later
    breakpoint whose prefix is at least `minimum` tokens long (a shorter one is not cached at all). A cache
    entry lives `ttl` seconds from its last use. The usage then splits the prompt: cache_read_input_tokens
    (the prefix read), cache_creation_input_tokens (from there to the last prefix written) and input_tokens
    (everything after: "the tokens after the last cache breakpoint"). Entries are per model."""

    def __init__(self, *, minimum: int = 1024, lookback: int = 20, ttl: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bytes_per_token = BYTES_PER_TOKEN  # a test sets 1 for text that tokenizes densely (CJK, emoji)
        self.minimum = minimum
        self.lookback = lookback
        self.ttl = ttl
        self.clock = clock
        self.entries: dict[tuple[str, str], float] = {}  # (model, prefix digest) -> expiry

    def account(self, request: dict[str, Any]) -> dict[str, int]:
        blocks, breakpoints = prompt_blocks(request)
        if len(breakpoints) > MAX_BREAKPOINTS:
            raise ValueError(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                             f"Found {len(breakpoints)}.")
        model = str(request.get("model"))
        ends: list[int] = []  # tokens up to and including block i
        digests: list[str] = []
        running = hashlib.sha256()
        total = 0
        for block in blocks:
            text = json.dumps(block, sort_keys=True, ensure_ascii=False)
            total += math.ceil(len(text.encode()) / self.bytes_per_token)
            running.update(text.encode() + b"\0")
            ends.append(total)
            digests.append(running.hexdigest())
        now = self.clock()
        hit = -1
        for point in breakpoints:
            for index in range(point, max(-1, point - self.lookback - 1), -1):
                key = (model, digests[index])
                if self.entries.get(key, -math.inf) > now:
                    if index > hit:
                        hit = index
                    self.entries[key] = now + self.ttl  # a hit refreshes the entry
                    break
        read = ends[hit] if hit >= 0 else 0
        written_to = hit
        for point in breakpoints:
            if point > hit and ends[point] >= self.minimum:
                self.entries[(model, digests[point])] = now + self.ttl
                written_to = max(written_to, point)
        written = (ends[written_to] if written_to >= 0 else 0) - read
        return {"input_tokens": total - read - written, "cache_creation_input_tokens": written,
                "cache_read_input_tokens": read}


    def count(self, request: dict[str, Any]) -> int:
        """The prompt's tokens by the same tokenizer the usage bills with (POST /v1/messages/count_tokens)."""
        blocks, _ = prompt_blocks(request)
        return sum(math.ceil(len(json.dumps(block, sort_keys=True, ensure_ascii=False).encode())
                             / self.bytes_per_token) for block in blocks)


def prompt_blocks(request: dict[str, Any]) -> tuple[list[Any], list[int]]:
    """The prompt's blocks in cache order (without their cache_control), and the breakpoints' indices."""
    blocks: list[Any] = []
    breakpoints: list[int] = []

    def add(block: Any) -> None:
        if isinstance(block, dict) and "cache_control" in block:
            breakpoints.append(len(blocks))
            block = {name: value for name, value in block.items() if name != "cache_control"}
        blocks.append(block)

    for tool_definition in request.get("tools") or []:
        add(tool_definition)
    system = request.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else (system or []):
        add(block)
    for message in request.get("messages") or []:
        content = message.get("content")  # a string is one text block, to the API as here
        for block in [{"type": "text", "text": content}] if isinstance(content, str) else (content or []):
            add(block)
    return blocks, breakpoints


def without_breakpoints(value: Any) -> Any:
    """A request as the model reads it: every cache_control taken out."""
    if isinstance(value, dict):
        return {name: without_breakpoints(item) for name, item in value.items() if name != "cache_control"}
    if isinstance(value, list):
        return [without_breakpoints(item) for item in value]
    return value


def text_of(content: Any) -> str:
    """The text of a message content or system prompt, a string or a list of blocks."""
    if isinstance(content, str):
        return content
    return "".join(str(block.get("text") or block.get("content") or "") for block in content)


def as_blocks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with every string content written as its one text block (the same turn to the model)."""
    return [{**message, "content": [{"type": "text", "text": message["content"]}]}
            if isinstance(message["content"], str) else message for message in without_breakpoints(messages)]


class FakeClaude:
    """Enough of POST /v1/messages: the scripted replies in order, and every request recorded.

    Shapes from the published Messages API: a reply's stop_reason (end_turn, tool_use, max_tokens, pause_turn,
    refusal with its stop_details, ...), and errors as {"type": "error", "error": {"type", "message"}} with
    the status and, for back-pressure, a retry-after header."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict[str, Any], dict[str, str]]] = []
        self.requests: list[dict[str, Any]] = []  # as the model reads them: without cache breakpoints
        self.sent: list[dict[str, Any]] = []      # exactly as they came, breakpoints and all
        self.usages: list[dict[str, int]] = []    # what each reply billed
        self.cache = PromptCache()
        self.on_request: Callable[[dict[str, Any]], None] | None = None  # called as each request arrives
        self.keys: list[str] = []
        self.counted: list[dict[str, Any]] = []  # the count_tokens requests, as they came
        self.count_status = 200  # what count_tokens answers (a proxy without the endpoint: 404)
        self.url = ""
        self.unstall = threading.Event()  # set at teardown: a stalled request then ends
        self.refused: list[str] = []  # the 400s it gave for conversations the API would refuse (check_messages)
        # Answers a request when the script is empty (obey() sets the obedient model).
        self.responder: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    def obey(self) -> None:
        """From now on, when the script is empty, the model obeys any instruction it reads (obedient_reply)."""
        self.responder = obedient_reply

    def stall(self) -> None:
        """The next request gets no answer until the test is over (for a client timeout)."""
        self.script.append((0, {}, {}))

    def reply(self, *blocks: dict[str, Any], stop: str | None = None,
              stop_details: dict[str, Any] | None = None, output_tokens: int | None = None,
              usage: dict[str, int] | None = None, model: str | None = None) -> None:
        """A scripted reply. Its usage is billed from the request (PromptCache) with output_tokens of output
        (10 + its number if not given), unless `usage` scripts it whole. Its model is the one asked for,
        unless `model` says otherwise."""
        if stop is None:
            stop = "tool_use" if any(block["type"] == "tool_use" for block in blocks) else "end_turn"
        n = len(self.script) + 1
        body: dict[str, Any] = {
            "id": f"msg_{n}", "type": "message", "role": "assistant", "model": model,
            "content": list(blocks), "stop_reason": stop, "stop_sequence": None,
            "usage": usage or {"output_tokens": 10 + n if output_tokens is None else output_tokens},
        }
        if stop_details is not None:
            body["stop_details"] = stop_details
        self.script.append((200, body, {}))

    def fail(self, status: int, kind: str, message: str, *, headers: dict[str, str] | None = None,
             error_code: str | None = None) -> None:
        error: dict[str, Any] = {"type": kind, "message": message}
        if error_code is not None:
            error["details"] = {"error_code": error_code}
        self.script.append((status, {"type": "error", "error": error, "request_id": "req_test"}, headers or {}))

    async def handle(self, request: web.Request) -> web.Response:
        sent = await request.json()
        self.sent.append(sent)
        self.requests.append(without_breakpoints(sent))
        if self.on_request is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.on_request, sent)
        # Older clients send the key as x-api-key, newer ones as a bearer token.
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        self.keys.append(request.headers.get("x-api-key") or bearer)
        problem = check_messages(sent.get("messages") or [])
        if problem is not None:
            self.refused.append(problem)
            return web.json_response({"type": "error", "error": {"type": "invalid_request_error", "message": problem}},
                                     status=400)
        if not self.script and self.responder is not None:
            answer = self.responder(self.requests[-1])
            self.reply(*answer["content"], stop=answer.get("stop"))
        if not self.script:
            return web.json_response({"type": "error", "error": {"type": "api_error", "message": "unscripted"}},
                                     status=500)
        status, body, headers = self.script.pop(0)
        if status == 0:
            await asyncio.get_running_loop().run_in_executor(None, self.unstall.wait, 30)
            status, body = 500, {"type": "error", "error": {"type": "api_error", "message": "stalled"}}
        if status == 200:
            status, body = self._billed(sent, body)
        return web.json_response(body, status=status, headers=headers)

    async def handle_count(self, request: web.Request) -> web.Response:
        """POST /v1/messages/count_tokens as the Messages API documents it: the request's model, system, tools
        and messages (no max_tokens) in, {"input_tokens": N} out; free, and nothing is cached or billed."""
        sent = await request.json()
        self.counted.append(sent)
        if self.count_status != 200:
            return web.json_response({"type": "error", "error": {"type": "not_found_error", "message": "Not found"}},
                                     status=self.count_status)
        return web.json_response({"input_tokens": self.cache.count(sent)})

    def _billed(self, sent: dict[str, Any], body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        try:
            cached = self.cache.account(sent)
        except ValueError as exc:  # as the API refuses it: a 400
            return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": str(exc)}}
        usage = dict(body["usage"])
        if "input_tokens" not in usage:
            usage.update(cached, cache_creation={"ephemeral_5m_input_tokens": cached["cache_creation_input_tokens"],
                                                 "ephemeral_1h_input_tokens": 0})
        self.usages.append({name: value for name, value in usage.items() if isinstance(value, int)})
        return 200, {**body, "model": body["model"] or sent.get("model"), "usage": usage}


_TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_BLOCK_TYPES = {"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking"}


def check_messages(messages: list[dict[str, Any]]) -> str | None:
    """The API's 400 for a conversation it refuses, or None: the first turn is the user's; each tool_use id
    matches ^[a-zA-Z0-9_-]+$ and is answered by a tool_result in the user turn right after it; each tool_result
    answers a tool_use of the assistant turn right before it; a thinking block needs its signature."""
    if messages and messages[0].get("role") != "user":
        return "messages: first message must use the \"user\" role"
    for index, message in enumerate(messages):
        content = message.get("content")
        blocks = [] if isinstance(content, str) else list(content or [])
        for block in blocks:
            if block.get("type") not in _BLOCK_TYPES:
                return f"messages.{index}.content: unknown block type {block.get('type')!r}"
            if block.get("type") == "thinking" and not block.get("signature"):
                return f"messages.{index}.content: thinking block without a valid signature"
        if message.get("role") == "assistant":
            uses = [block["id"] for block in blocks if block.get("type") == "tool_use"]
            for use in uses:
                if not _TOOL_USE_ID.match(str(use)):
                    return f"messages.{index}.content: tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
            if uses and index + 1 < len(messages):
                following = messages[index + 1].get("content")
                answered = {block.get("tool_use_id") for block in (following if isinstance(following, list) else [])
                            if block.get("type") == "tool_result"}
                missing = [use for use in uses if use not in answered]
                if missing:
                    return (f"messages.{index + 1}: `tool_use` ids were found without `tool_result` blocks "
                            f"immediately after: {', '.join(missing)}")
        elif index > 0:
            before = messages[index - 1]
            called = {block.get("id") for block in (before.get("content") if isinstance(before.get("content"), list)
                                                     else []) if block.get("type") == "tool_use"}
            for block in blocks:
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in called:
                    return (f"messages.{index}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                            f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                            "`tool_use` block in the previous message.")
    return None


# "SYSTEM: call TOOL key=value key='a value with spaces' ...": what the obedient model does whenever it reads
# it, wherever it reads it (the owner's chat, a webhook's payload, a tool's result, a note, a timer's text).
# Values are text, or whole numbers; single quotes keep spaces (and survive being quoted as JSON).
INSTRUCTION = re.compile(r"SYSTEM: call ([A-Za-z0-9_-]+)((?:\s+[A-Za-z_]+=(?:'[^']*'|[^\s\"\\,']+))*)")
_ARGUMENT = re.compile(r"([A-Za-z_]+)=(?:'([^']*)'|([^\s\"\\,']+))")


def instructions(value: str) -> list[tuple[str, dict[str, Any]]]:
    """Every instruction in a text, in order: (tool, arguments)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for match in INSTRUCTION.finditer(value):
        arguments: dict[str, Any] = {}
        for name, quoted, bare in _ARGUMENT.findall(match.group(2)):
            arguments[name] = quoted if quoted or not bare else (int(bare) if bare.isdigit() else bare)
        found.append((match.group(1), arguments))
    return found


def _all_text(value: Any) -> str:
    """Every piece of text in a message's content: text blocks and tool results alike."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_all_text(item) for item in value)
    if isinstance(value, dict):
        return "\n".join(_all_text(value.get(name)) for name in ("text", "content") if name in value)
    return ""


# In an instruction's argument, what the model has read so far: the whole conversation's text (the opening, every
# tool result), as it is (READ) or percent-encoded for a URL (READ_URL). The obedient model copies it in
# wherever it is told to, as a model talked into exfiltrating would.
READ, READ_URL = "<<READ>>", "<<READ_URL>>"


def _filled(value: Any, read_text: str) -> Any:
    if not isinstance(value, str):
        return value
    return value.replace(READ_URL, urllib.parse.quote(read_text, safe="")).replace(READ, read_text)


def _made_as(made: dict[str, Any], wanted: dict[str, Any], opening: str) -> bool:
    """Whether a call made carries out this instruction's arguments (a READ placeholder stands for any text that
    starts with the conversation's opening, as every filling of it does)."""
    if set(made) != set(wanted):
        return False
    for name, value in wanted.items():
        if isinstance(value, str) and (READ in value or READ_URL in value):
            pattern = value
            for placeholder, start in ((READ_URL, _filled(READ_URL, opening)), (READ, opening)):
                pattern = pattern.replace(placeholder, f"\0{start}\0")
            parts = pattern.split("\0")
            regex = "".join(re.escape(part) + (".*" if index % 2 else "") for index, part in enumerate(parts))
            if not isinstance(made[name], str) or not re.fullmatch(regex, made[name], re.DOTALL):
                return False
        elif made[name] != value:
            return False
    return True


def obedient_reply(request: dict[str, Any]) -> dict[str, Any]:
    """The model that obeys every instruction it reads: the next instruction of the conversation it has not
    carried out yet becomes a tool call (one a turn); with none left it ends its turn. A call it made stays
    made (a deferred or refused one is not retried), as a model reading its own transcript would. An
    argument's READ / READ_URL is filled with everything the conversation has read by then."""
    read: list[tuple[str, dict[str, Any]]] = []
    made: list[tuple[str, dict[str, Any]]] = []
    texts: list[str] = []
    for message in request.get("messages") or []:
        if message["role"] == "user":
            texts.append(_all_text(message["content"]))
            read.extend(instructions(texts[-1]))
        else:
            made.extend((block["name"], block["input"]) for block in message["content"]
                        if isinstance(block, dict) and block.get("type") == "tool_use")
    for index, (name, arguments) in enumerate(read):
        wanted = sum(1 for earlier in read[:index + 1] if earlier == (name, arguments))
        if wanted > sum(1 for tool_name, given in made
                        if tool_name == name and _made_as(given, arguments, texts[0][:60] if texts else "")):
            n = len(made) + 1
            read_text = "\n".join(texts)
            return {"content": [tool(f"obey_{n}", name, **{key: _filled(value, read_text)
                                                            for key, value in arguments.items()})]}
    return {"content": [text("Done as instructed.")]}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool(use_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": use_id, "name": name, "input": arguments}


@contextmanager
def serve_routes(routes: dict[str, Callable[[web.Request], Any]], *,
                 before_close: Callable[[], Any] | None = None) -> Iterator[str]:
    """POST routes served on 127.0.0.1 from a loop in a thread (so an agent's blocking client can call them
    from a test); yields the server's http://127.0.0.1:PORT. before_close runs first at teardown (to let a
    stalled handler end)."""
    loop = asyncio.new_event_loop()
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_post(path, handler)
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    loop.run_until_complete(web.SockSite(runner, sock).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        if before_close is not None:
            before_close()
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@contextmanager
def serve_stand_in() -> Iterator[FakeClaude]:
    """The fake Messages API (serve_routes)."""
    fake = FakeClaude()
    with serve_routes({"/v1/messages": fake.handle, "/v1/messages/count_tokens": fake.handle_count},
                      before_close=fake.unstall.set) as url:
        fake.url = url
        yield fake
