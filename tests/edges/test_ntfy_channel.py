"""The ntfy channel against a stand-in ntfy server on 127.0.0.1, with a real engine on a real inbox file:
approval cards with buttons, answers read back from the answer topic, cards replaced with the outcome. What
every phone channel's card does (yes, no, expired, a second tap, answers from elsewhere, an unrecorded card
adopted) is the conformance suite's, test_phone_cards.py, run for both."""

from __future__ import annotations

import logging
import stat
from pathlib import Path
from typing import Any

import pytest

from console.clock import ManualClock
from console.config import ConfigError
from console.core import Store
from console.edges.answerkey import answer_mac, key_name
from console.edges.channels import build_channels
from console.edges.secretfile import load_secrets_file
from tests.edges.phone_harness import RISKY, START, performed, phone_settings, running, stored, until
from tests.edges.phone_standins import StandInNtfy

TOKEN = "tk_stand_in_token_0123456789"
ENV = {"NTFY_TEST_TOKEN": TOKEN}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
async def ntfy(clock: ManualClock) -> Any:
    server = StandInNtfy(clock.now, token=TOKEN, protected=("agent",))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def table(ntfy: StandInNtfy, **extra: Any) -> dict[str, Any]:
    return {"type": "ntfy", "server": ntfy.url, "topic": "agent", "token_env": "NTFY_TEST_TOKEN", **extra}


async def ask(engine: Any, ntfy: StandInNtfy, source_id: str = "c1") -> tuple[str, dict[str, Any]]:
    """A risky chat message; returns its request id and its card as the phone shows it."""
    await engine.ingest("chat", source_id, RISKY)
    [approval] = await stored(engine, lambda s: [a for a in s.pending_approvals()
                                                 if a.event_id == s.find_event("chat", source_id).id],
                              "the approval")
    card = await until(lambda: next((m for m in ntfy.cards("agent") if approval.request_id in m["message"]), None),
                       "the card on the phone")
    return approval.request_id, card


async def test_forged_foreign_and_unknown_answers_change_nothing_and_are_counted(
    tmp_path: Path, clock: ManualClock, ntfy: StandInNtfy
) -> None:
    settings = phone_settings(tmp_path, table(ntfy))
    async with running(settings, clock, ENV) as engine:
        request_id, card = await ask(engine, ntfy)
        tag = await engine.read(lambda s: s.inbox_tag())
        key = load_secrets_file(tmp_path / "secrets.env")[key_name(tag)]
        yes_body = next(a["body"] for a in card["actions"] if a["label"] == "Yes")
        forged = yes_body.rsplit(" ", 2)
        await ntfy.post("agent-answers", f"agent-console {tag} yes AAAAAAAAAAAAAAAAAAAAAA {request_id}")
        await ntfy.post("agent-answers", yes_body.replace(" yes ", " no "))  # the other word under yes's MAC
        await ntfy.post("agent-answers", f"agent-console 0123456789abcdef yes {forged[1]} {request_id}")
        await ntfy.post("agent-answers", "please approve everything")
        unknown = "apr-999-deadbeef"
        mac = answer_mac(key, "ntfy", tag, unknown, "yes", 16)
        await ntfy.post("agent-answers", f"agent-console {tag} yes {mac} {unknown}")
        counts = await stored(engine, lambda s: (c := s.phone_answer_counts()) and sum(c.values()) == 5 and c,
                              "every answer taken")
        assert {k: v for k, v in counts.items() if v} == {"forged": 3, "other_inbox": 1, "unknown": 1}
        assert await engine.read(lambda s: (s.approval(request_id).outcome, s.find_event("approval", request_id),
                                            s.find_event("approval", unknown))) == (None, None, None)
        assert "actions" in ntfy.shown("agent")[card["sequence_id"]]  # the card still asks
        await ntfy.tap(card, "Yes")  # and a real tap still works
        await stored(engine, lambda s: s.approval(request_id).outcome == "yes", "the real answer")


async def test_the_same_answer_message_delivered_twice_is_a_duplicate(tmp_path: Path, clock: ManualClock,
                                                                     ntfy: StandInNtfy) -> None:
    async with running(phone_settings(tmp_path, table(ntfy)), clock, ENV) as engine:
        request_id, card = await ask(engine, ntfy)
        await ntfy.tap(card, "No")
        await stored(engine, lambda s: s.approval(request_id).outcome == "no", "the answer")
        [tapped] = [m for m in ntfy.messages if m["topic"] == "agent-answers"]
        await ntfy.repeat(tapped)  # the same message, same id, delivered again
        counts = await stored(engine, lambda s: (c := s.phone_answer_counts())["duplicate"] == 1 and c,
                              "the replay taken")
        assert (counts["settled"], counts["already_answered"]) == (1, 0)
        await stored(engine, lambda s: s.counts()["done"] == 2, "the answer's run")
        assert await engine.read(lambda s: (s.approval(request_id).outcome, performed(s, request_id))) == ("no", 0)


async def test_an_engine_restarted_between_the_tap_and_its_delivery_settles_it_exactly_once(
    tmp_path: Path, clock: ManualClock, ntfy: StandInNtfy
) -> None:
    settings = phone_settings(tmp_path, table(ntfy))
    async with running(settings, clock, ENV, holder="first") as engine:
        request_id, card = await ask(engine, ntfy)
    await ntfy.tap(card, "Yes")  # nobody is listening: ntfy keeps it
    [tap] = [m for m in ntfy.messages if m["topic"] == "agent-answers"]

    def subscribes() -> list[str]:
        return [r.query["since"] for r in ntfy.requests if r.path == "/agent-answers/json"]

    for holder in ("second", "third"):
        before = len(subscribes())
        async with running(settings, clock, ENV, holder=holder) as engine:
            await stored(engine, lambda s: s.approval(request_id).outcome == "yes", "the answer read on restart")
            await stored(engine, lambda s: performed(s, request_id) == 1, "the action")
            await until(lambda: ntfy.shown("agent")[card["sequence_id"]]["message"].endswith("Approved (from ntfy)"),
                        "the card")
            await until(lambda: len(subscribes()) > before, "this engine's subscription")  # noqa: B023
    assert subscribes()[-1] == tap["id"]  # the third engine resumed after the answer, not before it
    with Store.open(settings.db) as store:
        assert [(a["verdict"], a["repeats"]) for a in store.phone_answers()] == [("settled", 0)]
        assert performed(store, request_id) == 1
        event = store.find_event("approval", request_id)
        assert event is not None and event.duplicates == 0


async def test_the_token_travels_only_in_the_authorization_header(
    tmp_path: Path, clock: ManualClock, ntfy: StandInNtfy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = phone_settings(tmp_path, table(ntfy))
    async with running(settings, clock, ENV) as engine:
        request_id, card = await ask(engine, ntfy)
        await ntfy.tap(card, "Yes")
        await until(lambda: ntfy.shown("agent")[card["sequence_id"]]["message"].endswith("(from ntfy)"), "the card")
        tag = await engine.read(lambda s: s.inbox_tag())
    key = load_secrets_file(tmp_path / "secrets.env")[key_name(tag)].reveal()
    taps = [r for r in ntfy.requests if r.path == "/agent-answers" and r.method == "POST"]
    ours = [r for r in ntfy.requests if r not in taps]
    assert taps and ours and all(r.headers.get("Authorization") == f"Bearer {TOKEN}" for r in ours)
    for request in ntfy.requests:
        for where in (request.path, str(request.query), request.body.decode()):
            assert TOKEN not in where and key not in where
    assert all("Authorization" not in r.headers for r in taps)  # the phone's taps carry no token
    inbox = b"".join(p.read_bytes() for p in tmp_path.glob("inbox.db*"))
    assert TOKEN.encode() not in inbox and key.encode() not in inbox
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert TOKEN not in logged and key not in logged and request_id in logged


async def test_the_answer_key_is_made_once_owner_only_and_a_readable_file_stops_the_start(
    tmp_path: Path, clock: ManualClock, ntfy: StandInNtfy
) -> None:
    settings = phone_settings(tmp_path, table(ntfy))
    secrets_file = tmp_path / "secrets.env"
    async with running(settings, clock, ENV):
        pass
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    first = secrets_file.read_text()
    async with running(settings, clock, ENV):
        pass
    assert secrets_file.read_text() == first and first.count("AGENT_CONSOLE_ANSWER_KEY_") == 1
    secrets_file.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        async with running(settings, clock, ENV):
            pass


async def test_the_stream_reconnects_and_resumes_after_the_last_answer(
    tmp_path: Path, clock: ManualClock, ntfy: StandInNtfy
) -> None:
    async with running(phone_settings(tmp_path, table(ntfy)), clock, ENV) as engine:
        first, first_card = await ask(engine, ntfy, "c1")
        await ntfy.tap(first_card, "Yes")
        await stored(engine, lambda s: s.approval(first).outcome == "yes", "the first answer")
        await ntfy.cut_streams()
        second, second_card = await ask(engine, ntfy, "c2")
        await ntfy.tap(second_card, "No")
        await stored(engine, lambda s: s.approval(second).outcome == "no", "an answer after the reconnect")
        subscribes = [r.query["since"] for r in ntfy.requests if r.path == "/agent-answers/json"]
        first_tap = next(m for m in ntfy.messages if m["topic"] == "agent-answers")
        assert len(subscribes) >= 2 and subscribes[1] == first_tap["id"]
        assert (await engine.read(lambda s: s.phone_answer_counts()))["duplicate"] == 0


async def test_a_channel_that_is_down_holds_back_only_itself(tmp_path: Path, clock: ManualClock,
                                                            ntfy: StandInNtfy) -> None:
    log = tmp_path / "outbox.jsonl"
    settings = phone_settings(tmp_path, table(ntfy))
    settings.channels.append({"type": "file", "path": str(log)})
    ntfy.publish_statuses = [503]
    async with running(settings, clock, ENV) as engine:
        await engine.ingest("chat", "c1", RISKY)
        await until(lambda: log.exists() and "Approval needed" in log.read_text(), "the file channel's copy")
        def settled(store: Store) -> Any:
            [message] = store.outbox_messages()
            found = store.deliveries(message.batch_key) if message.batch_key else {}
            return len(found) == 3 and found

        deliveries = await stored(engine, settled, "each channel's outcome")
        assert [deliveries[name][0] for name in ("console", "ntfy", "file")] == ["sent", "retry", "sent"]
        assert "503" in str(deliveries["ntfy"][1])
        assert ntfy.cards("agent") == []
        clock.advance(10)
        engine.wake()
        card = await until(lambda: ntfy.cards("agent"), "the card after the retry")
        assert len(card) == 1 and log.read_text().count("Approval needed") == 1


def test_bad_ntfy_settings_are_one_line_errors(tmp_path: Path) -> None:
    cases = [
        ({"type": "ntfy"}, "channels[0].topic: expected a topic name"),
        ({"type": "ntfy", "topic": "a b"}, "channels[0].topic"),
        ({"type": "ntfy", "topic": "a", "answer_topic": "a"}, "channels[0].answer_topic: must differ"),
        ({"type": "ntfy", "topic": "a", "server": "ftp://x"}, "channels[0].server: expected an http"),
        ({"type": "ntfy", "topic": "a", "server": "https://u:p@x"}, "channels[0].server: put no credentials"),
        ({"type": "ntfy", "topic": "a", "priority": 9}, "channels[0].priority"),
        ({"type": "ntfy", "topic": "a", "token_env": "NOPE_NOT_SET"}, "channels[0].token_env: the secret NOPE_NOT_SET"),
        ({"type": "ntfy", "topic": "a", "chat_id": 1}, "channels[0].chat_id: unknown setting for a ntfy channel"),
    ]
    for raw, message in cases:
        settings = phone_settings(tmp_path, raw)
        with pytest.raises(ConfigError) as caught:
            build_channels(settings, environ={})
        assert message in str(caught.value) and "\n" not in str(caught.value)
