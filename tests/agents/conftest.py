from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.agents.stand_in import FakeClaude, serve_stand_in


@pytest.fixture
def claude() -> Iterator[FakeClaude]:
    """The stand-in Messages API on 127.0.0.1 for one test."""
    with serve_stand_in() as fake:
        yield fake
