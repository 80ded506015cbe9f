"""One depth limit for payloads, enforced where every event enters the inbox, below what every reader handles."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from console.core import Store
from console.core.base import dumps, dumps_shaped
from console.core.intake import MAX_PAYLOAD_DEPTH, payload_depth


def nested(depth: int, kind: str = "dict") -> Any:
    """A value `depth` containers deep, built without recursion (so any depth can be made)."""
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value} if kind == "dict" else [value]
    return value


@pytest.mark.parametrize("kind", ["dict", "list"])
def test_payload_depth_counts_containers_without_recursing(kind: str) -> None:
    assert payload_depth("leaf") == 0 and payload_depth({}) == 1 and payload_depth([[], {"a": [1]}]) == 3
    assert payload_depth(nested(MAX_PAYLOAD_DEPTH, kind)) == MAX_PAYLOAD_DEPTH
    assert payload_depth(nested(200_000, kind)) > MAX_PAYLOAD_DEPTH  # no RecursionError at any depth


@pytest.mark.parametrize("kind", ["dict", "list"])
def test_every_way_in_refuses_a_payload_past_the_limit(store: Store, kind: str) -> None:
    for depth in (MAX_PAYLOAD_DEPTH + 1, 990, 200_000):
        too_deep = {"body": nested(depth - 1, kind)}
        message = f"payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels"
        with pytest.raises(ValueError, match=message):
            store.ingest("hook", "deep", too_deep, now=1)
        with pytest.raises(ValueError, match=message):
            store.ingest_many([("hook", "fine", {}), ("hook", "deep", too_deep)], now=1)
        with pytest.raises(ValueError, match=message):
            store.ingest_deliveries([("hook", "deep", too_deep, None)], now=1)
        with pytest.raises(ValueError, match=f"timer payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels"):
            store.add_timer("deep", 10, too_deep)
    assert store.events() == [] and store.timers() == []


@pytest.mark.parametrize("kind", ["dict", "list"])
def test_every_reader_handles_a_payload_at_the_limit(store: Store, kind: str) -> None:
    deepest = nested(MAX_PAYLOAD_DEPTH, kind)
    assert store.ingest("hook", "at-limit", deepest, now=1)
    store.add_timer("at-limit", 5, {"body": nested(MAX_PAYLOAD_DEPTH - 1, kind)})
    assert store.run_scheduler(now=5) == 1
    for event in store.events():
        assert payload_depth(event.payload) == MAX_PAYLOAD_DEPTH
        # What the CLI and the console do with a payload: copy the record, print it compact, indented, sorted.
        record = dataclasses.asdict(event)
        for text in (json.dumps(record), json.dumps(record, indent=2, ensure_ascii=False),
                     json.dumps(event.payload, indent=2, sort_keys=True)):
            assert json.loads(text) in (record, event.payload)


def test_a_payload_that_contains_itself_is_refused_by_the_depth_check_before_it_is_encoded(store: Store) -> None:
    # base.dumps_shaped keeps no table of the containers it has seen (json's circular check): it relies on this.
    looped: dict[str, Any] = {"a": [1]}
    looped["a"].append(looped)
    with pytest.raises(ValueError, match=f"nested deeper than {MAX_PAYLOAD_DEPTH} levels"):
        store.ingest("hook", "loop", looped, now=1)
    assert store.find_event("hook", "loop") is None


@pytest.mark.parametrize("value", [{"a": 1, "b": [1, 2.5, None, True, "é\u2028\"x"], "c": {"d": ["e", {}]}},
                                   "text", 5, None, 1.5, [], {}, ("t", 1), nested(MAX_PAYLOAD_DEPTH)])
def test_the_payload_encoder_writes_what_json_writes(value: Any) -> None:
    assert dumps_shaped(value) == dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
