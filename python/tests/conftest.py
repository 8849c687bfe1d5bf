"""Fixtures: the bundled study (data/visits.csv), sessions over it, and a real dp-server on
loopback, built with cargo from this checkout (as tests/server.rs runs it)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
VISITS = REPO / "data" / "visits.csv"
VISITS_COLUMNS = [
    "visit_id BIGINT",
    "patient_id BIGINT",
    "region VARCHAR",
    "month VARCHAR",
    "exposed BOOLEAN",
    "outcome BOOLEAN",
]
REGIONS = ["east", "north", "south", "west"]


@pytest.fixture
def ctx():
    """An owner's session: visits (declared columns) protected by patient_id, regions
    asserted public (the quickstart's declarations)."""
    import datafusion_dp

    ctx = datafusion_dp.SessionContext()
    ctx.register_csv("visits", VISITS, columns=VISITS_COLUMNS)
    ctx.protect("visits", unit="patient_id")
    ctx.sql("SET dp.public_groups = 'assert'")
    return ctx


@pytest.fixture
def regions_csv(tmp_path):
    path = tmp_path / "regions.csv"
    path.write_text("region\n" + "\n".join(REGIONS) + "\n")
    return path


@pytest.fixture
def locked_ctx_factory(regions_csv):
    """Makes a locked session as an owner would: visits (declared columns) protected by
    patient_id, a public regions table as the public GROUP BY keys, and the given budget."""
    import datafusion_dp

    def make(epsilon_budget, ledger=None):
        ctx = datafusion_dp.SessionContext()
        ctx.register_csv("visits", VISITS, columns=VISITS_COLUMNS)
        ctx.register_csv("regions", regions_csv)
        ctx.protect("visits", unit="patient_id")
        ctx.protect("regions", public=True)
        ctx.lock(
            epsilon_budget=epsilon_budget,
            ledger=ledger,
            options={"public_groups": "regions", "max_rows_per_unit": 4},
        )
        return ctx

    return make


def write_owner_config(directory, epsilon_budget=None, budget=None):
    """An examples/owner.toml-style configuration in ``directory``: visits protected by
    patient_id, a public regions table as the public GROUP BY keys, analyst alice (clear
    password, accepted for tests) with ``epsilon_budget`` (or the ``budget`` lines of her
    section, e.g. ``'budget_measure = "zcdp"\nrho_budget = 0.5'``) and her ledger."""
    if budget is None:
        budget = f"epsilon_budget = {epsilon_budget}"
    directory = pathlib.Path(directory)
    (directory / "regions.csv").write_text("region\n" + "\n".join(REGIONS) + "\n")
    columns = ", ".join(f'"{c}"' for c in VISITS_COLUMNS)
    config = directory / "owner.toml"
    config.write_text(
        f"""
[[table]]
name = "visits"
location = "{VISITS.as_posix()}"
unit = "patient_id"
columns = [{columns}]

[[table]]
name = "regions"
location = "regions.csv"
protection = "public"

[options]
public_groups = "regions"
max_rows_per_unit = 4

[[analyst]]
name = "alice"
password = "alice-test-password"
{budget}
ledger = "alice.ledger"
"""
    )
    return config


def _dp_server_binary():
    """Builds dp-server with cargo (the features `cargo test --all-features` builds, so CI
    reuses that build) and returns its path; DP_SERVER_BIN overrides."""
    if os.environ.get("DP_SERVER_BIN"):
        return os.environ["DP_SERVER_BIN"]
    build = subprocess.run(
        [
            "cargo",
            "build",
            "--all-features",
            "--bin",
            "dp-server",
            "--message-format=json-render-diagnostics",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    for line in build.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") == "compiler-artifact" and message.get("executable"):
            if message["target"]["name"] == "dp-server":
                return message["executable"]
    raise RuntimeError("cargo built no dp-server executable")


@pytest.fixture(scope="session")
def dp_server_binary():
    return _dp_server_binary()


class Server:
    """A running dp-server (`--listen 127.0.0.1:0`), stopped at the end of the test."""

    def __init__(self, binary, config):
        self.process = subprocess.Popen(
            [binary, "--config", str(config), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=sys.stderr,
            text=True,
        )
        line = self.process.stdout.readline().strip()
        prefix = "dp-server listening on "
        if not line.startswith(prefix):
            self.stop()
            raise RuntimeError(f"dp-server did not start: {line!r}")
        self.address = line[len(prefix) :].split()[0]
        self.uri = f"grpc://{self.address}"

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def server(dp_server_binary, tmp_path):
    """dp-server over the study with alice's budget of 3."""
    server = Server(dp_server_binary, write_owner_config(tmp_path, epsilon_budget=3.0))
    yield server
    server.stop()
