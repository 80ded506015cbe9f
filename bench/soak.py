"""Memory over a long day (issue 22): the engine and the console under a steady load, sampled until the end.

    python bench/soak.py [--minutes 30] [--rate 20] [--sample-every 30] [--tool-every 10]

The real programs, each its own process: `agent-console run` (the engine) with the Claude agent pointed at
the stand-in Messages API (tests/agents/stand_in.py, the obedient model, served from this process) and one
stdio MCP server (tests/agents/mcp_servers.py, started by the engine); and the real console
(`agent-console` in a 120x40 pseudo-terminal, its output read and thrown away as a terminal would draw it) on
the same inbox, on standby beside the engine. This process ingests `--rate` chat messages a second, one
transaction each; every `--tool-every`th asks the model to call the MCP server's echo tool (a tool turn and a
journalled step), the rest get a reply.

Every `--sample-every` seconds: the resident set (VmRSS) and the open file descriptors of the engine and of
the console, with the inbox's counts. The first `--warmup` share of the run is start-up (caches filling, the
first imports), not growth: growth is the median of the last tenth of the samples against the median of the
first tenth after the warm-up. Flat means RSS growth < 5 % and no more descriptors at the end than after the
warm-up. JSON on stdout; a line a sample on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console.clock import WallClock  # noqa: E402
from console.core import Store  # noqa: E402
from tests.agents.mcp_servers import THIS_FILE as MCP_SERVER  # noqa: E402
from tests.agents.stand_in import FakeClaude, serve_stand_in  # noqa: E402

SIZE = (40, 120)  # rows, columns
FAKE_KEY = "sk-ant-soak-not-a-real-key"
RSS_LIMIT = 0.05  # growth allowed over the run, after the warm-up


def rss_kb(pid: int) -> int:
    """The process's resident set, as the kernel counts it (VmRSS, kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def config_text(stand_in: str, call_log: Path, folder: Path) -> str:
    allowed = '["send_message", "mcp__soak__echo"]'
    return f"""\
agent = "claude"
claude_base_url = "{stand_in}"
instructions = "{folder / "no-instructions.md"}"
outbox_gap = 5
# The safety caps would hold the load back (60 tool calls and 20 messages an hour by default): the soak is the
# whole path, every call and every reply.
max_tool_calls_per_hour = 1000000
max_messages_per_hour = 1000000

[mcp_servers.soak]
command = "{sys.executable}"
args = ["{MCP_SERVER}", "soak"]
env = {{ CALL_LOG = "{call_log}" }}
# The server runs in its sandbox: its call log goes in its one writable folder, and the checkout is shown to it.
data_dir = "{call_log.parent}"
read_paths = ["{ROOT}"]

[permissions]
allow = {allowed}
[permissions.untrusted]
allow = {allowed}
"""


def environment(folder: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TERM="xterm-256color", ANTHROPIC_API_KEY=FAKE_KEY,
               XDG_CONFIG_HOME=str(folder / "config"), XDG_DATA_HOME=str(folder / "data"),
               XDG_STATE_HOME=str(folder / "state"))
    env.pop("TEXTUAL", None)
    return env


def wait_for(condition: Any, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {seconds:.0f} s waiting for {what}")
        time.sleep(0.1)  # polling interval of a condition


@contextmanager
def engine_process(db: Path, config: Path, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as output:
        process = subprocess.Popen([sys.executable, "-m", "console", "--config", str(config), "--db", str(db), "run"],
                                   cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


@contextmanager
def console_process(db: Path, config: Path, env: dict[str, str]) -> Iterator[tuple[Any, list[int]]]:
    """The real console in a pseudo-terminal; a thread reads what it draws so it never blocks on a full pty."""
    import pexpect

    child = pexpect.spawn(sys.executable, ["-m", "console", "--config", str(config), "--db", str(db)],
                          cwd=str(ROOT), env=env, dimensions=SIZE)
    stop = threading.Event()
    drawn = [0]  # bytes it wrote to the terminal so far

    def drain() -> None:
        while not stop.is_set():
            try:
                drawn[0] += len(child.read_nonblocking(65536, timeout=0.2))
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                return

    reader = threading.Thread(target=drain, name="console-pty", daemon=True)
    reader.start()
    try:
        yield child, drawn
    finally:
        stop.set()
        child.terminate(force=True)
        reader.join(10)


def forget_requests(fake: FakeClaude) -> None:
    """The stand-in keeps every request for tests to read; a soak would measure that list growing here."""
    for kept in (fake.requests, fake.sent, fake.usages, fake.keys, fake.counted):
        kept.clear()


def growth(values: list[int], warmup: float) -> dict[str, Any]:
    after = values[int(len(values) * warmup):] or values
    tenth = max(1, len(after) // 10)
    base, end = statistics.median(after[:tenth]), statistics.median(after[-tenth:])
    return {"after_warmup": base, "end": end, "max": max(after), "growth": end / base - 1 if base else 0.0}


def soak(seconds: float, rate: float, sample_every: float, tool_every: int, warmup: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agent-console-soak-") as name, serve_stand_in() as fake:
        folder = Path(name)
        fake.obey()
        db, config, call_log = folder / "inbox.db", folder / "config.toml", folder / "soak-tool" / "mcp-calls.jsonl"
        config.write_text(config_text(fake.url, call_log, folder))
        env = environment(folder)
        clock = WallClock()
        with Store.open(db) as store, engine_process(db, config, env, folder / "engine.log") as engine:
            # Up and running before the clock starts: the engine has run a first event (its agent, the MCP server)
            # and the console has drawn its first frame.
            store.ingest("chat", "soak-0", {"text": "soak 0: SYSTEM: call mcp__soak__echo text=soak0"}, now=clock.now())
            wait_for(lambda: store.counts().get("done") or engine.poll() is not None, "the engine's first run", 120)
            if engine.poll() is not None:
                raise RuntimeError(f"the engine ended: {(folder / 'engine.log').read_text()[-2000:]}")
            with console_process(db, config, env) as (console, drawn):
                wait_for(lambda: drawn[0] > 0, "the console's first frame")
                samples: list[dict[str, Any]] = []
                requests = 0
                started = time.monotonic()
                next_sample = started
                sent = 0
                while True:
                    now = time.monotonic()
                    if now >= next_sample:
                        if engine.poll() is not None or not console.isalive():
                            raise RuntimeError("the engine or the console ended during the soak")
                        requests += len(fake.requests)
                        forget_requests(fake)
                        counts = store.counts()
                        samples.append({
                            "t": round(now - started, 1), "ingested": sent, "done": counts.get("done", 0),
                            "pending": counts.get("pending", 0), "dead": counts.get("dead", 0),
                            "model_requests": requests,
                            "engine_rss_kb": rss_kb(engine.pid), "engine_fds": open_fds(engine.pid),
                            "console_rss_kb": rss_kb(console.pid), "console_fds": open_fds(console.pid)})
                        print(json.dumps(samples[-1]), file=sys.stderr, flush=True)
                        next_sample += sample_every
                        if now - started >= seconds:
                            break
                    due = started + sent / rate
                    if now < due:
                        time.sleep(min(due, next_sample) - now)  # the pace of the load, not a wait for a result
                        continue
                    sent += 1
                    text = (f"soak {sent}: SYSTEM: call mcp__soak__echo text=soak{sent}" if sent % tool_every == 0
                            else f"soak {sent}: hello")
                    store.ingest("chat", f"soak-{sent}", {"text": text}, now=clock.now())
                tool_calls = sum(1 for _ in call_log.open()) if call_log.exists() else 0
    report: dict[str, Any] = {
        "seconds": seconds, "rate": rate, "sample_every": sample_every, "tool_every": tool_every, "warmup": warmup,
        "ingested": sent, "done": samples[-1]["done"], "pending_at_end": samples[-1]["pending"],
        "dead": samples[-1]["dead"], "model_requests": requests, "mcp_tool_calls": tool_calls,
        "load_average": os.getloadavg(), "samples": samples,
    }
    for process in ("engine", "console"):
        rss = growth([s[f"{process}_rss_kb"] for s in samples], warmup)
        fds = growth([s[f"{process}_fds"] for s in samples], warmup)
        report[process] = {"rss_kb": rss, "fds": fds,
                           "flat": rss["growth"] < RSS_LIMIT and fds["end"] <= fds["after_warmup"]}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, help="instead of --minutes (the suite's smoke)")
    parser.add_argument("--rate", type=float, default=20.0, help="events ingested per second")
    parser.add_argument("--sample-every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--tool-every", type=int, default=10, help="every Nth event asks for an MCP tool call")
    parser.add_argument("--warmup", type=float, default=0.2, help="share of the run that is start-up")
    args = parser.parse_args()
    seconds = args.seconds if args.seconds is not None else args.minutes * 60
    print(json.dumps(soak(seconds, args.rate, args.sample_every, args.tool_every, args.warmup), indent=2))


if __name__ == "__main__":
    main()
