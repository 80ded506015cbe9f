"""What an agent raises when the provider, not the events, is the trouble. The worker then runs nothing: the
run's events go back to pending with no attempt spent, and the agent as a whole waits or pauses.

A plain exception from Agent.run is the events' failure: counted, retried with backoff, parked dead after
max_attempts. These two are not, because retrying the events would only spend their attempts on a cause
they do not have.
"""

from __future__ import annotations

from typing import Any


class EventFailed(Exception):
    """The run failed on one event of its batch, which the agent names (a poison event): that event alone is
    charged. Its batch-mates keep their attempt and each runs alone next (Store.finish_run's `blame`)."""

    def __init__(self, event_id: int, reason: str) -> None:
        super().__init__(reason)
        self.event_id = event_id


class CallNotSent(Exception):
    """A tool call that was never sent: its server could not be reached (down, restarting, not started yet).
    Nothing happened, so it may be made later as if for the first time. str() is safe to show the model."""


class AnswerWaits(EventFailed):
    """An owner's yes whose approved call could not be sent (CallNotSent). Not the answer's failure: its event
    gives the attempt back and is tried again with the run's backoff while the server comes back, until the
    approval's own deadline; then it is parked dead as a stranded answer the owner can retry
    (Store.finish_run's `not_sent`)."""


class AgentUnavailable(Exception):
    """The agent cannot run anything right now. The message is the reason shown to the owner."""


class ProviderBusy(AgentUnavailable):
    """Back-pressure (a rate limit, an overload, no connection): wait, then try again.

    retry_after is the provider's own estimate in seconds (its retry-after header), None when it gave none."""

    def __init__(self, reason: str, *, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class AgentPaused(AgentUnavailable):
    """The provider refuses the agent's configuration (a bad key, a model it does not know, no budget left):
    nothing will work until someone changes it, so nothing runs until the engine restarts.

    notice_key names the failing configuration and what is wrong with it, so the owner is told once. A pause
    that lifts on its own says when (`until`) and what else lifts it (`cause`, see AgentState.cause), and
    brings its own `notice` for the owner."""

    def __init__(self, reason: str, *, notice_key: str, until: int | None = None, notice: str | None = None,
                 cause: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.notice_key = notice_key
        self.until = until
        self.notice = notice
        self.cause = cause


class BudgetReached(AgentPaused):
    """The next model call's worst case would pass the daily or monthly budget, so it was not made. The agent
    pauses until the period rolls over in the owner's time zone (`until`) or the owner changes that budget."""

    def __init__(self, kind: str, limit_usd: float, *, until: int, notice: str, notice_key: str,
                 unknown: bool = False) -> None:
        # unknown: what was spent is unknown (a call without a price), so a price added since (a restart) or a
        # changed budget (the owner accepts the unknown spend) lifts the pause too.
        cause: dict[str, Any] = {"budget": kind, "limit_usd": limit_usd}
        if unknown:
            cause["unknown"] = True
        super().__init__(f"{kind} budget reached", notice_key=notice_key, until=until, notice=notice, cause=cause)
        self.kind = kind
        self.limit_usd = limit_usd
