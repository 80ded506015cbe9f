"""`agent-console --demo`: its world of its own, and the scripted traffic that moves every pane within a minute.

The world: a fresh folder (owner-only, removed on quit unless kept), the built-in settings with an inbox in it, and
an environment without the owner's secrets. It never reads the owner's config file, their AGENT_CONSOLE_* variables
or the secrets file, so it has no channel but the console, no e-mail, no webhook receiver, no MCP server but the
example shop (its orders in the folder), the offline agent, and telemetry only to the folder's own file.

The traffic is driven only through the Engine API (ingest, write), on the wall clock: a webhook delivered twice, a
chat burst, a poison event, an approval that expires in a minute, a one-minute timer and a short outbox gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from console.config import ConfigError, Settings
from console.core import Store

DEMO_GAP = 20  # seconds between held sends, so the outbox countdown is watchable
DEMO_APPROVAL_EXPIRY = 60
DEMO_LEASE_TTL = 15  # a stalled worker is taken over by a second console within seconds


class DemoEngine(Protocol):
    async def ingest(self, source: str, source_id: str, payload: Any) -> bool: ...
    async def write(self, fn: Callable[[Store], Any]) -> Any: ...
    @property
    def clock(self) -> Any: ...


# What the demo's process keeps of its environment: the terminal's, the locale's, where things are (so that a
# program, a home, a temporary folder and Python's own paths are found). Everything else goes: API keys, tokens,
# passwords, OTEL_EXPORTER_OTLP_* (the owner's collector), AGENT_CONSOLE_* (the owner's settings), PG* (their
# database). Every part that reads the environment (telemetry, ${VAR} in MCP settings, an agent's key, parts not
# written yet) then cannot find them, rather than each having to be told to look away.
KEPT_VARIABLES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "COLORTERM",
                            "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR",
                            "COLORFGBG", "ESCDELAY", "TMPDIR", "TZ", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME",
                            "PYTHONUTF8", "PYTHONIOENCODING", "SYSTEMROOT"})
KEPT_PREFIXES = ("LC_", "XDG_", "TEXTUAL")


def demo_settings(folder: Path) -> Settings:
    """The demo's settings: the built-in defaults (never the owner's config file or variables) with the inbox,
    the example shop's orders and the telemetry file in `folder`, and short intervals so every pane moves."""
    return Settings(db=folder / "demo-inbox.db", instructions=folder / "instructions.md", agent="offline",
                    outbox_gap=DEMO_GAP, approval_expiry=DEMO_APPROVAL_EXPIRY, lease_ttl=DEMO_LEASE_TTL,
                    backoff_base=3, backoff_max=10)


def demo_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables the demo keeps of `environ` (KEPT_VARIABLES, KEPT_PREFIXES)."""
    return {name: value for name, value in environ.items()
            if name in KEPT_VARIABLES or name.startswith(KEPT_PREFIXES)}


@contextlib.contextmanager
def demo_world(keep: Path | None = None) -> Iterator[Settings]:
    """The demo's settings in a folder of its own, with this process's environment narrowed to demo_environment
    (the demo is a process of its own: `agent-console --demo`). The folder is owner-only (0700) and removed when
    the demo ends, or with `keep` made at that path (which must not exist, or be an empty folder) and kept."""
    if keep is None:
        folder_context: contextlib.AbstractContextManager[str] = tempfile.TemporaryDirectory(
            prefix="agent-console-demo-")  # mkdtemp's folder is 0700 whatever the umask
    else:
        folder_context = contextlib.nullcontext(str(_kept_folder(keep)))
    with folder_context as folder:
        before = dict(os.environ)
        os.environ.clear()
        os.environ.update(demo_environment(before))
        try:
            yield demo_settings(Path(folder))
        finally:
            os.environ.clear()
            os.environ.update(before)


def _kept_folder(path: Path) -> Path:
    path = path.expanduser().absolute()
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        if not path.is_dir() or any(path.iterdir()):
            raise ConfigError(f"--keep-demo: {path} already exists and is not an empty folder; name a new one") \
                from None
    except OSError as exc:
        raise ConfigError(f"--keep-demo: cannot make {path}: {exc.strerror}") from None
    path.chmod(0o700)  # an empty folder given for the demo: its inbox will hold the demo's payloads
    return path


def github_push(delivery: str) -> dict[str, Any]:
    return {
        "delivery": delivery, "ref": "refs/heads/main",
        "repository": {"full_name": "me/agent-console"}, "sender": {"login": "octocat"},
        "head_commit": {"message": "Fix the outbox countdown"},
    }


def script(engine: DemoEngine) -> list[tuple[float, str, Callable[[], Awaitable[Any]]]]:
    """(seconds after start, what it shows, the step)."""

    def ingest(source: str, source_id: str, payload: Any) -> Callable[[], Awaitable[Any]]:
        return lambda: engine.ingest(source, source_id, payload)

    def minute_timer() -> Awaitable[Any]:
        now = engine.clock.now()
        return engine.write(
            lambda store: store.add_timer("demo-minute", now + 60, {"text": "one-minute timer"}, every=60, now=now))

    def chat_burst() -> Awaitable[Any]:
        # Delivered in one commit, as a chat gateway flushing its queue would: the worker claims all three.
        now = engine.clock.now()
        burst = [("chat", "demo-chat-1", {"text": "are you there?"}),
                 ("chat", "demo-chat-2", {"text": "remind me to water the plants"}),
                 ("chat", "demo-chat-3", {"text": "and book the dentist"})]
        return engine.write(lambda store: store.ingest_many(burst, now=now))

    return [
        (0.5, "a GitHub webhook", ingest("github", "delivery-1001", github_push("delivery-1001"))),
        (3.0, "the same webhook delivered again: refused",
         ingest("github", "delivery-1001", github_push("delivery-1001"))),
        (5.0, "a chat burst: three messages, one run, one reply", chat_burst),
        (8.0, "a poison event: fails, backs off, goes dead", ingest("manual", "demo-poison", {"poison": True})),
        (11.0, "a message that needs approval (expires in a minute)",
         ingest("chat", "demo-refund", {"text": "refund order 881"})),
        (13.0, "a one-minute timer", minute_timer),
        (16.0, "another chat, held by the outbox gap", ingest("chat", "demo-chat-4", {"text": "what's on today?"})),
        (25.0, "a Stripe webhook", ingest("stripe", "evt_demo_1", {"type": "charge.succeeded", "data": {
            "object": {"amount": 4200, "currency": "eur"}}})),
    ]


async def run_demo(engine: DemoEngine, *, trickle_every: float = 12.0, on_step: Callable[[str], None] | None = None,
                   sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Play the script, then keep a gentle trickle of chat messages so the sparkline moves."""
    elapsed = 0.0
    for at, label, step in script(engine):
        await sleep(max(0.0, at - elapsed))
        elapsed = at
        await step()
        if label and on_step is not None:
            on_step(label)
    serial = 0
    while trickle_every > 0:
        await sleep(trickle_every)
        serial += 1
        await engine.ingest("chat", f"demo-trickle-{serial}", {"text": f"note #{serial}"})
