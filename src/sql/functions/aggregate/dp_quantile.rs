//! `dp_quantile(expr, q, lower, upper, epsilon [, options])`: a DP `q`-quantile of the
//! non-NULL values of `expr`, each clamped to the declared literal bounds `[lower, upper]`.
//!
//! The method is the noisy count tree of [`crate::stats::quantile`] (Google DP's quantile tree;
//! Qardaji, Yang & Li 2013): `16^4` leaves over `[lower, upper]`, every node count with exact
//! integer noise ([`crate::stats::CountNoise`]), the quantile found by descending the noisy
//! tree. Sensitivity (replace-one neighbours): a unit's at most `rows = max_rows_per_unit`
//! values in a group add `rows` to one node per level, so the group's tree moves by at most
//! `rows · 4` in L1 (and no more in L2). Replacing the unit removes its values from one tree
//! and adds them to the same or another, so, as for `dp_count` with GROUP BY, each group's
//! counts get noise for `(ε, δ) / (2 · max_groups_per_unit)` at sensitivity `rows · 4`; the
//! whole result is `(ε, δ)`-DP. The answer is post-processing of the noisy counts, so it
//! is a DOUBLE in `[lower, upper]` even for an empty group (noise only), never NULL.
//! `q` is a literal in `[0, 1]`; NaN values do not count (as NULL), `±∞` clamp to the
//! bounds.

use super::accumulator::GroupStreams;
use super::statistic::{
    Arg, ArgKind, Call, DpStatistic, Release, StatisticAccumulator, StatisticDoc,
    StatisticNoise,
};
use super::CallPlan;
use crate::stats::mechanism::{short_number, PrivacyLoss};
use crate::stats::quantile::{self, LeafCounts, QuantileTree};
use crate::stats::{CountNoise, GaussianCalibration};
use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, ListArray, UInt32Array, UInt64Array,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, Float64Type, UInt32Type, UInt64Type};
use datafusion::common::{internal_err, plan_datafusion_err, plan_err, Result};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion_functions_aggregate_common::aggregate::groups_accumulator::accumulate::accumulate;
use std::sync::Arc;

/// The `dp_quantile` statistic.
#[derive(Debug, Clone, Copy)]
pub struct DpQuantile;

const NAME: &str = "dp_quantile";

fn leaves_type() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::UInt32, false)))
}

fn counts_type() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::UInt64, false)))
}

impl DpStatistic for DpQuantile {
    fn name(&self) -> &'static str {
        NAME
    }

    fn args(&self) -> &'static [Arg] {
        const ARGS: &[Arg] = &[
            Arg::new(
                "expr",
                ArgKind::Number,
                "The values; NaN does not count, `±∞` counts as the bound.",
            ),
            Arg::new(
                "q",
                ArgKind::Constant,
                "The quantile, in `[0, 1]` (0.5 for the median).",
            ),
            Arg::new(
                "lower",
                ArgKind::Constant,
                "The lower clamping bound, finite and below `upper`.",
            ),
            Arg::new("upper", ArgKind::Constant, "The upper clamping bound, finite."),
        ];
        ARGS
    }

    fn option_keys(&self) -> &'static [&'static str] {
        &["mechanism", "delta", "gaussian_calibration"]
    }

    fn returns(&self) -> &'static str {
        "DOUBLE"
    }

    fn doc(&self) -> StatisticDoc {
        StatisticDoc {
            summary: "A `q`-quantile of the non-NULL values of `expr` in each group, each clamped \
                      to `[lower, upper]`.",
            details: &[
                "`q` is a constant in `[0, 1]` (0.5 for the median); `lower` and `upper` are \
                 constants, `lower < upper`, both finite. NaN values do not count; `±∞` count as \
                 the bound. `FILTER (WHERE ...)` works.",
                "- Method: the quantile tree of Google's DP library (Qardaji, Yang & Li 2013; \
                 Cormode et al. 2019, arXiv:1908.10268): `[lower, upper]` is cut into \
                 `16^4 = 65,536` leaves; each value counts once per level; every node count gets \
                 exact integer noise; the quantile is found by descending the noisy tree \
                 (children below 0.75% of their siblings' total read as empty) and interpolating \
                 in the last node. Ranks are kept in `[0.005, 0.995]`. Resolution: one leaf, \
                 `(upper − lower)/65,536`.\n\
                 - Guarantee: `(ε, δ)`-DP as `dp_count`, under replace-one neighbours. A unit's at \
                 most `max_rows_per_unit` values add `max_rows_per_unit` to one node per level: \
                 sensitivity `4 × max_rows_per_unit` per tree, noised at `(ε/2, δ/2)` per group (a \
                 replaced unit leaves one tree and joins one, in the same group or another) and \
                 `ε/max_groups_per_unit` as for `dp_count`.\n\
                 - The answer is always in `[lower, upper]`, also for an empty group (then it is \
                 noise only); it is accurate when a group has many more values than the noise \
                 scale `8 × max_rows_per_unit / ε` per node.\n\
                 - Refused, naming the argument: `q` outside `[0, 1]` or not a constant, bounds \
                 that are not constant finite numbers, `lower >= upper`, `upper − lower` past the \
                 largest DOUBLE, and the epsilons a count refuses at sensitivity \
                 `4 × max_rows_per_unit`.",
            ],
            sql_example: "SELECT dp_quantile(age, 0.5, 0, 100, 1.0) AS median_age FROM visits",
            related: &[],
        }
    }

    /// Every number as DOUBLE (the tree reads positions in `[lower, upper]`).
    fn coerce(&self, types: &[DataType]) -> Result<Vec<DataType>> {
        let coerced = super::statistic::coerce_by_kind(NAME, self.args(), types)?;
        Ok(vec![DataType::Float64; coerced.len()])
    }

    fn return_type(&self, _types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn calibrate(&self, call: &Call<'_>) -> Result<Release> {
        let q = call.number(0, "q")?;
        if !(0.0..=1.0).contains(&q) {
            return plan_err!(
                "{NAME}: argument 'q'={} must be in [0, 1] (0.5 for the median)",
                short_number(q)
            );
        }
        let tree = QuantileTree::new(call.number(1, "lower")?, call.number(2, "upper")?)
            .map_err(|e| plan_datafusion_err!("{NAME}: argument {e}"))?;
        let sensitivity = QuantileTree::sensitivity(call.contribution.rows)
            .map_err(|e| plan_datafusion_err!("{NAME}: {e}"))?;
        let options = call.options;
        // Each tree's counts are calibrated as one value of sensitivity `4k` (the L1 norm of
        // a unit's rows over the tree's four levels), per tree and side: the per-value split,
        // whatever the session's Gaussian calibration.
        let calibration = match options.gaussian_calibration {
            GaussianCalibration::Classic => GaussianCalibration::Classic,
            _ => GaussianCalibration::PerCell,
        };
        let noise = CountNoise::calibrate_release(
            options.mechanism,
            call.epsilon,
            options.delta,
            call.shape(2, sensitivity)?,
            calibration,
        )
        .map_err(|e| {
            // The split and the sensitivity, so that the refusal explains itself.
            let argument = match (e.contains("delta"), options.delta) {
                (true, Some(d)) => format!("'delta'={}", short_number(d)),
                (true, None) => "'delta'".to_string(),
                (false, _) => format!("'epsilon'={}", short_number(call.epsilon)),
            };
            let groups = match call.contribution.groups {
                1 => String::new(),
                g => format!(" / {g} (max_groups_per_unit)"),
            };
            plan_datafusion_err!(
                "{NAME}: argument {argument} is out of range: with epsilon{groups} / 2 per tree (a replaced unit leaves one tree and joins one) and sensitivity {sensitivity} (max_rows_per_unit x tree height 4): {e}"
            )
        })?;
        Ok(Release::new(QuantileNoise { tree, q, noise }))
    }

    fn state(&self) -> Vec<(&'static str, DataType)> {
        vec![("leaves", leaves_type()), ("counts", counts_type())]
    }

    fn accumulator(&self, plan: Arc<CallPlan>, _types: &[DataType]) -> Result<StatisticAccumulator> {
        let noise = plan.release.noise::<QuantileNoise>(NAME)?;
        Ok(Box::new(QuantileAccumulator {
            trees: Vec::new(),
            entries: 0,
            streams: GroupStreams::new(&plan),
            noise: noise.clone(),
        }))
    }
}

/// The calibration of one `dp_quantile` call: the domain, the quantile and the node noise.
#[derive(Debug, Clone, PartialEq)]
struct QuantileNoise {
    tree: QuantileTree,
    q: f64,
    noise: CountNoise,
}

impl StatisticNoise for QuantileNoise {
    fn loss(&self) -> PrivacyLoss {
        self.noise.loss()
    }
}

/// Exact leaf counts per group; the tree's noise once per group in `evaluate`.
struct QuantileAccumulator {
    trees: Vec<LeafCounts>,
    /// The leaf entries of all `trees`, kept as they change: `size` is asked after every
    /// batch and must not walk every group's tree.
    entries: usize,
    streams: GroupStreams,
    noise: QuantileNoise,
}

impl QuantileAccumulator {
    /// The trees of the groups `emit_to` names, removed, their entries uncounted.
    fn take(&mut self, emit_to: EmitTo) -> Vec<LeafCounts> {
        let trees = emit_to.take_needed(&mut self.trees);
        self.entries -= trees.iter().map(|t| t.len()).sum::<usize>();
        trees
    }

    fn resize(&mut self, groups: usize) {
        if self.trees.len() < groups {
            self.trees.resize_with(groups, LeafCounts::new);
        }
        self.streams.resize(groups);
    }
}

/// Adds each counted value of `values` (non-NULL, in the domain, the filter holds) to the
/// tree of its group; the number of leaf entries this created.
fn add_values(
    tree: QuantileTree,
    trees: &mut [LeafCounts],
    values: &ArrayRef,
    group_indices: &[usize],
    opt_filter: Option<&BooleanArray>,
) -> usize {
    let mut created = 0;
    accumulate(
        group_indices,
        values.as_primitive::<Float64Type>(),
        opt_filter,
        |group, v| {
            if let Some(leaf) = tree.leaf(v) {
                created += usize::from(quantile::add(&mut trees[group], leaf, 1));
            }
        },
    );
    created
}

/// Leaf lists and count lists, one entry per group (the partial state).
fn state_arrays(trees: &[LeafCounts]) -> (ArrayRef, ArrayRef) {
    let lengths = trees.iter().map(|t| t.len());
    let offsets = OffsetBuffer::<i32>::from_lengths(lengths);
    let leaves: UInt32Array = trees.iter().flat_map(|t| t.keys().copied()).collect();
    let counts: UInt64Array = trees.iter().flat_map(|t| t.values().copied()).collect();
    let leaves = ListArray::new(
        Arc::new(Field::new_list_field(DataType::UInt32, false)),
        offsets.clone(),
        Arc::new(leaves),
        None,
    );
    let counts = ListArray::new(
        Arc::new(Field::new_list_field(DataType::UInt64, false)),
        offsets,
        Arc::new(counts),
        None,
    );
    (Arc::new(leaves), Arc::new(counts))
}

impl GroupsAccumulator for QuantileAccumulator {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.resize(total_num_groups);
        self.streams.note_keys(values, group_indices)?;
        self.entries += add_values(
            self.noise.tree,
            &mut self.trees,
            &values[0],
            group_indices,
            opt_filter,
        );
        Ok(())
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.resize(total_num_groups);
        let (leaves, counts) = (values[0].as_list::<i32>(), values[1].as_list::<i32>());
        for (row, &group) in group_indices.iter().enumerate() {
            if leaves.is_null(row) {
                continue;
            }
            let (l, c) = (leaves.value(row), counts.value(row));
            let (l, c) = (l.as_primitive::<UInt32Type>(), c.as_primitive::<UInt64Type>());
            if l.len() != c.len() {
                return internal_err!("{NAME}: a partial state's leaves and counts differ");
            }
            for (leaf, count) in l.values().iter().zip(c.values().iter()) {
                if *leaf >= QuantileTree::leaves() {
                    return internal_err!("{NAME}: a partial state names leaf {leaf}");
                }
                self.entries += usize::from(quantile::add(&mut self.trees[group], *leaf, *count));
            }
        }
        self.streams.merge_keys(values.get(2), group_indices);
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let trees = self.take(emit_to);
        let QuantileNoise { tree, q, noise } = self.noise.clone();
        let out = self.streams.release_groups(trees.len(), |g, rng| {
            tree.quantile(&trees[g], q, &mut || noise.sample(rng))
                .map_err(|e| datafusion::common::exec_datafusion_err!("{NAME}: {e}"))
        })?;
        Ok(Arc::new(Float64Array::from(out)))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let trees = self.take(emit_to);
        let keys = self.streams.take(trees.len());
        let (leaves, counts) = state_arrays(&trees);
        let mut state = vec![leaves, counts];
        state.extend(self.streams.key_state(keys));
        Ok(state)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let rows = values[0].len();
        let mut trees = vec![LeafCounts::new(); rows];
        let group_indices: Vec<usize> = (0..rows).collect();
        add_values(
            self.noise.tree,
            &mut trees,
            &values[0],
            &group_indices,
            opt_filter,
        );
        let (leaves, counts) = state_arrays(&trees);
        let mut state = vec![leaves, counts];
        state.extend(self.streams.convert_keys(values, rows)?);
        Ok(state)
    }

    fn size(&self) -> usize {
        // A BTreeMap entry (12 bytes of key and value) with its share of the node: about 48.
        self.trees.capacity() * size_of::<LeafCounts>()
            + self.entries * 48
            + self.streams.size()
            + size_of::<Self>()
    }
}
