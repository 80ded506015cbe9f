"""Each model's cooldown (issue 34): written fenced by the lease holder, kept in the inbox (both backends), read by
anyone; a notice about a failing model and a fallback's announcement go out once."""

from __future__ import annotations

from console.core import Store
from console.modelspec import ModelSpec, model_rows

NOW = 1_800_000_000
CHAIN = [ModelSpec("primary", "anthropic", "claude-sonnet-5-5"), ModelSpec("local", "openai", "qwen3")]


def test_a_cooldown_is_kept_read_back_and_ends_with_an_answer(store: Store) -> None:
    gen = store.acquire("w1", now=NOW)
    assert gen is not None
    assert store.set_model_health("w1", gen, "primary:abc", "primary", "cooling", now=NOW, until=NOW + 30,
                                  reason="rate limited (429)", failing_since=NOW)
    (row,) = store.model_health()
    assert (row["name"], row["state"], row["until"], row["failing_since"]) == ("primary", "cooling", NOW + 30, NOW)
    assert model_rows(CHAIN, store.model_health(), now=NOW + 5) == [
        {"name": "primary", "state": "cooling", "until": NOW + 30, "reason": "rate limited (429)",
         "model": "claude-sonnet-5-5", "protocol": "anthropic", "in_use": False},
        {"name": "local", "state": "ready", "until": None, "reason": None, "model": "qwen3", "protocol": "openai",
         "in_use": True}]
    # Its cooldown over, it reads ready again and is the one in use, before anyone writes.
    assert [(r["state"], r["in_use"]) for r in model_rows(CHAIN, store.model_health(), now=NOW + 30)] == [
        ("ready", True), ("ready", False)]
    assert store.model_answered("w1", gen, "primary:abc", "primary", now=NOW + 31)
    (row,) = store.model_health()
    assert (row["state"], row["until"], row["reason"], row["failing_since"]) == ("ready", None, None, None)


def test_a_stale_generation_cannot_write_a_cooldown(store: Store) -> None:
    old = store.acquire("w1", now=NOW)
    assert old is not None
    store.release("w1", old, now=NOW)
    new = store.acquire("w2", now=NOW + 1)
    assert new is not None and new != old
    assert not store.set_model_health("w1", old, "primary:abc", "primary", "paused", now=NOW + 2, reason="stale")
    assert not store.model_answered("w1", old, "primary:abc", "primary", now=NOW + 2)
    assert not store.announce_model("w1", old, "local:def", "local", "hello", now=NOW + 2, every=3600)
    assert store.model_health() == [] and store.outbox_messages() == []


def test_a_notice_goes_out_once_per_key_and_an_announcement_once_an_hour(store: Store) -> None:
    gen = store.acquire("w1", now=NOW)
    assert gen is not None
    for n in range(2):
        assert store.set_model_health("w1", gen, "primary:abc", "primary", "paused", now=NOW + n, reason="401",
                                      notice="Model primary cannot answer: 401.", notice_key="k:key")
    assert [(m.body, m.urgent) for m in store.outbox_messages()] == [("Model primary cannot answer: 401.", True)]
    said = []
    for t in (0, 10, 3599, 3600):
        holding = store.acquire("w1", now=NOW + t)  # renewed, or taken again once it lapsed
        assert holding is not None
        said.append(store.announce_model("w1", holding, "local:def", "local", "Fallback local is answering.",
                                         now=NOW + t, every=3600))
    assert said == [True, False, False, True]
    assert sum(m.body == "Fallback local is answering." for m in store.outbox_messages()) == 2
