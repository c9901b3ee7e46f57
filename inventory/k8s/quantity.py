"""Kubernetes resource quantities, parsed by the official client's parser."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from kubernetes.utils.quantity import parse_quantity as _parse_quantity


def parse_quantity(value: object) -> Decimal:
    """'1e3' → 1000, '100m' → 0.1, '80Gi' → bytes. Raises ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    try:
        return Decimal(_parse_quantity(value))
    except (ValueError, TypeError, InvalidOperation, ArithmeticError) as exc:
        raise ValueError(f"not a quantity: {str(value)[:64]!r}") from exc
