"""Intake: the checks every event passes on its way in, ingest and ingest_many, and the refused copies counted in
memory (a redelivery's key is refused by the database; its count waits for the store's next write)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from console.core.base import RESERVED_SOURCES, RefusalTally, StoreBase, dumps_shaped
from console.core.errors import move_refusal
from console.core.models import Event
from console.core.statements import IS_STORED

MAX_KEY_CHARS = 512

# A refused redelivery is counted in memory and written to its stored event (the duplicate ledger) inside this
# store's next write of the inbox's own flow (an ingest that stores, a claim, a finish), when the store closes, or
# at once when REFUSALS_HELD keys are waiting or the first of them waited REFUSAL_HOLD_SECONDS. A refusal then
# costs a read and nothing else; a crash can lose the tally of copies refused since the last write, never an event
# (the copy was refused because the event is already stored, durably).
REFUSALS_HELD = 1000
REFUSAL_HOLD_SECONDS = 5


# The deepest payload the inbox takes (a scalar is 0 deep, {} or [] 1). Every reader of a payload walks it
# recursively: json's encoder and decoder, dataclasses.asdict in `events --json` and `show --json`, the
# console's payload view; each spends one or two frames a level out of Python's 1000, from whatever depth
# it is called at. 100 leaves them a wide margin, and is deeper than any webhook payload (GitHub's, Stripe's
# and Slack's are under 15).
MAX_PAYLOAD_DEPTH = 100
_CONTAINERS = (dict, list, tuple)


def payload_depth(value: Any, *, stop_past: int | None = None) -> int:
    """How many containers deep value is. Iterative, so any depth can be measured; with stop_past the
    walk ends as soon as the depth passes it."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if stop_past is not None and deepest > stop_past:
            break
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list | tuple))
    return deepest


def check_payload_shape(value: Any, what: str = "payload") -> None:
    """ValueError for a payload the inbox would not give back as it went in, or that its readers could
    not walk: nested deeper than MAX_PAYLOAD_DEPTH, or an object key that is not a string (json.dumps
    would turn 1 into "1", and let {1: a, "1": b} collide). One walk, without recursion; only containers go on
    its stack (a plain loop, not a generator per container: this runs on every ingest)."""
    # A tuple of types, not `dict | list | tuple`: isinstance with a union is about twice as slow.
    if not isinstance(value, _CONTAINERS):
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        if isinstance(item, dict):
            for key in item:
                if type(key) is not str and not isinstance(key, str):
                    raise ValueError(f"{what} is not JSON-serialisable: object key {key!r} is not a string")
            children: Iterable[Any] = item.values()
        else:
            children = item
        if depth > MAX_PAYLOAD_DEPTH:
            raise ValueError(f"{what} is nested deeper than {MAX_PAYLOAD_DEPTH} levels")
        for child in children:
            if isinstance(child, _CONTAINERS):
                push((child, depth + 1))


class IntakeMixin(StoreBase):
    # --- ingest -------------------------------------------------------------------------------
    def encode_event(self, source: str, source_id: str, payload: Any, *, by_engine: bool = False) -> str:
        """Validate one event and return its payload as JSON text; ValueError says what is wrong.

        Every way in from outside (ingest, ingest_many, the webhook receiver) comes through here, so the
        sources the engine alone writes are refused here: an `approval` event answers an approval, and
        only the answer path (`approve`, the console) may write one. by_engine: the engine's own writer of
        such a source (a chat source's listener) is asking."""
        self.check_keys(source, source_id, by_engine=by_engine)
        return self.encode_payload(payload)

    def check_keys(self, source: str, source_id: str, *, by_engine: bool = False) -> None:
        """encode_event's checks of an event's key (source, source_id): ValueError says what is wrong."""
        if source in RESERVED_SOURCES and not by_engine:
            what = {"approval": "an approval's answer or expiry", "timer": "a timer's firing"}.get(
                source, "what its chat source's listener takes from the owner's chat")
            hint = " (answer with `agent-console approve REQUEST_ID yes|no`)" if source == "approval" else ""
            raise ValueError(f"source {source!r} is reserved: only the engine writes {what}{hint}")
        for name, value in (("source", source), ("source_id", source_id)):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name} must be a non-empty string")
            if len(value) > MAX_KEY_CHARS:
                raise ValueError(f"{name} is longer than {MAX_KEY_CHARS} characters")
            if "\x00" in value:
                raise ValueError(f"{name} must not contain a NUL character")
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ValueError(f"{name} contains a lone surrogate, which is not valid UTF-8") from exc

    def encode_payload(self, payload: Any) -> str:
        """encode_event's checks of a payload, and its JSON text: ValueError says what is wrong."""
        check_payload_shape(payload)
        try:
            text = dumps_shaped(payload)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"payload is not JSON-serialisable: {exc}") from exc
        lone_surrogate = None
        if text.isascii():  # a flag on the string: no copy to count its bytes
            size = len(text)
        else:
            try:
                size = len(text.encode("utf-8"))
            except UnicodeEncodeError as exc:
                size = len(text.encode("utf-8", "surrogatepass"))
                lone_surrogate = exc
        if size > self.options.max_payload_bytes:
            raise ValueError(f"payload is {size} bytes, over the limit of {self.options.max_payload_bytes} bytes")
        if lone_surrogate is not None:
            raise ValueError("payload contains a lone surrogate, which is not valid UTF-8") from lone_surrogate
        return text

    def ingest(self, source: str, source_id: str, payload: Any, *, now: int) -> bool:
        """Store an event once. False means a copy was already stored (the duplicate is counted: in memory
        until this store's next write, see REFUSALS_HELD).

        A redelivery is the common case for webhooks: it is refused after its key's checks and a plain read. Its
        payload is not looked at (nothing of it is stored), so a bad payload under a stored key is refused as a
        copy, not as bad input."""
        self.check_keys(source, source_id)
        held = self._refused
        try:
            with self._backend.storage_errors():
                return self._ingest_one(source, source_id, payload, now)
        except BaseException:
            self._keep_refusals(held)
            raise

    def _ingest_one(self, source: str, source_id: str, payload: Any, now: int) -> bool:
        """ingest's work once the key is checked. With no copies held to write, the backend may do it whole
        (Backend.try_ingest: SQLite, the key's read and the insert in one snapshot; PostgreSQL, one round trip).
        Otherwise, or when it declines: a plain read refuses a stored key (held, _hold_refusal), else one durable
        transaction stores the event and writes the held refusals."""
        if not self._refused:
            done = self._backend.try_ingest(source, source_id, lambda: self.encode_payload(payload), now)
            if done is not None:
                stored, mark = done
                if mark is not None:
                    raise move_refusal(*mark)
                if not stored:
                    self._hold_refusal(source, source_id, now)
                return stored
        if self._scalar(IS_STORED, (source, source_id)):
            self._hold_refusal(source, source_id, now)
            return False
        text = self.encode_payload(payload)
        with self.write_transaction():
            self._write_refusals()
            return self._insert_event(source, source_id, text, now)

    def ingest_many(self, items: Iterable[tuple[str, str, Any]], *, now: int) -> list[bool]:
        """Store many events in one transaction (one fsync). All are validated before any is written."""
        encoded = [(source, source_id, self.encode_event(source, source_id, payload))
                   for source, source_id, payload in items]
        if not encoded:
            return []
        held = self._refused
        try:
            with self._backend.storage_errors():
                return self._ingest_encoded(encoded, now)
        except BaseException:
            self._keep_refusals(held)
            raise

    def _ingest_encoded(self, encoded: Sequence[tuple[str, str, str]], now: int) -> list[bool]:
        """ingest_many's one transaction: the backend's whole when it takes it (Backend.try_ingest_many; PostgreSQL,
        one round trip when every key is the call's only one of it) and no refused copies are held to write."""
        if not self._refused:
            done = self._backend.try_ingest_many(encoded, now)
            if done is not None:
                stored, mark = done
                if mark is not None:
                    raise move_refusal(*mark)
                return stored
        with self.write_transaction():
            self._write_refusals()
            return self._insert_events(encoded, now)


    # --- refused copies, counted in memory (REFUSALS_HELD) ------------------------------------------
    _refused_since = 0

    def _hold_refusal(self, source: str, source_id: str, now: int) -> None:
        if not self._refused:
            self._refused_since = now
        copies = self._refused.get((source, source_id), (0, now))[0]
        self._refused[source, source_id] = (copies + 1, now)
        if len(self._refused) >= REFUSALS_HELD or now - self._refused_since >= REFUSAL_HOLD_SECONDS:
            self.write_refusals()

    def write_refusals(self) -> None:
        """Write the refused copies counted in memory to their events now (close() does; so does any write of
        the inbox's flow on this store). Like their count before, it does not wait for an fsync."""
        if not self._refused:
            return
        held = self._refused
        try:
            with self.write_transaction(relaxed=True):
                self._write_refusals()
        except BaseException:
            self._keep_refusals(held)
            raise

    def _write_refusals(self) -> None:
        """Inside the caller's write transaction: the held tally goes into it (and out of memory)."""
        if self._refused:
            held, self._refused = self._refused, {}
            self._backend.count_refusals([(source, source_id, copies, last)
                                          for (source, source_id), (copies, last) in held.items()])

    def _keep_refusals(self, held: RefusalTally) -> None:
        """A transaction that took the held tally did not commit: put it back beside any counted since."""
        if held and held is not self._refused:
            for key, (copies, last) in self._refused.items():
                before = held.get(key, (0, last))[0]
                held[key] = (before + copies, last)
            self._refused = held

    def _with_refusals(self, events: list[Event]) -> list[Event]:
        """Events as this store sees them, its refused copies not yet written included."""
        if not self._refused:
            return events
        shown = []
        for event in events:
            held = self._refused.get((event.source, event.source_id))
            if held is not None:
                event = replace(event, duplicates=event.duplicates + held[0])
            shown.append(event)
        return shown
