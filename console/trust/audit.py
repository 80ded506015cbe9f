"""The audit trail as the owner reads it (`agent-console audit --json/--csv`): one flat record per row, every field
named (issue 32: what the owner sees of the trail is trust's; the chain, its hashes, its prune rows and its
verification are the core's ledger, core/audit.py)."""

from __future__ import annotations

from typing import Any

from console.core.models import AuditRow

# The columns of an exported row (`agent-console audit --json/--csv`), in order.
AUDIT_FIELDS = ("seq", "at", "kind", "event_id", "run", "tool", "arguments", "request_id", "trusted", "provenance",
                "tainted_by", "rule", "decision", "answered_via", "outcome", "detail", "prev_hash", "hash")


def audit_record(row: AuditRow) -> dict[str, Any]:
    """One row as the export shows it: flat, every field of AUDIT_FIELDS (None where it does not apply)."""
    body = row.body if isinstance(row.body, dict) else {}
    found = body.get("provenance")
    provenance: dict[str, Any] = found if isinstance(found, dict) else {}
    detail = body.get("detail")
    if row.kind == "pruned":
        detail = (f"pruned {body.get('rows')} rows written before {body.get('before')} (through row "
                  f"{body.get('through')}, whose hash was {body.get('hash')})")
    return {
        "seq": row.seq, "at": row.at, "kind": row.kind, "event_id": row.event_id, "run": body.get("run"),
        "tool": body.get("tool"), "arguments": body.get("arguments"), "request_id": body.get("request_id"),
        "trusted": provenance.get("trusted"), "provenance": provenance.get("summary"),
        "tainted_by": provenance.get("tainted_by"), "rule": body.get("rule"),
        "decision": body.get("decision"), "answered_via": body.get("answered_via"), "outcome": body.get("outcome"),
        "detail": detail, "prev_hash": row.prev_hash, "hash": row.hash,
    }
