"""to_pandas() of a 1M-group result against DataFusion's own collect plus pyarrow's
conversion (issue 30: no more than 1.2x).

    python python/bench/to_pandas_1m.py [--groups 1000000] [--runs 5]

Makes a Parquet table of 2 rows per group (a temporary directory), then times, per run:
  ours:     ctx.sql(query).to_pandas() in this package (Rust collect, the Arrow PyCapsule
            hand-over, pyarrow's to_pandas);
  baseline: the same query's collect in Rust alone (examples/collect.rs, the same session
            set-up, same build profile) plus pyarrow's to_pandas of the same table.
and prints the medians and their ratio. Run it with the package built in the profile you
want to measure (CARGO_TARGET_DIR and --profile as for maturin); the example is built with
the same profile (--profile, default dev).
"""

import argparse
import json
import pathlib
import statistics
import subprocess
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import datafusion_dp

REPO = pathlib.Path(__file__).resolve().parents[2]

parser = argparse.ArgumentParser()
parser.add_argument("--groups", type=int, default=1_000_000)
parser.add_argument("--runs", type=int, default=5)
parser.add_argument("--profile", default="dev")
parser.add_argument(
    "--query",
    default="SELECT g, dp_count(x, 1.0) AS n FROM t GROUP BY g",
    help="the query over t(g BIGINT, x BIGINT, exposed BOOLEAN, outcome BOOLEAN)",
)
args = parser.parse_args()

with tempfile.TemporaryDirectory() as directory:
    path = pathlib.Path(directory) / "t.parquet"
    rng = np.random.default_rng(7)
    rows = 2 * args.groups
    pq.write_table(
        pa.table(
            {
                "g": np.arange(rows, dtype=np.int64) % args.groups,
                "x": rng.integers(0, 100, rows),
                "exposed": rng.random(rows) < 0.5,
                "outcome": rng.random(rows) < 0.3,
            }
        ),
        path,
    )

    build = subprocess.run(
        ["cargo", "build", "-p", "datafusion-dp-python", "--example", "collect",
         "--profile", args.profile, "--message-format=json-render-diagnostics"],
        cwd=REPO, stdout=subprocess.PIPE, text=True, check=True,
    )
    binary = next(
        m["executable"]
        for m in map(json.loads, build.stdout.splitlines())
        if m.get("reason") == "compiler-artifact" and m.get("executable")
        and m["target"]["name"] == "collect"
    )
    def rust_collect():
        out = subprocess.run(
            [binary, str(path), str(args.runs), args.query],
            stdout=subprocess.PIPE, text=True, check=True,
        ).stdout.split("\n")
        return [float(line.split()[0]) for line in out if line.strip()]

    ctx = datafusion_dp.SessionContext()
    ctx.register_parquet("t", path)
    ctx.protect("t")
    ctx.sql("SET dp.public_groups = 'assert'")
    collect, ours, sql_only, convert = [], [], [], []
    # Two rounds, alternating the two sides, so a busy machine weighs on both alike.
    for _ in range(2):
        collect += rust_collect()
        for _ in range(args.runs):
            start = time.perf_counter()
            result = ctx.sql(args.query)
            middle = time.perf_counter()
            frame = result.to_pandas()
            end = time.perf_counter()
            assert len(frame) == args.groups
            ours.append(end - start)
            sql_only.append(middle - start)
            # pyarrow's conversion of an equal table that did not come through the capsule.
            table = pa.Table.from_batches(result.to_arrow().to_batches())
            start = time.perf_counter()
            table.to_pandas()
            convert.append(time.perf_counter() - start)
            del frame, table, result

print(f"groups: {args.groups}, runs: 2 x {args.runs}, query: {args.query}")
print("                                     median     min")
for name, values in (
    ("rust collect", collect),
    ("pyarrow to_pandas", convert),
    ("ctx.sql()", sql_only),
    ("ctx.sql().to_pandas()", ours),
):
    print(f"{name + ':':36} {statistics.median(values):7.3f} s {min(values):7.3f} s")
for stat in (statistics.median, min):
    baseline = stat(collect) + stat(convert)
    print(f"ratio ours / (collect + to_pandas), {stat.__name__}: {stat(ours) / baseline:.2f}")
