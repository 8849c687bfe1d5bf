//! The DP aggregate functions. All of them share one UDAF implementation ([`DpAggregate`]) and
//! one `GroupsAccumulator` ([`accumulator::CellCounts`]): each group keeps exact cell counts
//! in flat vectors, partial states carry only exact counts, and noise is drawn once per group
//! in `evaluate`, after every partial state has been merged.

pub mod accumulator;
pub mod dp_count;
pub mod dp_odds_ratio;
pub mod dp_or_ci;
pub mod dp_rd_ci;
pub mod dp_relative_risk;
pub mod dp_risk_difference;
pub mod dp_rr_ci;
pub mod wire;

use crate::sql::options::DpOptions;
use crate::stats::mechanism::{check_count_epsilon, short_number, RealLaplace, MAX_EPSILON};
use crate::stats::{
    Contribution, CountNoise, GroupSizes, IntervalMethod, Mechanism, RatioMethod, RatioStatistic,
    TableNoise,
};
use accumulator::{CellCounts, SingleGroup};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{plan_datafusion_err, plan_err, Result, ScalarValue};
use datafusion::logical_expr::expr::AggregateFunctionParams;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::udaf_default_display_name;
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, GroupsAccumulator, Signature, Volatility,
};
use datafusion::physical_expr::expressions::Literal;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Which DP aggregate a [`DpAggregate`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DpFunction {
    Count,
    RelativeRisk,
    RrCi,
    OddsRatio,
    OrCi,
    RiskDifference,
    RdCi,
}

impl DpFunction {
    /// Every DP aggregate, in registration order: the one list that registration
    /// ([`crate::sql::functions::register_all`]), the wire codec, refusal messages and the
    /// docs check read.
    pub const ALL: [DpFunction; 7] = [
        DpFunction::Count,
        DpFunction::RelativeRisk,
        DpFunction::RrCi,
        DpFunction::OddsRatio,
        DpFunction::OrCi,
        DpFunction::RiskDifference,
        DpFunction::RdCi,
    ];

    /// The function's place in [`Self::ALL`]. Exhaustive, so a new variant does not compile
    /// until it has a place (and `ALL` grows to hold it); checked by a test.
    #[cfg(test)]
    pub(crate) const fn position(self) -> usize {
        match self {
            Self::Count => 0,
            Self::RelativeRisk => 1,
            Self::RrCi => 2,
            Self::OddsRatio => 3,
            Self::OrCi => 4,
            Self::RiskDifference => 5,
            Self::RdCi => 6,
        }
    }

    /// The function called `name` in SQL.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Count => "dp_count",
            Self::RelativeRisk => "dp_relative_risk",
            Self::RrCi => "dp_rr_ci",
            Self::OddsRatio => "dp_odds_ratio",
            Self::OrCi => "dp_or_ci",
            Self::RiskDifference => "dp_risk_difference",
            Self::RdCi => "dp_rd_ci",
        }
    }

    /// Names of the data arguments, before `epsilon`.
    pub fn data_args(self) -> &'static [&'static str] {
        match self {
            Self::Count => &["expr"],
            _ => &["outcome", "exposed"],
        }
    }

    /// Keys accepted in the per-call options string.
    pub fn option_keys(self) -> &'static [&'static str] {
        const TABLE: &[&str] = &["mechanism", "delta", "gaussian_calibration", "group_sizes"];
        const INTERVAL: &[&str] = &[
            "mechanism",
            "delta",
            "gaussian_calibration",
            "group_sizes",
            "confidence",
            "ci_method",
            "method",
        ];
        // The risk difference has no `method`: the paper's other methods release a ratio.
        const DIFFERENCE_INTERVAL: &[&str] = &[
            "mechanism",
            "delta",
            "gaussian_calibration",
            "group_sizes",
            "confidence",
            "ci_method",
        ];
        match self {
            Self::Count => &["mechanism", "delta", "gaussian_calibration"],
            Self::RelativeRisk => &[
                "mechanism",
                "delta",
                "gaussian_calibration",
                "group_sizes",
                "method",
                "bias_correction",
                "ptr_bound",
            ],
            Self::OddsRatio | Self::RiskDifference => TABLE,
            Self::RrCi | Self::OrCi => INTERVAL,
            Self::RdCi => DIFFERENCE_INTERVAL,
        }
    }

    /// Exact counters kept per group: one count, or the four cells of a 2x2 table.
    pub fn cells(self) -> usize {
        match self {
            Self::Count => 1,
            _ => 4,
        }
    }

    /// The ratio a table function releases.
    pub fn statistic(self) -> Option<RatioStatistic> {
        match self {
            Self::Count => None,
            Self::RelativeRisk | Self::RrCi => Some(RatioStatistic::RelativeRisk),
            Self::OddsRatio | Self::OrCi => Some(RatioStatistic::OddsRatio),
            Self::RiskDifference | Self::RdCi => Some(RatioStatistic::RiskDifference),
        }
    }

    /// Whether the function releases an interval struct.
    pub fn has_interval(self) -> bool {
        matches!(self, Self::RrCi | Self::OrCi | Self::RdCi)
    }

    fn return_type(self) -> DataType {
        match self {
            Self::Count => DataType::Int64,
            Self::RelativeRisk | Self::OddsRatio | Self::RiskDifference => DataType::Float64,
            Self::RrCi | Self::OrCi | Self::RdCi => dp_rr_ci::return_type(),
        }
    }

    fn epsilon_index(self) -> usize {
        self.data_args().len()
    }
}

/// The calibrated noise of one call, fixed once per query.
#[derive(Debug, Clone, PartialEq)]
pub enum Release {
    Count(CountNoise),
    Table {
        noise: TableNoise,
        confidence: f64,
        method: IntervalMethod,
    },
    /// One of the paper's other ratio methods (public group sizes; no interval).
    LocalRatio {
        method: RatioMethod,
        epsilon: f64,
        delta: Option<f64>,
        bias_correction: bool,
        ptr_bound: Option<f64>,
    },
}

/// Taken once, when a physical plan is made from a bound call: one charge, one release
/// ([`crate::sql::privacy::release`]). Compares equal to any other ticket: it is not part of
/// what a call computes.
#[derive(Debug, Clone, Default)]
pub struct ReleaseTicket(Arc<AtomicBool>);

impl ReleaseTicket {
    /// Takes the ticket; `false` if it was taken before.
    pub fn take(&self) -> bool {
        !self.0.swap(true, Ordering::SeqCst)
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
    /// Number of arguments the user wrote (data, epsilon, optional options string).
    pub user_args: usize,
    /// Trailing group-key arguments added by the planner rule in seeded mode.
    pub key_args: usize,
    /// Whether the call is in a GROUP BY (its calibration depends on it).
    pub grouped: bool,
    /// What one person can contribute to the aggregated input, derived from the plan by
    /// [`crate::sql::privacy::analysis`]; the calibration is for this bound.
    pub contribution: Contribution,
    /// Set on the hidden count of private group selection: the δ it spends.
    pub selection_delta: Option<f64>,
    /// Taken when a physical plan is made from this bound call: one charge, one release
    /// ([`crate::sql::privacy::release`]).
    pub ticket: ReleaseTicket,
}

impl CallPlan {
    /// Validates a call's constant arguments against the session options and calibrates its
    /// noise. Errors name the function and the argument.
    #[allow(clippy::too_many_arguments)]
    pub fn resolve(
        function: DpFunction,
        session: &DpOptions,
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
        let calibration_error = |e: String| plan_datafusion_err!("{name}: {e}");
        // The plan's contribution bound (crate::stats::contribution): a person adds at most
        // `rows` rows to each of at most `groups` groups, so each group's release gets
        // (ε/groups, δ/groups) at sensitivity `rows` and the whole GROUP BY still costs (ε, δ).
        let Contribution { rows, groups } = contribution;
        if rows == 0 || groups == 0 || (!grouped && groups != 1) {
            return plan_err!("{name}: invalid contribution bound ({contribution})");
        }
        let group_epsilon = epsilon / groups as f64;
        let group_delta = options.delta.map(|d| d / groups as f64);
        // The epsilon (and delta) each noised count is calibrated for, from the call's by the
        // splits below, checked here so that the refusal names the argument and the split
        // (the calibration checks the same values again): a scale past MAX_NOISE_SCALE let the
        // noise wrap the integer it is added in (issue 27).
        let check_split = |sides: f64, side_name: &str| -> Result<()> {
            let mut split = String::new();
            if groups > 1 {
                split.push_str(&format!(" / {groups} (max_groups_per_unit)"));
            }
            if sides > 1.0 {
                split.push_str(&format!(" / 2 ({side_name})"));
            }
            let per_count = group_epsilon / sides;
            let with = if split.is_empty() {
                String::new()
            } else {
                format!("with epsilon{split}, ")
            };
            check_count_epsilon(options.mechanism, per_count, rows).map_err(|e| {
                plan_datafusion_err!(
                    "{name}: argument 'epsilon'={} is out of range: {with}{e}",
                    short_number(epsilon)
                )
            })?;
            if options.mechanism == Mechanism::Gaussian {
                if let Some(delta) = group_delta.map(|d| d / sides) {
                    if delta.is_nan() || delta < f64::MIN_POSITIVE {
                        return plan_err!(
                            "{name}: argument 'delta'={} is out of range: {}delta per noised count is {}, below the smallest supported {:e}",
                            short_number(options.delta.unwrap_or(0.0)),
                            with.replace("epsilon", "delta"),
                            short_number(delta),
                            f64::MIN_POSITIVE
                        );
                    }
                }
            }
            Ok(())
        };
        let release = match function {
            // Replace-one neighbours: replacing a unit can remove its rows from up to `groups`
            // groups and add rows to up to `groups` others, so a grouped count changes in up to
            // twice as many groups: (ε/2, δ/2) per group keeps the GROUP BY at (ε, δ). (The
            // 2x2 table's per-cell (ε/2, δ/2) covers the same two sides.) Without GROUP BY
            // the one count changes by at most `rows`.
            DpFunction::Count => {
                let sides = if grouped { 2.0 } else { 1.0 };
                check_split(sides, "both sides of a replaced unit in a GROUP BY")?;
                Release::Count(
                    CountNoise::calibrate(
                        options.mechanism,
                        group_epsilon / sides,
                        group_delta.map(|d| d / sides),
                        rows,
                        options.gaussian_calibration,
                    )
                    .map_err(calibration_error)?,
                )
            }
            // `method` is dp_relative_risk's (and refused by the interval functions that accept
            // the key); the other table functions ignore the session's setting.
            _ if function.option_keys().contains(&"method")
                && options.method != RatioMethod::NoisyCounts =>
            {
                if (rows, groups) != (1, 1) {
                    return plan_err!(
                        "{name}: method '{}' supports one row per unit in one group only (max_rows_per_unit = max_groups_per_unit = 1)",
                        options.method
                    );
                }
                local_release(function, &options, epsilon)?
            }
            _ => {
                // The method asked for, or the statistic's own default interval.
                let method = options.ci_method.unwrap_or_else(|| {
                    function
                        .statistic()
                        .map_or(IntervalMethod::Conservative, IntervalMethod::default_for)
                });
                if let Some(statistic) = function.statistic().filter(|_| function.has_interval()) {
                    method
                        .check_statistic(statistic)
                        .map_err(|e| plan_datafusion_err!("{name}: {e}"))?;
                }
                check_split(2.0, "each cell of the 2x2 table")?;
                Release::Table {
                    noise: TableNoise::calibrate_for_unit(
                        options.mechanism,
                        group_epsilon,
                        group_delta,
                        options.gaussian_calibration,
                        options.group_sizes,
                        rows,
                    )
                    .map_err(calibration_error)?,
                    confidence: options.confidence,
                    method,
                }
            }
        };
        Ok(Self {
            epsilon,
            options,
            release,
            stream,
            user_args,
            key_args,
            grouped,
            contribution,
            selection_delta: None,
            ticket: ReleaseTicket::default(),
        })
    }
}

/// Validates a call that uses one of the paper's local or naive ratio methods.
fn local_release(function: DpFunction, options: &DpOptions, epsilon: f64) -> Result<Release> {
    let name = function.name();
    let method = options.method;
    if function.has_interval() {
        return plan_err!(
            "{name}: method '{method}' releases no interval (only noisy_counts does; the other methods do not estimate the variance, paper Appendix C)"
        );
    }
    if options.group_sizes != GroupSizes::Public {
        return plan_err!(
            "{name}: method '{method}' uses the exact group sizes; declare them public with group_sizes=public"
        );
    }
    let needs_delta = matches!(method, RatioMethod::SmoothSensitivity | RatioMethod::Ptr);
    if needs_delta && options.delta.is_none() {
        return plan_err!("{name}: method '{method}' needs delta (set dp.delta or pass delta=...)");
    }
    if method == RatioMethod::Ptr && options.ptr_bound.is_none() {
        return plan_err!(
            "{name}: method 'ptr' needs ptr_bound=<proposed bound on the local sensitivity>"
        );
    }
    // Each method's Laplace noise is calibrated for ε (PTR: ε/2 for each of its two steps):
    // the same range as a count's noise, checked here at the smallest sensitivity the method
    // uses (the release checks its own, from the public sizes, again).
    let per_step = if method == RatioMethod::Ptr {
        epsilon / 2.0
    } else {
        epsilon
    };
    // Its real-valued release's sensitivity is at least ln 2 (NoisedLog's), ptr_bound for PTR.
    let smallest_sensitivity = match method {
        RatioMethod::Ptr => options.ptr_bound.unwrap_or(1.0),
        _ => std::f64::consts::LN_2,
    };
    check_count_epsilon(Mechanism::Laplace, per_step, 1)
        .and_then(|()| RealLaplace::calibrate(per_step, smallest_sensitivity).map(|_| ()))
        .map_err(|e| {
            plan_datafusion_err!(
                "{name}: argument 'epsilon'={} is out of range for method '{method}': {e}",
                short_number(epsilon)
            )
        })?;
    if method == RatioMethod::NoisedLog && options.bias_correction {
        crate::stats::methods::noised_log_bias_correction(epsilon)
            .map_err(|e| plan_datafusion_err!("{name}: {e}"))?;
    }
    Ok(Release::LocalRatio {
        method,
        epsilon,
        delta: needs_delta.then_some(options.delta).flatten(),
        bias_correction: options.bias_correction,
        ptr_bound: options.ptr_bound,
    })
}

impl CallPlan {
    /// What the call spends, `(ε, δ)`: δ only where its release uses it (the Gaussian
    /// mechanism, smooth sensitivity, PTR, private group selection). Budget accounting charges
    /// exactly this.
    pub fn cost(&self) -> (f64, f64) {
        // The calibrated noise's own mechanism states what it spends.
        let (epsilon, delta) = match &self.release {
            Release::Count(noise)
            | Release::Table {
                noise: TableNoise { cell: noise, .. },
                ..
            } => noise.mechanism.cost(self.epsilon, self.options.delta),
            Release::LocalRatio { delta, .. } => (self.epsilon, delta.unwrap_or(0.0)),
        };
        (epsilon, delta + self.selection_delta.unwrap_or(0.0))
    }
}

/// The UDAF behind every DP aggregate (`dp_count`, `dp_relative_risk`, `dp_rr_ci`,
/// `dp_odds_ratio`, `dp_or_ci`, `dp_risk_difference`, `dp_rd_ci`). Registered unconfigured;
/// the planner rule ([`crate::sql::privacy::rule::DpPlannerRule`]) swaps in a configured copy per call
/// carrying the session options, the calibrated noise and, in seeded mode, the group keys.
#[derive(Debug)]
pub struct DpAggregate {
    function: DpFunction,
    signature: Signature,
    plan: Option<Arc<CallPlan>>,
}

impl PartialEq for DpAggregate {
    fn eq(&self, other: &Self) -> bool {
        self.function == other.function && self.plan == other.plan
    }
}

impl Eq for DpAggregate {}

impl Hash for DpAggregate {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.function.hash(state);
        if let Some(plan) = &self.plan {
            plan.stream.hash(state);
            plan.epsilon.to_bits().hash(state);
        }
    }
}

impl DpAggregate {
    pub fn new(function: DpFunction) -> Self {
        Self {
            function,
            signature: Signature::user_defined(Volatility::Volatile),
            plan: None,
        }
    }

    pub fn function(&self) -> DpFunction {
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
        let eps_index = self.function.epsilon_index();
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

    /// Wraps this implementation as a DataFusion `AggregateUDF`.
    pub fn udaf(function: DpFunction) -> Arc<AggregateUDF> {
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
        let data = self.function.data_args();
        let key_args = self.plan.as_ref().map_or(0, |p| p.key_args);
        let user = arg_types.len().saturating_sub(key_args);
        if user < data.len() + 1 || user > data.len() + 2 {
            return plan_err!(
                "{name} takes {} arguments ({}, epsilon [, options]), got {user}",
                if data.len() == 1 { "2 or 3" } else { "3 or 4" },
                data.join(", ")
            );
        }
        let mut coerced = Vec::with_capacity(arg_types.len());
        for (i, t) in arg_types.iter().enumerate() {
            let arg = if i < data.len() {
                data[i]
            } else if i == data.len() {
                "epsilon"
            } else if i == data.len() + 1 && i < user {
                "options"
            } else {
                "group key"
            };
            coerced.push(match arg {
                "expr" | "group key" => t.clone(),
                "outcome" | "exposed" => match t {
                    DataType::Boolean | DataType::Null => DataType::Boolean,
                    other => {
                        return plan_err!(
                            "{name}: argument '{arg}' must be BOOLEAN, got {other} (write a condition such as {arg} = 1)"
                        )
                    }
                },
                "epsilon" => {
                    if t.is_numeric() || t.is_null() {
                        DataType::Float64
                    } else {
                        return plan_err!("{name}: argument 'epsilon' must be a number, got {t}");
                    }
                }
                _ => match t {
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
                    other => {
                        return plan_err!(
                            "{name}: argument 'options' must be a string of key=value pairs, got {other}"
                        )
                    }
                },
            });
        }
        Ok(coerced)
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(self.function.return_type())
    }

    fn is_nullable(&self) -> bool {
        // dp_count is never NULL; the ratios are NULL only with public group sizes (or PTR's FAIL).
        self.function != DpFunction::Count
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let cells = ["a", "b", "c", "d"];
        let mut fields: Vec<FieldRef> = (0..self.function.cells())
            .map(|i| {
                let label = if self.function.cells() == 1 {
                    "count".to_string()
                } else {
                    format!("cell_{}", cells[i])
                };
                Arc::new(Field::new(
                    format_state_name(args.name, &label),
                    DataType::UInt64,
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
        Ok(Box::new(SingleGroup::new(CellCounts::new(
            self.function,
            plan,
        ))))
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.is_distinct
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        let plan = self.call_plan(&args)?;
        Ok(Box::new(CellCounts::new(self.function, plan)))
    }
}
