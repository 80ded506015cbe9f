"""Child process for test_stuck_run_exit: an engine whose agent never returns is stopped, then the process
must end (the abandoned run's thread may not hold the interpreter's exit)."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Any

from console.assembly import build_engine
from console.config import Settings

NEVER = threading.Event()


class StuckAgent:
    name = "stuck"

    def run(self, ctx: Any) -> None:
        NEVER.wait()  # a hung network call, say


async def main(db: Path) -> None:
    engine = build_engine(Settings(db=db), agent=StuckAgent(), holder="stuck", idle_cap=0.1, install_defaults=False,
                    shutdown_grace=0.2)
    await engine.start()
    await engine.ingest("chat", "m1", {"text": "hi"})
    while not engine.worker.busy:
        await asyncio.sleep(0.01)  # polls a condition
    await engine.stop()
    print("stopped", flush=True)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
