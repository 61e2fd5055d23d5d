"""The gRPC service around the controller: FlowIntentService, AdminService, health,
reflection; the call pipeline (auth, limits, metrics, errors), streams and the runtime."""
