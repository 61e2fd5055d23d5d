"""The planner's frame: independent parts and their figures, the structured constructions it
dispatches to, the assembly of a finished :class:`solver.planning.result.Plan`, and plan files.

May import every other room of ``solver``; only :mod:`solver.planner` (the entry) imports it
whole. May import: ``topology``, ``solver.errors``, ``solver.workload``, ``solver.yardstick``,
``solver.exact``, ``solver.space``, ``solver.bounds``, ``solver.search``, ``solver.repair``.
"""
