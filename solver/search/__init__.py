"""Searches for fabrics where no structure proves the optimum: the greedy least-loaded
construction (also the baseline ``c4p plan`` reports) and OR-Tools CP-SAT with a hint and a bound.

May import: ``topology``, ``solver.errors``, ``solver.workload``, ``solver.yardstick``,
``solver.exact``, ``solver.space``, ``solver.bounds``.
"""
