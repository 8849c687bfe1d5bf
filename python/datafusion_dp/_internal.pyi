"""Type stubs of the native module (``python/src/lib.rs``)."""

from typing import Any, List, Optional, Sequence, Tuple

class DpError(Exception):
    """A refused or failed statement, with its one-line message."""

class Session:
    def __init__(self) -> None: ...
    @staticmethod
    def from_config(path: str, analyst: Optional[str] = None) -> "Session": ...
    def register(
        self,
        name: str,
        path: str,
        format: str,
        columns: Optional[Sequence[str]] = None,
        partition_columns: Optional[Sequence[str]] = None,
    ) -> None: ...
    def protect(self, table: str, unit: Optional[str] = None, public: bool = False) -> None: ...
    def lock(
        self,
        epsilon_budget: Optional[float] = None,
        delta_budget: Optional[float] = None,
        ledger: Optional[str] = None,
        options: Sequence[Tuple[str, str]] = ...,
        rho_budget: Optional[float] = None,
        budget_measure: Optional[str] = None,
    ) -> None: ...
    @property
    def locked(self) -> bool: ...
    def sql(
        self, query: str
    ) -> Tuple[Any, Optional[Tuple[float, float, Optional[float]]]]: ...
    def tables(self) -> List[str]: ...

def dp_functions() -> List[Tuple[str, str, Optional[Tuple[str, bool]]]]:
    """The DP aggregates of the Rust crate's registry, in order: each one's name, SQL
    signature, and, for one that returns an interval, the statistic it estimates and whether
    that is a ratio."""
    ...
