"""The durable core: one SQLite file per inbox. The only code that speaks SQL; never imports Textual."""

from console.core.approvals import approval_id
from console.core.base import SendError, StaleGeneration
from console.core.caps import CapNotice, CapReached, HeldMessage
from console.core.db import (
    MIN_SQLITE,
    InboxIncomplete,
    InboxMoved,
    InboxMoving,
    MoveRefusal,
    StoreError,
    StoreUnavailable,
)
from console.core.inbox import MAX_PAYLOAD_DEPTH
from console.core.models import (
    DEAD_REASONS,
    STATUSES,
    AgentState,
    Approval,
    ApprovalDraft,
    Attempt,
    AuditCheck,
    AuditRow,
    Batch,
    Event,
    EventSearch,
    JournalStep,
    Lease,
    MemoryEntry,
    MemoryWrite,
    OutboxMessage,
    OutboxSearch,
    PhoneAnswer,
    PhoneCard,
    RefusedFinish,
    ReplayGuard,
    StrandedAnswer,
    Timer,
    TimerDraft,
    ToolCallRecord,
)
from console.core.options import StoreOptions
from console.core.outbox import OutboxChannel
from console.core.retention import PruneReport
from console.core.store import Store
from console.core.stranded import approved_step_key

__all__ = [
    "DEAD_REASONS",
    "MAX_PAYLOAD_DEPTH",
    "MIN_SQLITE",
    "STATUSES",
    "AgentState",
    "Approval",
    "ApprovalDraft",
    "Attempt",
    "AuditCheck",
    "AuditRow",
    "Batch",
    "CapNotice",
    "CapReached",
    "Event",
    "EventSearch",
    "HeldMessage",
    "InboxIncomplete",
    "InboxMoved",
    "InboxMoving",
    "JournalStep",
    "Lease",
    "MemoryEntry",
    "MemoryWrite",
    "MoveRefusal",
    "OutboxChannel",
    "OutboxMessage",
    "OutboxSearch",
    "PhoneAnswer",
    "PhoneCard",
    "PruneReport",
    "RefusedFinish",
    "ReplayGuard",
    "SendError",
    "StaleGeneration",
    "Store",
    "StoreError",
    "StoreOptions",
    "StoreUnavailable",
    "StrandedAnswer",
    "Timer",
    "TimerDraft",
    "ToolCallRecord",
    "approval_id",
    "approved_step_key",
]
