//! The 2x2-table core: what the statistics of one private 2x2 table share. A table statistic
//! (the relative risk and its interval, the odds ratio's, the risk difference's) is one file
//! with a unit type implementing [`TableStatistic`] (its name, the statistic of the table it
//! releases, whether it releases the interval struct, its option keys); the blanket
//! [`DpStatistic`] implementation here gives it the arguments `(outcome, exposed)`, the
//! calibration, the exact cell counts and the release.
//!
//! Cells: `a` = outcome ∧ exposed, `b` = ¬outcome ∧ exposed, `c` = outcome ∧ ¬exposed,
//! `d` = ¬outcome ∧ ¬exposed; rows where either argument is NULL do not count. Privacy: each
//! cell's noise is calibrated for `(ε/2, δ/2)` per group at sensitivity `max_rows_per_unit`
//! (a replaced unit leaves one cell and joins another), so the whole table is `(ε, δ)`-DP
//! under replace-one neighbours ([`crate::stats::relative_risk`] has the argument, paper,
//! LaplaceNoisedCounts); every estimate and interval is post-processing of the one noisy table.

use super::accumulator::{CellCounts, CellStatistic, GroupStreams};
use super::statistic::{
    Arg, ArgKind, Call, DpStatistic, Release, StatisticAccumulator, StatisticDoc, StatisticNoise,
};
use super::CallPlan;
use crate::sql::options::DpOptions;
use crate::stats::mechanism::{check_count_epsilon, short_number, PrivacyLoss, RealLaplace};
use crate::stats::methods::LocalRatioRelease;
use crate::stats::{
    Contribution, GroupSizes, IntervalMethod, IntervalSpec, Mechanism, RatioMethod, RatioStatistic,
    ReleasedTable, TableNoise, TwoByTwo,
};
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array, StructArray};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use arrow::datatypes::{DataType, Field, Fields};
use arrow::util::bit_chunk_iterator::BitChunks;
use datafusion::common::{exec_datafusion_err, plan_datafusion_err, plan_err, Result};
use std::fmt::Debug;
use std::sync::Arc;

/// A statistic of one private 2x2 table. Implementing it (one file, a unit type) makes the
/// type a [`DpStatistic`].
pub trait TableStatistic: Debug + Send + Sync + 'static {
    /// The SQL name, `dp_*`.
    const NAME: &'static str;
    /// The statistic of the table it releases.
    const STATISTIC: RatioStatistic;
    /// Whether it releases the interval struct ([`interval_type`]) rather than the estimate.
    const INTERVAL: bool;
    /// Keys accepted in the per-call options string. With `method`, the paper's other ratio
    /// methods of the relative risk are accepted (an interval statistic refuses them by name).
    const OPTION_KEYS: &'static [&'static str];
    /// Its reference text ([`DpStatistic::doc`]).
    const DOC: StatisticDoc;
}

/// The fields of the interval struct ([`interval_type`]), as each interval statistic's
/// reference shows them.
pub const INTERVAL_FIELDS: &str = "Returns a struct:\n\n\
    | field | meaning |\n\
    |---|---|\n\
    | `estimate` | the estimate, as above |\n\
    | `lower`, `upper` | the interval (for a ratio, `lower` is at least 0 and `upper` may be `+∞` with `ci_method=score`) |\n\
    | `exposed_cases`, `exposed_total`, `unexposed_cases`, `unexposed_total` | the released counts (totals exact only with `group_sizes=public`) |\n\
    | `confidence` | the confidence level used |\n\
    | `seeded` | true when `dp.seed` produced the noise: the result is **not private** |";

/// The arguments of every table statistic.
const ARGS: &[Arg] = &[
    Arg::new(
        "outcome",
        ArgKind::Condition,
        "TRUE for a case (a row with the outcome). Rows where either argument is NULL do not count.",
    ),
    Arg::new(
        "exposed",
        ArgKind::Condition,
        "TRUE for an exposed row, FALSE for an unexposed one.",
    ),
];

impl<T: TableStatistic> DpStatistic for T {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn args(&self) -> &'static [Arg] {
        ARGS
    }

    fn option_keys(&self) -> &'static [&'static str] {
        T::OPTION_KEYS
    }

    fn doc(&self) -> StatisticDoc {
        T::DOC
    }

    fn returns(&self) -> &'static str {
        if T::INTERVAL {
            "STRUCT"
        } else {
            "DOUBLE"
        }
    }

    fn interval(&self) -> Option<RatioStatistic> {
        T::INTERVAL.then_some(T::STATISTIC)
    }

    fn return_type(&self, _types: &[DataType]) -> Result<DataType> {
        Ok(if T::INTERVAL {
            interval_type()
        } else {
            DataType::Float64
        })
    }

    /// NULL only with public group sizes (a group without exposed or unexposed rows) or
    /// PTR's FAIL.
    fn is_nullable(&self) -> bool {
        true
    }

    fn calibrate(&self, call: &Call<'_>) -> Result<Release> {
        let name = T::NAME;
        let options = call.options;
        let Contribution { rows, groups } = call.contribution;
        // `method` is the relative risk point release's (and refused by the interval statistics that accept
        // the key); the other table statistics ignore the session's setting.
        if T::OPTION_KEYS.contains(&"method") && options.method != RatioMethod::NoisyCounts {
            if (rows, groups) != (1, 1) {
                return plan_err!(
                    "{name}: method '{}' supports one row per unit in one group only (max_rows_per_unit = max_groups_per_unit = 1)",
                    options.method
                );
            }
            return local_release::<T>(options, call.epsilon).map(Release::new);
        }
        // The method asked for, or the statistic's own default interval.
        let method = options
            .ci_method
            .unwrap_or_else(|| IntervalMethod::default_for(T::STATISTIC));
        if T::INTERVAL {
            method
                .check_statistic(T::STATISTIC)
                .map_err(|e| plan_datafusion_err!("{name}: {e}"))?;
        }
        call.check_split(2.0, "each cell of the 2x2 table")?;
        let noise = TableNoise::calibrate_for_shape(
            options.mechanism,
            call.epsilon,
            options.delta,
            options.gaussian_calibration,
            options.group_sizes,
            // With `k > 1` rows per unit a replaced unit can leave two cells of a table and
            // join two others (L1 `2k`, each by at most `k`): a spread shape.
            if rows > 1 {
                call.shape(2, rows)?.spread()
            } else {
                call.shape(2, rows)?
            },
        )
        .map_err(|e| plan_datafusion_err!("{name}: {e}"))?;
        Ok(Release::new(TableRelease::Counts {
            noise,
            confidence: options.confidence,
            method,
        }))
    }

    fn state(&self) -> Vec<(&'static str, DataType)> {
        ["cell_a", "cell_b", "cell_c", "cell_d"]
            .into_iter()
            .map(|label| (label, DataType::UInt64))
            .collect()
    }

    fn accumulator(
        &self,
        plan: Arc<CallPlan>,
        _types: &[DataType],
    ) -> Result<StatisticAccumulator> {
        let cells = TableCells {
            name: T::NAME,
            statistic: T::STATISTIC,
            interval: T::INTERVAL,
            seeded: plan.options.seed.is_some(),
            release: plan.release.noise::<TableRelease>(T::NAME)?.clone(),
        };
        Ok(Box::new(CellCounts::new(cells, &plan)))
    }
}

/// The calibrated noise of a table statistic's call.
#[derive(Debug, Clone, PartialEq)]
pub enum TableRelease {
    /// The noisy 2x2 table, and the interval the interval statistics compute from it.
    Counts {
        noise: TableNoise,
        confidence: f64,
        method: IntervalMethod,
    },
    /// One of the paper's other ratio methods of the relative risk (public group sizes; no
    /// interval).
    LocalRatio(LocalRatioRelease),
}

impl StatisticNoise for TableRelease {
    fn loss(&self) -> PrivacyLoss {
        match self {
            // The cells' noise states what the table's release costs.
            Self::Counts { noise, .. } => noise.cell.loss(),
            // The paper's local methods state theirs from their own noise and parameters.
            Self::LocalRatio(release) => release.loss(),
        }
    }

    fn without_zcdp_map(&self) -> Option<String> {
        match self {
            Self::Counts { .. } => None,
            Self::LocalRatio(release) => release.loss().rho.is_none().then(|| {
                let method = release.method;
                format!(
                    "method '{method}' has no zCDP privacy map (its delta is a failure probability, paper Appendix C, not a bound on a Renyi divergence; noisy_counts, noised_log and naive have one)"
                )
            }),
        }
    }
}

/// Validates a call that uses one of the paper's local or naive ratio methods.
fn local_release<T: TableStatistic>(options: &DpOptions, epsilon: f64) -> Result<TableRelease> {
    let name = T::NAME;
    let method = options.method;
    if T::INTERVAL {
        return plan_err!(
            "{name}: method '{method}' releases no interval (only noisy_counts does; the other methods do not estimate the variance, paper Appendix C)"
        );
    }
    if T::STATISTIC != RatioStatistic::RelativeRisk {
        return plan_err!("{name}: method '{method}' releases a relative risk only");
    }
    if options.group_sizes != GroupSizes::Public {
        return plan_err!(
            "{name}: method '{method}' uses the exact group sizes; declare them public with group_sizes=public"
        );
    }
    // The method's own requirements (δ, PTR's bound) before the ε range below.
    LocalRatioRelease::check_requirements(method, options.delta, options.ptr_bound)
        .map_err(|e| plan_datafusion_err!("{name}: {e}"))?;
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
    LocalRatioRelease::calibrate(
        method,
        epsilon,
        options.delta,
        options.bias_correction,
        options.ptr_bound,
    )
    .map(TableRelease::LocalRatio)
    .map_err(|e| plan_datafusion_err!("{name}: {e}"))
}

/// A bound table statistic's cells and release: four exact counts per group, the estimate or
/// interval from the noisy table once per group.
struct TableCells {
    name: &'static str,
    statistic: RatioStatistic,
    interval: bool,
    seeded: bool,
    release: TableRelease,
}

/// Rows that count: the data arguments are non-NULL and the FILTER clause holds.
fn counted_rows(data: &[&ArrayRef], opt_filter: Option<&BooleanArray>) -> Option<NullBuffer> {
    let mut mask: Option<NullBuffer> = None;
    for array in data {
        mask = NullBuffer::union(mask.as_ref(), array.logical_nulls().as_ref());
    }
    if let Some(filter) = opt_filter {
        let holds = match filter.nulls() {
            Some(nulls) => filter.values() & nulls.inner(),
            None => filter.values().clone(),
        };
        mask = NullBuffer::union(mask.as_ref(), Some(&NullBuffer::new(holds)));
    }
    mask
}

/// Adds every counted row to its cell of its group's table, 64 rows at a time: the cell index
/// comes from the words of the outcome and exposed bitmaps, and the counted-rows mask bit (0 or
/// 1) is added without a branch, so the loop has no per-row dispatch or misprediction.
fn count_cells(
    counts: &mut [u64],
    group_indices: &[usize],
    outcome: &BooleanBuffer,
    exposed: &BooleanBuffer,
    mask: Option<&NullBuffer>,
) {
    let rows = group_indices.len();
    fn words(b: &BooleanBuffer, rows: usize) -> BitChunks<'_> {
        b.inner().bit_chunks(b.offset(), rows)
    }
    let (outcome_words, exposed_words) = (words(outcome, rows), words(exposed, rows));
    let mask_words = mask.map(|m| words(m.inner(), rows));
    let mut mask_iter = mask_words.as_ref().map(|w| w.iter_padded());
    for ((groups, o), e) in group_indices
        .chunks(64)
        .zip(outcome_words.iter_padded())
        .zip(exposed_words.iter_padded())
    {
        let m = mask_iter
            .as_mut()
            .and_then(|it| it.next())
            .unwrap_or(u64::MAX);
        let (not_o, not_e) = (!o, !e);
        for (j, &group) in groups.iter().enumerate() {
            // a = 0 (outcome ∧ exposed), b = 1 (¬outcome ∧ exposed), c = 2 (outcome ∧
            // ¬exposed), d = 3 (¬outcome ∧ ¬exposed).
            let cell = (((not_o >> j) & 1) | (((not_e >> j) & 1) << 1)) as usize;
            counts[group * 4 + cell] += (m >> j) & 1;
        }
    }
}

impl CellStatistic for TableCells {
    const CELLS: usize = 4;

    fn count(
        &self,
        counts: &mut [u64],
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
    ) {
        let outcome = values[0].as_boolean().values();
        let exposed = values[1].as_boolean().values();
        let mask = counted_rows(&[&values[0], &values[1]], opt_filter);
        count_cells(counts, group_indices, outcome, exposed, mask.as_ref());
    }

    fn release(&self, counts: &[u64], streams: &mut GroupStreams) -> Result<ArrayRef> {
        let name = self.name;
        let groups = counts.len() / Self::CELLS;
        let table = |g: usize| TwoByTwo::from_cells(&counts[g * Self::CELLS..][..Self::CELLS]);
        match &self.release {
            TableRelease::Counts {
                noise,
                confidence,
                method,
            } => {
                let statistic = self.statistic;
                let mut intervals = self
                    .interval
                    .then(|| {
                        IntervalColumns::new(
                            name,
                            statistic,
                            *noise,
                            *confidence,
                            *method,
                            self.seeded,
                            groups,
                        )
                    })
                    .transpose()?;
                let estimates = streams.release_groups(groups, |g, rng| {
                    let released = noise
                        .release(&table(g), rng)
                        .map_err(|e| exec_datafusion_err!("{name}: {e}"))?;
                    Ok(match &mut intervals {
                        Some(columns) => {
                            columns.push(&released);
                            None
                        }
                        None => released.estimate(statistic),
                    })
                })?;
                match intervals {
                    Some(columns) => columns.finish(),
                    None => Ok(Arc::new(Float64Array::from(estimates))),
                }
            }
            TableRelease::LocalRatio(release) => {
                let estimates = streams.release_groups(groups, |g, rng| {
                    release
                        .release(&table(g), rng)
                        .map_err(|e| exec_datafusion_err!("{name}: {e}"))
                })?;
                Ok(Arc::new(Float64Array::from(estimates)))
            }
        }
    }
}

fn interval_fields() -> Fields {
    Fields::from(vec![
        Field::new("estimate", DataType::Float64, true),
        Field::new("lower", DataType::Float64, true),
        Field::new("upper", DataType::Float64, true),
        Field::new("exposed_cases", DataType::Int64, false),
        Field::new("exposed_total", DataType::Int64, false),
        Field::new("unexposed_cases", DataType::Int64, false),
        Field::new("unexposed_total", DataType::Int64, false),
        Field::new("confidence", DataType::Float64, false),
        Field::new("seeded", DataType::Boolean, false),
    ])
}

/// The struct an interval statistic returns: `estimate`, `lower`, `upper` (the interval asked
/// for, [`crate::stats::ReleasedTable::interval`] and the score intervals of
/// [`crate::stats::score`], whose upper end may be `+∞`; the parametric bootstrap,
/// [`crate::stats::bootstrap`], is pure post-processing at no extra privacy cost), the
/// released counts `exposed_cases`, `exposed_total`, `unexposed_cases`, `unexposed_total` it
/// was computed from, `confidence`, and `seeded`, true when the noise came from `dp.seed` and
/// the result is **not private**.
pub fn interval_type() -> DataType {
    DataType::Struct(interval_fields())
}

/// The result columns of an interval statistic, filled one released table at a time so no
/// per-group intermediate is kept.
struct IntervalColumns {
    statistic: RatioStatistic,
    noise: TableNoise,
    spec: IntervalSpec,
    seeded: bool,
    estimate: Vec<Option<f64>>,
    lower: Vec<Option<f64>>,
    upper: Vec<Option<f64>>,
    counts: [Vec<i64>; 4],
}

impl IntervalColumns {
    fn new(
        name: &str,
        statistic: RatioStatistic,
        noise: TableNoise,
        confidence: f64,
        method: IntervalMethod,
        seeded: bool,
        capacity: usize,
    ) -> Result<Self> {
        let spec = noise
            .interval_spec(confidence, method)
            .map_err(|e| exec_datafusion_err!("{name}: {e}"))?;
        Ok(Self {
            statistic,
            noise,
            spec,
            seeded,
            estimate: Vec::with_capacity(capacity),
            lower: Vec::with_capacity(capacity),
            upper: Vec::with_capacity(capacity),
            counts: std::array::from_fn(|_| Vec::with_capacity(capacity)),
        })
    }

    fn push(&mut self, table: &ReleasedTable) {
        // The one interval entry point the coverage simulations use too.
        let interval = self.noise.interval(table, self.statistic, &self.spec);
        self.estimate.push(interval.map(|i| i.estimate));
        self.lower.push(interval.map(|i| i.lower));
        self.upper.push(interval.map(|i| i.upper));
        let values = [
            table.exposed_cases,
            table.exposed_total,
            table.unexposed_cases,
            table.unexposed_total,
        ];
        for (column, value) in self.counts.iter_mut().zip(values) {
            column.push(value);
        }
    }

    fn finish(self) -> Result<ArrayRef> {
        let rows = self.estimate.len();
        let [a, b, c, d] = self.counts;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Float64Array::from(self.estimate)),
            Arc::new(Float64Array::from(self.lower)),
            Arc::new(Float64Array::from(self.upper)),
            Arc::new(Int64Array::from(a)),
            Arc::new(Int64Array::from(b)),
            Arc::new(Int64Array::from(c)),
            Arc::new(Int64Array::from(d)),
            Arc::new(Float64Array::from(vec![self.spec.confidence; rows])),
            Arc::new(BooleanArray::from(vec![self.seeded; rows])),
        ];
        Ok(Arc::new(StructArray::try_new(
            interval_fields(),
            columns,
            None,
        )?))
    }
}
