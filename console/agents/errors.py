"""What an agent raises when the provider, not the events, is the trouble. The worker then runs nothing: the
run's events go back to pending with no attempt spent, and the agent as a whole waits or pauses.

A plain exception from Agent.run is the events' failure: counted, retried with backoff, parked dead after
max_attempts. These two are not, because retrying the events would only spend their attempts on a cause
they do not have.
"""

from __future__ import annotations


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

    notice_key names the failing configuration and what is wrong with it, so the owner is told once."""

    def __init__(self, reason: str, *, notice_key: str) -> None:
        super().__init__(reason)
        self.notice_key = notice_key
