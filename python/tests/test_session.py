"""The in-process session: declarations, DP queries, refusals, locking and budgets, all
enforced by the Rust layer and seen from Python."""

import math

import pyarrow as pa
import pytest

import datafusion_dp
from datafusion_dp import DpError

from conftest import REGIONS, VISITS, VISITS_COLUMNS, write_owner_config

RR_BY_REGION = (
    "SELECT region, dp_rr_ci(outcome, exposed, 1.0) AS rr FROM visits "
    "GROUP BY region ORDER BY region"
)


def test_relative_risk_by_region(ctx):
    result = ctx.sql(RR_BY_REGION)
    assert isinstance(result, datafusion_dp.QueryResult)
    table = result.to_arrow()
    assert isinstance(table, pa.Table)
    assert table.column("region").to_pylist() == REGIONS
    rr_type = table.schema.field("rr").type
    assert pa.types.is_struct(rr_type)
    assert {"estimate", "lower", "upper", "confidence", "seeded"} <= {f.name for f in rr_type}
    for row in table.column("rr").to_pylist():
        # A noisy estimate may fall outside its interval (even below 0 in a small group);
        # the interval itself is ordered, and a ratio's is never below 0.
        assert 0 <= row["lower"] <= row["upper"]
        assert math.isfinite(row["estimate"])
        assert row["confidence"] == 0.95
        assert row["seeded"] is False
    # One 2x2 table per region at epsilon 1: one charge of 1 (parallel composition).
    assert result.epsilon == pytest.approx(1.0)
    assert result.delta == 0.0
    assert "epsilon 1 charged" in repr(result)
    html = result._repr_html_()
    assert html.count("<tr>") == 5 and "epsilon 1 charged" in html


def test_cost_of_every_dp_call_is_reported(ctx):
    result = ctx.sql(
        "SELECT region, dp_count(patient_id, 0.5) AS n, dp_or_ci(outcome, exposed, 0.25) AS o "
        "FROM visits GROUP BY region"
    )
    assert result.epsilon == pytest.approx(0.75)
    # A query that releases nothing private costs nothing.
    assert ctx.sql("SELECT 1 AS one").epsilon == 0.0


def test_to_pandas_and_polars(ctx):
    result = ctx.sql(RR_BY_REGION)
    frame = result.to_pandas()
    assert list(frame.columns) == ["region", "rr"]
    assert list(frame["region"]) == REGIONS
    assert set(frame["rr"][0]) >= {"estimate", "lower", "upper"}
    polars = pytest.importorskip("polars")
    pl_frame = result.to_polars()
    assert isinstance(pl_frame, polars.DataFrame)
    assert pl_frame.height == 4
    # The PyCapsule interface: any Arrow consumer reads the result without pyarrow's help.
    assert pa.table(result).equals(result.to_arrow())
    assert polars.DataFrame(result).height == 4


def test_select_star_on_a_protected_table_is_refused(ctx):
    with pytest.raises(DpError) as refused:
        ctx.sql("SELECT * FROM visits")
    message = str(refused.value)
    assert "visits" in message
    assert "\n" not in message
    # The message says what is allowed instead.
    assert "DP" in message or "dp_" in message, message


def test_exact_aggregates_are_refused(ctx):
    for query in (
        "SELECT count(*) FROM visits",
        "SELECT max(patient_id) FROM visits",
        "SELECT DISTINCT region FROM visits",
    ):
        with pytest.raises(DpError, match="visits"):
            ctx.sql(query)


def test_bad_sql_and_bad_tables_are_errors_not_crashes(ctx, tmp_path):
    with pytest.raises(DpError):
        ctx.sql("SELEC 1")
    with pytest.raises(DpError, match="no_such_table"):
        ctx.sql("SELECT dp_count(x, 1.0) FROM no_such_table")
    with pytest.raises(DpError, match="missing.csv"):
        ctx.register_csv("missing", tmp_path / "missing.csv")
    with pytest.raises(DpError, match="NAME TYPE"):
        ctx.register_csv("bad", VISITS, columns=["visit_id"])
    with pytest.raises(DpError):
        ctx.sql("SELECT dp_count(patient_id, -1.0) FROM visits")
    with pytest.raises(DpError, match="not both"):
        ctx.protect("visits", unit="patient_id", public=True)


def test_budget_refusal(locked_ctx_factory):
    ctx = locked_ctx_factory(1.5)
    first = ctx.sql(RR_BY_REGION)
    assert first.epsilon == pytest.approx(1.0)
    with pytest.raises(DpError) as refused:
        ctx.sql(RR_BY_REGION)
    message = str(refused.value)
    assert "budget" in message, message
    assert "\n" not in message
    # A smaller query still fits; dp_budget() shows the spending.
    assert ctx.sql("SELECT dp_count(patient_id, 0.5) AS n FROM visits").epsilon == 0.5
    budget = {row["entry"]: row for row in ctx.budget().to_pylist()}
    assert budget["spent"]["epsilon"] == pytest.approx(1.5)
    assert budget["remaining"]["epsilon"] == pytest.approx(0.0)


def test_lock_is_one_way(locked_ctx_factory, tmp_path):
    ctx = locked_ctx_factory(5.0, ledger=tmp_path / "analyst.ledger")
    assert ctx.locked
    with pytest.raises(DpError, match="locked"):
        ctx.register_csv("again", VISITS, columns=VISITS_COLUMNS)
    with pytest.raises(DpError, match="locked"):
        ctx.protect("visits", public=True)
    with pytest.raises(DpError, match="locked"):
        ctx.lock(epsilon_budget=100.0)
    for statement in (
        "SET dp.epsilon_budget = 100",
        "SET dp.public_tables = '*'",
        "SET dp.protected_tables = ''",
        "SET dp.ledger = '/tmp/other.ledger'",
        "SET dp.seed = 1",
        f"CREATE EXTERNAL TABLE v2 STORED AS CSV LOCATION '{VISITS}'",
        "DROP TABLE visits",
        "SET datafusion.execution.listing_table_ignore_subdirectory = false",
    ):
        with pytest.raises(DpError):
            ctx.sql(statement)
    # Still only DP leaves the table, and the accuracy options stay the analyst's.
    with pytest.raises(DpError):
        ctx.sql("SELECT * FROM visits")
    ctx.sql("SET dp.confidence = 0.9")
    row = ctx.sql("SELECT dp_rr_ci(outcome, exposed, 1.0) AS rr FROM visits").to_pylist()[0]
    assert row["rr"]["confidence"] == 0.9
    assert "locked" in repr(ctx)


def test_lock_refuses_a_protected_table_with_an_inferred_schema():
    ctx = datafusion_dp.SessionContext()
    ctx.register_csv("visits", VISITS)  # no columns: types inferred from the rows
    ctx.protect("visits", unit="patient_id")
    with pytest.raises(DpError, match="inferred"):
        ctx.lock(epsilon_budget=1.0)
    assert not ctx.locked
    # Unlocked, the owner may explore it (only DP still leaves it).
    assert ctx.sql("SELECT dp_count(patient_id, 1.0) AS n FROM visits").num_rows == 1


def test_public_groups_and_public_tables_through_lock_options(locked_ctx_factory):
    # regions was registered without columns: public, so inference is fine.
    ctx = locked_ctx_factory(2.0)
    result = ctx.sql(RR_BY_REGION)
    assert result.to_arrow().column("region").to_pylist() == REGIONS
    # The public table is released exactly; the analyst cannot move the declaration.
    assert ctx.sql("SELECT count(*) AS n FROM regions").to_pylist() == [{"n": 4}]
    with pytest.raises(DpError):
        ctx.sql("SET dp.public_groups = 'assert'")


def test_a_ledger_is_shared_by_sessions(tmp_path):
    ledger = tmp_path / "shared.ledger"

    def session():
        ctx = datafusion_dp.SessionContext()
        ctx.register_csv("visits", VISITS, columns=VISITS_COLUMNS)
        ctx.protect("visits", unit="patient_id")
        ctx.lock(epsilon_budget=1.0, ledger=ledger)
        return ctx

    session().sql("SELECT dp_count(patient_id, 0.75) AS n FROM visits")
    with pytest.raises(DpError, match="budget"):
        session().sql("SELECT dp_count(patient_id, 0.5) AS n FROM visits")
    assert ledger.exists()


def test_session_from_an_owner_configuration(tmp_path):
    config = write_owner_config(tmp_path, epsilon_budget=1.0)
    ctx = datafusion_dp.SessionContext.from_config(config, analyst="alice")
    assert ctx.locked
    assert ctx.tables() == ["regions", "visits"]
    assert ctx.sql(RR_BY_REGION).num_rows == 4
    with pytest.raises(DpError, match="visits"):
        ctx.sql("SELECT * FROM visits")
    with pytest.raises(DpError, match="budget"):
        ctx.sql(RR_BY_REGION)
    with pytest.raises(DpError, match="bob"):
        datafusion_dp.SessionContext.from_config(config, analyst="bob")


def test_ctrl_c_stops_a_running_query():
    import _thread
    import signal
    import threading
    import time

    ctx = datafusion_dp.SessionContext()
    # A process started in the background by a shell without job control (`cmd &`, as some
    # CI launchers do) inherits SIGINT ignored, and then interrupt_main does nothing: Python's
    # own handler is what Ctrl-C reaches in a terminal or a notebook, so the test installs it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        # Ten billion rows of a public table function: minutes of work, stopped after 0.5 s.
        timer = threading.Timer(0.5, _thread.interrupt_main)
        start = time.monotonic()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            ctx.sql("SELECT count(*) AS n FROM generate_series(1, 10000000000)")
        timer.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - start < 10
    # The session is still usable.
    assert ctx.sql("SELECT 1 AS one").to_pylist() == [{"one": 1}]


def test_register_parquet_and_json(tmp_path):
    import pyarrow.csv
    import pyarrow.parquet

    visits = pyarrow.csv.read_csv(VISITS)
    pyarrow.parquet.write_table(visits, tmp_path / "visits.parquet")
    with open(tmp_path / "visits.json", "w") as f:
        for row in visits.to_pylist():
            f.write(__import__("json").dumps(row) + "\n")
    ctx = datafusion_dp.SessionContext()
    ctx.register_parquet("p", tmp_path / "visits.parquet")  # the file's own schema
    ctx.register_json("j", tmp_path / "visits.json", columns=VISITS_COLUMNS)
    ctx.protect("p", unit="patient_id")
    ctx.protect("j", unit="patient_id")
    ctx.lock(epsilon_budget=2.0)  # neither schema was inferred from rows
    for table in ("p", "j"):
        n = ctx.sql(f"SELECT dp_count(patient_id, 1.0) AS n FROM {table}").to_pylist()[0]["n"]
        assert 3000 < n < 5000
        with pytest.raises(DpError, match=f"'{table}'"):
            ctx.sql(f"SELECT * FROM {table}")
    # A Parquet directory whose files disagree is refused, as dp-server refuses it.
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    pyarrow.parquet.write_table(visits, mixed / "a.parquet")
    pyarrow.parquet.write_table(visits.drop_columns(["month"]), mixed / "b.parquet")
    with pytest.raises(DpError, match="same columns"):
        datafusion_dp.SessionContext().register_parquet("m", mixed)


def _owner_session():
    """An owner's session over the study, visits protected by patient_id (one row per unit
    kept: sensitivity 1), ready to lock."""
    ctx = datafusion_dp.SessionContext()
    ctx.register_csv("visits", VISITS, columns=VISITS_COLUMNS)
    ctx.protect("visits", unit="patient_id")
    return ctx


def test_lock_with_a_rho_budget(tmp_path):
    # A zCDP budget given as rho alone: budget_measure "zcdp" is implied.
    ctx = _owner_session()
    sigma = ctx.sql("SELECT gaussian_sigma(1.0, 1e-6, 1) AS s").to_pylist()[0]["s"]
    ctx.lock(rho_budget=0.05, ledger=tmp_path / "zcdp.ledger")
    assert ctx.locked
    # Laplace noise at epsilon is charged rho = epsilon^2/2 (Bun & Steinke 2016, Prop 1.4).
    laplace = ctx.sql("SELECT dp_count(patient_id, 0.1) AS n FROM visits")
    assert laplace.rho == pytest.approx(0.1**2 / 2, rel=1e-6)
    assert laplace.epsilon == pytest.approx(0.1)
    assert "rho 0.005 charged (epsilon 0.1)" in repr(laplace)
    # The discrete Gaussian: rho = 1/(2 sigma^2) from the sigma actually sampled (CKS 2020,
    # Prop 5): the continuous analytic sigma (Balle & Wang 2018), with sigma^2 raised until
    # the discrete law's exact delta is within target (0.3% here), so rho is slightly smaller.
    gaussian = ctx.sql(
        "SELECT dp_count(patient_id, 1.0, 'mechanism=gaussian, delta=1e-6') AS n FROM visits"
    )
    assert gaussian.rho == pytest.approx(1 / (2 * sigma**2), rel=1e-2)
    assert gaussian.rho <= 1 / (2 * sigma**2)
    budget = {row["entry"]: row for row in ctx.budget().to_pylist()}
    assert budget["budget"]["measure"] == "zcdp"
    assert budget["budget"]["rho"] == pytest.approx(0.05)
    assert budget["spent"]["rho"] == pytest.approx(laplace.rho + gaussian.rho)
    # A query whose rho does not fit what is left is refused, in rho.
    with pytest.raises(DpError, match="rho"):
        ctx.sql("SELECT dp_count(patient_id, 1.0) AS n FROM visits")
    assert (tmp_path / "zcdp.ledger").exists()


def test_lock_with_a_zcdp_target():
    # A target (epsilon, delta), converted once to the largest rho that meets it.
    ctx = _owner_session()
    ctx.lock(epsilon_budget=1.0, delta_budget=1e-6, budget_measure="zcdp")
    budget = {row["entry"]: row for row in ctx.budget().to_pylist()}["budget"]
    assert budget["measure"] == "zcdp"
    assert budget["guarantee_epsilon"] == pytest.approx(1.0)
    assert budget["guarantee_delta"] == pytest.approx(1e-6)
    # The conversion is at least as good as Bun & Steinke 2016's (Prop 1.3: rho-zCDP is
    # (rho + 2 sqrt(rho ln(1/delta)), delta)-DP), whose largest rho for (1, 1e-6) is
    # (sqrt(L + 1) - sqrt(L))^2 with L = ln(1e6): 0.01747.
    rho = budget["rho"]
    log_inv_delta = math.log(1e6)
    bun_steinke = (math.sqrt(log_inv_delta + 1) - math.sqrt(log_inv_delta)) ** 2
    assert bun_steinke == pytest.approx(0.01747, abs=1e-5)
    assert bun_steinke <= rho < 1.0
    result = ctx.sql("SELECT dp_count(patient_id, 0.2) AS n FROM visits")
    assert result.rho == pytest.approx(0.02)


def test_an_epsilon_delta_budget_charges_no_rho(locked_ctx_factory):
    ctx = locked_ctx_factory(2.0)
    result = ctx.sql("SELECT dp_count(patient_id, 1.0) AS n FROM visits")
    assert result.epsilon == pytest.approx(1.0)
    assert result.rho is None


@pytest.mark.parametrize(
    "budget, message",
    [
        ({}, "needs a budget"),
        ({"delta_budget": 1e-6}, "needs a budget"),
        ({"rho_budget": -1.0}, "rho_budget must be a positive number"),
        ({"rho_budget": 0.0}, "rho_budget must be a positive number"),
        ({"rho_budget": float("nan")}, "rho_budget must be a positive number"),
        ({"rho_budget": float("inf")}, "rho_budget must be a positive number"),
        ({"epsilon_budget": -1.0}, "epsilon_budget must be a finite number >= 0"),
        ({"epsilon_budget": float("inf")}, "epsilon_budget must be a finite number >= 0"),
        ({"epsilon_budget": 1.0, "delta_budget": 1.5}, r"delta_budget must be in \[0, 1\)"),
        (
            {"rho_budget": 0.1, "epsilon_budget": 1.0, "delta_budget": 1e-6},
            "not both",
        ),
        (
            {"rho_budget": 0.1, "budget_measure": "epsilon_delta"},
            "rho_budget is a zCDP budget, but budget_measure is 'epsilon_delta'",
        ),
        ({"budget_measure": "zcdp"}, "budget_measure='zcdp' needs rho_budget"),
        ({"budget_measure": "zcdp", "epsilon_budget": 1.0}, "delta_budget=none"),
        (
            {"budget_measure": "zcdp", "epsilon_budget": 1.0, "delta_budget": 0.0},
            "delta_budget in \\(0, 1\\)",
        ),
        (
            {"budget_measure": "renyi", "epsilon_budget": 1.0},
            "budget_measure must be 'epsilon_delta' or 'zcdp', got 'renyi'",
        ),
    ],
)
def test_lock_refuses_a_bad_budget(budget, message):
    ctx = _owner_session()
    with pytest.raises(DpError, match=message) as refused:
        ctx.lock(**budget)
    assert str(refused.value).startswith("lock: "), str(refused.value)
    assert not ctx.locked
    # Nothing was applied: the owner can still lock with a valid budget.
    ctx.lock(rho_budget=0.1)
    assert ctx.locked
