"""Times every DP aggregate at extreme privacy parameters, one `dpsql` process per statement.

An analyst chooses epsilon, delta and the calibration; planning must stay cheap and every
refusal clear whatever they choose (docs/privacy-analysis.md, "Vector releases and privacy
maps", where its findings are).
Prints each statement slower than 0.3 s beyond the process's start or ending other than with
an answer or a refusal, then the refusals by message; writes every timing to a JSON file.

    cargo build --release --bin dpsql
    python3 benches/calibration_sweep.py target/release/dpsql [timings.json]
"""
import json
import subprocess
import sys
import time
from collections import Counter
DPSQL = sys.argv[1]
SETUP = ["SET dp.public_groups = 'assert'",
 "CREATE TABLE t AS SELECT value % 100 AS g, value % 2 = 0 AS o, value % 3 = 0 AS x, CAST(value % 97 AS DOUBLE) AS v FROM range(10000)"]
def run(sql):
    args=[DPSQL,"-q"]
    for s in SETUP+[sql]: args += ["-c", s]
    t=time.time()
    try:
        p=subprocess.run(args,capture_output=True,text=True,timeout=60)
        rc=p.returncode; out=(p.stdout+p.stderr)
    except subprocess.TimeoutExpired:
        rc='timeout'; out=''
    return time.time()-t, rc, out
base=min(run("SELECT 1")[0] for _ in range(3))
print("baseline", round(base,3), flush=True)
funcs = {
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
eps=["1e-6","1e-4","0.01","1","10.75","100","700","1e6","1e12"]
opts=["mechanism=laplace"]
for c in ["analytic","per_cell","classic"]:
    for d in ["1e-300","1e-12","0.01","0.5","0.99"]:
        opts.append(f"mechanism=gaussian, delta={d}, gaussian_calibration={c}")
res=[]
for o in opts:
    for e in eps:
        for name,f in funcs.items():
            sql=f.format(e=e,o=o)
            t,rc,out=run(sql)
            err=out.strip().splitlines()[-1][:160] if rc!=0 and out.strip() else ''
            res.append((t-base,rc,name,e,o,err))
            if t-base>0.3 or rc not in (0,1):
                print(f"SLOW/ODD {t-base:.2f}s rc={rc} {name} eps={e} {o} {err}", flush=True)
json.dump(res, open(sys.argv[2] if len(sys.argv) > 2 else 'calibration_sweep.json', 'w'))
# The refusals, by message.
c=Counter((r[5].split(':')[-1].strip()[:90]) for r in res if r[1]!=0)
for k,v in c.most_common(40): print(v,k)
print("max", max(res))
