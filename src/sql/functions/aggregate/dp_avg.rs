//! `dp_avg(expr, lower, upper, epsilon [, options])`: the mean of the values of `expr` clamped
//! to `[lower, upper]`, from a noisy clamped sum and a noisy count, with a confidence interval
//! that accounts for the noise.
//!
//! Privacy: the budget is split in half, `ε/2` (and `δ/2`) for the sum and `ε/2` for the
//! count (basic composition); each half is then calibrated exactly as `dp_sum` (sensitivity
//! `max_rows_per_unit·(max(upper, 0) − min(lower, 0))`, on a grid with exact integer noise,
//! [`super::clamping`]) and `dp_count` (sensitivity `max_rows_per_unit`) are, with the same
//! per-group split under GROUP BY. An even split is near the best for the mean's noise when
//! the values are spread over the bounds (the sum's noise `Δ_sum/ε_s` and the count's,
//! times the mean, `mean·Δ_count/ε_c`, are of one order), and it keeps the rule simple to state.
//!
//! The estimate `noisy_sum / max(noisy_count, 1)` is post-processing, clamped to the bounds.
//! The interval is the delta method's for the ratio of the two noisy values around the exact
//! clamped mean of the group's rows: half-width `z·sqrt(V_sum + mean²·V_count) / count`, with
//! the exact variances of the integer noises added and the noisy count in place of the count;
//! it covers the rows' clamped mean (not a population mean: the rows' own spread is not
//! estimated) and is cut to `[lower, upper]`; with a noisy count below 1 it is `[lower, upper]`.
//! Returns a struct: `estimate`, `lower`, `upper`, the released `sum` and `count`,
//! `confidence`, and `seeded` (true when the noise came from `dp.seed`: **not private**).

use super::accumulator::GroupStreams;
use super::clamping::{sum_noise, Clamp, GridSums, SumNoise};
use super::statistic::{
    coerce_by_kind, Arg, ArgKind, Call, DpStatistic, Release, StatisticAccumulator, StatisticDoc,
    StatisticNoise,
};
use super::CallPlan;
use super::{DpCount, DpSum};
use crate::stats::mechanism::PrivacyLoss;
use crate::stats::CountNoise;
use arrow::array::{
    ArrayRef, AsArray, BooleanArray, Decimal128Array, Float64Array, Int64Array, PrimitiveArray,
    StructArray, UInt64Array,
};
use arrow::datatypes::{DataType, Decimal128Type, Field, Fields, UInt64Type};
use datafusion::common::{exec_datafusion_err, plan_datafusion_err, Result};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use statrs::distribution::{ContinuousCDF, Normal};
use std::sync::Arc;

/// The `dp_avg` statistic.
#[derive(Debug, Clone, Copy)]
pub struct DpAvg;

const NAME: &str = "dp_avg";

const SUM_STATE: DataType = DataType::Decimal128(38, 0);

fn fields() -> Fields {
    Fields::from(vec![
        Field::new("estimate", DataType::Float64, false),
        Field::new("lower", DataType::Float64, false),
        Field::new("upper", DataType::Float64, false),
        Field::new("sum", DataType::Float64, false),
        Field::new("count", DataType::Int64, false),
        Field::new("confidence", DataType::Float64, false),
        Field::new("seeded", DataType::Boolean, false),
    ])
}

impl DpStatistic for DpAvg {
    fn name(&self) -> &'static str {
        NAME
    }

    fn args(&self) -> &'static [Arg] {
        const ARGS: &[Arg] = &[
            Arg::new(
                "expr",
                ArgKind::Number,
                "The values averaged; NaN does not count, `±∞` counts as the bound.",
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
        &["mechanism", "delta", "gaussian_calibration", "confidence"]
    }

    fn returns(&self) -> &'static str {
        "STRUCT"
    }

    fn doc(&self) -> StatisticDoc {
        StatisticDoc {
            summary: "The mean of the non-NULL values of `expr` in each group, each clamped to \
                      `[lower, upper]`, as `noisy_sum / max(noisy_count, 1)` cut to the bounds.",
            details: &[
                "The values are clamped as for `dp_sum`.",
                "- Guarantee: `(ε, δ)`-DP as `dp_sum`. The planner splits the budget in half: \
                 `ε/2` (and `δ/2`) for the clamped sum, calibrated as `dp_sum`'s, and `ε/2` for \
                 the count, calibrated as `dp_count`'s (basic composition), each then per group as \
                 those functions do. An even split keeps the two noises' shares of the mean's \
                 error of one order when the values spread over the bounds.\n\
                 - Returns a struct: `estimate`, `lower`, `upper` (a `confidence` interval, \
                 default 0.95, for the exact clamped mean of the group's rows: the delta method \
                 for the ratio of the two noisy values, half-width \
                 `z·sqrt(V_sum + estimate²·V_count)/noisy_count` with the exact noise variances, \
                 cut to `[lower, upper]`; the whole range when the noisy count is below 1; the \
                 rows' own spread is not estimated, so it is not an interval for a population \
                 mean), the released `sum` and `count`, `confidence`, and `seeded` (true when the \
                 noise came from `dp.seed`: not private).",
            ],
            sql_example: "SELECT dp_avg(age, 0, 100, 1.0, 'confidence=0.9') AS mean_age FROM visits",
            related: &[&DpCount, &DpSum],
        }
    }

    /// Summed as DOUBLE whatever the input.
    fn coerce(&self, types: &[DataType]) -> Result<Vec<DataType>> {
        let coerced = coerce_by_kind(NAME, self.args(), types)?;
        Ok(vec![DataType::Float64; coerced.len()])
    }

    fn return_type(&self, _types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(fields()))
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn calibrate(&self, call: &Call<'_>) -> Result<Release> {
        // Half the budget for the sum, half for the count; then each group's share and, under
        // GROUP BY, both sides of a replaced unit, as for dp_sum and dp_count.
        let half = Call {
            name: NAME,
            epsilon: call.epsilon,
            options: call.options,
            constants: call.constants,
            grouped: call.grouped,
            contribution: call.contribution,
            share: call.share / 2.0,
        };
        let sides = if call.grouped { 2 } else { 1 };
        half.check_split(sides as f64, "both sides of a replaced unit in a GROUP BY")?;
        // Each half's release: (ε/2, δ/2) for all its groups.
        let (epsilon, delta) = (call.epsilon / 2.0, call.options.delta.map(|d| d / 2.0));
        let sum = sum_noise(&half, epsilon, delta, sides)?;
        let options = call.options;
        let count = CountNoise::calibrate_release(
            options.mechanism,
            epsilon,
            delta,
            half.shape(sides, call.contribution.rows)?,
            options.gaussian_calibration,
        )
        .map_err(|e| plan_datafusion_err!("{NAME}: {e}"))?;
        let confidence = options.confidence;
        Ok(Release::new(AvgNoise {
            sum,
            count,
            confidence,
        }))
    }

    fn state(&self) -> Vec<(&'static str, DataType)> {
        vec![("sum", SUM_STATE), ("count", DataType::UInt64)]
    }

    fn accumulator(&self, plan: Arc<CallPlan>, types: &[DataType]) -> Result<StatisticAccumulator> {
        let noise = plan.release.noise::<AvgNoise>(NAME)?;
        Ok(Box::new(AvgAccumulator {
            sums: GridSums::default(),
            counts: Vec::new(),
            streams: GroupStreams::new(&plan),
            clamp: Clamp::for_input(NAME, &noise.sum, types)?,
            noise: noise.clone(),
            seeded: plan.options.seed.is_some(),
            units: Vec::new(),
        }))
    }
}

/// The calibration of one `dp_avg` call.
#[derive(Debug, Clone, PartialEq)]
struct AvgNoise {
    sum: SumNoise,
    count: CountNoise,
    confidence: f64,
}

impl StatisticNoise for AvgNoise {
    /// The sum's release then the count's (sequential composition).
    fn loss(&self) -> PrivacyLoss {
        self.sum.loss().then(self.count.loss())
    }
}

/// Exact per-group clamped sums (grid units) and counts; noise once per group in `evaluate`.
struct AvgAccumulator {
    sums: GridSums,
    counts: Vec<u64>,
    streams: GroupStreams,
    clamp: Clamp,
    noise: AvgNoise,
    seeded: bool,
    /// The current batch's units ([`Clamp::batch_units`]), reused from batch to batch.
    units: Vec<i64>,
}

impl AvgAccumulator {
    fn resize(&mut self, groups: usize) {
        self.sums.resize(groups);
        self.counts.resize(groups, 0);
        self.streams.resize(groups);
    }
}

impl GroupsAccumulator for AvgAccumulator {
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
            sums,
            counts,
            clamp,
            units,
            ..
        } = self;
        match sums.unchecked(group_indices.len(), max_units) {
            // Proven within i64 (GridSums::unchecked); debug builds check it anyway.
            Some(narrow) => match clamp.batch_units(&values[0], opt_filter, units) {
                // Every row counts (no NULL, no filter, no NaN): DataFusion's `avg` loop.
                Some(0) => {
                    // A slice, so its pointer and length stay in registers through the loop
                    // (through the `Vec`, both were reloaded after every store).
                    let counts = &mut counts[..];
                    for (&group, &u) in group_indices.iter().zip(units.iter()) {
                        counts[group] += 1;
                        narrow[group] += u;
                    }
                }
                _ => clamp.accumulate(&values[0], group_indices, opt_filter, |group, u| {
                    counts[group] += 1;
                    narrow[group] += u;
                }),
            },
            None => clamp.accumulate(&values[0], group_indices, opt_filter, |group, u| {
                counts[group] += 1;
                sums.add(group, i128::from(u));
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
        let sums = values[0].as_primitive::<Decimal128Type>().values();
        let counts = values[1].as_primitive::<UInt64Type>().values();
        for ((&group, &units), &count) in group_indices.iter().zip(sums.iter()).zip(counts.iter())
        {
            self.counts[group] += count;
            self.sums.add(group, units);
        }
        self.streams.merge_keys(values.get(2), group_indices);
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let sums = self.sums.take(emit_to, NAME)?;
        let counts = emit_to.take_needed(&mut self.counts);
        let AvgNoise {
            sum: sum_noise,
            count: count_noise,
            confidence,
        } = self.noise.clone();
        let grid = self.clamp.grid().clone();
        let g = 2f64.powi(grid.exponent);
        let sum_variance = grid.noise.variance * g * g;
        let z = Normal::new(0.0, 1.0)
            .map_err(|e| exec_datafusion_err!("{NAME}: {e}"))?
            .inverse_cdf(0.5 + confidence / 2.0);
        let (lo, hi) = (sum_noise.lower, sum_noise.upper);
        let n = sums.len();
        let value = self.clamp.to_value();
        // The draws, one for the sum then one for the count per group, in this order; then
        // the released values, in loops of plain arithmetic (no stream, no branch to predict).
        let draws = self.streams.release_groups(n, |_, rng| {
            Ok((grid.noise.sample(rng), count_noise.sample(rng)))
        })?;
        let mut released_sums = Vec::with_capacity(n);
        let mut released_counts = Vec::with_capacity(n);
        for ((&sum, &count), &(sum_draw, count_draw)) in sums.iter().zip(&counts).zip(&draws) {
            let noisy_sum = sum.checked_add(i128::from(sum_draw)).ok_or_else(|| {
                exec_datafusion_err!("{NAME}: a noisy sum left the range of a 128-bit integer")
            })?;
            let noisy_count = i64::try_from(count)
                .ok()
                .and_then(|c| c.checked_add(count_draw))
                .ok_or_else(|| {
                    exec_datafusion_err!("{NAME}: a noisy count left the range of a 64-bit integer")
                })?;
            released_sums.push(value(noisy_sum));
            released_counts.push(noisy_count);
        }
        let [mut estimates, mut lowers, mut uppers] =
            std::array::from_fn(|_| Vec::<f64>::with_capacity(n));
        for (&sum_value, &noisy_count) in released_sums.iter().zip(&released_counts) {
            let (estimate, lower, upper) = if noisy_count >= 1 {
                let c = noisy_count as f64;
                let estimate = (sum_value / c).clamp(lo, hi);
                let half = z * (sum_variance + estimate * estimate * count_noise.variance).sqrt() / c;
                (estimate, (estimate - half).max(lo), (estimate + half).min(hi))
            } else {
                ((lo + hi) / 2.0, lo, hi)
            };
            estimates.push(estimate);
            lowers.push(lower);
            uppers.push(upper);
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Float64Array::from(estimates)),
            Arc::new(Float64Array::from(lowers)),
            Arc::new(Float64Array::from(uppers)),
            Arc::new(Float64Array::from(released_sums)),
            Arc::new(Int64Array::from(released_counts)),
            Arc::new(Float64Array::from(vec![confidence; n])),
            Arc::new(BooleanArray::from(vec![self.seeded; n])),
        ];
        Ok(Arc::new(StructArray::try_new(fields(), columns, None)?))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let sums = self.sums.take(emit_to, NAME)?;
        let counts = emit_to.take_needed(&mut self.counts);
        let keys = self.streams.take(sums.len());
        let sums = PrimitiveArray::<Decimal128Type>::from(sums).with_data_type(SUM_STATE);
        let mut state: Vec<ArrayRef> = vec![Arc::new(sums), Arc::new(UInt64Array::from(counts))];
        state.extend(self.streams.key_state(keys));
        Ok(state)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let rows = values[0].len();
        let mut sums = vec![0i128; rows];
        let mut counts = vec![0u64; rows];
        let rows_as_groups: Vec<usize> = (0..rows).collect();
        self.clamp
            .accumulate(&values[0], &rows_as_groups, opt_filter, |row, units| {
                sums[row] = i128::from(units);
                counts[row] = 1;
            });
        let sums: Decimal128Array =
            PrimitiveArray::<Decimal128Type>::from(sums).with_data_type(SUM_STATE);
        let mut state: Vec<ArrayRef> = vec![Arc::new(sums), Arc::new(UInt64Array::from(counts))];
        state.extend(self.streams.convert_keys(values, rows)?);
        Ok(state)
    }

    fn size(&self) -> usize {
        self.sums.size()
            + self.counts.capacity() * size_of::<u64>()
            + self.units.capacity() * size_of::<i64>()
            + self.streams.size()
            + size_of::<Self>()
    }
}
