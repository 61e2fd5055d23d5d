"""The search space: a snapshot's flows, their equal-cost candidate paths and the capacities,
as arrays (:class:`solver.space.problem.Problem`), and which flows may keep their paths in a
re-plan (``incremental``).

Every method (bounds, search, repair) reads a problem and writes a choice per flow.
May import: ``topology``, ``solver.errors``, ``solver.workload``, ``solver.yardstick``,
``solver.exact``.
"""
