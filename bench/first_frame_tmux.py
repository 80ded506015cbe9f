"""Launch to first frame as a person sees it: the console and a plain four-pane Textual app, each started in a fresh
tmux session of 120x40, timed from the launch until tmux's screen shows the whole first frame (the footer and
every pane's title), taking turns for `--rounds` rounds (medians). Issue 38 asks for both this and
console_bench.py --start-only, which times the first frame inside the process (headless).

    python bench/first_frame_tmux.py [--rounds 5] [--before FOLDER]

The screen is read with `tmux capture-pane` every 5 ms (the same for both: its cost is in both figures). The
console opens an empty inbox in a temporary folder; the peer is console_bench.py's four-pane app, run for real.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEER = Path(__file__).with_name("four_panes.py")  # the plain app, shared with bench/console_bench.py
CONSOLE_MARKS = ("Events", "Lease", "Approvals", "Outbox", "Quit")
PEER_MARKS = ("c-0", "palette")  # its table is as tall as its 40 rows: the panes below it are off the screen


def first_frame_seconds(command: str, marks: tuple[str, ...], env: dict[str, str], limit: float = 60.0) -> float:
    session = f"ff-{os.getpid()}-{time.monotonic_ns()}"
    launched = time.monotonic()
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", command], check=True,
                   env=env)
    try:
        while time.monotonic() - launched < limit:
            shown = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True,
                                   check=False).stdout
            if all(mark in shown for mark in marks):
                return time.monotonic() - launched
            time.sleep(0.005)
        raise TimeoutError(f"no first frame within {limit:g} s: {command}")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", type=Path, help="another checkout's console, measured in the same run")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agent-console-ff-") as folder:
        subjects = [("console", ROOT), *((("console_before", options.before),) if options.before else ())]
        samples: dict[str, list[float]] = {name: [] for name, _ in subjects} | {"peer_four_panes": []}
        for round_ in range(options.rounds):
            for name, root in subjects:
                env = dict(os.environ, PYTHONPATH=str(root), HOME=folder, TERM="xterm-256color")
                db = Path(folder) / f"{name}-{round_}.db"
                command = f"cd {root} && {sys.executable} -m console --db {db}"
                samples[name].append(first_frame_seconds(command, CONSOLE_MARKS, env))
            samples["peer_four_panes"].append(first_frame_seconds(f"{sys.executable} {PEER}", PEER_MARKS,
                                                                  dict(os.environ, TERM="xterm-256color")))
    report: dict[str, object] = {"rounds": options.rounds, "load_average": os.getloadavg()}
    for name, runs in samples.items():
        report[name] = {"median_s": statistics.median(runs), "min_s": min(runs), "max_s": max(runs)}
    peer_median = statistics.median(samples["peer_four_panes"])
    for name, _ in subjects:
        report[f"{name}_over_peer"] = statistics.median(samples[name]) / peer_median
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
