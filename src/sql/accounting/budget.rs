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
//! **When it is charged**: in the analyzer ([`crate::sql::privacy::pass::DpPlannerRule`]), after every
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
//! - Each session ([`crate::sql::register`]) has one [`Accountant`]; a `Mutex` makes the check and
//!   the charge one step, so concurrent queries cannot together overspend. With `dp.ledger`,
//!   an exclusive file lock extends that to every session and process sharing the file, and
//!   the charge is synced to disk before the plan is returned (see [`crate::sql::accounting::ledger`]).
//!
//! **Exact amounts** ([`crate::sql::accounting::amount`]): charges, budgets and totals are
//! whole numbers of `10^-12` of epsilon and `10^-30` of delta, summed in `u128`. A charge is
//! rounded up to the unit (so every query costs at least `10^-12` of epsilon, and no charge is
//! lost however large the total), a budget down; a running `f64` sum lost every charge below
//! half its last bit (issue 27).
//!
//! **Budgets** come from the session options when the query is analysed. With neither set
//! nothing is enforced (charges are still recorded); with one set, the other is 0 (setting
//! only `dp.epsilon_budget` allows pure-DP calls only). Spent = the ledger's total (all
//! processes) plus this session's charges that are not in that ledger. The budget options are
//! settings of whoever controls the session: a deployment that runs untrusted SQL must stop
//! `SET` (DataFusion's `SQLOptions::with_allow_statements(false)`).

use crate::sql::accounting::amount::{self, DELTA_DIGITS, EPSILON_DIGITS};
use crate::sql::accounting::ledger;
use crate::sql::functions::aggregate::DpAggregate;
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
    /// The exact cost in units of `10^-12` of epsilon and `10^-30` of delta: each call's
    /// amount rounded up to the unit, times its grouping sets, summed exactly.
    pub epsilon_units: u128,
    pub delta_units: u128,
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

/// `Some(a + b)`, or an error naming what overflowed (never a wrap or a saturation).
fn add_units(a: u128, b: u128, what: &str) -> Result<u128> {
    a.checked_add(b).ok_or_else(|| {
        plan_datafusion_err!(
            "dp budget: the {what} is above the largest amount the accountant counts; refusing"
        )
    })
}

impl Cost {
    /// The cost of every bound DP aggregate call in `plan` (see the module docs).
    pub fn of_plan(plan: &LogicalPlan) -> Result<Self> {
        let mut cost = Cost::default();
        let mut failed = None;
        for_each_dp_call(plan, |dp, sets, _| {
            if let Some(call) = dp.plan() {
                let (epsilon, delta) = call.cost();
                let units = |amount: f64, digits: u32| {
                    amount::charge_units(amount, digits).and_then(|u| {
                        u.checked_mul(sets as u128)
                            .ok_or_else(|| format!("{amount} x {sets} grouping sets is too large"))
                    })
                };
                match (units(epsilon, EPSILON_DIGITS), units(delta, DELTA_DIGITS)) {
                    (Ok(e), Ok(d)) => {
                        cost.epsilon_units =
                            cost.epsilon_units.checked_add(e).unwrap_or_else(|| {
                                failed.get_or_insert_with(|| "the query's epsilon".to_string());
                                u128::MAX
                            });
                        cost.delta_units = cost.delta_units.checked_add(d).unwrap_or_else(|| {
                            failed.get_or_insert_with(|| "the query's delta".to_string());
                            u128::MAX
                        });
                    }
                    (Err(e), _) | (_, Err(e)) => {
                        failed.get_or_insert(format!(
                            "{}: the charge for epsilon={epsilon}, delta={delta}: {e}",
                            dp.function().name()
                        ));
                    }
                }
                cost.calls += sets;
            }
        })?;
        if let Some(what) = failed {
            return plan_err!("dp budget: {what} cannot be counted exactly; refusing");
        }
        Ok(cost)
    }

    /// The epsilon charged, as a number (exact to the `f64` nearest the units).
    pub fn epsilon(&self) -> f64 {
        amount::units_to_f64(self.epsilon_units, EPSILON_DIGITS)
    }

    /// The delta charged, as a number.
    pub fn delta(&self) -> f64 {
        amount::units_to_f64(self.delta_units, DELTA_DIGITS)
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

    /// The enforced limits in units (rounded down): `None` when neither budget is set.
    pub fn limit_units(&self) -> Option<(u128, u128)> {
        self.limits().map(|(e, d)| {
            (
                amount::budget_units(e, EPSILON_DIGITS),
                amount::budget_units(d, DELTA_DIGITS),
            )
        })
    }

    /// Refuses `cost` when `spent + cost` exceeds the limits, all in exact units (`spent` in
    /// units of `10^-12` of epsilon and `10^-30` of delta): ten charges of 0.1 fit a budget of
    /// 1 exactly, and the smallest charge still counts once a large amount is spent.
    fn check(&self, cost: &Cost, spent: (u128, u128)) -> Result<()> {
        let Some((epsilon_limit, delta_limit)) = self.limit_units() else {
            return Ok(());
        };
        // A total past u128 does not fit any budget.
        let fits = |spent: u128, cost: u128, limit: u128| {
            spent.checked_add(cost).is_some_and(|total| total <= limit)
        };
        if fits(spent.0, cost.epsilon_units, epsilon_limit)
            && fits(spent.1, cost.delta_units, delta_limit)
        {
            return Ok(());
        }
        let e = |units: u128| amount::format_units(units, EPSILON_DIGITS);
        let d = |units: u128| amount::format_units(units, DELTA_DIGITS);
        let unset = |v: Option<f64>, key: &str| {
            if v.is_none() {
                format!(" (dp.{key} not set)")
            } else {
                String::new()
            }
        };
        plan_err!(
            "dp budget exceeded: this query needs epsilon={}, delta={}; spent epsilon={} of {}{}, delta={} of {}{}; remaining epsilon={}, delta={}",
            e(cost.epsilon_units),
            d(cost.delta_units),
            e(spent.0),
            e(epsilon_limit),
            unset(self.epsilon, "epsilon_budget"),
            d(spent.1),
            d(delta_limit),
            unset(self.delta, "delta_budget"),
            e(epsilon_limit.saturating_sub(spent.0)),
            d(delta_limit.saturating_sub(spent.1))
        )
    }
}

/// Where a session's charge was also written.
#[derive(Debug, Clone, PartialEq)]
struct LedgerRecord {
    identity: PathBuf,
    seq: u64,
    hash: String,
}

/// One charge made by this session, in units of `10^-12` of epsilon and `10^-30` of delta.
#[derive(Debug, Clone, PartialEq)]
struct SessionCharge {
    unix_ms: i64,
    epsilon_units: u128,
    delta_units: u128,
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
    /// The spent amounts exactly, in units of `10^-12` of epsilon and `10^-30` of delta.
    pub spent_units: (u128, u128),
    pub history: Vec<HistoryEntry>,
}

impl Status {
    /// What is left (the budget rounded down to the unit, less the exact amount spent):
    /// `None` when no budget is enforced.
    pub fn remaining(&self) -> Option<(f64, f64)> {
        self.budget.limit_units().map(|(e, d)| {
            (
                amount::units_to_f64(e.saturating_sub(self.spent_units.0), EPSILON_DIGITS),
                amount::units_to_f64(d.saturating_sub(self.spent_units.1), DELTA_DIGITS),
            )
        })
    }
}

/// The privacy accountant of one session: its charges, behind one lock (see the module docs).
#[derive(Debug, Default)]
pub struct Accountant {
    charges: Mutex<Vec<SessionCharge>>,
}

thread_local! {
    /// The charges [`Accountant::charge`] made on this thread (see [`charges_on_this_thread`]).
    static CHARGES_ON_THIS_THREAD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many charges [`Accountant::charge`] has made on the calling thread, so that planning run
/// on one thread can tell whether its query was charged before an error: DataFusion's analyzer
/// (where the charge is made) runs synchronously inside planning, and `dp-server` plans each
/// query on a thread of its own (`crate::sql::privacy::session::limits::on_planning_stack`), so a
/// failure after the charge can say that the charge is kept.
pub fn charges_on_this_thread() -> u64 {
    CHARGES_ON_THIS_THREAD.with(|c| c.get())
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

/// Spent `(epsilon, delta)` in units: the ledger's entries plus this session's charges not in
/// it, summed exactly (an error past `u128`, never a wrap).
fn spent(
    charges: &[SessionCharge],
    entries: &[ledger::Entry],
    identity: Option<&Path>,
) -> Result<(u128, u128)> {
    let mut total = (0u128, 0u128);
    let amounts = entries
        .iter()
        .map(|e| (e.epsilon_units, e.delta_units))
        .chain(
            charges
                .iter()
                .filter(|c| {
                    identity.is_none()
                        || c.ledger.as_ref().map(|r| r.identity.as_path()) != identity
                })
                .map(|c| (c.epsilon_units, c.delta_units)),
        );
    for (epsilon, delta) in amounts {
        total.0 = add_units(total.0, epsilon, "epsilon spent")?;
        total.1 = add_units(total.1, delta, "delta spent")?;
    }
    Ok(total)
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
                budget.check(&cost, spent(&charges, entries, Some(id))?)?;
                identity = id.to_path_buf();
                Ok(ledger::NewCharge {
                    unix_ms: unix_ms(),
                    epsilon_units: cost.epsilon_units,
                    delta_units: cost.delta_units,
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
            budget.check(&cost, spent(&charges, &[], None)?)?;
        }
        let (time, ledger) = match record {
            Some((time, record)) => (time, Some(record)),
            None => (unix_ms(), None),
        };
        charges.push(SessionCharge {
            unix_ms: time,
            epsilon_units: cost.epsilon_units,
            delta_units: cost.delta_units,
            query,
            ledger,
        });
        CHARGES_ON_THIS_THREAD.with(|c| c.set(c.get() + 1));
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
        let spent_units = spent(&charges, &entries, identity.as_deref())?;
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
                    epsilon: amount::units_to_f64(c.epsilon_units, EPSILON_DIGITS),
                    delta: amount::units_to_f64(c.delta_units, DELTA_DIGITS),
                    query: c.query.clone(),
                }),
        );
        history.sort_by_key(|h| h.unix_ms);
        Ok(Status {
            budget: Budget::from_options(options),
            epsilon_spent: amount::units_to_f64(spent_units.0, EPSILON_DIGITS),
            delta_spent: amount::units_to_f64(spent_units.1, DELTA_DIGITS),
            spent_units,
            history,
        })
    }
}

/// `dp_budget()`: one row each for `budget`, `spent` and `remaining`, then one `charge` row per
/// charge in time order (docs/sql-reference.md). A snapshot taken when the query is planned.
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
            epsilon_units: amount::charge_units(epsilon, EPSILON_DIGITS).unwrap(),
            delta_units: amount::charge_units(delta, DELTA_DIGITS).unwrap(),
            calls: 1,
        }
    }

    /// Spent amounts in units.
    fn spent(epsilon: f64, delta: f64) -> (u128, u128) {
        let c = cost(epsilon, delta);
        (c.epsilon_units, c.delta_units)
    }

    #[test]
    fn budget_limits_and_messages() {
        let none = Budget {
            epsilon: None,
            delta: None,
        };
        assert_eq!(none.limits(), None);
        assert!(none.check(&cost(1e9, 0.5), spent(1e9, 0.5)).is_ok());

        let eps_only = Budget {
            epsilon: Some(10.0),
            delta: None,
        };
        assert_eq!(eps_only.limits(), Some((10.0, 0.0)));
        assert!(eps_only.check(&cost(0.5, 0.0), spent(9.5, 0.0)).is_ok());
        let err = eps_only
            .check(&cost(2.0, 0.0), spent(9.5, 0.0))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("dp budget exceeded: this query needs epsilon=2, delta=0; spent epsilon=9.5 of 10, delta=0 of 0 (dp.delta_budget not set); remaining epsilon=0.5, delta=0"),
            "{err}"
        );
        // A delta charge needs a delta budget.
        assert!(eps_only.check(&cost(0.1, 1e-9), spent(0.0, 0.0)).is_err());

        let both = Budget {
            epsilon: Some(1.0),
            delta: Some(1e-6),
        };
        // Ten charges of 0.1 (whose f64 sum is 0.9999999999999999 or 1.0000000000000002
        // depending on order) fill a budget of 1 exactly; an eleventh does not fit.
        let mut total = (0, 0);
        for _ in 0..10 {
            both.check(&cost(0.1, 1e-7), total).unwrap();
            let c = cost(0.1, 1e-7);
            total = (total.0 + c.epsilon_units, total.1 + c.delta_units);
        }
        assert_eq!(total, spent(1.0, 1e-6));
        assert!(both.check(&cost(0.1, 0.0), total).is_err());
        assert!(
            both.check(&cost(1e-9, 1e-7), total).is_err(),
            "delta exhausted"
        );
        // The smallest charge (1e-12) still counts: nothing fits once the budget is spent.
        assert!(both
            .check(&cost(1e-300, 0.0), spent(1.0 - 1e-12, 0.0))
            .is_ok());
        assert!(both.check(&cost(1e-300, 0.0), spent(1.0, 0.0)).is_err());
    }

    #[test]
    fn small_charges_are_not_lost_once_much_is_spent() {
        // With 999999.999999999 of 1e6 spent, the f64 sum's last bit is 1.2e-10, and the old
        // running sum dropped every charge of 5e-11: here each is 50 units, and the budget's
        // last 1e-9 holds exactly 20 of them.
        let budget = Budget {
            epsilon: Some(1e6),
            delta: None,
        };
        let mut total = spent(999_999.999_999_999, 0.0);
        let mut answered = 0;
        while budget.check(&cost(5e-11, 0.0), total).is_ok() {
            total.0 += cost(5e-11, 0.0).epsilon_units;
            answered += 1;
            assert!(answered <= 20, "the budget never ran out");
        }
        assert_eq!(answered, 20);
        assert_eq!(total, spent(1e6, 0.0));
        let err = budget
            .check(&cost(5e-11, 0.0), total)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("needs epsilon=0.00000000005, delta=0; spent epsilon=1000000 of 1000000"),
            "{err}"
        );
        // A total past u128 fits no budget; it is never wrapped.
        assert!(budget.check(&cost(1.0, 0.0), (u128::MAX, 0)).is_err());
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
}
