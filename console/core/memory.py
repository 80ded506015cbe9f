"""The agent's memory across runs: a few keyed notes it keeps (remember / recall / forget).

A run's writes are staged and committed by its fenced finish (a run that lost its lease remembers nothing);
the owner reads and edits the same table with `agent-console memory`.
"""

from __future__ import annotations

from typing import Any

from console.core.base import StoreBase, dumps, loads
from console.core.models import MemoryEntry, MemoryWrite, ToolCallRecord


def _json_or_null(value: Any) -> str | None:
    return None if value is None else dumps(value)


MAX_KEY_CHARS = 200
MAX_VALUE_CHARS = 4000


def check_memory(key: str, value: str | None) -> None:
    """ValueError saying what is wrong with a memory write."""
    if not isinstance(key, str) or not key.strip():
        raise ValueError("a memory key must be non-empty text")
    if len(key) > MAX_KEY_CHARS:
        raise ValueError(f"a memory key is at most {MAX_KEY_CHARS} characters")
    if value is not None:
        if not isinstance(value, str) or not value.strip():
            raise ValueError("a memory value must be non-empty text")
        if len(value) > MAX_VALUE_CHARS:
            raise ValueError(f"a memory value is at most {MAX_VALUE_CHARS} characters, not {len(value)}")


class MemoryMixin(StoreBase):
    def memory(self) -> list[MemoryEntry]:
        """Every note, most recently written first."""
        return [
            MemoryEntry(key, value, updated_at, event_id, loads(origin))
            for key, value, updated_at, event_id, origin in self._conn.execute(
                "SELECT key, value, updated_at, event_id, origin FROM memory ORDER BY updated_at DESC, key"
            )
        ]

    def set_memory(self, key: str, value: str, *, now: int) -> None:
        """The owner writes a note by hand (its origin is the owner's: none)."""
        check_memory(key, value)
        with self.write_transaction():
            self._write_memory(MemoryWrite(key.strip(), value), now)

    def delete_memory(self, key: str) -> bool:
        return self.forget_memory(key) is not None

    def forget_memory(self, key: str) -> MemoryEntry | None:
        """Drop a note and hand it back whole (value, when and by whom it was written), so the owner's forget can
        be undone with put_back_memory; None when there was no such note."""
        with self.write_transaction():
            for row in self._conn.execute(
                    "DELETE FROM memory WHERE key = ? RETURNING key, value, updated_at, event_id, origin", (key,)):
                return MemoryEntry(row[0], row[1], row[2], row[3], loads(row[4]))
            return None

    def put_back_memory(self, note: MemoryEntry) -> bool:
        """A forgotten note back as it was, origin and time included (an undo). False, changing nothing, when a
        note of that key was written since: the newer one stands."""
        with self.write_transaction():
            return bool(self._conn.execute(
                """INSERT INTO memory (key, value, updated_at, event_id, origin) VALUES (?, ?, ?, ?, ?)
                   ON CONFLICT (key) DO NOTHING RETURNING key""",
                (note.key, note.value, note.updated_at, note.event_id, _json_or_null(note.origin))).fetchall())

    def _write_memory(self, write: MemoryWrite, now: int) -> None:
        if write.value is None:
            self._conn.execute("DELETE FROM memory WHERE key = ?", (write.key,))
        else:
            self._conn.execute(
                """INSERT INTO memory (key, value, updated_at, event_id, origin) VALUES (?, ?, ?, ?, ?)
                   ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at,
                                                   event_id = excluded.event_id, origin = excluded.origin""",
                (write.key, write.value, now, write.event_id, None if write.origin is None else dumps(write.origin)),
            )

    def _write_tool_call(self, call: ToolCallRecord, now: int) -> None:
        """The one writer of a tool call's record (inside a run's finish)."""
        self._conn.execute(
            """INSERT INTO tool_calls (event_id, use_id, tool, arguments, decision, outcome, result, request_id, at,
                                       rule, provenance, run)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (call.event_id, call.use_id, call.tool, dumps(call.arguments), call.decision, call.outcome,
             call.result, call.request_id, now, call.rule, _json_or_null(call.provenance), _json_or_null(call.run)),
        )

    def tool_calls(self, event_id: int) -> list[ToolCallRecord]:
        """The tool calls of an event's finished runs, in order: its transcript's actions."""
        return [
            ToolCallRecord(event_id, use_id, tool, loads(arguments), decision, outcome, result, request_id, at, rule,
                           loads(provenance), loads(run))
            for use_id, tool, arguments, decision, outcome, result, request_id, at, rule, provenance, run
            in self._conn.execute(
                """SELECT use_id, tool, arguments, decision, outcome, result, request_id, at, rule, provenance, run
                   FROM tool_calls
                   WHERE event_id = ? ORDER BY id""",
                (event_id,),
            )
        ]
