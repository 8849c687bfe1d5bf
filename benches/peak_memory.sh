#!/usr/bin/env bash
# Peak resident memory of each benchmark query, DP against its exact baseline, one fresh
# process per query (GNU time's "Maximum resident set size").
#   cargo build --release --example bench && benches/peak_memory.sh [dataset ...]
set -euo pipefail
bench="${CARGO_TARGET_DIR:-target}/release/examples/bench"
[ -x "$bench" ] || { echo "build first: cargo build --release --example bench" >&2; exit 1; }
datasets=("$@")
[ ${#datasets[@]} -gt 0 ] || datasets=(10M_100g 10M_100kg 10M_1Mg 20M_1Mg)
peak_kib() { /usr/bin/time -v "$bench" query "$1" "$2" "$3" 2>&1 >/dev/null | awk -F': ' '/Maximum resident/ {print $2}'; }
echo "| dataset | source | query | peak RSS (MiB) | baseline | baseline peak RSS (MiB) | ratio |"
echo "|---|---|---|---|---|---|---|"
for d in "${datasets[@]}"; do
  for s in memory parquet; do
    for pair in "dp_count count" "dp_relative_risk four_counts" "dp_rr_ci four_counts"; do
      set -- $pair
      a=$(peak_kib "$d" "$s" "$1"); b=$(peak_kib "$d" "$s" "$2")
      awk -v d="$d" -v s="$s" -v q="$1" -v bq="$2" -v a="$a" -v b="$b" \
        'BEGIN { printf "| %s | %s | %s | %.0f | %s | %.0f | %.2f |\n", d, s, q, a/1024, bq, b/1024, a/b }'
    done
  done
done
