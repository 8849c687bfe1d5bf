"""Differentially private ratio statistics as SQL, in Apache DataFusion, from Python.

>>> import datafusion_dp
>>> ctx = datafusion_dp.SessionContext()
>>> ctx.register_csv("visits", "data/visits.csv")
>>> ctx.protect("visits", unit="patient_id")
>>> print(ctx.sql("SELECT dp_rr_ci(outcome, exposed, 1.0) AS rr FROM visits"))

The privacy layer is the Rust crate's (``datafusion-dp``): declarations, the planner's
sensitivity analysis, noise, budgets, ledgers and locked sessions all run there; this package
binds it (:class:`SessionContext`), carries results as Arrow (:class:`QueryResult`, zero-copy
through the Arrow PyCapsule interface), draws forest plots, and talks to a ``dp-server``
(:func:`connect`). Errors are :class:`DpError`, carrying the one-line message.
"""

from ._internal import DpError
from ._result import QueryResult
from ._session import SessionContext
from ._client import Connection, connect

__all__ = ["Connection", "DpError", "QueryResult", "SessionContext", "connect"]

try:
    from importlib.metadata import version as _version

    __version__ = _version("datafusion-dp")
except Exception:  # pragma: no cover - an uninstalled checkout
    __version__ = "0+unknown"
