"""What the phone channels (ntfy, Telegram) share: an outbox channel whose approval announcements become cards
with Yes / No buttons, a listener that takes the answers back, and a card keeper that replaces each card with
the outcome that stands, whoever settled it (a tap, the console, the CLI, the expiry).

A phone channel runs inside the engine, on its event loop, through a narrow host (PhoneHost):

- send(batch) is a coroutine the dispatcher awaits on the engine's loop (bounded in time), so the HTTP calls
  share one aiohttp session and no thread waits for them. Each message it delivers is recorded with the
  service's handle, so a batch retried after a failure (or a restart) skips what already reached the phone.
- the listener (ntfy's JSON stream, Telegram's getUpdates long poll) reconnects with backoff, resumes from the
  cursor stored in the inbox, and takes each answer through Store.take_phone_answer: the one answer path,
  the ledger of service ids and the cursor in one transaction.
- the card keeper wakes on every change to the inbox and replaces the cards whose approval has settled,
  retrying a failed update with backoff. A channel that is down holds back only itself.

Only the engine holding the lease listens and keeps cards: a standby console would otherwise compete for the
same updates. Every write a listener makes (its cursor with what it read, an answer, a pairing, its health) is
fenced like a run's (ListenerFence): checked against the engine's lease holder and generation in its own
transaction, so a listener whose engine lost the lease while a read was under way writes nothing, and its
successor reads the same updates from the stored cursor.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from console.clock import Clock
from console.core import Approval, Batch, PhoneAnswer, PhoneCard, SendError, StaleGeneration, Store
from console.core.phone import AGAIN
from console.edges.answerkey import answer_key, answer_mac, mac_matches
from console.edges.secretfile import Secret
from console.notices import NoticeKind
from console.textsafe import terminal_safe_lines
from console.timefmt import via_in_words

if TYPE_CHECKING:
    import aiohttp

T = TypeVar("T")
log = logging.getLogger("agent_console.phone")

# A long poll asks the service to hold it at most this much less than the lease it is opened under has left: the
# inbox's clock counts whole seconds, and the request takes its time to get there.
POLL_MARGIN = 2

OUTCOME_WORDS = {"yes": "Approved", "no": "Declined", "expired": "Expired"}
# What a tap is told back (Telegram shows it on the phone at once).
VERDICT_WORDS = {"forged": "Not accepted: this button is not from this agent",
                 "unknown": "This request is not known here",
                 "other_inbox": "Not accepted: this button is for another agent",
                 "wrong_chat": "Not accepted: only the owner's chat may answer",
                 "duplicate": "Already taken"}


class PhoneHost(Protocol):
    """What a phone channel needs from the engine that runs it."""

    @property
    def clock(self) -> Clock: ...

    @property
    def stopping(self) -> bool: ...

    @property
    def mode(self) -> str: ...

    @property
    def holder(self) -> str: ...

    @property
    def held_until(self) -> int | None:
        """Until when the lease the engine holds lasts (the inbox's clock); None while it holds none."""
        ...

    @property
    def gen(self) -> int | None:
        """The lease generation the engine holds (None: none)."""
        ...

    async def read(self, fn: Callable[[Store], T]) -> T: ...

    async def write(self, fn: Callable[[Store], T]) -> T: ...

    def wake_event(self) -> asyncio.Event: ...

    async def sleep(self, wake: asyncio.Event, seconds: float) -> None: ...

    def seconds_until(self, when: int | None) -> float: ...

    def note_error(self, message: str) -> None: ...

    def publish(self, kind: NoticeKind, detail: str = "") -> None: ...


class ListenerFence:
    """The lease a listener writes under. Each write carries the engine's holder and generation, and the inbox
    checks them in the write's own transaction (refused: StaleGeneration, recorded); the generation refused is
    remembered, so the listener stops reading (lost() is True) until its engine holds the lease again under
    another generation, rather than reading updates it may not store (and, on Telegram, polling against its
    successor's getUpdates)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lost_gen: int | None = None
        self._wake: asyncio.Event | None = None  # the engine's wake-ups: a change of its lease among them

    def lost(self, host: PhoneHost) -> bool:
        return host.gen is None or host.gen == self.lost_gen

    def holding(self, host: PhoneHost) -> bool:
        """The engine holds the lease, active and not stopping, and it has not lapsed by the engine's own count
        (a process that was frozen wakes up past its lease before its worker has heard it is gone)."""
        until = host.held_until
        return (host.mode == "active" and not host.stopping and not self.lost(host) and until is not None
                and host.clock.now() < until)

    def poll_seconds(self, host: PhoneHost, wanted: int) -> int | None:
        """How long a long poll opened now may ask the service to hold it: never longer than the lease it is
        opened under has left, less POLL_MARGIN, so the service has let go of it before anyone can take the lease
        over, even when this process is frozen (SIGSTOP, a suspended laptop) with the poll open and cannot close
        it. None: the engine holds no lease to poll under."""
        until = host.held_until
        if until is None or not self.holding(host):
            return None
        return max(0, min(wanted, until - host.clock.now() - POLL_MARGIN))

    def _wake_of(self, host: PhoneHost) -> asyncio.Event:
        if self._wake is None:
            self._wake = host.wake_event()
        return self._wake

    async def pause(self, host: PhoneHost, seconds: float) -> None:
        """Wait for seconds, or until the engine wakes (a commit, a change of its lease)."""
        await host.sleep(self._wake_of(host), seconds)

    async def hold(self, host: PhoneHost, call: Coroutine[Any, Any, T]) -> T:
        """Await a long poll only while the engine holds the lease it was opened under: the moment the lease is
        lost, the engine stalls or stops, or the lease runs out unrenewed, the poll is cancelled (its connection
        closed: the service lets go of it at once, and the new holder's poll meets no conflict) and
        StaleGeneration raised."""
        gen, wake = host.gen, self._wake_of(host)
        poll = asyncio.ensure_future(call)
        try:
            while True:
                if not self.holding(host) or host.gen != gen:
                    raise StaleGeneration(f"{self.name}: the engine stopped holding the lease; its long poll closed")
                woken = asyncio.ensure_future(wake.wait())
                done, _ = await asyncio.wait({poll, woken}, timeout=host.seconds_until(host.held_until),
                                             return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
                if poll in done:
                    return poll.result()
                wake.clear()
        finally:
            if not poll.done():
                poll.cancel()
                await asyncio.gather(poll, return_exceptions=True)

    async def write(self, host: PhoneHost, fn: Callable[[Store, str, int], T]) -> T:
        gen, holder = host.gen, host.holder
        if gen is None or gen == self.lost_gen:
            raise StaleGeneration(f"{self.name}: the engine holds no lease to listen under")
        try:
            return await host.write(lambda store: fn(store, holder, gen))
        except StaleGeneration:
            self.lost_gen = gen
            raise


def card_state_words(state: str) -> str:
    """'Approved' / 'Declined' / 'Expired', or 'Already answered: yes' after a tap on a settled approval."""
    if state.startswith(AGAIN):
        outcome = state[len(AGAIN):]
        return OUTCOME_WORDS["expired"] if outcome == "expired" else f"Already answered: {outcome}"
    return OUTCOME_WORDS.get(state, state)


def card_text(body: str, state: str, via: str | None) -> str:
    """The announcement with its final state under it, saying where the answer came from."""
    words = card_state_words(state)
    if via and not state.startswith(AGAIN) and state != "expired":
        words += f" ({via_in_words(via)})"
    return f"{terminal_safe_lines(body)}\n\n{words}"


def tap_reply(answer: PhoneAnswer) -> str:
    """What the phone is told about its tap."""
    if answer.outcome is None:
        return VERDICT_WORDS.get(answer.verdict, "Not accepted")
    if answer.verdict == "already_answered":
        return card_state_words(AGAIN + answer.outcome)
    return OUTCOME_WORDS[answer.outcome]


def shorten(text: str, limit: int) -> str:
    """At most `limit` characters (the services cap a message's length)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(exc: BaseException) -> str:
    """A failure in words without any URL (the Bot API's URLs hold the bot token)."""
    import aiohttp

    if isinstance(exc, SendError):
        return str(exc)
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"HTTP {exc.status} {exc.message}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect to {exc.host}:{exc.port} ({exc.os_error.strerror or exc.os_error})"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, aiohttp.ClientError):
        return type(exc).__name__
    return f"{type(exc).__name__}: {exc}"


class PhoneChannel:
    """The shared half of the ntfy and Telegram channels. Subclasses post, replace and listen."""

    kind: ClassVar[str]          # the answer path these answers are recorded under: ntfy | telegram
    mac_bytes: ClassVar[int]     # how much of the HMAC a button carries
    refs_from_slots: ClassVar[bool] = False  # the service's handle of a message is the slot it was sent under
    threads: ClassVar[bool] = False  # the owner can answer a message it sent: each piece's handle is recorded

    def __init__(self, name: str, *, secrets_file: Path, timeout: float, at_most_once: bool = False) -> None:
        self.name = name
        self.at_most_once = at_most_once
        self.secrets_file = secrets_file
        self.timeout = timeout
        self.reconnect_base = 1.0   # seconds before the first reconnect; doubles up to reconnect_max
        self.reconnect_max = 60.0
        self.card_retry_max = 300
        self._host: PhoneHost | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._key: Secret | None = None
        self._tag = ""
        self._reached = False       # the listener got through to the service since its last failure
        self.fence = ListenerFence(name)

    # --- lifecycle --------------------------------------------------------------------------------
    async def start(self, host: PhoneHost) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """Bind to the engine's loop; returns the services to run (the listener and the card keeper).

        The answer key is read (or made) here, off the loop: a secrets file others can read is a
        ConfigError, and the engine does not start."""
        self._host = host
        self._loop = asyncio.get_running_loop()
        self._tag = await host.read(lambda store: store.inbox_tag())
        self._key = await asyncio.to_thread(answer_key, self.secrets_file, self._tag)
        import aiohttp  # loaded here, when the channel starts: not before the console's first frame

        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        await self.prepare()
        return [(f"{self.name}-answers", self._listen_forever()), (f"{self.name}-cards", self._keep_cards())]

    async def prepare(self) -> None:
        """Anything a channel does once before its services start."""

    async def stop(self) -> None:
        session, self._session = self._session, None
        self._loop = None
        if session is not None:
            await session.close()

    @property
    def host(self) -> PhoneHost:
        if self._host is None:
            raise SendError(f"{self.name}: the channel has not been started by an engine", permanent=False)
        return self._host

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise SendError(f"{self.name}: the channel is not running", permanent=False)
        return self._session

    # --- signing --------------------------------------------------------------------------------
    def mac(self, request_id: str, answer: str) -> str:
        assert self._key is not None, "started channels have their key"
        return answer_mac(self._key, self.kind, self._tag, request_id, answer, self.mac_bytes)

    def verdict_of(self, tag: str, request_id: str, answer: str, mac: str) -> str | None:
        """Why a signed answer is refused (other_inbox, forged), or None when it is this inbox's own."""
        if tag != self._tag:
            return "other_inbox"
        assert self._key is not None
        if not mac_matches(self._key, self.kind, self._tag, request_id, answer, self.mac_bytes, mac):
            return "forged"
        return None

    # --- the outbox side (awaited by the dispatcher, on the engine's loop) ---------------------------
    async def send(self, batch: Batch) -> None:
        """Deliver a batch, bounded in time. A failure of any kind is this channel's SendError (retried, unless
        the service refused for good): the dispatcher records it against this channel only."""
        if self._loop is None or self._loop is not asyncio.get_running_loop() or self._host is None:
            raise SendError(f"{self.name}: the channel is not running", permanent=False)
        deadline = asyncio.timeout(self.timeout * (len(batch.bodies) + 1) + 5)
        try:
            async with deadline:
                await self._deliver(batch)
        except SendError:
            raise
        except Exception as exc:  # a network or library error is this channel's failure, retried
            if deadline.expired():
                raise SendError(f"{self.name}: sending timed out", permanent=False) from None
            raise SendError(f"{self.name}: {describe(exc)}", permanent=False) from None

    async def _deliver(self, batch: Batch) -> None:
        host = self.host
        # What reached the phone on an earlier try of this batch is skipped; a batch on its first try has none.
        sent_before: set[int] = set()
        if batch.attempt > 1 and batch.message_ids:
            ids = list(batch.message_ids)
            refs = await host.read(lambda s: [s.phone_sent_ref(self.name, outbox_id) for outbox_id in ids])
            sent_before = {outbox_id for outbox_id, ref in zip(ids, refs, strict=True) if ref is not None}
        for index, body in enumerate(batch.bodies):
            outbox_id = batch.message_ids[index] if index < len(batch.message_ids) else None
            if outbox_id not in sent_before:
                await self._deliver_one(batch, index, body)

    @property
    def slot_prefix(self) -> str:
        """An outbox message's slot is this prefix and its id (ntfy's sequence id for it)."""
        return f"{self._tag}-"

    async def _deliver_one(self, batch: Batch, index: int, body: str) -> None:
        host = self.host
        body = terminal_safe_lines(body)  # what reaches a phone shows its invisible and bidi characters as escapes
        outbox_id = batch.message_ids[index] if index < len(batch.message_ids) else None
        slot = f"{self.slot_prefix}{outbox_id}" if outbox_id is not None else f"{batch.key}-{index}"
        request_id = batch.approval_of(index)
        approval = None if request_id is None else await host.read(lambda s: s.approval(request_id))
        shown: str | None = None
        if approval is None:
            # A run's reply to a chat source's message goes back to that conversation (the outbox's reply_to).
            pieces = await self.post(body, slot=slot, urgent=batch.urgent, reply_to=batch.reply_to_of(index),
                                     outbox_id=outbox_id, retried=batch.attempt > 1,
                                     owner_only=batch.owner_only(index))
        elif approval.outcome is None:
            pieces, shown = [await self.post_card(body, approval, slot=slot, owner_only=batch.owner_only(index))], "ask"
        else:  # settled before its card went out: sent as it ends, without buttons
            shown = approval.outcome
            pieces = await self.post(card_text(body, shown, approval.answered_via), slot=slot, urgent=False,
                                     owner_only=batch.owner_only(index))
        if outbox_id is not None:
            now = host.clock.now()
            await host.write(lambda s: s.record_phone_message(self.name, outbox_id, pieces[0], now=now,
                                                              request_id=request_id, shown=shown,
                                                              pieces=pieces if self.threads else ()))

    # --- what each service does -----------------------------------------------------------------
    async def post(self, text: str, *, slot: str, urgent: bool, reply_to: str | None = None,
                   outbox_id: int | None = None, retried: bool = False, owner_only: bool = False) -> list[str]:
        """Send a message; returns the service's handles of the pieces it went in (one, unless the service cut it;
        the first is the message's handle). SendError says what failed. reply_to: the chat message
        ('<source>:<chat>:<message>') a run's reply answers; a channel that is not that source ignores it.
        outbox_id: the outbox message it is, and retried: an earlier try may have sent some of its pieces (a
        channel that cuts messages records each piece as it goes, and sends only the rest). owner_only: only the
        owner's direct chat may read it, never a group (OWNER_ONLY)."""
        raise NotImplementedError

    async def post_card(self, body: str, approval: Approval, *, slot: str, owner_only: bool = False) -> str:
        """Send an approval's announcement with Yes / No buttons; returns the handle. owner_only: as for post."""
        raise NotImplementedError

    async def replace_card(self, card: PhoneCard, text: str) -> None:
        """Show `text` in place of the card, without buttons."""
        raise NotImplementedError

    async def listen(self) -> None:
        """Take answers until the connection ends (ntfy) or for one long poll (Telegram)."""
        raise NotImplementedError

    # --- the services ---------------------------------------------------------------------------
    async def take(self, answer_key_: str, *, cursor: str, request_id: str | None, answer: str | None,
                   refused: str | None, tapped: str | None = None, kept: Sequence[tuple[str, int]] = ()
                   ) -> PhoneAnswer:
        """One answer through the one answer path (with the ledger and the cursor), then said in the log.
        tapped: the service's handle of the message tapped, when the service says it. kept: the webhook update
        it came in, marked taken with it."""
        host = self.host
        now = host.clock.now()
        taken = await self.fence.write(host, lambda s, holder, gen: s.take_phone_answer(
            self.name, answer_key_, via=self.kind, now=now, request_id=request_id, answer=answer,
            refused=refused, cursor=cursor, tapped=tapped,
            ref_prefix=self.slot_prefix if self.refs_from_slots else None, holder=holder, gen=gen, kept=kept))
        level = logging.INFO if taken.verdict in ("settled", "late", "already_answered") else logging.WARNING
        log.log(level, "%s: answer %s for %s: %s%s", self.name, answer or "?", request_id or "?", taken.verdict,
                f" ({taken.outcome} stands)" if taken.outcome else "")
        host.publish("approvals", f"{request_id}: {taken.verdict} ({self.name})")
        return taken

    async def _listen_forever(self) -> None:
        host = self.host
        wake = host.wake_event()
        failures = 0
        while not host.stopping:
            if host.mode != "active" or self.fence.lost(host):  # only the lease holder listens
                await host.sleep(wake, 1.0)
                continue
            self._reached = False
            try:
                await self.listen()
                failures = 0
                continue
            except asyncio.CancelledError:
                raise
            except StaleGeneration as exc:  # the lease went while a read was under way: nothing of it was stored
                log.info("%s: stopped listening: %s", self.name, exc)
                continue
            except Exception as exc:  # a service or network failure: reconnect after a backoff
                failures = 1 if self._reached else failures + 1
                delay = min(self.reconnect_max, self.reconnect_base * 2 ** (failures - 1)) * random.uniform(0.5, 1)
                host.note_error(f"{self.name}: listening for answers failed ({describe(exc)}); "
                                f"reconnecting in {delay:.1f} s")
            await asyncio.sleep(delay)

    async def _keep_cards(self) -> None:
        host = self.host
        wake = host.wake_event()
        while not host.stopping:
            next_at: int | None = None
            if host.mode == "active":
                try:
                    next_at = await self._update_due_cards()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the inbox was busy or closed: looked at again on the next wake
                    host.note_error(f"{self.name}: card updates: {describe(exc)}")
            await host.sleep(wake, host.seconds_until(next_at))

    async def _update_due_cards(self) -> int | None:
        """Replace the cards that are due; returns when the next one is (None: none is waiting)."""
        host = self.host
        now = host.clock.now()
        due = await host.read(lambda s: s.phone_cards_due(self.name, now=now))
        for card in due:
            await self._update_card(card)
        next_at = await host.read(lambda s: s.next_phone_card_at(self.name))
        if not due and next_at is not None and next_at <= now:
            return now + 1  # due by the count but not listed (its message is gone): never a busy loop
        return next_at

    async def _update_card(self, card: PhoneCard) -> None:
        host = self.host
        try:
            await self.replace_card(card, card_text(card.body, card.wanted, card.answered_via))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = describe(exc)
            permanent = isinstance(exc, SendError) and exc.permanent
            now = host.clock.now()
            retry_at = None if permanent else now + min(self.card_retry_max, 2 ** card.tries)
            await host.write(lambda s: s.phone_card_failed(self.name, card.outbox_id, error, now=now,
                                                          retry_at=retry_at))
            host.note_error(f"{self.name}: could not update the card of {card.request_id}: {error}"
                            + ("" if retry_at is None else f"; trying again in {retry_at - now} s"))
            return
        now = host.clock.now()
        await host.write(lambda s: s.phone_card_shown(self.name, card.outbox_id, card.wanted, now=now))
        log.info("%s: card of %s now says %s", self.name, card.request_id, card_state_words(card.wanted))


async def read_json(response: aiohttp.ClientResponse, limit: int = 1024 * 1024) -> Any:
    """A response's JSON body, read up to a limit (a service answering with something huge is an error)."""
    raw = await response.content.read(limit + 1)
    if len(raw) > limit:
        raise SendError(f"the answer was over {limit} bytes", permanent=False)
    try:
        return json.loads(raw)
    except ValueError:
        raise SendError(f"the answer (HTTP {response.status}) was not JSON", permanent=False) from None
