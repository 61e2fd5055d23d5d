"""Durable controller state: the :class:`Store` interface and its embedded SQLite (WAL) form."""

from c4p.store.base import (
    CommunicatorRecord,
    ControlMode,
    DecisionRecord,
    DecisionResult,
    EpochCommit,
    HeldBinding,
    JobPredictionRecord,
    JobRecord,
    LinkOverride,
    ModeSource,
    RollbackRecord,
    Store,
    StoredState,
    StoreError,
)
from c4p.store.sqlite import SqliteStore, Synchronous

__all__ = [
    "CommunicatorRecord",
    "ControlMode",
    "DecisionRecord",
    "DecisionResult",
    "EpochCommit",
    "HeldBinding",
    "JobPredictionRecord",
    "JobRecord",
    "LinkOverride",
    "ModeSource",
    "RollbackRecord",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoredState",
    "Synchronous",
]
