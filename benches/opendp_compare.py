"""OpenDP 0.16 (Polars) on the workload of `examples/bench.rs`'s unit datasets: the patient as
privacy unit, each patient truncated to one row per group (as `dp.max_rows_per_unit = 1`
does; OpenDP 0.16's `truncate_num_groups(1, by=["grp"])` failed in Polars 1.36 with "multiple
fields with name 'grp'", so groups per patient are left to OpenDP's own bound), then a noisy count of each of the four 2x2 cells per group with the groups declared
public: what `dp_rr_ci` releases before its interval. Times the whole query (scan, truncation,
aggregation, noise), medians of runs, printed as a BENCHMARKS.md row.

    python3 -m venv /tmp/opendp && /tmp/opendp/bin/pip install "opendp[polars]==0.16.*"
    /tmp/opendp/bin/python benches/opendp_compare.py $DP_BENCH_DIR/10M_1000g_1Mu [runs]
"""

import statistics
import sys
import time

import opendp.prelude as dp
import polars as pl

dp.enable_features("contrib")


def query(path: str) -> pl.DataFrame:
    data = pl.scan_parquet(f"{path}/*.parquet")
    keys = pl.DataFrame({"grp": list(range(1000))}, schema={"grp": pl.Int64})
    context = dp.Context.compositor(
        data=data,
        privacy_unit=dp.unit_of(contributions=1, identifier="patient_id"),
        privacy_loss=dp.loss_of(epsilon=1.0),
        split_evenly_over=1,
        margins=[dp.polars.Margin(by=["grp"], invariant="keys")],
    )
    cell = (pl.col("outcome").cast(pl.Int32) * 2 + pl.col("exposed").cast(pl.Int32)).alias("cell")
    released = (
        context.query()
        .with_columns(cell)
        .truncate_per_group(1, by=["grp"])
        .group_by("grp", "cell")
        .agg(dp.len())
        .with_keys(keys.join(pl.DataFrame({"cell": [0, 1, 2, 3]}, schema={"cell": pl.Int32}), how="cross"))
        .release()
        .collect()
    )
    return released


def main() -> None:
    path = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    query(path)  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        out = query(path)
        times.append(time.perf_counter() - start)
    print(f"| OpenDP 0.16 (Polars {pl.__version__}) | {path.rstrip('/').split('/')[-1]} | "
          f"{statistics.median(times):.3f} | {min(times):.3f}-{max(times):.3f} | {out.height} cells |")


if __name__ == "__main__":
    main()
