"""Run by tests/tui/test_start_imports.py in a fresh interpreter: open the console headless on a new inbox and
print, as JSON, the modules loaded when its first frame is on the screen (the moment the engine is about to
start), whether the events pane had drawn its first page then, and the modules loaded once the engine runs."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from console.config import Settings
from console.tui.app import ConsoleApp
from console.tui.widgets.events_pane import EventsPane

seen: dict[str, Any] = {}
start_engine = ConsoleApp._start_engine


async def probe(self: ConsoleApp, first_reads: Sequence[Any] = ()) -> None:
    for read in first_reads:
        await read.wait()
    seen["first_frame"] = sorted(sys.modules)
    seen["rows_drawn"] = self.query_one(EventsPane).view is not None
    await start_engine(self, first_reads)


async def main() -> None:
    ConsoleApp._start_engine = probe  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as folder:
        app = ConsoleApp(Settings(db=Path(folder) / "inbox.db"), install_defaults=False,
                         state_path=Path(folder) / "state.json")
        async with app.run_test(size=(120, 40)) as pilot:
            deadline = asyncio.get_running_loop().time() + 60
            while not app.started and app.start_error is None:
                if asyncio.get_running_loop().time() > deadline:
                    raise SystemExit("the engine did not start within 60 s")
                await pilot.pause(0.01)
            seen["started"] = sorted(sys.modules)
            seen["start_error"] = app.start_error
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main())
