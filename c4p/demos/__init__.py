"""What ``make demo`` runs: ``python -m c4p.demos.plan`` (ECMP vs c4p on an embedded fabric),
``python -m c4p.demos.service`` (the controller on loopback: jobs register, a link is drained,
bindings follow) and ``python -m c4p.demos.rollout`` (shadow -> canary -> all active, with the
report). No switches are needed; everything runs on loopback."""
