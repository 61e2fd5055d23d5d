"""The host agent (``c4p agent``): probes from the host's NICs for the controller.

``config`` (the config file and its OS check), ``executor`` (the safety checks and pacing of
probe batches), ``daemon`` (process life, the controller session, reconnects), ``wire`` (probes
and traces on ``c4p.v1.AgentService``), ``probers`` (which prober runs the probes).
"""
