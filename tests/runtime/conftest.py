"""Fixtures the runtime's tests share with the agents' tests."""

from tests.agents.conftest import claude  # noqa: F401  (the stand-in Messages API on 127.0.0.1)
