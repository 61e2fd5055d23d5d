"""The host agent (``c4p agent``): one per GPU host, beside the training job.

Two sides, one daemon and one config (``AgentConfig``; the binding side is its optional
``bindings:`` section, run as the component :class:`c4p.agent.local.BindingsSide`; both sides
dial the same controllers through :mod:`c4p.agent.dial`):
- probing for the controller: ``config`` (the config file and its OS check), ``executor``
  (the safety checks and pacing of probe batches), ``daemon`` (process life, the controller
  session, reconnects), ``probe_wire`` (probes and traces on ``c4p.v1.AgentService``),
  ``probers`` (which prober runs the probes);
- bindings for the host's ranks: :mod:`c4p.agent.jobs` holds one controller stream per job for
  the QPs that leave this host and keeps the last bindings on disk; :mod:`c4p.agent.local`
  serves them to the ranks (``libc4p``) over a Unix socket in the format of
  :mod:`c4p.agent.wire`; :mod:`c4p.agent.local_config` is its config section;
  :mod:`c4p.agent.static` reads and writes the offline per-host binding files.
"""
