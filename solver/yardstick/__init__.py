"""How good a set of paths is: max-min fair rates, bus bandwidth, and the ECMP baseline.

The yardstick measures any plan (c4p's, greedy's, ECMP's) the same way, so it must not depend on
how plans are made. May import: ``topology``, ``solver.errors``, ``solver.workload``.
"""
