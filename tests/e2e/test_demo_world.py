"""`agent-console --demo` in a real terminal, with the owner's full config in place: the demo lives in a world of its
own and touches nothing of theirs (issue 30).

The owner's config names a Telegram and an ntfy channel (stand-ins), an MCP server called `shop` that records
being started and every call (the demo's refund would land there), a webhook receiver on a fixed port, the claude
agent on a stand-in model with an API key in the environment, an OTLP endpoint for telemetry, and its own inbox.
The demo answers its approval yes (the refund runs, in the demo's own shop), and then nothing of the owner's has
seen a thing.
"""

from __future__ import annotations

import contextlib
import json
import socket
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from console.core import Store
from tests.agents.mcp_servers import THIS_FILE as RECORDING_MCP_SERVER
from tests.agents.stand_in import serve_stand_in
from tests.e2e.test_console_pty import Terminal
from tests.edges.phone_standins import StandInBotApi, StandInNtfy, _Server, served_in_a_thread
from tests.mail_servers import free_port

pexpect = pytest.importorskip("pexpect")


class Recorder(_Server):
    """Any HTTP request at all, recorded and answered 200 (an OTLP collector that only listens)."""

    def routes(self, app: web.Application) -> None:
        async def anything(request: web.Request) -> web.Response:
            return web.json_response({})

        app.router.add_route("*", "/{tail:.*}", anything)


@contextlib.contextmanager
def stand_ins() -> Iterator[tuple[StandInBotApi, StandInNtfy, Recorder]]:
    with (served_in_a_thread(StandInBotApi) as bot, served_in_a_thread(lambda: StandInNtfy(lambda: int(time.time())))
          as ntfy, served_in_a_thread(Recorder) as collector):
        # The owner's real message, waiting at Telegram: whoever takes it confirms it there.
        bot.updates.append({"update_id": 900, "message": {
            "message_id": 5, "date": int(time.time()), "text": "buy milk",
            "chat": {"id": 4242, "type": "private"}, "from": {"id": 4242, "is_bot": False, "first_name": "Me"}}})
        yield bot, ntfy, collector


def _port_listens(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _refunds_made(db: Path) -> list[str]:
    """The outcomes of the approved refund calls that went out, in the demo's inbox."""
    if not db.exists():
        return []
    with Store.open(db, read_only=True) as store:
        return [call.outcome for event in store.events(limit=1000) for call in store.tool_calls(event.id)
                if call.tool == "mcp__shop__refund" and call.decision == "approved"]


def _answered_and_resumed(db: Path) -> int:
    """Approvals answered yes whose resumed run is done, with none waiting, in the demo's inbox (0: not yet)."""
    if not db.exists():
        return 0
    with Store.open(db, read_only=True) as store:
        if store.pending_approvals():
            return 0
        answers = {event.source_id: event.status for event in store.events(source="approval", limit=1000)}
        yes = [a.request_id for a in store.resolved_approvals(1000) if a.outcome == "yes"]
        return len(yes) if all(answers.get(request) == "done" for request in yes) else 0


def _demo_folders(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("agent-console-demo-*"))


def test_the_demo_touches_nothing_of_the_owners(tmp_path: Path) -> None:
    home = tmp_path / "home"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    real_inbox = tmp_path / "real-inbox.db"
    started_log, call_log = tmp_path / "mcp-started.log", tmp_path / "mcp-calls.log"
    secrets = tmp_path / "secrets.env"
    secrets.write_text("TELEGRAM_TOKEN=123456:stand-in-token\nGITHUB_SECRET=s3cret-for-the-hooks\n")
    secrets.chmod(0o600)
    webhook_port = free_port()
    with stand_ins() as (bot, ntfy, collector), serve_stand_in() as model:
        config = home / "config" / "agent-console" / "config.toml"  # the default config file: found without --config
        config.parent.mkdir(parents=True)
        config.write_text(f"""
db = {json.dumps(str(real_inbox))}
agent = "claude"
claude_base_url = {json.dumps(model.url)}

[[channels]]
type = "telegram"
name = "phone"
token_env = "TELEGRAM_TOKEN"
chat_id = 4242
api_base = {json.dumps(bot.url)}

[[channels]]
type = "ntfy"
name = "ntfy"
server = {json.dumps(ntfy.url)}
topic = "owner-alerts"

[mcp_servers.shop]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(RECORDING_MCP_SERVER))}, "shop"]
env = {{ CALL_LOG = {json.dumps(str(call_log))}, START_LOG = {json.dumps(str(started_log))} }}

[webhooks]
enabled = true
port = {webhook_port}
secrets_file = {json.dumps(str(secrets))}

[webhooks.sources.github]
verifier = "github"
secret_env = "GITHUB_SECRET"
""")
        env = {"TMPDIR": str(tmp), "ANTHROPIC_API_KEY": "sk-ant-the-owners-real-key",
               "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url}
        term = Terminal(None, home, args=["--demo"], env=env)
        try:
            term.wait_for(lambda s: "Events" in s and "active" in s, "the demo to start and take the lease", timeout=60)
            term.send("a")  # a demo key: a chat that needs approval now, besides the script's own a few seconds on
            folders = _demo_folders(tmp)
            assert len(folders) == 1, folders
            folder = folders[0]
            assert stat.S_IMODE(folder.stat().st_mode) == 0o700

            def every_approval_answered_yes() -> bool:
                if "approval waiting" in term.text() or "approvals waiting" in term.text():
                    term.send("y")  # every approval the demo asks, answered yes
                return _answered_and_resumed(folder / "demo-inbox.db") >= 2  # the `a` key's and the script's

            term.wait_for(lambda _s: every_approval_answered_yes(), "both refunds approved and their runs done",
                          timeout=90)
            # The refund went to the demo's own shop: made there (under load the shop's start can outlast the run,
            # which then goes without it).
            if "done" in _refunds_made(folder / "demo-inbox.db"):
                orders = json.loads((folder / "shop.json").read_text())["orders"]
                assert orders["881"]["refunded"] > 0
            assert not _port_listens(webhook_port), "the demo bound the owner's webhook port"
            term.send("\x11")  # ctrl+q
            term.child.expect(pexpect.EOF, timeout=60)
        finally:
            term.child.close(force=True)
        assert term.child.exitstatus == 0, term.text()
        assert bot.requests == [], [r.path for r in bot.requests]
        assert bot.updates and bot.updates[0]["update_id"] == 900  # the owner's message still waits, unconfirmed
        assert ntfy.requests == [], [r.path for r in ntfy.requests]
        assert model.requests == [] and model.counted == []
        assert collector.requests == [], [r.path for r in collector.requests]
    assert not started_log.exists() and not call_log.exists(), "the owner's MCP server was started or called"
    assert not real_inbox.exists(), "the demo opened the owner's inbox"
    assert _demo_folders(tmp) == [], "the demo left its folder behind"
