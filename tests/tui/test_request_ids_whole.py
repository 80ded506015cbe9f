"""Issue 36: the approvals pane never cuts a request id (what the owner answers by, `approve ID`): at 80 columns
the pane is about 24 cells wide and `apr-18-2cb1f3a9` was drawn as `apr-18-2cb1`."""

from __future__ import annotations

import pytest

from console.core import Approval
from console.tui.widgets.approvals_pane import approval_cell

NOW = 1_700_000_000


def asking(request_id: str) -> Approval:
    return Approval(request_id, "mcp__shop__refund(...)", None, None, NOW - 60, NOW + 240, None, None, event_id=18,
                    tool="mcp__shop__refund", arguments={"order": "881", "amount": 12.5,
                                                         "reason": "the parcel never came, says the customer"})


@pytest.mark.parametrize("width", [12, 22, 24, 36])
@pytest.mark.parametrize("request_id", ["apr-18-2cb1f3a9", "apr-18-2cb1f3a9-with-a-very-long-tail-of-its-own"])
def test_the_request_id_is_whole_at_every_width(width: int, request_id: str) -> None:
    cell, height = approval_cell(asking(request_id), NOW, width)
    lines = cell.plain.split("\n")
    assert height == len(lines) and all(len(line) <= width for line in lines)  # nothing left for the table to cut
    assert request_id in "".join(lines)  # whole: beside the countdown, or on lines of its own
