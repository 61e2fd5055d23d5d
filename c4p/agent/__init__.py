"""The host agent: one per GPU host, beside the training job.

Its binding side (this branch): :mod:`c4p.agent.jobs` holds one controller stream per job for
the QPs that leave this host and keeps the last bindings on disk; :mod:`c4p.agent.local` serves
them to the host's ranks (``libc4p``) over a Unix socket in the format of
:mod:`c4p.agent.wire`; :mod:`c4p.agent.local_config` is its configuration.
"""
