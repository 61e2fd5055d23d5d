# mypy: ignore-errors
"""Generated stubs of the c4p.v1 API (see c4p/api/generate.py; do not edit)."""
