//! What every statistic's accumulator shares: the per-group noise streams and seeded group
//! keys ([`GroupStreams`]), the vectorised accumulator of the statistics released from a fixed
//! number of exact counters per group ([`CellCounts`]: a count's one cell, the four cells of
//! a 2x2 table, [`super::table`]) and the one-group wrapper DataFusion needs without GROUP BY
//! ([`SingleGroup`]).

use super::statistic::StatisticAccumulator;
use super::CallPlan;
use crate::stats::rng::{group_key_digest, group_stream, secure_rng, seeded_rng, NoiseRng};
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, UInt64Array};
use arrow::datatypes::DataType;
use arrow::datatypes::UInt64Type;
use datafusion::common::{exec_datafusion_err, Result, ScalarValue};
use datafusion::logical_expr::{Accumulator, EmitTo, GroupsAccumulator};
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
    /// statistic's groups meet their noise.
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

/// A statistic released from `CELLS` exact counters per group: how a batch's rows add to them
/// and how the counters of emitted groups become the results. [`CellCounts`] keeps the
/// counters, merges partial states and ships them; the noise is drawn only in `release`.
pub trait CellStatistic: Send + Sync + 'static {
    /// Exact counters kept per group.
    const CELLS: usize;

    /// Adds the rows of a batch that count (data arguments non-NULL, the FILTER clause holds)
    /// to their groups' counters, `CELLS` per group in `counts`.
    fn count(
        &self,
        counts: &mut [u64],
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
    );

    /// The results of the groups whose counters are `counts` (`CELLS` per group, in order):
    /// each group meets its noise through [`GroupStreams::release_groups`].
    fn release(&self, counts: &[u64], streams: &mut GroupStreams) -> Result<ArrayRef>;
}

/// Exact per-group counters in one flat vector (`C::CELLS` per group), plus the groups' noise
/// streams. Noise is drawn only in [`GroupsAccumulator::evaluate`].
pub struct CellCounts<C> {
    statistic: C,
    counts: Vec<u64>,
    streams: GroupStreams,
}

impl<C: CellStatistic> CellCounts<C> {
    pub fn new(statistic: C, plan: &CallPlan) -> Self {
        Self {
            statistic,
            counts: Vec::new(),
            streams: GroupStreams::new(plan),
        }
    }

    fn resize(&mut self, total_num_groups: usize) {
        self.counts.resize(total_num_groups * C::CELLS, 0);
        self.streams.resize(total_num_groups);
    }

    /// The counters of the groups `emit_to` names, removed.
    fn take_counts(&mut self, emit_to: EmitTo) -> Vec<u64> {
        let groups = self.counts.len() / C::CELLS;
        let n = match emit_to {
            EmitTo::All => groups,
            EmitTo::First(n) => n.min(groups),
        };
        if n == groups {
            std::mem::take(&mut self.counts)
        } else {
            self.counts.drain(..n * C::CELLS).collect()
        }
    }

    /// One state column per counter.
    fn columns(counts: Vec<u64>) -> Vec<ArrayRef> {
        if C::CELLS == 1 {
            return vec![Arc::new(UInt64Array::from(counts))];
        }
        (0..C::CELLS)
            .map(|cell| {
                let column: UInt64Array = counts
                    .iter()
                    .skip(cell)
                    .step_by(C::CELLS)
                    .copied()
                    .map(Some)
                    .collect();
                Arc::new(column) as ArrayRef
            })
            .collect()
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

impl<C: CellStatistic> GroupsAccumulator for CellCounts<C> {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.resize(total_num_groups);
        self.streams.note_keys(values, group_indices)?;
        self.statistic
            .count(&mut self.counts, values, group_indices, opt_filter);
        Ok(())
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.resize(total_num_groups);
        let cells = C::CELLS;
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
        let counts = self.take_counts(emit_to);
        self.statistic.release(&counts, &mut self.streams)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let counts = self.take_counts(emit_to);
        let keys = self.streams.take(counts.len() / C::CELLS);
        let mut state = Self::columns(counts);
        state.extend(self.streams.key_state(keys));
        Ok(state)
    }

    /// Each row as its own group's counters.
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let rows = values[0].len();
        let mut counts = vec![0; rows * C::CELLS];
        let group_indices: Vec<usize> = (0..rows).collect();
        self.statistic
            .count(&mut counts, values, &group_indices, opt_filter);
        let mut state = Self::columns(counts);
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
