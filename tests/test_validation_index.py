"""Validating a fabric builds its index once, and that index is the one built afresh.

Why: the soundness questions (names distinct, every link end a known port, no loops, no
parallel links) are asked while numbering nodes and links, and validation keeps the index so
that ``derive_workload``, routing and evaluation do not number everything again. These tests
hold that shortcut to three things: the kept index equals an index built from scratch by the
unchecked constructor; member order is the natural order of interface names, restated here
independently; and the numeric checks agree with :func:`~topology.model.find_problems` in
both directions on broken fabrics (a fast path that accepted a broken fabric fails here).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_validation import FABRICS, mutations, unchecked

from topology.generators import generate
from topology.index import FabricIndex, sound_index
from topology.model import Fabric, Host, Link, Nic, NicPort, Switch, find_problems


def _same_index(kept: FabricIndex, fresh: FabricIndex) -> None:
    assert kept.node_names == fresh.node_names
    assert kept.node_of == fresh.node_of
    assert kept.out_resources == fresh.out_resources
    assert kept.res_interface == fresh.res_interface
    for name in ("res_src", "res_dst", "res_capacity", "res_usable", "tier", "plane"):
        assert np.array_equal(getattr(kept, name), getattr(fresh, name)), name
    assert [(p.host.name, p.nic.name, p.port.name, p.rail, p.node) for p in kept.ports] == [
        (p.host.name, p.nic.name, p.port.name, p.rail, p.node) for p in fresh.ports
    ]


@pytest.mark.parametrize("which", range(len(FABRICS)))
def test_validation_keeps_the_index_it_checked_with(which: int) -> None:
    data = FABRICS[which].model_dump(mode="json")
    fabric = Fabric.model_validate(data)
    kept = fabric.__dict__.get("index")
    assert isinstance(kept, FabricIndex) and kept.fabric is fabric
    assert fabric.index is kept  # the cached property hands out the kept one
    _same_index(kept, FabricIndex(fabric))


def _natural(name: str) -> list[object]:
    """Digits compared as numbers: an independent restatement of the member order."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name) if p]


def test_members_in_natural_interface_order_ties_as_found() -> None:
    """``Ethernet2`` before ``Ethernet10``; ``Ethernet01`` and ``Ethernet1`` (equal keys) stay
    in link order, as the stable sort by key put them before the names were ranked once."""
    names = ["Ethernet10", "Ethernet2", "Ethernet01", "swp3", "Ethernet1", "Ethernet1/2"]
    switches = [Switch(name="leaf", role="leaf")] + [
        Switch(name=f"spine{k}", role="spine") for k in range(len(names))
    ]
    links = [
        Link(a=f"leaf:{name}", b=f"spine{k}:up", speed_gbps=100) for k, name in enumerate(names)
    ]
    fabric = Fabric(switches=tuple(switches), links=tuple(links))
    members = fabric.index.out_resources[fabric.index.node("leaf")]
    got = [fabric.index.res_interface[r] for r in members]
    # sorted() is stable: equal keys keep link order, which is what the index must do too.
    assert got == sorted(names, key=_natural)
    assert got.index("Ethernet01") < got.index("Ethernet1")
    _same_index(fabric.index, FabricIndex(fabric))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 3), st.integers(0, 1000), st.integers(0, 1000))
def test_numeric_checks_agree_with_find_problems(which: int, k: int, j: int) -> None:
    """Both directions: an index only for fabrics without problems, and for every one."""
    for fabric in mutations(FABRICS[which], k, j):
        sound = not list(find_problems(fabric))
        assert (sound_index(fabric) is not None) is sound


def test_end_on_unknown_device_next_to_a_switch_is_refused() -> None:
    """An unknown device facing a switch (the half of a link the numeric check looks up by
    device name) and a host's unknown port facing a switch: refused, with the same message
    whichever path is taken."""
    fabric = FABRICS[1]
    spine = next(s.name for s in fabric.switches if s.role == "spine")
    for end in ("ghost:Ethernet1", f"{fabric.hosts[0].name}:nosuchport"):
        bad = unchecked(
            fabric, links=(*fabric.links, Link(a=end, b=f"{spine}:Ethernet99", speed_gbps=1))
        )
        assert sound_index(bad) is None
        with pytest.raises(ValueError, match="does not exist"):
            Fabric.model_validate(bad.model_dump(mode="json"))


def test_uncabled_port_refused_through_the_kept_index() -> None:
    """The jobs check reads uncabled ports from a per-index set built with the NIC map;
    a job on a NIC whose port has no link is refused naming that port."""
    from solver.errors import JobError
    from solver.workload.jobs import JobsFile, check_jobs

    fabric = generate("leaf-spine", leaves=2, spines=2, hosts_per_leaf=1, nics_per_host=1)
    lonely = Host(
        name="hlonely",
        nics=(Nic(name="nic0", ports=(NicPort(name="nic0p0", address="198.18.9.9"),)),),
    )
    grown = Fabric.model_validate(
        fabric.model_dump(mode="json") | {"hosts": [*fabric.model_dump(mode="json")["hosts"],
                                                    lonely.model_dump(mode="json")]}
    )  # fmt: skip
    jobs = JobsFile.model_validate(
        {"jobs": [{"id": "j", "hosts": ["hlonely"], "communicators": [{"id": "c"}]}]}
    )
    with pytest.raises(JobError, match="NIC port 'hlonely:nic0p0' is not cabled"):
        check_jobs(grown, jobs)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_fast_ipv4_builds_the_address_the_constructor_builds(value: int) -> None:
    """``fast_ipv4`` skips ``IPv4Address``'s constructor: the object must behave as the
    constructor's in every way the model uses (value, hash, text, ordering, packed form)."""
    import ipaddress
    import pickle

    from topology.addresses import fast_ipv4

    text = str(ipaddress.IPv4Address(value))
    fast, ref = fast_ipv4(text), ipaddress.IPv4Address(text)
    assert type(fast) is ipaddress.IPv4Address
    assert (fast == ref, hash(fast) == hash(ref), str(fast), fast.packed) == (
        True, True, text, ref.packed,
    )  # fmt: skip
    assert int(fast) == value and pickle.loads(pickle.dumps(fast)) == ref
    assert not fast < ref and not ref < fast


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**128 - 1))
def test_fast_ipv6_builds_the_address_the_constructor_builds(value: int) -> None:
    """``fast_ipv6`` skips ``IPv6Address``'s constructor too: the same in every way."""
    import ipaddress
    import pickle

    from topology.addresses import fast_ipv6

    text = str(ipaddress.IPv6Address(value))
    fast, ref = fast_ipv6(text), ipaddress.IPv6Address(text)
    assert type(fast) is ipaddress.IPv6Address and fast.scope_id is None
    assert (fast == ref, hash(fast) == hash(ref), str(fast), fast.packed) == (
        True, True, text, ref.packed,
    )  # fmt: skip
    assert int(fast) == value and pickle.loads(pickle.dumps(fast)) == ref
    assert not fast < ref and not ref < fast


def test_parallel_link_error_is_one_line_naming_the_fix() -> None:
    """The reason once held '; ', which the error splitter read as a second problem with an
    empty reason ('model a bundle ...: ')."""
    from topology.errors import FabricFileError
    from topology.formats import validate_data

    data = FABRICS[0].model_dump(mode="json")
    first = data["links"][0]  # a host's port to its leaf
    # A second link between the same two nodes: the leaf on another interface.
    data["links"].append({"a": first["b"] + "9", "b": first["a"], "speed_gbps": 1})
    with pytest.raises(FabricFileError) as caught:
        validate_data(Fabric, data, "f.json")
    text = str(caught.value)
    assert "model a bundle as one link of the summed speed" in text
    assert not any(line.rstrip().endswith(":") for line in text.splitlines()), text
