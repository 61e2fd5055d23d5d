"""Durable controller state: the :class:`Store` interface and its embedded SQLite (WAL) form."""

from c4p.store.base import (
    CommunicatorRecord,
    DecisionRecord,
    DecisionResult,
    EpochCommit,
    HeldBinding,
    JobPredictionRecord,
    JobRecord,
    LinkOverride,
    Store,
    StoredState,
    StoreError,
)
from c4p.store.sqlite import SqliteStore, Synchronous

__all__ = [
    "CommunicatorRecord",
    "DecisionRecord",
    "DecisionResult",
    "EpochCommit",
    "HeldBinding",
    "JobPredictionRecord",
    "JobRecord",
    "LinkOverride",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoredState",
    "Synchronous",
]
