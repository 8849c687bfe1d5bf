//! Runs a DP query on two neighbouring datasets through SQL, many times at once, and audits
//! the releases with [`crate::stats::audit`].
//!
//! **Replication.** One replicate of a dataset is a small table (a [`RecordBatch`]). The
//! driver registers a table holding `replicates` copies of it, each with a column
//! `replicate` (`BIGINT`, `0..replicates`), so a query grouped by `replicate` (declared public,
//! e.g. `SET dp.public_groups = 'assert'`) releases one independent result per replicate in
//! one run: noise is drawn per group. Integer columns named in
//! [`SqlAudit::distinct_per_replicate`] (privacy-unit ids) are offset per replicate so no unit
//! spans two replicates.
//!
//! **Releases.** The query's output must have the column `replicate`; columns named in
//! [`SqlAudit::group_columns`] are further GROUP BY keys, and every other column is a released
//! value (numbers and booleans; structs are flattened into their fields). A replicate's
//! release is the joint vector over every key value seen (sorted) and every value column, with
//! `NaN` for a NULL or a group that was not released, so an audit of a row moving between
//! groups `a` and `b` sees both groups' outputs together.
//!
//! **Sessions.** Each dataset runs in a fresh session ([`crate::sql::register`]ed) built by
//! [`SqlAudit::session`], then the setup statements, then (seeded mode) `SET dp.seed`, with
//! seed `s` for `D` and `s + 1` for `D'` so their noise is independent. Seeded noise is
//! non-private and is for reproducible tests; [`SqlAudit::seed`] `None` uses the secure
//! generator, the production path.
//!
//! **Sequences of queries.** [`SqlAudit::then`] adds queries run after the first, one after
//! another in the same session, each planned and charged on its own (so a budget set by the
//! statements, e.g. `dp.budget_measure = 'zcdp'`, composes them as it would an analyst's
//! queries). A replicate's release is then the joint output of every query: query `j`'s
//! groups are keyed `q{j}` (`q{j}|<key>` with group columns), so the auditor sees all `k`
//! releases together, which is what composition bounds. Each query must release the same
//! value columns. Seeded, query `j` runs under `SET dp.seed = s + 2j` (`D`) and `s + 1 + 2j`
//! (`D'`): a seeded call's noise stream is keyed by the call's text and the group key
//! ([`crate::stats::rng::seeded_rng`]), so the same query run twice under one seed would
//! draw the same noise, and the sequence would be one release, not `k`.

use crate::stats::audit::{audit, AuditReport, AuditSettings, Releases};
use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::{cast, take};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::{exec_err, plan_err, DataFusionError, Result};
use datafusion::datasource::MemTable;
use datafusion::prelude::{SessionConfig, SessionContext};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The replicate key column.
pub const REPLICATE: &str = "replicate";

/// Maps a joint release (`NaN` for missing values) to the features the auditor searches.
pub type FeatureMap = Arc<dyn Fn(&[f64]) -> Vec<f64> + Send + Sync>;
/// Prepares a fresh session before the setup statements run (registers tables, UDFs...).
pub type SessionSetup = Arc<dyn Fn(&SessionContext) -> Result<()> + Send + Sync>;

/// How the releases are obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Repetition {
    /// One query over the replicated table, grouped by `replicate` (the fast way).
    #[default]
    Grouped,
    /// For queries that must not be grouped (an ungrouped aggregate's calibration): the
    /// table holds one copy (`replicate` = 0), and the query is planned (bound and charged)
    /// and executed once per replicate, each time drawing its own secure noise (a physical
    /// plan releases once: re-executing one is refused). The query need not output
    /// `replicate`: the driver numbers the executions. Seeded noise would repeat across
    /// executions, so this mode refuses a seed.
    Executions,
}

/// One audit: a query template, the neighbouring datasets and how to run them.
#[derive(Clone)]
pub struct SqlAudit {
    /// The query; `{replicates}` is replaced by the number of replicates.
    pub query: String,
    /// Queries run after `query`, in order, in the same session ([`Self::then`]).
    pub sequence: Vec<String>,
    /// Name of the replicated table the query reads.
    pub table: String,
    /// One replicate of `D` and of `D'` (same schema).
    pub d: RecordBatch,
    pub d_prime: RecordBatch,
    /// Copies of each dataset (releases per dataset).
    pub replicates: usize,
    /// Output GROUP BY keys besides `replicate`.
    pub group_columns: Vec<String>,
    /// Integer columns offset per replicate (privacy-unit ids).
    pub distinct_per_replicate: Vec<String>,
    pub repetition: Repetition,
    /// Statements run before the query (`SET dp....`, `CREATE TABLE keys AS ...`);
    /// `{replicates}` is replaced as in the query.
    pub statements: Vec<String>,
    /// `Some(s)`: NON-PRIVATE seeded noise, `s` for `D` and `s + 1` for `D'`.
    pub seed: Option<u64>,
    /// The session configuration (partitions, batch size).
    pub config: SessionConfig,
    /// Runs on each fresh session before the statements.
    pub session: Option<SessionSetup>,
    /// Features from a joint release (default: the release itself), with their names.
    pub features: Option<(Vec<String>, FeatureMap)>,
    pub settings: AuditSettings,
}

/// The outcome of an audit through SQL.
#[derive(Clone, Debug)]
pub struct SqlAuditReport {
    pub report: AuditReport,
    /// Names of the features the auditor searched.
    pub features: Vec<String>,
    /// Releases per dataset.
    pub releases: usize,
    /// Time to build the tables and run the query on both datasets, and to audit.
    pub query_time: Duration,
    pub audit_time: Duration,
    /// What the accountant of `D`'s session charged for the queries: `dp_budget()`'s `spent`
    /// row after they ran.
    pub charged: Charged,
}

/// The `spent` row of a session's `dp_budget()`: the (ε, δ) added, the ρ added (when every
/// charge has a zCDP map) and the (ε, δ)-DP guarantee of what was spent in the budget's
/// measure (under a zCDP budget with a target, `cdp_epsilon` of the ρ at the target's δ;
/// `None` for a budget declared as ρ alone).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Charged {
    pub epsilon: f64,
    pub delta: f64,
    pub rho: Option<f64>,
    pub guarantee: Option<(f64, f64)>,
}

impl SqlAuditReport {
    /// `epsilon_lower`, the claim, the event and the timings on one line.
    pub fn summary(&self, claimed_epsilon: f64) -> String {
        format!(
            "{} releases per dataset; claimed epsilon {claimed_epsilon}, {} ({:.0}% of the claim); queries {:.1} s, audit {:.1} s",
            self.releases,
            self.report.summary(&self.features),
            100.0 * self.report.epsilon_lower / claimed_epsilon,
            self.query_time.as_secs_f64(),
            self.audit_time.as_secs_f64()
        )
    }
}

impl SqlAudit {
    /// An audit of `query` over `table` with datasets `d`, `d_prime` (one replicate each).
    pub fn new(
        query: impl Into<String>,
        table: impl Into<String>,
        d: RecordBatch,
        d_prime: RecordBatch,
        replicates: usize,
    ) -> Self {
        Self {
            query: query.into(),
            sequence: Vec::new(),
            table: table.into(),
            d,
            d_prime,
            replicates,
            group_columns: Vec::new(),
            distinct_per_replicate: Vec::new(),
            repetition: Repetition::Grouped,
            statements: Vec::new(),
            seed: None,
            config: SessionConfig::new()
                .with_target_partitions(2)
                .with_batch_size(8192),
            session: None,
            features: None,
            settings: AuditSettings::default(),
        }
    }

    pub fn group_columns(mut self, columns: &[&str]) -> Self {
        self.group_columns = columns.iter().map(|c| c.to_string()).collect();
        self
    }

    pub fn distinct_per_replicate(mut self, columns: &[&str]) -> Self {
        self.distinct_per_replicate = columns.iter().map(|c| c.to_string()).collect();
        self
    }

    pub fn repetition(mut self, repetition: Repetition) -> Self {
        self.repetition = repetition;
        self
    }

    /// Runs `query` after the queries before it, in the same session: the audit is of the
    /// joint output of the whole sequence (module docs, "Sequences of queries").
    pub fn then(mut self, query: impl Into<String>) -> Self {
        self.sequence.push(query.into());
        self
    }

    pub fn statement(mut self, sql: impl Into<String>) -> Self {
        self.statements.push(sql.into());
        self
    }

    pub fn seed(mut self, seed: Option<u64>) -> Self {
        self.seed = seed;
        self
    }

    pub fn delta(mut self, delta: f64) -> Self {
        self.settings.delta = delta;
        self
    }

    pub fn alpha(mut self, alpha: f64) -> Self {
        self.settings.alpha = alpha;
        self
    }

    pub fn session_setup(mut self, setup: SessionSetup) -> Self {
        self.session = Some(setup);
        self
    }

    pub fn features(mut self, names: &[&str], map: FeatureMap) -> Self {
        self.features = Some((names.iter().map(|n| n.to_string()).collect(), map));
        self
    }

    /// Runs the query on both datasets and audits the releases.
    pub async fn run(&self) -> Result<SqlAuditReport> {
        if self.replicates < 8 {
            return plan_err!("audit: at least 8 replicates are needed");
        }
        if self.repetition == Repetition::Executions && self.seed.is_some() {
            return plan_err!("audit: Repetition::Executions needs secure noise (seed None)");
        }
        if self.repetition == Repetition::Executions && !self.sequence.is_empty() {
            return plan_err!("audit: a sequence of queries needs Repetition::Grouped");
        }
        let shape = |b: &RecordBatch| {
            b.schema()
                .fields()
                .iter()
                .map(|f| (f.name().clone(), f.data_type().clone()))
                .collect::<Vec<_>>()
        };
        if shape(&self.d) != shape(&self.d_prime) {
            return plan_err!("audit: D and D' must have the same column names and types");
        }
        let start = Instant::now();
        let stride = self.stride()?;
        let mut outputs = Vec::with_capacity(2);
        let mut charges = Vec::with_capacity(2);
        for (i, data) in [&self.d, &self.d_prime].into_iter().enumerate() {
            let seed = self.seed.map(|s| s + i as u64);
            let (output, charged) = self.run_one(data, stride, seed).await?;
            outputs.push(output);
            charges.push(charged);
        }
        let query_time = start.elapsed();
        let start = Instant::now();
        // The joint layout: every (key, value column) seen in either output.
        let mut keys = BTreeSet::new();
        let mut value_names: Option<Vec<String>> = None;
        for output in &outputs {
            keys.extend(output.rows.values().flat_map(|r| r.keys().cloned()));
            if value_names.is_none() && !output.value_names.is_empty() {
                value_names = Some(output.value_names.clone());
            }
        }
        let value_names = value_names.unwrap_or_default();
        if value_names.is_empty() {
            return exec_err!("audit: the query released no value columns (and no rows)");
        }
        let mut names = Vec::with_capacity(keys.len() * value_names.len());
        for key in &keys {
            for v in &value_names {
                names.push(if key.is_empty() {
                    v.clone()
                } else {
                    format!("{key}.{v}")
                });
            }
        }
        let width = names.len();
        let (names, dims) = match &self.features {
            Some((feature_names, _)) => (feature_names.clone(), feature_names.len()),
            None => (names, width),
        };
        let mut samples = Vec::with_capacity(2);
        let mut joint = vec![f64::NAN; width];
        for output in &outputs {
            let mut releases = Releases::new(dims);
            for r in 0..self.replicates as i64 {
                joint.fill(f64::NAN);
                if let Some(groups) = output.rows.get(&r) {
                    for (k, key) in keys.iter().enumerate() {
                        if let Some(values) = groups.get(key) {
                            let at = k * value_names.len();
                            joint[at..at + values.len()].copy_from_slice(values);
                        }
                    }
                }
                match &self.features {
                    Some((_, map)) => {
                        let features = map(&joint);
                        if features.len() != dims {
                            return exec_err!(
                                "audit: the feature map returned {} features, {} names were given",
                                features.len(),
                                dims
                            );
                        }
                        releases.push(&features);
                    }
                    None => releases.push(&joint),
                }
            }
            samples.push(releases);
        }
        let report =
            audit(&samples[0], &samples[1], self.settings).map_err(DataFusionError::Execution)?;
        Ok(SqlAuditReport {
            report,
            features: names,
            releases: self.replicates,
            query_time,
            audit_time: start.elapsed(),
            charged: charges[0],
        })
    }

    /// The per-replicate offset of the distinct columns: above every |value| in D and D'.
    fn stride(&self) -> Result<i64> {
        let mut stride = 1i64;
        for name in &self.distinct_per_replicate {
            for batch in [&self.d, &self.d_prime] {
                let Some(column) = batch.column_by_name(name) else {
                    return plan_err!("audit: no column '{name}' to make distinct per replicate");
                };
                let values = cast(column, &DataType::Int64)?;
                for v in values.as_primitive::<Int64Type>().iter().flatten() {
                    stride = stride.max(v.saturating_abs().saturating_add(1));
                }
            }
        }
        Ok(stride.saturating_mul(2))
    }

    /// `replicates` copies of `data` with the replicate column, in batches of about 64k rows.
    fn replicated(
        &self,
        data: &RecordBatch,
        stride: i64,
        replicates: usize,
    ) -> Result<Vec<RecordBatch>> {
        let rows = data.num_rows().max(1);
        let per_batch = (65_536 / rows).max(1);
        // Every column nullable, so D and D' register the same schema.
        let mut fields = vec![Arc::new(Field::new(REPLICATE, DataType::Int64, false))];
        fields.extend(
            data.schema()
                .fields()
                .iter()
                .map(|f| Arc::new(f.as_ref().clone().with_nullable(true))),
        );
        let schema = Arc::new(Schema::new(fields));
        let mut batches = Vec::new();
        let mut first = 0usize;
        while first < replicates {
            let last = (first + per_batch).min(replicates);
            let copies = last - first;
            let indices =
                UInt32Array::from_iter_values((0..copies).flat_map(|_| 0..data.num_rows() as u32));
            let replicate: Vec<i64> = (first..last)
                .flat_map(|r| std::iter::repeat_n(r as i64, data.num_rows()))
                .collect();
            let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(replicate.clone()))];
            for (field, column) in data.schema().fields().iter().zip(data.columns()) {
                let copied = take(column, &indices, None)?;
                let copied = if self.distinct_per_replicate.contains(field.name()) {
                    let ids = cast(&copied, &DataType::Int64)?;
                    let offset: Int64Array = ids
                        .as_primitive::<Int64Type>()
                        .iter()
                        .zip(&replicate)
                        .map(|(v, r)| v.map(|v| v + r * stride))
                        .collect();
                    cast(&(Arc::new(offset) as ArrayRef), field.data_type())?
                } else {
                    copied
                };
                columns.push(copied);
            }
            batches.push(RecordBatch::try_new(Arc::clone(&schema), columns)?);
            first = last;
        }
        Ok(batches)
    }

    async fn run_one(
        &self,
        data: &RecordBatch,
        stride: i64,
        seed: Option<u64>,
    ) -> Result<(Output, Charged)> {
        let ctx = SessionContext::new_with_config(self.config.clone());
        crate::sql::register(&ctx)?;
        if let Some(setup) = &self.session {
            setup(&ctx)?;
        }
        let copies = match self.repetition {
            Repetition::Grouped => self.replicates,
            Repetition::Executions => 1,
        };
        let batches = self.replicated(data, stride, copies)?;
        let schema = batches
            .first()
            .map(|b| b.schema())
            .ok_or_else(|| DataFusionError::Plan("audit: no rows".into()))?;
        let partitions = self.config.target_partitions().max(1);
        let mut parts = vec![Vec::new(); partitions];
        for (i, b) in batches.into_iter().enumerate() {
            parts[i % partitions].push(b);
        }
        ctx.register_table(&self.table, Arc::new(MemTable::try_new(schema, parts)?))?;
        let fill = |sql: &str| sql.replace("{replicates}", &self.replicates.to_string());
        for statement in &self.statements {
            ctx.sql(&fill(statement)).await?.collect().await?;
        }
        if self.sequence.is_empty() {
            if let Some(seed) = seed {
                ctx.sql(&format!("SET dp.seed = {seed}"))
                    .await?
                    .collect()
                    .await?;
            }
        } else {
            // Each query of a sequence under its own seed, its groups keyed by its position.
            let mut joint = Output::default();
            for (j, query) in std::iter::once(&self.query)
                .chain(&self.sequence)
                .enumerate()
            {
                if let Some(seed) = seed {
                    ctx.sql(&format!("SET dp.seed = {}", seed + 2 * j as u64))
                        .await?
                        .collect()
                        .await?;
                }
                let batches = ctx.sql(&fill(query)).await?.collect().await?;
                joint.append(
                    Output::read(&batches, &self.group_columns)?,
                    &format!("q{j}"),
                )?;
            }
            return Ok((joint, charged(&ctx).await?));
        }
        let batches = match self.repetition {
            Repetition::Grouped => ctx.sql(&fill(&self.query)).await?.collect().await?,
            Repetition::Executions => {
                // Planned (bound, charged) anew for each execution: a physical plan releases
                // once (crate::sql::privacy::exec::release).
                let frame = ctx.sql(&fill(&self.query)).await?;
                let mut all = Vec::new();
                for r in 0..self.replicates {
                    for batch in frame.clone().collect().await? {
                        all.push(with_replicate(&batch, r as i64)?);
                    }
                }
                all
            }
        };
        Ok((
            Output::read(&batches, &self.group_columns)?,
            charged(&ctx).await?,
        ))
    }
}

/// The `spent` row of `ctx`'s `dp_budget()` ([`Charged`]).
async fn charged(ctx: &SessionContext) -> Result<Charged> {
    let batches = ctx
        .sql(
            "SELECT epsilon, delta, rho, guarantee_epsilon, guarantee_delta FROM dp_budget() \
             WHERE entry = 'spent'",
        )
        .await?
        .collect()
        .await?;
    let Some(batch) = batches.iter().find(|b| b.num_rows() > 0) else {
        return exec_err!("audit: dp_budget() has no 'spent' row");
    };
    let value = |i: usize| {
        let column = batch
            .column(i)
            .as_primitive::<arrow::datatypes::Float64Type>();
        (!column.is_null(0)).then(|| column.value(0))
    };
    Ok(Charged {
        epsilon: value(0).unwrap_or(0.0),
        delta: value(1).unwrap_or(0.0),
        rho: value(2),
        guarantee: value(3).zip(value(4)),
    })
}

/// `batch` with a first column `replicate` = `r` (replacing one it has).
fn with_replicate(batch: &RecordBatch, r: i64) -> Result<RecordBatch> {
    let mut fields = vec![Arc::new(Field::new(REPLICATE, DataType::Int64, false))];
    let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![r; batch.num_rows()]))];
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        if field.name() != REPLICATE {
            fields.push(Arc::clone(field));
            columns.push(Arc::clone(column));
        }
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// One dataset's output: per replicate, per key (the group columns' display form), the
/// released values.
#[derive(Default)]
struct Output {
    rows: BTreeMap<i64, BTreeMap<String, Vec<f64>>>,
    value_names: Vec<String>,
}

impl Output {
    /// Adds the groups of `other` (one query of a sequence) keyed `prefix` (`prefix|key` for
    /// a group column's key): each query must release the same value columns.
    fn append(&mut self, other: Output, prefix: &str) -> Result<()> {
        if self.value_names.is_empty() {
            self.value_names = other.value_names;
        } else if !other.value_names.is_empty() && other.value_names != self.value_names {
            return plan_err!(
                "audit: every query of a sequence must release the same value columns ({:?}, then {:?} in {prefix})",
                self.value_names,
                other.value_names
            );
        }
        for (replicate, groups) in other.rows {
            let joint = self.rows.entry(replicate).or_default();
            for (key, values) in groups {
                let key = match key.is_empty() {
                    true => prefix.to_string(),
                    false => format!("{prefix}|{key}"),
                };
                joint.insert(key, values);
            }
        }
        Ok(())
    }

    fn read(batches: &[RecordBatch], group_columns: &[String]) -> Result<Self> {
        let mut rows: BTreeMap<i64, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
        let mut value_names = Vec::new();
        for batch in batches {
            let schema = batch.schema();
            let Some(replicate) = batch.column_by_name(REPLICATE) else {
                return plan_err!("audit: the query must output the column '{REPLICATE}'");
            };
            let replicate = cast(replicate, &DataType::Int64)?;
            let replicate = replicate.as_primitive::<Int64Type>();
            let mut keys = Vec::new();
            for name in group_columns {
                let Some(column) = batch.column_by_name(name) else {
                    return plan_err!("audit: the query does not output the group column '{name}'");
                };
                keys.push(column);
            }
            let options = FormatOptions::default().with_null("NULL");
            let formatters = keys
                .iter()
                .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let values: Vec<(String, &ArrayRef)> = schema
                .fields()
                .iter()
                .zip(batch.columns())
                .filter(|(f, _)| f.name() != REPLICATE && !group_columns.contains(f.name()))
                .map(|(f, c)| (f.name().clone(), c))
                .collect();
            let mut names = Vec::new();
            let mut flat: Vec<Vec<f64>> = Vec::new();
            for (name, column) in &values {
                flatten(name, column, &mut names, &mut flat)?;
            }
            if value_names.is_empty() {
                value_names = names;
            }
            for row in 0..batch.num_rows() {
                if replicate.is_null(row) {
                    return exec_err!("audit: a NULL replicate");
                }
                let key = formatters
                    .iter()
                    .map(|f| f.value(row).to_string())
                    .collect::<Vec<_>>()
                    .join("|");
                let released: Vec<f64> = flat.iter().map(|c| c[row]).collect();
                let groups = rows.entry(replicate.value(row)).or_default();
                if groups.insert(key.clone(), released).is_some() {
                    return exec_err!(
                        "audit: replicate {} released group '{key}' twice",
                        replicate.value(row)
                    );
                }
            }
        }
        Ok(Self { rows, value_names })
    }
}

/// The numeric values of `column` (NULL as `NaN`; booleans as 0/1; struct fields flattened as
/// `name.field`), appended to `names` and `out`.
fn flatten(
    name: &str,
    column: &ArrayRef,
    names: &mut Vec<String>,
    out: &mut Vec<Vec<f64>>,
) -> Result<()> {
    match column.data_type() {
        DataType::Struct(fields) => {
            let strukt = column.as_struct();
            for (field, child) in fields.iter().zip(strukt.columns()) {
                let child: ArrayRef = match strukt.nulls() {
                    // A NULL struct makes every field missing.
                    Some(nulls) => {
                        let data = child.to_data().into_builder().nulls(Some(
                            arrow::buffer::NullBuffer::union(Some(nulls), child.nulls())
                                .expect("a union of two present buffers"),
                        ));
                        arrow::array::make_array(data.build()?)
                    }
                    None => Arc::clone(child),
                };
                flatten(&format!("{name}.{}", field.name()), &child, names, out)?;
            }
            Ok(())
        }
        DataType::Boolean => {
            let b = column.as_boolean();
            names.push(name.to_string());
            out.push(
                b.iter()
                    .map(|v| v.map_or(f64::NAN, |v| v as u8 as f64))
                    .collect(),
            );
            Ok(())
        }
        t if t.is_numeric() => {
            let values = cast(column, &DataType::Float64)?;
            names.push(name.to_string());
            out.push(
                values
                    .as_primitive::<arrow::datatypes::Float64Type>()
                    .iter()
                    .map(|v| v.unwrap_or(f64::NAN))
                    .collect(),
            );
            Ok(())
        }
        // Text and other values are not audited.
        _ => Ok(()),
    }
}
