"""A run's transcript for the console: the model's turns (journalled steps) with each tool call it made, the
policy's decision and what came back. Plain data and text; the screens render it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from console.core import Attempt, JournalStep, ToolCallRecord

MAX_TEXT = 400  # of one model text block or one tool result in the transcript


@dataclass(frozen=True)
class Line:
    kind: str   # turn | model | call | result | note
    text: str


@dataclass(frozen=True)
class Transcript:
    lines: list[Line] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.lines


def arguments_line(arguments: Any) -> str:
    if not isinstance(arguments, dict):
        return json.dumps(arguments, ensure_ascii=False)
    return ", ".join(f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in sorted(arguments.items()))


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _call_lines(call: ToolCallRecord) -> list[Line]:
    asked = f" (request {call.request_id})" if call.request_id else ""
    return [Line("call", f"→ {call.tool}({arguments_line(call.arguments)})  {call.decision}, {call.outcome}{asked}"),
            Line("result", f"← {_cut(call.result or '')}")]


def build_transcript(steps: Sequence[JournalStep], calls: Iterable[ToolCallRecord],
                     history: Iterable[Attempt] = ()) -> Transcript:
    """The model turns among an event's journal steps (keys `...:turn:N`), each followed by the tool calls it
    made (matched by tool-use id), then any calls no turn names (the built-in agent's, an approved call). A turn
    that went to another model than the run's last one is preceded by the history's line saying so."""
    switches = [attempt.detail for attempt in history if attempt.kind == "model" and attempt.detail]
    by_use = {call.use_id: call for call in calls}
    shown: set[str] = set()
    lines: list[Line] = []
    for step in steps:
        if ":turn:" not in step.idem_key or not isinstance(step.result, dict):
            continue
        conversation, _, number = step.idem_key.rpartition(":turn:")
        then = step.result.get("provenance")
        tainted = [str(why) for why in then.get("tainted_by") or []] if isinstance(then, dict) else []
        read = f" · the run had read untrusted content: {', '.join(tainted)}" if tainted else ""
        lines += [Line("note", f"⇄ {line}") for line in switches if line.startswith(f"{conversation} turn {number}:")]
        lines.append(Line("turn", f"{conversation} · turn {number}{read}"))
        for block in step.result.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and str(block.get("text", "")).strip():
                lines.append(Line("model", _cut(block["text"])))
            elif block.get("type") == "tool_use":
                call = by_use.get(str(block.get("id")))
                if call is None:
                    lines.append(Line("call", f"→ {block.get('name')}({arguments_line(block.get('input'))})"))
                else:
                    shown.add(call.use_id)
                    lines += _call_lines(call)
    rest = [call for use_id, call in by_use.items() if use_id not in shown]
    if rest and lines:
        lines.append(Line("note", "other tool calls"))
    for call in rest:
        lines += _call_lines(call)
    return Transcript(lines)


def conversation_lines(state: Any) -> list[Line]:
    """A saved conversation (an approval's session) as lines: what was said and called before it asked."""
    inner = state.get("state") if isinstance(state, dict) else None
    messages = inner.get("messages") if isinstance(inner, dict) else None
    if not isinstance(messages, list):
        return []
    lines: list[Line] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and str(block.get("text", "")).strip():
                lines.append(Line("model" if role == "assistant" else "turn", _cut(block["text"])))
            elif kind == "tool_use":
                lines.append(Line("call", f"→ {block.get('name')}({arguments_line(block.get('input'))})"))
            elif kind == "tool_result":
                lines.append(Line("result", f"← {_cut(str(block.get('content', '')))}"))
    return lines
