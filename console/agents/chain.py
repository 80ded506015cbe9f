"""The chain of models and its one retry loop: which model asks each turn, and what a failure means.

Each turn of a conversation is asked of one model, chosen at the turn boundary and never changed inside it.
The choice is a journal step of its own (`<turn key>:model:<n>`), committed before the request goes out, so a
run that is retried, resumed or taken over after a crash asks the same model for that turn; only when that
model has since failed (or cools down now) is a new choice made, the next n. A committed turn is replayed from
the journal with the reply it stored, which names the model that gave it (`via`).

A choice is the first model in chain order that is usable now: ready, or its cooldown ended, or paused by an
earlier engine or generation (the configuration may have changed since; the same failure is not announced
twice). So the next turn, or the next run, goes back to the primary as soon as its cooldown ends. A failure
(console/agents/provider.py) is sorted once, here:
- back-pressure (429 with retry-after, 529, 502-504, no connection): the model cools down for its
  retry-after (30 s when it gives none); the same model is asked again after it (the agent waits, its events
  keep their attempts), unless it has been failing for failover_after seconds by then and another model is
  usable: that one answers the turn now;
- the provider refuses the model's key or the model itself (401/403, 404, a retired model): the model is
  paused, the owner is told once, and the next model answers; its quota or credit spent: it cools down an
  hour, the same way;
- a server error (500) or no reply in time: another model, when one is usable; else the events' failure;
- anything else (a request the API calls invalid) fails the run as it always did.
With no model usable, the run's events go back unrun with no attempt spent: the agent waits until the
earliest cooldown ends, or pauses when every model is paused. A chain of one behaves as the one model did.

The cooldowns live in the inbox (console/core/model_health.py), per model and credential, fenced, so they
survive a restart and a takeover, and `status`, the console and `agent-console models` show them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from console.agents.base import RunContext
from console.agents.errors import AgentPaused, ProviderBusy
from console.agents.provider import Model, ModelBusy, ModelError, ModelPaused
from console.core import Event
from console.timefmt import span

log = logging.getLogger("agent_console.models")

DEFAULT_COOLDOWN = 30     # seconds a model cools down after back-pressure without a retry-after, or a 500
MAX_COOLDOWN = 3600       # the longest a retry-after is taken at its word
QUOTA_COOLDOWN = 3600     # a model whose account's quota or credit is spent is tried again after an hour
ANNOUNCE_EVERY = 3600     # a fallback's answers are announced to the owner at most once an hour


def cooldown_seconds(retry_after: float | None) -> int:
    """How long back-pressure keeps a model cooling: its retry-after, or DEFAULT_COOLDOWN."""
    if retry_after is None:
        return DEFAULT_COOLDOWN
    return max(1, min(MAX_COOLDOWN, math.ceil(retry_after)))


def switch_line(turn_key: str, name: str, what: str, before: str, why: str | None) -> str:
    """The history line of a switch, which the transcript places before the turn it names (switch_turn)."""
    conversation, _, number = turn_key.rpartition(":turn:")
    return f"{conversation} turn {number}: model {name} ({what}) instead of {before}" + (f": {why}" if why else "")


def _never_asked() -> dict[str, Any]:
    raise AssertionError("a committed turn is replayed, never asked")


class ModelChain:
    def __init__(self, models: Sequence[Model], *, failover_after: int = 30, announce_fallback: bool = True) -> None:
        if not models:
            raise ValueError("a chain needs at least one model")
        self.models = list(models)
        self.by_name = {model.spec.name: model for model in self.models}
        self.failover_after = failover_after
        self.announce_fallback = announce_fallback

    @property
    def primary(self) -> Model:
        return self.models[0]

    def close(self) -> None:
        for model in self.models:
            model.close()

    def turn(self, ctx: RunContext, key: str, anchor: Event | None,
             ask: Callable[[Model], Callable[[], dict[str, Any]]]) -> dict[str, Any]:
        """The turn journalled under `key`: its committed reply, or the reply of the model chosen for it
        (ask(model) makes the request). Raises ProviderBusy / AgentPaused when no model can answer now, and a
        model's own error when it is the events' failure."""
        done = ctx.store.journal_step(key)
        if done is not None and done.state == "committed":
            return ctx.step(key, _never_asked, event=anchor)
        health = {row["credential"]: row for row in ctx.store.model_health()}
        if len(self.models) == 1:  # nothing to choose: no choice step, as the one-model agent had none
            only = self.primary
            try:
                answer: dict[str, Any] = ctx.step(key, ask(only), event=anchor)
            except ModelError as exc:
                self._failed(ctx, only, exc, health, set())
                raise AssertionError("a chain of one has no next model") from exc
            self._answered(ctx, only, health)
            return answer
        tried: set[str] = set()
        n = self._latest_choice(ctx, key)
        while True:
            choice_key = f"{key}:model:{n}"
            name: str = ctx.step(choice_key, lambda: self._pick(ctx, health, tried).spec.name, event=anchor)
            model = self.by_name.get(name)
            replayed = choice_key in ctx.replayed_steps
            if model is None or (replayed and (name in tried or not self._usable(ctx, model, health))):
                # Journalled by an earlier attempt, but that model is gone from the chain or cools down now.
                tried.add(name)
                n += 1
                continue
            if not replayed:
                self._note_switch(ctx, key, n, model, anchor, health)
            try:
                reply = ctx.step(key, ask(model), event=anchor)
            except ModelError as exc:
                self._failed(ctx, model, exc, health, tried)
                tried.add(name)
                n += 1
                continue
            self._answered(ctx, model, health)
            return reply

    def _before(self, ctx: RunContext, key: str, n: int) -> str:
        """The model the run had before this choice: the turn's previous choice, else the previous turn's model,
        else (its first turn) the primary."""
        if n > 1 and (step := ctx.store.journal_step(f"{key}:model:{n - 1}")) is not None and step.result:
            return str(step.result)
        conversation, _, number = key.rpartition(":turn:")
        if number.isdigit() and int(number) > 1:
            step = ctx.store.journal_step(f"{conversation}:turn:{int(number) - 1}")
            if step is not None and isinstance(step.result, dict) and step.result.get("via"):
                return str(step.result["via"])
        return self.primary.spec.name

    def _note_switch(self, ctx: RunContext, key: str, n: int, model: Model, anchor: Event | None,
                     health: dict[str, dict[str, Any]]) -> None:
        """Never silent: a turn asked of another model than the run's last one is a line in the event's history
        (the transcript shows it from the turns' `via`)."""
        before = self._before(ctx, key, n)
        if before == model.spec.name or anchor is None:
            return
        row = health.get(self.by_name[before].credential) if before in self.by_name else None
        why = row.get("reason") if row is not None and row.get("state") != "ready" else None
        detail = switch_line(key, model.spec.name, f"{model.spec.model}, {model.provider}", before, why)
        log.warning("%s: %s", key, detail)
        ctx.check_fence()
        ctx.store.note_model_switch(ctx.holder, ctx.gen, anchor.id, detail, now=ctx.time())

    def _latest_choice(self, ctx: RunContext, key: str) -> int:
        """The number of the last committed choice for this turn (1 when none is)."""
        n = 1
        while (step := ctx.store.journal_step(f"{key}:model:{n + 1}")) is not None and step.state == "committed":
            n += 1
        return n

    def _usable(self, ctx: RunContext, model: Model, health: dict[str, dict[str, Any]]) -> bool:
        row = health.get(model.credential)
        if row is None or row["state"] == "ready":
            return True
        if row["state"] == "cooling":
            return row["until"] is None or int(row["until"]) <= ctx.time()
        return (row["holder"], row["gen"]) != (ctx.holder, ctx.gen)  # paused by an earlier engine: try again

    def _pick(self, ctx: RunContext, health: dict[str, dict[str, Any]], tried: set[str]) -> Model:
        for model in self.models:
            if model.spec.name not in tried and self._usable(ctx, model, health):
                return model
        raise self._none_usable(ctx, health)

    def _none_usable(self, ctx: RunContext, health: dict[str, dict[str, Any]]) -> ProviderBusy | AgentPaused:
        now = ctx.time()
        rows = [(model, health.get(model.credential)) for model in self.models]
        why = "; ".join(f"{model.spec.name}: {row['reason'] or row['state']}" for model, row in rows if row)
        cooling = [int(row["until"]) for _model, row in rows
                   if row and row["state"] == "cooling" and row["until"] is not None and int(row["until"]) > now]
        if cooling:
            return ProviderBusy(f"every model is cooling down ({why})", retry_after=min(cooling) - now)
        return AgentPaused(f"no model of the chain can answer ({why})",
                           notice_key="models:" + ",".join(model.credential for model in self.models))

    def _others(self, ctx: RunContext, model: Model, health: dict[str, dict[str, Any]], tried: set[str]) -> bool:
        return any(other is not model and other.spec.name not in tried and self._usable(ctx, other, health)
                   for other in self.models)

    def _failed(self, ctx: RunContext, model: Model, exc: ModelError, health: dict[str, dict[str, Any]],
                tried: set[str]) -> None:
        """Record what the failure says about the model; return to ask the next one, or raise."""
        now = ctx.time()
        name = model.spec.name
        row = health.get(model.credential)
        others = self._others(ctx, model, health, tried)
        reason = str(exc)
        if isinstance(exc, ModelBusy):
            until = now + cooldown_seconds(exc.retry_after)
            # A streak goes on while the model keeps failing; one that ended (cooled down, not asked for a while)
            # starts again from now.
            streak = row is not None and row["failing_since"] is not None and (
                int(row["until"] or 0) + self.failover_after >= now)
            since = int(row["failing_since"]) if row is not None and streak else now
            self._store(ctx, model, health, "cooling", until=until, reason=reason, failing_since=since)
            if others and until - since >= self.failover_after:
                log.warning("model %s: %s; failing for %s, past failover_after (%s s): the next model answers",
                            name, reason, span(until - since), self.failover_after)
                return
            raise exc
        if isinstance(exc, ModelPaused):
            lifts_at: int | None = now + QUOTA_COOLDOWN if exc.kind == "budget" else None
            state = "cooling" if lifts_at is not None else "paused"
            notice = None
            if others:
                lifts = "for an hour" if lifts_at else "until the engine restarts"
                notice = (f"Model {name} cannot answer: {reason}. The agent goes on with the next model of the "
                          f"chain; {name} is left out {lifts}.")
            self._store(ctx, model, health, state, until=lifts_at, reason=reason, failing_since=None,
                        notice=notice, notice_key=exc.notice_key)
            if others:
                log.warning("model %s: %s; the next model answers", name, reason)
                return
            raise exc
        if exc.transient and others:
            self._store(ctx, model, health, "cooling", until=now + DEFAULT_COOLDOWN, reason=reason,
                        failing_since=now)
            log.warning("model %s: %s; the next model answers", name, reason)
            return
        raise exc

    def _store(self, ctx: RunContext, model: Model, health: dict[str, dict[str, Any]], state: str, *,
               until: int | None, reason: str, failing_since: int | None, notice: str | None = None,
               notice_key: str | None = None) -> None:
        now = ctx.time()
        ctx.check_fence()
        ctx.store.set_model_health(ctx.holder, ctx.gen, model.credential, model.spec.name, state, now=now,
                                   until=until, reason=reason, failing_since=failing_since, notice=notice,
                                   notice_key=notice_key)
        before = health.get(model.credential) or {}
        health[model.credential] = {**before, "credential": model.credential, "name": model.spec.name,
                                    "state": state, "until": until, "reason": reason,
                                    "failing_since": failing_since, "holder": ctx.holder, "gen": ctx.gen}

    def _answered(self, ctx: RunContext, model: Model, health: dict[str, dict[str, Any]]) -> None:
        row = health.get(model.credential)
        now = ctx.time()
        if row is not None and (row["state"] != "ready" or row.get("failing_since") is not None
                                or row.get("notified") is not None):
            ctx.store.model_answered(ctx.holder, ctx.gen, model.credential, model.spec.name, now=now)
            health[model.credential] = {**row, "state": "ready", "until": None, "reason": None,
                                        "failing_since": None, "notified": None}
        if model is self.primary or not self.announce_fallback:
            return
        primary = health.get(self.primary.credential)
        why = f" ({primary['reason']})" if primary and primary.get("reason") else ""
        ctx.store.announce_model(
            ctx.holder, ctx.gen, model.credential, model.spec.name,
            f"Fallback model {model.spec.name} ({model.spec.model}) is answering for the agent: the primary, "
            f"{self.primary.spec.name}, cannot{why}. You hear this at most once an hour.",
            now=now, every=ANNOUNCE_EVERY)
