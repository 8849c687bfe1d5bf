//! The vectorised accumulator of the built-in DP aggregates ([`CellCounts`]), and what every
//! statistic's accumulator shares: the per-group noise streams and seeded group keys
//! ([`GroupStreams`]) and the one-group wrapper DataFusion needs without GROUP BY
//! ([`SingleGroup`]).

use super::dp_rr_ci::IntervalColumns;
use super::statistic::StatisticAccumulator;
use super::{CallPlan, DpFunction, Release};
use crate::stats::mechanism::add_noise;
use crate::stats::methods::release_relative_risk;
use crate::stats::rng::{group_key_digest, group_stream, secure_rng, seeded_rng, NoiseRng};
use crate::stats::TwoByTwo;
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array, UInt64Array};
use arrow::buffer::{BooleanBuffer, NullBuffer};
use arrow::datatypes::DataType;
use arrow::datatypes::UInt64Type;
use arrow::util::bit_chunk_iterator::BitChunks;
use datafusion::common::{exec_datafusion_err, Result, ScalarValue};
use datafusion::logical_expr::{Accumulator, EmitTo, GroupsAccumulator};
use datafusion_functions_aggregate_common::aggregate::groups_accumulator::accumulate::accumulate_indices;
use std::sync::Arc;

/// The noise streams of one call's groups and, in seeded mode, each group's key digest: the
/// one place where groups meet their noise, shared by every statistic's accumulator.
pub struct GroupStreams {
    /// Seeded (non-private) mode only: the key digest of each group, `None` until seen.
    keys: Option<Vec<Option<u64>>>,
    /// How many group-key arguments end the call's arguments (seeded mode). Counted from the
    /// end: the physical plan drops the constant arguments before them
    /// ([`crate::sql::privacy::exec::constant_args`]).
    key_args: usize,
    /// Whether the state carries a group-key column.
    key_column: bool,
    /// The secure stream, opened on first use.
    rng: Option<NoiseRng>,
    /// Seeded (non-private) mode: the call's base stream; each group reads its own ChaCha20
    /// stream of it, selected by the group key.
    seeded_base: Option<NoiseRng>,
}

impl GroupStreams {
    pub fn new(plan: &CallPlan) -> Self {
        // Only grouped, seeded calls need keys; without GROUP BY the one group uses key 0.
        let keys = (plan.options.seed.is_some() && plan.key_args > 0).then(Vec::new);
        Self {
            keys,
            key_args: plan.key_args,
            key_column: plan.key_args > 0,
            seeded_base: plan.options.seed.map(|seed| seeded_rng(seed, &plan.stream)),
            rng: None,
        }
    }

    pub fn resize(&mut self, total_num_groups: usize) {
        if let Some(keys) = &mut self.keys {
            keys.resize(total_num_groups, None);
        }
    }

    /// The group-key arguments of a call's `values`: the last `key_args` (counted from the
    /// end, since the physical plan may have dropped the constants before them).
    fn key_values<'a>(&self, values: &'a [ArrayRef]) -> &'a [ArrayRef] {
        &values[values.len().saturating_sub(self.key_args)..]
    }

    /// Records the key digest of every group first seen in this batch (seeded mode only);
    /// `values` are all the call's arguments.
    pub fn note_keys(&mut self, values: &[ArrayRef], group_indices: &[usize]) -> Result<()> {
        let key_values = self.key_values(values);
        let Some(keys) = &mut self.keys else {
            return Ok(());
        };
        for (row, &group) in group_indices.iter().enumerate() {
            if keys[group].is_none() {
                keys[group] = Some(row_key_digest(key_values, row)?);
            }
        }
        Ok(())
    }

    /// Merges the key column of a partial state (the column after the statistic's own).
    pub fn merge_keys(&mut self, key_column: Option<&ArrayRef>, group_indices: &[usize]) {
        let (Some(keys), Some(partial)) = (&mut self.keys, key_column) else {
            return;
        };
        let partial = partial.as_primitive::<UInt64Type>();
        for (row, &group) in group_indices.iter().enumerate() {
            if keys[group].is_none() && partial.is_valid(row) {
                keys[group] = Some(partial.value(row));
            }
        }
    }

    /// Removes the first `n` groups' keys (all of them when `n` is the number of groups).
    pub fn take(&mut self, n: usize) -> Option<Vec<Option<u64>>> {
        self.keys.as_mut().map(|keys| {
            if n == keys.len() {
                std::mem::take(keys)
            } else {
                keys.drain(..n).collect()
            }
        })
    }

    /// The key column of a state, when the call has one.
    pub fn key_state(&self, keys: Option<Vec<Option<u64>>>) -> Option<ArrayRef> {
        self.key_column.then(|| {
            let keys: UInt64Array = keys.unwrap_or_default().into_iter().collect();
            Arc::new(keys) as ArrayRef
        })
    }

    /// The key column of `convert_to_state` for input rows `values` (all the arguments).
    pub fn convert_keys(&self, values: &[ArrayRef], rows: usize) -> Result<Option<ArrayRef>> {
        if !self.key_column {
            return Ok(None);
        }
        let key_values = self.key_values(values);
        let keys = (0..rows)
            .map(|row| row_key_digest(key_values, row).map(Some))
            .collect::<Result<UInt64Array>>()?;
        Ok(Some(Arc::new(keys)))
    }

    /// The noise stream of emitted group `g`: the per-accumulator secure stream, or in seeded
    /// mode the group's own stream of the call's seeded base. `seeded` holds it.
    #[inline]
    pub fn group_rng<'a>(
        &'a mut self,
        keys: Option<&[Option<u64>]>,
        g: usize,
        seeded: &'a mut Option<NoiseRng>,
    ) -> Result<&'a mut NoiseRng> {
        match &self.seeded_base {
            Some(base) => {
                let key = keys.and_then(|k| k[g]);
                Ok(seeded.insert(group_stream(base, key.unwrap_or(0))))
            }
            None => {
                if self.rng.is_none() {
                    self.rng = Some(secure_rng().map_err(|e| exec_datafusion_err!("{e}"))?);
                }
                Ok(self.rng.as_mut().expect("opened above"))
            }
        }
    }

    /// Releases the first `n` groups in order: takes their keys, opens each group's noise
    /// stream and calls `release` with the group's index and stream, the one place where a
    /// statistic's groups meet their noise (the cell counts have [`CellCounts`]'s own loop).
    pub fn release_groups<T>(
        &mut self,
        n: usize,
        mut release: impl FnMut(usize, &mut NoiseRng) -> Result<T>,
    ) -> Result<Vec<T>> {
        let keys = self.take(n);
        let mut seeded = None;
        let mut out = Vec::with_capacity(n);
        for g in 0..n {
            let rng = self.group_rng(keys.as_deref(), g, &mut seeded)?;
            out.push(release(g, rng)?);
        }
        Ok(out)
    }

    pub fn size(&self) -> usize {
        self.keys
            .as_ref()
            .map_or(0, |k| k.capacity() * size_of::<Option<u64>>())
    }
}

/// Exact per-group cell counts in one flat vector (`cells` counters per group), plus the
/// groups' noise streams. Noise is drawn only in [`GroupsAccumulator::evaluate`].
pub struct CellCounts {
    function: DpFunction,
    cells: usize,
    counts: Vec<u64>,
    streams: GroupStreams,
    plan: Arc<CallPlan>,
}

impl CellCounts {
    pub fn new(function: DpFunction, plan: Arc<CallPlan>) -> Self {
        Self {
            function,
            cells: function.cells(),
            counts: Vec::new(),
            streams: GroupStreams::new(&plan),
            plan,
        }
    }

    fn resize(&mut self, total_num_groups: usize) {
        self.counts.resize(total_num_groups * self.cells, 0);
        self.streams.resize(total_num_groups);
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

    fn table_cell(outcome: &BooleanBuffer, exposed: &BooleanBuffer, row: usize) -> usize {
        // a = outcome ∧ exposed (0), b = ¬outcome ∧ exposed (1), c = outcome ∧ ¬exposed (2),
        // d = ¬outcome ∧ ¬exposed (3).
        (!outcome.value(row) as usize) | ((!exposed.value(row) as usize) << 1)
    }

    fn take_emitted(&mut self, emit_to: EmitTo) -> (Vec<u64>, Option<Vec<Option<u64>>>) {
        let groups = self.counts.len() / self.cells;
        let n = match emit_to {
            EmitTo::All => groups,
            EmitTo::First(n) => n.min(groups),
        };
        let counts = if n == groups {
            std::mem::take(&mut self.counts)
        } else {
            self.counts.drain(..n * self.cells).collect()
        };
        let keys = self.streams.take(n);
        (counts, keys)
    }

    /// Calls `release` once per emitted group, with its exact cells and its noise stream:
    /// the one place where groups meet their noise.
    fn for_each_group(
        &mut self,
        counts: &[u64],
        keys: Option<&[Option<u64>]>,
        mut release: impl FnMut(&[u64], &mut NoiseRng) -> Result<()>,
    ) -> Result<()> {
        let mut seeded = None;
        for (g, cells) in counts.chunks_exact(self.cells).enumerate() {
            let rng = self.streams.group_rng(keys, g, &mut seeded)?;
            release(cells, rng)?;
        }
        Ok(())
    }
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
            // a = 0 (outcome, exposed), b = 1, c = 2, d = 3: see `table_cell`.
            let cell = (((not_o >> j) & 1) | (((not_e >> j) & 1) << 1)) as usize;
            counts[group * 4 + cell] += (m >> j) & 1;
        }
    }
}

/// Stable digest of one row's group key, from the display form of each key value.
fn row_key_digest(key_values: &[ArrayRef], row: usize) -> Result<u64> {
    let texts = key_values
        .iter()
        .map(|array| {
            if array.is_null(row) {
                Ok(None)
            } else {
                ScalarValue::try_from_array(array, row).map(|v| Some(v.to_string()))
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(group_key_digest(texts.iter().map(|t| t.as_deref())))
}

impl GroupsAccumulator for CellCounts {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.resize(total_num_groups);
        self.streams.note_keys(values, group_indices)?;
        let counts = &mut self.counts;
        match self.function {
            DpFunction::Count => {
                accumulate_indices(
                    group_indices,
                    values[0].logical_nulls().as_ref(),
                    opt_filter,
                    |group| counts[group] += 1,
                );
            }
            _ => {
                let outcome = values[0].as_boolean().values();
                let exposed = values[1].as_boolean().values();
                let mask = Self::counted_rows(&[&values[0], &values[1]], opt_filter);
                count_cells(counts, group_indices, outcome, exposed, mask.as_ref());
            }
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
        let cells = self.cells;
        for (cell, partial) in values[..cells].iter().enumerate() {
            let partial = partial.as_primitive::<UInt64Type>().values();
            for (&group, &count) in group_indices.iter().zip(partial.iter()) {
                self.counts[group * cells + cell] += count;
            }
        }
        self.streams.merge_keys(values.get(cells), group_indices);
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let (counts, keys) = self.take_emitted(emit_to);
        let groups = counts.len() / self.cells;
        let plan = Arc::clone(&self.plan);
        let name = self.function.function_name();
        match &plan.release {
            Release::Count(noise) => {
                let mut out = Vec::with_capacity(groups);
                self.for_each_group(&counts, keys.as_deref(), |cells, rng| {
                    // Checked: past i64 an error, never a wrap that would carry the count.
                    let noisy = add_noise(cells[0], noise.sample(rng))
                        .map_err(|e| exec_datafusion_err!("{name}: {e}"))?;
                    out.push(noisy);
                    Ok(())
                })?;
                Ok(Arc::new(Int64Array::from(out)))
            }
            Release::Table {
                noise,
                confidence,
                method,
            } => {
                let statistic = self.function.statistic().expect("table function");
                let mut intervals = self
                    .function
                    .has_interval()
                    .then(|| {
                        IntervalColumns::new(
                            name,
                            statistic,
                            *noise,
                            *confidence,
                            *method,
                            plan.options.seed.is_some(),
                            groups,
                        )
                    })
                    .transpose()?;
                let mut estimates =
                    Vec::with_capacity(if intervals.is_some() { 0 } else { groups });
                self.for_each_group(&counts, keys.as_deref(), |cells, rng| {
                    let released = noise
                        .release(&TwoByTwo::from_cells(cells), rng)
                        .map_err(|e| exec_datafusion_err!("{name}: {e}"))?;
                    match &mut intervals {
                        Some(columns) => columns.push(&released),
                        None => estimates.push(released.estimate(statistic)),
                    }
                    Ok(())
                })?;
                match intervals {
                    Some(columns) => columns.finish(),
                    None => Ok(Arc::new(Float64Array::from(estimates))),
                }
            }
            Release::LocalRatio {
                method,
                epsilon,
                delta,
                bias_correction,
                ptr_bound,
            } => {
                let mut estimates = Vec::with_capacity(groups);
                self.for_each_group(&counts, keys.as_deref(), |cells, rng| {
                    let estimate = release_relative_risk(
                        *method,
                        &TwoByTwo::from_cells(cells),
                        *epsilon,
                        *delta,
                        *bias_correction,
                        *ptr_bound,
                        rng,
                    )
                    .map_err(|e| exec_datafusion_err!("{name}: {e}"))?;
                    estimates.push(estimate);
                    Ok(())
                })?;
                Ok(Arc::new(Float64Array::from(estimates)))
            }
            Release::Statistic(_) => Err(exec_datafusion_err!(
                "{name}: bound to another statistic's calibration"
            )),
        }
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let (counts, keys) = self.take_emitted(emit_to);
        let cells = self.cells;
        let mut state: Vec<ArrayRef> = if cells == 1 {
            vec![Arc::new(UInt64Array::from(counts))]
        } else {
            (0..cells)
                .map(|cell| {
                    let column: UInt64Array = counts
                        .iter()
                        .skip(cell)
                        .step_by(cells)
                        .copied()
                        .map(Some)
                        .collect();
                    Arc::new(column) as ArrayRef
                })
                .collect()
        };
        state.extend(self.streams.key_state(keys));
        Ok(state)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let rows = values[0].len();
        let data: Vec<&ArrayRef> = values[..self.function.function_args().len()]
            .iter()
            .collect();
        let mask = Self::counted_rows(&data, opt_filter);
        let counted = |row: usize| mask.as_ref().is_none_or(|m| m.is_valid(row));
        let mut state: Vec<ArrayRef> = match self.function {
            DpFunction::Count => {
                let ones: UInt64Array = (0..rows).map(|r| Some(counted(r) as u64)).collect();
                vec![Arc::new(ones)]
            }
            _ => {
                let outcome = values[0].as_boolean().values();
                let exposed = values[1].as_boolean().values();
                (0..4)
                    .map(|cell| {
                        let column: UInt64Array = (0..rows)
                            .map(|r| {
                                Some(
                                    (counted(r) && Self::table_cell(outcome, exposed, r) == cell)
                                        as u64,
                                )
                            })
                            .collect();
                        Arc::new(column) as ArrayRef
                    })
                    .collect()
            }
        };
        state.extend(self.streams.convert_keys(values, rows)?);
        Ok(state)
    }

    fn size(&self) -> usize {
        self.counts.capacity() * size_of::<u64>() + self.streams.size() + size_of::<Self>()
    }
}

/// The plain `Accumulator` DataFusion needs for aggregates without GROUP BY: one group of a
/// statistic's `GroupsAccumulator`.
pub struct SingleGroup {
    name: &'static str,
    inner: StatisticAccumulator,
    /// Empty arrays of the argument types: an empty batch that makes the one group exist.
    empty: Vec<ArrayRef>,
}

impl SingleGroup {
    pub fn new(name: &'static str, inner: StatisticAccumulator, types: &[DataType]) -> Self {
        Self {
            name,
            inner,
            empty: types.iter().map(arrow::array::new_empty_array).collect(),
        }
    }

    /// Makes the one group exist (a query over no rows still releases it).
    fn one_group(&mut self) -> Result<()> {
        self.inner.update_batch(&self.empty, &[], None, 1)
    }
}

impl std::fmt::Debug for SingleGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SingleGroup({})", self.name)
    }
}

impl Accumulator for SingleGroup {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let rows = values.first().map_or(0, |v| v.len());
        self.inner.update_batch(values, &vec![0; rows], None, 1)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let rows = states.first().map_or(0, |v| v.len());
        self.inner.merge_batch(states, &vec![0; rows], 1)
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.one_group()?;
        let array = self.inner.evaluate(EmitTo::All)?;
        ScalarValue::try_from_array(&array, 0)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.one_group()?;
        self.inner
            .state(EmitTo::All)?
            .iter()
            .map(|a| ScalarValue::try_from_array(a, 0))
            .collect()
    }

    fn size(&self) -> usize {
        self.inner.size()
    }
}
