"""What the result and the plot both read of a result's columns."""

from __future__ import annotations

import pyarrow as pa


def _is_interval(field: pa.Field) -> bool:
    """Whether ``field`` is an interval struct (``estimate``, ``lower``, ``upper``, as the DP
    aggregates with an interval return)."""
    return pa.types.is_struct(field.type) and all(
        field.type.get_field_index(name) >= 0 for name in ("estimate", "lower", "upper")
    )
