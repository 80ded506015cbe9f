"""A toy shop as an MCP server over stdio: the example the demo and the offline agent use.

    python -m console.examples.shop_server

Its orders live in a JSON file: $SHOP_STATE, or shop.json in agent-console's data folder, seeded with a few
orders on first use. It honours the idempotency key agent-console sends in each request's `_meta`: a refund or a
deletion whose key it has seen before returns the stored result and changes nothing, so a call repeated after a
crash (the runtime's at-least-once) happens once here. The file also counts the calls each tool handled
(`calls`) and the repeats it answered from its record (`replays`), which the tests read.

Every change is one locked read-modify-write of the file, replaced atomically, so two server processes on one
file (a restart overlapping the old process) never lose a refund or a key.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import platformdirs
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from typing_extensions import TypedDict  # pydantic needs it for the tool schemas on Python < 3.12

# The `_meta` key agent-console puts each call's idempotency key under (console.agents.mcp sends it).
IDEMPOTENCY_META_KEY = "agent-console/idempotency-key"
STATE_ENV = "SHOP_STATE"
OWNER_ONLY = 0o600
_Result = TypeVar("_Result")

SEED_ORDERS: dict[str, dict[str, Any]] = {
    "881": {"status": "paid", "amount": 42.50, "refunded": 0.0, "customer": "Ada Lovelace"},
    "882": {"status": "shipped", "amount": 19.99, "refunded": 0.0, "customer": "Grace Hopper"},
    "883": {"status": "delivered", "amount": 120.00, "refunded": 0.0, "customer": "Alan Turing"},
    "884": {"status": "paid", "amount": 7.25, "refunded": 0.0, "customer": "Katherine Johnson"},
}


class Order(TypedDict):
    order: str
    status: str
    amount: float
    refunded: float
    customer: str


class Refund(TypedDict):
    order: str
    refunded_now: float
    status: str
    amount: float
    refunded: float
    customer: str


class Deletion(TypedDict):
    order: str
    deleted: bool


def state_path() -> Path:
    configured = os.environ.get(STATE_ENV)
    if configured:
        return Path(configured)
    return Path(platformdirs.user_data_dir("agent-console")) / "shop.json"


def seeded_state() -> dict[str, Any]:
    return {"orders": copy.deepcopy(SEED_ORDERS), "calls": {}, "replays": {}, "idempotency": {}}


@contextlib.contextmanager
def shop_state(path: Path | None = None) -> Iterator[dict[str, Any]]:
    """The state, locked against other processes for the block; what the block leaves in it is written
    atomically (a crash leaves the old file or the new one, never half of one)."""
    path = path or state_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock_fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, OWNER_ONLY)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            state = seeded_state()
        yield state
        _write_atomically(path, state)
    finally:
        os.close(lock_fd)  # closing releases the lock


def _write_atomically(path: Path, state: dict[str, Any]) -> None:
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), OWNER_ONLY)
            json.dump(state, handle, indent=2)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _count(state: dict[str, Any], counter: str, tool: str) -> None:
    counts = state.setdefault(counter, {})
    counts[tool] = counts.get(tool, 0) + 1


def _order(state: dict[str, Any], order: str) -> Order:
    found = state["orders"].get(order)
    if found is None:
        raise ToolError(f"there is no order {order}")
    return Order(order=order, status=found["status"], amount=found["amount"], refunded=found["refunded"],
                 customer=found["customer"])


def _idempotency_key(ctx: Context) -> str | None:
    meta = ctx.request_context.meta or {}
    key = meta.get(IDEMPOTENCY_META_KEY)
    return key if isinstance(key, str) and key else None


def _handle(tool: str, change: Callable[[dict[str, Any]], _Result], *, key: str | None = None) -> _Result:
    """One call, counted, in one locked transaction. With a key, a key seen before gets the stored result and
    nothing runs again; a refused change is counted but its key not remembered (nothing happened to repeat)."""
    refused: ToolError | None = None
    with shop_state() as state:
        if key is not None and key in state["idempotency"]:
            seen = state["idempotency"][key]
            if seen["tool"] != tool:
                refused = ToolError(f"the idempotency key was already used for a {seen['tool']} call")
            else:
                _count(state, "replays", tool)
                return cast(_Result, seen["result"])
        else:
            _count(state, "calls", tool)
            try:
                result = change(state)
            except ToolError as exc:
                refused = exc
            else:
                if key is not None:
                    state["idempotency"][key] = {"tool": tool, "result": result}
                return result
    raise refused


server = MCPServer(
    "shop",
    instructions="A toy shop's orders: look them up, list them, refund or delete one.",
    log_level="WARNING",
)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup_order(order: str) -> Order:
    """Looks up one order: its status, amount, what was refunded, and the customer."""
    return _handle("lookup_order", lambda state: _order(state, order))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def list_orders() -> list[Order]:
    """Lists every order with its status, amount and customer."""
    return _handle("list_orders", lambda state: [_order(state, order) for order in sorted(state["orders"])])


@server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=False))
def refund(order: str, ctx: Context, amount: float | None = None) -> Refund:
    """Refunds an order: the given amount, or all that is left of it. Marks the order refunded."""

    def change(state: dict[str, Any]) -> Refund:
        current = _order(state, order)
        left = round(current["amount"] - current["refunded"], 2)
        if current["status"] == "refunded" or left <= 0:
            raise ToolError(f"order {order} is already refunded")
        wanted = left if amount is None else round(amount, 2)
        if wanted <= 0:
            raise ToolError("the amount to refund must be more than 0")
        if wanted > left:
            raise ToolError(f"order {order} has only {left:.2f} left to refund")
        record = state["orders"][order]
        record["refunded"] = round(record["refunded"] + wanted, 2)
        record["status"] = "refunded" if record["refunded"] >= record["amount"] else "partially refunded"
        after = _order(state, order)
        return Refund(order=order, refunded_now=wanted, status=after["status"], amount=after["amount"],
                      refunded=after["refunded"], customer=after["customer"])

    return _handle("refund", change, key=_idempotency_key(ctx))


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_order(order: str, ctx: Context) -> Deletion:
    """Deletes an order for good."""

    def change(state: dict[str, Any]) -> Deletion:
        _order(state, order)
        del state["orders"][order]
        return Deletion(order=order, deleted=True)

    return _handle("delete_order", change, key=_idempotency_key(ctx))


def main() -> None:
    server.run(transport="stdio")


if __name__ == "__main__":
    main()
