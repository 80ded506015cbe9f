"""What the sandbox costs (issue 33): an MCP server's start and a tool call's round trip, sandboxed (bubblewrap, the
forwarder, the egress proxy's socket) against bare (sandbox = false), the same server and the same hub.

The server is the shipped example shop (`python -m console.examples.shop_server`, the `mcp` SDK); a start is
McpHub.start() until the server is up with its tools listed (most of it is the server's own Python importing the
SDK); a round trip is one `lookup_order` call. Rounds alternate bare and sandboxed so that a machine's load drifts
over both alike; the medians are compared. Targets: start at most +100 ms, a call at most 1.2x.

    python bench/sandbox_bench.py --markdown      # 10 starts and 200 calls each
    python bench/sandbox_bench.py --quick         # what tests/bench runs
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the script runs as `python bench/sandbox_bench.py`

from console.agents.mcp import McpHub  # noqa: E402
from console.agents.mcp_config import McpServerConfig  # noqa: E402
from console.agents.sandbox import (  # noqa: E402
    SandboxPlaces,
    check_sandbox,
    launch,
    owner_homes,
    prepare_data_dir,
)

START_TARGET_MS = 100.0
CALL_TARGET_RATIO = 1.2


def shop(folder: Path, *, sandbox: bool) -> McpServerConfig:
    data = folder / ("boxed" if sandbox else "bare")
    data.mkdir(parents=True, exist_ok=True)
    return McpServerConfig("shop", command=sys.executable, args=("-m", "console.examples.shop_server"),
                           env={"SHOP_STATE": str(data / "shop.json")}, data_dir=data, read_paths=(ROOT,),
                           sandbox=sandbox, connect_timeout=60.0, list_timeout=60.0)


def one_round(folder: Path, *, sandbox: bool, calls: int) -> tuple[float, list[float]]:
    """(start seconds, each call's seconds) of one hub with the shop, sandboxed or bare."""
    places = SandboxPlaces(data_root=folder / "mcp-data", homes=owner_homes(os.environ), hidden=())
    hub = McpHub({"shop": shop(folder, sandbox=sandbox)}, places=places)
    began = time.perf_counter()
    hub.start()
    started = time.perf_counter() - began
    try:
        if hub.status()["shop"] != "up":
            raise SystemExit(f"the shop did not start ({'sandboxed' if sandbox else 'bare'}): {hub.status()}")
        hub.call("mcp__shop__lookup_order", {"order": "881"}, idempotency_key="warm")
        times = []
        for n in range(calls):
            began = time.perf_counter()
            hub.call("mcp__shop__lookup_order", {"order": "881"}, idempotency_key=f"k{n}")
            times.append(time.perf_counter() - began)
    finally:
        hub.close()
    return started, times


def setup_cost(runs: int) -> dict[str, float]:
    """What the box itself adds to a start, apart from the server: the check before each connect (a sandbox
    around `true`), and a sandbox with the forwarder around `true` against `true` alone, medians in ms."""
    with tempfile.TemporaryDirectory() as folder, socket.socket(socket.AF_UNIX) as listener:
        path = Path(folder) / "egress.sock"
        listener.bind(str(path))
        places = SandboxPlaces(data_root=Path(folder) / "mcp-data", homes=owner_homes(os.environ), hidden=())
        config = McpServerConfig("true", command="true")
        data_dir = prepare_data_dir(config, places)
        bwrap = check_sandbox("true", os.environ)
        spawn = launch(config, bwrap=bwrap, places=places, data_dir=data_dir, socket=path, server_env={},
                       engine_env=os.environ)
        timings: dict[str, list[float]] = {"check": [], "boxed": [], "bare": []}
        cpu: dict[str, list[float]] = {"check": [], "boxed": [], "bare": []}
        for _ in range(runs):
            for kind, run in (("check", lambda: check_sandbox("true", os.environ)),
                              ("boxed", lambda: subprocess.run([spawn.command, *spawn.args], env=spawn.env,
                                                               check=True)),
                              ("bare", lambda: subprocess.run(["true"], check=True))):
                used = resource.getrusage(resource.RUSAGE_CHILDREN)
                began = time.perf_counter()
                run()
                timings[kind].append(time.perf_counter() - began)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[kind].append(after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime)
    # The CPU the processes used, beside the wall time: on a loaded machine the wall time is mostly waiting.
    return {**{kind: statistics.median(values) * 1000 for kind, values in timings.items()},
            **{f"{kind}_cpu": statistics.median(values) * 1000 for kind, values in cpu.items()}}


def measure(rounds: int, calls: int) -> dict[str, Any]:
    starts: dict[str, list[float]] = {"bare": [], "sandboxed": []}
    round_trips: dict[str, list[float]] = {"bare": [], "sandboxed": []}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(rounds):
            for kind in ("bare", "sandboxed"):
                started, times = one_round(Path(folder), sandbox=kind == "sandboxed", calls=calls)
                starts[kind].append(started)
                round_trips[kind].extend(times)
    setup = setup_cost(max(10, rounds * 4))
    start_ms = {kind: statistics.median(values) * 1000 for kind, values in starts.items()}
    call_ms = {kind: statistics.median(values) * 1000 for kind, values in round_trips.items()}
    added = start_ms["sandboxed"] - start_ms["bare"]
    ratio = call_ms["sandboxed"] / call_ms["bare"]
    return {
        "rounds": rounds, "calls_per_round": calls, "start_ms": start_ms, "call_ms": call_ms, "setup_ms": setup,
        "box_added_ms": setup["check"] + setup["boxed"] - setup["bare"],
        "start_added_ms": added, "call_ratio": ratio,
        "start_verdict": "MET" if added <= START_TARGET_MS else "MISSED",
        "call_verdict": "MET" if ratio <= CALL_TARGET_RATIO else "MISSED",
        "load": os.getloadavg(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
    }


def markdown(result: dict[str, Any]) -> str:
    start, call, setup = result["start_ms"], result["call_ms"], result["setup_ms"]
    return "\n".join([
        f"{result['rounds']} rounds (bare and sandboxed alternating), {result['calls_per_round']} calls each; "
        f"load {result['load'][0]:.1f}; {result['machine']}",
        "",
        "| | bare | sandboxed | difference | target | verdict |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
        f"| server start (median) | {start['bare']:.0f} ms | {start['sandboxed']:.0f} ms | "
        f"{result['start_added_ms']:+.0f} ms | +{START_TARGET_MS:.0f} ms | {result['start_verdict']} |",
        f"| the box alone: check + bwrap + forwarder around `true` | {setup['bare']:.0f} ms | "
        f"{setup['check'] + setup['boxed']:.0f} ms | {result['box_added_ms']:+.0f} ms | +{START_TARGET_MS:.0f} ms | "
        f"{'MET' if result['box_added_ms'] <= START_TARGET_MS else 'MISSED'} |",
        f"| the same, CPU time of the processes | {setup['bare_cpu']:.0f} ms | "
        f"{setup['check_cpu'] + setup['boxed_cpu']:.0f} ms | "
        f"{setup['check_cpu'] + setup['boxed_cpu'] - setup['bare_cpu']:+.0f} ms | | |",
        f"| tool call round trip (median) | {call['bare']:.2f} ms | {call['sandboxed']:.2f} ms | "
        f"{result['call_ratio']:.2f}x | {CALL_TARGET_RATIO}x | {result['call_verdict']} |",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="1 round of 5 calls")
    parser.add_argument("--markdown", action="store_true")
    options = parser.parse_args()
    rounds, calls = (1, 5) if options.quick else (options.rounds, options.calls)
    result = measure(rounds, calls)
    print(markdown(result) if options.markdown else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
