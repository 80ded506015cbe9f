"""Money and model usage for people, shared by the command line and the console so both say the same:
$0.0123, '3 calls · 4,210 in · 3,900 cache read · 300 cache write · 312 out · $0.0123', one line per run."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from console.core.models import SpendRow

NANOS_PER_USD = 1_000_000_000


def money(nanos: int | None, *, unknown: str = "unknown") -> str:
    """$0.0123 or $0.03 for sums under a dollar (to a hundredth of a cent), $12.34 for larger ones; `unknown`
    when the cost is not known (never $0.00: a sum that left a call out would read as less than was spent)."""
    if nanos is None:
        return unknown
    dollars = nanos / NANOS_PER_USD
    if abs(dollars) >= 1:
        return f"${dollars:,.2f}"
    if 0 < dollars < 0.0001:
        return "<$0.0001"  # not $0.00: it did cost something
    cents = f"{dollars:.4f}".rstrip("0")
    return "$" + cents + "0" * (2 - len(cents.split(".")[1]))


def dollars(usd: float | None, *, unknown: str = "unknown") -> str:
    return money(None if usd is None else round(usd * NANOS_PER_USD), unknown=unknown)


@dataclass
class RunSpend:
    """The model calls one run made for an event, added up."""

    started: int
    holder: str | None
    gen: int | None
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    cost_nanos: int | None = 0
    unsettled: int = 0
    models: list[str] = field(default_factory=list)

    def add(self, row: SpendRow) -> None:
        self.calls += 1
        self.input_tokens += row.input_tokens
        self.output_tokens += row.output_tokens
        self.cache_write_tokens += row.cache_write_tokens
        self.cache_read_tokens += row.cache_read_tokens
        self.unsettled += row.state != "settled"
        if self.cost_nanos is None or row.cost_nanos is None:
            self.cost_nanos = None  # unknown once any call in the run has no price
        else:
            self.cost_nanos += row.cost_nanos
        if row.model not in self.models:
            self.models.append(row.model)

    def describe(self) -> str:
        parts = [f"{self.calls} call{'s' if self.calls != 1 else ''}", f"{self.input_tokens:,} in"]
        if self.cache_read_tokens:
            parts.append(f"{self.cache_read_tokens:,} cache read")
        if self.cache_write_tokens:
            parts.append(f"{self.cache_write_tokens:,} cache write")
        parts.append(f"{self.output_tokens:,} out")
        cost = money(self.cost_nanos, unknown=f"cost unknown (no price for {', '.join(self.models)})")
        if self.unsettled:
            cost += f" (with {self.unsettled} call{'s' if self.unsettled != 1 else ''} never settled, at worst case)"
        return " · ".join([*parts, cost])


def runs_of(calls: Iterable[SpendRow]) -> list[RunSpend]:
    """The calls grouped by the run that made them (holder, generation and start), oldest first."""
    runs: dict[tuple[str | None, int | None, int | None], RunSpend] = {}
    for row in calls:
        key = (row.holder, row.gen, row.run_at)
        if key not in runs:
            runs[key] = RunSpend(row.run_at if row.run_at is not None else row.at, row.holder, row.gen)
        runs[key].add(row)
    return list(runs.values())
