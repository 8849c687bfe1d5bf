//! `dp_sum(expr, lower, upper, epsilon [, options])`: a noisy sum of the non-NULL values of
//! `expr`, each clamped to the declared literal bounds `[lower, upper]`.
//!
//! Sensitivity (replace-one neighbours): a unit adds at most `rows = max_rows_per_unit` values
//! to a group, each in `[lower, upper]`, so its share of one group's sum lies in
//! `[rows·min(lower, 0), rows·max(upper, 0)]` and replacing it changes that sum by at most
//! `Δ = rows·(max(upper, 0) − min(lower, 0))`: `rows·max(|lower|, |upper|)` when the bounds do
//! not straddle 0, at most twice that when they do. As for `dp_count`, a replaced unit changes
//! up to `2·max_groups_per_unit` groups of a GROUP BY, so each group's noise is calibrated for
//! `(ε, δ) / (2·max_groups_per_unit)`; without GROUP BY the one sum gets `(ε, δ)`.
//!
//! The values are clamped to a power-of-two grid, summed exactly in integer grid units and
//! noised with exact integer noise ([`super::clamping`], which cites the floating-point leak it
//! avoids). Integer inputs with integer bounds stay on integers and return `BIGINT`; any other
//! number returns `DOUBLE`. NaN values do not count (as NULL); `±∞` clamp to the bounds.

use super::accumulator::GroupStreams;
use super::clamping::{sum_noise, Clamp, GridSums, SumNoise};
use super::statistic::{
    coerce_by_kind, Arg, ArgKind, Call, DpStatistic, Release, StatisticAccumulator, StatisticDoc,
};
use super::CallPlan;
use super::DpCount;
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, Float64Array};
use arrow::array::{Int64Array, PrimitiveArray};
use arrow::datatypes::{DataType, Decimal128Type};
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use std::sync::Arc;

/// The `dp_sum` statistic.
#[derive(Debug, Clone, Copy)]
pub struct DpSum;

const NAME: &str = "dp_sum";

/// The widest state type: the exact sum in grid units, at most `2^64` values of at most
/// `2^31` units each.
const STATE: DataType = DataType::Decimal128(38, 0);

impl DpStatistic for DpSum {
    fn name(&self) -> &'static str {
        NAME
    }

    fn args(&self) -> &'static [Arg] {
        const ARGS: &[Arg] = &[
            Arg::new(
                "expr",
                ArgKind::Number,
                "The values summed; NaN does not count, `±∞` counts as the bound.",
            ),
            Arg::new(
                "lower",
                ArgKind::Constant,
                "The lower clamping bound, finite and at most `upper`.",
            ),
            Arg::new("upper", ArgKind::Constant, "The upper clamping bound, finite."),
        ];
        ARGS
    }

    fn option_keys(&self) -> &'static [&'static str] {
        &["mechanism", "delta", "gaussian_calibration"]
    }

    fn returns(&self) -> &'static str {
        "BIGINT (integer expr and bounds) or DOUBLE"
    }

    fn doc(&self) -> StatisticDoc {
        StatisticDoc {
            summary: "Noisy sum of the non-NULL values of `expr` in each group, each value first \
                      clamped to `[lower, upper]`.",
            details: &[
                "`lower` and `upper` are constants (literals; `lower <= upper`, both finite) that \
                 the analyst declares without looking at the data: a value outside them counts as \
                 the nearest bound. Integer `expr` with integer bounds returns BIGINT (integer \
                 noise); anything else is summed as DOUBLE. NaN values do not count (as NULL); \
                 `±∞` count as the bound. `FILTER (WHERE ...)` works.",
                "- Guarantee: `(ε, 0)`-DP with `laplace`, `(ε, δ)`-DP with `gaussian`, for the \
                 whole result under replace-one neighbours. A unit adds at most \
                 `max_rows_per_unit` values to a group, so replacing it changes that group's sum \
                 by at most `Δ = max_rows_per_unit × (max(upper, 0) − min(lower, 0))` \
                 (`max_rows_per_unit × max(|lower|, |upper|)` when the bounds do not straddle 0). \
                 The noise is calibrated for `Δ`, with `ε/2` per group under GROUP BY and \
                 `ε/max_groups_per_unit` as for `dp_count` (the Gaussian: once for the vector of \
                 the sums a unit moves, as for `dp_count`).\n\
                 - No floating-point leak (Mironov 2012, doi:10.1145/2382196.2382264): clamped \
                 values are rounded to a power-of-two grid `2^k` (for Laplace noise of scale `b`, \
                 no coarser than `max(Δ/2^29, b/2^38)`: far below the noise), summed exactly in \
                 integer grid units, and exact integer noise (discrete Laplace or Gaussian) is \
                 added in grid units, as OpenDP's discretised mechanisms do. Sums are checked: an \
                 overflow is an error, never a wrap.\n\
                 - The value is the raw noisy sum: unbiased for the clamped values, and it can \
                 leave `[count × lower, count × upper]`.\n\
                 - Refused, naming the argument: bounds that are not constant numbers, NaN or \
                 infinite bounds, `lower > upper`, bounds whose sensitivity overflows a DOUBLE or \
                 needs a grid coarser than `2^900`, and the epsilons a count refuses.",
            ],
            sql_example: "SELECT dp_sum(stay_days, 0, 30, 1.0) AS total_days FROM visits",
            related: &[&DpCount],
        }
    }

    /// Integers when `expr` and both bounds are integers, `DOUBLE` otherwise.
    fn coerce(&self, types: &[DataType]) -> Result<Vec<DataType>> {
        let coerced = coerce_by_kind(NAME, self.args(), types)?;
        if coerced.iter().all(|t| *t == DataType::Int64) {
            Ok(coerced)
        } else {
            Ok(vec![DataType::Float64; coerced.len()])
        }
    }

    fn return_type(&self, types: &[DataType]) -> Result<DataType> {
        Ok(match types.first() {
            Some(DataType::Int64) => DataType::Int64,
            _ => DataType::Float64,
        })
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn calibrate(&self, call: &Call<'_>) -> Result<Release> {
        let sides = if call.grouped { 2 } else { 1 };
        call.check_split(sides as f64, "both sides of a replaced unit in a GROUP BY")?;
        let noise = sum_noise(call, call.epsilon, call.options.delta, sides)?;
        Ok(Release::new(noise))
    }

    fn state(&self) -> Vec<(&'static str, DataType)> {
        vec![("sum", STATE)]
    }

    fn accumulator(&self, plan: Arc<CallPlan>, types: &[DataType]) -> Result<StatisticAccumulator> {
        let noise = plan.release.noise::<SumNoise>(NAME)?;
        let clamp = Clamp::for_input(NAME, noise, types)?;
        Ok(Box::new(SumAccumulator {
            sums: GridSums::default(),
            streams: GroupStreams::new(&plan),
            clamp,
            units: Vec::new(),
        }))
    }
}

/// Exact per-group sums in grid units; noise once per group in `evaluate`.
struct SumAccumulator {
    sums: GridSums,
    streams: GroupStreams,
    clamp: Clamp,
    /// The current batch's units ([`Clamp::batch_units`]), reused from batch to batch.
    units: Vec<i64>,
}

impl SumAccumulator {
    fn resize(&mut self, groups: usize) {
        self.sums.resize(groups);
        self.streams.resize(groups);
    }

    /// Each counted row's value in grid units (`None`: NULL, NaN or filtered out).
    fn units(&self, values: &ArrayRef, opt_filter: Option<&BooleanArray>) -> Vec<Option<i64>> {
        let rows = values.len();
        let mut out: Vec<Option<i64>> = vec![None; rows];
        let rows_as_groups: Vec<usize> = (0..rows).collect();
        self.clamp
            .accumulate(values, &rows_as_groups, opt_filter, |row, u| out[row] = Some(u));
        out
    }
}

impl GroupsAccumulator for SumAccumulator {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.resize(total_num_groups);
        self.streams.note_keys(values, group_indices)?;
        let max_units = self.clamp.max_units();
        let Self {
            sums, clamp, units, ..
        } = self;
        match sums.unchecked(group_indices.len(), max_units) {
            // Proven within i64 (GridSums::unchecked); debug builds check it anyway.
            Some(narrow) => match clamp.batch_units(&values[0], opt_filter, units) {
                // A NaN's units are 0: adding them is skipping the row.
                Some(_) => {
                    for (&group, &u) in group_indices.iter().zip(units.iter()) {
                        narrow[group] += u;
                    }
                }
                None => clamp.accumulate(&values[0], group_indices, opt_filter, |group, u| {
                    narrow[group] += u
                }),
            },
            None => clamp.accumulate(&values[0], group_indices, opt_filter, |group, u| {
                sums.add(group, i128::from(u))
            }),
        }
        Ok(())
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.resize(total_num_groups);
        let partial = values[0].as_primitive::<Decimal128Type>();
        for (&group, &units) in group_indices.iter().zip(partial.values().iter()) {
            self.sums.add(group, units);
        }
        self.streams.merge_keys(values.get(1), group_indices);
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let sums = self.sums.take(emit_to, NAME)?;
        let grid = self.clamp.grid().clone();
        let noisy = self.streams.release_groups(sums.len(), |g, rng| {
            let noise = grid.noise.sample(rng) as i128;
            // Checked: a noisy sum past i128 is an error (a function of the noisy value only).
            sums[g].checked_add(noise).ok_or_else(|| {
                exec_datafusion_err!("{NAME}: a noisy sum left the range of a 128-bit integer")
            })
        })?;
        match &self.clamp {
            Clamp::Integer { exponent, .. } => {
                let out = noisy
                    .into_iter()
                    .map(|units| {
                        units
                            .checked_mul(1i128 << exponent)
                            .and_then(|v| i64::try_from(v).ok())
                            .ok_or_else(|| {
                                exec_datafusion_err!(
                                    "{NAME}: the noisy sum left the range of a 64-bit integer"
                                )
                            })
                    })
                    .collect::<Result<Vec<i64>>>()?;
                Ok(Arc::new(Int64Array::from(out)))
            }
            Clamp::Real { .. } => {
                let value = self.clamp.to_value();
                let out: Float64Array = noisy.into_iter().map(|u| Some(value(u))).collect();
                Ok(Arc::new(out))
            }
        }
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let sums = self.sums.take(emit_to, NAME)?;
        let keys = self.streams.take(sums.len());
        let column = PrimitiveArray::<Decimal128Type>::from(sums).with_data_type(STATE);
        let mut state: Vec<ArrayRef> = vec![Arc::new(column)];
        state.extend(self.streams.key_state(keys));
        Ok(state)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let units: Decimal128Array = self
            .units(&values[0], opt_filter)
            .into_iter()
            .map(|u| Some(i128::from(u.unwrap_or(0))))
            .collect::<Decimal128Array>()
            .with_data_type(STATE);
        let mut state: Vec<ArrayRef> = vec![Arc::new(units)];
        state.extend(self.streams.convert_keys(values, values[0].len())?);
        Ok(state)
    }

    fn size(&self) -> usize {
        self.sums.size()
            + self.units.capacity() * size_of::<i64>()
            + self.streams.size()
            + size_of::<Self>()
    }
}

#[cfg(test)]
mod tests {
    use super::super::clamping::Grid;
    use super::*;
    use datafusion::common::ScalarValue;
    use crate::sql::functions::aggregate::DpAggregate;
    use crate::sql::options::DpOptions;
    use crate::stats::Contribution;

    fn calibrate(
        lower: ScalarValue,
        upper: ScalarValue,
        epsilon: f64,
        grouped: bool,
        rows: u32,
        options: &DpOptions,
    ) -> Result<SumNoise> {
        let constants = [lower, upper];
        let release = DpSum.calibrate(&Call {
            name: NAME,
            epsilon,
            options,
            constants: &constants,
            grouped,
            contribution: Contribution { rows, groups: 1 },
            share: 1.0,
        })?;
        Ok(release.noise::<SumNoise>(NAME).unwrap().clone())
    }

    fn f(v: f64) -> ScalarValue {
        ScalarValue::Float64(Some(v))
    }

    fn i(v: i64) -> ScalarValue {
        ScalarValue::Int64(Some(v))
    }

    /// The noise scale in value units, `b·g`, for the discrete Laplace law.
    fn scale(grid: &Grid) -> f64 {
        grid.noise.scale * 2f64.powi(grid.exponent)
    }

    #[test]
    fn the_noise_is_calibrated_for_the_bounds_and_the_unit_s_rows() {
        let options = DpOptions::default();
        // (lower, upper, rows, grouped, the sensitivity rows·(max(upper,0) − min(lower,0)),
        // the epsilon per group (ε/2 grouped)).
        for (lower, upper, rows, grouped, sensitivity, per_group) in [
            (0.0, 10.0, 1, false, 10.0, 1.0),
            (0.0, 10.0, 1, true, 10.0, 0.5),
            (0.0, 10.0, 3, true, 30.0, 0.5),
            (-3.0, 5.0, 1, false, 8.0, 1.0),
            (-7.0, -2.0, 2, false, 14.0, 1.0),
            (2.5, 2.5, 1, false, 2.5, 1.0),
        ] {
            let noise = calibrate(f(lower), f(upper), 1.0, grouped, rows, &options).unwrap();
            let want = sensitivity / per_group;
            let got = scale(&noise.real);
            // The sensitivity in grid units is exact (the bounds are multiples of the grid),
            // so the scale is Δ/ε to the grid's 2^-30 relative precision.
            assert!(
                (got - want).abs() <= want * 1e-8,
                "[{lower}, {upper}] rows {rows} grouped {grouped}: scale {got}, want {want}"
            );
            assert!(
                noise.real.noise.sensitivity() >= 1 << 29,
                "a fine grid: {:?}",
                noise.real
            );
            assert!(noise.integer.is_none());
        }
        let noise = calibrate(i(-3), i(5), 1.0, false, 2, &options).unwrap();
        let (grid, bounds) = noise.integer.unwrap();
        assert_eq!((grid.exponent, grid.noise.sensitivity()), (0, 16));
        assert_eq!(bounds, Some((-3, 5)));
        // Integer bounds past 2^30 units move to a coarser grid of integers.
        let noise = calibrate(i(0), i(1 << 40), 1.0, false, 1, &options).unwrap();
        let (grid, _) = noise.integer.unwrap();
        assert_eq!((grid.exponent, grid.noise.sensitivity()), (10, 1 << 30));
    }

    #[test]
    fn bad_bounds_are_refused_naming_the_argument() {
        let options = DpOptions::default();
        for (lower, upper, message) in [
            (f(f64::NAN), f(1.0), "argument 'lower' must be a finite number"),
            (f(0.0), f(f64::INFINITY), "argument 'upper' must be a finite number"),
            (f(5.0), f(1.0), "argument 'lower'=5 is above argument 'upper'=1"),
            (f(-1e308), f(1e308), "overflows a DOUBLE"),
            (f(1e300), f(1e300), "too wide"),
        ] {
            let err = calibrate(lower, upper, 1.0, false, 1, &options)
                .unwrap_err()
                .to_string();
            assert!(err.contains(message) && err.contains("dp_sum"), "{err}");
        }
    }

    #[test]
    fn every_epsilon_is_refused_by_name_or_calibrated_to_its_scale() {
        let mut gaussian = DpOptions::default();
        gaussian.apply("mechanism", "gaussian").unwrap();
        gaussian.apply("delta", "1e-6").unwrap();
        let mut epsilons: Vec<f64> = (-1022..=41).step_by(3).map(|e| 2f64.powi(e)).collect();
        epsilons.extend([f64::MIN_POSITIVE, 2f64.powi(-40), 2f64.powi(40), 700.0, 701.0]);
        for options in [DpOptions::default(), gaussian] {
            for &epsilon in &epsilons {
                for (lower, upper) in [(f(0.0), f(10.0)), (i(-5), i(1_000_000_000_000))] {
                    match calibrate(lower.clone(), upper.clone(), epsilon, true, 2, &options) {
                        Ok(noise) => {
                            let grids = std::iter::once(&noise.real)
                                .chain(noise.integer.as_ref().map(|(g, _)| g));
                            for grid in grids {
                                let b = scale(grid);
                                let g = 2f64.powi(grid.exponent);
                                assert!(b.is_finite() && b > 0.0, "{epsilon}: {grid:?}");
                                // The grid is below the noise scale, or (at an epsilon so
                                // large the noise vanishes) at most 2^-29 of the sensitivity.
                                let sensitivity = grid.noise.sensitivity() as f64 * g;
                                assert!(
                                    g <= b.max(sensitivity * 2f64.powi(-29)),
                                    "{epsilon}: grid {g} above scale {b}"
                                );
                            }
                        }
                        Err(e) => {
                            let e = e.to_string();
                            assert!(
                                e.starts_with("Error during planning: dp_sum: argument"),
                                "{epsilon} {lower} {upper}: {e}"
                            );
                            // Refused only outside the count's range: below 2^-40 per value
                            // (x rows 2), above 2^40 (700 for the Gaussian), or a Gaussian
                            // sigma past its checked range.
                            let per_value = epsilon / 2.0;
                            let gaussian = options.mechanism.law().needs_delta();
                            assert!(
                                per_value < 2.0 * 2f64.powi(-40)
                                    || epsilon > 2f64.powi(40)
                                    || (gaussian && !(1e-3..=700.0).contains(&per_value)),
                                "{epsilon} {lower} {upper} refused: {e}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_bound_call_round_trips_on_the_wire() {
        let mut gaussian = DpOptions::default();
        gaussian.apply("mechanism", "gaussian").unwrap();
        gaussian.apply("delta", "1e-7").unwrap();
        gaussian.apply("seed", "7").unwrap();
        for options in [DpOptions::default(), gaussian] {
            for (lower, upper) in [(i(-3), i(9)), (f(0.25), f(1e6))] {
                for grouped in [false, true] {
                    let plan = CallPlan::resolve(
                        &DpSum,
                        &options,
                        &[Some(lower.clone()), Some(upper.clone())],
                        Some(&f(0.7)),
                        None,
                        "dp_sum(x, l, u, 0.7)".into(),
                        4,
                        if grouped { 1 } else { 0 },
                        grouped,
                        Contribution {
                            rows: 3,
                            groups: 1,
                        },
                    )
                    .unwrap();
                    let call = DpAggregate::new(&DpSum).configured(plan);
                    let back = DpAggregate::decode(NAME, &call.encode().unwrap()).unwrap();
                    assert_eq!(back, call, "{lower} {upper} {grouped}");
                    let spent = back.plan().unwrap().cost();
                    assert_eq!(spent.0, 0.7);
                }
            }
        }
    }
}
