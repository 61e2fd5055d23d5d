"""The flow-intent client: what a collective library (or its launcher) uses to talk to c4p.

Register a job, submit its communicators, watch its bindings (a callback per QP to apply), and
release it; sync (:class:`FlowIntentClient`) or asyncio (:class:`AsyncFlowIntentClient`).
Imports only grpc and protobuf, never the server side.

    client = FlowIntentClient("127.0.0.1:50051")
    job = client.register_job("llm-a", hosts=["h0000", "h0001"])
    reply = job.submit([communicator("dp", qps_per_connection=2)])
    watch = job.watch(on_change=plugin.apply)        # BindingChange(action, binding, epoch)
    watch.wait_revision(reply.revision, timeout=30)  # every binding of these intents is here
"""

from c4p.client.aio import AsyncFlowIntentClient, AsyncJobSession
from c4p.client.mirror import Action, AppliedBinding, BindingChange, BindingMirror
from c4p.client.sync import AdminClient, BindingWatch, FlowIntentClient, JobSession
from c4p.client.wire import ApiError, ClientTls, communicator, connection
from topology.backoff import Backoff

__all__ = [
    "Action",
    "AdminClient",
    "ApiError",
    "AppliedBinding",
    "AsyncFlowIntentClient",
    "AsyncJobSession",
    "Backoff",
    "BindingChange",
    "BindingMirror",
    "BindingWatch",
    "ClientTls",
    "FlowIntentClient",
    "JobSession",
    "communicator",
    "connection",
]
