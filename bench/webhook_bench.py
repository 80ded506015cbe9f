"""Webhook receiver benchmark: durable acks per second, fsyncs per event, ack latency.

N concurrent senders (kept-alive connections, loopback) post signed GitHub-style deliveries to the real
receiver, run in its own process on a fresh inbox file, first with group commit and then with one
transaction per request (the same receiver with group_commit=False), in the same run.

fsyncs are counted two ways: the receiver's commit counter (GET /healthz -> writer.commits; in WAL
mode with synchronous=FULL each commit fsyncs the WAL once), and, when strace is available, the
fsync/fdatasync system calls the receiver process actually made (strace -f -w --seccomp-bpf -c), which
also catches checkpoints, with the wall time spent in them.

What the disk allows: before and after each mode the script measures the disk's own rate of fsyncs, in the
inbox's folder (a 4 KiB write at a rotating offset of a preallocated file, then fdatasync: a small WAL commit
once the WAL is reused). A receiver that commits one transaction per request can ack at most that many
deliveries a second; group commit puts every delivery that queued during an fsync into the next one, so its
figure is acks per fsync, and how close its own fsyncs per second come to the disk's ("disk use").

The senders are one asyncio process (this one) writing requests built before the run on kept-alive connections
and reading just the status and length of each answer: a few tens of microseconds of CPU a delivery, so they are
not what limits the receiver. Each process's CPU per delivery is reported (the receiver's from /proc).

    python bench/webhook_bench.py [--senders 64] [--requests 4000] [--no-strace]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import hmac
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
SECRET = "bench-secret-not-real"
SECRET_ENV = "WEBHOOK_BENCH_SECRET"


# --- the receiver process ---------------------------------------------------------------------
def serve_main(db: str, group_commit: bool) -> None:
    sys.path.insert(0, str(ROOT))
    from console.assembly import System, assemble_serve
    from console.config import Settings

    settings = Settings(db=Path(db), webhooks={
        "port": 0, "sources": {"github": {"verifier": "github", "secret_env": SECRET_ENV}}})

    def ready(system: System) -> None:
        assert system.receiver is not None
        print(json.dumps({"url": system.receiver.url, "pid": os.getpid()}), flush=True)

    if os.environ.get("UVLOOP"):
        import uvloop
        uvloop.run(assemble_serve(settings, group_commit=group_commit).run_until_signalled(on_ready=ready))
        return
    if os.environ.get("SWITCH"):
        sys.setswitchinterval(float(os.environ["SWITCH"]))
    asyncio.run(assemble_serve(settings, group_commit=group_commit).run_until_signalled(on_ready=ready))


# --- the senders ------------------------------------------------------------------------------
def signed(n: int) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"action": "opened", "number": n, "title": f"PR {n}", "text": "x" * 200}).encode()
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return body, {"X-Hub-Signature-256": signature, "X-GitHub-Delivery": f"delivery-{n}",
                  "X-GitHub-Event": "pull_request", "Content-Type": "application/json"}


class _Sender(asyncio.Protocol):
    """One kept-alive connection posting prepared requests one after another: each is bytes built before the run,
    each answer is read just far enough to take its status and find its end (Content-Length). Far cheaper per
    request than aiohttp's client, so the senders' process is not what limits the receiver."""

    def __init__(self, requests: list[bytes], queue: Iterator[int], latencies: list[float], statuses: dict[int, int],
                 done: asyncio.Future[None]) -> None:
        self._requests, self._queue, self._latencies, self._statuses = requests, queue, latencies, statuses
        self._done = done
        self._transport: asyncio.Transport | None = None
        self._buffer = b""
        self._sent_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._send_next()

    def _send_next(self) -> None:
        assert self._transport is not None
        n = next(self._queue, None)
        if n is None:
            self._transport.close()
            if not self._done.done():
                self._done.set_result(None)
            return
        self._sent_at = time.perf_counter()
        self._transport.write(self._requests[n])

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while True:
            head_end = self._buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self._buffer[:head_end].lower() + b"\r\n"
            length_at = head.find(b"\r\ncontent-length:")
            length = int(head[length_at + 17:head.find(b"\r\n", length_at + 2)]) if length_at >= 0 else 0
            end = head_end + 4 + length
            if len(self._buffer) < end:
                return
            status = int(head[9:12])
            self._buffer = self._buffer[end:]
            self._latencies.append(time.perf_counter() - self._sent_at)
            self._statuses[status] = self._statuses.get(status, 0) + 1
            self._send_next()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_exception(exc or ConnectionError("the receiver closed a connection"))


def request_bytes(url: str, n: int) -> bytes:
    body, headers = signed(n)
    host = url.removeprefix("http://")
    lines = ["POST /hooks/github HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}",
             *(f"{name}: {value}" for name, value in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def send_all(url: str, senders: int, requests: int) -> tuple[float, list[float], dict[int, int], float, float]:
    """Every delivery posted by `senders` connections at once; (seconds, latencies, statuses, this process's CPU
    seconds meanwhile, the share of that time the receiver's writer was busy)."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    prepared = [request_bytes(url, n) for n in range(requests)]
    host, port = url.removeprefix("http://").rsplit(":", 1)
    loop = asyncio.get_running_loop()
    queue = iter(range(requests))
    # The connections are open before the clock starts, so the figures measure acks, not TCP handshakes.
    sockets = [socket.create_connection((host, int(port))) for _ in range(senders)]
    for sock in sockets:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    dones = [loop.create_future() for _ in sockets]
    # The writer's idle time is read just before the clock starts and just after it stops (its counter includes a
    # wait under way), so that its share is of the run itself, not of the bench's preparations.
    idle_before, window_start = (await health(url))["writer"]["idle_ms"], time.perf_counter()
    cpu, started = time.process_time(), time.perf_counter()
    await asyncio.gather(*(loop.create_connection(functools.partial(_Sender, prepared, queue, latencies, statuses,
                                                                    done), sock=sock)
                           for sock, done in zip(sockets, dones, strict=True)))
    await asyncio.gather(*dones)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    idle_after, window_end = (await health(url))["writer"]["idle_ms"], time.perf_counter()
    return elapsed, latencies, statuses, cpu, 1 - (idle_after - idle_before) / 1000 / (window_end - window_start)


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time so far (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


WARM_UP = -1  # the one delivery sent before the clock starts (its key is delivery--1): first-use costs stay out


async def warm_up(url: str) -> None:
    """One delivery before the run, so that whatever a receiver does once (an import on its first span, say) is not
    counted against the deliveries timed."""
    body, headers = signed(WARM_UP)
    async with aiohttp.ClientSession() as session, session.post(f"{url}/hooks/github", data=body,
                                                                headers=headers) as response:
        if response.status != 200:
            raise SystemExit(f"the warm-up delivery was answered {response.status}: {await response.text()}")


async def health(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/healthz") as response:
        result: dict[str, Any] = await response.json()
        return result


def strace_fsyncs(path: Path) -> tuple[int, float] | None:
    """fsync and fdatasync calls in strace -c's summary, and the seconds spent in them."""
    if not path.exists():
        return None
    total, seconds = 0, 0.0
    for line in path.read_text().splitlines():
        parts = line.split()
        if parts and parts[-1] in ("fsync", "fdatasync"):
            total += int(parts[3] if len(parts) >= 6 else parts[-2])
            seconds += float(parts[1])
    return total, seconds


PROBE_BYTES = 4096
PROBE_SPAN = 4 * 1024 * 1024


def disk_fsyncs_per_s(folder: Path, seconds: float = 1.0) -> float:
    """The disk's own fsync rate in folder: a 4 KiB write at a rotating offset of a preallocated 4 MiB file (as a
    reused WAL is written), then fdatasync, for about `seconds`."""
    path = folder / "fsync-probe"
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.pwrite(descriptor, b"\0" * PROBE_SPAN, 0)
        os.fsync(descriptor)
        block, offset, done = b"x" * PROBE_BYTES, 0, 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds or done < 20:
            os.pwrite(descriptor, block, offset)
            os.fdatasync(descriptor)
            offset = (offset + PROBE_BYTES) % PROBE_SPAN
            done += 1
        return done / (time.perf_counter() - started)
    finally:
        os.close(descriptor)
        path.unlink()


def run_mode(group_commit: bool, senders: int, requests: int, use_strace: bool, folder: Path) -> dict[str, Any]:
    mode = "group" if group_commit else "per-request"
    db = folder / f"{mode}.db"
    command = [sys.executable, __file__, "--serve", str(db), "--group-commit", "1" if group_commit else "0"]
    trace = folder / f"{mode}.strace"
    if use_strace:
        command = ["strace", "-f", "-w", "--seccomp-bpf", "-c", "-e", "trace=fsync,fdatasync", "-o", str(trace),
                   *command]
    disk_before = disk_fsyncs_per_s(folder)
    env = {**os.environ, SECRET_ENV: SECRET, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    receiver_pid = server.pid
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if not line:
            raise SystemExit(f"the {mode} receiver did not start")
        ready = json.loads(line)
        url, receiver_pid = ready["url"], ready["pid"]
        asyncio.run(warm_up(url))
        before = asyncio.run(health(url))["writer"]
        receiver_cpu = cpu_seconds(receiver_pid)
        elapsed, latencies, statuses, sender_cpu, writer_busy = asyncio.run(send_all(url, senders, requests))
        receiver_cpu = cpu_seconds(receiver_pid) - receiver_cpu
        stats = asyncio.run(health(url))
    finally:
        # The receiver itself, not strace: strace blocks fatal signals while it traces a command.
        os.kill(receiver_pid, signal.SIGTERM)
        server.wait(timeout=60)
    disk = statistics.median([disk_before, disk_fsyncs_per_s(folder)])
    # The run's own commits: the counters less what they were after the warm-up.
    writer = {**stats["writer"], **{key: stats["writer"][key] - before[key]
                                    for key in ("commits", "events")}}
    traced = strace_fsyncs(trace) if use_strace else None
    latencies.sort()
    commits_per_s = writer["commits"] / elapsed
    return {
        "mode": mode,
        "requests": requests,
        "statuses": statuses,
        "stored": stats["counts"]["stored"] - 1,  # the warm-up delivery's is not one of the run's
        "acks_per_s": statuses.get(200, 0) / elapsed,
        "commits": writer["commits"],
        "events": writer["events"],
        "commits_per_event": writer["commits"] / max(1, writer["events"]),
        "fsyncs_strace": traced[0] if traced else None,
        "fsync_seconds": traced[1] if traced else None,
        "elapsed_s": elapsed,
        "disk_fsyncs_per_s": disk,
        "commits_per_s": commits_per_s,
        "acks_per_fsync": statuses.get(200, 0) / max(1, writer["commits"]),
        "disk_use": commits_per_s / disk,
        "largest_group": writer["largest_group"],
        # The share of the run the writer had work (it waited for the rest): near 1, the requests kept it busy.
        "writer_busy": writer_busy,
        # CPU per delivery in each process, and how many cores each kept busy (the receiver's event loop and its
        # writer share one GIL: near 1.0 it is bound by its own CPU, not by the disk).
        "receiver_cpu_us": receiver_cpu / requests * 1e6,
        "sender_cpu_us": sender_cpu / requests * 1e6,
        "receiver_cores": receiver_cpu / elapsed,
        "sender_cores": sender_cpu / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--senders", type=int, default=64)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--no-strace", action="store_true", help="do not count fsync calls with strace")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", metavar="DB", help=argparse.SUPPRESS)
    parser.add_argument("--group-commit", default="1", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_main(args.serve, args.group_commit == "1")
        return
    use_strace = not args.no_strace and shutil.which("strace") is not None
    with tempfile.TemporaryDirectory(prefix="webhook-bench-") as folder:
        results = [run_mode(group, args.senders, args.requests, use_strace, Path(folder)) for group in (True, False)]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.senders} senders, {args.requests} signed deliveries per mode, loopback, {os.cpu_count()} cores")
    print(f"{'mode':<12} {'acks/s':>8} {'commits/event':>14} {'fsyncs/event':>13} {'group max':>9} "
          f"{'p50 ms':>7} {'p99 ms':>7}  stored  statuses")
    for r in results:
        fsyncs = "-" if r["fsyncs_strace"] is None else f"{r['fsyncs_strace'] / r['requests']:.3f}"
        print(f"{r['mode']:<12} {r['acks_per_s']:>8.0f} {r['commits_per_event']:>14.3f} {fsyncs:>13} "
              f"{r['largest_group']:>9} {r['p50_ms']:>7.1f} {r['p99_ms']:>7.1f}  {r['stored']:>6}  {r['statuses']}")
    # The probe is a second on each side of the run; strace times the receiver's own fsyncs during it (their mean
    # gives the rate the disk allowed meanwhile, and their share of the run how busy the writer kept the disk).
    print(f"\n{'mode':<12} {'disk fsyncs/s':>13} {'commits/s':>9} {'disk use':>8} {'acks/fsync':>10} "
          f"{'fsyncs/s allowed':>16} {'in fsync':>8} {'writer busy':>11}")
    for r in results:
        traced = r["fsync_seconds"] is not None and r["fsyncs_strace"]
        busy = f"{r['fsync_seconds'] / r['elapsed_s']:.0%}" if traced else "-"
        allowed = f"{r['fsyncs_strace'] / r['fsync_seconds']:.0f}" if traced and r["fsync_seconds"] else "-"
        print(f"{r['mode']:<12} {r['disk_fsyncs_per_s']:>13.0f} {r['commits_per_s']:>9.0f} {r['disk_use']:>8.0%} "
              f"{r['acks_per_fsync']:>10.1f} {allowed:>16} {busy:>8} {r['writer_busy']:>11.0%}")
    print(f"\n{'mode':<12} {'receiver CPU us/ack':>19} {'receiver cores':>14} {'sender CPU us/ack':>17} "
          f"{'sender cores':>12}")
    for r in results:
        print(f"{r['mode']:<12} {r['receiver_cpu_us']:>19.0f} {r['receiver_cores']:>14.2f} {r['sender_cpu_us']:>17.0f} "
              f"{r['sender_cores']:>12.2f}")
    group, single = results
    print(f"group commit: {group['acks_per_s'] / single['acks_per_s']:.1f}x the acks/s of one transaction "
          f"per request, {single['commits_per_event'] / max(group['commits_per_event'], 1e-9):.0f}x fewer commits; "
          f"{group['acks_per_s'] / group['disk_fsyncs_per_s']:.1f}x the acks/s of one fsync per ack on this disk")


if __name__ == "__main__":
    main()
