"""The c4p.v1 API contract: stubs generated from proto/c4p/v1 (``v1``) and their generator."""
