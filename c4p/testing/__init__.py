"""A fabric that speaks gNMI and SNMP, for tests, demos and benchmarks (no switch needed).

Why shipped with the product rather than kept in ``tests/``: the gNMI and SNMP drivers, the
controller and ``make demo`` all need a fabric to talk to, and a fake kept beside the code it
fakes stays maintained. Everything binds 127.0.0.1 only, and every server or process is stopped
by the context manager that started it.

* :class:`FabricEmulator` (``dataplane``): link state, carried traffic and counters, LLDP, and
  faults (garbage leaves, raw answers, slow answers) of a :class:`~topology.model.Fabric`;
* :class:`GnmiFabric` (``gnmi_target``): one real gNMI target per switch (grpcio, pygnmi's
  servicer), TLS and mTLS with :func:`make_pki` (``certs``);
* :class:`SnmpAgent` (``snmp_agent``): ``.snmprec`` files served by one snmpsim process.
"""

from c4p.testing.certs import Pki, make_pki
from c4p.testing.dataplane import FabricEmulator
from c4p.testing.gnmi_target import GnmiFabric
from c4p.testing.snmp_agent import SnmpAgent, V3User

__all__ = ["FabricEmulator", "GnmiFabric", "Pki", "SnmpAgent", "V3User", "make_pki"]
