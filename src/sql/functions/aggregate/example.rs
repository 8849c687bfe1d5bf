//! `dp_count_true(condition, epsilon [, options])`: a noisy count of the rows where
//! `condition` is TRUE. The worked example of `docs/architecture.md` ("A statistic"): the whole
//! file a new statistic is, compiled and run by the tests below (test-only, so it is not in
//! the registry; a real one adds `dp_count_true::DpCountTrue,` to `statistics!`).
//!
//! Privacy: as `dp_count`'s, a replaced unit changes at most `rows` counted rows in each of
//! at most `2·groups` groups, so each group's count gets noise for `(ε, δ)/(2·groups)` under
//! GROUP BY, `(ε, δ)` without.

use super::accumulator::{CellCounts, CellStatistic, GroupStreams};
use super::dp_count::CountRelease;
use super::statistic::{
    Arg, ArgKind, Call, DpStatistic, Release, StatisticAccumulator, StatisticDoc, StatisticNoise,
};
use super::CallPlan;
use super::DpCount;
use crate::stats::mechanism::PrivacyLoss;
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::datatypes::DataType;
use datafusion::common::Result;
use std::sync::Arc;

/// The `dp_count_true` statistic.
#[derive(Debug, Clone, Copy)]
pub struct DpCountTrue;

const NAME: &str = "dp_count_true";

impl DpStatistic for DpCountTrue {
    fn name(&self) -> &'static str {
        NAME
    }

    fn args(&self) -> &'static [Arg] {
        const ARGS: &[Arg] = &[Arg::new(
            "condition",
            ArgKind::Condition,
            "A row counts when it is TRUE.",
        )];
        ARGS
    }

    fn option_keys(&self) -> &'static [&'static str] {
        &["mechanism", "delta", "gaussian_calibration"]
    }

    fn returns(&self) -> &'static str {
        "BIGINT"
    }

    /// Its section of `docs/sql-reference.md`, once in the registry.
    fn doc(&self) -> StatisticDoc {
        StatisticDoc {
            summary: "Noisy count of the rows where `condition` is TRUE in each group.",
            details: &["- Guarantee: `(ε, δ)`-DP, calibrated as `dp_count`'s."],
            sql_example: "SELECT dp_count_true(age > 65, 1.0) AS older FROM visits",
            related: &[&DpCount],
        }
    }

    fn return_type(&self, _types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn is_nullable(&self) -> bool {
        false
    }

    /// Calibrated as `dp_count`'s counts are: one count per group.
    fn calibrate(&self, call: &Call<'_>) -> Result<Release> {
        Ok(Release::new(TrueCount(CountRelease::calibrate(
            NAME, call,
        )?)))
    }

    fn state(&self) -> Vec<(&'static str, DataType)> {
        vec![("count", DataType::UInt64)]
    }

    fn accumulator(
        &self,
        plan: Arc<CallPlan>,
        _types: &[DataType],
    ) -> Result<StatisticAccumulator> {
        let noise = plan.release.noise::<TrueCount>(NAME)?.clone();
        Ok(Box::new(CellCounts::new(noise, &plan)))
    }
}

/// The calibrated noise of one call, and the release of its one counter per group.
#[derive(Debug, Clone, PartialEq)]
pub struct TrueCount(CountRelease);

impl StatisticNoise for TrueCount {
    fn loss(&self) -> PrivacyLoss {
        self.0.loss()
    }
}

impl CellStatistic for TrueCount {
    const CELLS: usize = 1;

    fn count(
        &self,
        counts: &mut [u64],
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
    ) {
        let condition = values[0].as_boolean();
        for (row, &group) in group_indices.iter().enumerate() {
            let holds = condition.is_valid(row) && condition.value(row);
            let kept = opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row));
            counts[group] += u64::from(holds && kept);
        }
    }

    fn release(&self, counts: &[u64], streams: &mut GroupStreams) -> Result<ArrayRef> {
        self.0.release_counts(NAME, counts, streams)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::functions::aggregate::DpAggregate;
    use arrow::array::Int64Array;
    use datafusion::prelude::SessionContext;

    /// `docs/architecture.md` shows this file up to its tests, as it is.
    #[test]
    fn the_architecture_guide_shows_this_file() {
        let guide = include_str!("../../../../docs/architecture.md");
        let file = include_str!("example.rs");
        let code = &file[..file.find("#[cfg(test)]").unwrap()];
        let shown = guide
            .split("```rust\n")
            .nth(1)
            .and_then(|block| block.split("```\n").next())
            .expect("a rust block in docs/architecture.md");
        assert_eq!(shown.trim_end(), code.trim_end());
    }

    /// Registered as its line in `statistics!` would, it plans, binds and releases.
    #[tokio::test]
    async fn a_new_statistic_runs_through_the_privacy_layer() {
        let ctx = SessionContext::new();
        crate::sql::register(&ctx).unwrap();
        ctx.register_udaf(DpAggregate::udaf(&DpCountTrue).as_ref().clone());
        ctx.sql("SET dp.public_groups = 'assert'").await.unwrap();
        // With an enormous epsilon the noise is 0: the exact counts.
        let sql = "SELECT g, dp_count_true(x > 1, 1e9) AS n, \
                   dp_count_true(x > 1, 1e9) FILTER (WHERE x < 3) AS m \
                   FROM (VALUES (1, 'a'), (2, 'a'), (3, 'b'), (NULL, 'b')) AS t(x, g) \
                   GROUP BY g ORDER BY g";
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let column = |i: usize| {
            let array = batches[0].column(i).as_any().downcast_ref::<Int64Array>();
            array.unwrap().values().to_vec()
        };
        assert_eq!(column(1), [1, 1]);
        assert_eq!(column(2), [1, 0]);
        let err = ctx
            .sql("SELECT dp_count_true(1, 1.0) FROM (VALUES (1)) AS t(x)")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("dp_count_true: argument 'condition' must be BOOLEAN"),
            "{err}"
        );
    }
}
