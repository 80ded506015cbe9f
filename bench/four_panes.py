"""The peer both first-frame benches measure the console against: a plain Textual app with four panes (a
header, a 40-row table, three panes below it, a footer), doing nothing else. Run as a script it starts in the
terminal (bench/first_frame_tmux.py); bench/console_bench.py imports it in its child and runs it under the pilot."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.containers import Horizontal
from textual.widgets import DataTable, Footer, Static


class FourPanes(App[None]):
    def compose(self) -> ComposeResult:
        yield Static("agent-console · inbox.db", id="header")
        table: DataTable[str] = DataTable()
        table.add_columns("id", "source", "source id", "status", "age")
        table.add_rows([(str(i), "chat", f"c-{i}", "done", f"{i}s") for i in range(40)])
        yield table
        with Horizontal():
            yield Static("Lease\nnobody holds it", id="lease")
            yield Static("Approvals\nnone pending", id="approvals")
            yield Static("Outbox\nnothing queued", id="outbox")
        yield Footer()


if __name__ == "__main__":
    FourPanes().run()
