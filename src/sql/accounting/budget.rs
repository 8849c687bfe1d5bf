//! Privacy budget accounting: `dp.budget_measure`, `dp.epsilon_budget`, `dp.delta_budget`,
//! `dp.rho_budget`, `dp.ledger` and the `dp_budget()` table function.
//!
//! **Measures** ([`BudgetMeasure`], [`Budget`]): a budget is declared in exactly one measure,
//! chosen by its owner, and every charge is counted in it:
//! - **(ε, δ)** (`dp.budget_measure = 'epsilon_delta'`, the default): `dp.epsilon_budget` and
//!   `dp.delta_budget`, each query's `(ε, δ)` added (basic composition, Dwork, Kenthapadi,
//!   McSherry, Mironov & Naor 2006; Dwork & Roth 2014, Theorem 3.16). With only
//!   `dp.epsilon_budget` set the δ budget is 0: a **pure ε** budget.
//! - **ρ-zCDP** (`dp.budget_measure = 'zcdp'`; Bun & Steinke 2016, arXiv:1605.02065): either
//!   `dp.rho_budget = ρ`, or a target `(ε, δ)` given as `dp.epsilon_budget` and
//!   `dp.delta_budget`, converted once to the largest ρ whose guarantee meets it
//!   ([`rho_for`]: Canonne, Kamath & Steinke 2020, arXiv:2004.00010, Corollary 13, the tightest
//!   conversion known). Each query is charged its ρ ([`CallPlan::loss`]), which add (Bun &
//!   Steinke 2016, Lemma 2.3). A query with a call that has no zCDP map (the paper's local
//!   ratio methods, private group selection) is refused before it runs.
//!
//! **Adaptivity.** The analyst picks each query after seeing the answers to the earlier ones, and
//! the budget, not a fixed sequence of queries, stops them: composition must hold for privacy
//! parameters chosen adaptively. It does, as a *privacy filter*: for (ε, δ), the filter that
//! answers while `Σεᵢ ≤ ε_B` and `Σδᵢ ≤ δ_B` is `(ε_B, δ_B)`-DP (Rogers, Roth, Ullman & Vadhan
//! 2016, arXiv:1605.06432: basic composition is a valid filter); for zCDP, the filter that
//! answers while `Σρᵢ ≤ ρ_B` is `ρ_B`-zCDP (Feldman & Zrnic 2021, arXiv:2008.11193, the Rényi
//! filter, applied at every order α with budget `αρ_B`; Whitehouse, Ramdas, Rogers & Wu 2023,
//! arXiv:2203.05481, fully adaptive composition), hence `(ε, cdp_delta(ρ_B, ε))`-DP for every
//! ε. The accountant refuses a query whose charge would pass the budget, so the running total
//! never passes it (docs/privacy-analysis.md, "Budgets and composition").
//!
//! **What a query costs** ([`Cost::of_plan`]): the sum, by sequential composition, of the
//! loss of every DP aggregate call in the plan, subqueries and views included, in every
//! measure: `(ε, δ)` (δ is the call's δ when it uses the Gaussian mechanism or the
//! `smooth_sensitivity`/`ptr` method, else 0) and ρ when every call has a zCDP map. The
//! disjoint groups of one GROUP BY are one charge (parallel composition: under the replace-one
//! neighbouring relation, with one row per individual, a row is in one group); GROUPING SETS,
//! ROLLUP and CUBE put each row in one group *per grouping set*, so such a call costs
//! `k·(ε, δ)` and `k·ρ` for `k` sets. Identical calls in one SELECT, which DataFusion
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
//!   A ledger counts in one measure (its header says which): a session whose budget is in
//!   another is refused, never mixed.
//!
//! **Exact amounts** ([`crate::sql::accounting::amount`]): charges, budgets and totals are
//! whole numbers of `10^-12` of epsilon, `10^-30` of delta and `10^-12` of rho, summed in
//! `u128`. A charge is rounded up to the unit (so every query costs at least `10^-12` of
//! epsilon, and no charge is lost however large the total), a budget down; a running `f64`
//! sum lost every charge below half its last bit (issue 27).
//!
//! **Budgets** come from the session options when the query is analysed. With none set
//! nothing is enforced (charges are still recorded, in the measure); in (ε, δ) with one set,
//! the other is 0 (setting only `dp.epsilon_budget` allows pure-DP calls only). Spent = the
//! ledger's total (all processes) plus this session's charges that are not in that ledger. The
//! budget options are settings of whoever controls the session: a deployment that runs
//! untrusted SQL must stop `SET` (DataFusion's `SQLOptions::with_allow_statements(false)`).
//!
//! [`CallPlan::loss`]: crate::sql::functions::aggregate::CallPlan::loss

use crate::sql::accounting::amount::{self, DELTA_DIGITS, EPSILON_DIGITS, RHO_DIGITS};
use crate::sql::accounting::ledger::{self, unix_ms};
pub use crate::sql::accounting::measure::{Budget, BudgetMeasure};
use crate::sql::functions::aggregate::DpAggregate;
use crate::sql::options::DpOptions;
use crate::stats::mechanism::cdp_epsilon;
use arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::catalog::{MemTable, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{plan_datafusion_err, plan_err, Result};
use datafusion::logical_expr::{Expr, GroupingSet, LogicalPlan};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Exact privacy amounts in every measure the accountant keeps ([`amount`]): units of
/// `10^-12` of ε, `10^-30` of δ and `10^-12` of ρ. `rho` is `None` when some part has no zCDP
/// map, or its ρ is past `u128` (then it cannot be counted in ρ, and a zCDP budget refuses it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Units {
    pub epsilon: u128,
    pub delta: u128,
    pub rho: Option<u128>,
}

impl Default for Units {
    /// Nothing spent, in every measure.
    fn default() -> Self {
        Self {
            epsilon: 0,
            delta: 0,
            rho: Some(0),
        }
    }
}

impl Units {
    /// `self + other` in exact arithmetic: an error naming `what` when ε or δ passes `u128`
    /// (never a wrap or a saturation); ρ past it is `None` (not countable in ρ).
    fn plus(self, other: Units, what: &str) -> Result<Units> {
        Ok(Units {
            epsilon: add_units(self.epsilon, other.epsilon, &format!("epsilon {what}"))?,
            delta: add_units(self.delta, other.delta, &format!("delta {what}"))?,
            rho: self.rho.zip(other.rho).and_then(|(a, b)| a.checked_add(b)),
        })
    }
}

/// The privacy cost of one query, by sequential composition over its DP aggregate calls.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Cost {
    /// The exact cost: each call's amount rounded up to the unit, times its grouping sets,
    /// summed exactly, in every measure.
    pub units: Units,
    /// Number of bound DP aggregate calls found (each grouping set counted once per call).
    pub calls: usize,
    /// Why the query cannot be counted in ρ: its first call without a zCDP map, named
    /// (`None` when [`Units::rho`] is known).
    pub without_zcdp: Option<String>,
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
    /// The cost of every bound DP aggregate call in `plan` (see the module docs): each call's
    /// [`CallPlan::loss`](crate::sql::functions::aggregate::CallPlan::loss), in every measure,
    /// times its grouping sets.
    pub fn of_plan(plan: &LogicalPlan) -> Result<Self> {
        let mut cost = Cost::default();
        let mut failed = None;
        for_each_dp_call(plan, |dp, sets, _| {
            let Some(call) = dp.plan() else {
                return;
            };
            let name = dp.function().name();
            let loss = call.loss();
            let units = |amount: f64, digits: u32| {
                amount::charge_units(amount, digits).and_then(|u| {
                    u.checked_mul(sets as u128)
                        .ok_or_else(|| format!("{amount} x {sets} grouping sets is too large"))
                })
            };
            let (epsilon, delta) = (loss.epsilon, loss.delta);
            match (units(epsilon, EPSILON_DIGITS), units(delta, DELTA_DIGITS)) {
                (Ok(e), Ok(d)) => {
                    // ρ is counted only under a zCDP budget: one that cannot be counted makes
                    // the query's ρ unknown (refused there), never an error here.
                    let rho = match loss.rho.map(|r| units(r, RHO_DIGITS)) {
                        Some(Ok(units)) => Some(units),
                        Some(Err(e)) => {
                            cost.without_zcdp.get_or_insert_with(|| {
                                format!("{name}: its rho cannot be counted exactly ({e})")
                            });
                            None
                        }
                        None => {
                            cost.without_zcdp.get_or_insert_with(|| {
                                let why = call.without_zcdp_map().unwrap_or_else(|| {
                                    "its release has no zCDP privacy map".to_string()
                                });
                                format!("{name}: {why}")
                            });
                            None
                        }
                    };
                    let call_units = Units {
                        epsilon: e,
                        delta: d,
                        rho,
                    };
                    match cost.units.plus(call_units, "of the query") {
                        Ok(total) => cost.units = total,
                        Err(_) => {
                            failed.get_or_insert_with(|| "the query's amount".to_string());
                        }
                    }
                    if cost.units.rho.is_none() && cost.without_zcdp.is_none() {
                        cost.without_zcdp = Some(
                            "the query's rho is above the largest amount the accountant counts"
                                .to_string(),
                        );
                    }
                }
                (Err(e), _) | (_, Err(e)) => {
                    failed.get_or_insert(format!(
                        "{name}: the charge for epsilon={epsilon}, delta={delta}: {e}"
                    ));
                }
            }
            cost.calls += sets;
        })?;
        if let Some(what) = failed {
            return plan_err!("dp budget: {what} cannot be counted exactly; refusing");
        }
        Ok(cost)
    }

    /// The epsilon charged, as a number (exact to the `f64` nearest the units).
    pub fn epsilon(&self) -> f64 {
        amount::units_to_f64(self.units.epsilon, EPSILON_DIGITS)
    }

    /// The delta charged, as a number.
    pub fn delta(&self) -> f64 {
        amount::units_to_f64(self.units.delta, DELTA_DIGITS)
    }

    /// The rho of the query (zCDP), as a number: `None` when it has no zCDP map.
    pub fn rho(&self) -> Option<f64> {
        self.units
            .rho
            .map(|units| amount::units_to_f64(units, RHO_DIGITS))
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

/// A budget's limit in exact units, rounded down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    EpsilonDelta { epsilon: u128, delta: u128 },
    Zcdp { rho: u128 },
}

impl Budget {
    /// The session's budget, from its options; an error when they do not declare one budget
    /// in one measure.
    pub fn from_options(options: &DpOptions) -> Result<Self> {
        Self::new(
            options.budget_measure,
            options.epsilon_budget,
            options.delta_budget,
            options.rho_budget,
            "dp.",
        )
        .map_err(|e| plan_datafusion_err!("dp budget: {e}"))
    }

    /// The enforced limit in units (rounded down, so a converted ρ stays within its target):
    /// `None` when no budget is set.
    fn limit_units(&self) -> Option<Limit> {
        match self.measure {
            BudgetMeasure::EpsilonDelta => self.limits().map(|(e, d)| Limit::EpsilonDelta {
                epsilon: amount::budget_units(e, EPSILON_DIGITS),
                delta: amount::budget_units(d, DELTA_DIGITS),
            }),
            BudgetMeasure::Zcdp => self.rho_limit().map(|rho| Limit::Zcdp {
                rho: amount::budget_units(rho, RHO_DIGITS),
            }),
        }
    }

    /// The (ε, δ)-DP guarantee of `rho` spent under this zCDP budget: ε at the target's δ
    /// ([`cdp_epsilon`]) and that δ; `(0, 0)` when nothing is spent; `None` for a budget
    /// declared as ρ alone, which names no δ (it is `(ε, cdp_delta(ρ, ε))`-DP for every ε).
    fn zcdp_guarantee(&self, rho: f64) -> Option<(f64, f64)> {
        let (_, delta) = self.target()?;
        Some(match rho > 0.0 {
            true => (cdp_epsilon(rho, delta), delta),
            false => (0.0, 0.0),
        })
    }

    /// Refuses `cost` when `spent + cost` exceeds the limits, all in exact units: ten charges
    /// of 0.1 fit a budget of 1 exactly, and the smallest charge still counts once a large
    /// amount is spent. Under a zCDP budget, a query without a zCDP map is refused, limit or
    /// not (its charge could not be counted in ρ).
    fn check(&self, cost: &Cost, spent: &Units) -> Result<()> {
        if self.measure == BudgetMeasure::Zcdp && cost.units.rho.is_none() {
            let why = cost
                .without_zcdp
                .as_deref()
                .unwrap_or("the query has no zCDP privacy map");
            return plan_err!(
                "dp budget: {why}; this budget is in zCDP (dp.budget_measure = 'zcdp'), which counts every query in rho, so the query is refused"
            );
        }
        // A total past u128 does not fit any budget.
        let fits = |spent: u128, cost: u128, limit: u128| {
            spent.checked_add(cost).is_some_and(|total| total <= limit)
        };
        match self.limit_units() {
            None => Ok(()),
            Some(Limit::EpsilonDelta {
                epsilon: epsilon_limit,
                delta: delta_limit,
            }) => {
                if fits(spent.epsilon, cost.units.epsilon, epsilon_limit)
                    && fits(spent.delta, cost.units.delta, delta_limit)
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
                    e(cost.units.epsilon),
                    d(cost.units.delta),
                    e(spent.epsilon),
                    e(epsilon_limit),
                    unset(self.epsilon, "epsilon_budget"),
                    d(spent.delta),
                    d(delta_limit),
                    unset(self.delta, "delta_budget"),
                    e(epsilon_limit.saturating_sub(spent.epsilon)),
                    d(delta_limit.saturating_sub(spent.delta))
                )
            }
            Some(Limit::Zcdp { rho: limit }) => {
                let Some(spent_rho) = spent.rho else {
                    return plan_err!(
                        "dp budget: this budget is in zCDP (dp.budget_measure = 'zcdp'), but this session charged queries without a zCDP map before it was (they cannot be counted in rho); refusing"
                    );
                };
                let needed = cost.units.rho.unwrap_or(u128::MAX);
                if fits(spent_rho, needed, limit) {
                    return Ok(());
                }
                let r = |units: u128| amount::format_units(units, RHO_DIGITS);
                let declared = match self.target() {
                    Some((e, d)) => format!(" (converted from the target epsilon={e}, delta={d})"),
                    None => String::new(),
                };
                plan_err!(
                    "dp budget exceeded: this query needs rho={} (zCDP); spent rho={} of {}{declared}; remaining rho={}",
                    r(needed),
                    r(spent_rho),
                    r(limit),
                    r(limit.saturating_sub(spent_rho))
                )
            }
        }
    }
}

/// Where a session's charge was also written.
#[derive(Debug, Clone, PartialEq)]
struct LedgerRecord {
    identity: PathBuf,
    seq: u64,
    hash: String,
    /// The chain of the file the charge was appended to, as this process verified it
    /// ([`ledger::Mark`]).
    mark: ledger::Mark,
}

/// One charge made by this session, in exact units.
#[derive(Debug, Clone, PartialEq)]
struct SessionCharge {
    unix_ms: i64,
    units: Units,
    query: String,
    ledger: Option<LedgerRecord>,
}

/// One row of the history shown by `dp_budget()`.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEntry {
    pub unix_ms: i64,
    pub epsilon: f64,
    pub delta: f64,
    /// The charge's ρ (zCDP); `None` when it has none (a release without a zCDP map, or a
    /// line of a ledger format without ρ).
    pub rho: Option<f64>,
    pub query: String,
}

/// Budget, spent amount and history of a session, as `dp_budget()` reports them.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub budget: Budget,
    pub epsilon_spent: f64,
    pub delta_spent: f64,
    /// The ρ spent, when every charge has one.
    pub rho_spent: Option<f64>,
    /// The spent amounts exactly.
    pub spent_units: Units,
    pub history: Vec<HistoryEntry>,
}

impl Status {
    /// What is left of an (ε, δ) budget (the budget rounded down to the unit, less the exact
    /// amount spent): `None` when no (ε, δ) budget is enforced.
    pub fn remaining(&self) -> Option<(f64, f64)> {
        match self.budget.limit_units()? {
            Limit::EpsilonDelta { epsilon, delta } => Some((
                amount::units_to_f64(
                    epsilon.saturating_sub(self.spent_units.epsilon),
                    EPSILON_DIGITS,
                ),
                amount::units_to_f64(delta.saturating_sub(self.spent_units.delta), DELTA_DIGITS),
            )),
            Limit::Zcdp { .. } => None,
        }
    }

    /// What is left of a zCDP budget's ρ: `None` when no zCDP budget is enforced (or what was
    /// spent has no ρ).
    pub fn rho_remaining(&self) -> Option<f64> {
        match self.budget.limit_units()? {
            Limit::Zcdp { rho } => Some(amount::units_to_f64(
                rho.saturating_sub(self.spent_units.rho?),
                RHO_DIGITS,
            )),
            Limit::EpsilonDelta { .. } => None,
        }
    }

    /// The (ε, δ)-DP guarantee of everything spent: in (ε, δ), the sums; in zCDP, ε at the
    /// target's δ ([`cdp_epsilon`]), `None` for a budget declared as ρ alone.
    pub fn spent_guarantee(&self) -> Option<(f64, f64)> {
        match self.budget.measure {
            BudgetMeasure::EpsilonDelta => Some((self.epsilon_spent, self.delta_spent)),
            BudgetMeasure::Zcdp => self.budget.zcdp_guarantee(self.rho_spent?),
        }
    }

    /// The (ε, δ)-DP guarantee of the whole budget: the (ε, δ) budget, or a zCDP budget's
    /// target (`None` for ρ alone, or without a budget).
    pub fn budget_guarantee(&self) -> Option<(f64, f64)> {
        match self.budget.measure {
            BudgetMeasure::EpsilonDelta => self.budget.limits(),
            BudgetMeasure::Zcdp => self.budget.target(),
        }
    }
}

/// The charges `dp_budget()` shows: the latest this many, of the ledger and of the session's
/// charges not in it (its `spent` row counts them all). An analyst who sends many cheap queries
/// makes a long ledger; showing it whole would take memory in proportion.
pub const HISTORY_CHARGES: usize = 10_000;

/// The privacy accountant of one session: its charges, behind one lock (see the module docs).
#[derive(Debug, Default)]
pub struct Accountant {
    charges: Mutex<SessionCharges>,
}

/// A session's charges: the latest [`HISTORY_CHARGES`] of them, for `dp_budget()`'s history
/// (which shows no more), and what charging reads of them kept as they are made, so that a
/// charge takes the same time and the session the same memory after ten charges or ten
/// million: their sums by the ledger they were written to (`None`: none; a session names few
/// ledgers), and the last charge written to each ledger.
#[derive(Debug, Default)]
struct SessionCharges {
    /// In time order. A charge dropped from the front has [`HISTORY_CHARGES`] later ones
    /// before it in the history whatever ledger is read with it (each later one is shown, or
    /// is in that ledger, whose latest charges are as late), so the history is the same as if
    /// every charge were kept.
    each: std::collections::VecDeque<SessionCharge>,
    /// The exact sum of the charges written to each ledger (by identity), or to none; `None`
    /// past the largest amount the accountant counts.
    sums: Vec<(Option<PathBuf>, Option<Units>)>,
    /// The last charge written to each ledger.
    last_written: Vec<LedgerRecord>,
}

impl SessionCharges {
    /// Counts `charge` in; keeps it for the history unless it was written to a ledger and
    /// `keep_written` is false.
    fn push(&mut self, charge: SessionCharge, keep_written: bool) {
        let identity = charge.ledger.as_ref().map(|r| r.identity.clone());
        let at = match self.sums.iter().position(|(i, _)| *i == identity) {
            Some(at) => at,
            None => {
                self.sums.push((identity, Some(Units::default())));
                self.sums.len() - 1
            }
        };
        let sum = &mut self.sums[at].1;
        *sum = sum.and_then(|s| s.plus(charge.units, "spent").ok());
        if let Some(record) = &charge.ledger {
            match self
                .last_written
                .iter_mut()
                .find(|r| r.identity == record.identity)
            {
                Some(last) => *last = record.clone(),
                None => self.last_written.push(record.clone()),
            }
        }
        if keep_written || charge.ledger.is_none() {
            if self.each.len() == HISTORY_CHARGES {
                self.each.pop_front();
            }
            self.each.push_back(charge);
        }
    }

    /// The charges this session wrote to the ledger `identity`, as far as it keeps them (the
    /// latest [`HISTORY_CHARGES`], and the last one always).
    fn written_to<'a>(&'a self, identity: &'a Path) -> impl Iterator<Item = &'a LedgerRecord> {
        self.each
            .iter()
            .filter_map(|c| c.ledger.as_ref())
            .chain(&self.last_written)
            .filter(move |r| r.identity == identity)
    }

    /// What the session spent outside the ledger `identity` (everything without one).
    fn outside(&self, identity: Option<&Path>) -> Result<Units> {
        self.sums
            .iter()
            .filter(|(i, _)| identity.is_none() || i.as_deref() != identity)
            .try_fold(Units::default(), |total, (_, sum)| {
                let sum = sum.ok_or_else(|| {
                    plan_datafusion_err!(
                        "dp budget: the spent amount is above the largest amount the accountant counts; refusing"
                    )
                })?;
                total.plus(sum, "spent")
            })
    }

    /// [`Self::check_kept`] under a charge's lock, from `ledger` as this process verified it:
    /// the session's last charge on it is there while the file keeps the chain it was
    /// appended to ([`ledger::Ledger::holds_appended`]: nothing read). Otherwise (the file was
    /// read from its start since: replaced, shortened or edited) the file's lines at the
    /// charges this session wrote are read; the last one, when found, takes the file's new
    /// chain's mark, so the next charge reads nothing again.
    fn check_kept_in(
        &mut self,
        identity: &Path,
        path: &Path,
        ledger: &ledger::Ledger<'_>,
    ) -> Result<()> {
        let Some(at) = self
            .last_written
            .iter()
            .position(|r| r.identity == identity)
        else {
            return Ok(());
        };
        let last = &self.last_written[at];
        if ledger.holds_appended(last.seq, last.mark) == Some(true) {
            return Ok(());
        }
        let wanted: std::collections::HashSet<u64> =
            self.written_to(identity).map(|r| r.seq).collect();
        let held = ledger.hashes_at(&wanted)?;
        let holds = |seq: u64, hash: &str| held.get(&seq).is_some_and(|h| h == hash);
        if holds(last.seq, &last.hash) {
            self.last_written[at].mark = ledger.mark();
            return Ok(());
        }
        self.check_kept(identity, path, holds)
    }

    /// Refuses a ledger that lost a charge this session wrote to it (truncated, replaced,
    /// reset), `holds(seq, hash)` telling whether the ledger holds a charge. Each line's hash
    /// is chained over every line before it (`crate::sql::accounting::ledger`), so a ledger
    /// that holds the session's last charge holds every earlier one; only when it does not are
    /// the others kept looked at, to name the first one lost among them.
    fn check_kept(
        &self,
        identity: &Path,
        path: &Path,
        holds: impl Fn(u64, &str) -> bool,
    ) -> Result<()> {
        let Some(last) = self.last_written.iter().find(|r| r.identity == identity) else {
            return Ok(());
        };
        if holds(last.seq, &last.hash) {
            return Ok(());
        }
        let lost = self
            .each
            .iter()
            .filter_map(|c| c.ledger.as_ref())
            .filter(|r| r.identity == identity)
            .find(|r| !holds(r.seq, &r.hash))
            .unwrap_or(last);
        plan_err!(
            "dp.ledger '{}' no longer holds charge #{} that this session wrote (the file was truncated, replaced or reset); refusing to charge or report",
            path.display(),
            lost.seq
        )
    }
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

/// Spent amounts in units: the ledger's totals plus this session's charges not in it, summed
/// exactly (an error past `u128` in ε or δ, never a wrap).
fn spent(
    charges: &SessionCharges,
    ledger: ledger::Totals,
    identity: Option<&Path>,
) -> Result<Units> {
    let past = |what: &str| {
        plan_datafusion_err!(
            "dp budget: the {what} spent is above the largest amount the accountant counts; refusing"
        )
    };
    let in_ledger = Units {
        epsilon: ledger.epsilon_units.ok_or_else(|| past("epsilon"))?,
        delta: ledger.delta_units.ok_or_else(|| past("delta"))?,
        rho: ledger.rho_units,
    };
    in_ledger.plus(charges.outside(identity)?, "spent")
}

impl Accountant {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> Result<MutexGuard<'_, SessionCharges>> {
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
        let budget = Budget::from_options(options)?;
        // As much of the description as a ledger line keeps: it is built from the analyst's
        // own expressions, and the session keeps it for `dp_budget()`.
        let query: String = describe(plan)
            .chars()
            .take(ledger::MAX_QUERY_CHARS)
            .collect();
        let mut charges = self.lock()?;
        let mut record = None;
        if let Some(path) = options.ledger.as_deref() {
            let path = Path::new(path);
            let (mut identity, mut mark) = (PathBuf::new(), ledger::Mark::default());
            let entry = ledger::append_with(path, budget.measure, |ledger, id| {
                charges.check_kept_in(id, path, ledger)?;
                budget.check(&cost, &spent(&charges, ledger.totals(), Some(id))?)?;
                identity = id.to_path_buf();
                mark = ledger.mark();
                Ok(ledger::NewCharge {
                    unix_ms: unix_ms(),
                    epsilon_units: cost.units.epsilon,
                    delta_units: cost.units.delta,
                    rho_units: cost.units.rho,
                    query: query.clone(),
                })
            })?;
            record = Some((
                entry.unix_ms,
                LedgerRecord {
                    identity,
                    seq: entry.seq,
                    hash: entry.hash,
                    mark,
                },
            ));
        } else {
            budget.check(&cost, &spent(&charges, ledger::Totals::default(), None)?)?;
        }
        let (time, ledger) = match record {
            Some((time, record)) => (time, Some(record)),
            None => (unix_ms(), None),
        };
        // A locked session's ledger is the owner's and cannot change: its history is the
        // ledger's, so a charge written there is counted (in its sums) but not kept.
        charges.push(
            SessionCharge {
                unix_ms: time,
                units: cost.units,
                query,
                ledger,
            },
            !options.locked,
        );
        CHARGES_ON_THIS_THREAD.with(|c| c.set(c.get() + 1));
        Ok(cost)
    }

    /// The session's budget, spent amount and history (the ledger's, when `dp.ledger` is set,
    /// re-read and verified now; refused when it counts in another measure than the budget).
    pub fn status(&self, options: &DpOptions) -> Result<Status> {
        let budget = Budget::from_options(options)?;
        let charges = self.lock()?;
        // The ledger read as a stream: its totals, the hashes at the seqs this session wrote,
        // and its last `HISTORY_CHARGES` charges, so that the memory this takes is bounded
        // whatever the ledger's length.
        let (totals, recent, identity) = match options.ledger.as_deref() {
            Some(path) => {
                let path = Path::new(path);
                let identity = ledger::identity(path);
                let wanted: std::collections::HashSet<u64> =
                    charges.written_to(&identity).map(|r| r.seq).collect();
                let mut held = std::collections::HashMap::new();
                let mut totals = ledger::Totals::default();
                let mut recent = std::collections::VecDeque::new();
                let measure = ledger::for_each_entry(path, |e| {
                    totals.add(&e);
                    if wanted.contains(&e.seq) {
                        held.insert(e.seq, e.hash.clone());
                    }
                    if recent.len() == HISTORY_CHARGES {
                        recent.pop_front();
                    }
                    recent.push_back(e);
                })?;
                ledger::check_measure(path, measure, budget.measure)?;
                charges.check_kept(&identity, path, |seq, hash| {
                    held.get(&seq).is_some_and(|h| h == hash)
                })?;
                (totals, recent, Some(identity))
            }
            None => (ledger::Totals::default(), Default::default(), None),
        };
        let spent_units = spent(&charges, totals, identity.as_deref())?;
        let mut history: Vec<HistoryEntry> = recent
            .into_iter()
            .map(|e| HistoryEntry {
                unix_ms: e.unix_ms,
                epsilon: e.epsilon,
                delta: e.delta,
                rho: e.rho,
                query: e.query,
            })
            .collect();
        history.extend(
            charges
                .each
                .iter()
                .filter(|c| {
                    identity.is_none()
                        || c.ledger.as_ref().map(|r| r.identity.as_path()) != identity.as_deref()
                })
                .map(|c| HistoryEntry {
                    unix_ms: c.unix_ms,
                    epsilon: amount::units_to_f64(c.units.epsilon, EPSILON_DIGITS),
                    delta: amount::units_to_f64(c.units.delta, DELTA_DIGITS),
                    rho: c.units.rho.map(|r| amount::units_to_f64(r, RHO_DIGITS)),
                    query: c.query.clone(),
                }),
        );
        history.sort_by_key(|h| h.unix_ms);
        let shown = history.len().saturating_sub(HISTORY_CHARGES);
        history.drain(..shown);
        Ok(Status {
            budget,
            epsilon_spent: amount::units_to_f64(spent_units.epsilon, EPSILON_DIGITS),
            delta_spent: amount::units_to_f64(spent_units.delta, DELTA_DIGITS),
            rho_spent: spent_units.rho.map(|r| amount::units_to_f64(r, RHO_DIGITS)),
            spent_units,
            history,
        })
    }
}

/// `dp_budget()`: one row each for `budget`, `spent` and `remaining`, then one `charge` row per
/// charge in time order, the latest [`HISTORY_CHARGES`] (docs/sql-reference.md). A snapshot taken when the query is planned.
#[derive(Debug)]
pub struct DpBudgetFunction {
    accountant: Arc<Accountant>,
}

impl DpBudgetFunction {
    pub fn new(accountant: Arc<Accountant>) -> Self {
        Self { accountant }
    }

    /// The schema of `dp_budget()`: the first five columns as before budgets had measures,
    /// then the measure, ρ, and the (ε, δ)-DP guarantee of the budget and of what is spent.
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
            Field::new("measure", DataType::Utf8, true),
            Field::new("rho", DataType::Float64, true),
            Field::new("guarantee_epsilon", DataType::Float64, true),
            Field::new("guarantee_delta", DataType::Float64, true),
        ]))
    }

    fn batch(status: &Status) -> Result<RecordBatch> {
        let budget = &status.budget;
        let limits = budget.limits();
        let remaining = status.remaining();
        let target = budget.target();
        let mut entry = vec!["budget", "spent", "remaining"];
        let mut epsilon = vec![
            limits.or(target).map(|l| l.0),
            Some(status.epsilon_spent),
            remaining.map(|r| r.0),
        ];
        let mut delta = vec![
            limits.or(target).map(|l| l.1),
            Some(status.delta_spent),
            remaining.map(|r| r.1),
        ];
        let mut time = vec![None, None, None];
        let mut query = vec![None, None, None];
        let label = budget.label();
        let mut measure = vec![Some(label), Some(label), Some(label)];
        let mut rho = vec![budget.rho_limit(), status.rho_spent, status.rho_remaining()];
        let (spent_guarantee, budget_guarantee) =
            (status.spent_guarantee(), status.budget_guarantee());
        let mut guarantee_epsilon = vec![
            budget_guarantee.map(|g| g.0),
            spent_guarantee.map(|g| g.0),
            None,
        ];
        let mut guarantee_delta = vec![
            budget_guarantee.map(|g| g.1),
            spent_guarantee.map(|g| g.1),
            None,
        ];
        for h in &status.history {
            entry.push("charge");
            epsilon.push(Some(h.epsilon));
            delta.push(Some(h.delta));
            time.push(Some(h.unix_ms));
            query.push(Some(h.query.as_str()));
            measure.push(None);
            rho.push(h.rho);
            guarantee_epsilon.push(None);
            guarantee_delta.push(None);
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(entry)),
            Arc::new(Float64Array::from(epsilon)),
            Arc::new(Float64Array::from(delta)),
            Arc::new(TimestampMillisecondArray::from(time).with_timezone("UTC")),
            Arc::new(StringArray::from(query)),
            Arc::new(StringArray::from(measure)),
            Arc::new(Float64Array::from(rho)),
            Arc::new(Float64Array::from(guarantee_epsilon)),
            Arc::new(Float64Array::from(guarantee_delta)),
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

    #[test]
    fn a_session_counts_the_charges_it_does_not_keep() {
        // A locked session does not keep the charges written to its ledger (the ledger's
        // lines are their history), but counts them, and checks the last one is still there.
        let mut charges = SessionCharges::default();
        let units = Units {
            epsilon: 5,
            delta: 0,
            rho: Some(1),
        };
        let charge = |seq: Option<u64>| SessionCharge {
            unix_ms: 0,
            units,
            query: "q".into(),
            ledger: seq.map(|seq| LedgerRecord {
                identity: PathBuf::from("/l"),
                seq,
                hash: format!("{seq:016x}"),
                mark: ledger::Mark::default(),
            }),
        };
        for seq in [Some(1), Some(2), None] {
            charges.push(charge(seq), false);
        }
        assert_eq!(charges.each.len(), 1);
        assert_eq!(charges.outside(None).unwrap().epsilon, 15);
        assert_eq!(charges.outside(None).unwrap().rho, Some(3));
        assert_eq!(charges.outside(Some(Path::new("/l"))).unwrap().epsilon, 5);
        let check = |holds: fn(u64, &str) -> bool| {
            charges.check_kept(Path::new("/l"), Path::new("l"), holds)
        };
        assert!(check(|seq, hash| seq == 2 && hash == "0000000000000002").is_ok());
        let err = check(|_, _| false).unwrap_err().to_string();
        assert!(err.contains("no longer holds charge #2"), "{err}");
        // Kept, the first one lost is named.
        let mut kept = SessionCharges::default();
        for seq in [Some(1), Some(2)] {
            kept.push(charge(seq), true);
        }
        let err = kept
            .check_kept(Path::new("/l"), Path::new("l"), |seq, _| seq == 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("charge #2"), "{err}");
        let err = kept
            .check_kept(Path::new("/l"), Path::new("l"), |_, _| false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("charge #1"), "{err}");
        // However many charges a session makes, it keeps the latest HISTORY_CHARGES and counts
        // them all.
        let mut long = SessionCharges::default();
        for seq in 1..=HISTORY_CHARGES as u64 + 3 {
            long.push(charge(Some(seq)), true);
            long.push(charge(None), true);
        }
        assert_eq!(long.each.len(), HISTORY_CHARGES);
        assert!(long.each.back().unwrap().ledger.is_none());
        let total = 10 * (HISTORY_CHARGES as u128 + 3);
        assert_eq!(long.outside(None).unwrap().epsilon, total);
        assert_eq!(
            long.outside(Some(Path::new("/l"))).unwrap().epsilon,
            total / 2
        );
        let err = long
            .check_kept(Path::new("/l"), Path::new("l"), |seq, _| seq < 7_000)
            .unwrap_err()
            .to_string();
        assert!(err.contains("charge #7000"), "{err}");
    }

    fn cost(epsilon: f64, delta: f64) -> Cost {
        Cost {
            units: Units {
                epsilon: amount::charge_units(epsilon, EPSILON_DIGITS).unwrap(),
                delta: amount::charge_units(delta, DELTA_DIGITS).unwrap(),
                rho: None,
            },
            calls: 1,
            without_zcdp: Some("dp_x: method 'ptr' has no zCDP privacy map".to_string()),
        }
    }

    /// A cost with a ρ.
    fn cost_rho(epsilon: f64, delta: f64, rho: f64) -> Cost {
        let mut cost = cost(epsilon, delta);
        cost.units.rho = Some(amount::charge_units(rho, RHO_DIGITS).unwrap());
        cost.without_zcdp = None;
        cost
    }

    /// Spent amounts in units.
    fn spent(epsilon: f64, delta: f64) -> Units {
        cost(epsilon, delta).units
    }

    /// An (ε, δ) budget.
    fn budget(epsilon: Option<f64>, delta: Option<f64>) -> Budget {
        Budget::new(BudgetMeasure::EpsilonDelta, epsilon, delta, None, "dp.").unwrap()
    }

    /// A zCDP budget.
    fn zcdp(epsilon: Option<f64>, delta: Option<f64>, rho: Option<f64>) -> Budget {
        Budget::new(BudgetMeasure::Zcdp, epsilon, delta, rho, "dp.").unwrap()
    }

    #[test]
    fn budget_limits_and_messages() {
        let none = budget(None, None);
        assert_eq!(none.limits(), None);
        assert!(none.check(&cost(1e9, 0.5), &spent(1e9, 0.5)).is_ok());

        let eps_only = budget(Some(10.0), None);
        assert_eq!(eps_only.limits(), Some((10.0, 0.0)));
        assert!(eps_only.check(&cost(0.5, 0.0), &spent(9.5, 0.0)).is_ok());
        let err = eps_only
            .check(&cost(2.0, 0.0), &spent(9.5, 0.0))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("dp budget exceeded: this query needs epsilon=2, delta=0; spent epsilon=9.5 of 10, delta=0 of 0 (dp.delta_budget not set); remaining epsilon=0.5, delta=0"),
            "{err}"
        );
        // A delta charge needs a delta budget.
        assert!(eps_only.check(&cost(0.1, 1e-9), &spent(0.0, 0.0)).is_err());

        let both = budget(Some(1.0), Some(1e-6));
        // Ten charges of 0.1 (whose f64 sum is 0.9999999999999999 or 1.0000000000000002
        // depending on order) fill a budget of 1 exactly; an eleventh does not fit.
        let mut total = Units::default();
        for _ in 0..10 {
            both.check(&cost(0.1, 1e-7), &total).unwrap();
            total = total.plus(cost(0.1, 1e-7).units, "spent").unwrap();
        }
        assert_eq!(total, spent(1.0, 1e-6));
        assert!(both.check(&cost(0.1, 0.0), &total).is_err());
        assert!(
            both.check(&cost(1e-9, 1e-7), &total).is_err(),
            "delta exhausted"
        );
        // The smallest charge (1e-12) still counts: nothing fits once the budget is spent.
        assert!(both
            .check(&cost(1e-300, 0.0), &spent(1.0 - 1e-12, 0.0))
            .is_ok());
        assert!(both.check(&cost(1e-300, 0.0), &spent(1.0, 0.0)).is_err());
    }

    #[test]
    fn small_charges_are_not_lost_once_much_is_spent() {
        // With 999999.999999999 of 1e6 spent, the f64 sum's last bit is 1.2e-10, and the old
        // running sum dropped every charge of 5e-11: here each is 50 units, and the budget's
        // last 1e-9 holds exactly 20 of them.
        let budget = budget(Some(1e6), None);
        let mut total = spent(999_999.999_999_999, 0.0);
        let mut answered = 0;
        while budget.check(&cost(5e-11, 0.0), &total).is_ok() {
            total.epsilon += cost(5e-11, 0.0).units.epsilon;
            answered += 1;
            assert!(answered <= 20, "the budget never ran out");
        }
        assert_eq!(answered, 20);
        assert_eq!(total, spent(1e6, 0.0));
        let err = budget
            .check(&cost(5e-11, 0.0), &total)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("needs epsilon=0.00000000005, delta=0; spent epsilon=1000000 of 1000000"),
            "{err}"
        );
        // A total past u128 fits no budget; it is never wrapped.
        let past = Units {
            epsilon: u128::MAX,
            ..Units::default()
        };
        assert!(budget.check(&cost(1.0, 0.0), &past).is_err());
    }

    #[test]
    fn each_budget_is_declared_in_one_measure() {
        let new = |measure, epsilon, delta, rho| Budget::new(measure, epsilon, delta, rho, "dp.");
        use BudgetMeasure::{EpsilonDelta, Zcdp};
        // (ε, δ): today's budgets, unchanged; rho belongs to zCDP.
        assert!(new(EpsilonDelta, Some(1.0), None, None).is_ok());
        assert!(new(EpsilonDelta, None, None, None).is_ok());
        let err = new(EpsilonDelta, Some(1.0), None, Some(0.5)).unwrap_err();
        assert!(
            err.contains("dp.rho_budget is a zCDP budget, but dp.budget_measure is 'epsilon_delta': set dp.budget_measure = 'zcdp'"),
            "{err}"
        );
        // zCDP: rho, or a target (ε, δ) with δ in (0, 1), not both.
        assert!(new(Zcdp, None, None, Some(0.5)).is_ok());
        assert!(new(Zcdp, Some(10.0), Some(1e-4), None).is_ok());
        assert!(
            new(Zcdp, None, None, None).is_ok(),
            "no limit, as in (ε, δ)"
        );
        let err = new(Zcdp, Some(1.0), Some(1e-6), Some(0.5)).unwrap_err();
        assert!(err.contains("not both"), "{err}");
        for (epsilon, delta) in [
            (Some(1.0), None),
            (Some(1.0), Some(0.0)),
            (Some(1.0), Some(1.0)),
            (Some(0.0), Some(1e-6)),
            (None, Some(1e-6)),
        ] {
            let err = new(Zcdp, epsilon, delta, None).unwrap_err();
            assert!(
                err.contains("dp.epsilon_budget > 0 with dp.delta_budget in (0, 1)"),
                "{epsilon:?} {delta:?}: {err}"
            );
        }
        // The label dp_budget() shows.
        assert_eq!(budget(Some(1.0), None).label(), "epsilon");
        assert_eq!(budget(Some(1.0), Some(0.0)).label(), "epsilon");
        assert_eq!(budget(Some(1.0), Some(1e-6)).label(), "epsilon_delta");
        assert_eq!(zcdp(None, None, Some(1.0)).label(), "zcdp");
    }

    #[test]
    fn a_target_is_converted_once_to_the_largest_rho_that_meets_it() {
        // (10, 1e-4): ρ ≈ 2.1171 (the same formula evaluated on a grid of α, in privacy_map's
        // tests), rounded down to the unit, so the budget's guarantee stays within the target.
        let target = zcdp(Some(10.0), Some(1e-4), None);
        let rho = target.rho_limit().unwrap();
        assert!((2.1165..2.1176).contains(&rho), "{rho}");
        let Some(Limit::Zcdp { rho: units }) = target.limit_units() else {
            panic!("a zCDP limit")
        };
        let limit = amount::units_to_f64(units, RHO_DIGITS);
        assert!(limit <= rho && rho - limit < 1e-12, "{limit} {rho}");
        assert!(crate::stats::mechanism::cdp_delta(limit, 10.0) <= 1e-4);
        // Bun & Steinke 2016, Proposition 1.3, independent of the tighter conversion: ρ-zCDP
        // is (ρ + 2√(ρ ln(1/δ)), δ)-DP, so the ρ that meets (10, 1e-4) is at least the ρ that
        // meets it by that bound (√ρ = √(ln(1/δ) + 10) − √(ln(1/δ)), ρ ≈ 1.75).
        let l = (1.0f64 / 1e-4).ln();
        let weaker = ((l + 10.0).sqrt() - l.sqrt()).powi(2);
        assert!(weaker < rho && weaker > 1.7, "{weaker}");
        // The guarantee of what is spent, as (ε, δ): ε at the target's δ.
        let status = |rho: f64| Status {
            budget: target,
            epsilon_spent: 0.0,
            delta_spent: 0.0,
            rho_spent: Some(rho),
            spent_units: Units::default(),
            history: Vec::new(),
        };
        let (epsilon, delta) = status(limit).spent_guarantee().unwrap();
        assert!(
            (epsilon / 10.0 - 1.0).abs() < 1e-6 && epsilon <= 10.0 + 1e-9,
            "{epsilon}"
        );
        assert_eq!(delta, 1e-4);
        let (epsilon, _) = status(0.5).spent_guarantee().unwrap();
        let bound = 0.5 + 2.0 * (0.5 * l).sqrt();
        assert!(epsilon < bound && epsilon > 0.5, "{epsilon} vs {bound}");
        assert_eq!(status(0.0).spent_guarantee(), Some((0.0, 0.0)));
        assert_eq!(status(0.0).budget_guarantee(), Some((10.0, 1e-4)));
        // A budget of ρ alone names no δ: no (ε, δ) is reported for it.
        let alone = Status {
            budget: zcdp(None, None, Some(2.0)),
            ..status(1.0)
        };
        assert_eq!(alone.spent_guarantee(), None);
        assert_eq!(alone.budget_guarantee(), None);
    }

    #[test]
    fn zcdp_budgets_count_rho() {
        let budget = zcdp(None, None, Some(1.0));
        // Ten charges of ρ = 0.1 fill a budget of 1 exactly; an eleventh is refused.
        let mut total = Units::default();
        for _ in 0..10 {
            budget.check(&cost_rho(5.0, 1e-3, 0.1), &total).unwrap();
            total = total.plus(cost_rho(5.0, 1e-3, 0.1).units, "spent").unwrap();
        }
        assert_eq!(total.rho, Some(1_000_000_000_000));
        let err = budget
            .check(&cost_rho(0.1, 0.0, 0.1), &total)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("dp budget exceeded: this query needs rho=0.1 (zCDP); spent rho=1 of 1; remaining rho=0"),
            "{err}"
        );
        // Only ρ counts: ε and δ spent far past any (ε, δ) budget do not matter.
        assert_eq!(amount::units_to_f64(total.epsilon, EPSILON_DIGITS), 50.0);
        // A converted target says so.
        let target = zcdp(Some(1.0), Some(1e-6), None);
        let err = target
            .check(&cost_rho(1.0, 0.0, 1.0), &Units::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("(converted from the target epsilon=1, delta=0.000001)"),
            "{err}"
        );
        // A query without a zCDP map is refused in zCDP, limit or not, naming the call; an
        // (ε, δ) budget charges it as before.
        for refusing in [budget, zcdp(None, None, None)] {
            let err = refusing
                .check(&cost(0.1, 1e-9), &Units::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("dp_x: method 'ptr' has no zCDP privacy map; this budget is in zCDP (dp.budget_measure = 'zcdp')"),
                "{err}"
            );
        }
        let approx =
            super::Budget::new(BudgetMeasure::EpsilonDelta, Some(1.0), Some(1e-6), None, "")
                .unwrap();
        approx.check(&cost(0.1, 1e-9), &Units::default()).unwrap();
        // Spending that has no ρ (charged before the measure was zCDP) cannot be counted in it.
        let err = budget
            .check(&cost_rho(0.1, 0.0, 0.005), &spent(0.1, 0.0))
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot be counted in rho"), "{err}");
        // The smallest ρ charge is one unit: it still counts once the budget is spent.
        let full = Units {
            rho: Some(1_000_000_000_000),
            ..Units::default()
        };
        assert!(budget.check(&cost_rho(1e-300, 0.0, 1e-300), &full).is_err());
    }

    #[test]
    fn units_add_exactly() {
        let a = Units {
            epsilon: 1,
            delta: 2,
            rho: Some(3),
        };
        assert_eq!(
            a.plus(a, "spent").unwrap(),
            Units {
                epsilon: 2,
                delta: 4,
                rho: Some(6)
            }
        );
        // Past u128: ε or δ is an error; ρ is no longer countable (refused only in zCDP).
        let big = Units {
            epsilon: u128::MAX,
            ..a
        };
        let err = big.plus(a, "spent").unwrap_err().to_string();
        assert!(
            err.contains("epsilon spent is above the largest amount"),
            "{err}"
        );
        let big = Units {
            rho: Some(u128::MAX),
            ..a
        };
        assert_eq!(big.plus(a, "spent").unwrap().rho, None);
        let none = Units { rho: None, ..a };
        assert_eq!(a.plus(none, "spent").unwrap().rho, None);
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
