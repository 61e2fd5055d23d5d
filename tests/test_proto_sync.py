"""The ``.proto`` contract and the committed Python stubs agree, and the service serves exactly
the contract, with field names that match the domain models (so error paths name real fields)."""

from __future__ import annotations

from c4p.api import generate
from c4p.api.v1 import admin_pb2, flow_intent_pb2, intents_pb2
from c4p.service.admin import AdminServicer
from c4p.service.flow_intent import FlowIntentServicer
from solver.workload.jobs import CommunicatorSpec, ConnectionSpec


def test_committed_stubs_are_generated_from_the_proto_files() -> None:
    drift = generate.differences()
    assert not drift, "stubs drifted from proto/c4p/v1: run python -m c4p.api.generate\n" + (
        "\n".join(drift)
    )


def test_committed_etcd_stubs_are_generated_from_the_proto_file() -> None:
    drift = generate.differences(generate.ETCD.out_dir, generate.ETCD)
    assert not drift, "stubs drifted from proto/etcd/v3: run python -m c4p.api.generate\n" + (
        "\n".join(drift)
    )


def test_every_rpc_of_the_contract_is_served() -> None:
    for module, servicer in (
        (flow_intent_pb2, FlowIntentServicer),
        (admin_pb2, AdminServicer),
    ):
        (service,) = module.DESCRIPTOR.services_by_name.values()
        bare = object.__new__(servicer)  # endpoints() only names the bound methods
        endpoints = {e.name: e for e in bare.endpoints()}
        assert set(endpoints) == set(service.methods_by_name)
        for method in service.methods:
            e = endpoints[method.name]
            assert e.request.DESCRIPTOR.full_name == method.input_type.full_name
            assert (e.stream is not None) == method.server_streaming


def test_intent_fields_are_spelled_like_the_models() -> None:
    comm = set(intents_pb2.CommunicatorIntent.DESCRIPTOR.fields_by_name)
    assert comm - {"version"} <= set(CommunicatorSpec.model_fields)
    conn = set(intents_pb2.ConnectionIntent.DESCRIPTOR.fields_by_name)
    assert conn - {"src_nic", "dst_nic"} <= set(ConnectionSpec.model_fields)
    register = set(flow_intent_pb2.RegisterJobRequest.DESCRIPTOR.fields_by_name)
    assert register == {
        "job_id",
        "tenant",
        "priority",
        "hosts",
        "ranks",
        "request_id",
        "control_mode",
    }
