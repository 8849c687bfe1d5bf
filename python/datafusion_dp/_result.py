"""A query's result, the same type in-process and from a ``dp-server``: an Arrow table with
the privacy cost charged for it, converted to pandas, polars or a forest plot on demand."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Union

import pyarrow as pa

from ._fields import _is_interval

_MAX_REPR_ROWS = 20


def _format_number(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.4g}"
    return str(value)


def _format_cell(value: Any, interval: bool) -> str:
    if interval and isinstance(value, dict):
        text = (
            f"{_format_number(value.get('estimate'))} "
            f"[{_format_number(value.get('lower'))}, {_format_number(value.get('upper'))}]"
        )
        return text + (" SEEDED" if value.get("seeded") else "")
    text = _format_number(value)
    return text if len(text) <= 40 else text[:37] + "..."


class QueryResult:
    """The result of one query: an Arrow table (:meth:`to_arrow`) and the privacy cost it was
    charged (:attr:`epsilon`, :attr:`delta`, and under a zCDP budget :attr:`rho`; ``None``
    when it cannot be told).

    Converts to pandas (:meth:`to_pandas`) and polars (:meth:`to_polars`), draws a forest
    plot of its interval column (:meth:`forest_plot`), and exports itself through the Arrow
    PyCapsule interface (``__arrow_c_stream__``), so ``pyarrow.table(result)``,
    ``polars.DataFrame(result)`` or DuckDB read it without a copy.
    """

    __slots__ = ("_table", "_epsilon", "_delta", "_rho", "_query")

    def __init__(
        self,
        table: Any,
        *,
        epsilon: Optional[float] = None,
        delta: Optional[float] = None,
        rho: Optional[float] = None,
        query: Optional[str] = None,
    ) -> None:
        # A pyarrow Table as it is; anything else with __arrow_c_stream__ imported zero-copy.
        self._table = table if isinstance(table, pa.Table) else pa.table(table)
        self._epsilon = epsilon
        self._delta = delta
        self._rho = rho
        self._query = query

    @property
    def epsilon(self) -> Optional[float]:
        """The epsilon charged for this query (0 when it made no DP release)."""
        return self._epsilon

    @property
    def delta(self) -> Optional[float]:
        """The delta charged for this query."""
        return self._delta

    @property
    def rho(self) -> Optional[float]:
        """The rho (zero-concentrated DP, Bun & Steinke 2016) charged for this query when the
        session's budget is counted in zCDP (``lock(rho_budget=...)`` or
        ``budget_measure="zcdp"``); ``None`` under an (epsilon, delta) budget. Under zCDP the
        budget adds these rho, and :attr:`epsilon`/:attr:`delta` are the query's own
        (epsilon, delta) for reference."""
        return self._rho

    @property
    def query(self) -> Optional[str]:
        """The SQL text that produced this result."""
        return self._query

    @property
    def schema(self) -> pa.Schema:
        return self._table.schema

    @property
    def column_names(self) -> list:
        return list(self._table.column_names)

    @property
    def num_rows(self) -> int:
        return self._table.num_rows

    def __len__(self) -> int:
        return self._table.num_rows

    def to_arrow(self) -> pa.Table:
        """The result as a ``pyarrow.Table`` (no copy)."""
        return self._table

    def to_pylist(self) -> list:
        """The rows as dictionaries."""
        return self._table.to_pylist()

    def to_pandas(self, **kwargs: Any) -> "Any":
        """The result as a ``pandas.DataFrame`` (pyarrow's conversion; an interval column
        holds one dict per row). Keyword arguments go to ``pyarrow.Table.to_pandas``."""
        try:
            import pandas  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "to_pandas() needs pandas: pip install 'datafusion-dp[pandas]'"
            ) from e
        return self._table.to_pandas(**kwargs)

    def to_polars(self) -> "Any":
        """The result as a ``polars.DataFrame`` (zero-copy where polars can)."""
        try:
            import polars
        except ImportError as e:
            raise ImportError(
                "to_polars() needs polars: pip install 'datafusion-dp[polars]'"
            ) from e
        return polars.from_arrow(self._table)

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """The Arrow PyCapsule interface: the result as an Arrow C stream."""
        return self._table.__arrow_c_stream__(requested_schema)

    def forest_plot(
        self,
        path: Union[str, "Any", None] = None,
        *,
        column: Optional[str] = None,
        label: Union[str, Sequence[str], None] = None,
        scale: Optional[str] = None,
        title: Optional[str] = None,
        ax: Any = None,
    ) -> "Any":
        """A forest plot of the interval column (the result of a DP aggregate with an interval):
        one row per group, the estimate and its interval, on a log axis for ratios (linear for
        a risk difference), with the epsilon charged in the caption.

        ``path`` (``.png``, ``.svg``, ``.pdf``, ...) writes the figure there. ``column`` picks
        the interval column (default: the first), ``label`` the column(s) naming each row
        (default: the non-numeric columns), ``scale`` ``"log"`` or ``"linear"`` (default: by
        the statistic), ``ax`` an existing matplotlib Axes to draw into. Returns the
        ``matplotlib.figure.Figure``. Needs matplotlib (``datafusion-dp[plot]``)."""
        from ._plot import forest_plot

        return forest_plot(
            self, path=path, column=column, label=label, scale=scale, title=title, ax=ax
        )

    def _cost_text(self) -> str:
        if self._epsilon is None:
            return "privacy cost unknown"
        text = f"epsilon {self._epsilon:g}"
        if self._delta:
            text += f", delta {self._delta:g}"
        if self._rho is not None:
            # Under a zCDP budget the charge is rho; (epsilon, delta) is the query's own.
            return f"rho {self._rho:g} charged ({text})"
        return text + " charged"

    def _cells(self) -> list:
        """The first rows' cells as text, an interval as ``estimate [lower, upper]``."""
        table = self._table
        intervals = [_is_interval(f) for f in table.schema]
        rows = table.slice(0, _MAX_REPR_ROWS).to_pylist()
        return [
            [_format_cell(row[n], i) for n, i in zip(table.column_names, intervals)]
            for row in rows
        ]

    def _repr_html_(self) -> str:
        """The notebook view: the same rows and cost as ``repr``, as an HTML table."""
        from html import escape

        table = self._table
        head = "".join(f"<th>{escape(n)}</th>" for n in table.column_names)
        body = "".join(
            "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
            for row in self._cells()
        )
        more = table.num_rows - _MAX_REPR_ROWS
        note = f"{table.num_rows} rows" + (f" ({more} not shown)" if more > 0 else "")
        return (
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"<p>{escape(note)}; {escape(self._cost_text())}</p>"
        )

    def __repr__(self) -> str:
        table = self._table
        names = table.column_names
        cells = self._cells()
        widths = [
            max([len(n)] + [len(r[k]) for r in cells]) for k, n in enumerate(names)
        ]
        lines = [
            " | ".join(n.ljust(w) for n, w in zip(names, widths)),
            "-+-".join("-" * w for w in widths),
        ]
        lines += [" | ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
        if table.num_rows > _MAX_REPR_ROWS:
            lines.append(f"... {table.num_rows - _MAX_REPR_ROWS} more rows")
        rows_text = f"{table.num_rows} row{'s' if table.num_rows != 1 else ''}"
        lines.append(f"({rows_text}; {self._cost_text()})")
        return "\n".join(line.rstrip() for line in lines)
