#!/usr/bin/env bash
# Issue 41's mutation checks: each fix disabled alone, in a worktree of HEAD, then the
# neighbours harness's regression corpus run on it (`fuzz_regressions_hold`). A fix whose
# mutation leaves the corpus passing is not what holds it (docs/privacy-analysis.md, "The
# fuzzer"). Not part of `.ci/run`: each mutation is a build (a few minutes on 2 cores).
#
#   tests/neighbours/mutations.sh                 # every mutation
#   tests/neighbours/mutations.sh drain eager     # some
#
# CARGO_TARGET_DIR defaults to target/mutations beside the checkout's own target directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
corpus="$root/tests/neighbours/regressions.sql"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/mutations}"
tree=$(mktemp -d)/mutant
git worktree add -q --detach "$tree" HEAD
trap 'git -C "$root" worktree remove --force "$tree"' EXIT

# name: file, then the sed expression that disables the fix.
mutate() {
  case $1 in
    widths) sed -i 's/^pub fn check_type(data_type: &DataType, batch_size: usize) -> Result<()> {/&\n    if batch_size > 0 { return Ok(()); }/' src/sql/privacy/plan/size.rs ;;
    drain) sed -i 's/        if !reads_protected(&plan)? {/        if true || !reads_protected(\&plan)? {/' src/sql/privacy/exec/drain.rs ;;
    eager) sed -i 's/let eager = eager::evaluate_every_branch(logical_plan.clone())?;/let eager = logical_plan.clone();/' src/sql/privacy/session/planner.rs ;;
    costs) sed -i '/^fn refuse_costly_calls(/,/^) -> Result<()> {/ s/^) -> Result<()> {/) -> Result<()> {\n    if plan.schema().fields().len() < usize::MAX { return Ok(()); }/' src/sql/privacy/pass.rs ;;
    total) sed -i 's/        let args = match output_bounds(name, &args) {/        let args = match None::<Vec<u64>> {/' src/sql/privacy/udf/total.rs ;;
    depth) sed -i 's/pub const MAX_EXPRESSION_DEPTH: u32 = 256;/pub const MAX_EXPRESSION_DEPTH: u32 = 1_000_000;/' src/sql/privacy/plan/size.rs ;;
    stack) sed -i 's/pub const EXECUTION_STACK_BYTES: usize = 64 \* 1024 \* 1024;/pub const EXECUTION_STACK_BYTES: usize = 2 * 1024 * 1024;/' src/sql/privacy/session/limits.rs ;;
    depthstack) mutate depth; mutate stack ;;
    *) echo "unknown mutation $1" >&2; exit 2 ;;
  esac
}

mutations=("$@")
[ ${#mutations[@]} -gt 0 ] || mutations=(widths drain eager costs total depth stack depthstack)
cd "$tree"
for m in "${mutations[@]}"; do
  git checkout -q -- .
  mutate "$m"
  if git diff --quiet; then
    echo "=== $m: the mutation no longer applies (the code moved): update this script" >&2
    exit 2
  fi
  echo "=== $m: $(git diff --shortstat)"
  log="$CARGO_TARGET_DIR/mutation-$m.log"
  mkdir -p "$CARGO_TARGET_DIR"
  if DP_FUZZ_CORPUS="$corpus" cargo test --all-features --test neighbours -- --nocapture \
      fuzz_regressions >"$log" 2>&1; then
    echo "corpus holds (the mutation is not caught)"
  else
    grep -E "regression corpus:|^(open )?line .*: \[|^error(\[|:)" "$log" | cut -c1-200 | head -8
  fi
done
