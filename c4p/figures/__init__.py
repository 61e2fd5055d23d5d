"""The figures c4p gives about itself: the scenario ladder (ECMP vs greedy vs c4p vs the bound,
``c4p bench``), the failure ladder (re-plan time, moves against their lower bound) and the
rollout report from the decision log (``c4p report``). What they share: each runs or reads the
real product and reports ratios side by side, never a figure of its own making."""
