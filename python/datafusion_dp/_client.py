"""A thin client of ``dp-server``: Arrow Flight SQL through the ADBC driver, results as
:class:`QueryResult`. The server does all the privacy work; this only logs in, sends SQL and
reads Arrow back."""

from __future__ import annotations

import re
from typing import Any, Optional, Tuple

from ._internal import DpError
from ._result import QueryResult

# ADBC wraps the server's message: "INVALID_ARGUMENT: [FlightSQL] <message> (InvalidArgument;
# GetFlightInfo)". Keep the message.
_STATUS = re.compile(r"^[A-Z_]+: (\[FlightSQL\] )?")
_CALL = re.compile(r" \([A-Za-z]+; [A-Za-z]+\)$")


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    text = _STATUS.sub("", text)
    return _CALL.sub("", text)


class Connection:
    """A logged-in session with a ``dp-server``: a locked session of the owner's tables,
    spending this analyst's budget. :meth:`sql` returns :class:`QueryResult`."""

    __slots__ = ("_conn", "_uri", "_user")

    def __init__(self, conn: Any, uri: str, user: str) -> None:
        self._conn = conn
        self._uri = uri
        self._user = user

    def _fetch(self, query: str) -> Any:
        try:
            with self._conn.cursor() as cursor:
                cursor.execute(query)
                return cursor.fetch_arrow_table()
        except DpError:
            raise
        except Exception as e:
            # The driver's errors (dbapi.Error and its subclasses) carry the server's line.
            raise DpError(_one_line(e)) from None

    def _spent(self) -> Tuple[float, float, Optional[float]]:
        """The analyst's spent (epsilon, delta), and rho when the budget is in zCDP."""
        table = self._fetch(
            "SELECT epsilon, delta, measure, rho FROM dp_budget() WHERE entry = 'spent'"
        )
        row = table.to_pylist()[0]
        rho = None
        if row["measure"] == "zcdp" and row["rho"] is not None:
            rho = float(row["rho"])
        return float(row["epsilon"] or 0.0), float(row["delta"] or 0.0), rho

    def sql(self, query: str) -> QueryResult:
        """Runs one statement on the server. The cost shown (``result.epsilon``, and under a
        zCDP budget ``result.rho``) is the difference of the analyst's spent amount before and
        after it, as ``dp_budget()`` reports it (another
        connection of the same analyst spending meanwhile would be counted too)."""
        before = self._spent()
        table = self._fetch(query)
        after = self._spent()
        rho = None
        if before[2] is not None and after[2] is not None:
            rho = max(after[2] - before[2], 0.0)
        return QueryResult(
            table,
            epsilon=max(after[0] - before[0], 0.0),
            delta=max(after[1] - before[1], 0.0),
            rho=rho,
            query=query,
        )

    def budget(self) -> QueryResult:
        """``SELECT * FROM dp_budget()``: this analyst's budget, spending and history."""
        return QueryResult(self._fetch("SELECT * FROM dp_budget()"), query="dp_budget()")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<datafusion_dp.Connection {self._user}@{self._uri}>"


def connect(
    uri: str,
    user: str,
    password: str,
    *,
    tls_root_certs: Optional[str] = None,
) -> Connection:
    """Logs in to a ``dp-server`` at ``uri`` (``grpc://host:port``, or ``grpc+tls://`` with
    TLS; ``tls_root_certs`` a PEM file of the CA to trust). Needs the ADBC Flight SQL driver
    (``pip install 'datafusion-dp[server]'``). Raises :class:`DpError` when the login fails."""
    try:
        import adbc_driver_flightsql.dbapi as flight_sql
        from adbc_driver_flightsql import DatabaseOptions
    except ImportError as e:
        raise ImportError(
            "connect() needs the ADBC Flight SQL driver: pip install 'datafusion-dp[server]'"
        ) from e
    kwargs = {"username": user, "password": password}
    if tls_root_certs is not None:
        with open(tls_root_certs) as f:
            kwargs[DatabaseOptions.TLS_ROOT_CERTS.value] = f.read()
    try:
        # The server has no transactions: autocommit.
        conn = flight_sql.connect(uri, db_kwargs=kwargs, autocommit=True)
    except Exception as e:
        raise DpError(_one_line(e)) from None
    connection = Connection(conn, uri, user)
    try:
        # ADBC logs in lazily: a first statement surfaces a refused login here.
        connection._spent()
    except DpError:
        conn.close()
        raise
    return connection
