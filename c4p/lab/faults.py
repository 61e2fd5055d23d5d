"""Faults injected with the kernel's own tools, each undone exactly (``c4p lab detect``).

Why the kernel's tools: a detector checked against faults the project simulates proves only
that it agrees with its own model. Here a slow link is a ``tc`` token bucket on one veth, a lossy
link ``netem loss``, a cut link ``ip link set down``: the ranks' traffic is what the kernel made
of it, and the detector must find it from what the ranks report.

A link is named by its fabric id (``a--b``); the fault is applied at the end of the named device
(``at``), so it shapes what that device *transmits* on the link: on a spine, the traffic the
spine sends down to the leaf. :class:`Fault` is a context manager: the qdisc is deleted, the link
brought up again, on the way out, also on failure.
"""

from __future__ import annotations

from dataclasses import dataclass

from c4p.lab import netns
from c4p.lab.addressing import End, LabError
from c4p.lab.build import Lab


def end_of(lab: Lab, link: str, at: str) -> End:
    """The lab end of fabric link ``link`` (``a--b``) on device ``at``."""
    number = lab.fabric.index.link_number(link)
    cable = lab.plan.cables[number]
    for end in (cable.a, cable.b):
        if end.device == at:
            return end
    raise ValueError(f"link {link}: {at} is not one of its ends")


@dataclass
class Fault:
    """One kernel fault on one link end: ``kind`` is ``rate`` (tbf), ``loss`` (netem) or
    ``down`` (the cable cut)."""

    lab: Lab
    link: str
    at: str
    kind: str
    rate: str = "20mbit"
    loss: str = "10%"
    applied: bool = False
    how: str = ""  # set when the kernel lacked the tool and another one made the fault

    def __enter__(self) -> Fault:
        self.apply()
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()

    def command(self) -> list[str]:
        end = end_of(self.lab, self.link, self.at)
        if self.kind == "rate":
            # A deep queue: the slow link delays, it does not drop (a lossy link is netem's).
            return ["tc", "qdisc", "replace", "dev", end.interface, "root", "tbf",
                    "rate", self.rate, "burst", "1600", "limit", "4mb"]  # fmt: skip
        if self.kind == "loss":
            return ["tc", "qdisc", "replace", "dev", end.interface, "root", "netem",
                    "loss", self.loss]  # fmt: skip
        if self.kind == "down":
            return ["ip", "link", "set", end.interface, "down"]
        raise ValueError(f"fault kind: {self.kind!r} is not rate, loss or down")

    def apply(self) -> None:
        end = end_of(self.lab, self.link, self.at)
        try:
            netns.run(self.command(), ns=end.namespace)
            if self.kind == "down":
                self._converge(down=True)
        except LabError:
            if self.kind != "loss":
                raise
            # No sch_netem in this kernel: loss by a shallow queue instead (a tbf at a high
            # rate with room for two datagrams drops the tails of bursts), and said so.
            self.how = "tbf tail drop (no netem)"
            shallow = ["tbf", "rate", "100mbit", "burst", "3000", "limit", "2500"]
            netns.run(["tc", "qdisc", "replace", "dev", end.interface, "root", *shallow],
                      ns=end.namespace)  # fmt: skip
        self.applied = True

    def undo(self) -> None:
        if not self.applied:
            return
        end = end_of(self.lab, self.link, self.at)
        if self.kind == "down":
            netns.run(["ip", "link", "set", end.interface, "up"], ns=end.namespace)
            self._converge(down=False)
        else:
            netns.run(["tc", "qdisc", "del", "dev", end.interface, "root"], ns=end.namespace,
                      check=False)  # fmt: skip
        self.applied = False

    def _converge(self, *, down: bool) -> None:
        """Static routing, converged as a routing protocol would after the cut (and back).

        Why: taking a device down flushes the routes whose only next hop it was (the spine's
        route to the leaf's hosts) and bringing it up does not restore them; and the other
        leaves' static routes kept the spine as a next hop for that leaf's hosts. QPs hashed
        there were black-holed: during the cut, whatever the controller planned, half of the
        QPs into the leaf (the ring stayed at twice its step time), and after it, every QP
        planned over the link again. With BGP the lab's routers withdraw and re-announce."""
        if self.lab.routing != "static":
            return
        number = self.lab.fabric.index.link_number(self.link)
        if down:
            self.lab.down_links.add(number)
        else:
            self.lab.down_links.discard(number)
        self.lab._static_routes()  # noqa: SLF001 (the lab's own routes, replaced)


def line_rate(lab: Lab, rate: str = "200mbit") -> None:
    """Every host NIC port sends at ``rate`` (a tbf on its interface), as a NIC has a line rate.

    Why: a veth has none, so without it a transfer's speed is how fast the sending process got
    the CPU, which on a busy machine spreads healthy QPs' rates over a factor of five and hides
    a slow link in the noise. With it, healthy QPs of a host share its line rate evenly."""
    for cable in lab.plan.cables:
        for end in (cable.a, cable.b):
            if end.is_host:
                shape = ["tbf", "rate", rate, "burst", "8kb", "limit", "2mb"]
                netns.run(["tc", "qdisc", "replace", "dev", end.interface, "root", *shape],
                          ns=end.namespace)  # fmt: skip


def tc_missing() -> str | None:
    """Why ``tc`` cannot shape here, or ``None``."""
    import shutil

    return None if shutil.which("tc") else "tc (iproute2) is not installed"


__all__ = ["Fault", "end_of", "line_rate", "tc_missing"]
