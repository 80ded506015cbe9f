"""What a tool is, whichever place it comes from: the built-ins' specs, the hints a tool carries (open-world,
read-only, idempotent), a call and its outcome, and the Python tools exposed through the entry-point group
`agent_console.tools`. The gateway (agents/gateway.py) is where every call is decided, asked, checked, run and
recorded; MCP servers' tools come through console/agents/mcp.py.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import entry_points
from typing import Any, Literal, Protocol, TypeVar

from console.config import ConfigError
from console.trust.callview import QUESTION_LIMIT, compact_call, cut_middle


class ListedTool(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def input_schema(self) -> dict[str, Any]: ...


class ToolHub(Protocol):
    """What the gateway needs of the MCP side (console.agents.mcp.McpHub)."""

    def start(self, *, wait: bool = True) -> None: ...

    def close(self) -> None: ...

    def tools(self) -> tuple[Sequence[ListedTool], dict[str, str]]: ...

    def call(self, name: str, arguments: dict[str, Any], *, idempotency_key: str) -> dict[str, Any]: ...

    def repeatable(self, name: str) -> bool: ...

    def status(self) -> dict[str, str]: ...

    def boxes(self) -> dict[str, tuple[str, tuple[tuple[str, int], ...]]]: ...

    def watch(self, callback: Callable[[], None]) -> None: ...

log = logging.getLogger("agent_console.tools")

ENTRY_POINT_GROUP = "agent_console.tools"
MAX_RESULT_CHARS = 8000      # of one tool result handed back to the model
MAX_RECORD_CHARS = 2000      # of one result kept in the transcript
MAX_JOURNAL_CHARS = 64_000   # of one tool result kept in the journal (what a replay hands back)
TOOL_NAME_CHARS = 64         # the Messages API's limit on a tool's name

Outcome = Literal["done", "error", "deferred", "refused", "unknown"]


@dataclass(frozen=True)
class ToolHints:
    """What a tool says about itself: an MCP tool's annotations (readOnlyHint, destructiveHint, idempotentHint,
    openWorldHint), a Python tool's tool_hints(...). None: not declared. trusted_server: the owner marked its
    MCP server `trusted = true` (the owner's word, never the server's)."""

    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None
    trusted_server: bool = False
    # Its results are the owner's private data: a Python tool's tool_hints(private=True), or an MCP server the
    # owner marked `private = true` (the owner's word, never the server's).
    private: bool = False
    # Its arguments reach only the owner's own service under the owner's account (their bank's API, their own
    # Slack workspace), so they are no sink even when its results are outside text: a Python tool's
    # tool_hints(own_service=True), or an MCP server the owner marked `own_service = true` (the owner's word,
    # never the server's: no annotation of a server's can say it).
    own_service: bool = False


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]
    kind: str  # builtin | python | mcp
    hints: ToolHints = ToolHints()

    @property
    def reads_open_world(self) -> bool:
        """Whether its result may carry text someone else wrote: reading it makes a conversation untrusted.
        An MCP tool unless its server is trusted and it is not annotated openWorldHint: true; a Python tool
        unless it declares open_world=False; never a built-in (recall judges the notes it returns itself)."""
        if self.kind == "builtin":
            return False
        if self.kind == "mcp":
            return not self.hints.trusted_server or self.hints.open_world is True
        return self.hints.open_world is not False

    @property
    def reads_private(self) -> bool:
        """Whether its result is the owner's private data (reading it makes a conversation private). recall
        judges the notes it returns itself."""
        return self.kind != "builtin" and self.hints.private

    @property
    def sink(self) -> str | None:
        """Where its arguments go when that is to someone other than the owner (None: they stay with the
        owner): an open-world tool's server, unless the owner declared that its arguments reach only the owner's
        own service (own_service). Whether its results are outside text (reads_open_world) is a separate
        question: the owner's Slack workspace returns others' words, yet what is sent to it stays the owner's.
        A built-in is judged by what it sends (gateway._confidential)."""
        if self.kind == "builtin" or not self.reads_open_world or self.hints.own_service:
            return None
        return f"the arguments of {self.name}, an open-world tool"

    @property
    def read_only_default(self) -> bool:
        """A read-only, closed-world tool of a trusted server: allowed by default where no rule names it."""
        return self.kind == "mcp" and self.hints.read_only is True and not self.reads_open_world


HINTS_ATTRIBUTE = "__agent_console_hints__"

F = TypeVar("F", bound=Callable[..., Any])


def tool_hints(*, open_world: bool = True, read_only: bool | None = None, idempotent: bool | None = None,
               destructive: bool | None = None, private: bool = False, own_service: bool = False,
               ) -> Callable[[F], F]:
    """Declare what a Python tool is, as MCP annotations do for a server's tools:

        from console.agents.tools import tool_hints

        @tool_hints(open_world=False, read_only=True)
        def lookup_order(order: str) -> dict[str, str]: ...

    open_world=False says its result holds only the owner's own data, so reading it keeps a run trusted. The
    default is open-world: a tool that forgot to say so and does return outside text (a web page, an e-mail, a
    customer's note) would otherwise let that text steer a trusted run; a closed-world tool that forgot costs
    only an extra question.

    private=True says its result is the owner's private data (a balance, a mailbox, a calendar): a run that
    has read it and untrusted content then sends nothing to a sink unasked (docs/security.md).

    own_service=True says its arguments reach only the owner's own service under the owner's account (their bank,
    their workspace): calling it is no sink, even from such a run. A tool that fetches any URL, or sends to
    someone else (a payment's subject, a message to another person), is a sink: leave it False."""
    def mark(function: F) -> F:
        setattr(function, HINTS_ATTRIBUTE, ToolHints(read_only, destructive, idempotent, open_world,
                                                     private=private, own_service=own_service))
        return function

    return mark


@dataclass(frozen=True)
class ToolCall:
    """One call the model made (or the offline agent), with the id the conversation knows it by."""

    use_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolOutcome:
    outcome: Outcome
    text: str                       # what goes back to the model as the tool's result
    decision: str                   # allowed | asked | denied | unknown | approved | declined | expired
    request_id: str | None = None   # the approval it asked for (deferred) or ran under (approved)
    result: Any = None              # the tool's own result, when it ran
    made: bool = False              # it went out (a journal step that stands), for the audit trail
    replayed: bool = False          # ... in an earlier attempt: the journal answered it here


def canonical(arguments: Mapping[str, Any]) -> str:
    """Arguments as one canonical JSON text: what an approval is bound to."""
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def summary(name: str, arguments: Mapping[str, Any]) -> str:
    """`tool(key=value, ...)` on one line naming every argument, long values shortened in their middle (an
    ask_owner question: its words): what the owner is asked about (console.trust.callview says how)."""
    if name == "ask_owner" and isinstance(arguments.get("question"), str):
        return cut_middle(" ".join(str(arguments["question"]).split()), QUESTION_LIMIT)
    return compact_call(name, arguments)


# --- built-in tools ---------------------------------------------------------------------------------------

def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


BUILTINS: dict[str, ToolSpec] = {spec.name: spec for spec in (
    ToolSpec("send_message", "Queue a message to the owner. Leave it out when nothing is worth saying.", _schema({
        "text": {"type": "string", "description": "The message, plain text."},
        "urgent": {"type": "boolean", "description": "Skip the outbox's pacing. Rarely.", "default": False},
    }, ["text"]), "builtin"),
    ToolSpec("set_timer", "Wake yourself later: once at a time, or on a cron schedule. The timer's text comes "
             "back to you as an event when it fires.", _schema({
                 "text": {"type": "string", "description": "What to do when it fires."},
                 "at": {"type": "string", "description": "Once, at this ISO 8601 time (with an offset), e.g. "
                                                         "2026-12-01T09:00:00+01:00."},
                 "cron": {"type": "string", "description": "Or on this cron schedule, e.g. '0 9 * * 1'."},
                 "tz": {"type": "string", "description": "The IANA time zone of a cron schedule."},
                 "timer_id": {"type": "string", "description": "A name, to replace a timer set before."},
             }, ["text"]), "builtin"),
    ToolSpec("schedule", "Set up recurring work for yourself (or one later run): once at a time, every N minutes/"
             "hours/days, or on a cron schedule in a time zone. Each occurrence wakes you with its instruction. A "
             "recurring schedule always asks the owner first, showing its next fire times and its cost; it expires "
             "after 30 days unless `expiry` says otherwise (the owner can renew it). Give schedule_id to change one.",
             _schema({
                 "title": {"type": "string", "description": "A short name the owner sees."},
                 "instruction": {"type": "string", "description": "What each occurrence's run is to do."},
                 "at": {"type": "string", "description": "Once, at this ISO 8601 time with an offset."},
                 "every": {"type": "string", "description": "Or every '30 minutes', '2 hours', '1 day', ..."},
                 "start": {"type": "string", "description": "With every: the first occurrence (ISO 8601); "
                                                            "default one interval from now."},
                 "cron": {"type": "string", "description": "Or on this cron schedule, e.g. '0 9 * * 1-5'."},
                 "tz": {"type": "string", "description": "The IANA time zone of the cron schedule."},
                 "tools": {"type": "array", "items": {"type": "string"},
                           "description": "Only these tools in its runs (narrower than the policy); send_message "
                                          "always."},
                 "budget": {"type": "object", "description": "US dollars: per_occurrence_usd, per_month_usd. An "
                                                             "occurrence that would pass one pauses the schedule.",
                            "properties": {"per_occurrence_usd": {"type": "number"},
                                           "per_month_usd": {"type": "number"}}},
                 "expiry": {"type": "string", "description": "When it stops: an ISO 8601 time or a span like "
                                                             "'14 days' (default 30 days for a recurring one)."},
                 "only_if_changed": {"type": "boolean", "description": "Run only when something changed since "
                                                                      "the last occurrence (see watch_*)."},
                 "watch_sources": {"type": "array", "items": {"type": "string"},
                                   "description": "Event sources whose new events count as a change."},
                 "watch_tool": {"type": "string", "description": "A read-only tool whose result, if different, "
                                                                "counts as a change."},
                 "watch_arguments": {"type": "object", "description": "The watch_tool's arguments."},
                 "schedule_id": {"type": "string", "description": "To change a schedule set before."},
             }, ["title", "instruction"]), "builtin"),
    ToolSpec("remember", "Keep a short note for later runs (replaces a note of the same key).", _schema({
        "key": {"type": "string"}, "value": {"type": "string"}}, ["key", "value"]), "builtin"),
    ToolSpec("recall", "Read your notes (all of them, or those whose key contains `query`).", _schema({
        "query": {"type": "string"}}, []), "builtin"),
    ToolSpec("forget", "Drop a note.", _schema({"key": {"type": "string"}}, ["key"]), "builtin"),
    ToolSpec("ask_owner", "Ask the owner a yes/no question and stop; you are resumed with the answer.", _schema({
        "question": {"type": "string", "description": "The question, complete on its own."}}, ["question"]),
        "builtin"),
)}


class ToolInputError(ValueError):
    """The model's arguments do not fit the tool: it gets the reason back and may correct itself."""


def text_argument(arguments: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = arguments.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ToolInputError(f"needs a non-empty text {name!r}")
    return value.strip()


def iso_moment(text: str, what: str = "at") -> int:
    """An ISO 8601 time with an offset, in epoch seconds (ToolInputError naming the argument `what`)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ToolInputError(f"`{what}` must be an ISO 8601 time with an offset, not {text!r}") from None
    if moment.tzinfo is None:
        raise ToolInputError(f"`{what}` needs an offset or Z (whose nine o'clock?), got {text!r}")
    return int(moment.timestamp())


# --- Python tools through entry points -------------------------------------------------------------------

@dataclass
class PythonTool:
    """A function exposed through the entry-point group `agent_console.tools`; its schema comes from its type
    hints and docstring (pydantic), and its arguments are validated the same way before it runs."""

    name: str
    function: Callable[..., Any]
    spec: ToolSpec = field(init=False)
    _model: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        import pydantic

        signature = inspect.signature(self.function)
        fields_: dict[str, Any] = {}
        for parameter in signature.parameters.values():
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise ConfigError(f"tool {self.name!r}: *args and **kwargs cannot be described to a model")
            annotation = parameter.annotation if parameter.annotation is not parameter.empty else Any
            default = parameter.default if parameter.default is not parameter.empty else ...
            fields_[parameter.name] = (annotation, default)
        self._model = pydantic.create_model(f"{self.name}_arguments", **fields_)
        schema = self._model.model_json_schema()
        schema.pop("title", None)
        doc = inspect.getdoc(self.function) or f"The {self.name} tool."
        hints = getattr(self.function, HINTS_ATTRIBUTE, None)
        self.spec = ToolSpec(self.name, doc.split("\n\n")[0].strip(), schema, "python",
                             hints if isinstance(hints, ToolHints) else ToolHints())

    def call(self, arguments: Mapping[str, Any]) -> Any:
        import pydantic

        try:
            checked = self._model.model_validate(dict(arguments))
        except pydantic.ValidationError as exc:
            raise ToolInputError(str(exc).replace("\n", "; ")) from None
        return self.function(**{name: getattr(checked, name) for name in type(checked).model_fields})


def load_python_tools(group: str = ENTRY_POINT_GROUP) -> dict[str, PythonTool]:
    """Every function installed under the entry-point group. A tool that fails to load is left out with a
    warning naming it (one broken package must not stop the agent)."""
    found: dict[str, PythonTool] = {}
    for point in entry_points(group=group):
        name = point.name
        if not name.replace("_", "").replace("-", "").isalnum() or len(name) > TOOL_NAME_CHARS or name in BUILTINS \
                or name.startswith("mcp__"):
            log.warning("python tool %r left out: a tool name is letters, digits, _ and - (not a built-in's "
                        "name, not mcp__...)", name)
            continue
        try:
            function = point.load()
            if not callable(function):
                raise TypeError(f"{point.value} is not callable")
            found[name] = PythonTool(name, function)
        except Exception as exc:  # a third-party package's import error: leave the tool out, say why
            log.warning("python tool %r (%s) left out: %s: %s", name, point.value, type(exc).__name__, exc)
    return found
