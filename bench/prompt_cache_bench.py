"""Input tokens billed for a 10-turn run, with and without prompt caching, on the stand-in's accounting.

    python bench/prompt_cache_bench.py [--turns 10] [--json]

The Claude agent runs one conversation against the stand-in Messages API on 127.0.0.1 (tests/agents/
stand_in.py), which bills each request as the Messages API documents prompt caching: the prefix tools,
system, messages up to a breakpoint is written to the cache (if it is at least 1,024 tokens) and read by
a later request that starts with it; input_tokens are the tokens after the last breakpoint. Its tokenizer
is a token per 4 bytes of each block's JSON, so the counts are the stand-in's, not a real model's: the
ratio between the two runs is the figure. The model calls one tool a turn (send_message) for turns-1
turns, then ends. Two events: a short chat message and a 6 kB webhook payload.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console.agents.base import RunContext  # noqa: E402
from console.agents.claude import ClaudeAgent  # noqa: E402
from console.core import Store  # noqa: E402
from tests.agents.stand_in import serve_stand_in, text, tool  # noqa: E402

NOW = 1_790_000_000
# claude-sonnet-5-5's list prices, USD per million tokens
PRICES = {"input_tokens": 2.0, "cache_creation_input_tokens": 2.5, "cache_read_input_tokens": 0.2,
          "output_tokens": 10.0}
EVENTS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "chat message": ("chat", "m-1", {"text": "Did the nightly build pass? If not, tell me what broke."}),
    "6 kB webhook": ("github", "delivery-1", {
        "action": "completed", "workflow_run": {"name": "nightly", "conclusion": "failure"},
        "log": [f"step {n}: " + "compiling module and running its tests " * 2 for n in range(70)]}),
}


def run(event: tuple[str, str, dict[str, Any]], *, cache: bool, turns: int) -> list[dict[str, int]]:
    with serve_stand_in() as claude, tempfile.TemporaryDirectory() as folder:
        for turn in range(1, turns):
            claude.reply(tool(f"t{turn}", "send_message", text=f"Update {turn}: still looking into it."),
                         output_tokens=40)
        claude.reply(text("That is all."), output_tokens=10)
        with Store.open(Path(folder) / "inbox.db") as store:
            store.ingest(*event, now=NOW)
            gen = store.acquire("bench", now=NOW)
            assert gen is not None
            ctx = RunContext(store, store.claim_batch("bench", gen, now=NOW), NOW, "bench", gen, approval_expiry=600)
            agent = ClaudeAgent(api_key="sk-bench", model="claude-sonnet-5-5", max_tokens=1024, base_url=claude.url,
                                max_turns=turns, prompt_cache=cache)
            agent.run(ctx)
        return list(claude.usages)


def totals(usages: list[dict[str, int]]) -> dict[str, float]:
    found: dict[str, float] = {name: sum(u.get(name, 0) for u in usages) for name in PRICES}
    found["prompt_tokens"] = sum(found[name] for name in ("input_tokens", "cache_creation_input_tokens",
                                                          "cache_read_input_tokens"))
    found["input_usd"] = sum(found[name] * PRICES[name] for name in PRICES if name != "output_tokens") / 1e6
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    results: dict[str, Any] = {}
    for name, event in EVENTS.items():
        without = totals(run(event, cache=False, turns=options.turns))
        cached_usages = run(event, cache=True, turns=options.turns)
        cached = totals(cached_usages)
        results[name] = {"without": without, "with": cached, "per_turn_with": cached_usages,
                         "input_usd_ratio": cached["input_usd"] / without["input_usd"]}
    if options.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{options.turns}-turn run, stand-in accounting, claude-sonnet-5-5 list prices")
    print(f"{'event':<14}{'caching':<9}{'uncached in':>12}{'cache write':>12}{'cache read':>12}{'prompt':>9}"
          f"{'input $':>10}{'ratio':>7}")
    for name, result in results.items():
        for label, key in (("off", "without"), ("on", "with")):
            row = result[key]
            ratio = f"{result['input_usd_ratio']:.2f}" if key == "with" else "1.00"
            print(f"{name:<14}{label:<9}{row['input_tokens']:>12,.0f}{row['cache_creation_input_tokens']:>12,.0f}"
                  f"{row['cache_read_input_tokens']:>12,.0f}{row['prompt_tokens']:>9,.0f}{row['input_usd']:>10.4f}"
                  f"{ratio:>7}")


if __name__ == "__main__":
    main()
