//! Privacy budget accounting: `dp.epsilon_budget`, `dp.delta_budget`, `dp.ledger` and the
//! `dp_budget()` table function.
//!
//! **What a query costs** ([`Cost::of_plan`]): the sum, by sequential composition, of the
//! `(epsilon, delta)` of every DP aggregate call in the plan, subqueries and views included.
//! `delta` is the call's δ when it uses the Gaussian mechanism or the `smooth_sensitivity`/`ptr`
//! method, else 0. The disjoint groups of one GROUP BY are one charge (parallel composition:
//! under the replace-one neighbouring relation, with one row per individual, a row is in one
//! group); GROUPING SETS, ROLLUP and CUBE put each row in one group *per grouping set*, so such
//! a call costs `k·(ε, δ)` for `k` sets. Identical calls in one SELECT, which DataFusion
//! deduplicates into one computation and one noise draw, count once; the same call in two
//! places (a UNION, a CTE used twice) is computed twice with fresh noise and counts twice.
//!
//! **When it is charged**: in the analyzer ([`crate::sql::privacy::rule::DpPlannerRule`]), after every
//! call is bound and validated and before anything executes, in one atomic check-and-charge
//! ([`Accountant::charge`]); a query that does not fit is refused with an error that gives its
//! cost, the amount spent and what is left. Decisions, all erring towards charging:
//! - `EXPLAIN` costs as much as the query: the analyzer runs on the explained plan and cannot
//!   tell it from a query (`EXPLAIN ANALYZE` runs the query and is charged once).
//! - A query that fails or is cancelled after planning stays charged (its noise may have been
//!   drawn and partial results streamed).
//! - Re-analysis of a plan whose DP calls are all bound already (a plan optimised twice, or a
//!   scheduler such as Ballista re-optimising the plan it received) is not charged again in
//!   the process that bound it; a plan in which any call is still unbound is charged in full.
//!   The codecs of `crate::distributed` carry the binding, so Ballista's scheduler charges
//!   nothing; a scheduler that receives unbound calls (a client without the rule) charges them
//!   in its own session: over-counting, never under-counting. Every `collect()` of a DataFrame re-analyses
//!   its unbound plan, draws fresh noise and is charged again.
//! - Each session ([`crate::register`]) has one [`Accountant`]; a `Mutex` makes the check and
//!   the charge one step, so concurrent queries cannot together overspend. With `dp.ledger`,
//!   an exclusive file lock extends that to every session and process sharing the file, and
//!   the charge is synced to disk before the plan is returned (see [`crate::sql::accounting::ledger`]).
//!
//! **Budgets** come from the session options when the query is analysed. With neither set
//! nothing is enforced (charges are still recorded); with one set, the other is 0 (setting
//! only `dp.epsilon_budget` allows pure-DP calls only). Spent = the ledger's total (all
//! processes) plus this session's charges that are not in that ledger. The budget options are
//! settings of whoever controls the session: a deployment that runs untrusted SQL must stop
//! `SET` (DataFusion's `SQLOptions::with_allow_statements(false)`).

use crate::sql::functions::aggregate::DpAggregate;
use crate::sql::accounting::ledger;
use crate::sql::options::DpOptions;
use arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::catalog::{MemTable, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{plan_datafusion_err, plan_err, Result};
use datafusion::logical_expr::{Expr, GroupingSet, LogicalPlan};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The privacy cost of one query, by sequential composition over its DP aggregate calls.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Cost {
    pub epsilon: f64,
    pub delta: f64,
    /// Number of bound DP aggregate calls found (each grouping set counted once per call).
    pub calls: usize,
}

/// How many grouping sets an aggregation's group expressions form (each row is in one group
/// of each set).
fn grouping_sets(group_expr: &[Expr]) -> usize {
    group_expr
        .iter()
        .map(|e| match e {
            Expr::GroupingSet(GroupingSet::Rollup(keys)) => keys.len() + 1,
            Expr::GroupingSet(GroupingSet::Cube(keys)) => {
                1usize.checked_shl(keys.len() as u32).unwrap_or(usize::MAX)
            }
            Expr::GroupingSet(GroupingSet::GroupingSets(sets)) => sets.len().max(1),
            _ => 1,
        })
        .fold(1usize, |a, b| a.saturating_mul(b))
}

/// Calls `visit` for every DP aggregate call in the plan (subqueries included), with the
/// number of grouping sets of its aggregation and the call's argument expressions.
fn for_each_dp_call(
    plan: &LogicalPlan,
    mut visit: impl FnMut(&DpAggregate, usize, &[Expr]),
) -> Result<()> {
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::Aggregate(aggregate) = node {
            let sets = grouping_sets(&aggregate.group_expr);
            for expr in &aggregate.aggr_expr {
                expr.apply(|e| {
                    if let Expr::AggregateFunction(call) = e {
                        if let Some(dp) = call.func.inner().downcast_ref::<DpAggregate>() {
                            visit(dp, sets, &call.params.args);
                        }
                    }
                    Ok(TreeNodeRecursion::Continue)
                })?;
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map(|_| ())
}

impl Cost {
    /// The cost of every bound DP aggregate call in `plan` (see the module docs).
    pub fn of_plan(plan: &LogicalPlan) -> Result<Self> {
        let mut cost = Cost::default();
        for_each_dp_call(plan, |dp, sets, _| {
            if let Some(call) = dp.plan() {
                let (epsilon, delta) = call.cost();
                let k = sets as f64;
                cost.epsilon += k * epsilon;
                cost.delta += k * delta;
                cost.calls += sets;
            }
        })?;
        Ok(cost)
    }
}

/// Whether any DP aggregate call in `plan` is not yet bound by the planner rule (a plan that
/// has not been charged in this process).
pub fn has_unbound_calls(plan: &LogicalPlan) -> Result<bool> {
    let mut unbound = false;
    for_each_dp_call(plan, |dp, _, _| unbound |= dp.plan().is_none())?;
    Ok(unbound)
}

/// A short description of the query for the history: its DP calls and the tables it reads
/// (the analyzer never sees the SQL text).
pub fn describe(plan: &LogicalPlan) -> String {
    let mut calls: Vec<String> = Vec::new();
    let _ = for_each_dp_call(plan, |dp, _, args| {
        let user_args = dp
            .plan()
            .map_or(args.len(), |p| p.user_args.min(args.len()));
        let args: Vec<String> = args[..user_args]
            .iter()
            .map(|a| a.schema_name().to_string())
            .collect();
        calls.push(format!("{}({})", dp.function().name(), args.join(", ")));
    });
    let mut tables: Vec<String> = Vec::new();
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let name = scan.table_name.to_string();
            if !tables.contains(&name) {
                tables.push(name);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    let mut text = calls.join(", ");
    if !tables.is_empty() {
        text.push_str(" FROM ");
        text.push_str(&tables.join(", "));
    }
    text
}

/// The budget of a session, from its options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    pub epsilon: Option<f64>,
    pub delta: Option<f64>,
}

impl Budget {
    pub fn from_options(options: &DpOptions) -> Self {
        Self {
            epsilon: options.epsilon_budget,
            delta: options.delta_budget,
        }
    }

    /// The enforced `(epsilon, delta)` limits: `None` when neither budget is set; an unset one
    /// is 0 when the other is set.
    pub fn limits(&self) -> Option<(f64, f64)> {
        if self.epsilon.is_none() && self.delta.is_none() {
            return None;
        }
        Some((self.epsilon.unwrap_or(0.0), self.delta.unwrap_or(0.0)))
    }

    /// Refuses `cost` when `spent + cost` exceeds the limits (beyond relative rounding of
    /// 1e-12, so ten charges of 0.1 fit a budget of 1).
    fn check(&self, cost: &Cost, spent: (f64, f64)) -> Result<()> {
        let Some((epsilon, delta)) = self.limits() else {
            return Ok(());
        };
        let fits = |total: f64, limit: f64| total <= limit + limit * 1e-12;
        if fits(spent.0 + cost.epsilon, epsilon) && fits(spent.1 + cost.delta, delta) {
            return Ok(());
        }
        let unset = |v: Option<f64>, key: &str| {
            if v.is_none() {
                format!(" (dp.{key} not set)")
            } else {
                String::new()
            }
        };
        plan_err!(
            "dp budget exceeded: this query needs epsilon={}, delta={}; spent epsilon={} of {}{}, delta={} of {}{}; remaining epsilon={}, delta={}",
            num(cost.epsilon),
            num(cost.delta),
            num(spent.0),
            num(epsilon),
            unset(self.epsilon, "epsilon_budget"),
            num(spent.1),
            num(delta),
            unset(self.delta, "delta_budget"),
            num((epsilon - spent.0).max(0.0)),
            num((delta - spent.1).max(0.0))
        )
    }
}

/// A number for messages: 12 significant digits, so `10 - 9.7` prints as `0.3`.
fn num(x: f64) -> String {
    let rounded: f64 = format!("{x:.11e}").parse().unwrap_or(x);
    rounded.to_string()
}

/// Where a session's charge was also written.
#[derive(Debug, Clone, PartialEq)]
struct LedgerRecord {
    identity: PathBuf,
    seq: u64,
    hash: String,
}

/// One charge made by this session.
#[derive(Debug, Clone, PartialEq)]
struct SessionCharge {
    unix_ms: i64,
    epsilon: f64,
    delta: f64,
    query: String,
    ledger: Option<LedgerRecord>,
}

/// One row of the history shown by `dp_budget()`.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEntry {
    pub unix_ms: i64,
    pub epsilon: f64,
    pub delta: f64,
    pub query: String,
}

/// Budget, spent amount and history of a session, as `dp_budget()` reports them.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub budget: Budget,
    pub epsilon_spent: f64,
    pub delta_spent: f64,
    pub history: Vec<HistoryEntry>,
}

impl Status {
    /// What is left: `None` when no budget is enforced.
    pub fn remaining(&self) -> Option<(f64, f64)> {
        self.budget.limits().map(|(e, d)| {
            (
                (e - self.epsilon_spent).max(0.0),
                (d - self.delta_spent).max(0.0),
            )
        })
    }
}

/// The privacy accountant of one session: its charges, behind one lock (see the module docs).
#[derive(Debug, Default)]
pub struct Accountant {
    charges: Mutex<Vec<SessionCharge>>,
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Refuses a ledger that lost a charge this session wrote to it (truncated, replaced, reset).
fn check_session_charges_kept(
    charges: &[SessionCharge],
    entries: &[ledger::Entry],
    identity: &Path,
    path: &Path,
) -> Result<()> {
    for record in charges
        .iter()
        .filter_map(|c| c.ledger.as_ref())
        .filter(|r| r.identity == identity)
    {
        let kept = usize::try_from(record.seq - 1)
            .ok()
            .and_then(|i| entries.get(i))
            .is_some_and(|e| e.hash == record.hash);
        if !kept {
            return plan_err!(
                "dp.ledger '{}' no longer holds charge #{} that this session wrote (the file was truncated, replaced or reset); refusing to charge or report",
                path.display(),
                record.seq
            );
        }
    }
    Ok(())
}

/// Spent `(epsilon, delta)`: the ledger's entries plus this session's charges not in it.
fn spent(
    charges: &[SessionCharge],
    entries: &[ledger::Entry],
    identity: Option<&Path>,
) -> (f64, f64) {
    let mut total = (0.0, 0.0);
    for e in entries {
        total.0 += e.epsilon;
        total.1 += e.delta;
    }
    for c in charges.iter().filter(|c| {
        identity.is_none() || c.ledger.as_ref().map(|r| r.identity.as_path()) != identity
    }) {
        total.0 += c.epsilon;
        total.1 += c.delta;
    }
    total
}

impl Accountant {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> Result<MutexGuard<'_, Vec<SessionCharge>>> {
        self.charges.lock().map_err(|_| {
            plan_datafusion_err!(
                "dp budget: the accountant's lock is poisoned (a thread panicked while charging); refusing"
            )
        })
    }

    /// Charges the query `plan` (its DP calls already bound) against the session's budget, or
    /// refuses it. The one place where queries are charged; atomic per session and, with a
    /// ledger, across processes.
    pub fn charge(&self, plan: &LogicalPlan, options: &DpOptions) -> Result<Cost> {
        let cost = Cost::of_plan(plan)?;
        if cost.calls == 0 {
            return Ok(cost);
        }
        let budget = Budget::from_options(options);
        let query = describe(plan);
        let mut charges = self.lock()?;
        let mut record = None;
        if let Some(path) = options.ledger.as_deref() {
            let path = Path::new(path);
            let mut identity = PathBuf::new();
            let entry = ledger::append_with(path, |entries, id| {
                check_session_charges_kept(&charges, entries, id, path)?;
                budget.check(&cost, spent(&charges, entries, Some(id)))?;
                identity = id.to_path_buf();
                Ok(ledger::NewCharge {
                    unix_ms: unix_ms(),
                    epsilon: cost.epsilon,
                    delta: cost.delta,
                    query: query.clone(),
                })
            })?;
            record = Some((
                entry.unix_ms,
                LedgerRecord {
                    identity,
                    seq: entry.seq,
                    hash: entry.hash,
                },
            ));
        } else {
            budget.check(&cost, spent(&charges, &[], None))?;
        }
        let (time, ledger) = match record {
            Some((time, record)) => (time, Some(record)),
            None => (unix_ms(), None),
        };
        charges.push(SessionCharge {
            unix_ms: time,
            epsilon: cost.epsilon,
            delta: cost.delta,
            query,
            ledger,
        });
        Ok(cost)
    }

    /// The session's budget, spent amount and history (the ledger's, when `dp.ledger` is set,
    /// re-read and verified now).
    pub fn status(&self, options: &DpOptions) -> Result<Status> {
        let charges = self.lock()?;
        let (entries, identity) = match options.ledger.as_deref() {
            Some(path) => {
                let path = Path::new(path);
                let entries = ledger::read(path)?;
                let identity = ledger::identity(path);
                check_session_charges_kept(&charges, &entries, &identity, path)?;
                (entries, Some(identity))
            }
            None => (Vec::new(), None),
        };
        let (epsilon_spent, delta_spent) = spent(&charges, &entries, identity.as_deref());
        let mut history: Vec<HistoryEntry> = entries
            .iter()
            .map(|e| HistoryEntry {
                unix_ms: e.unix_ms,
                epsilon: e.epsilon,
                delta: e.delta,
                query: e.query.clone(),
            })
            .collect();
        history.extend(
            charges
                .iter()
                .filter(|c| {
                    identity.is_none()
                        || c.ledger.as_ref().map(|r| r.identity.as_path()) != identity.as_deref()
                })
                .map(|c| HistoryEntry {
                    unix_ms: c.unix_ms,
                    epsilon: c.epsilon,
                    delta: c.delta,
                    query: c.query.clone(),
                }),
        );
        history.sort_by_key(|h| h.unix_ms);
        Ok(Status {
            budget: Budget::from_options(options),
            epsilon_spent,
            delta_spent,
            history,
        })
    }
}

/// `dp_budget()`: one row each for `budget`, `spent` and `remaining`, then one `charge` row per
/// charge in time order (see the README). A snapshot taken when the query is planned.
#[derive(Debug)]
pub struct DpBudgetFunction {
    accountant: Arc<Accountant>,
}

impl DpBudgetFunction {
    pub fn new(accountant: Arc<Accountant>) -> Self {
        Self { accountant }
    }

    /// The schema of `dp_budget()`.
    pub fn schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![
            Field::new("entry", DataType::Utf8, false),
            Field::new("epsilon", DataType::Float64, true),
            Field::new("delta", DataType::Float64, true),
            Field::new(
                "charged_at",
                DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                true,
            ),
            Field::new("query", DataType::Utf8, true),
        ]))
    }

    fn batch(status: &Status) -> Result<RecordBatch> {
        let limits = status.budget.limits();
        let remaining = status.remaining();
        let mut entry = vec!["budget", "spent", "remaining"];
        let mut epsilon = vec![
            limits.map(|l| l.0),
            Some(status.epsilon_spent),
            remaining.map(|r| r.0),
        ];
        let mut delta = vec![
            limits.map(|l| l.1),
            Some(status.delta_spent),
            remaining.map(|r| r.1),
        ];
        let mut time = vec![None, None, None];
        let mut query = vec![None, None, None];
        for h in &status.history {
            entry.push("charge");
            epsilon.push(Some(h.epsilon));
            delta.push(Some(h.delta));
            time.push(Some(h.unix_ms));
            query.push(Some(h.query.as_str()));
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(entry)),
            Arc::new(Float64Array::from(epsilon)),
            Arc::new(Float64Array::from(delta)),
            Arc::new(TimestampMillisecondArray::from(time).with_timezone("UTC")),
            Arc::new(StringArray::from(query)),
        ];
        Ok(RecordBatch::try_new(Self::schema(), columns)?)
    }
}

impl TableFunctionImpl for DpBudgetFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        if !args.exprs().is_empty() {
            return plan_err!("dp_budget takes no arguments, got {}", args.exprs().len());
        }
        let options = args
            .session()
            .config_options()
            .extensions
            .get::<DpOptions>()
            .cloned()
            .unwrap_or_default();
        let status = self.accountant.status(&options)?;
        let batch = Self::batch(&status)?;
        Ok(Arc::new(MemTable::try_new(
            Self::schema(),
            vec![vec![batch]],
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(epsilon: f64, delta: f64) -> Cost {
        Cost {
            epsilon,
            delta,
            calls: 1,
        }
    }

    #[test]
    fn budget_limits_and_messages() {
        let none = Budget {
            epsilon: None,
            delta: None,
        };
        assert_eq!(none.limits(), None);
        assert!(none.check(&cost(1e9, 0.5), (1e9, 0.5)).is_ok());

        let eps_only = Budget {
            epsilon: Some(10.0),
            delta: None,
        };
        assert_eq!(eps_only.limits(), Some((10.0, 0.0)));
        assert!(eps_only.check(&cost(0.5, 0.0), (9.5, 0.0)).is_ok());
        let err = eps_only
            .check(&cost(2.0, 0.0), (9.5, 0.0))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("dp budget exceeded: this query needs epsilon=2, delta=0; spent epsilon=9.5 of 10, delta=0 of 0 (dp.delta_budget not set); remaining epsilon=0.5, delta=0"),
            "{err}"
        );
        // A delta charge needs a delta budget.
        assert!(eps_only.check(&cost(0.1, 1e-9), (0.0, 0.0)).is_err());

        let both = Budget {
            epsilon: Some(1.0),
            delta: Some(1e-6),
        };
        // Ten charges of 0.1 (which sum to 0.9999999999999999 or 1.0000000000000002 depending
        // on order) fit a budget of 1; an eleventh does not.
        let mut spent = (0.0, 0.0);
        for _ in 0..10 {
            both.check(&cost(0.1, 1e-7), spent).unwrap();
            spent = (spent.0 + 0.1, spent.1 + 1e-7);
        }
        assert!(both.check(&cost(0.1, 0.0), spent).is_err());
        assert!(
            both.check(&cost(1e-9, 1e-7), spent).is_err(),
            "delta exhausted"
        );
    }

    #[test]
    fn grouping_sets_multiply_the_cost() {
        use datafusion::logical_expr::col;
        let keys = vec![col("a"), col("b")];
        assert_eq!(grouping_sets(&[]), 1);
        assert_eq!(grouping_sets(&keys), 1);
        assert_eq!(
            grouping_sets(&[Expr::GroupingSet(GroupingSet::Rollup(keys.clone()))]),
            3
        );
        assert_eq!(
            grouping_sets(&[Expr::GroupingSet(GroupingSet::Cube(keys.clone()))]),
            4
        );
        assert_eq!(
            grouping_sets(&[Expr::GroupingSet(GroupingSet::GroupingSets(vec![
                vec![col("a")],
                vec![col("b")],
                vec![],
            ]))]),
            3
        );
    }

    #[test]
    fn numbers_print_short() {
        assert_eq!(num(10.0 - 9.7), "0.3");
        assert_eq!(num(1e-6), "0.000001");
        assert_eq!(num(0.0), "0");
    }
}
