#!/usr/bin/env bash
# Issue 43's query on a locked Ballista cluster on this machine (one dp-scheduler with the
# owner's configuration, two dp-executor processes) beside the single process (`dpsql
# --config`, the same configuration), whole processes timed with /usr/bin/time.
#
#   cargo build --release --features ballista --bins
#   benches/locked_cluster.sh target/release $DP_BENCH_DIR/10M_1000g_1Mu [runs]
#
# The table is `examples/bench.rs`'s (`grp` 0..999 declared public as a table of keys;
# `visits` protected by `patient_id`).
set -euo pipefail
bin=$(cd "$1" && pwd)
data=$(cd "$2" && pwd)
runs=${3:-3}
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
seq 0 999 | sed '1i grp' > "$dir/groups.csv"
cat > "$dir/owner.toml" <<TOML
[[table]]
name = "visits"
location = "$data"
unit = "patient_id"

[[table]]
name = "groups"
location = "$dir/groups.csv"
protection = "public"
columns = ["grp BIGINT"]

[options]
public_groups = "groups"

[[analyst]]
name = "alice"
password = "bench-password"
epsilon_budget = 1000000.0
ledger = "$dir/alice.ledger"
TOML
query="SELECT grp, dp_rr_ci(outcome, exposed, 1.0) FROM visits GROUP BY grp"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
internal=$(port); clients=$(port)
"$bin/dp-scheduler" --bind-host 127.0.0.1 --bind-port "$internal" --owner-config "$dir/owner.toml" \
  --client-port "$clients" > "$dir/scheduler.log" 2>&1 &
for e in 1 2; do
  "$bin/dp-executor" --bind-host 127.0.0.1 --scheduler-port "$internal" --bind-port "$(port)" \
    --bind-grpc-port "$(port)" --work-dir "$dir/executor-$e" > "$dir/executor-$e.log" 2>&1 &
done
export DP_PASSWORD=bench-password
# The client names the tables; the locked scheduler reads the owner's tables of those names.
cluster() { "$bin/dpsql" --scheduler "df://alice@127.0.0.1:$clients" --table "visits=$data" \
  --table "groups=$dir/groups.csv" -q -c "$query" > /dev/null; }
single() { "$bin/dpsql" --config "$dir/owner.toml" --analyst alice -q -c "$query" > /dev/null; }
for _ in $(seq 1 30); do cluster 2> /dev/null && break; sleep 1; done
for _ in $(seq 1 "$runs"); do
  /usr/bin/time -f "locked cluster: %e s, dpsql client %M KB" bash -c "$(declare -f cluster); bin=$bin clients=$clients data=$data dir=$dir query='$query' cluster"
  /usr/bin/time -f "single process (dpsql --config): %e s, %M KB" bash -c "$(declare -f single); bin=$bin dir=$dir query='$query' single"
done
