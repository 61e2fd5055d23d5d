"""Re-plans that move few flows: repair at a target (keep, evict, re-place), chains and
exchanges of moves on 2 tiers, the fat-tree's count-based moves, the degraded colouring, and the
fewest-moves search.

Loaded only when a plan has a previous plan or a degraded fabric (the planner's ``LAZY``).
May import: ``topology``, ``solver.errors``, ``solver.workload``, ``solver.yardstick``,
``solver.exact``, ``solver.space``, ``solver.bounds``.
"""
