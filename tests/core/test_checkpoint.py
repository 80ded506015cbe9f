"""The step journal of seed 003: claim -> execute -> commit, once per key across crashes and takeovers."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from console.core import OutcomeUnknown, StaleGeneration, Store
from tests.core.workers import spawn

T = 1_000_000


def lease(store: Store, holder: str, now: int) -> int:
    gen = store.acquire(holder, now=now)
    assert gen is not None, f"{holder} could not take the lease at {now}"
    return gen


def test_a_committed_step_is_skipped_on_resume(store: Store) -> None:
    calls: list[int] = []

    def call_model() -> dict[str, object]:
        calls.append(1)
        return {"summary": "three new issues", "tokens": 812}

    gen = lease(store, "A", T)
    first = store.run_once("run-7:step:0", call_model, gen=gen, now=T)
    resumed = store.run_once("run-7:step:0", call_model, gen=gen, now=T + 5)
    after_takeover = store.run_once("run-7:step:0", call_model, gen=lease(store, "B", T + 500), now=T + 500)
    assert first == ({"summary": "three new issues", "tokens": 812}, "executed")
    assert resumed == ({"summary": "three new issues", "tokens": 812}, "skipped")
    assert after_takeover == resumed
    assert len(calls) == 1
    step = store.journal_step("run-7:step:0")
    assert step is not None
    assert (step.state, step.executions, step.committed_at) == ("committed", 1, T)


def test_a_resumed_run_executes_only_the_steps_it_had_not_committed(store: Store) -> None:
    """The seed's run_agent loop: a run dies after step 1; the rerun skips 0 and 1 and does 2 and 3."""
    executed: list[int] = []

    def agent_run(holder: str, now: int, die_after: int | None) -> list[str]:
        gen = lease(store, holder, now)
        outcomes = []
        for step in range(4):
            _, how = store.run_once(f"run-9:step:{step}", lambda s=step: executed.append(s) or s, gen=gen, now=now)
            outcomes.append(how)
            if step == die_after:
                break
        return outcomes

    assert agent_run("A", T, die_after=1) == ["executed", "executed"]
    assert agent_run("B", T + 121, die_after=None) == ["skipped", "skipped", "executed", "executed"]
    assert executed == [0, 1, 2, 3]


def test_a_failing_step_drops_its_claim_so_a_retry_runs_it(store: Store) -> None:
    def broken() -> object:
        raise TimeoutError("model call timed out")

    gen = lease(store, "A", T)
    with pytest.raises(TimeoutError):
        store.run_once("run-3:step:0", broken, gen=gen, now=T)
    assert store.journal_step("run-3:step:0") is None
    assert store.run_once("run-3:step:0", lambda: "ok", gen=gen, now=T + 1) == ("ok", "executed")


def test_a_crash_between_execute_and_commit_repeats_the_step_exactly_once(tmp_path: Path, inbox_target: str) -> None:
    db, effects = inbox_target, tmp_path / "effects.log"
    Store.open(db).close()
    crasher = spawn("journal-crash", db, effects, "run-5:step:2", T)
    _, err = crasher.communicate(timeout=30)
    assert crasher.returncode == -signal.SIGKILL, err
    assert effects.read_text().splitlines() == ["run-5:step:2 gen=1"]  # the effect happened...

    with Store.open(db, lease_ttl=10) as store:
        zombie = store.journal_step("run-5:step:2")
        assert zombie is not None and (zombie.state, zombie.gen) == ("claimed", 1)  # ...the commit did not
        assert store.acquire("replacement", now=T + 5) is None  # the dead worker's lease is still live
        gen = store.acquire("replacement", now=T + 11)
        assert gen == 2

        def effect() -> str:
            with effects.open("a") as out:
                out.write(f"run-5:step:2 gen={gen}\n")
            return "mailed"

        assert store.run_once("run-5:step:2", effect, gen=gen, now=T + 11) == ("mailed", "executed")
        assert store.run_once("run-5:step:2", effect, gen=gen, now=T + 12) == ("mailed", "skipped")
        step = store.journal_step("run-5:step:2")
        assert step is not None
        assert (step.state, step.gen, step.executions, step.result) == ("committed", 2, 2, "mailed")
    assert effects.read_text().splitlines() == ["run-5:step:2 gen=1", "run-5:step:2 gen=2"]


def test_a_zombie_claim_of_an_older_generation_is_taken_over_and_its_late_result_never_counts(store: Store) -> None:
    """While generation 1 is (as far as the file knows) still executing, generation 2 takes the lapsed lease
    and runs the step at once. Generation 1 coming back learns it is fenced: its result is refused (and
    recorded), the committed result is generation 2's, and any later call of generation 1 is refused too."""
    order: list[str] = []
    gen_a = lease(store, "A", T)

    def slow_step_of_gen_1() -> str:
        order.append("gen 1 executing")
        # A replacement worker arrives while generation 1 is stuck inside the step.
        gen_b = lease(store, "B", T + 200)
        result = store.run_once("run-1:step:0", lambda: order.append("gen 2 executing") or "by gen 2",
                                gen=gen_b, now=T + 200, holder="B")
        assert result == ("by gen 2", "executed")
        return "by gen 1"

    with pytest.raises(StaleGeneration, match="lease held by another generation"):
        store.run_once("run-1:step:0", slow_step_of_gen_1, gen=gen_a, now=T, holder="A")
    assert order == ["gen 1 executing", "gen 2 executing"]
    step = store.journal_step("run-1:step:0")
    assert step is not None
    assert (step.state, step.gen, step.result, step.executions) == ("committed", 2, "by gen 2", 2)
    with pytest.raises(StaleGeneration):
        store.run_once("run-1:step:0", lambda: "again", gen=gen_a, now=T + 300, holder="A")
    refused = store.refused_finishes()
    assert [(r.kind, r.holder, r.gen, r.detail) for r in refused] == [
        ("step", "A", 1, "run-1:step:0"), ("commit", "A", 1, "run-1:step:0")]
    assert store.status(now=T + 300)["refused_finishes"] == 2


def test_a_stale_generation_cannot_claim_a_step(store: Store) -> None:
    seen: list[str] = []
    gen_a = lease(store, "A", T)
    gen_b = lease(store, "B", T + 121)  # A's lease lapsed and B took over

    def step_of_gen_2() -> str:
        with pytest.raises(StaleGeneration, match="generation 1"):
            store.run_once("run-2:step:0", lambda: seen.append("gen 1 ran it") or "x", gen=gen_a, now=T + 122,
                           holder="A")
        return "by gen 2"

    assert store.run_once("run-2:step:0", step_of_gen_2, gen=gen_b, now=T + 122, holder="B") == (
        "by gen 2", "executed")
    assert seen == []
    # The refused call's transaction recorded the refusal and nothing else: the store takes writes as before.
    assert store.ingest("chat", "after-stale", {}, now=T + 123) is True


def test_a_step_needs_a_live_lease_to_start_but_records_an_effect_if_no_newer_generation_exists(
    store: Store,
) -> None:
    """Once an effect has happened, recording it is what stops a repeat, and while the lease row still names
    this generation nobody else can have run the step. Starting a step under a lapsed lease is refused."""
    gen = lease(store, "A", T)
    assert store.run_once("s:0", lambda: "sent", gen=gen, now=T, holder="A") == ("sent", "executed")
    with pytest.raises(StaleGeneration, match="lease expired"):
        store.run_once("s:1", lambda: "sent", gen=gen, now=T + 500, holder="A")
    assert store.journal_step("s:1") is None

    def lapses_meanwhile() -> str:
        # The call outlives the lease (a closed lid), and nobody took over.
        assert store.renew("A", gen, now=T + 900) is False
        return "mailed"

    store.renew("A", gen, now=T + 100)
    assert store.run_once("s:2", lapses_meanwhile, gen=gen, now=T + 100, holder="A") == ("mailed", "executed")
    step = store.journal_step("s:2")
    assert step is not None and (step.state, step.result) == ("committed", "mailed")


def test_a_step_under_the_right_generation_but_another_holder_name_is_refused(store: Store) -> None:
    gen = lease(store, "A", T)
    with pytest.raises(StaleGeneration):
        store.run_once("k", lambda: 1, gen=gen, now=T, holder="B")
    assert store.journal_step("k") is None


def test_journal_steps_are_listed_per_event(store: Store) -> None:
    store.ingest("chat", "m-1", {}, now=T)
    event = store.events()[0]
    gen = lease(store, "A", T)
    for step in range(3):
        store.run_once(f"m-1:step:{step}", lambda s=step: s * 10, gen=gen, now=T + step, event_id=event.id)
    steps = store.journal_steps(event.id)
    assert [(s.idem_key, s.result) for s in steps] == [("m-1:step:0", 0), ("m-1:step:1", 10), ("m-1:step:2", 20)]


def test_sessions_are_saved_and_resumed(store: Store) -> None:
    state = {"messages": [{"role": "user", "content": "refund 881?"}], "pending_tool": "refund"}
    store.save_session("s-1", state, now=T)
    assert store.load_session("s-1") == state
    store.save_session("s-1", {"messages": []}, now=T + 1)
    assert store.load_session("s-1") == {"messages": []}
    assert store.load_session("nobody") is None
    assert store.delete_session("s-1") is True
    assert store.delete_session("s-1") is False


def test_a_non_json_step_result_is_committed_so_the_effect_never_repeats(store: Store) -> None:
    calls: list[int] = []

    def effect() -> object:
        calls.append(1)
        return {1, 2}  # a set: not JSON

    gen = lease(store, "A", 10)
    result, how = store.run_once("odd-result", effect, gen=gen, now=10)
    assert (result, how) == ({1, 2}, "executed")
    again, how_again = store.run_once("odd-result", effect, gen=gen, now=11)
    assert how_again == "skipped" and again == {"unserialisable_result": "{1, 2}"} and calls == [1]


def test_a_second_release_is_refused(store: Store) -> None:
    gen = store.acquire("A", now=100)
    assert gen is not None
    assert store.release("A", gen, now=101) is True
    assert store.release("A", gen, now=102) is False
    assert [kind for _, kind, *_ in store.lease_log()].count("release") == 1


# --- world-changing steps: an outcome that is not known is never redone silently (issue 18 item 5) -------------

def test_a_crash_mid_call_leaves_a_world_changing_step_unknown_and_it_is_never_run_again_unasked(
    tmp_path: Path, inbox_target: str
) -> None:
    db, effects = inbox_target, tmp_path / "effects.log"
    Store.open(db).close()
    crasher = spawn("journal-crash", db, effects, "tool:5:refund:1", T)
    _, err = crasher.communicate(timeout=30)
    assert crasher.returncode == -signal.SIGKILL, err
    assert effects.read_text().splitlines() == ["tool:5:refund:1 gen=1"]  # the effect happened; no commit

    with Store.open(db, lease_ttl=10) as store:
        gen = lease(store, "replacement", T + 11)
        calls: list[int] = []
        for now in (T + 11, T + 12):
            with pytest.raises(OutcomeUnknown, match="stopped before its answer was recorded"):
                store.run_once("tool:5:refund:1", lambda: calls.append(1), gen=gen, now=now, interrupted="unknown")
        step = store.journal_step("tool:5:refund:1")
        assert step is not None and step.state == "unknown" and step.executions == 1
        assert calls == []
        # A step the other side de-duplicates by key may be sent again under the same key.
        assert store.run_once("tool:5:refund:1", lambda: "sent again", gen=gen, now=T + 13) == ("sent again",
                                                                                                 "executed")
    assert effects.read_text().splitlines() == ["tool:5:refund:1 gen=1"]


def test_a_call_that_gets_no_answer_is_kept_unknown_not_dropped(store: Store) -> None:
    gen = lease(store, "A", T)

    def times_out() -> None:
        raise OutcomeUnknown("no answer within 60 s")

    with pytest.raises(OutcomeUnknown):
        store.run_once("tool:1:refund:1", times_out, gen=gen, now=T, event_id=None, interrupted="unknown")
    again: list[int] = []
    with pytest.raises(OutcomeUnknown, match="no answer within 60 s"):
        store.run_once("tool:1:refund:1", lambda: again.append(1), gen=lease(store, "B", T + 500), now=T + 500,
                       interrupted="unknown")
    assert again == []
    step = store.journal_step("tool:1:refund:1")
    assert step is not None and (step.state, step.result) == ("unknown", {"outcome_unknown": "no answer within 60 s"})


def test_a_step_made_for_several_events_is_found_from_each_and_its_result_is_stored_once(store: Store) -> None:
    for n in (1, 2):
        store.ingest("chat", f"m{n}", {"text": "x"}, now=T)
    first, second = sorted(e.id for e in store.events())
    gen = lease(store, "A", T)
    calls: list[int] = []

    def refund() -> dict[str, str]:
        calls.append(1)
        return {"text": "refunded"}

    done = store.run_once(f"tool:{first}:r:1", refund, gen=gen, now=T, event_id=first,
                          aliases=[(f"tool:{second}:r:1", second)], interrupted="unknown")
    assert done == ({"text": "refunded"}, "executed")
    # The second event, retried alone, makes the same call: found done, the stored result handed back.
    alone = store.run_once(f"tool:{second}:r:1", refund, gen=gen, now=T + 1, event_id=second, interrupted="unknown")
    assert alone == ({"text": "refunded"}, "skipped") and calls == [1]
    pointer = store.journal_step(f"tool:{second}:r:1")
    assert pointer is not None and pointer.result == {"same_as": f"tool:{first}:r:1"}
    assert [s.idem_key for s in store.journal_steps(second)] == [f"tool:{second}:r:1"]


def test_a_step_commits_at_the_time_its_call_returned(store: Store) -> None:
    """With the run's clock, a step's commit time is read once the call has returned: the journal says how long
    the step took (the console's run timeline draws it), where it used to say every step took no time."""
    clock = [T]

    def slow_call() -> str:
        clock[0] += 7  # the model took seven seconds to answer
        return "answered"

    gen = lease(store, "A", T)
    assert store.run_once("run-8:turn:1", slow_call, gen=gen, now=T, clock=lambda: clock[0]) == ("answered",
                                                                                                 "executed")
    step = store.journal_step("run-8:turn:1")
    assert step is not None and (step.claimed_at, step.committed_at) == (T, T + 7)
