"""The outside: the signed webhook receiver and the outbox channels."""
