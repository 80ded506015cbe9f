"""`takeovers` counts a lapsed holder replaced by another holder, and nothing else: ordinary restarts
(release, then acquire again) and a holder coming back to its own lapsed lease are not takeovers."""

from __future__ import annotations

from console.core import Store

T = 1_000_000
TTL = 120  # the Store's default lease_ttl


def kinds(store: Store) -> list[str]:
    return [kind for _, kind, *_ in reversed(store.lease_log(100))]


def test_only_a_lapsed_holder_replaced_by_another_is_a_takeover(store: Store) -> None:
    gen = store.acquire("engine-a", now=T)
    assert gen == 1
    assert store.release("engine-a", gen, now=T + 10)                  # ctrl+q
    gen = store.acquire("engine-a", now=T + 20)                        # the same console opened again
    assert gen == 2 and store.release("engine-a", gen, now=T + 30)
    gen = store.acquire("engine-b", now=T + 40)                        # another process, after a release
    assert gen == 3 and store.takeover_count() == 0
    gen = store.acquire("engine-b", now=T + 40 + TTL + 1)              # its own lapsed lease (a stall)
    assert gen == 4 and store.takeover_count() == 0
    gen = store.acquire("engine-c", now=T + 40 + 2 * TTL + 2)          # b lapsed again and c replaced it
    assert gen == 5 and store.takeover_count() == 1
    assert kinds(store) == ["acquire", "release", "acquire", "release", "acquire", "acquire", "takeover"]
    assert store.status(now=T + 1_000)["takeovers"] == 1


def test_restarts_an_older_version_logged_as_takeovers_are_not_counted(store: Store) -> None:
    # What versions before the fix wrote: every new generation after the first was a 'takeover'.
    rows = [(T, "acquire", "a", 1, None), (T + 1, "release", "a", 1, "a"), (T + 2, "takeover", "a", 2, "a"),
            (T + 3, "release", "a", 2, "a"), (T + 4, "takeover", "b", 3, "a"), (T + 500, "takeover", "b", 4, "b"),
            (T + 900, "takeover", "c", 5, "b")]
    store.connection.executemany(
        "INSERT INTO lease_log (at, kind, holder, gen, previous_holder) VALUES (?, ?, ?, ?, ?)", rows)
    assert store.takeover_count() == 1  # only c replacing b's lapsed lease
