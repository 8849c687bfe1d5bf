"""Relative risks with 95% confidence intervals per region, from the bundled dataset: the
study of examples/quickstart.rs, in Python, written to files.

    pip install ./python          # from the repository root, once
    python examples/python/quickstart.py [--out DIR]

Writes DIR/relative_risks.csv (the released table) and DIR/forest_plot.svg and .png (one row
per region, the relative risk and its interval on a log axis, the epsilon spent in the
caption); DIR defaults to ./quickstart-output. Every run draws fresh secure noise, so the
numbers change from run to run; the exact (non-private) relative risks are printed beside them
for comparison only: a real release would never show them.
"""

import argparse
import pathlib

import datafusion_dp

VISITS = pathlib.Path(__file__).resolve().parents[2] / "data" / "visits.csv"

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("quickstart-output"))
out = parser.parse_args().out
out.mkdir(parents=True, exist_ok=True)

# %% The data owner's declarations: a person is every visit with one patient_id (only DP
# aggregates leave the table), and the four regions are public knowledge, released as they
# are. (Without the latter, a DP query with GROUP BY is refused, or use private group
# selection.)
ctx = datafusion_dp.SessionContext()
ctx.register_csv("visits", VISITS)
ctx.protect("visits", unit="patient_id")
ctx.sql("SET dp.public_groups = 'assert'")

# %% The release: epsilon 1.0 for the count plus 1.0 for the 2x2 table (2.0 per region),
# Laplace noise, 95% noise-aware score intervals (the default; docs/intervals.md).
result = ctx.sql(
    """SELECT region,
              dp_count(patient_id, 1.0)       AS patients,
              dp_rr_ci(outcome, exposed, 1.0) AS relative_risk
       FROM visits GROUP BY region ORDER BY region"""
)
print("Differentially private relative risk of the outcome, exposed vs unexposed, per region:")
print(result)

# %% The table, flattened for a spreadsheet, and the forest plot.
frame = result.to_pandas()
for field in ("estimate", "lower", "upper"):
    frame[field] = [row[field] for row in frame["relative_risk"]]
table = frame[["region", "patients", "estimate", "lower", "upper"]].round(3)
table.to_csv(out / "relative_risks.csv", index=False)
figure = result.forest_plot(out / "forest_plot.svg", title="Relative risk of the outcome by region")
figure.savefig(out / "forest_plot.png", dpi=150)
print(f"\nwrote {out / 'relative_risks.csv'}, {out / 'forest_plot.svg'} and {out / 'forest_plot.png'}")

# %% For comparison only (NOT private): the exact relative risk and Katz interval, in the
# owner's own session where every table is public (a locked session can never do this).
exact = datafusion_dp.SessionContext()
exact.register_csv("visits", VISITS)
exact.sql("SET dp.public_tables = '*'")
print("\nFor comparison only (NOT private): the exact relative risk and Katz interval:")
print(
    exact.sql(
        """SELECT region, round(k['estimate'], 2) AS relative_risk,
                  round(k['lower'], 2) AS lower_95, round(k['upper'], 2) AS upper_95
           FROM (SELECT region, rr_ci_katz(
                   count(*) FILTER (WHERE outcome AND exposed), count(*) FILTER (WHERE exposed),
                   count(*) FILTER (WHERE outcome AND NOT exposed),
                   count(*) FILTER (WHERE NOT exposed)) AS k
                 FROM visits GROUP BY region)
           ORDER BY region"""
    )
)
