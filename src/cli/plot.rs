//! `dpsql --plot FILE.svg`: the forest plot epidemiologists read ratios from. One row per
//! group (labelled with the group key columns), the point estimate as a square and the interval
//! as a line, on a log axis for the ratios (the relative risk's and the odds ratio's intervals;
//! reference line at 1) and a linear one for the risk difference's (reference line at 0), with
//! the epsilon the query spent in the caption. Which functions return an interval, and of which
//! statistic, the registry says ([`DpStatistic::interval`]).
//!
//! Plain SVG written here (a few elements per row) rather than through a plotting crate: the
//! picture is a handful of lines, squares and labels, and the plain text keeps every element
//! addressable (`class="estimate"`, `class="interval"`, `class="reference"`) for tests and
//! style sheets.
//!
//! Which statistic a struct column holds is read from the statement's logical plan: the column
//! is traced through projections, sorts, filters and limits down to the aggregate that made it
//! (the interval statistics' structs have the same fields, so the values alone cannot tell).
//!
//! [`DpStatistic::interval`]: crate::sql::functions::aggregate::statistic::DpStatistic::interval

use super::StatementResult;
use crate::sql::functions::aggregate::{statistic_named, STATISTICS};
use arrow::array::{Array, AsArray, Float64Array, StructArray};
use arrow::datatypes::{DataType, Float64Type};
use arrow::util::display::array_value_to_string;
use datafusion::logical_expr::{Expr, LogicalPlan};
use std::fmt::Write;

/// The statistics a forest plot draws: those of a 2x2 table.
pub use crate::stats::RatioStatistic as Statistic;

/// The statistic the function `name` returns an interval for: the DP aggregates whose
/// [`DpStatistic::interval`] says so, and the exact `rr_ci_katz` a data owner compares them
/// with.
///
/// [`DpStatistic::interval`]: crate::sql::functions::aggregate::statistic::DpStatistic::interval
pub fn interval_statistic(name: &str) -> Option<Statistic> {
    let name = name.to_ascii_lowercase();
    match statistic_named(&name) {
        Some(statistic) => statistic.interval(),
        None if name == "rr_ci_katz" => Some(Statistic::RelativeRisk),
        None => None,
    }
}

/// The DP aggregates that return an interval, for messages: `a, b or c`.
pub fn interval_functions() -> String {
    let names: Vec<&str> = STATISTICS
        .iter()
        .filter(|s| s.interval().is_some())
        .map(|s| s.name())
        .collect();
    match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// A call of the first DP aggregate that returns an interval, for messages:
/// `name(arguments, 1.0) AS ci`.
pub fn interval_example() -> String {
    STATISTICS
        .iter()
        .find(|s| s.interval().is_some())
        .map_or(String::new(), |s| {
            let args: Vec<&str> = s.args().iter().map(|a| a.name).collect();
            format!("{}({}, 1.0) AS ci", s.name(), args.join(", "))
        })
}

/// The axis title: the statistic's name, capitalised.
fn title(statistic: Statistic) -> String {
    let name = statistic.to_string();
    let mut chars = name.chars();
    chars
        .next()
        .map_or(String::new(), |c| c.to_uppercase().chain(chars).collect())
}

/// The value of no effect.
fn no_effect(statistic: Statistic) -> f64 {
    if statistic.is_ratio() {
        1.0
    } else {
        0.0
    }
}

/// Where an output column of a plan comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A GROUP BY key.
    GroupKey,
    /// The result of the aggregate or scalar function of this name.
    Function(String),
    /// Anything else (a computed expression, a join, ...).
    Other,
}

/// The origin of output column `index` of `plan`, traced through projections (plain column
/// references and aliases), sorts, filters, limits, subquery aliases and window nodes down to
/// the aggregate (or scalar function call) that produced it.
#[recursive::recursive]
pub fn column_origin(plan: &LogicalPlan, index: usize) -> Origin {
    fn strip(mut expr: &Expr) -> &Expr {
        while let Expr::Alias(alias) = expr {
            expr = &alias.expr;
        }
        expr
    }
    match plan {
        LogicalPlan::Projection(projection) => match projection.expr.get(index).map(strip) {
            Some(Expr::Column(column)) => match projection.input.schema().index_of_column(column) {
                Ok(i) => column_origin(&projection.input, i),
                Err(_) => Origin::Other,
            },
            Some(Expr::ScalarFunction(call)) => Origin::Function(call.func.name().to_string()),
            _ => Origin::Other,
        },
        LogicalPlan::Aggregate(aggregate) => {
            let keys = aggregate.group_expr.len();
            if index < keys {
                return Origin::GroupKey;
            }
            match aggregate.aggr_expr.get(index - keys).map(strip) {
                Some(Expr::AggregateFunction(call)) => {
                    Origin::Function(call.func.name().to_string())
                }
                _ => Origin::Other,
            }
        }
        LogicalPlan::Window(window) if index < window.input.schema().fields().len() => {
            column_origin(&window.input, index)
        }
        LogicalPlan::Sort(_)
        | LogicalPlan::Filter(_)
        | LogicalPlan::Limit(_)
        | LogicalPlan::SubqueryAlias(_)
        | LogicalPlan::Repartition(_) => match plan.inputs().as_slice() {
            [input] if input.schema().fields().len() == plan.schema().fields().len() => {
                column_origin(input, index)
            }
            _ => Origin::Other,
        },
        _ => Origin::Other,
    }
}

/// Whether a column of this type is an interval struct (`estimate`, `lower` and `upper` as
/// floats, the fields the interval statistics return, [`interval_functions`]).
pub fn is_interval(data_type: &DataType) -> bool {
    let DataType::Struct(fields) = data_type else {
        return false;
    };
    ["estimate", "lower", "upper"].iter().all(|name| {
        fields
            .iter()
            .any(|f| f.name() == name && f.data_type() == &DataType::Float64)
    })
}

/// The interval column a forest plot of `result` (from the statement planned as `plan`)
/// draws: the first interval struct column, with its statistic. An error names `--plot` and
/// says what is missing.
pub fn interval_column(
    result: &StatementResult,
    plan: &LogicalPlan,
) -> Result<Option<(usize, Statistic)>, String> {
    let Some(index) = result
        .schema
        .fields()
        .iter()
        .position(|f| is_interval(f.data_type()))
    else {
        return Ok(None);
    };
    let name = result.schema.field(index).name();
    match column_origin(plan, index) {
        Origin::Function(function) => match interval_statistic(&function) {
            Some(statistic) => Ok(Some((index, statistic))),
            None => Err(format!(
                "--plot: column {name} comes from {function}, not from {}",
                interval_functions()
            )),
        },
        _ => Err(format!(
            "--plot: cannot tell which statistic column {name} holds; select the result of \
             {} as a column (aliases are fine)",
            interval_functions()
        )),
    }
}

/// One row of the plot.
#[derive(Clone, Debug, PartialEq)]
pub struct ForestRow {
    pub label: String,
    pub estimate: Option<f64>,
    pub lower: Option<f64>,
    pub upper: Option<f64>,
}

/// The rows of a forest plot of interval column `column` of `result`, labelled with the group
/// key columns (`key` = `value`, joined by commas; "all rows" without GROUP BY), and the
/// interval's confidence level when the struct carries one.
pub fn forest_rows(
    result: &StatementResult,
    plan: &LogicalPlan,
    column: usize,
) -> Result<(Vec<ForestRow>, Option<f64>), String> {
    let keys: Vec<usize> = (0..result.schema.fields().len())
        .filter(|&i| column_origin(plan, i) == Origin::GroupKey)
        .collect();
    let mut rows = Vec::new();
    let mut confidence = None;
    for batch in &result.batches {
        let interval: &StructArray = batch.column(column).as_struct();
        let field = |name: &str| -> Result<&Float64Array, String> {
            interval
                .column_by_name(name)
                .and_then(|c| c.as_primitive_opt::<Float64Type>())
                .ok_or_else(|| format!("--plot: the interval has no float field {name}"))
        };
        let (estimate, lower, upper) = (field("estimate")?, field("lower")?, field("upper")?);
        if let Some(level) = interval
            .column_by_name("confidence")
            .and_then(|c| c.as_primitive_opt::<Float64Type>())
            .filter(|c| !c.is_empty() && c.is_valid(0))
        {
            confidence = Some(level.value(0));
        }
        let value = |array: &Float64Array, row: usize| {
            (interval.is_valid(row) && array.is_valid(row)).then(|| array.value(row))
        };
        for row in 0..batch.num_rows() {
            let mut parts = Vec::new();
            for &key in &keys {
                let text = array_value_to_string(batch.column(key), row)
                    .map_err(|e| format!("--plot: group key: {e}"))?;
                parts.push(if keys.len() == 1 {
                    text
                } else {
                    format!("{} = {text}", result.schema.field(key).name())
                });
            }
            let label = if parts.is_empty() {
                "all rows".to_string()
            } else {
                parts.join(", ")
            };
            rows.push(ForestRow {
                label,
                estimate: value(estimate, row),
                lower: value(lower, row),
                upper: value(upper, row),
            });
        }
    }
    Ok((rows, confidence))
}

/// Escapes text for an SVG text node or attribute.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A number as a short label: up to three significant digits, no trailing zeros.
fn short(value: f64) -> String {
    if value == 0.0 {
        return "0".to_string();
    }
    let digits = (2 - value.abs().log10().floor() as i32).clamp(0, 6) as usize;
    let text = format!("{value:.digits$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// The horizontal axis: a linear or log scale over `[low, high]`, mapped to pixels.
struct Axis {
    log: bool,
    low: f64,
    high: f64,
    left: f64,
    width: f64,
}

impl Axis {
    fn new(statistic: Statistic, rows: &[ForestRow], left: f64, width: f64) -> Self {
        let log = statistic.is_ratio();
        let reference = no_effect(statistic);
        let values = rows
            .iter()
            .flat_map(|r| [r.estimate, r.lower, r.upper])
            .flatten()
            .filter(|v| v.is_finite() && (!log || *v > 0.0))
            .chain([reference]);
        let transform = |v: f64| if log { v.ln() } else { v };
        let (mut low, mut high) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(transform(v)), hi.max(transform(v)))
        });
        if high - low < 1e-9 {
            low -= 0.5;
            high += 0.5;
        }
        let pad = (high - low) * 0.05;
        Self {
            log,
            low: low - pad,
            high: high + pad,
            left,
            width,
        }
    }

    /// The pixel position of `value`, clamped to the axis (open-ended intervals run to it).
    fn x(&self, value: f64) -> f64 {
        let t = if self.log {
            if value > 0.0 {
                value.ln()
            } else {
                f64::NEG_INFINITY
            }
        } else {
            value
        };
        let t = if t.is_nan() { self.low } else { t };
        let fraction = ((t - self.low) / (self.high - self.low)).clamp(0.0, 1.0);
        self.left + fraction * self.width
    }

    /// Tick values: 1, 2, 5 times powers of ten inside the range (log), or a step of 1, 2 or
    /// 5 times a power of ten giving four to ten ticks (linear).
    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (low, high) = (self.low.exp(), self.high.exp());
            for mantissas in [
                &[1.0][..],
                &[1.0, 2.0, 5.0],
                &[1.0, 1.5, 2.0, 3.0, 5.0, 7.0],
            ] {
                let mut ticks = Vec::new();
                let mut power = 10f64.powi(low.log10().floor() as i32);
                while power <= high {
                    for m in mantissas {
                        let tick = m * power;
                        if tick >= low && tick <= high {
                            ticks.push(tick);
                        }
                    }
                    power *= 10.0;
                }
                if ticks.len() >= 4 || mantissas.len() == 6 {
                    // Thin out to at most ten labels.
                    let stride = ticks.len().div_ceil(10).max(1);
                    return ticks.into_iter().step_by(stride).collect();
                }
            }
            unreachable!("the last set of mantissas always returns")
        } else {
            let span = self.high - self.low;
            let mut step = 10f64.powi((span / 5.0).log10().floor() as i32);
            for factor in [1.0, 2.0, 5.0, 10.0] {
                if span / (step * factor) <= 10.0 {
                    step *= factor;
                    break;
                }
            }
            let mut tick = (self.low / step).ceil() * step;
            let mut ticks = Vec::new();
            while tick <= self.high + step * 1e-9 {
                // Snap values such as 0.30000000000000004 to their label.
                ticks.push(if tick.abs() < step * 1e-9 { 0.0 } else { tick });
                tick += step;
            }
            ticks
        }
    }
}

/// The forest plot of `rows` as an SVG document: title, one row per group (label, interval,
/// estimate, and the numbers), the axis with its reference line, and `caption` (the epsilon
/// spent) under it.
pub fn forest_plot_svg(
    statistic: Statistic,
    rows: &[ForestRow],
    confidence: Option<f64>,
    caption: &str,
) -> String {
    const ROW: f64 = 26.0;
    const TOP: f64 = 56.0;
    const PLOT_WIDTH: f64 = 420.0;
    const CHAR: f64 = 7.2;
    let label_width = rows
        .iter()
        .map(|r| r.label.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(6, 40) as f64
        * CHAR
        + 24.0;
    let left = label_width;
    let numbers_left = left + PLOT_WIDTH + 20.0;
    let width = numbers_left + 200.0;
    let plot_bottom = TOP + ROW * rows.len().max(1) as f64;
    let height = plot_bottom + 84.0;
    let axis = Axis::new(statistic, rows, left, PLOT_WIDTH);
    let level = confidence.map_or(String::new(), |c| format!("{}% ", short(c * 100.0)));

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(
        svg,
        r##"<rect x="0" y="0" width="{width:.0}" height="{height:.0}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<text class="title" x="{:.1}" y="24" font-size="15" font-weight="bold">{} with {level}interval, differentially private</text>"#,
        12.0,
        title(statistic)
    );
    let _ = writeln!(
        svg,
        r#"<text x="{numbers_left:.1}" y="{:.1}" font-weight="bold">estimate ({level}interval)</text>"#,
        TOP - 10.0
    );
    // Grid lines and tick labels.
    for tick in axis.ticks() {
        let x = axis.x(tick);
        let _ = writeln!(
            svg,
            r##"<line class="grid" x1="{x:.1}" y1="{TOP:.1}" x2="{x:.1}" y2="{plot_bottom:.1}" stroke="#e4e4e4"/>"##
        );
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{plot_bottom:.1}" x2="{x:.1}" y2="{:.1}" stroke="#000000"/>"##,
            plot_bottom + 5.0
        );
        let _ = writeln!(
            svg,
            r#"<text class="tick" x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            plot_bottom + 19.0,
            short(tick)
        );
    }
    let _ = writeln!(
        svg,
        r##"<line class="axis" x1="{left:.1}" y1="{plot_bottom:.1}" x2="{:.1}" y2="{plot_bottom:.1}" stroke="#000000"/>"##,
        left + PLOT_WIDTH
    );
    // The reference line: no effect.
    let reference = axis.x(no_effect(statistic));
    let _ = writeln!(
        svg,
        r##"<line class="reference" x1="{reference:.1}" y1="{:.1}" x2="{reference:.1}" y2="{plot_bottom:.1}" stroke="#555555" stroke-dasharray="4 3"/>"##,
        TOP - 4.0
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{} ({} scale)</text>"#,
        left + PLOT_WIDTH / 2.0,
        plot_bottom + 38.0,
        title(statistic),
        if axis.log { "log" } else { "linear" }
    );
    for (i, row) in rows.iter().enumerate() {
        let y = TOP + ROW * (i as f64 + 0.5);
        let _ = writeln!(
            svg,
            r#"<text class="label" x="12" y="{:.1}">{}</text>"#,
            y + 4.5,
            escape(&row.label)
        );
        let numbers = match (row.estimate, row.lower, row.upper) {
            (Some(e), Some(l), Some(u)) => format!("{} ({}, {})", short(e), short(l), short(u)),
            (Some(e), _, _) => format!("{} (no interval)", short(e)),
            _ => "no estimate".to_string(),
        };
        let _ = writeln!(
            svg,
            r#"<text class="numbers" x="{numbers_left:.1}" y="{:.1}">{}</text>"#,
            y + 4.5,
            escape(&numbers)
        );
        if let (Some(lower), Some(upper)) = (row.lower, row.upper) {
            let _ = writeln!(
                svg,
                r##"<line class="interval" x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#1f4e79" stroke-width="2"/>"##,
                axis.x(lower),
                axis.x(upper)
            );
        }
        if let Some(estimate) = row.estimate {
            let x = axis.x(estimate);
            let _ = writeln!(
                svg,
                r##"<rect class="estimate" x="{:.1}" y="{:.1}" width="9" height="9" fill="#1f4e79"><title>{}: {}</title></rect>"##,
                x - 4.5,
                y - 4.5,
                escape(&row.label),
                escape(&numbers)
            );
        }
    }
    let _ = writeln!(
        svg,
        r##"<text class="caption" x="12" y="{:.1}" fill="#333333">{}</text>"##,
        plot_bottom + 64.0,
        escape(caption)
    );
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_labels() {
        assert_eq!(short(1.0), "1");
        assert_eq!(short(0.25), "0.25");
        assert_eq!(short(2.184377), "2.18");
        assert_eq!(short(-0.0557), "-0.0557");
        assert_eq!(short(150.0), "150");
    }

    #[test]
    fn the_registry_says_which_functions_return_an_interval() {
        let intervals: Vec<(&str, Statistic)> = STATISTICS
            .iter()
            .filter_map(|s| s.interval().map(|i| (s.name(), i)))
            .collect();
        assert_eq!(intervals.len(), 3, "{intervals:?}");
        for (name, statistic) in &intervals {
            assert_eq!(interval_statistic(&name.to_uppercase()), Some(*statistic));
            assert!(interval_functions().contains(name));
        }
        assert_eq!(
            interval_statistic("rr_ci_katz"),
            Some(Statistic::RelativeRisk)
        );
        for other in STATISTICS.iter().filter(|s| s.interval().is_none()) {
            assert_eq!(interval_statistic(other.name()), None);
        }
        assert!(interval_example().ends_with("(outcome, exposed, 1.0) AS ci"));
        assert_eq!(interval_functions().matches(" or ").count(), 1);
        assert_eq!(title(Statistic::OddsRatio), "Odds ratio");
        assert_eq!(no_effect(Statistic::RiskDifference), 0.0);
    }

    #[test]
    fn ticks_cover_the_range() {
        let row = |l: f64, u: f64| ForestRow {
            label: "g".into(),
            estimate: Some((l + u) / 2.0),
            lower: Some(l),
            upper: Some(u),
        };
        let log = Axis::new(Statistic::RelativeRisk, &[row(0.05, 2.7)], 0.0, 100.0);
        let ticks = log.ticks();
        assert!(ticks.len() >= 4 && ticks.contains(&1.0), "{ticks:?}");
        let linear = Axis::new(Statistic::RiskDifference, &[row(-0.23, 0.2)], 0.0, 100.0);
        let ticks = linear.ticks();
        assert!(
            (4..=11).contains(&ticks.len()) && ticks.contains(&0.0),
            "{ticks:?}"
        );
        // Values outside the axis (a zero lower bound on a log axis) are clamped to it.
        assert_eq!(log.x(0.0), 0.0);
        assert_eq!(log.x(f64::INFINITY), 100.0);
    }
}
