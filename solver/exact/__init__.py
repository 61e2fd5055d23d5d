"""Exact constructions on structure: bipartite edge colourings, the fat-tree's stage-wise
colouring and its per-link counts, alternating chains within colour rooms.

Pure combinatorics over arrays, proven optimal by the structure they exploit; they know no
flows file and no planner, so the search space and every method above can use them.
May import: ``topology``, ``solver.errors``.
"""
