//! The contract of a DP statistic: what one new file implements to add a DP aggregate.
//!
//! [`DpAggregate`](super::DpAggregate) is the one `AggregateUDF` behind every DP aggregate; it
//! reads everything function-specific from a [`DpStatistic`]: the name and arguments
//! ([`DpStatistic::args`]), the per-call option keys, the argument and return types, the
//! calibration of one call's noise from the contribution bound the planner proved
//! ([`DpStatistic::calibrate`]), the exact per-group state and the accumulator that adds the
//! noise once per group after merging, and its reference text ([`DpStatistic::doc`]), from
//! which its DataFusion [`Documentation`] is derived ([`DpStatistic::documentation`]). The
//! registry ([`super::STATISTICS`]) lists every statistic; registration, the wire codec,
//! refusal messages, `dpsql` and `docs/sql-reference.md` read it.

use super::CallPlan;
use crate::sql::options::DpOptions;
use crate::stats::mechanism::{check_count_epsilon, short_number, PrivacyLoss, ReleaseShape};
use crate::stats::{Contribution, RatioStatistic};
use arrow::datatypes::DataType;
use datafusion::common::{
    internal_datafusion_err, plan_datafusion_err, plan_err, Result, ScalarValue,
};
use datafusion::logical_expr::{DocSection, Documentation, GroupsAccumulator};
use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

/// What an argument before `epsilon` is, which sets its type coercion and, for
/// [`ArgKind::Constant`], that the planner reads it as a literal and passes it to
/// [`DpStatistic::calibrate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    /// A column of any type; a row counts when it is not NULL.
    Value,
    /// A BOOLEAN condition.
    Condition,
    /// A numeric column: integers become `Int64`, other numbers `Float64`.
    Number,
    /// A numeric literal fixed at planning (a clamping bound): part of the calibration.
    Constant,
}

impl ArgKind {
    /// What an argument of this kind is, as the function reference opens its description.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Value => "Expression of any type",
            Self::Condition => "BOOLEAN expression",
            Self::Number => "Numeric expression",
            Self::Constant => "Numeric literal",
        }
    }
}

/// One argument before `epsilon`: its name in messages and docs, its kind, and what it is
/// (the function reference's text, after [`ArgKind::describe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arg {
    pub name: &'static str,
    pub kind: ArgKind,
    pub description: &'static str,
}

impl Arg {
    pub const fn new(name: &'static str, kind: ArgKind, description: &'static str) -> Self {
        Self {
            name,
            kind,
            description,
        }
    }
}

/// A statistic's reference text, written in its own file ([`DpStatistic::doc`]). The rest of
/// its documentation (syntax, arguments, options) is derived from what it declares
/// ([`DpStatistic::documentation`]), and `docs/sql-reference.md`'s section on it is rendered
/// from the result ([`super::reference`]).
#[derive(Debug, Clone, Copy)]
pub struct StatisticDoc {
    /// One sentence: what the function releases. `dpsql`'s `\df` shows it.
    pub summary: &'static str,
    /// The rest, Markdown blocks in order: the guarantee with the claim it rests on, the
    /// method, what the options change, what is refused.
    pub details: &'static [&'static str],
    /// A query that calls the function.
    pub sql_example: &'static str,
    /// Statistics of the registry to read with this one (their types, re-exported by the
    /// registry, so that a function's SQL name is written only in its own file and the
    /// registry). A relation is declared by one side and shown on both
    /// ([`super::documentation`]).
    pub related: &'static [&'static dyn DpStatistic],
}

/// The section of every DP aggregate's [`Documentation`].
pub const DOC_SECTION: DocSection = DocSection {
    include: true,
    label: "Differentially private aggregate functions",
    description: Some(
        "Each takes its privacy parameter `epsilon` as a constant and an optional options string.",
    ),
};

/// What the reference says of `epsilon`, every statistic's argument after its own.
const EPSILON: &str = "Numeric literal. The privacy parameter ε > 0 the call spends (at most 2^40 ≈ 1.1e12); the guarantee says how it is split between groups and counts.";

/// One DP aggregate. Implement it in one file (`aggregate/dp_*.rs`), documentation included
/// ([`DpStatistic::doc`]), and add one line to [`super::STATISTICS`]; then regenerate
/// `docs/sql-reference.md` ([`super::reference`]: a test says how).
/// The statistics of one 2x2 table implement [`super::table::TableStatistic`] instead, which
/// gives them this trait.
pub trait DpStatistic: Debug + Send + Sync + 'static {
    /// The SQL name, `dp_*`.
    fn name(&self) -> &'static str;

    /// The arguments before `epsilon` (then `epsilon` and an optional options string follow).
    fn args(&self) -> &'static [Arg];

    /// Keys accepted in the per-call options string (each a per-call option of
    /// `crate::sql::options::OPTIONS`; a test checks).
    fn option_keys(&self) -> &'static [&'static str];

    /// The SQL type of the result as `docs/sql-reference.md` and `dpsql` show it (`BIGINT`,
    /// `DOUBLE`, `STRUCT`, or which of them for which arguments).
    fn returns(&self) -> &'static str;

    /// The call's syntax, `name(args, epsilon [, options])`, from the declared arguments
    /// ([`Self::args`]).
    fn syntax(&self) -> String {
        let args: Vec<&str> = self.args().iter().map(|a| a.name).collect();
        format!("{}({}, epsilon [, options])", self.name(), args.join(", "))
    }

    /// The SQL signature, as `dpsql` and the Python binding show it: [`Self::syntax`] and
    /// [`Self::returns`].
    fn signature(&self) -> String {
        format!("{} -> {}", self.syntax(), self.returns())
    }

    /// The function's reference text ([`StatisticDoc`]): what it releases, its guarantee,
    /// method and refusals, an example and related functions.
    fn doc(&self) -> StatisticDoc;

    /// The function's documentation as DataFusion's `AggregateUDFImpl::documentation` returns
    /// it: [`Self::doc`]'s text, with the syntax and the arguments derived from the declared
    /// arguments ([`Self::args`], then `epsilon` and `options` with [`Self::option_keys`]).
    /// Related functions are those it declares ([`super::documentation`] adds the reverse).
    fn documentation(&self) -> Documentation {
        let doc = self.doc();
        let description = std::iter::once(doc.summary)
            .chain(doc.details.iter().copied())
            .collect::<Vec<_>>()
            .join("\n\n");
        let mut builder = Documentation::builder(DOC_SECTION, description, self.syntax())
            .with_sql_example(format!("```sql\n{}\n```", doc.sql_example.trim_end()));
        for arg in self.args() {
            let text = format!("{}. {}", arg.kind.describe(), arg.description);
            builder = builder.with_argument(arg.name, text);
        }
        let keys: Vec<String> = self
            .option_keys()
            .iter()
            .map(|k| format!("`{k}`"))
            .collect();
        builder = builder.with_argument("epsilon", EPSILON).with_argument(
            "options",
            format!(
                "Optional string literal. `key=value` pairs (comma or space separated) that override the `dp.*` session options for this call; keys: {}.",
                keys.join(", ")
            ),
        );
        for related in doc.related {
            builder = builder.with_related_udf(related.name());
        }
        builder.build()
    }

    /// The statistic whose interval the result is (a struct with `estimate`, `lower` and
    /// `upper`), for a forest plot's axis; `None` for any other result.
    fn interval(&self) -> Option<RatioStatistic> {
        None
    }

    /// The types the arguments before `epsilon` are coerced to (by default from their kinds).
    fn coerce(&self, types: &[DataType]) -> Result<Vec<DataType>> {
        coerce_by_kind(self.name(), self.args(), types)
    }

    /// The result type, from the coerced types of the arguments before `epsilon`.
    fn return_type(&self, types: &[DataType]) -> Result<DataType>;

    /// Whether a result can be NULL.
    fn is_nullable(&self) -> bool {
        true
    }

    /// Calibrates one call's noise for the contribution bound the planner proved: the one
    /// privacy-relevant function of a statistic, run once per call at planning (and again,
    /// from the same inputs, where a bound call is decoded from the wire).
    fn calibrate(&self, call: &Call<'_>) -> Result<Release>;

    /// Labels and types of the exact per-group state shipped from partial to final
    /// aggregation (the seeded group-key column is added after them).
    fn state(&self) -> Vec<(&'static str, DataType)>;

    /// The accumulator of a bound call: exact per-group state, noise once per group in
    /// `evaluate` after every partial state is merged. `types` are the argument types
    /// (coerced; group keys last in seeded mode).
    fn accumulator(&self, plan: Arc<CallPlan>, types: &[DataType]) -> Result<StatisticAccumulator>;
}

/// A statistic's accumulator (`Sync` so that it also serves as the one-group `Accumulator`).
pub type StatisticAccumulator = Box<dyn GroupsAccumulator + Sync>;

/// The calibrated noise of a statistic ([`DpStatistic::calibrate`]): it states what it spends;
/// its accumulator reads it back with [`Release::noise`]. Equality and downcasting come with
/// any `PartialEq` type ([`NoiseAny`]).
pub trait StatisticNoise: Debug + Send + Sync + NoiseAny {
    /// What the call's release costs, from its calibrated noise's privacy map
    /// ([`crate::stats::mechanism::NoiseMechanism::loss`]); budget accounting charges exactly
    /// this.
    fn loss(&self) -> PrivacyLoss;

    /// Why its loss has no zCDP map (`rho: None`), for the refusal of a budget in zCDP, which
    /// names the function before it (e.g. `method 'ptr' has no zCDP privacy map ...`); `None`
    /// when it has one.
    fn without_zcdp_map(&self) -> Option<String> {
        self.loss()
            .rho
            .is_none()
            .then(|| "its release has no zCDP privacy map".to_string())
    }
}

/// Downcasting and equality of a [`StatisticNoise`] behind `dyn` (a bound call compares equal
/// after a wire round trip); implemented for every `PartialEq` type.
pub trait NoiseAny: Any {
    fn as_any(&self) -> &dyn Any;
    fn same_as(&self, other: &dyn Any) -> bool;
}

impl<T: Any + PartialEq> NoiseAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn same_as(&self, other: &dyn Any) -> bool {
        other.downcast_ref::<T>() == Some(self)
    }
}

/// The calibrated noise of one call, fixed once per query: the statistic's own
/// [`StatisticNoise`].
#[derive(Debug, Clone)]
pub struct Release(Arc<dyn StatisticNoise>);

impl Release {
    pub fn new(noise: impl StatisticNoise) -> Self {
        Self(Arc::new(noise))
    }

    /// The noise as the statistic `name`'s own type `T`; an internal error if the call was
    /// bound to another statistic's calibration.
    pub fn noise<T: StatisticNoise>(&self, name: &str) -> Result<&T> {
        self.0.as_any().downcast_ref::<T>().ok_or_else(|| {
            internal_datafusion_err!("{name}: bound to another statistic's calibration")
        })
    }

    /// What the call's release costs ([`StatisticNoise::loss`]).
    pub fn loss(&self) -> PrivacyLoss {
        self.0.loss()
    }

    /// Why the release has no zCDP map ([`StatisticNoise::without_zcdp_map`]).
    pub fn without_zcdp_map(&self) -> Option<String> {
        self.0.without_zcdp_map()
    }
}

impl PartialEq for Release {
    fn eq(&self, other: &Self) -> bool {
        self.0.same_as(other.0.as_any())
    }
}

/// What [`DpStatistic::calibrate`] reads: the validated `ε`, the call's options, its constant
/// arguments and the plan's contribution bound.
#[derive(Debug)]
pub struct Call<'a> {
    pub name: &'static str,
    pub epsilon: f64,
    pub options: &'a DpOptions,
    /// The [`ArgKind::Constant`] arguments, in order: `Int64` for integer literals,
    /// `Float64` for every other number.
    pub constants: &'a [ScalarValue],
    pub grouped: bool,
    pub contribution: Contribution,
    /// The share of the call's `(ε, δ)` this calibration spends: 1, or ½ for each half of
    /// `dp_avg`.
    pub share: f64,
}

impl Call<'_> {
    /// The shape of the release ([`ReleaseShape`]): a replaced unit moves at most `sides`
    /// values in each of at most `max_groups_per_unit` groups (the plan's contribution
    /// bound), each by at most `sensitivity`. The one place the L1/L2 shape of a call is
    /// derived from the plan's bound (docs/privacy-analysis.md, "Vector releases").
    pub fn shape(&self, sides: u32, sensitivity: u32) -> Result<ReleaseShape> {
        let name = self.name;
        let coordinates = sides.checked_mul(self.contribution.groups).ok_or_else(|| {
            plan_datafusion_err!(
                "{name}: max_groups_per_unit = {} is too large to calibrate",
                self.contribution.groups
            )
        })?;
        Ok(ReleaseShape::new(coordinates, sensitivity))
    }

    /// The constant argument at `i` (of [`ArgKind::Constant`]) as a finite number; an error
    /// naming the function and the argument `arg` otherwise.
    pub fn number(&self, i: usize, arg: &str) -> Result<f64> {
        let name = self.name;
        match self.constants.get(i) {
            Some(ScalarValue::Float64(Some(v))) if v.is_finite() => Ok(*v),
            Some(ScalarValue::Int64(Some(v))) => Ok(*v as f64),
            Some(other) => {
                plan_err!("{name}: argument '{arg}' must be a finite number, got {other}")
            }
            None => plan_err!("{name}: argument '{arg}' is missing"),
        }
    }

    /// Checks the epsilon (and delta) each noised count of sensitivity `rows` is calibrated
    /// for per value, `share·ε / max_groups_per_unit / sides`, so that a refusal names the argument and the split (the
    /// calibration checks the same values again): a scale past `MAX_NOISE_SCALE` let the noise
    /// wrap the integer it is added in (issue 27).
    pub fn check_split(&self, sides: f64, side_name: &str) -> Result<()> {
        let name = self.name;
        let Contribution { rows, groups } = self.contribution;
        let options = self.options;
        let mut split = String::new();
        if groups > 1 {
            split.push_str(&format!(" / {groups} (max_groups_per_unit)"));
        }
        if sides > 1.0 {
            split.push_str(&format!(" / 2 ({side_name})"));
        }
        let per_value = self.share / (groups as f64 * sides);
        let per_count = self.epsilon * per_value;
        let with = if split.is_empty() {
            String::new()
        } else {
            format!("with epsilon{split}, ")
        };
        check_count_epsilon(options.mechanism, per_count, rows).map_err(|e| {
            plan_datafusion_err!(
                "{name}: argument 'epsilon'={} is out of range: {with}{e}",
                short_number(self.epsilon)
            )
        })?;
        if options.mechanism.law().needs_delta() {
            if let Some(delta) = options.delta.map(|d| d * per_value) {
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
    }
}

/// The default coercion of the arguments before `epsilon`, from their kinds; errors name the
/// function and the argument.
pub fn coerce_by_kind(name: &str, args: &[Arg], types: &[DataType]) -> Result<Vec<DataType>> {
    args.iter()
        .zip(types)
        .map(|(arg, t)| {
            let arg_name = arg.name;
            Ok(match arg.kind {
                ArgKind::Value => t.clone(),
                ArgKind::Condition => match t {
                    DataType::Boolean | DataType::Null => DataType::Boolean,
                    other => {
                        return plan_err!(
                            "{name}: argument '{arg_name}' must be BOOLEAN, got {other} (write a condition such as {arg_name} = 1)"
                        )
                    }
                },
                ArgKind::Number | ArgKind::Constant => {
                    if t.is_integer() {
                        DataType::Int64
                    } else if t.is_numeric() || t.is_null() {
                        DataType::Float64
                    } else {
                        return plan_err!("{name}: argument '{arg_name}' must be a number, got {t}");
                    }
                }
            })
        })
        .collect()
}

/// A constant argument as planned: `Int64` for an integer literal, `Float64` for any other
/// number; an error naming the function and the argument for anything else.
pub(crate) fn normalise_constant(
    name: &str,
    arg: &str,
    value: Option<&ScalarValue>,
) -> Result<ScalarValue> {
    let value = match value {
        Some(v) if !v.is_null() => v,
        _ => {
            return plan_err!(
                "{name}: argument '{arg}' must be a constant number (a literal such as 10)"
            )
        }
    };
    let target = if value.data_type().is_integer() {
        DataType::Int64
    } else {
        DataType::Float64
    };
    match value.cast_to(&target) {
        Ok(v @ (ScalarValue::Int64(Some(_)) | ScalarValue::Float64(Some(_)))) => Ok(v),
        _ => plan_err!("{name}: argument '{arg}' must be a number, got {value}"),
    }
}
