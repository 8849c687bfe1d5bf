"""datafusion_dp.connect against a real dp-server on loopback (built with cargo), through
the ADBC Flight SQL driver."""

import math

import pytest

import datafusion_dp
from datafusion_dp import DpError

pytest.importorskip("adbc_driver_flightsql")

RR_BY_REGION = (
    "SELECT region, dp_rr_ci(outcome, exposed, 1.0) AS rr FROM visits "
    "GROUP BY region ORDER BY region"
)


def test_query_returns_the_same_result_type(server, tmp_path):
    with datafusion_dp.connect(server.uri, "alice", "alice-test-password") as conn:
        result = conn.sql(RR_BY_REGION)
        assert isinstance(result, datafusion_dp.QueryResult)
        assert result.to_arrow().column("region").to_pylist() == [
            "east",
            "north",
            "south",
            "west",
        ]
        for row in result.to_pylist():
            # A noisy estimate may fall outside its interval (even below 0 in a small
            # group); the interval itself is ordered, and a ratio's is never below 0.
            assert 0 <= row["rr"]["lower"] <= row["rr"]["upper"]
            assert math.isfinite(row["rr"]["estimate"])
        assert result.epsilon == pytest.approx(1.0)
        assert len(result.to_pandas()) == 4
        path = tmp_path / "server-forest.png"
        result.forest_plot(path)
        assert path.read_bytes()[:4] == b"\x89PNG"


def test_refusals_carry_the_servers_message(server):
    with datafusion_dp.connect(server.uri, "alice", "alice-test-password") as conn:
        with pytest.raises(DpError) as refused:
            conn.sql("SELECT * FROM visits")
        message = str(refused.value)
        assert "visits" in message and "\n" not in message
        assert not message.startswith("INVALID_ARGUMENT"), message
        # Budget 3: three charges of 1 pass, the fourth is refused.
        for _ in range(3):
            conn.sql("SELECT dp_count(patient_id, 1.0) AS n FROM visits")
        with pytest.raises(DpError, match="budget"):
            conn.sql("SELECT dp_count(patient_id, 1.0) AS n FROM visits")
        budget = {row["entry"]: row for row in conn.budget().to_pylist()}
        assert budget["spent"]["epsilon"] == pytest.approx(3.0)


def test_a_wrong_password_is_refused(server):
    with pytest.raises(DpError, match="(?i)password|unauthenticated"):
        datafusion_dp.connect(server.uri, "alice", "wrong")


def test_a_zcdp_analyst_sees_the_rho_charged(dp_server_binary, tmp_path):
    # alice's budget in zCDP: each result shows the rho charged (the difference of her spent
    # rho in dp_budget()), Laplace at epsilon charged epsilon^2/2 (Bun & Steinke 2016).
    from conftest import Server, write_owner_config

    config = write_owner_config(tmp_path, budget='budget_measure = "zcdp"\nrho_budget = 0.05')
    server = Server(dp_server_binary, config)
    try:
        with datafusion_dp.connect(server.uri, "alice", "alice-test-password") as conn:
            result = conn.sql("SELECT dp_count(patient_id, 0.1) AS n FROM visits")
            assert result.rho == pytest.approx(0.005)
            with pytest.raises(DpError, match="rho"):
                conn.sql("SELECT dp_count(patient_id, 1.0) AS n FROM visits")
    finally:
        server.stop()


def test_an_epsilon_delta_analyst_sees_no_rho(server):
    with datafusion_dp.connect(server.uri, "alice", "alice-test-password") as conn:
        assert conn.sql("SELECT dp_count(patient_id, 1.0) AS n FROM visits").rho is None
