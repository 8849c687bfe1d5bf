"""Times every DP aggregate at extreme privacy and accuracy parameters, one `dpsql` per statement.

An analyst chooses epsilon, delta, the calibration, the interval and its level; planning must
stay cheap and every refusal clear whatever they choose (docs/privacy-analysis.md, "Vector
releases and privacy maps", where its findings are). Prints each statement slower than 0.3 s
beyond the process's start, or ending other than with an answer or a refusal, then the
refusals by message; writes every timing to a JSON file.

    cargo build --release --bin dpsql
    python3 benches/calibration_sweep.py target/release/dpsql [timings.json]
"""
import json
import subprocess
import sys
import time
from collections import Counter

DPSQL = sys.argv[1]
OUT = sys.argv[2] if len(sys.argv) > 2 else "calibration_sweep.json"
SETUP = [
    "SET dp.public_groups = 'assert'",
    "CREATE TABLE t AS SELECT value % 100 AS g, value % 2 = 0 AS o, value % 3 = 0 AS x, "
    "CAST(value % 97 AS DOUBLE) AS v FROM range(10000)",
]


def run(sql):
    args = [DPSQL, "-q"]
    for statement in SETUP + [sql]:
        args += ["-c", statement]
    start = time.time()
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=60)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        rc, out = "timeout", ""
    return time.time() - start, rc, out


# The privacy parameters at their extremes, every aggregate, every Gaussian calibration.
FUNCTIONS = {
    "count": "SELECT dp_count(o, {e}, '{o}') FROM t",
    "count_g": "SELECT g, dp_count(o, {e}, '{o}') FROM t GROUP BY g",
    "rr": "SELECT dp_rr_ci(o, x, {e}, '{o}') FROM t",
    "rr_g": "SELECT g, dp_rr_ci(o, x, {e}, '{o}') FROM t GROUP BY g",
    "rr_pub": "SELECT g, dp_rr_ci(o, x, {e}, '{o}, group_sizes=public') FROM t GROUP BY g",
    "rr_boot": "SELECT dp_rr_ci(o, x, {e}, '{o}, ci_method=bootstrap') FROM t",
    "or_g": "SELECT g, dp_or_ci(o, x, {e}, '{o}') FROM t GROUP BY g",
    "rd": "SELECT dp_rd_ci(o, x, {e}, '{o}') FROM t",
    "sum_g": "SELECT g, dp_sum(v, 0, 100, {e}, '{o}') FROM t GROUP BY g",
    "avg": "SELECT dp_avg(v, 0, 100, {e}, '{o}') FROM t",
    "quant_g": "SELECT g, dp_quantile(v, 0.5, 0, 100, {e}, '{o}') FROM t GROUP BY g",
}
EPSILONS = ["1e-6", "1e-4", "0.01", "1", "10.75", "100", "700", "1e6", "1e12"]
MECHANISMS = ["mechanism=laplace"] + [
    f"mechanism=gaussian, delta={d}, gaussian_calibration={c}"
    for c in ["analytic", "per_cell", "classic"]
    for d in ["1e-300", "1e-12", "0.01", "0.5", "0.99"]
]
statements = [
    (name, e, o, f.format(e=e, o=o))
    for o in MECHANISMS
    for e in EPSILONS
    for name, f in FUNCTIONS.items()
]

# The accuracy options at their extremes: every interval, level and size mode.
for fn in ["dp_rr_ci", "dp_or_ci", "dp_rd_ci"]:
    for ci in ["score", "conservative", "plain", "log", "bootstrap"]:
        for level in ["1e-9", "0.5", "0.999999999999", "0.9999999999999999"]:
            for e in ["1e-4", "1", "1e6"]:
                for mechanism in ["mechanism=laplace", "mechanism=gaussian, delta=1e-12"]:
                    for sizes in ["private", "public"]:
                        o = f"{mechanism}, ci_method={ci}, confidence={level}, group_sizes={sizes}"
                        sql = f"SELECT g, {fn}(o, x, {e}, '{o}') FROM t GROUP BY g"
                        statements.append((fn, e, o, sql))

# The ratio methods whose delta comes from the method.
for method in ["smooth_sensitivity", "ptr"]:
    for d in ["1e-300", "1e-12", "0.99"]:
        for e in ["1e-6", "1e-4", "1", "1e6"]:
            for bound in ["1e-300", "1", "1e300"] if method == "ptr" else [None]:
                o = f"group_sizes=public, method={method}, delta={d}"
                if bound:
                    o += f", ptr_bound={bound}"
                sql = f"SELECT dp_relative_risk(o, x, {e}, '{o}') FROM t"
                statements.append(("dp_relative_risk", e, o, sql))

# The mean's interval at extreme levels and bounds.
for level in ["1e-9", "0.999999999999"]:
    for e in EPSILONS:
        o = f"confidence={level}"
        sql = f"SELECT g, dp_avg(v, -1e300, 1e300, {e}, '{o}') FROM t GROUP BY g"
        statements.append(("dp_avg", e, o, sql))

base = min(run("SELECT 1")[0] for _ in range(3))
print("process start", round(base, 3), "s;", len(statements), "statements", flush=True)
results = []
for name, e, o, sql in statements:
    t, rc, out = run(sql)
    err = out.strip().splitlines()[-1][:160] if rc != 0 and out.strip() else ""
    results.append((t - base, rc, name, e, o, err))
    if t - base > 0.3 or rc not in (0, 1):
        print(f"SLOW/ODD {t - base:.2f}s rc={rc} {name} eps={e} {o} {err}", flush=True)
json.dump(results, open(OUT, "w"))
refusals = Counter(r[5].split(":")[-1].strip()[:90] for r in results if r[1] != 0)
for message, n in refusals.most_common(40):
    print(n, message)
print("slowest", max(results))
