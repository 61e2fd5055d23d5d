"""What must be carried: job files, collective patterns, the flows (one per QP), placement.

The first room of the pipeline (intent -> flows): a job's ranks and communicators become
:class:`solver.workload.flows.Flow` records that every later room reads. Nothing here knows a
path. May import: ``topology``, ``solver.errors``.
"""
