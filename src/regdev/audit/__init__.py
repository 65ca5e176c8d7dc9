"""The record beside the pipeline: the append-only audit log (SQLite) and its readers, and the
idempotency keys, which are stored in the same transaction as the write they answer for."""
