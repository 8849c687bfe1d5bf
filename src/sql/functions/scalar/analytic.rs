//! The paper's analytic tools as scalar SQL functions of their (public) arguments: accuracy,
//! bias, Gaussian calibration and privacy-budget planning (for the interval a 2x2 table's
//! interval statistic releases by default, or the `ci_method` asked for). They read no
//! private data, cost no privacy, and adapt [`crate::stats::accuracy`] and
//! [`crate::stats::mechanism`] row by row. Planning (`epsilon_for_half_width`) plans for the
//! noise the release would draw, so it starts from the session's `dp.*` options (DataFusion
//! passes them to the function, also when it folds a constant call at planning), not from the
//! defaults.
//! NULL in any argument gives NULL; where a closed form is undefined (e.g. `alpha >= Z`) the
//! result is NULL; invalid parameters are an error naming the function and the argument.

use crate::sql::options::DpOptions;
use crate::stats::mechanism::{
    analytic_gaussian_sigma, classic_gaussian_sigma, GaussianCalibration,
};
use crate::stats::{accuracy, bias, planning, IntervalMethod, RatioStatistic};
use arrow::array::{Array, AsArray, Float64Builder};
use arrow::datatypes::{DataType, Float64Type};
use datafusion::common::{exec_err, plan_err, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use std::sync::Arc;

/// A row's result from its DOUBLE arguments, its options string and the session's `dp.*`
/// options (the defaults that per-call options override).
type Formula = fn(&[f64], Option<&str>, &DpOptions) -> std::result::Result<Option<f64>, String>;

/// One analytic function: DOUBLE arguments, an optional trailing options string.
#[derive(Debug)]
pub struct AnalyticFunction {
    name: &'static str,
    args: &'static [&'static str],
    /// Name of the optional trailing string argument, if any.
    options: Option<&'static str>,
    formula: Formula,
    signature: Signature,
}

impl PartialEq for AnalyticFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for AnalyticFunction {}

impl std::hash::Hash for AnalyticFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl AnalyticFunction {
    fn udf(
        name: &'static str,
        args: &'static [&'static str],
        options: Option<&'static str>,
        formula: Formula,
    ) -> ScalarUDF {
        Self::with_volatility(name, args, options, formula, Volatility::Immutable)
    }

    /// A function whose result also depends on the session's `dp.*` options: `Stable` (the
    /// same within a query, folded at planning with the session's options then, but not
    /// across a `SET`).
    fn session_dependent(
        name: &'static str,
        args: &'static [&'static str],
        options: Option<&'static str>,
        formula: Formula,
    ) -> ScalarUDF {
        Self::with_volatility(name, args, options, formula, Volatility::Stable)
    }

    fn with_volatility(
        name: &'static str,
        args: &'static [&'static str],
        options: Option<&'static str>,
        formula: Formula,
        volatility: Volatility,
    ) -> ScalarUDF {
        ScalarUDF::new_from_impl(Self {
            name,
            args,
            options,
            formula,
            signature: Signature::user_defined(volatility),
        })
    }
}

impl ScalarUDFImpl for AnalyticFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let (name, n) = (self.name, self.args.len());
        let max = n + self.options.is_some() as usize;
        if arg_types.len() < n || arg_types.len() > max {
            let mut all: Vec<String> = self.args.iter().map(|a| a.to_string()).collect();
            if let Some(o) = self.options {
                all.push(format!("[{o}]"));
            }
            return plan_err!(
                "{name} takes arguments ({}), got {}",
                all.join(", "),
                arg_types.len()
            );
        }
        arg_types
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if i < n {
                    if t.is_numeric() || t.is_null() {
                        Ok(DataType::Float64)
                    } else {
                        plan_err!(
                            "{name}: argument '{}' must be a number, got {t}",
                            self.args[i]
                        )
                    }
                } else {
                    match t {
                        DataType::Utf8
                        | DataType::LargeUtf8
                        | DataType::Utf8View
                        | DataType::Null => Ok(DataType::Utf8),
                        other => plan_err!(
                            "{name}: argument '{}' must be a string, got {other}",
                            self.options.unwrap_or("options")
                        ),
                    }
                }
            })
            .collect()
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let n = self.args.len();
        let numbers: Vec<_> = arrays[..n]
            .iter()
            .map(|a| a.as_primitive::<Float64Type>())
            .collect();
        let options = arrays.get(n).map(|a| a.as_string::<i32>());
        // The session's options, as `SET dp.*` left them (the defaults outside a DP session).
        let defaults;
        let session = match args.config_options.extensions.get::<DpOptions>() {
            Some(options) => options,
            None => {
                defaults = DpOptions::default();
                &defaults
            }
        };
        let mut out = Float64Builder::with_capacity(rows);
        let mut values = vec![0.0; n];
        for row in 0..rows {
            if numbers.iter().any(|a| a.is_null(row)) || options.is_some_and(|o| o.is_null(row)) {
                out.append_null();
                continue;
            }
            for (v, a) in values.iter_mut().zip(&numbers) {
                *v = a.value(row);
            }
            match (self.formula)(&values, options.map(|o| o.value(row)), session) {
                Ok(v) => out.append_option(v),
                Err(e) => return exec_err!("{}: {e}", self.name),
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// `epsilon_for_half_width`: plans for the noise the release would draw, so its defaults are
/// the session's (`dp.mechanism`, `dp.delta`, `dp.confidence`, `dp.group_sizes`,
/// `dp.ci_method`, `dp.gaussian_calibration`), overridden by the call's options.
fn planning(
    values: &[f64],
    options: Option<&str>,
    session: &DpOptions,
) -> std::result::Result<Option<f64>, String> {
    // Planning reads no data and releases nothing: in a locked session the owner's options
    // (`group_sizes`) are only what is planned for, so a call may still name them.
    let mut session = session.clone();
    session.locked = false;
    // `statistic` is this function's own option (the release functions are one per statistic);
    // the rest are session options overridden for the call.
    let (options, own) = session.with_call_options_and_own(
        options.unwrap_or(""),
        &[
            "confidence",
            "mechanism",
            "delta",
            "group_sizes",
            "ci_method",
            "gaussian_calibration",
        ],
        &["statistic"],
    )?;
    let statistic = match own.last() {
        Some((_, name)) => RatioStatistic::parse(name)?,
        None => RatioStatistic::RelativeRisk,
    };
    let design = planning::StudyDesign {
        n_x: values[0],
        n_y: values[1],
        p_x: values[2],
        p_y: values[3],
    };
    planning::epsilon_for_half_width(
        design,
        values[4],
        planning::PlannedRelease {
            statistic,
            method: options
                .ci_method
                .unwrap_or(IntervalMethod::default_for(statistic)),
            confidence: options.confidence,
            mechanism: options.mechanism,
            delta: options.delta,
            calibration: options.gaussian_calibration,
            sizes: options.group_sizes,
        },
    )
}

/// `gaussian_sigma(ε, δ, Δ [, calibration])`: the continuous `σ` of the Gaussian mechanism for
/// ONE value of sensitivity `Δ`. For one value the analytic and the per-cell calibrations are
/// the same (Balle & Wang 2018, Theorem 8: `per_cell` splits `(ε, δ)` over the values a unit
/// moves, and one value is not split), so `'per_cell'` is accepted and gives the analytic `σ`;
/// `'classic'` is Dwork & Roth 2014, Theorem A.1 (`ε < 1`). A release of `m` values (a 2x2
/// table's two moved cells) is planned by the caller: per cell,
/// `gaussian_sigma(ε/m, δ/m, Δ, 'per_cell')`; as one vector (`analytic`, `m = 2`),
/// `gaussian_sigma(ε, δ, Δ·√m)`. The session's calibration is not read: the argument is the
/// question asked.
fn gaussian_sigma(
    values: &[f64],
    calibration: Option<&str>,
    _session: &DpOptions,
) -> std::result::Result<Option<f64>, String> {
    let calibration = GaussianCalibration::parse(calibration.unwrap_or("analytic"))?;
    let sensitivity = values[2];
    match calibration {
        GaussianCalibration::Analytic | GaussianCalibration::PerCell => {
            analytic_gaussian_sigma(values[0], values[1], sensitivity)
        }
        GaussianCalibration::Classic => classic_gaussian_sigma(values[0], values[1], sensitivity),
    }
    .map(Some)
}

/// Every analytic function.
pub fn udfs() -> Vec<ScalarUDF> {
    vec![
        AnalyticFunction::udf(
            "laplace_ratio_cdf",
            &["a", "mu1", "mu2", "b"],
            None,
            |v, _, _| accuracy::laplace_ratio_cdf(v[0], v[1], v[2], v[3]),
        ),
        AnalyticFunction::udf(
            "noisy_counts_accuracy_beta",
            &["x", "y", "epsilon", "alpha"],
            None,
            |v, _, _| accuracy::noisy_counts_accuracy_beta(v[0], v[1], v[2], v[3]),
        ),
        AnalyticFunction::udf(
            "noised_log_accuracy_beta",
            &["z", "epsilon", "alpha"],
            None,
            |v, _, _| accuracy::noised_log_accuracy_beta(v[0], v[1], v[2]),
        ),
        AnalyticFunction::udf(
            "naive_accuracy_beta",
            &["n_x", "epsilon", "alpha"],
            None,
            |v, _, _| accuracy::naive_accuracy_beta(v[0], v[1], v[2]).map(Some),
        ),
        AnalyticFunction::udf(
            "noisy_ratio_expectation",
            &["x", "y", "epsilon"],
            None,
            |v, _, _| bias::noisy_ratio_expectation(v[0], v[1], v[2]),
        ),
        AnalyticFunction::udf(
            "noisy_ratio_expectation_approx",
            &["x", "y", "epsilon"],
            None,
            |v, _, _| bias::noisy_ratio_expectation_approx(v[0], v[1], v[2]),
        ),
        AnalyticFunction::udf(
            "noisy_ratio_bias",
            &["x", "y", "epsilon"],
            None,
            |v, _, _| bias::noisy_ratio_bias(v[0], v[1], v[2]),
        ),
        AnalyticFunction::udf(
            "gaussian_sigma",
            &["epsilon", "delta", "sensitivity"],
            Some("calibration"),
            gaussian_sigma,
        ),
        AnalyticFunction::session_dependent(
            "epsilon_for_half_width",
            &["n_x", "n_y", "p_x", "p_y", "half_width"],
            Some("options"),
            planning,
        ),
    ]
}
