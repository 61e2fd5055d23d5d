"""What no plan can beat: combinatorial and LP bounds on the busiest link, and lower bounds on
the flows a re-plan must move (with a Lagrangian proof from any duals).

A bound is what makes "optimal" a claim and the gap a number. May import: ``topology``,
``solver.errors``, ``solver.workload``, ``solver.yardstick``, ``solver.exact``, ``solver.space``.
"""
