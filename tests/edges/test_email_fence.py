"""The mail listener's writes are fenced like a run's (issue 22, a leftover of issue 23): an engine that loses the
lease while its listener is reading new mail stores none of it, and leaves it where it was in the mailbox (not
moved, not marked), for the engine now holding the lease to read. A real Dovecot, an engine in this process (its
clock, its stall), and a proxy that holds the listener's FETCH until the lease has gone."""

from __future__ import annotations

from pathlib import Path

from console.assembly import build_engine
from console.clock import ManualClock
from console.config import Settings
from console.core import Store
from console.edges.channels import build_channels
from tests.edges.phone_harness import START, stored
from tests.mail_servers import MAIL_PASSWORD, Dovecot, HoldingProxy, mail


async def test_mail_read_as_the_lease_goes_is_neither_stored_nor_moved(tmp_path: Path, dovecot: Dovecot) -> None:
    client = dovecot.client()
    client.create_folder("Done")
    client.logout()
    proxy = HoldingProxy(dovecot, hold=b"BODY.PEEK[]")  # the new message's body, fetched before its commit
    await proxy.start()
    settings = Settings(db=tmp_path / "inbox.db", lease_ttl=60, email=dovecot.email_settings(
        imap_port=proxy.port, after="move", move_to="Done"))
    clock = ManualClock(START)
    channels = build_channels(settings, clock=clock, environ={"MAIL_TEST_PASSWORD": MAIL_PASSWORD})
    engine = build_engine(settings, clock=clock, holder="mine", channels=channels, idle_cap=0.1,
                          install_defaults=False)
    await engine.start()
    try:
        await stored(engine, lambda s: s.mail_status()["last_uid"] is not None, "the first start's place")
        cursor = await engine.read(lambda s: s.mail_cursor("email"))
        # In IDLE: mail appended earlier might wait for the next IDLE's renewal to be seen.
        await stored(engine, lambda s: any(line.endswith(b"IDLE\r\n") for line in proxy.commands), "the IDLE")
        dovecot.append(mail("during the takeover", "read as the lease went"))
        assert proxy.held is not None
        await stored(engine, lambda s: proxy.held is not None and proxy.held.is_set(), "the listener's FETCH",
                     limit=40)
        engine.stall()  # its lease lapses, and another engine takes it over
        clock.advance(settings.lease_ttl + 1)
        with Store.open(settings.db) as other:
            assert other.acquire("other-engine", now=clock.now()) is not None
        proxy.release()
        await stored(engine, lambda s: s.refused_finish_count() or s.events(source="email"),
                     "the listener's write, refused or stored", limit=40)
        assert await engine.read(lambda s: s.events(source="email")) == []
        assert await engine.read(lambda s: s.mail_cursor("email")) == cursor
        [refused] = await engine.read(lambda s: s.refused_finishes())
        assert (refused.kind, refused.holder, refused.lease_holder) == ("listen", "mine", "other-engine")
    finally:
        await engine.stop()
        await proxy.stop()
    client = dovecot.client()
    client.select_folder("INBOX")
    assert len(client.search(["UNSEEN"])) == 1  # where it was: the engine holding the lease reads it from there
    client.select_folder("Done")
    assert client.search(["ALL"]) == []
    client.logout()
