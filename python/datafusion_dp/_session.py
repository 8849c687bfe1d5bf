"""The in-process session: the data owner's declarations, then (optionally) a locked session
for an analyst. A thin layer over the native ``_internal.Session``: every rule is Rust's."""

from __future__ import annotations

import os
from typing import Mapping, Optional, Sequence, Union

from . import _internal
from ._result import QueryResult

PathLike = Union[str, "os.PathLike[str]"]


def _option_value(value: object) -> str:
    """A ``dp.*`` option's value as the Rust options read it (``true``, ``0.9``, ``regions``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class SessionContext:
    """A DataFusion session with the differentially private functions (the DP aggregates of
    the Rust crate's registry, as ``dpsql``'s ``\\df`` lists them, and ``dp_budget()``).

    Until :meth:`lock` it is the data owner's session: register tables, declare how each
    protects people (:meth:`protect`; undeclared tables are protected row by row), run any SQL
    (``SET dp.public_groups = 'assert'``, ...). Only DP aggregates leave a protected table,
    locked or not. :meth:`lock` hands the session to an untrusted analyst, for good: tables,
    declarations, budgets and the owner's options can no longer change, and every statement
    is the analyst's (DDL, DML and ``COPY`` refused).
    """

    __slots__ = ("_session",)

    def __init__(self) -> None:
        self._session = _internal.Session()

    @classmethod
    def from_config(cls, path: PathLike, analyst: Optional[str] = None) -> "SessionContext":
        """The locked session ``dpsql --config PATH --analyst ANALYST`` opens: the owner's
        tables, protection and options from an ``owner.toml`` (as ``dp-server`` reads it), the
        analyst's budget and ledger (``analyst`` may be left out when there is one)."""
        ctx = cls.__new__(cls)
        ctx._session = _internal.Session.from_config(os.fspath(path), analyst)
        return ctx

    def _register(
        self,
        name: str,
        path: PathLike,
        fmt: str,
        columns: Optional[Sequence[str]],
        partition_columns: Optional[Sequence[str]],
    ) -> None:
        self._session.register(
            name,
            os.fspath(path),
            fmt,
            None if columns is None else list(columns),
            None if partition_columns is None else list(partition_columns),
        )

    def register_csv(
        self,
        name: str,
        path: PathLike,
        *,
        columns: Optional[Sequence[str]] = None,
        partition_columns: Optional[Sequence[str]] = None,
    ) -> None:
        """Registers a CSV file or directory (with a header line) as table ``name``.

        ``columns`` declares the schema (``["patient_id BIGINT", "region VARCHAR", ...]``,
        SQL types, in the files' column order); without it the types are inferred from the
        rows, and :meth:`lock` refuses the table unless it is public. ``partition_columns``
        declares a hive layout's ``key=value`` directories (``["year INT"]``)."""
        self._register(name, path, "csv", columns, partition_columns)

    def register_parquet(
        self,
        name: str,
        path: PathLike,
        *,
        columns: Optional[Sequence[str]] = None,
        partition_columns: Optional[Sequence[str]] = None,
    ) -> None:
        """Registers a Parquet file, directory or hive layout as table ``name``: the files'
        own schema (refused when they differ) or the declared ``columns``."""
        self._register(name, path, "parquet", columns, partition_columns)

    def register_json(
        self,
        name: str,
        path: PathLike,
        *,
        columns: Optional[Sequence[str]] = None,
        partition_columns: Optional[Sequence[str]] = None,
    ) -> None:
        """Registers a newline-delimited JSON file or directory as table ``name`` (fields
        matched by name to the declared ``columns``; inferred without them, as for CSV)."""
        self._register(name, path, "json", columns, partition_columns)

    def protect(self, table: str, unit: Optional[str] = None, *, public: bool = False) -> None:
        """Declares how ``table`` protects people: ``unit="patient_id"`` (a person is every
        row with one value of that column; their contributions are bounded), no ``unit``
        (each row is a person, the default for tables nobody declared), or ``public=True``
        (not private: released exactly, e.g. a list of regions). Refused once locked."""
        self._session.protect(table, unit, public)

    def lock(
        self,
        *,
        epsilon_budget: Optional[float] = None,
        delta_budget: Optional[float] = None,
        rho_budget: Optional[float] = None,
        budget_measure: Optional[str] = None,
        ledger: Optional[PathLike] = None,
        options: Optional[Mapping[str, object]] = None,
    ) -> None:
        """Locks the session for an untrusted analyst, irreversibly.

        The budget is the total the session may spend, declared in one measure, as an owner
        configuration's ``[[analyst]]`` section declares it:

        - **(epsilon, delta)** (``budget_measure="epsilon_delta"``, the default):
          ``epsilon_budget``, and ``delta_budget`` for (epsilon, delta) mechanisms (Gaussian
          noise); each query's (epsilon, delta) is added.
        - **rho-zCDP** (``budget_measure="zcdp"``): ``rho_budget`` alone (which implies
          ``budget_measure="zcdp"``), or a target ``epsilon_budget`` with ``delta_budget`` in
          (0, 1), converted once to the largest rho whose guarantee meets it (Canonne, Kamath
          & Steinke 2020, Corollary 13). Each query is charged its rho (``result.rho``), and
          Gaussian queries compose far better than under (epsilon, delta); a query with no
          zCDP cost (the paper's local ratio methods, private group selection) is refused.

        ``ledger`` is an append-only file that keeps every charge across sessions and
        processes (one per analyst; it counts in one measure). ``options`` are the owner's
        ``dp.*`` options, fixed before the lock (e.g. ``{"public_groups": "regions",
        "max_rows_per_unit": 4}``). Refused (:class:`DpError` naming the argument) without a
        budget, with an amount out of range (``epsilon_budget`` >= 0, ``delta_budget`` in
        [0, 1), ``rho_budget`` > 0, all finite), with a budget in two measures (``rho_budget``
        with ``epsilon_budget``, or with ``budget_measure="epsilon_delta"``), with ``dp.seed``
        set, or when a table that is not public had its schema inferred from its rows."""
        pairs = [(str(k), _option_value(v)) for k, v in (options or {}).items()]
        self._session.lock(
            None if epsilon_budget is None else float(epsilon_budget),
            None if delta_budget is None else float(delta_budget),
            None if ledger is None else os.fspath(ledger),
            pairs,
            None if rho_budget is None else float(rho_budget),
            None if budget_measure is None else str(budget_measure),
        )

    @property
    def locked(self) -> bool:
        """Whether the session is locked for an analyst."""
        return self._session.locked

    def sql(self, query: str) -> QueryResult:
        """Runs one SQL statement and returns its result, with the privacy cost charged for
        it (``result.epsilon``, ``result.delta``, and under a zCDP budget ``result.rho``).
        Raises :class:`DpError` when refused."""
        table, cost = self._session.sql(query)
        epsilon, delta, rho = cost if cost is not None else (None, None, None)
        return QueryResult(table, epsilon=epsilon, delta=delta, rho=rho, query=query)

    def budget(self) -> QueryResult:
        """``SELECT * FROM dp_budget()``: the budget, the amount spent and remaining, and one
        row per charged query (free)."""
        return self.sql("SELECT * FROM dp_budget()")

    def tables(self) -> list:
        """The names of the session's tables."""
        return list(self._session.tables())

    def __repr__(self) -> str:
        state = "locked" if self.locked else "unlocked"
        return f"<datafusion_dp.SessionContext {state}, tables: {', '.join(self.tables()) or 'none'}>"
