"""Budgets that fail closed: every model call is reserved at its worst case before it is made, and settled
with what it cost after.

The worst case is the call's prompt at the dearer of the input and cache-write prices plus max_tokens of
output, at the model's prices (console/pricing.py). The prompt is bounded at one token a byte (no
token is shorter), and when that bound would pass a budget the API's own count of the prompt
(count_tokens) is reserved instead, with a margin. A call whose reservation would still pass the daily or
monthly budget in force is not made: BudgetReached pauses the agent (no event spends an attempt) until the
period rolls over in the owner's time zone or the owner changes that budget. A model with no price cannot
be held to a budget, so with a budget in force its calls are not made either. The reservation and the check
are one transaction in the inbox (Store.reserve_spend), so concurrent calls cannot pass a budget together.

A call is priced at the dearer of the model asked for and the model that answered (a routing proxy that
answers as a cheaper model does not make the call cheaper). A call whose model had no price is re-priced
from its stored tokens once the price table has one (reprice, before every reservation).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from console.agents.base import RunContext
from console.agents.errors import AgentPaused, BudgetReached
from console.config import Settings
from console.core import Event, Store, StoreUnavailable
from console.core.models import BudgetDefaults, SpendDecision, UnpricedCall
from console.pricing import Price, PriceTable, Usage
from console.spendfmt import money
from console.timefmt import span

log = logging.getLogger("agent_console.spend")

# The API's token count "may differ by a small amount" from what is billed: what is reserved for a counted
# prompt is its count plus a tenth, plus the tool-use system prompt the count may leave out.
COUNT_MARGIN = 1.1
COUNT_SLACK_TOKENS = 1_000


@dataclass(frozen=True)
class Meter:
    """What one model call is charged to: the run that makes it (its inbox, lease and start) and the turn."""

    store: Store
    holder: str | None
    gen: int | None
    clock: Callable[[], int]
    run_at: int | None
    event_id: int | None
    step_key: str

    @classmethod
    def for_turn(cls, ctx: RunContext, event: Event | None, step_key: str) -> Meter:
        return cls(ctx.store, ctx.holder, ctx.gen, ctx.time, ctx.now, None if event is None else event.id, step_key)


@dataclass(frozen=True)
class Reservation:
    id: int
    model: str
    worst_nanos: int | None
    price: Price | None


class SpendGuard:
    """The price table and the settings' budgets, for one agent."""

    def __init__(self, prices: PriceTable | None = None, defaults: BudgetDefaults | None = None) -> None:
        self.prices = prices or PriceTable()
        self.defaults = defaults or BudgetDefaults()

    @classmethod
    def from_settings(cls, settings: Settings) -> SpendGuard:
        return cls(PriceTable.from_config(settings.prices), settings.budget_defaults())

    def reserve(self, meter: Meter, model: str, prompt_tokens: int, max_tokens: int, *,
                count_tokens: Callable[[], int | None] | None = None) -> Reservation:
        """Hold the call's worst case, or raise BudgetReached (a budget would be passed) or AgentPaused (a
        budget is in force and the model has no price). Fenced: a run that lost its lease spends nothing.

        prompt_tokens is a bound no prompt can pass (a token a byte). When it would pass a budget,
        count_tokens (the API's own count, None when it cannot tell) is asked, and its count with a margin
        reserved instead if that is less: only near the limit, since it costs a request."""
        self.reprice(meter.store)
        price = self.prices.price(model)
        now = meter.clock()
        decision = self._reserve(meter, model, price, prompt_tokens, max_tokens, now)
        if (decision.reservation_id is None and decision.refused is not None and not decision.unpriced
                and decision.spent_nanos is not None and count_tokens is not None):
            counted = count_tokens()
            if counted is not None:
                counted_bound = math.ceil(counted * COUNT_MARGIN) + COUNT_SLACK_TOKENS
                if counted_bound < prompt_tokens:
                    prompt_tokens = counted_bound
                    decision = self._reserve(meter, model, price, prompt_tokens, max_tokens, now)
        worst = None if price is None else price.worst_case_nanos(prompt_tokens, max_tokens)
        if decision.reservation_id is not None:
            return Reservation(decision.reservation_id, model, worst, price)
        raise self._refusal(decision, model, worst, now)

    def _reserve(self, meter: Meter, model: str, price: Price | None, prompt_tokens: int, max_tokens: int,
                 now: int) -> SpendDecision:
        worst = None if price is None else price.worst_case_nanos(prompt_tokens, max_tokens)
        return meter.store.reserve_spend(
            model=model, worst_nanos=worst, defaults=self.defaults, now=now, holder=meter.holder, gen=meter.gen,
            event_id=meter.event_id, step_key=meter.step_key, run_at=meter.run_at, prompt_tokens=prompt_tokens,
            max_tokens=max_tokens)

    def reprice(self, store: Store) -> int:
        """Price the stored calls whose model had no price and has one now (a price added to the config):
        a day's spend that was unknown becomes known. Returns how many were priced."""
        try:
            found = store.unpriced_spend()
            priced = [(call.id, nanos) for call in found if (nanos := self._price_of(call)) is not None]
            return store.price_spend(priced) if priced else 0
        except StoreUnavailable as exc:  # the reservation after it decides on what is stored
            log.warning("could not re-price the calls without a price (%s)", exc)
            return 0

    def _price_of(self, call: UnpricedCall) -> int | None:
        prices = [price for name in dict.fromkeys((call.asked_model or call.model, call.model))
                  if (price := self.prices.price(name)) is not None]
        if not prices:
            return None
        if call.state == "settled":
            usage = Usage(call.input_tokens, call.output_tokens, call.cache_write_tokens, call.cache_read_tokens)
            return max(price.cost_nanos(usage) for price in prices)
        if call.prompt_tokens is None or call.max_tokens is None:
            return None  # reserved before its tokens were kept: nothing to work its worst case out from
        return max(price.worst_case_nanos(call.prompt_tokens, call.max_tokens) for price in prices)

    def _refusal(self, decision: SpendDecision, model: str, worst: int | None, now: int) -> AgentPaused:
        budget = decision.refused
        assert budget is not None
        if decision.unpriced:
            return AgentPaused(
                f"model {model!r} has no price, so the {budget.kind} budget cannot be kept: add "
                f'[prices."{model}"] to the config', notice_key=f"price:{model}:{budget.kind}")
        assert decision.until is not None
        zone = ZoneInfo(self.defaults.zone)
        period = "today" if budget.kind == "daily" else "this month"
        rolls = "the day rolls over" if budget.kind == "daily" else "the month rolls over"
        when = datetime.fromtimestamp(decision.until, zone).strftime("%Y-%m-%d %H:%M")
        if decision.spent_nanos is None:
            spent = (f"what was spent {period} is unknown (a model call in it has no price): add its price under "
                     f"[prices] and restart, or change the budget to go on regardless")
        else:
            spent = (f"{money(decision.spent_nanos)} spent {period} of {money(round(budget.usd * 1e9))}, and the "
                     f"next model call could cost up to {money(worst)}")
        notice = (f"The agent is paused: {budget.kind} budget reached ({spent}). Nothing runs, and no event loses "
                  f"an attempt, until {rolls} ({when} {self.defaults.zone}, in {span(decision.until - now)}) or "
                  f"the budget is raised: agent-console budget --{budget.kind} AMOUNT")
        return BudgetReached(budget.kind, budget.usd, until=decision.until, notice=notice,
                             notice_key=f"budget:{budget.kind}:{decision.until}:{budget.usd!r}",
                             unknown=decision.spent_nanos is None)

    def settle(self, meter: Meter, reservation: Reservation, answered_model: str | None, usage: Usage) -> int | None:
        """Record what the call cost: at the dearer of the model asked for and the model that answered (a
        proxy answering as a cheaper model is still paid at the price of the one asked for; a dearer one at
        its own). Returns the cost in nano-dollars, None when neither has a price."""
        model = answered_model or reservation.model
        prices = [price for price in (reservation.price, self.prices.price(model)) if price is not None]
        cost = max((price.cost_nanos(usage) for price in prices), default=None)
        if cost is not None and reservation.worst_nanos is not None and cost > reservation.worst_nanos:
            log.warning("a model call cost %s, more than the %s reserved for it: the estimate was short",
                        money(cost), money(reservation.worst_nanos))
        try:
            meter.store.settle_spend(
                reservation.id, model=model, cost_nanos=cost, input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens, cache_write_tokens=usage.cache_write_tokens,
                cache_read_tokens=usage.cache_read_tokens, now=meter.clock())
        except StoreUnavailable as exc:  # the reply is paid for: failing the run now would only pay again
            log.warning("could not settle a model call (%s); it stays counted at its worst case, %s", exc,
                        money(reservation.worst_nanos))
        return cost

    def release(self, meter: Meter, reservation: Reservation) -> None:
        """The call cost nothing (the provider refused it, or it never left this machine)."""
        try:
            meter.store.release_spend(reservation.id)
        except StoreUnavailable as exc:  # the run fails of its own error; the budget errs on the safe side
            log.warning("could not release a model call's reservation (%s); it stays counted at its worst case",
                        exc)
