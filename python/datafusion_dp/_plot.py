"""Forest plots of interval columns: the picture epidemiologists read ratios from."""

from __future__ import annotations

import math
import os
import re
from typing import Any, List, Optional, Protocol, Sequence, Tuple, Union

import pyarrow as pa

from . import _internal
from ._fields import _is_interval


class _Result(Protocol):
    """What a plot reads of a result (a :class:`QueryResult`)."""

    @property
    def query(self) -> Optional[str]: ...

    @property
    def epsilon(self) -> Optional[float]: ...

    @property
    def delta(self) -> Optional[float]: ...

    def to_arrow(self) -> pa.Table: ...


# The DP aggregates that return an interval, from the Rust crate's registry: each function's
# statistic, as its axis label and whether it is a ratio (log axis, reference line at 1) or a
# difference (linear axis, reference at 0).
_INTERVALS = {
    name: interval
    for name, _signature, interval in _internal.dp_functions()
    if interval is not None
}
_CALL = re.compile(
    r"\b(" + "|".join(re.escape(name) for name in _INTERVALS) + r")\s*\(", re.IGNORECASE
)


def _interval_functions() -> str:
    """The interval functions for messages: ``a, b and c``."""
    names = list(_INTERVALS)
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def _statistic(column: str, query: Optional[str], lowers: List[float]) -> Optional[str]:
    """The interval function behind interval column ``column``: from its name (an unaliased
    call is named after it), else from the query when it calls one kind of interval only,
    else a difference when an interval reaches below 0 (a ratio's never does)."""
    named = _CALL.search(column + "(")
    if named:
        return named.group(1).lower()
    kinds = {m.group(1).lower() for m in _CALL.finditer(query or "")}
    if len(kinds) == 1:
        return kinds.pop()
    if any(v < 0 for v in lowers if v is not None and not math.isnan(v)):
        return next((name for name, (_, ratio) in _INTERVALS.items() if not ratio), None)
    return None


def _labels(table: pa.Table, label: Union[str, Sequence[str], None]) -> List[str]:
    if label is None:
        columns = [
            f.name
            for f in table.schema
            if not _is_interval(f)
            and not pa.types.is_floating(f.type)
            and not pa.types.is_integer(f.type)
            and not pa.types.is_decimal(f.type)
        ]
    elif isinstance(label, str):
        columns = [label]
    else:
        columns = list(label)
    if not columns:
        return ["all" if table.num_rows == 1 else f"row {i + 1}" for i in range(table.num_rows)]
    values = [table.column(c).to_pylist() for c in columns]
    return [" / ".join("NULL" if v is None else str(v) for v in row) for row in zip(*values)]


def _finite(values: Sequence[Optional[float]], positive: bool) -> List[float]:
    return [
        v
        for v in values
        if v is not None and math.isfinite(v) and (v > 0 if positive else True)
    ]


def _limits(values: List[float], reference: float, log: bool) -> Tuple[float, float]:
    values = values + [reference]
    low, high = min(values), max(values)
    if log:
        return low / 1.6, high * 1.6
    pad = (high - low) * 0.12 or 0.1
    return low - pad, high + pad


def forest_plot(
    result: _Result,
    path: Union[str, "os.PathLike[str]", None] = None,
    *,
    column: Optional[str] = None,
    label: Union[str, Sequence[str], None] = None,
    scale: Optional[str] = None,
    title: Optional[str] = None,
    ax: Any = None,
) -> Any:
    """See :meth:`QueryResult.forest_plot`."""
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError(
            "forest_plot() needs matplotlib: pip install 'datafusion-dp[plot]'"
        ) from e
    table = result.to_arrow()
    intervals = [f.name for f in table.schema if _is_interval(f)]
    if column is None:
        if not intervals:
            raise ValueError(
                "forest_plot: the result has no interval column (a struct with estimate, "
                f"lower and upper, as {_interval_functions()} return)"
            )
        column = intervals[0]
    elif column not in intervals:
        raise ValueError(
            f"forest_plot: column {column!r} is not an interval column "
            f"(interval columns: {', '.join(intervals) or 'none'})"
        )
    if scale not in (None, "log", "linear"):
        raise ValueError("forest_plot: scale must be 'log' or 'linear'")

    rows = table.column(column).to_pylist()
    get = lambda key: [None if r is None else r.get(key) for r in rows]  # noqa: E731
    estimates, lowers, uppers = get("estimate"), get("lower"), get("upper")
    statistic = _statistic(column, result.query, lowers)
    name, ratio = _INTERVALS.get(statistic, ("ratio", True)) if statistic else ("ratio", True)
    log = (scale or ("log" if ratio else "linear")) == "log"
    reference = 1.0 if ratio else 0.0
    labels = _labels(table, label)
    confidences = _finite(get("confidence"), positive=True)
    seeded = any(bool(s) for s in get("seeded"))

    n = len(rows)
    if ax is None:
        figure = Figure(figsize=(7.5, 1.6 + 0.42 * max(n, 1)), layout="constrained")
        ax = figure.add_subplot()
    else:
        figure = ax.figure

    values = _finite(estimates + lowers + uppers, positive=log)
    low, high = _limits(values, reference, log)
    if log:
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

        ax.set_xscale("log")
        # Plain numbers (0.2, 0.5, 1, 2, 5), as a forest plot's readers expect, not 10^k.
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(low, high)
    ax.axvline(reference, color="0.45", linestyle="--", linewidth=1, zorder=1)

    ys = list(range(n, 0, -1))
    for y, estimate, lower, upper in zip(ys, estimates, lowers, uppers):
        # An end the release cannot bound (upper +inf; lower 0 on a log axis) runs to the
        # edge with an arrow.
        open_low = lower is None or math.isnan(lower) or (log and lower <= 0) or lower < low
        open_high = upper is None or math.isnan(upper) or math.isinf(upper) or upper > high
        x0 = low if open_low else lower
        x1 = high if open_high else upper
        ax.plot([x0, x1], [y, y], color="#1f4e79", linewidth=1.6, zorder=2)
        if open_low:
            ax.plot([x0], [y], marker="<", color="#1f4e79", markersize=6, zorder=3)
        if open_high:
            ax.plot([x1], [y], marker=">", color="#1f4e79", markersize=6, zorder=3)
        if estimate is not None and math.isfinite(estimate) and (estimate > 0 or not log):
            ax.plot([estimate], [y], marker="s", color="#1f4e79", markersize=7, zorder=4)

    ax.set_yticks(ys)
    ax.set_yticklabels(labels)
    ax.set_ylim(0.4, n + 0.6)
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)

    def number(v: Optional[float]) -> str:
        if v is None or math.isnan(v):
            return "-"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        text = f"{v:.2f}"
        return "0.00" if text == "-0.00" else text

    # The numbers beside each row, as a forest plot's table column.
    transform = ax.get_yaxis_transform()
    for y, estimate, lower, upper in zip(ys, estimates, lowers, uppers):
        ax.text(
            1.02,
            y,
            f"{number(estimate)} ({number(lower)}, {number(upper)})",
            transform=transform,
            va="center",
            ha="left",
            fontsize=9,
            family="monospace",
        )

    level = f"{confidences[0]:.0%} " if confidences else ""
    ax.text(
        1.02,
        n + 0.55,
        f"estimate ({level}CI)",
        transform=transform,
        va="center",
        ha="left",
        fontsize=9,
        fontweight="bold",
    )
    ax.set_xlabel(f"{name}{' (log scale)' if log else ''}, {level}confidence interval")
    if title:
        ax.set_title(title)
    if result.epsilon is None:
        cost = "privacy cost not known"
    else:
        cost = f"\u03b5 = {result.epsilon:g} spent by this query"
        if result.delta:
            cost += f", \u03b4 = {result.delta:g}"
    caption = f"Differentially private estimates; {cost}."
    if seeded:
        caption += " SEEDED NOISE: NOT PRIVATE (tests only)."
    figure.text(0.01, 0.005, caption, fontsize=8, color="0.3", ha="left", va="bottom")
    if layout := getattr(figure, "get_layout_engine", lambda: None)():
        # Room for the caption under the axis label and, on the right, for the numbers
        # column (text beside the axes, which the layout engine does not make room for).
        layout.set(rect=(0, 0.06, 0.78, 0.94))
    if path is not None:
        figure.savefig(os.fspath(path))
    return figure
