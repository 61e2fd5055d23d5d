# mypy: ignore-errors
"""Generated stubs of the etcd v3 API subset (see c4p/api/generate.py; do not edit)."""
