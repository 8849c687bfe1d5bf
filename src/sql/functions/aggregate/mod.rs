//! The DP aggregate functions. Each is a [`DpStatistic`] (`statistic.rs`) in its own file,
//! listed in [`STATISTICS`]; all share one UDAF implementation ([`DpAggregate`]), which reads the
//! statistic's arguments, types, calibration and accumulator from it. Every accumulator keeps
//! exact per-group state, partial states carry only exact values, and noise is drawn once per
//! group in `evaluate`, after every partial state has been merged. `dp_count` and the
//! statistics of a 2x2 table ([`table`]) keep fixed exact counters per group
//! ([`accumulator::CellCounts`]).

pub mod accumulator;
pub mod clamping;
#[cfg(test)]
mod example;
pub mod reference;
pub mod statistic;
pub mod table;
pub mod wire;

/// The registry: every DP aggregate, in registration order. Registration
/// ([`crate::sql::functions::register_all`]), the wire codec, refusal messages, `dpsql`, the
/// plots and the docs check read it. A new statistic is one file (`aggregate/dp_*.rs`) and one
/// line here.
macro_rules! statistics {
    ($($module:ident :: $statistic:ident),* $(,)?) => {
        $(pub mod $module;)*
        $(pub use $module::$statistic;)*
        /// Every DP aggregate, in registration order (see the `statistics!` call).
        pub static STATISTICS: &[&dyn DpStatistic] = &[$(&$module::$statistic,)*];
    };
}

statistics! {
    dp_count::DpCount,
    dp_relative_risk::DpRelativeRisk,
    dp_rr_ci::DpRrCi,
    dp_odds_ratio::DpOddsRatio,
    dp_or_ci::DpOrCi,
    dp_risk_difference::DpRiskDifference,
    dp_rd_ci::DpRdCi,
    dp_sum::DpSum,
    dp_avg::DpAvg,
    dp_quantile::DpQuantile,
}

/// The statistic called `name` in SQL.
pub fn statistic_named(name: &str) -> Option<&'static dyn DpStatistic> {
    STATISTICS.iter().copied().find(|s| s.name() == name)
}

/// The documentation DataFusion sees for `statistic` ([`DpStatistic::documentation`]), its
/// related functions read from both sides: those it declares and those of the registry that
/// declare it ([`statistic::StatisticDoc::related`]), in registration order.
pub fn documentation(statistic: &dyn DpStatistic) -> Documentation {
    let mut documentation = statistic.documentation();
    let name = statistic.name();
    let declares = |by: &dyn DpStatistic, of: &str| by.doc().related.iter().any(|r| r.name() == of);
    let related: Vec<String> = STATISTICS
        .iter()
        .filter(|s| declares(statistic, s.name()) || declares(**s, name))
        .map(|s| s.name().to_string())
        .collect();
    documentation.related_udfs = (!related.is_empty()).then_some(related);
    documentation
}

pub use dp_count::CountRelease;
pub use statistic::Release;

use crate::sql::options::DpOptions;
use crate::stats::mechanism::{short_number, CountNoise, GroupSelection, PrivacyLoss, MAX_EPSILON};
use crate::stats::Contribution;
use accumulator::SingleGroup;
use arrow::datatypes::{DataType, Field, FieldRef, SchemaRef};
use datafusion::common::{internal_err, plan_datafusion_err, plan_err, Result, ScalarValue};
use datafusion::logical_expr::expr::AggregateFunctionParams;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::udaf_default_display_name;
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, GroupsAccumulator, Signature,
    Volatility,
};
use datafusion::physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
use datafusion::physical_expr::expressions::Literal;
use statistic::{ArgKind, Call, DpStatistic};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Taken once, when a physical plan is made from a bound call: one charge, one release
/// ([`crate::sql::privacy::exec::release`]). Compares equal to any other ticket: it is not part of
/// what a call computes.
#[derive(Debug, Clone, Default)]
pub struct ReleaseTicket(Arc<AtomicBool>);

impl ReleaseTicket {
    /// Takes the ticket; `false` if it was taken before.
    pub fn take(&self) -> bool {
        !self.0.swap(true, Ordering::SeqCst)
    }

    /// Whether the ticket was taken.
    pub fn taken(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Puts the ticket back after a physical plan that cannot run was made from its call
    /// (`EXPLAIN` without `ANALYZE`: [`crate::sql::privacy::exec::release::untaken_tickets`]).
    pub fn put_back(&self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl PartialEq for ReleaseTicket {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Everything one aggregate call needs at run time, resolved and validated at planning.
#[derive(Debug, Clone, PartialEq)]
pub struct CallPlan {
    pub epsilon: f64,
    pub options: DpOptions,
    pub release: Release,
    /// Names the call in the seeded (non-private) noise derivation.
    pub stream: String,
    /// The statistic's constant arguments (clamping bounds), as [`Call::constants`].
    pub constants: Vec<ScalarValue>,
    /// Number of arguments the user wrote (data, epsilon, optional options string).
    pub user_args: usize,
    /// Trailing group-key arguments added by the planner rule in seeded mode.
    pub key_args: usize,
    /// Whether the call is in a GROUP BY (its calibration depends on it).
    pub grouped: bool,
    /// What one person can contribute to the aggregated input, derived from the plan by
    /// [`crate::sql::privacy::plan::analysis`]; the calibration is for this bound.
    pub contribution: Contribution,
    /// Set on the hidden count of private group selection: its threshold, whose map states
    /// the `δ` the selection spends ([`GroupSelection::loss`]).
    pub selection: Option<GroupSelection>,
    /// Taken when a physical plan is made from this bound call: one charge, one release
    /// ([`crate::sql::privacy::exec::release`]).
    pub ticket: ReleaseTicket,
}

impl CallPlan {
    /// Validates a call's constant arguments against the session options and calibrates its
    /// noise ([`DpStatistic::calibrate`]). `constants` are the values of the statistic's
    /// [`ArgKind::Constant`] arguments (`None`: not a constant). Errors name the function and
    /// the argument.
    #[allow(clippy::too_many_arguments)]
    pub fn resolve(
        function: &'static dyn DpStatistic,
        session: &DpOptions,
        constants: &[Option<ScalarValue>],
        epsilon: Option<&ScalarValue>,
        call_options: Option<&ScalarValue>,
        stream: String,
        user_args: usize,
        key_args: usize,
        grouped: bool,
        contribution: Contribution,
    ) -> Result<Self> {
        let name = function.name();
        let epsilon = match epsilon {
            Some(v) if !v.is_null() => match v.cast_to(&DataType::Float64) {
                Ok(ScalarValue::Float64(Some(e))) => e,
                _ => return plan_err!("{name}: argument 'epsilon' must be a number, got {v}"),
            },
            _ => {
                return plan_err!(
                    "{name}: argument 'epsilon' must be a constant number (a literal such as 1.0)"
                )
            }
        };
        if !(epsilon.is_finite() && epsilon > 0.0) {
            return plan_err!(
                "{name}: argument 'epsilon' must be a finite number > 0, got {epsilon}"
            );
        }
        if epsilon > MAX_EPSILON {
            return plan_err!(
                "{name}: argument 'epsilon' must be at most 2^40 = {MAX_EPSILON:e}, got {}",
                short_number(epsilon)
            );
        }
        let options = match call_options {
            None => session.clone(),
            Some(v) => match v {
                ScalarValue::Utf8(Some(s))
                | ScalarValue::LargeUtf8(Some(s))
                | ScalarValue::Utf8View(Some(s)) => session
                    .with_call_options(s, function.option_keys())
                    .map_err(|e| plan_datafusion_err!("{name}: argument 'options': {e}"))?,
                other => {
                    return plan_err!(
                        "{name}: argument 'options' must be a constant string of key=value pairs, got {other}"
                    )
                }
            },
        };
        if options.require_secure && options.seed.is_some() {
            return plan_err!("{name}: dp.require_secure is on, but dp.seed (non-private) is set");
        }
        let constant_args = function
            .args()
            .iter()
            .filter(|a| a.kind == ArgKind::Constant);
        let constants = constant_args
            .enumerate()
            .map(|(i, arg)| {
                statistic::normalise_constant(
                    name,
                    arg.name,
                    constants.get(i).and_then(|c| c.as_ref()),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        // The plan's contribution bound (crate::stats::contribution): a person adds at most
        // `rows` rows to each of at most `groups` groups, so each group's release gets
        // (ε/groups, δ/groups) at sensitivity `rows` and the whole GROUP BY still costs (ε, δ).
        let Contribution { rows, groups } = contribution;
        if rows == 0 || groups == 0 || (!grouped && groups != 1) {
            return plan_err!("{name}: invalid contribution bound ({contribution})");
        }
        let release = function.calibrate(&Call {
            name,
            epsilon,
            options: &options,
            constants: &constants,
            grouped,
            contribution,
            share: 1.0,
        })?;
        Ok(Self {
            epsilon,
            options,
            release,
            stream,
            constants,
            user_args,
            key_args,
            grouped,
            contribution,
            selection: None,
            ticket: ReleaseTicket::default(),
        })
    }
}

impl CallPlan {
    /// What the call spends, `(ε, δ)`: δ only where its release uses it (the Gaussian
    /// mechanism, smooth sensitivity, PTR, private group selection). Budget accounting charges
    /// exactly this.
    pub fn cost(&self) -> (f64, f64) {
        let loss = self.loss();
        (loss.epsilon, loss.delta)
    }

    /// Why the call has no zCDP privacy map (its [`Self::loss`] has `rho: None`), in words for
    /// the refusal of a budget in zCDP: private group selection, or its release's own reason
    /// ([`StatisticNoise::without_zcdp_map`](statistic::StatisticNoise::without_zcdp_map));
    /// `None` when it has one.
    pub fn without_zcdp_map(&self) -> Option<String> {
        if self.selection.is_some() {
            return Some(
                "private group selection (dp.selection_epsilon, dp.selection_delta) has no zCDP privacy map: its delta is the chance that a group of one unit is released, not a bound on a Renyi divergence; declare the GROUP BY keys public (dp.public_groups)"
                    .to_string(),
            );
        }
        self.release.without_zcdp_map()
    }

    /// What the call spends in every measure: its release's privacy map
    /// ([`StatisticNoise::loss`](statistic::StatisticNoise::loss)), through private group
    /// selection's map when it is the selection's count ([`GroupSelection::loss`]: the
    /// threshold's `δ` added, no zCDP map).
    pub fn loss(&self) -> PrivacyLoss {
        let loss = self.release.loss();
        match &self.selection {
            None => loss,
            Some(selection) => selection.loss(loss),
        }
    }

    /// Makes this call (a grouped `dp_count` of rows, calibrated with Laplace noise) private
    /// group selection's count at `δ`: returns the release threshold.
    pub fn select_groups(&mut self, delta: f64) -> Result<i64> {
        self.selection = Some(
            self.group_selection(|noise, k, g| GroupSelection::calibrate(noise, k, g, delta))?,
        );
        Ok(self.selection.as_ref().expect("just set").threshold)
    }

    /// [`Self::select_groups`] with the threshold a plan was bound with (decoded from the wire).
    pub fn select_groups_at(&mut self, threshold: i64) -> Result<()> {
        self.selection = Some(self.group_selection(|noise, k, g| {
            GroupSelection::with_threshold(noise, k, g, threshold)
        })?);
        Ok(())
    }

    fn group_selection(
        &self,
        make: impl FnOnce(&CountNoise, u32, u32) -> std::result::Result<GroupSelection, String>,
    ) -> Result<GroupSelection> {
        let CountRelease(noise) = self
            .release
            .noise::<CountRelease>("private group selection")?;
        let Contribution { rows, groups } = self.contribution;
        make(noise, rows, groups).map_err(|e| plan_datafusion_err!("private group selection: {e}"))
    }
}

/// The UDAF behind every DP aggregate (each [`DpStatistic`] of [`STATISTICS`]). Registered
/// unconfigured; the planner rule ([`crate::sql::privacy::pass::DpPlannerRule`]) swaps in a
/// configured copy per call carrying the session options, the calibrated noise and, in seeded
/// mode, the group keys.
#[derive(Debug)]
pub struct DpAggregate {
    function: &'static dyn DpStatistic,
    signature: Signature,
    /// The statistic's [`documentation`], which `information_schema` and `SHOW FUNCTIONS` read:
    /// made when first asked for, not for every call decoded from the wire.
    documentation: Arc<OnceLock<Documentation>>,
    plan: Option<Arc<CallPlan>>,
}

impl PartialEq for DpAggregate {
    fn eq(&self, other: &Self) -> bool {
        self.function.name() == other.function.name() && self.plan == other.plan
    }
}

impl Eq for DpAggregate {}

impl Hash for DpAggregate {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.function.name().hash(state);
        if let Some(plan) = &self.plan {
            plan.stream.hash(state);
            plan.epsilon.to_bits().hash(state);
        }
    }
}

impl DpAggregate {
    pub fn new(function: &'static dyn DpStatistic) -> Self {
        Self {
            function,
            signature: Signature::user_defined(Volatility::Volatile),
            documentation: Arc::default(),
            plan: None,
        }
    }

    pub fn function(&self) -> &'static dyn DpStatistic {
        self.function
    }

    pub fn plan(&self) -> Option<&Arc<CallPlan>> {
        self.plan.as_ref()
    }

    /// A copy of this function configured for one call.
    pub fn configured(&self, plan: CallPlan) -> Self {
        Self {
            function: self.function,
            signature: self.signature.clone(),
            documentation: Arc::clone(&self.documentation),
            plan: Some(Arc::new(plan)),
        }
    }

    /// The call's plan: the one fixed by the planner rule, or (when the rule is not installed)
    /// one resolved from the literal arguments and default options, without a seed.
    fn call_plan(&self, args: &AccumulatorArgs) -> Result<Arc<CallPlan>> {
        let name = self.function.name();
        if args.is_distinct {
            return plan_err!("{name}: DISTINCT is not supported (each row counts once)");
        }
        if let Some(plan) = &self.plan {
            return Ok(Arc::clone(plan));
        }
        let literal = |i: usize| -> Option<ScalarValue> {
            args.exprs
                .get(i)
                .and_then(|e| e.downcast_ref::<Literal>())
                .map(|l| l.value().clone())
        };
        let data = self.function.args();
        let constants: Vec<Option<ScalarValue>> = data
            .iter()
            .enumerate()
            .filter(|(_, a)| a.kind == ArgKind::Constant)
            .map(|(i, _)| literal(i))
            .collect();
        let eps_index = data.len();
        let options = (args.exprs.len() > eps_index + 1)
            .then(|| {
                literal(eps_index + 1).ok_or_else(|| {
                    plan_datafusion_err!("{name}: argument 'options' must be a constant string")
                })
            })
            .transpose()?;
        CallPlan::resolve(
            self.function,
            &DpOptions::default(),
            &constants,
            literal(eps_index).as_ref(),
            options.as_ref(),
            args.name.to_string(),
            args.exprs.len(),
            0,
            false,
            Contribution::ONE_ROW,
        )
        .map(Arc::new)
    }

    /// The argument types of a call (coerced; group keys last in seeded mode).
    fn arg_types(args: &AccumulatorArgs) -> Result<Vec<DataType>> {
        args.exprs
            .iter()
            .map(|e| e.data_type(args.schema))
            .collect()
    }

    /// A bound call's physical expression without its constant arguments (the statistic's
    /// constants, ε and the options string), which its [`CallPlan`] already holds: an
    /// aggregation evaluates every argument into a batch-sized array, so each constant would
    /// be copied once per row. Keeps the arguments up to the statistic's last data argument and
    /// the group keys (seeded mode), and the expression's name and display, so `EXPLAIN` and
    /// the output schema do not change. `None` when there is nothing to drop, the call is not
    /// bound, or a dropped argument is not a literal.
    pub fn without_constant_args(
        expr: &AggregateFunctionExpr,
        input_schema: &SchemaRef,
    ) -> Result<Option<AggregateFunctionExpr>> {
        let Some(dp) = expr.fun().inner().downcast_ref::<DpAggregate>() else {
            return Ok(None);
        };
        let Some(plan) = &dp.plan else {
            return Ok(None);
        };
        let args = expr.expressions();
        // Up to the last argument that is not a constant: the accumulators read their data
        // columns by position.
        let data = dp
            .function
            .args()
            .iter()
            .rposition(|a| a.kind != ArgKind::Constant)
            .map_or(0, |last| last + 1);
        let keys = args.len().saturating_sub(plan.key_args);
        if data == 0 || keys <= data {
            return Ok(None);
        }
        if !args[data..keys]
            .iter()
            .all(|a| a.downcast_ref::<Literal>().is_some())
        {
            return Ok(None);
        }
        let kept: Vec<_> = args[..data].iter().chain(&args[keys..]).cloned().collect();
        let mut builder = AggregateExprBuilder::new(Arc::new(expr.fun().clone()), kept)
            .schema(Arc::clone(input_schema))
            .alias(expr.name())
            .order_by(expr.order_bys().to_vec())
            .with_ignore_nulls(expr.ignore_nulls())
            .with_distinct(expr.is_distinct())
            .with_reversed(expr.is_reversed());
        if let Some(display) = expr.human_display() {
            builder = builder.human_display(display);
        }
        if let Some(alias) = expr.human_display_alias() {
            builder = builder.human_display_alias(alias);
        }
        let trimmed = builder.build()?;
        if trimmed.field() != expr.field() {
            return internal_err!(
                "{}: the call without its constant arguments returns {}, not {}",
                dp.function.name(),
                trimmed.field(),
                expr.field()
            );
        }
        Ok(Some(trimmed))
    }

    /// Wraps this implementation as a DataFusion `AggregateUDF`.
    pub fn udaf(function: &'static dyn DpStatistic) -> Arc<AggregateUDF> {
        Arc::new(AggregateUDF::new_from_impl(Self::new(function)))
    }
}

impl AggregateUDFImpl for DpAggregate {
    fn name(&self) -> &str {
        self.function.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// The statistic's own documentation ([`documentation`]).
    fn documentation(&self) -> Option<&Documentation> {
        Some(
            self.documentation
                .get_or_init(|| documentation(self.function)),
        )
    }

    /// `EXPLAIN` shows a bound call with the contribution bound its noise is calibrated for
    /// (column names, from `schema_name`, are unchanged).
    fn display_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        let call = udaf_default_display_name(self, params)?;
        Ok(match &self.plan {
            Some(plan) => format!("{call} [epsilon={}, {}]", plan.epsilon, plan.contribution),
            None => call,
        })
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let name = self.function.name();
        let data = self.function.args();
        let key_args = self.plan.as_ref().map_or(0, |p| p.key_args);
        let user = arg_types.len().saturating_sub(key_args);
        if user < data.len() + 1 || user > data.len() + 2 {
            let names: Vec<&str> = data.iter().map(|a| a.name).collect();
            return plan_err!(
                "{name} takes {} or {} arguments ({}, epsilon [, options]), got {user}",
                data.len() + 1,
                data.len() + 2,
                names.join(", ")
            );
        }
        let mut coerced = self.function.coerce(&arg_types[..data.len()])?;
        for (i, t) in arg_types.iter().enumerate().skip(data.len()) {
            coerced.push(if i == data.len() {
                if t.is_numeric() || t.is_null() {
                    DataType::Float64
                } else {
                    return plan_err!("{name}: argument 'epsilon' must be a number, got {t}");
                }
            } else if i == data.len() + 1 && i < user {
                match t {
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
                    other => {
                        return plan_err!(
                            "{name}: argument 'options' must be a string of key=value pairs, got {other}"
                        )
                    }
                }
            } else {
                // A group key (seeded mode).
                t.clone()
            });
        }
        Ok(coerced)
    }

    /// From the statistic's own arguments' types (the constants may have been dropped:
    /// [`DpAggregate::without_constant_args`]; the group keys come last).
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let key_args = self.plan.as_ref().map_or(0, |p| p.key_args);
        let data = self
            .function
            .args()
            .len()
            .min(arg_types.len().saturating_sub(key_args));
        self.function.return_type(&arg_types[..data])
    }

    fn is_nullable(&self) -> bool {
        self.function.is_nullable()
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let mut fields: Vec<FieldRef> = self
            .function
            .state()
            .into_iter()
            .map(|(label, data_type)| {
                Arc::new(Field::new(
                    format_state_name(args.name, label),
                    data_type,
                    false,
                ))
            })
            .collect();
        if self.plan.as_ref().is_some_and(|p| p.key_args > 0) {
            fields.push(Arc::new(Field::new(
                format_state_name(args.name, "group_key"),
                DataType::UInt64,
                true,
            )));
        }
        Ok(fields)
    }

    fn accumulator(&self, acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let plan = self.call_plan(&acc_args)?;
        let types = Self::arg_types(&acc_args)?;
        let inner = self.function.accumulator(plan, &types)?;
        Ok(Box::new(SingleGroup::new(
            self.function.name(),
            inner,
            &types,
        )))
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.is_distinct
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        let plan = self.call_plan(&args)?;
        let types = Self::arg_types(&args)?;
        Ok(self.function.accumulator(plan, &types)?)
    }
}
