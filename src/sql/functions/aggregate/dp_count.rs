//! `dp_count(expr, epsilon [, options])`: a noisy count of the non-NULL values of `expr`.
//!
//! Privacy (replace-one neighbours): without GROUP BY, replacing one row changes the count by
//! at most 1, so noise calibrated for `(ε, δ)` at sensitivity 1 (discrete Laplace of scale
//! `1/ε`, or the discrete Gaussian) is `(ε, δ)`-DP. With GROUP BY a replaced row can leave one
//! group and join another, so each group gets noise for `(ε/2, δ/2)` and the whole result is
//! `(ε, δ)`-DP ([`crate::sql::functions::aggregate::CallPlan::resolve`]). The result is the
//! raw noisy count, unbiased and possibly negative. `FILTER (WHERE ...)` restricts the rows.

use super::accumulator::{CellCounts, CellStatistic, GroupStreams};
use super::statistic::{
    Arg, ArgKind, Call, DpStatistic, Release, StatisticAccumulator, StatisticDoc,
    StatisticNoise,
};
use super::CallPlan;
use crate::stats::mechanism::{add_noise, PrivacyLoss};
use crate::stats::CountNoise;
use arrow::array::{Array, ArrayRef, BooleanArray, Int64Array};
use arrow::datatypes::DataType;
use datafusion::common::{exec_datafusion_err, plan_datafusion_err, Result};
use datafusion_functions_aggregate_common::aggregate::groups_accumulator::accumulate::accumulate_indices;
use std::sync::Arc;

/// The `dp_count` statistic.
#[derive(Debug, Clone, Copy)]
pub struct DpCount;

const NAME: &str = "dp_count";

impl DpStatistic for DpCount {
    fn name(&self) -> &'static str {
        NAME
    }

    fn args(&self) -> &'static [Arg] {
        const ARGS: &[Arg] = &[Arg::new(
            "expr",
            ArgKind::Value,
            "A row counts when it is not NULL.",
        )];
        ARGS
    }

    fn option_keys(&self) -> &'static [&'static str] {
        &["mechanism", "delta", "gaussian_calibration"]
    }

    fn returns(&self) -> &'static str {
        "BIGINT"
    }

    fn doc(&self) -> StatisticDoc {
        StatisticDoc {
            summary: "Noisy count of the non-NULL values of `expr` in each group.",
            details: &[
                "`FILTER (WHERE ...)` works.",
                "- Guarantee: `(ε, 0)`-DP with `laplace` (discrete Laplace), `(ε, δ)`-DP with \
                 `gaussian` (discrete Gaussian, σ from the analytic Gaussian mechanism), for the \
                 whole result under replace-one neighbours. Without GROUP BY one row changes the \
                 count by at most 1: noise for `(ε, δ)` at sensitivity 1 (Laplace scale `1/ε`). \
                 With GROUP BY a replaced row can leave one group and join another, changing two \
                 counts: Laplace noise for `ε/2` per group (scale `2/ε`), as each cell of the 2x2 \
                 table; the Gaussian is calibrated once for all the groups' counts, one vector of \
                 L2 sensitivity `√2` (about half the variance of `(ε/2, δ/2)` per group, which \
                 `gaussian_calibration=per_cell` keeps). The δ charged is the noise's own, at \
                 most the δ asked.\n\
                 - The value is the raw noisy count: unbiased, and it can be negative.",
            ],
            sql_example: "SELECT dp_count(age, 1.0) AS visits FROM visits WHERE ward = 'A'",
            related: &[],
        }
    }

    fn return_type(&self, _types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    /// Never NULL: an empty group's count is noise alone.
    fn is_nullable(&self) -> bool {
        false
    }

    /// Replace-one neighbours: replacing a unit can remove its rows from up to `groups`
    /// groups and add rows to up to `groups` others, so a grouped count changes in up to twice
    /// as many groups: (ε/2, δ/2) per group keeps the GROUP BY at (ε, δ). (The 2x2 table's
    /// per-cell (ε/2, δ/2) covers the same two sides.) Without GROUP BY the one count changes
    /// by at most `rows`.
    fn calibrate(&self, call: &Call<'_>) -> Result<Release> {
        Ok(Release::new(CountRelease::calibrate(NAME, call)?))
    }

    fn state(&self) -> Vec<(&'static str, DataType)> {
        vec![("count", DataType::UInt64)]
    }

    fn accumulator(&self, plan: Arc<CallPlan>, _types: &[DataType]) -> Result<StatisticAccumulator> {
        let noise = plan.release.noise::<CountRelease>(NAME)?.clone();
        Ok(Box::new(CellCounts::new(noise, &plan)))
    }
}

/// The calibrated noise of one `dp_count` call (and of private group selection's hidden
/// count): one exact integer draw per group.
#[derive(Debug, Clone, PartialEq)]
pub struct CountRelease(pub CountNoise);

impl CountRelease {
    /// The noise of a count per group for `call` of statistic `name`. Replace-one neighbours:
    /// replacing a unit can remove its rows from up to `groups` groups and add rows to up to
    /// `groups` others, so a grouped count changes in up to twice as many groups: (ε/2, δ/2)
    /// per group keeps the GROUP BY at (ε, δ). (The 2x2 table's per-cell (ε/2, δ/2) covers
    /// the same two sides.) Without GROUP BY the one count changes by at most `rows`.
    pub fn calibrate(name: &str, call: &Call<'_>) -> Result<Self> {
        let sides = if call.grouped { 2 } else { 1 };
        call.check_split(sides as f64, "both sides of a replaced unit in a GROUP BY")?;
        let options = call.options;
        let noise = CountNoise::calibrate_release(
            options.mechanism,
            call.epsilon,
            options.delta,
            call.shape(sides, call.contribution.rows)?,
            options.gaussian_calibration,
        )
        .map_err(|e| plan_datafusion_err!("{name}: {e}"))?;
        Ok(Self(noise))
    }

    /// Each group's count with its own draw of the noise, as `BIGINT`s of statistic `name`.
    pub fn release_counts(
        &self,
        name: &str,
        counts: &[u64],
        streams: &mut GroupStreams,
    ) -> Result<ArrayRef> {
        let noisy = streams.release_groups(counts.len(), |g, rng| {
            // Checked: past i64 an error, never a wrap that would carry the count.
            add_noise(counts[g], self.0.sample(rng))
                .map_err(|e| exec_datafusion_err!("{name}: {e}"))
        })?;
        Ok(Arc::new(Int64Array::from(noisy)))
    }
}

impl StatisticNoise for CountRelease {
    fn loss(&self) -> PrivacyLoss {
        self.0.loss()
    }
}

impl CellStatistic for CountRelease {
    const CELLS: usize = 1;

    fn count(
        &self,
        counts: &mut [u64],
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
    ) {
        accumulate_indices(
            group_indices,
            values[0].logical_nulls().as_ref(),
            opt_filter,
            |group| counts[group] += 1,
        );
    }

    fn release(&self, counts: &[u64], streams: &mut GroupStreams) -> Result<ArrayRef> {
        self.release_counts(NAME, counts, streams)
    }
}
