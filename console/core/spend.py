"""What the agent spends on its model, and the budgets that stop it.

Every model call is a row of the spend ledger. Before the call, reserve_spend checks the budgets in force
and holds the call's worst case, in one BEGIN IMMEDIATE transaction: reservations are serialised by SQLite
across threads and processes, so two calls racing for the last cents of a budget cannot both pass it.
After the call, settle_spend replaces the worst case with what the call cost. A replayed journal turn
makes no call, so it is neither reserved nor counted again.

Days and months are the owner's (the `timezone` setting): a call counts in the day and month in which it
was made, and a budget's period rolls over at local midnight and on the first of the month. Money is in
whole nano-dollars (1e-9 USD), so sums and comparisons are exact.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from console.core.base import StaleGeneration, StoreBase
from console.core.models import AgentState, Budget, BudgetDefaults, SpendDecision, SpendRow, UnpricedCall

BUDGET_KINDS = ("daily", "monthly")
NANOS_PER_USD = 1_000_000_000
MAX_BUDGET_USD = 1_000_000_000.0  # far past any budget, far inside exact nano-dollar integers

# What a row counts against a budget: its cost once settled, its reserved worst case until then. NULL when
# its model has no price.
_COUNTED = "CASE state WHEN 'settled' THEN cost_nanos ELSE reserved_nanos END"
_ROW_COLUMNS = (f"id, at, state, event_id, step_key, holder, gen, run_at, model, {_COUNTED}, input_tokens, "
                "output_tokens, cache_write_tokens, cache_read_tokens")
_JOINED_COLUMNS = ("s.id, s.at, s.state, s.event_id, s.step_key, s.holder, s.gen, s.run_at, s.model, "
                   "CASE s.state WHEN 'settled' THEN s.cost_nanos ELSE s.reserved_nanos END, s.input_tokens, "
                   "s.output_tokens, s.cache_write_tokens, s.cache_read_tokens")


def usd_to_nanos(usd: float) -> int:
    return round(usd * NANOS_PER_USD)


def nanos_to_usd(nanos: int | None) -> float | None:
    return None if nanos is None else nanos / NANOS_PER_USD


def period(kind: str, now: int, zone: str) -> tuple[int, int]:
    """[start, end) of the owner's day or month holding `now`, as epoch seconds (DST handled: a local day
    may be 23 or 25 hours)."""
    tz = ZoneInfo(zone)
    today = datetime.fromtimestamp(now, tz).date()
    if kind == "daily":
        first, after = today, today + timedelta(days=1)
    elif kind == "monthly":
        first = today.replace(day=1)
        after = date(first.year + first.month // 12, first.month % 12 + 1, 1)
    else:
        raise ValueError(f"unknown budget {kind!r}; expected daily or monthly")
    return _midnight(first, tz), _midnight(after, tz)


def _midnight(day: date, tz: ZoneInfo) -> int:
    """The first moment of a local day. A zone whose clocks skip midnight (a DST change at 00:00) starts
    that day at the first moment that exists."""
    moment = datetime(day.year, day.month, day.day, tzinfo=tz)
    return int(moment.timestamp())


def check_budget_usd(value: float, what: str = "a budget") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ValueError(f"{what} is a number of US dollars, not {value!r}")
    if not 0 <= value <= MAX_BUDGET_USD:
        raise ValueError(f"{what} must be between 0 (no limit) and {MAX_BUDGET_USD:,.0f} US dollars, not {value:g}")
    return float(value)


def _row(values: Iterable[Any]) -> SpendRow:
    return SpendRow(*values)


class SpendMixin(StoreBase):
    # --- budgets --------------------------------------------------------------------------------
    def budgets(self, defaults: BudgetDefaults) -> dict[str, Budget]:
        """The budgets in force: one set with `agent-console budget` (stored here) wins over the settings'."""
        stored = {kind: (usd, set_at) for kind, usd, set_at in self._conn.execute(
            "SELECT kind, usd, set_at FROM budgets")}
        found: dict[str, Budget] = {}
        for kind, usd, source in (("daily", defaults.daily_usd, defaults.daily_from),
                                  ("monthly", defaults.monthly_usd, defaults.monthly_from)):
            if kind in stored:
                found[kind] = Budget(kind, float(stored[kind][0]), "inbox", int(stored[kind][1]))
            else:
                found[kind] = Budget(kind, float(usd), source)
        return found

    def set_budget(self, kind: str, usd: float, *, now: int) -> None:
        """Store a budget in the inbox (0 = no limit): it wins over the settings until cleared."""
        if kind not in BUDGET_KINDS:
            raise ValueError(f"unknown budget {kind!r}; expected daily or monthly")
        usd = check_budget_usd(usd, f"the {kind} budget")
        with self.write_transaction():
            self._conn.execute(
                """INSERT INTO budgets (kind, usd, set_at) VALUES (?, ?, ?)
                   ON CONFLICT (kind) DO UPDATE SET usd = excluded.usd, set_at = excluded.set_at""",
                (kind, usd, now),
            )

    def clear_budgets(self) -> int:
        """Forget the stored budgets: the settings' are in force again. Returns how many were stored."""
        with self.write_transaction():
            return len(self._conn.execute("DELETE FROM budgets RETURNING kind").fetchall())

    # --- the ledger -----------------------------------------------------------------------------
    def reserve_spend(
        self,
        *,
        model: str,
        worst_nanos: int | None,
        defaults: BudgetDefaults,
        now: int,
        holder: str | None = None,
        gen: int | None = None,
        event_id: int | None = None,
        step_key: str | None = None,
        run_at: int | None = None,
        prompt_tokens: int | None = None,
        max_tokens: int | None = None,
    ) -> SpendDecision:
        """Hold a call's worst case (worst_nanos; None when its model has no price) unless that would pass a
        budget in force; then nothing is written and the decision says which budget and until when.
        prompt_tokens and max_tokens, what the worst case was worked out from, are kept so that a price added
        later can re-price the reservation (UnpricedCall).

        One write transaction checks and reserves, so concurrent reservations are serialised. With holder
        and gen it is fenced like a journal step: a run that lost its lease spends nothing
        (StaleGeneration, recorded). Calls without a price made before the owner accepted them
        (accept_unknown_spend) no longer make a period's spend unknown."""
        refused: str | None = None
        with self.write_transaction():
            if holder is not None and gen is not None and not self._holds(holder, gen, now):
                refused = self._record_fenced("reserve", holder, gen, now, [] if event_id is None else [event_id],
                                              step_key or model)
            else:
                for budget in self.budgets(defaults).values():
                    if not budget.limited:
                        continue
                    if worst_nanos is None:
                        return SpendDecision(None, budget, unpriced=True)
                    start, end = period(budget.kind, now, defaults.zone)
                    spent = self._spent(start, end, accepted_until=self._accepted(budget.kind))
                    if spent is None or spent + worst_nanos > usd_to_nanos(budget.usd):
                        return SpendDecision(None, budget, spent, end)
                (reservation_id,) = self._conn.execute(
                    """INSERT INTO spend (at, state, event_id, step_key, holder, gen, run_at, model, reserved_nanos,
                                          asked_model, prompt_tokens, max_tokens)
                       VALUES (?, 'reserved', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id""",
                    (now, event_id, step_key, holder, gen, run_at, model, worst_nanos, model, prompt_tokens,
                     max_tokens),
                ).fetchall()[0]
                return SpendDecision(int(reservation_id))
        raise StaleGeneration(f"the model call of {step_key or model!r} refused to generation {gen}: {refused}")

    def settle_spend(
        self,
        reservation_id: int,
        *,
        model: str,
        cost_nanos: int | None,
        input_tokens: int,
        output_tokens: int,
        cache_write_tokens: int,
        cache_read_tokens: int,
        now: int,
    ) -> bool:
        """Record what a reserved call cost (None: its model has no price). Not fenced: the money is spent
        whoever asks, and a stale run's call must count too."""
        with self.write_transaction():
            return bool(self._conn.execute(
                """UPDATE spend SET state = 'settled', model = ?, cost_nanos = ?, input_tokens = ?, output_tokens = ?,
                   cache_write_tokens = ?, cache_read_tokens = ?, settled_at = ?
                   WHERE id = ? AND state = 'reserved' RETURNING id""",
                (model, cost_nanos, input_tokens, output_tokens, cache_write_tokens, cache_read_tokens, now,
                 reservation_id),
            ).fetchall())

    def release_spend(self, reservation_id: int) -> bool:
        """Drop the reservation of a call the provider refused or that never left this machine: it cost
        nothing."""
        with self.write_transaction():
            return bool(self._conn.execute(
                "DELETE FROM spend WHERE id = ? AND state = 'reserved' RETURNING id", (reservation_id,)
            ).fetchall())

    def _spent(self, start: int, end: int, *, accepted_until: int = -1) -> int | None:
        """What the calls made in [start, end) count: None when any of them made after accepted_until has no
        price (one made until then counts as nothing: the owner accepted it)."""
        total, unknown = self._conn.execute(
            f"""SELECT COALESCE(SUM({_COUNTED}), 0), COALESCE(SUM(CASE WHEN {_COUNTED} IS NULL AND at > ? THEN 1
                                                              ELSE 0 END), 0)
                FROM spend WHERE at >= ? AND at < ?""",
            (accepted_until, start, end),
        ).fetchall()[0]
        return None if unknown else int(total)

    def _accepted(self, kind: str) -> int:
        """Until when the calls without a price were accepted for the `kind` budget (-1: none were)."""
        value = self._scalar("SELECT at FROM spend_accepted WHERE kind = ?", (kind,))
        return -1 if value is None else int(value)

    def accept_unknown_spend(self, holder: str, gen: int, kind: str, *, now: int) -> bool:
        """The owner changed the `kind` budget while the agent was paused because the spend was unknown (a call
        without a price): the calls without a price made until now no longer stop the agent. Fenced: False
        when holder no longer holds the lease in generation gen. (Calls in the same second count as accepted:
        with a budget in force a model without a price is not called at all.)"""
        if kind not in BUDGET_KINDS:
            raise ValueError(f"unknown budget {kind!r}; expected daily or monthly")
        with self.write_transaction():
            if not self._holds(holder, gen, now):
                return False
            self._conn.execute(
                """INSERT INTO spend_accepted (kind, at) VALUES (?, ?)
                   ON CONFLICT (kind) DO UPDATE SET at = excluded.at""", (kind, now))
            return True

    # --- re-pricing -----------------------------------------------------------------------------
    def unpriced_spend(self) -> list[UnpricedCall]:
        """The calls whose cost (settled) or worst case (reserved) is unknown, for a price added later."""
        return [UnpricedCall(int(row[0]), str(row[1]), str(row[2]), row[3], int(row[4]), int(row[5]), int(row[6]),
                             int(row[7]), row[8], row[9])
                for row in self._conn.execute(
                    """SELECT id, state, model, asked_model, input_tokens, output_tokens, cache_write_tokens,
                              cache_read_tokens, prompt_tokens, max_tokens
                       FROM spend INDEXED BY spend_unpriced
                       WHERE (state = 'settled' AND cost_nanos IS NULL)
                          OR (state = 'reserved' AND reserved_nanos IS NULL)
                       ORDER BY id""")]

    def price_spend(self, prices: Iterable[tuple[int, int]]) -> int:
        """Write the cost (settled) or worst case (reserved) of calls that had none: (id, nano-dollars) each.
        A call that has one by now keeps it. Returns how many were priced."""
        priced = 0
        with self.write_transaction():
            for spend_id, nanos in prices:
                priced += len(self._conn.execute(
                    """UPDATE spend SET cost_nanos = CASE WHEN state = 'settled' THEN ? ELSE cost_nanos END,
                                         reserved_nanos = CASE WHEN state = 'reserved' THEN ? ELSE reserved_nanos END
                       WHERE id = ? AND ((state = 'settled' AND cost_nanos IS NULL)
                                         OR (state = 'reserved' AND reserved_nanos IS NULL)) RETURNING id""",
                    (nanos, nanos, spend_id)).fetchall())
        return priced

    def spent(self, kind: str, *, zone: str, now: int) -> int | None:
        """Nano-dollars spent in the owner's day or month holding `now` (reservations at their worst case);
        None when unknown."""
        start, end = period(kind, now, zone)
        return self._spent(start, end)

    # --- reading --------------------------------------------------------------------------------
    def spend_summary(self, defaults: BudgetDefaults, *, now: int) -> dict[str, Any]:
        """The `status --json` contract: today's and this month's spend in USD (null: unknown, some call has
        no price), the budgets in force (null: no limit) and where each came from."""
        budgets = self.budgets(defaults)
        daily, monthly = budgets["daily"], budgets["monthly"]
        return {
            "today_usd": nanos_to_usd(self.spent("daily", zone=defaults.zone, now=now)),
            "month_usd": nanos_to_usd(self.spent("monthly", zone=defaults.zone, now=now)),
            "daily_budget_usd": daily.usd if daily.limited else None,
            "monthly_budget_usd": monthly.usd if monthly.limited else None,
            "daily_budget_from": daily.source,
            "monthly_budget_from": monthly.source,
            "zone": defaults.zone,
        }

    def budget_pause_lifted(self, state: AgentState, defaults: BudgetDefaults, *, now: int) -> bool:
        """A budget pause is over when its period has rolled over or the budget it reached has changed
        (raised, lowered or cleared: the next reservation decides again)."""
        kind = state.budget
        if kind is None:
            return False
        if state.until is not None and now >= state.until:
            return True
        cause = state.cause if isinstance(state.cause, dict) else {}
        return self.budgets(defaults)[kind].usd != cause.get("limit_usd")

    def event_spend(self, event_id: int) -> list[SpendRow]:
        """The model calls filed under an event, oldest first."""
        return [_row(values) for values in self._conn.execute(
            f"SELECT {_ROW_COLUMNS} FROM spend INDEXED BY spend_event WHERE event_id = ? ORDER BY at, id",
            (event_id,))]

    def spend_rows(self, *, since: int) -> list[tuple[SpendRow, str | None, str | None]]:
        """Every model call made since `since`, with its event's source and source id."""
        return [
            (_row(values[:-2]), values[-2], values[-1])
            for values in self._conn.execute(
                f"""SELECT {_JOINED_COLUMNS}, i.source, i.source_id FROM spend s INDEXED BY spend_at
                    LEFT JOIN inbox i ON i.id = s.event_id WHERE s.at >= ? ORDER BY s.at, s.id""",
                (since,),
            )
        ]

    def daily_spend_by_model(self, *, days: int, zone: str, now: int) -> DailySpend:
        """Each model's spend per owner's day over the last `days` (today the last), for the console's chart:
        known costs added up (a reserved call counts its worst case until settled), calls without a price
        counted apart."""
        if days < 1:
            raise ValueError(f"days must be at least 1, not {days}")
        tz = ZoneInfo(zone)
        today = datetime.fromtimestamp(now, tz).date()
        shown = tuple(today - timedelta(days=days - 1 - n) for n in range(days))
        per_model: dict[str, list[Tally]] = {}
        for row, _source, _source_id in self.spend_rows(since=_midnight(shown[0], tz)):
            index = (datetime.fromtimestamp(row.at, tz).date() - shown[0]).days
            if 0 <= index < days:
                per_model.setdefault(row.model, [Tally() for _ in shown])[index].add(row)
        return DailySpend(shown, {model: tuple(tally.known_nanos for tally in tallies)
                                  for model, tallies in sorted(per_model.items())},
                          {model: sum(tally.unpriced for tally in tallies)
                           for model, tallies in sorted(per_model.items())})

    def usage_report(self, *, days: int, zone: str, now: int, top: int = 5) -> dict[str, Any]:
        """Tokens and cost per owner's day (the last `days`, today included), per source, and the `top`
        most expensive events; a cost is None where some call in it has no price."""
        if days < 1:
            raise ValueError(f"days must be at least 1, not {days}")
        tz = ZoneInfo(zone)
        today = datetime.fromtimestamp(now, tz).date()
        first = today - timedelta(days=days - 1)
        since = _midnight(first, tz)
        per_day = {first + timedelta(days=n): Tally() for n in range(days)}
        per_source: dict[str, Tally] = {}
        per_event: dict[int, Tally] = {}
        names: dict[int, tuple[str | None, str | None]] = {}
        total = Tally()
        for row, source, source_id in self.spend_rows(since=since):
            day = datetime.fromtimestamp(row.at, tz).date()
            for tally in (per_day.setdefault(day, Tally()), total,
                          per_source.setdefault(source or "(none)", Tally())):
                tally.add(row)
            if row.event_id is not None:
                per_event.setdefault(row.event_id, Tally()).add(row)
                names[row.event_id] = (source, source_id)
        ranked = sorted(per_event.items(), key=lambda item: (item[1].cost_nanos is not None,
                                                             item[1].cost_nanos or 0, item[1].tokens), reverse=True)
        return {
            "zone": zone,
            "since": since,
            "days": [{"date": day.isoformat(), **tally.public()} for day, tally in sorted(per_day.items())],
            "sources": [{"source": source, **tally.public()} for source, tally in
                        sorted(per_source.items(), key=lambda item: item[0])],
            "top_events": [{"event_id": event_id, "source": names[event_id][0], "source_id": names[event_id][1],
                            **tally.public()} for event_id, tally in ranked[:top]],
            "total": total.public(),
        }


@dataclass(frozen=True)
class DailySpend:
    """Spend per model per owner's day, oldest day first (nano-USD of priced calls), and each model's calls
    that had no price (counted in no day's bar)."""

    days: tuple[date, ...]
    nanos: dict[str, tuple[int, ...]]  # by model, one per day
    unpriced: dict[str, int]

    def day_total(self, index: int) -> int:
        return sum(per_day[index] for per_day in self.nanos.values())

    def model_total(self, model: str) -> int:
        return sum(self.nanos.get(model, ()))


class Tally:
    """Calls, tokens and cost added up; the cost stays None once any call in it has none."""

    def __init__(self) -> None:
        self.calls = 0
        self.unsettled = 0
        self.unpriced = 0
        self.known_nanos = 0
        self.input_tokens = self.output_tokens = self.cache_write_tokens = self.cache_read_tokens = 0

    def add(self, row: SpendRow) -> None:
        self.calls += 1
        self.unsettled += row.state != "settled"
        if row.cost_nanos is None:
            self.unpriced += 1
        else:
            self.known_nanos += row.cost_nanos
        self.input_tokens += row.input_tokens
        self.output_tokens += row.output_tokens
        self.cache_write_tokens += row.cache_write_tokens
        self.cache_read_tokens += row.cache_read_tokens

    @property
    def cost_nanos(self) -> int | None:
        return None if self.unpriced else self.known_nanos

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_write_tokens + self.cache_read_tokens

    def public(self) -> dict[str, Any]:
        return {
            "calls": self.calls, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "cache_write_tokens": self.cache_write_tokens, "cache_read_tokens": self.cache_read_tokens,
            "cost_usd": nanos_to_usd(self.cost_nanos), "unpriced_calls": self.unpriced,
            "unsettled_calls": self.unsettled,
        }

