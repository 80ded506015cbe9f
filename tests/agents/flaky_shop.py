"""The example shop server (console/examples/shop_server.py, the `mcp` SDK over stdio), made to exit at start
while the file $SHOP_DOWN exists: a server restarting, or too slow to start, when an owner's yes resumes. Each
start is counted as a line in $SHOP_STARTS ("down" or "up"), so a test sees it was tried while it was down.

    python -m tests.agents.flaky_shop
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> None:
    down = Path(os.environ["SHOP_DOWN"]).exists()
    with open(os.environ["SHOP_STARTS"], "a", encoding="utf-8") as starts:
        starts.write("down\n" if down else "up\n")
    if down:
        print("shop: down for maintenance", file=sys.stderr, flush=True)
        sys.exit(3)
    from console.examples.shop_server import main as serve

    serve()
    # Ended at once after its last answer (tests/agents/mcp_servers.py::serve_stdio says why).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
