//! `BoundContributionsExec`: contribution bounding as one streaming pass, the physical form
//! of [`BoundContributions`] (issue 43).
//!
//! Its input is hash-partitioned by the unit (its required distribution: DataFusion inserts a
//! `RepartitionExec`, Ballista a shuffle), so all of one unit's rows reach one partition. Each
//! partition reads its input once and keeps, per unit, the sample the bound allows, in memory:
//!
//! - units are interned with DataFusion's own group table (`GroupValues`, as a hash aggregate
//!   does), so the per-row work is a hash aggregate's;
//! - each unit keeps its `max_groups_per_unit` groups of smallest (keyed hash of (unit, keys),
//!   keys); a group that arrives with a smaller order evicts the unit's largest, and a row of a
//!   group not kept is dropped as it arrives. The hash is [`keyed_hash`]'s, so the choice is the
//!   one the sorted window made before (ties broken by the keys' row encoding, exact);
//! - each kept group keeps the `max_rows_per_unit` rows of smallest priority: a fresh draw from
//!   the operating system's source per row (bottom-k of independent uniform priorities is a
//!   uniformly random k-subset: a streaming reservoir sample, Vitter 1985,
//!   doi:10.1145/3147.3165), or, in seeded (non-private) mode, the keyed hash of the row's
//!   values, so the sample does not depend on arrival order.
//!
//! Kept rows are copied out of each input batch (`take`) into batches of their own, so memory
//! holds the samples, not the input; when evicted rows make up half of what is held, the held
//! rows are compacted. Everything held is reserved from the query's memory pool; when the pool
//! refuses, the partition spills what it holds and the rest of its input to disk by bucket of
//! the unit and bounds each bucket alone at the end ([`Spill`]). At the end of its input the
//! partition emits its kept rows.
//!
//! No sort, and no work per partition beyond the rows: the window this replaces sorted every row
//! by a bucket of its unit and cost 34x the exact query on 10M rows (BENCHMARKS.md, issue 43).
//! Every choice depends only on the unit's own rows and the salt, so the bound holds whatever
//! the other rows are, in any partitioning and any order.

use crate::sql::privacy::rewrite::bounding::keyed_hash::{hash_row, hash_row_in};
use crate::sql::privacy::rewrite::bounding::node::BoundContributions;
use crate::stats::rng::{secure_rng, NoiseRng};
use arrow::array::{ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use arrow::compute::{interleave_record_batch, take_record_batch};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{exec_err, internal_err, plan_err, DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::SpillFile;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{LogicalPlan, UserDefinedLogicalNode};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::aggregates::group_values::{new_group_values, GroupValues};
use datafusion::physical_plan::aggregates::order::GroupOrdering;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet, SpillMetrics,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::SpillManager;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, ExecutionPlanProperties,
    PlanProperties,
};
use datafusion::physical_planner::{ExtensionPlanner, PhysicalPlanner};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use rand::RngCore;
use smallvec::SmallVec;
use std::sync::Arc;

/// What a partition bounds, by column index of the input (see [`BoundContributions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundSpec {
    pub unit: usize,
    pub keys: Vec<usize>,
    /// Seeded mode only: the columns whose keyed hash orders a group's rows.
    pub row_order: Vec<usize>,
    pub max_rows: u32,
    pub max_groups: u32,
    pub salt: u64,
}

/// The codec's marker of a [`BoundContributionsExec`], followed by its [`BoundSpec`].
pub const CODEC_MARKER: &[u8] = b"datafusion-dp/bound-contributions-exec/1:";
/// The codec's marker of a [`BoundContributions`] node, followed by its [`BoundSpec`] (column
/// indices into the node's input).
pub const NODE_CODEC_MARKER: &[u8] = b"datafusion-dp/bound-contributions/1:";

impl BoundSpec {
    /// The spec's bytes: `marker`, then little-endian u64s (unit, #keys, keys, #row order,
    /// row order, max_rows, max_groups, salt).
    pub fn encode(&self, marker: &[u8]) -> Vec<u8> {
        let mut out = marker.to_vec();
        let mut put = |v: u64| out.extend_from_slice(&v.to_le_bytes());
        put(self.unit as u64);
        put(self.keys.len() as u64);
        self.keys.iter().for_each(|&k| put(k as u64));
        put(self.row_order.len() as u64);
        self.row_order.iter().for_each(|&k| put(k as u64));
        put(u64::from(self.max_rows));
        put(u64::from(self.max_groups));
        put(self.salt);
        out
    }

    /// The spec written by [`encode`](Self::encode) (without the marker), or an error.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut words = bytes
            .chunks(8)
            .map(|c| <[u8; 8]>::try_from(c).map(u64::from_le_bytes));
        let mut next = || match words.next() {
            Some(Ok(v)) => Ok(v),
            _ => plan_err!("BoundContributionsExec: malformed definition"),
        };
        let index = |v: u64| usize::try_from(v).map_err(|e| DataFusionError::Plan(e.to_string()));
        let bound = |v: u64| u32::try_from(v).map_err(|e| DataFusionError::Plan(e.to_string()));
        let unit = index(next()?)?;
        let n = next()?.min(bytes.len() as u64);
        let keys = (0..n).map(|_| index(next()?)).collect::<Result<_>>()?;
        let n = next()?.min(bytes.len() as u64);
        let row_order = (0..n).map(|_| index(next()?)).collect::<Result<_>>()?;
        let spec = Self {
            unit,
            keys,
            row_order,
            max_rows: bound(next()?)?,
            max_groups: bound(next()?)?,
            salt: next()?,
        };
        if next().is_ok() {
            return plan_err!("BoundContributionsExec: malformed definition");
        }
        Ok(spec)
    }

    /// The spec of `node`, by column index of its input.
    pub fn of(node: &BoundContributions) -> Result<Self> {
        let schema = node.input.schema();
        let index = |c| schema.index_of_column(c);
        Ok(Self {
            unit: index(&node.unit)?,
            keys: node.keys.iter().map(index).collect::<Result<_>>()?,
            row_order: node.row_order.iter().map(index).collect::<Result<_>>()?,
            max_rows: node.max_rows,
            max_groups: node.max_groups,
            salt: node.salt,
        })
    }

    /// The node this spec describes over `input` (a Ballista scheduler decoding a trusted
    /// client's plan).
    pub fn node(&self, input: LogicalPlan) -> Result<BoundContributions> {
        let schema = input.schema();
        let width = schema.fields().len();
        let column = |&i: &usize| match i < width {
            true => Ok(datafusion::common::Column::from(schema.qualified_field(i))),
            false => plan_err!("BoundContributions: no column {i} in an input of {width}"),
        };
        Ok(BoundContributions {
            unit: column(&self.unit)?,
            keys: self.keys.iter().map(column).collect::<Result<_>>()?,
            row_order: self.row_order.iter().map(column).collect::<Result<_>>()?,
            max_rows: self.max_rows,
            max_groups: self.max_groups,
            salt: self.salt,
            input,
        })
    }
}

/// Contribution bounding in one streaming pass (module docs).
#[derive(Debug)]
pub struct BoundContributionsExec {
    input: Arc<dyn ExecutionPlan>,
    spec: BoundSpec,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl BoundContributionsExec {
    pub fn try_new(input: Arc<dyn ExecutionPlan>, spec: BoundSpec) -> Result<Self> {
        let width = input.schema().fields().len();
        let columns = std::iter::once(&spec.unit)
            .chain(&spec.keys)
            .chain(&spec.row_order);
        if let Some(c) = columns.into_iter().find(|&&c| c >= width) {
            return plan_err!("BoundContributionsExec: no column {c} in an input of {width}");
        }
        if spec.max_rows == 0 || spec.max_groups == 0 {
            return plan_err!("BoundContributionsExec: the bounds must be at least 1");
        }
        let properties = PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            input.output_partitioning().clone(),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Ok(Self {
            input,
            spec,
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    pub fn spec(&self) -> &BoundSpec {
        &self.spec
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    fn column_name(&self, i: usize) -> String {
        self.input.schema().field(i).name().clone()
    }
}

impl DisplayAs for BoundContributionsExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let keys: Vec<String> = self
            .spec
            .keys
            .iter()
            .map(|&k| format!("{}@{k}", self.column_name(k)))
            .collect();
        write!(
            f,
            "BoundContributionsExec: unit={}@{}, keys=[{}], max_rows_per_unit={}, \
             max_groups_per_unit={}, sample={}",
            self.column_name(self.spec.unit),
            self.spec.unit,
            keys.join(", "),
            self.spec.max_rows,
            self.spec.max_groups,
            if self.spec.row_order.is_empty() {
                "random"
            } else {
                "seeded (non-private)"
            }
        )
    }
}

impl ExecutionPlan for BoundContributionsExec {
    fn name(&self) -> &str {
        "BoundContributionsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    /// All of one unit's rows in one partition.
    fn required_input_distribution(&self) -> Vec<Distribution> {
        let unit = Column::new(&self.column_name(self.spec.unit), self.spec.unit);
        vec![Distribution::KeyPartitioned(vec![Arc::new(unit)])]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return internal_err!("BoundContributionsExec takes one input");
        }
        Ok(Arc::new(Self::try_new(
            children.swap_remove(0),
            self.spec.clone(),
        )?))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, Arc::clone(&context))?;
        let reservation = MemoryConsumer::new(format!("BoundContributionsExec[{partition}]"))
            .register(context.memory_pool());
        let batch_size = context.session_config().batch_size().max(1);
        let bounder = Bounder::try_new(self.schema(), self.spec.clone(), reservation)?;
        let run = Run {
            baseline: BaselineMetrics::new(&self.metrics, partition),
            spill: SpillMetrics::new(&self.metrics, partition),
            context,
            partition,
            batch_size,
        };
        let output = futures::stream::once(bound_all(input, bounder, run)).try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            output,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// What one partition's run needs besides its input.
struct Run {
    baseline: BaselineMetrics,
    spill: SpillMetrics,
    context: Arc<TaskContext>,
    partition: usize,
    batch_size: usize,
}

/// Whether `error` is a refusal of memory.
fn refused_memory(error: &DataFusionError) -> bool {
    matches!(error.find_root(), DataFusionError::ResourcesExhausted(_))
}

/// Reads `input` to its end into `bounder`, then its kept rows in batches of `batch_size`.
/// When the partition is refused memory, what it holds and the rest of its input go to disk
/// by bucket of the unit ([`Spill`]), and each bucket is bounded alone at the end.
async fn bound_all(
    mut input: SendableRecordBatchStream,
    bounder: Bounder,
    run: Run,
) -> Result<BoxStream<'static, Result<RecordBatch>>> {
    let schema = Arc::clone(&bounder.schema);
    let spec = bounder.spec.clone();
    let mut bounder = Some(bounder);
    let mut spill: Option<(Spill, Priority)> = None;
    while let Some(batch) = input.next().await {
        let batch = batch?;
        let _timer = run.baseline.elapsed_compute().timer();
        if let Some((spill, priority)) = &mut spill {
            let priorities = priority.of(&batch, &spec)?;
            spill.write(&with_priority(&batch, priorities)?)?;
            continue;
        }
        let Some(active) = bounder.as_mut() else {
            return internal_err!("BoundContributionsExec: no bounder");
        };
        match active.push(&batch) {
            Ok(()) => {}
            Err(e) if refused_memory(&e) => {
                let Some(mut full) = bounder.take() else {
                    return internal_err!("BoundContributionsExec: no bounder");
                };
                let priority = std::mem::replace(&mut full.priority, Priority::Given(0));
                let reservation =
                    MemoryConsumer::new(format!("BoundContributionsExec[{}] spill", run.partition))
                        .register(run.context.memory_pool());
                let mut to_disk =
                    Spill::try_new(&run.context, &schema, &spec, run.spill.clone(), reservation)?;
                full.into_prioritised(run.batch_size, |held| to_disk.write(held))?;
                spill = Some((to_disk, priority));
            }
            Err(e) => return Err(e),
        }
    }
    let Some((spill, _)) = spill else {
        let Some(bounder) = bounder else {
            return internal_err!("BoundContributionsExec: no bounder");
        };
        run.baseline.record_output(bounder.live);
        run.baseline.done();
        return Ok(futures::stream::iter(bounder.into_batches(run.batch_size)).boxed());
    };
    let (manager, buckets) = spill.finish()?;
    run.baseline.done();
    let width = schema.fields().len();
    let spilled_schema = spill_schema(&schema);
    let Run {
        context,
        partition,
        batch_size,
        ..
    } = run;
    let bounded = futures::stream::iter(buckets).then(move |files| {
        let manager = manager.clone();
        let spec = spec.clone();
        let schema = Arc::clone(&spilled_schema);
        let pool = Arc::clone(context.memory_pool());
        async move {
            let reservation =
                MemoryConsumer::new(format!("BoundContributionsExec[{partition}] bucket"))
                    .register(&pool);
            let mut bucket =
                Bounder::with_priority(schema, spec, reservation, Priority::Given(width))?;
            for file in files {
                let mut stream = manager.read_spill_as_stream(file, None)?;
                while let Some(batch) = stream.next().await {
                    bucket.push(&batch?)?;
                }
            }
            Ok::<_, DataFusionError>(futures::stream::iter(bucket.into_batches(batch_size)))
        }
    });
    Ok(bounded.try_flatten().boxed())
}

/// One kept row: its priority and where it is held (batch << 32 | row).
#[derive(Debug, Clone, Copy)]
struct Sample {
    priority: u64,
    row: u64,
}

impl Sample {
    /// Where the row is held: (batch, row) in the bounder's held batches.
    fn place(&self) -> (usize, usize) {
        ((self.row >> 32) as usize, (self.row & 0xffff_ffff) as usize)
    }
}

/// One group a unit keeps (a (unit, keys) group; the unit itself without keys).
#[derive(Debug)]
struct Slot {
    /// The keyed hash of (unit, keys); 0 without keys.
    order: u64,
    /// The (unit, keys) row encoding, for exact equality and ties; empty without keys.
    /// Inline up to 24 bytes (two integers and a short string): a slot is made and dropped
    /// each time a unit's choice of group changes.
    key: SmallVec<[u8; 24]>,
    samples: SmallVec<[Sample; 1]>,
    /// The index in `samples` of the largest priority, once `samples` is full.
    worst: u32,
    /// The unit's next kept group ([`NO_SLOT`] after its last).
    next: u32,
}

/// A slot is 72 bytes: `smallvec`'s `union` feature stores each `SmallVec` without an enum tag
/// (88 bytes without it), and a query over ten million units holds ten million slots
/// (BENCHMARKS.md, "Bounding: a 72-byte slot").
const _: () = assert!(std::mem::size_of::<Slot>() == 72);

/// The end of a unit's chain of slots, and a unit without one.
const NO_SLOT: u32 = u32::MAX;

/// The per-partition state of [`BoundContributionsExec`] (module docs).
struct Bounder {
    spec: BoundSpec,
    schema: SchemaRef,
    groups_per_unit: usize,
    max_rows: usize,
    units: Box<dyn GroupValues>,
    unit_of_row: Vec<usize>,
    /// The first kept group of each unit (an index into `slots`, [`NO_SLOT`] for none); the
    /// others follow it through [`Slot::next`], in the order they were first kept. Four bytes
    /// a unit: a list per unit (24 bytes each) was 20 MB more fresh memory to fault in for a
    /// query over a million units (BENCHMARKS.md, "Bounding: a chain of slots").
    first_slot: Vec<u32>,
    slots: Vec<Slot>,
    /// Converts (unit, keys) to rows; `None` without keys.
    group_rows: Option<RowConverter>,
    /// Where each row's priority comes from.
    priority: Priority,
    /// Kept rows, copied out of the input (some since evicted).
    held: Vec<RecordBatch>,
    held_rows: usize,
    held_bytes: usize,
    /// Rows in samples.
    live: usize,
    /// Bytes of keys and of samples beyond the inline one.
    extra_bytes: usize,
    reservation: MemoryReservation,
}

impl Bounder {
    /// A bounder of batches of `schema`, their priorities drawn or hashed as `spec` says.
    fn try_new(schema: SchemaRef, spec: BoundSpec, reservation: MemoryReservation) -> Result<Self> {
        let priority = Priority::try_new(&schema, &spec)?;
        Self::with_priority(schema, spec, reservation, priority)
    }

    fn with_priority(
        schema: SchemaRef,
        spec: BoundSpec,
        reservation: MemoryReservation,
        priority: Priority,
    ) -> Result<Self> {
        let unit_schema = Arc::new(schema.project(&[spec.unit])?);
        let units = new_group_values(unit_schema, &GroupOrdering::None)?;
        let converter = |columns: &[usize]| -> Result<Option<RowConverter>> {
            let fields = columns
                .iter()
                .map(|&c| SortField::new(schema.field(c).data_type().clone()))
                .collect();
            Ok(Some(RowConverter::new(fields)?))
        };
        let group_rows = match spec.keys.is_empty() {
            true => None,
            false => {
                let mut columns = vec![spec.unit];
                columns.extend(&spec.keys);
                converter(&columns)?
            }
        };
        Ok(Self {
            groups_per_unit: spec.max_groups as usize,
            max_rows: spec.max_rows as usize,
            spec,
            schema,
            units,
            unit_of_row: vec![],
            first_slot: vec![],
            slots: vec![],
            group_rows,
            priority,
            held: vec![],
            held_rows: 0,
            held_bytes: 0,
            live: 0,
            extra_bytes: 0,
            reservation,
        })
    }

    /// A new slot for a group of `order` and `key`, not yet in a unit's chain.
    fn new_slot(&mut self, order: u64, key: &[u8]) -> u32 {
        let key = SmallVec::from_slice(key);
        self.extra_bytes += key_heap_bytes(&key);
        self.slots.push(Slot {
            order,
            key,
            samples: SmallVec::new(),
            worst: 0,
            next: NO_SLOT,
        });
        (self.slots.len() - 1) as u32
    }

    /// Slot `i` emptied of its samples and given to a group of `order` and `key`, in its
    /// place in its unit's chain (an evicted group's place goes to the group that evicts it).
    fn reuse_slot(&mut self, i: u32, order: u64, key: &[u8]) {
        let slot = &mut self.slots[i as usize];
        self.live -= slot.samples.len();
        self.extra_bytes -= key_heap_bytes(&slot.key) + sample_heap_bytes(&slot.samples);
        slot.order = order;
        slot.key.clear();
        slot.key.extend_from_slice(key);
        slot.samples = SmallVec::new();
        slot.worst = 0;
        self.extra_bytes += key_heap_bytes(&slot.key);
    }

    /// The slot of the row's group (`key`, of order `order_of()`) for unit `unit`, making one
    /// if the group is kept, or `None` if the unit keeps other groups. A group's order is its
    /// key's hash, so a row of a group the unit already keeps is found by its key alone and
    /// `order_of` is not called: the keyed hash is computed once per group a unit is offered,
    /// not once per row (a patient's visits in their one region hash once).
    fn slot_for(&mut self, unit: usize, key: &[u8], order_of: impl FnOnce() -> u64) -> Option<u32> {
        let mut worst: Option<u32> = None;
        let (mut kept, mut last) = (0usize, NO_SLOT);
        let mut s = self.first_slot[unit];
        while s != NO_SLOT {
            let slot = &self.slots[s as usize];
            if *slot.key == *key {
                return Some(s);
            }
            let larger = worst.is_none_or(|w| {
                let w = &self.slots[w as usize];
                (slot.order, &*slot.key) > (w.order, &*w.key)
            });
            if larger {
                worst = Some(s);
            }
            (kept, last) = (kept + 1, s);
            s = slot.next;
        }
        let order = order_of();
        if kept < self.groups_per_unit {
            let s = self.new_slot(order, key);
            match last {
                NO_SLOT => self.first_slot[unit] = s,
                last => self.slots[last as usize].next = s,
            }
            return Some(s);
        }
        let w = worst?;
        let w_slot = &self.slots[w as usize];
        if (order, key) >= (w_slot.order, &*w_slot.key) {
            return None;
        }
        self.reuse_slot(w, order, key);
        Some(w)
    }

    /// Offers the row held at `row` with `priority` to slot `s`; whether it was kept.
    fn offer(&mut self, s: u32, priority: u64, row: u64) -> bool {
        let max_rows = self.max_rows;
        let slot = &mut self.slots[s as usize];
        let sample = Sample { priority, row };
        if slot.samples.len() < max_rows {
            let before = sample_heap_bytes(&slot.samples);
            slot.samples.push(sample);
            self.extra_bytes += sample_heap_bytes(&slot.samples) - before;
            self.live += 1;
            if slot.samples.len() == max_rows {
                slot.worst = worst_of(&slot.samples);
            }
            return true;
        }
        let worst = slot.worst as usize;
        if priority >= slot.samples[worst].priority {
            return false;
        }
        slot.samples[worst] = sample;
        slot.worst = worst_of(&slot.samples);
        true
    }

    /// Each row's unit id into `unit_of_row`. A unit's rows often come together (a table
    /// written in the order of its unit, or of time within it): consecutive rows of one unit
    /// are looked up once. Otherwise every row is looked up.
    fn intern_units(&mut self, unit: &ArrayRef) -> Result<()> {
        let rows = unit.len();
        let heads: Option<Vec<usize>> = (rows > 1)
            .then(|| {
                let next = unit.slice(1, rows - 1);
                let previous = unit.slice(0, rows - 1);
                // NULL units are one unit: `IS DISTINCT FROM`.
                arrow::compute::kernels::cmp::distinct(&next, &previous).ok()
            })
            .flatten()
            .map(|differs| {
                std::iter::once(0)
                    .chain(differs.values().set_indices().map(|i| i + 1))
                    .collect()
            })
            .filter(|heads: &Vec<usize>| heads.len() <= rows / 2);
        let Some(heads) = heads else {
            return self
                .units
                .intern(&[Arc::clone(unit)], &mut self.unit_of_row);
        };
        let indices = UInt32Array::from_iter_values(heads.iter().map(|&h| h as u32));
        let first = arrow::compute::take(unit.as_ref(), &indices, None)?;
        let mut ids = Vec::with_capacity(heads.len());
        self.units.intern(&[first], &mut ids)?;
        self.unit_of_row.clear();
        for (k, &id) in ids.iter().enumerate() {
            let end = heads.get(k + 1).copied().unwrap_or(rows);
            let run = end - heads[k];
            self.unit_of_row.extend(std::iter::repeat_n(id, run));
        }
        Ok(())
    }

    /// Reads one input batch.
    fn push(&mut self, batch: &RecordBatch) -> Result<()> {
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(());
        }
        self.intern_units(batch.column(self.spec.unit))?;
        self.first_slot.resize(self.units.len(), NO_SLOT);
        let column = |c: &usize| Arc::clone(batch.column(*c));
        let group_rows = match &self.group_rows {
            Some(converter) => {
                let mut columns: Vec<ArrayRef> = vec![column(&self.spec.unit)];
                columns.extend(self.spec.keys.iter().map(column));
                Some(converter.convert_columns(&columns)?)
            }
            None => None,
        };
        // Random priorities are drawn only for rows that reach a sample (most rows of a
        // unit with many groups do not).
        let priorities = match &self.priority {
            Priority::Random(_) => None,
            _ => Some(self.priority.of(batch, &self.spec)?),
        };
        let batch_index = self.held.len() as u64;
        let mut kept: Vec<u32> = vec![];
        for row in 0..rows {
            let unit = self.unit_of_row[row];
            let slot = match &group_rows {
                Some(encoded) => {
                    let key = encoded.row(row);
                    let key = key.as_ref();
                    let salt = self.spec.salt;
                    self.slot_for(unit, key, || hash_row(salt, key))
                }
                None => self.slot_for(unit, &[], || 0),
            };
            let Some(slot) = slot else {
                continue;
            };
            let priority = match (&priorities, &mut self.priority) {
                (Some(given), _) => given.value(row),
                (None, Priority::Random(rng)) => rng.next_u64(),
                (None, _) => return internal_err!("BoundContributionsExec: no priorities"),
            };
            if self.offer(slot, priority, batch_index << 32 | kept.len() as u64) {
                kept.push(row as u32);
            }
        }
        if !kept.is_empty() {
            let taken = take_record_batch(batch, &UInt32Array::from(kept))?;
            self.held_rows += taken.num_rows();
            self.held_bytes += taken.get_array_memory_size();
            self.held.push(taken);
        }
        if self.held_rows > 2 * self.live + 65_536 {
            self.compact()?;
        }
        self.reservation.try_resize(self.memory_size())
    }

    /// Hands `write` the kept rows with their priorities as a last column, in batches of
    /// `batch_size` (what a spill writes: merged with later rows, the priorities choose the
    /// same sample). It runs when the pool has refused memory, so each batch goes to `write`
    /// as it is made (all of them at once were a copy of every kept row outside the pool),
    /// and the unit table is freed first, as in [`Self::into_batches`].
    fn into_prioritised(
        mut self,
        batch_size: usize,
        mut write: impl FnMut(&RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let mut kept = self.end_input();
        while let Some(batch) = kept.next_batch(batch_size) {
            let priorities = UInt64Array::from_iter_values(kept.chunk.iter().map(|x| x.priority));
            write(&with_priority(&batch?, priorities)?)?;
        }
        Ok(())
    }

    /// Ends the input: frees the unit table and the batch's unit ids (the kept rows are then
    /// found through `first_slot` alone), gives the pool back what they held, and moves the
    /// kept rows into a reader that copies them out a chunk at a time. A list of every kept
    /// row's place (16 bytes a row, 160 MB for 10M units) was held beside them through the
    /// whole output (BENCHMARKS.md, "Bounding: the kept rows read in place").
    fn end_input(&mut self) -> KeptRows {
        self.units.clear_shrink(0);
        self.unit_of_row = vec![];
        // The sizes only fall here, so this only shrinks.
        let freed = self.reservation.size().saturating_sub(self.memory_size());
        self.reservation.shrink(freed);
        KeptRows {
            first_slot: std::mem::take(&mut self.first_slot),
            slots: std::mem::take(&mut self.slots),
            held: std::mem::take(&mut self.held),
            cursor: SlotCursor::start(),
            chunk: vec![],
            rows: vec![],
            local: vec![],
        }
    }

    /// Bytes held: the unit table, the slots, the samples and the kept rows.
    fn memory_size(&self) -> usize {
        use std::mem::size_of;
        self.units.size()
            + self.unit_of_row.capacity() * size_of::<usize>()
            + self.first_slot.capacity() * size_of::<u32>()
            + self.slots.capacity() * size_of::<Slot>()
            + self.extra_bytes
            + self.held_bytes
    }

    /// Every kept row's place, in slot order.
    fn kept_rows(&self) -> Vec<(usize, usize)> {
        let mut all = vec![];
        SlotCursor::start().next_chunk(&self.first_slot, &self.slots, usize::MAX, &mut all);
        all.iter().map(Sample::place).collect()
    }

    /// Copies the kept rows into fresh batches, dropping evicted ones.
    fn compact(&mut self) -> Result<()> {
        const CHUNK: usize = 8192;
        let rows = self.kept_rows();
        let mut fresh = Vec::with_capacity(rows.len().div_ceil(CHUNK));
        let mut local = vec![];
        for chunk in rows.chunks(CHUNK) {
            fresh.push(interleave_held(&self.held, chunk, &mut local)?);
        }
        let mut next = 0u64;
        for &first in &self.first_slot {
            let mut s = first;
            while s != NO_SLOT {
                let slot = &mut self.slots[s as usize];
                for sample in slot.samples.iter_mut() {
                    sample.row = (next / CHUNK as u64) << 32 | (next % CHUNK as u64);
                    next += 1;
                }
                s = slot.next;
            }
        }
        self.held_rows = rows.len();
        self.held_bytes = fresh.iter().map(|b| b.get_array_memory_size()).sum();
        self.held = fresh;
        Ok(())
    }

    /// The kept rows, in batches of `batch_size`, read through [`Self::end_input`]'s reader.
    /// The unit table is not read again, so it is freed before the first batch: the two were
    /// held at once, at the query's peak (BENCHMARKS.md, "Bounding: the unit table freed
    /// before the output").
    fn into_batches(mut self, batch_size: usize) -> impl Iterator<Item = Result<RecordBatch>> {
        let mut kept = self.end_input();
        let schema = self.schema;
        // The reservation lives until the last batch is made.
        let reservation = self.reservation;
        // Batches read back from a spill carry their priority last: not an output column.
        let width = match self.priority {
            Priority::Given(_) => schema.fields().len() - 1,
            _ => schema.fields().len(),
        };
        let columns: Vec<usize> = (0..width).collect();
        std::iter::from_fn(move || {
            let _ = &reservation;
            let batch = kept.next_batch(batch_size)?;
            Some(batch.and_then(|batch| Ok(batch.project(&columns)?)))
        })
    }
}

/// A place in the kept samples' slot order: unit by unit, each unit's slots along its chain
/// (from `first_slot` through [`Slot::next`]), each slot's samples in turn.
struct SlotCursor {
    /// The next unit whose chain is read.
    unit: usize,
    /// The slot being read ([`NO_SLOT`]: the next unit's first).
    slot: u32,
    /// The next sample of `slot`.
    sample: usize,
}

impl SlotCursor {
    fn start() -> Self {
        Self {
            unit: 0,
            slot: NO_SLOT,
            sample: 0,
        }
    }

    /// Replaces `chunk` with the next `n` samples (fewer at the end); false when none is left.
    fn next_chunk(
        &mut self,
        first_slot: &[u32],
        slots: &[Slot],
        n: usize,
        chunk: &mut Vec<Sample>,
    ) -> bool {
        chunk.clear();
        while chunk.len() < n {
            if self.slot == NO_SLOT {
                let Some(&first) = first_slot.get(self.unit) else {
                    break;
                };
                self.unit += 1;
                self.slot = first;
                self.sample = 0;
                continue;
            }
            let slot = &slots[self.slot as usize];
            let take = (n - chunk.len()).min(slot.samples.len() - self.sample);
            chunk.extend_from_slice(&slot.samples[self.sample..self.sample + take]);
            self.sample += take;
            if self.sample == slot.samples.len() {
                self.slot = slot.next;
                self.sample = 0;
            }
        }
        !chunk.is_empty()
    }
}

/// A bounder's kept rows after its input has ended ([`Bounder::end_input`]), copied out of
/// its held batches a chunk at a time in slot order.
struct KeptRows {
    first_slot: Vec<u32>,
    slots: Vec<Slot>,
    held: Vec<RecordBatch>,
    cursor: SlotCursor,
    /// The samples of the last batch made (their priorities go with it into a spill).
    chunk: Vec<Sample>,
    rows: Vec<(usize, usize)>,
    local: Vec<usize>,
}

impl KeptRows {
    /// The next (at most) `n` kept rows as one batch; `None` when none is left.
    fn next_batch(&mut self, n: usize) -> Option<Result<RecordBatch>> {
        let more = self
            .cursor
            .next_chunk(&self.first_slot, &self.slots, n.max(1), &mut self.chunk);
        if !more {
            return None;
        }
        self.rows.clear();
        self.rows.extend(self.chunk.iter().map(Sample::place));
        Some(interleave_held(&self.held, &self.rows, &mut self.local))
    }
}

/// The rows at `rows` ((batch, row) in `held`), in that order, as one batch. Arrow's
/// `interleave` converts every batch it is given (`to_data` of each column) on each call, so
/// it is given only the batches that `rows` reads: a partition holds thousands of batches
/// at 100M rows, and handing all of them to the call for each chunk of output made the
/// copies quadratic (10.1 s for 100M rows against 2.1 s for 30M, issue 43's scaling).
/// `local` maps a held batch to its place among those read; it is kept across calls and
/// left all `usize::MAX` again, so a call costs its rows, not the held batches (a session's
/// `batch_size` may be 8: one call per 8 rows).
fn interleave_held(
    held: &[RecordBatch],
    rows: &[(usize, usize)],
    local: &mut Vec<usize>,
) -> Result<RecordBatch> {
    local.resize(held.len(), usize::MAX);
    let mut read: Vec<usize> = Vec::new();
    let remapped: Vec<(usize, usize)> = rows
        .iter()
        .map(|&(batch, row)| {
            if local[batch] == usize::MAX {
                local[batch] = read.len();
                read.push(batch);
            }
            (local[batch], row)
        })
        .collect();
    for &batch in &read {
        local[batch] = usize::MAX;
    }
    let batches: Vec<&RecordBatch> = read.iter().map(|&b| &held[b]).collect();
    Ok(interleave_record_batch(&batches, &remapped)?)
}

/// Where a row's priority (its place in its group's sample) comes from.
enum Priority {
    /// A fresh draw from the operating system's source per row (boxed: a ChaCha state is
    /// 320 bytes).
    Random(Box<NoiseRng>),
    /// Seeded (non-private): the keyed hash of the row-order columns.
    Seeded { rows: RowConverter, salt: u64 },
    /// Read from column `i` (batches read back from a spill).
    Given(usize),
}

impl Priority {
    fn try_new(schema: &SchemaRef, spec: &BoundSpec) -> Result<Self> {
        if spec.row_order.is_empty() {
            let rng = secure_rng()
                .map_err(|e| DataFusionError::Execution(format!("contribution bounding: {e}")))?;
            return Ok(Self::Random(Box::new(rng)));
        }
        let fields = spec
            .row_order
            .iter()
            .map(|&c| SortField::new(schema.field(c).data_type().clone()))
            .collect();
        Ok(Self::Seeded {
            rows: RowConverter::new(fields)?,
            salt: spec.salt,
        })
    }

    /// The priority of each row of `batch` (`spec` names the row-order columns).
    fn of(&mut self, batch: &RecordBatch, spec: &BoundSpec) -> Result<UInt64Array> {
        Ok(match self {
            Self::Random(rng) => (0..batch.num_rows()).map(|_| rng.next_u64()).collect(),
            Self::Seeded { rows, salt } => {
                let columns: Vec<ArrayRef> = spec
                    .row_order
                    .iter()
                    .map(|&c| Arc::clone(batch.column(c)))
                    .collect();
                let encoded = rows.convert_columns(&columns)?;
                encoded
                    .iter()
                    .map(|r| hash_row(*salt, r.as_ref()))
                    .collect()
            }
            Self::Given(i) => match batch.column(*i).as_any().downcast_ref::<UInt64Array>() {
                Some(given) => given.clone(),
                None => {
                    return internal_err!(
                        "BoundContributionsExec: a spilled batch lost its priorities"
                    )
                }
            },
        })
    }
}

/// `batch` with `priority` as a last column.
fn with_priority(batch: &RecordBatch, priority: UInt64Array) -> Result<RecordBatch> {
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(priority));
    Ok(RecordBatch::try_new(
        spill_schema(&batch.schema()),
        columns,
    )?)
}

/// `schema` with the priority column spilled rows carry.
fn spill_schema(schema: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<arrow::datatypes::FieldRef> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(arrow::datatypes::Field::new(
        "__dp_priority",
        arrow::datatypes::DataType::UInt64,
        false,
    )));
    Arc::new(arrow::datatypes::Schema::new(fields))
}

/// Buckets of units a spilling partition writes to disk; each is bounded alone afterwards,
/// with about 1/16 of the memory.
const SPILL_BUCKETS: usize = 16;
/// Rows a bucket buffers before it writes them as one spill file.
const SPILL_BUFFER_ROWS: usize = 65_536;
/// The second half of the key of the hash that spreads units over spill buckets (the first
/// is the query's salt): unrelated to the group order.
const SPILL_DOMAIN: u64 = u64::from_le_bytes(*b"dp-spill");

/// A partition's rows on disk, by bucket of the unit, each row with its priority
/// (Grace-style partitioning, as DataFusion's hash join and aggregate spill): every row of a
/// unit lands in one bucket, and the bottom-k sample of a group is the bottom-k of the union
/// of what was held and what came after, so bounding each bucket alone gives the sample the
/// partition would have kept in memory.
struct Spill {
    manager: SpillManager,
    unit: usize,
    unit_rows: RowConverter,
    salt: u64,
    buffers: Vec<Vec<RecordBatch>>,
    buffered: Vec<usize>,
    files: SpillBuckets,
    reservation: MemoryReservation,
}

/// The spill files of each bucket.
type SpillBuckets = Vec<Vec<Arc<dyn SpillFile>>>;

impl Spill {
    fn try_new(
        context: &TaskContext,
        schema: &SchemaRef,
        spec: &BoundSpec,
        metrics: SpillMetrics,
        reservation: MemoryReservation,
    ) -> Result<Self> {
        Ok(Self {
            manager: SpillManager::new(context.runtime_env(), metrics, spill_schema(schema)),
            unit: spec.unit,
            unit_rows: RowConverter::new(vec![SortField::new(
                schema.field(spec.unit).data_type().clone(),
            )])?,
            salt: spec.salt,
            buffers: (0..SPILL_BUCKETS).map(|_| vec![]).collect(),
            buffered: vec![0; SPILL_BUCKETS],
            files: (0..SPILL_BUCKETS).map(|_| vec![]).collect(),
            reservation,
        })
    }

    /// Writes `batch` (its priority last) to the buckets of its units.
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let units = self
            .unit_rows
            .convert_columns(&[Arc::clone(batch.column(self.unit))])?;
        let mut rows: Vec<Vec<u32>> = vec![vec![]; SPILL_BUCKETS];
        for (i, unit) in units.iter().enumerate() {
            let bucket =
                hash_row_in(SPILL_DOMAIN, self.salt, unit.as_ref()) as usize % SPILL_BUCKETS;
            rows[bucket].push(i as u32);
        }
        for (bucket, rows) in rows.into_iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let part = take_record_batch(batch, &UInt32Array::from(rows))?;
            self.reservation.grow(part.get_array_memory_size());
            self.buffered[bucket] += part.num_rows();
            self.buffers[bucket].push(part);
            if self.buffered[bucket] >= SPILL_BUFFER_ROWS {
                self.flush(bucket)?;
            }
        }
        Ok(())
    }

    fn flush(&mut self, bucket: usize) -> Result<()> {
        let batches = std::mem::take(&mut self.buffers[bucket]);
        self.buffered[bucket] = 0;
        let bytes: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
        if let Some(file) = self
            .manager
            .spill_record_batch_and_finish(&batches, "BoundContributionsExec")?
        {
            self.files[bucket].push(file);
        }
        self.reservation.shrink(bytes.min(self.reservation.size()));
        Ok(())
    }

    /// Every bucket written out: its files, bucket by bucket.
    fn finish(mut self) -> Result<(SpillManager, SpillBuckets)> {
        for bucket in 0..SPILL_BUCKETS {
            self.flush(bucket)?;
        }
        Ok((self.manager, self.files))
    }
}

/// Heap bytes of a key past its inline ones.
fn key_heap_bytes(key: &SmallVec<[u8; 24]>) -> usize {
    match key.spilled() {
        true => key.capacity(),
        false => 0,
    }
}

/// Heap bytes of a sample list past its inline one.
fn sample_heap_bytes(samples: &SmallVec<[Sample; 1]>) -> usize {
    match samples.spilled() {
        true => samples.capacity() * std::mem::size_of::<Sample>(),
        false => 0,
    }
}

/// The index of the largest priority.
fn worst_of(samples: &[Sample]) -> u32 {
    let mut worst = 0;
    for (i, s) in samples.iter().enumerate() {
        if s.priority > samples[worst].priority {
            worst = i;
        }
    }
    worst as u32
}

/// Plans a [`BoundContributions`] node as a [`BoundContributionsExec`].
#[derive(Debug, Default)]
pub struct BoundingPlanner;

#[async_trait]
impl ExtensionPlanner for BoundingPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session: &dyn Session,
        _planning_ctx: &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(node) = node.as_any().downcast_ref::<BoundContributions>() else {
            return Ok(None);
        };
        let ([_], [physical]) = (logical_inputs, physical_inputs) else {
            return exec_err!("BoundContributions takes one input");
        };
        let spec = BoundSpec::of(node)?;
        Ok(Some(Arc::new(BoundContributionsExec::try_new(
            Arc::clone(physical),
            spec,
        )?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::HashMap;
    use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("unit", DataType::Utf8, true),
            Field::new("key", DataType::Int64, false),
            Field::new("row", DataType::Int64, false),
        ]))
    }

    fn batch(units: &[Option<&str>], keys: &[i64]) -> RecordBatch {
        let rows: Vec<i64> = (0..units.len() as i64).collect();
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(StringArray::from(units.to_vec())),
                Arc::new(Int64Array::from(keys.to_vec())),
                Arc::new(Int64Array::from(rows)),
            ],
        )
        .unwrap()
    }

    fn bounder(spec: BoundSpec, pool_bytes: usize) -> Bounder {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(pool_bytes));
        Bounder::try_new(schema(), spec, MemoryConsumer::new("test").register(&pool)).unwrap()
    }

    fn spec(keys: bool, seeded: bool, max_rows: u32, max_groups: u32) -> BoundSpec {
        BoundSpec {
            unit: 0,
            keys: if keys { vec![1] } else { vec![] },
            row_order: if seeded { vec![0, 1, 2] } else { vec![] },
            max_rows,
            max_groups,
            salt: 7,
        }
    }

    /// Pushes `whole` into `b` in slices of `len` rows.
    fn push_in_slices(b: &mut Bounder, whole: &RecordBatch, len: usize) {
        let mut start = 0;
        while start < whole.num_rows() {
            let n = len.min(whole.num_rows() - start);
            b.push(&whole.slice(start, n)).unwrap();
            start += n;
        }
    }

    /// The kept rows' (unit, key, row), sorted.
    fn kept(b: Bounder) -> Vec<(Option<String>, i64, i64)> {
        let mut out = vec![];
        for batch in b.into_batches(3) {
            let batch = batch.unwrap();
            let units = batch.column(0).as_string::<i32>();
            let keys = batch
                .column(1)
                .as_primitive::<arrow::datatypes::Int64Type>();
            let rows = batch
                .column(2)
                .as_primitive::<arrow::datatypes::Int64Type>();
            for i in 0..batch.num_rows() {
                out.push((
                    units.is_valid(i).then(|| units.value(i).to_string()),
                    keys.value(i),
                    rows.value(i),
                ));
            }
        }
        out.sort();
        out
    }

    /// Rows in no order: p1 has groups 1 (rows 0, 4, 7), 2 (row 2) and 3 (row 5); the NULL
    /// unit is one unit with groups 1 (row 3) and 2 (row 6); p2 has group 1 (row 1).
    const UNITS: [Option<&str>; 8] = [
        Some("p1"),
        Some("p2"),
        Some("p1"),
        None,
        Some("p1"),
        Some("p1"),
        None,
        Some("p1"),
    ];
    const KEYS: [i64; 8] = [1, 1, 2, 1, 1, 3, 2, 1];

    /// Through thousands of rows that repeat groups and evict kept ones (40 units, 12 groups,
    /// 3,000 rows in an arbitrary order), the seeded sample is exactly the one computed
    /// directly from its definition: each unit's `max_groups` groups of smallest (keyed hash of
    /// (unit, key), encoding), and in each the `max_rows` rows of smallest keyed hash of the
    /// row. It goes through the chain of slots, slots rewritten in place when their group is
    /// evicted, and rows of groups already kept (found by their key).
    #[test]
    fn the_seeded_sample_is_the_one_its_definition_gives() {
        let rows = 3000;
        let (mut units, mut keys) = (vec![], vec![]);
        let mut state: u64 = 12345;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state >> 33
        };
        let names: Vec<String> = (0..40).map(|u| format!("u{u}")).collect();
        for _ in 0..rows {
            let u = next() % 41;
            units.push((u < 40).then(|| names[u as usize].as_str()));
            keys.push((next() % 12) as i64);
        }
        let converter = |types: &[DataType]| {
            RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect()).unwrap()
        };
        let groups = converter(&[DataType::Utf8, DataType::Int64]);
        let all = converter(&[DataType::Utf8, DataType::Int64, DataType::Int64]);
        let whole = batch(&units, &keys);
        let group_rows = groups
            .convert_columns(&[Arc::clone(whole.column(0)), Arc::clone(whole.column(1))])
            .unwrap();
        let all_rows = all.convert_columns(whole.columns()).unwrap();
        let mut by_unit: HashMap<Option<&str>, Vec<usize>> = HashMap::new();
        for (r, unit) in units.iter().enumerate() {
            by_unit.entry(*unit).or_default().push(r);
        }
        for (max_rows, max_groups) in [(1, 1), (3, 1), (1, 3), (2, 2), (3, 3)] {
            // The definition, unit by unit.
            let mut expected = vec![];
            for (unit, unit_rows) in &by_unit {
                let mut chosen: Vec<(u64, Vec<u8>)> = unit_rows
                    .iter()
                    .map(|&r| {
                        let key = group_rows.row(r).as_ref().to_vec();
                        (hash_row(7, &key), key)
                    })
                    .collect();
                chosen.sort();
                chosen.dedup();
                chosen.truncate(max_groups as usize);
                for (_, key) in &chosen {
                    let mut in_group: Vec<(u64, usize)> = unit_rows
                        .iter()
                        .filter(|&&r| group_rows.row(r).as_ref() == key.as_slice())
                        .map(|&r| (hash_row(7, all_rows.row(r).as_ref()), r))
                        .collect();
                    in_group.sort();
                    for &(_, r) in in_group.iter().take(max_rows as usize) {
                        expected.push((unit.map(str::to_string), keys[r], r as i64));
                    }
                }
            }
            expected.sort();
            for split in [7, 500] {
                let mut b = bounder(spec(true, true, max_rows, max_groups), usize::MAX);
                push_in_slices(&mut b, &whole, split);
                assert_eq!(
                    kept(b),
                    expected,
                    "max_rows {max_rows}, max_groups {max_groups}"
                );
            }
        }
    }

    /// Each unit keeps its `max_groups` groups of smallest keyed hash, the same groups the
    /// keyed hash orders first (checked against `hash_row` directly), with at most `max_rows`
    /// rows each, whatever the batches.
    #[test]
    fn keeps_each_units_first_groups_and_at_most_max_rows_of_each() {
        let order = |unit: Option<&str>, key: i64| {
            let converter = RowConverter::new(vec![
                SortField::new(DataType::Utf8),
                SortField::new(DataType::Int64),
            ])
            .unwrap();
            let rows = converter
                .convert_columns(&[
                    Arc::new(StringArray::from(vec![unit])) as ArrayRef,
                    Arc::new(Int64Array::from(vec![key])),
                ])
                .unwrap();
            hash_row(7, rows.row(0).as_ref())
        };
        for (max_rows, max_groups) in [(1, 1), (2, 1), (1, 2), (2, 2), (5, 5)] {
            for split in [1, 3, 8] {
                let mut b = bounder(spec(true, false, max_rows, max_groups), usize::MAX);
                push_in_slices(&mut b, &batch(&UNITS, &KEYS), split);
                let kept = kept(b);
                for unit in [Some("p1"), Some("p2"), None] {
                    let mut groups: Vec<i64> = (0..8)
                        .filter(|&r| UNITS[r] == unit)
                        .map(|r| KEYS[r])
                        .collect();
                    groups.sort_by_key(|&k| (order(unit, k), k));
                    groups.dedup();
                    let chosen: Vec<i64> = groups.into_iter().take(max_groups as usize).collect();
                    let mine: Vec<&(Option<String>, i64, i64)> =
                        kept.iter().filter(|k| k.0.as_deref() == unit).collect();
                    for k in &chosen {
                        let in_group = (0..8)
                            .filter(|&r| UNITS[r] == unit && KEYS[r] == *k)
                            .count();
                        let n = mine.iter().filter(|m| m.1 == *k).count();
                        assert_eq!(n, in_group.min(max_rows as usize), "{unit:?} {k}");
                    }
                    assert!(mine.iter().all(|m| chosen.contains(&m.1)), "{mine:?}");
                }
            }
        }
    }

    /// Runs of one unit are looked up once, NULL runs included, with the ids a lookup of
    /// every row gives; a unit that comes back after another keeps its id.
    #[test]
    fn runs_of_one_unit_get_the_ids_of_a_row_by_row_lookup() {
        let units: ArrayRef = Arc::new(StringArray::from(vec![
            Some("p1"),
            Some("p1"),
            Some("p1"),
            None,
            None,
            Some("p2"),
            Some("p2"),
            Some("p1"),
            Some("p1"),
            Some("p1"),
        ]));
        let mut b = bounder(spec(false, false, 1, 1), usize::MAX);
        b.intern_units(&units).unwrap();
        let runs = b.unit_of_row.clone();
        let mut direct = new_group_values(
            Arc::new(schema().project(&[0]).unwrap()),
            &GroupOrdering::None,
        )
        .unwrap();
        let mut ids = vec![];
        direct.intern(&[units], &mut ids).unwrap();
        assert_eq!(runs, ids);
        assert_eq!(runs, [0, 0, 0, 1, 1, 2, 2, 0, 0, 0]);
    }

    /// Seeded: the rows of smallest keyed hash of the row, whatever the arrival order.
    #[test]
    fn the_seeded_sample_does_not_depend_on_the_order() {
        let units = [Some("p"); 6];
        let keys = [1, 1, 1, 1, 1, 1];
        let forward = {
            let mut b = bounder(spec(false, true, 2, 1), usize::MAX);
            b.push(&batch(&units, &keys)).unwrap();
            kept(b)
        };
        let whole = batch(&units, &keys);
        let reversed = {
            let mut b = bounder(spec(false, true, 2, 1), usize::MAX);
            for i in (0..6).rev() {
                b.push(&whole.slice(i, 1)).unwrap();
            }
            kept(b)
        };
        assert_eq!(forward.len(), 2);
        assert_eq!(forward, reversed);
    }

    #[test]
    fn the_row_sample_is_uniform() {
        // One group of 4 rows, 1 kept: each row is kept with probability 1/4. Over 4000 draws
        // each count is Binomial(4000, 1/4): mean 1000, sd sqrt(4000·3/16) ≈ 27.4; 5 sd = 137.
        let mut counts = [0usize; 4];
        let whole = batch(&[Some("p"); 4], &[1; 4]);
        for draw in 0..4000 {
            let mut b = bounder(spec(true, false, 1, 1), usize::MAX);
            // Arrival in one batch or row by row: the same distribution.
            if draw % 2 == 0 {
                b.push(&whole).unwrap();
            } else {
                (0..4).for_each(|i| b.push(&whole.slice(i, 1)).unwrap());
            }
            for k in kept(b) {
                counts[k.2 as usize] += 1;
            }
        }
        for c in counts {
            assert!((c as i64 - 1000).abs() < 137, "{counts:?}");
        }
    }

    /// Evicted rows are dropped from what is held once they are most of it.
    #[test]
    fn compaction_keeps_exactly_the_samples() {
        let n = 200_000;
        let units: Vec<String> = (0..n).map(|i| format!("p{}", i % 1000)).collect();
        let units: Vec<Option<&str>> = units.iter().map(|u| Some(u.as_str())).collect();
        let keys: Vec<i64> = (0..n as i64).collect();
        let mut b = bounder(spec(true, false, 1, 1), usize::MAX);
        let whole = batch(&units, &keys);
        for start in (0..n).step_by(8192) {
            b.push(&whole.slice(start, 8192.min(n - start))).unwrap();
        }
        assert!(
            b.held_rows <= 2 * b.live + 65_536,
            "{} {}",
            b.held_rows,
            b.live
        );
        let kept = kept(b);
        assert_eq!(kept.len(), 1000);
        let mut seen: Vec<&Option<String>> = kept.iter().map(|k| &k.0).collect();
        seen.dedup();
        assert_eq!(seen.len(), 1000);
        // Each kept row is the input's row of its key.
        assert!(kept
            .iter()
            .all(|k| k.1 == k.2 && units[k.2 as usize].map(String::from) == k.0));
    }

    /// The output reads the kept rows through [`KeptRows`] in slot order (the order of
    /// `kept_rows`, read whole) at any chunk size, across slots and units, and the unit
    /// table's memory goes back to the pool before the first batch. 5,000 units of 6 rows in
    /// 3 groups, 2 groups of 2 rows kept: 20,000 samples, 2 to a slot, so chunks end inside
    /// slots.
    #[test]
    fn the_kept_rows_are_read_in_slot_order_after_the_unit_table_is_freed() {
        let n = 30_000;
        let units: Vec<String> = (0..n).map(|i| format!("p{}", i % 5000)).collect();
        let units: Vec<Option<&str>> = units.iter().map(|u| Some(u.as_str())).collect();
        let keys: Vec<i64> = (0..n as i64).map(|i| i % 3).collect();
        let whole = batch(&units, &keys);
        for chunk in [1, 3, 4096, n] {
            let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(usize::MAX));
            let consumer = MemoryConsumer::new("test").register(&pool);
            let mut b = Bounder::try_new(schema(), spec(true, true, 2, 2), consumer).unwrap();
            push_in_slices(&mut b, &whole, 1000);
            let expected = b.kept_rows();
            assert_eq!(expected.len(), 20_000);
            let (held, table) = (pool.reserved(), b.units.size());
            let mut kept = b.end_input();
            assert!(
                pool.reserved() + (table - b.units.size()) <= held,
                "{} reserved of {held}, a table of {table}",
                pool.reserved()
            );
            let mut read = vec![];
            while let Some(batch) = kept.next_batch(chunk) {
                assert_eq!(batch.unwrap().num_rows(), kept.chunk.len());
                assert!(kept.chunk.len() <= chunk);
                read.extend(kept.chunk.iter().map(Sample::place));
            }
            assert_eq!(read, expected, "chunks of {chunk}");
        }
    }

    /// What is held is reserved: a pool too small for it fails with a resources error.
    /// Each unit keeps its group of smallest (keyed hash of (unit, keys), keys), checked
    /// against `hash_row` of the (unit, keys) row directly, through many evictions: 10,000
    /// units of 50 groups each, where the smallest of 50 changes about H(50) - 1 = 3.5 times a
    /// unit.
    #[test]
    fn through_evictions_each_unit_keeps_its_first_group() {
        let (units_n, groups) = (10_000, 50);
        let n = units_n * groups;
        let units: Vec<String> = (0..n).map(|i| format!("p{}", i / groups)).collect();
        let units: Vec<Option<&str>> = units.iter().map(|u| Some(u.as_str())).collect();
        let keys: Vec<i64> = (0..n as i64).map(|i| i % groups as i64).collect();
        let mut b = bounder(spec(true, false, 1, 1), usize::MAX);
        let whole = batch(&units, &keys);
        for start in (0..n).step_by(8192) {
            b.push(&whole.slice(start, 8192.min(n - start))).unwrap();
        }
        let converter = RowConverter::new(vec![
            SortField::new(DataType::Utf8),
            SortField::new(DataType::Int64),
        ])
        .unwrap();
        let encoded = converter
            .convert_columns(&[Arc::clone(whole.column(0)), Arc::clone(whole.column(1))])
            .unwrap();
        let mut first: HashMap<String, (u64, Vec<u8>, i64)> = HashMap::new();
        for row in 0..n {
            let key = encoded.row(row).as_ref().to_vec();
            let candidate = (hash_row(7, &key), key, keys[row]);
            let unit = units[row].unwrap().to_string();
            let best = first.entry(unit).or_insert_with(|| candidate.clone());
            if (candidate.0, &candidate.1) < (best.0, &best.1) {
                *best = candidate;
            }
        }
        let kept = kept(b);
        assert_eq!(kept.len(), units_n);
        for (unit, key, _) in kept {
            assert_eq!(first[&unit.unwrap()].2, key);
        }
    }

    #[test]
    fn memory_is_reserved_from_the_pool() {
        let units: Vec<String> = (0..50_000).map(|i| format!("p{i}")).collect();
        let units: Vec<Option<&str>> = units.iter().map(|u| Some(u.as_str())).collect();
        let keys = vec![1; 50_000];
        let mut b = bounder(spec(true, false, 1, 1), 1 << 20);
        let err = b.push(&batch(&units, &keys)).unwrap_err();
        assert!(
            matches!(err.find_root(), DataFusionError::ResourcesExhausted(_)),
            "{err}"
        );
    }

    /// The operator over `batches` in one partition, in a pool of `pool_bytes`: its output
    /// rows (unit, key, row), sorted, and how many times it spilled.
    async fn run_exec(
        batches: Vec<RecordBatch>,
        spec: BoundSpec,
        pool_bytes: usize,
    ) -> Result<(Vec<(Option<String>, i64, i64)>, usize)> {
        use datafusion::datasource::memory::MemorySourceConfig;
        use datafusion::execution::runtime_env::RuntimeEnvBuilder;
        let input = MemorySourceConfig::try_new_exec(&[batches], schema(), None)?;
        let exec = BoundContributionsExec::try_new(input, spec)?;
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(pool_bytes, 1.0)
            .build_arc()?;
        let context = Arc::new(TaskContext::default().with_runtime(runtime));
        let output: Vec<RecordBatch> = exec.execute(0, context)?.try_collect().await?;
        let mut rows = vec![];
        for batch in output {
            assert_eq!(batch.schema(), schema());
            let units = batch.column(0).as_string::<i32>();
            let keys = batch
                .column(1)
                .as_primitive::<arrow::datatypes::Int64Type>();
            let row = batch
                .column(2)
                .as_primitive::<arrow::datatypes::Int64Type>();
            for i in 0..batch.num_rows() {
                rows.push((
                    units.is_valid(i).then(|| units.value(i).to_string()),
                    keys.value(i),
                    row.value(i),
                ));
            }
        }
        rows.sort();
        let spills = exec.metrics().and_then(|m| m.spill_count()).unwrap_or(0);
        Ok((rows, spills))
    }

    /// 20,000 units of 10 rows in 5 groups each, in batches of 8,192 rows.
    fn many_units() -> Vec<RecordBatch> {
        let n = 200_000;
        let units: Vec<String> = (0..n).map(|i| format!("p{}", i / 10)).collect();
        let units: Vec<Option<&str>> = units.iter().map(|u| Some(u.as_str())).collect();
        let keys: Vec<i64> = (0..n as i64).map(|i| i % 5).collect();
        let whole = batch(&units, &keys);
        (0..n)
            .step_by(8192)
            .map(|start| whole.slice(start, 8192.min(n - start)))
            .collect()
    }

    /// Refused memory, a partition spills its units by bucket and bounds each bucket alone:
    /// the seeded sample is the one it keeps in memory, and a random one keeps the bounds.
    #[tokio::test]
    async fn a_partition_refused_memory_spills_and_keeps_the_same_sample() {
        let seeded = spec(true, true, 2, 2);
        let (in_memory, spills) = run_exec(many_units(), seeded.clone(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(spills, 0);
        assert_eq!(in_memory.len(), 20_000 * 4);
        let (spilled, spills) = run_exec(many_units(), seeded, 1 << 20).await.unwrap();
        assert!(spills > 0, "did not spill");
        assert_eq!(spilled, in_memory);
        // Random priorities: at most 2 groups of at most 2 rows per unit.
        let (random, spills) = run_exec(many_units(), spec(true, false, 2, 2), 1 << 20)
            .await
            .unwrap();
        assert!(spills > 0, "did not spill");
        let mut per_unit: HashMap<Option<String>, Vec<i64>> = HashMap::new();
        for (unit, key, _) in random {
            per_unit.entry(unit).or_default().push(key);
        }
        assert_eq!(per_unit.len(), 20_000);
        for keys in per_unit.values() {
            let mut groups = keys.clone();
            groups.sort();
            groups.dedup();
            assert!(groups.len() == 2 && keys.len() == 4, "{keys:?}");
        }
        // A pool too small even for one bucket: a resources error, not a wrong answer.
        let err = run_exec(many_units(), spec(true, false, 2, 2), 1 << 14)
            .await
            .unwrap_err();
        assert!(refused_memory(&err), "{err}");
    }

    #[test]
    fn the_spec_round_trips_and_malformed_bytes_are_refused() {
        let spec = BoundSpec {
            unit: 3,
            keys: vec![0, 5],
            row_order: vec![0, 1, 2, 3],
            max_rows: 7,
            max_groups: u32::MAX,
            salt: u64::MAX - 1,
        };
        let bytes = spec.encode(CODEC_MARKER);
        let body = bytes.strip_prefix(CODEC_MARKER).unwrap();
        assert_eq!(BoundSpec::decode(body).unwrap(), spec);
        assert!(BoundSpec::decode(&body[..body.len() - 1]).is_err());
        assert!(BoundSpec::decode(&body[..body.len() - 8]).is_err());
        let mut longer = body.to_vec();
        longer.extend_from_slice(&[0; 8]);
        assert!(BoundSpec::decode(&longer).is_err());
        let mut huge = body.to_vec();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(BoundSpec::decode(&huge).is_err());
    }
}
