"""Stand-ins for the ntfy server and the Telegram Bot API on 127.0.0.1, written from the services' published
API documentation (docs.ntfy.sh: publish as JSON, action buttons, subscribe as a JSON stream with `since`,
sequence ids; core.telegram.org/bots/api: sendMessage, editMessageText, getUpdates, answerCallbackQuery).

Each records every request it gets and keeps what a phone would show, and can act as the phone: tap a
button of a card the way the ntfy app (an HTTP request) or a Telegram client (a callback query) does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import string
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from console.trust.callview import find_urls

_ID_CHARS = string.ascii_letters + string.digits
T = TypeVar("T")


def is_card(text: str) -> bool:
    """A card's text: its opening on its first line, or on its second under the origin line (issue 31)."""
    return any(line.startswith(("Approval needed", "Question for you")) for line in text.split("\n")[:2])


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


class _Server:
    # A handler whose client hung up is cancelled (aiohttp's handler_cancellation): a stand-in whose requests wait
    # (a long poll) must let go of a request nobody waits for any more, as the service it stands in for does.
    cancels_abandoned_requests = False

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.url = ""
        self.loop: asyncio.AbstractEventLoop | None = None  # where it serves (a test in another thread acts there)
        self._runner: web.AppRunner | None = None

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        app = web.Application(middlewares=[self._record])
        self.routes(app)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.05,
                                     handler_cancellation=self.cancels_abandoned_requests)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _record(self, request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(Request(request.method, request.path, dict(request.query), dict(request.headers), body))
        response: web.StreamResponse = await handler(request)
        return response


S = TypeVar("S", bound=_Server)


@contextlib.contextmanager
def served_in_a_thread(make: Callable[[], S]) -> Iterator[S]:
    """A stand-in made and served on an event loop of its own in a thread, for a test that blocks meanwhile (a
    command run in-process, a terminal driven from the test)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(30)

    async def made() -> S:
        return make()  # on the loop it serves on: its conditions belong to that loop

    try:
        server = run(made())
        run(server.start())
        try:
            yield server
        finally:
            run(server.stop())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


# --- ntfy ------------------------------------------------------------------------------------------------
class StandInNtfy(_Server):
    """ntfy: POST / publishes JSON ({"topic", "message", "title", "priority", "tags", "actions", "sequence_id"});
    POST /<topic> publishes its body as the message; GET /<topic>/json?since=<all|unix time|message id> streams
    newline-delimited JSON: an "open" event, the cached messages after `since`, then new ones as they come, with
    "keepalive" events between. Topics listed in `protected` need `Authorization: Bearer <token>` to publish."""

    def __init__(self, clock: Callable[[], int], *, token: str | None = None, protected: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.clock = clock
        self.token = token
        self.protected = set(protected)
        self.messages: list[dict[str, Any]] = []
        self.publish_statuses: list[int] = []  # answered in turn to JSON publishes; 200 once they run out
        self.keepalive = 0.2
        self._changed = asyncio.Condition()
        self._streams = 0
        self._cut = 0

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/", self._publish_json)
        app.router.add_get("/{topic}/json", self._subscribe)
        app.router.add_route("*", "/{topic}", self._publish_plain)

    def _authorised(self, request: web.Request, topic: str) -> bool:
        return topic not in self.protected or request.headers.get("Authorization") == f"Bearer {self.token}"

    async def _add(self, fields: dict[str, Any]) -> dict[str, Any]:
        message = {"id": "".join(secrets.choice(_ID_CHARS) for _ in range(12)), "time": self.clock(),
                   "event": "message", **fields}
        message.setdefault("sequence_id", message["id"])
        self.messages.append(message)
        async with self._changed:
            self._changed.notify_all()
        return message

    async def _publish_json(self, request: web.Request) -> web.Response:
        if self.publish_statuses:
            status = self.publish_statuses.pop(0)
            if status != 200:
                return web.json_response({"code": status, "error": "stand-in failure"}, status=status)
        fields = json.loads(await request.read())
        if not self._authorised(request, fields["topic"]):
            return web.json_response({"code": 40301, "http": 403, "error": "forbidden"}, status=403)
        message = await self._add(fields)
        return web.json_response(message)

    async def _publish_plain(self, request: web.Request) -> web.Response:
        topic = request.match_info["topic"]
        if request.method not in ("POST", "PUT"):
            return web.json_response({"error": "method not allowed"}, status=405)
        if not self._authorised(request, topic):
            return web.json_response({"code": 40301, "http": 403, "error": "forbidden"}, status=403)
        message = await self._add({"topic": topic, "message": (await request.read()).decode("utf-8")})
        return web.json_response(message)

    def _after(self, topic: str, since: str) -> list[dict[str, Any]]:
        mine = [m for m in self.messages if m["topic"] == topic]
        if since == "all":
            return mine
        if since.isdigit():
            return [m for m in mine if m["time"] >= int(since)]
        ids = [m["id"] for m in mine]
        return mine[ids.index(since) + 1:] if since in ids else []  # an id no longer cached: nothing

    async def _subscribe(self, request: web.Request) -> web.StreamResponse:
        topic = request.match_info["topic"]
        since = request.query.get("since", "")
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson; charset=utf-8"})
        await response.prepare(request)
        await self._line(response, {"id": "open", "time": self.clock(), "event": "open", "topic": topic})
        backlog = self._after(topic, since) if since else []
        position = len(self.messages)  # what is published from here on is sent as it comes
        for message in backlog:
            await self._line(response, message)
        cut = self._cut
        self._streams += 1
        try:
            while cut == self._cut:
                fresh, position = self.messages[position:], len(self.messages)
                for message in fresh:
                    if message["topic"] == topic:
                        await self._line(response, message)
                if fresh:
                    continue
                async with self._changed:
                    try:
                        await asyncio.wait_for(self._changed.wait(), self.keepalive)
                    except TimeoutError:
                        await self._line(response, {"id": "ka", "time": self.clock(), "event": "keepalive",
                                                    "topic": topic})
        except ConnectionResetError:  # the subscriber went away
            pass
        finally:
            self._streams -= 1
        return response

    async def _line(self, response: web.StreamResponse, value: dict[str, Any]) -> None:
        await response.write(json.dumps(value).encode() + b"\n")

    async def repeat(self, message: dict[str, Any]) -> None:
        """Deliver a message a second time under its own id (a proxy or a server replaying its stream)."""
        self.messages.append(dict(message))
        async with self._changed:
            self._changed.notify_all()

    async def cut_streams(self) -> None:
        """End every open stream (a server restart, a dropped connection)."""
        self._cut += 1
        async with self._changed:
            self._changed.notify_all()

    @property
    def open_streams(self) -> int:
        return self._streams

    # --- the phone's view ---------------------------------------------------------------------------
    def shown(self, topic: str) -> dict[str, dict[str, Any]]:
        """What the phone shows: per sequence id, the latest message published under it."""
        latest: dict[str, dict[str, Any]] = {}
        for message in self.messages:
            if message["topic"] == topic:
                latest[message["sequence_id"]] = message
        return latest

    def cards(self, topic: str) -> list[dict[str, Any]]:
        return [m for m in self.shown(topic).values() if is_card(m.get("message", ""))]

    async def tap(self, message: dict[str, Any], label: str) -> int:
        """What the ntfy app does when a button of type http is tapped: the request it describes, as is."""
        [action] = [a for a in message["actions"] if a["label"] == label]
        assert action["action"] == "http"
        async with aiohttp.ClientSession() as http, http.request(
            action.get("method", "POST"), action["url"], data=action.get("body", "").encode(),
            headers=action.get("headers", {}),
        ) as response:
            return response.status

    async def post(self, topic: str, text: str) -> dict[str, Any]:
        """Anyone publishing to a topic (a forged or replayed answer)."""
        async with aiohttp.ClientSession() as http, http.post(f"{self.url}/{topic}", data=text.encode()) as response:
            assert response.status == 200, response.status
            result: dict[str, Any] = await response.json()
            return result


# --- Telegram Bot API ------------------------------------------------------------------------------------
@dataclass
class Tap:
    callback_id: str
    update_id: int


@dataclass
class StandInBotApi(_Server):
    """The Bot API: POST /bot<token>/<method> with a JSON body; {"ok": true, "result": ...} or {"ok": false,
    "error_code", "description"}. getUpdates long-polls: it confirms every update below `offset` and waits up
    to `timeout` seconds for one at or after it. A poll whose client hung up (closed its connection) no longer
    holds the bot's updates: only polls still connected count as a conflict, and a frozen process's poll (its
    socket open, nobody reading) holds them until its `timeout` runs out, as on the Bot API."""

    cancels_abandoned_requests = True
    token: str = "123456:stand-in-token"
    failures: dict[str, list[int]] = field(default_factory=dict)   # method -> statuses in turn (200: as usual)
    chats: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    updates: list[dict[str, Any]] = field(default_factory=list)
    callback_answers: list[dict[str, Any]] = field(default_factory=list)
    next_update_id: int = 500
    actions: list[dict[str, Any]] = field(default_factory=list)     # sendChatAction calls
    commands: list[dict[str, Any]] = field(default_factory=list)    # as set by setMyCommands
    user_message_id: int = 10
    conflicts: int = 0                                              # getUpdates calls that overlapped
    delivered: list[int] = field(default_factory=list)             # update ids getUpdates returned, each time
    # The links Telegram's servers would have fetched to build a preview (the first link of each message sent or
    # edited without link_preview_options.is_disabled), as they would: at once, with no tap by anyone.
    previewed: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        _Server.__init__(self)
        self._changed = asyncio.Condition()
        self._message_id = 100
        self._poll = 0
        self._waiting = 0

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/bot{token}/{method}", self._method)

    async def _method(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return self._error(401, "Unauthorized")
        method = request.match_info["method"]
        queued = self.failures.get(method)
        status = queued.pop(0) if queued else 200
        if status != 200:  # 200 in the list: that call is answered as usual
            if status == 429:  # the Bot API says how long to wait in parameters.retry_after
                return web.json_response({"ok": False, "error_code": 429, "description": "Too Many Requests: retry "
                                          "after 1", "parameters": {"retry_after": 1}}, status=429)
            if status == 409:
                return self._error(409, "Conflict: terminated by other getUpdates request; make sure that only one "
                                        "bot instance is running")
            return self._error(status, "Unauthorized" if status == 401 else "stand-in failure")
        payload = json.loads(await request.read() or b"{}")
        if method in ("sendMessage", "editMessageText") and not (payload.get("link_preview_options") or {}).get(
                "is_disabled"):
            self.previewed += find_urls(str(payload.get("text") or ""))[:1]
        handler = {"sendMessage": self._send, "editMessageText": self._edit, "getUpdates": self._get_updates,
                   "answerCallbackQuery": self._answer_callback, "sendChatAction": self._chat_action,
                   "setMyCommands": self._set_commands, "setWebhook": self._webhook,
                   "deleteWebhook": self._webhook, "getMe": self._get_me}.get(method)
        if handler is None:
            return self._error(404, "Not Found")
        return await handler(payload)

    def _ok(self, result: Any) -> web.Response:
        return web.json_response({"ok": True, "result": result})

    def _error(self, code: int, description: str) -> web.Response:
        return web.json_response({"ok": False, "error_code": code, "description": description},
                                 status=code)

    async def _send(self, payload: dict[str, Any]) -> web.Response:
        chat_id = payload["chat_id"]
        for row in (payload.get("reply_markup") or {}).get("inline_keyboard", []):
            for button in row:
                if len(button["callback_data"].encode()) > 64:
                    return self._error(400, "Bad Request: BUTTON_DATA_INVALID")
        if len(payload["text"]) > 4096:
            return self._error(400, "Bad Request: message is too long")
        self._message_id += 1
        message = {"message_id": self._message_id, "chat": {"id": chat_id, "type": "private"}, "date": 0,
                   "text": payload["text"], "reply_markup": payload.get("reply_markup")}
        replied = (payload.get("reply_parameters") or {}).get("message_id")
        if replied is not None:
            message["reply_to_message_id"] = replied
        if "parse_mode" in payload:
            message["parse_mode"] = payload["parse_mode"]
        self.chats.setdefault(chat_id, []).append(message)
        return self._ok({k: v for k, v in message.items() if v is not None})

    async def _edit(self, payload: dict[str, Any]) -> web.Response:
        message = self.message(payload["chat_id"], payload["message_id"])
        if message is None:
            return self._error(400, "Bad Request: message to edit not found")
        if message["text"] == payload["text"] and message["reply_markup"] == payload.get("reply_markup"):
            return self._error(400, "Bad Request: message is not modified: specified new message content and "
                                    "reply markup are exactly the same as a current content and reply markup")
        message["text"] = payload["text"]
        message["reply_markup"] = payload.get("reply_markup")  # none given: the keyboard is removed
        message["edits"] = message.get("edits", 0) + 1
        return self._ok({k: v for k, v in message.items() if v is not None})

    async def _get_updates(self, payload: dict[str, Any]) -> web.Response:
        offset = payload.get("offset")
        if offset is not None:
            self.updates = [u for u in self.updates if u["update_id"] >= offset]  # confirmed: forgotten
        # A second getUpdates while one waits ends the waiting one with 409, as the Bot API does ("terminated
        # by other getUpdates request"): two programs polling one bot is an error both can see.
        self._poll += 1
        mine = self._poll
        if self._waiting:
            self.conflicts += 1
            async with self._changed:
                self._changed.notify_all()
        deadline = asyncio.get_running_loop().time() + float(payload.get("timeout", 0))
        self._waiting += 1
        try:
            async with self._changed:
                while not self.updates and mine == self._poll:
                    left = deadline - asyncio.get_running_loop().time()
                    if left <= 0:
                        break
                    try:
                        await asyncio.wait_for(self._changed.wait(), left)
                    except TimeoutError:
                        break
        finally:
            self._waiting -= 1
        if mine != self._poll and not self.updates:
            return self._error(409, "Conflict: terminated by other getUpdates request; make sure that only one bot "
                                    "instance is running")
        # allowed_updates only stops new kinds being queued: what is queued already is returned (as the docs say)
        self.delivered.extend(u["update_id"] for u in self.updates)
        return self._ok(list(self.updates))

    async def _chat_action(self, payload: dict[str, Any]) -> web.Response:
        self.actions.append(payload)
        return self._ok(True)

    async def _get_me(self, payload: dict[str, Any]) -> web.Response:
        return self._ok({"id": int(self.token.split(":")[0]), "is_bot": True, "first_name": "Stand-in",
                         "username": "stand_in_bot"})

    async def _webhook(self, payload: dict[str, Any]) -> web.Response:
        return self._ok(True)  # what was asked is in self.requests

    async def _set_commands(self, payload: dict[str, Any]) -> web.Response:
        self.commands = list(payload["commands"])
        return self._ok(True)

    async def _answer_callback(self, payload: dict[str, Any]) -> web.Response:
        self.callback_answers.append(payload)
        return self._ok(True)

    # --- the phone --------------------------------------------------------------------------------
    def message(self, chat_id: int, message_id: int) -> dict[str, Any] | None:
        return next((m for m in self.chats.get(chat_id, []) if m["message_id"] == message_id), None)

    def cards(self, chat_id: int) -> list[dict[str, Any]]:
        return [m for m in self.chats.get(chat_id, []) if is_card(m["text"])]

    async def push(self, update: dict[str, Any]) -> int:
        self.next_update_id += 1
        update = {"update_id": self.next_update_id, **update}
        self.updates.append(update)
        async with self._changed:
            self._changed.notify_all()
        return self.next_update_id

    async def tap(self, chat_id: int, message: dict[str, Any], label: str, *, from_id: int | None = None,
                  data: str | None = None) -> Tap:
        """A tap on a button of a message, as Telegram reports it: a callback_query update."""
        if data is None:
            [button] = [b for row in message["reply_markup"]["inline_keyboard"] for b in row if b["text"] == label]
            data = button["callback_data"]
        callback_id = secrets.token_hex(8)
        update_id = await self.push({"callback_query": {
            "id": callback_id, "from": {"id": chat_id if from_id is None else from_id, "is_bot": False,
                                        "first_name": "Owner"},
            "message": {"message_id": message["message_id"], "chat": {"id": chat_id, "type": "private"},
                        "date": 0, "text": message["text"]},
            "chat_instance": "1", "data": data}})
        return Tap(callback_id, update_id)

    async def write(self, chat_id: int, text: str | None = None, *, from_id: int | None = None,
                    chat_type: str = "private", **fields: Any) -> tuple[int, int]:
        """A person writing to the bot (a message update); returns (update id, message id)."""
        self.user_message_id += 1
        message: dict[str, Any] = {
            "message_id": self.user_message_id, "date": 1_790_000_000,
            "from": {"id": chat_id if from_id is None else from_id, "is_bot": False, "first_name": "Someone"},
            "chat": {"id": chat_id, "type": chat_type}, **fields}
        if text is not None:
            message["text"] = text
        return await self.push({"message": message}), self.user_message_id

    async def edit_by_user(self, chat_id: int, message_id: int, text: str, *, edit_date: int) -> int:
        """The person editing an earlier message of theirs (an edited_message update)."""
        return await self.push({"edited_message": {
            "message_id": message_id, "date": 1_790_000_000, "edit_date": edit_date, "text": text,
            "from": {"id": chat_id, "is_bot": False, "first_name": "Someone"},
            "chat": {"id": chat_id, "type": "private"}}})

    def sent_to(self, chat_id: int) -> list[dict[str, Any]]:
        """What the bot sent to a chat, in order."""
        return list(self.chats.get(chat_id, []))

    def reply_to(self, tap: Tap) -> str | None:
        """What the phone was told about a tap (answerCallbackQuery's text)."""
        return next((a.get("text") for a in self.callback_answers if a["callback_query_id"] == tap.callback_id), None)
