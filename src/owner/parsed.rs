//! `ParsedFiles`: an owner's CSV or NDJSON table parsed once per version of its files, for
//! `dpsql --config` and `dp-server`.
//!
//! A text format has no column chunks: DataFusion's CSV and JSON readers tokenise every byte of
//! every file on every scan, projected or not. Two things follow for a locked session:
//!
//! - **Cost.** Every analyst's query over a small CSV pays its parse: over the 4,000-row
//!   `data/visits.csv`, `dp-server` answered 529 DP queries/s re-reading it and 728 from a copy
//!   in memory (`serve_load`, BENCHMARKS.md, issue 41's session of 2026-11-29).
//! - **Side channel.** The parse is linear in the bytes of every row, so the time of a query
//!   that projects only `patient_id` still grows with one person's long note
//!   (docs/privacy-analysis.md, "What is not covered", own values: 12 of the 13 flags of the
//!   fuzzer's 30-minute run were on CSV tables).
//!
//! So a text table whose files together hold at most [`PARSED_FILES_MAX_BYTES`] is kept
//! parsed as DataFusion's `MemTable`. Every scan lists the files as a query's session would
//! read them (the same listing DataFusion's `ListingTable` does). When the list, a size, a
//! modification time or an ETag changed since the copy was made, that query scans the files
//! themselves, and a thread of its own parses them for the queries after it; so files the owner
//! rewrites are seen by the next query, unlike `in_memory = true` (read once at start). A scan
//! of the copy reads only what it projects, as over Parquet or a table in memory.
//!
//! The parse of a protected table is never a query's work. It used to be done by the first scan
//! planned after the files changed: its time, which grows with every byte of the table, was
//! spent while that query was planned (in `dp-server`, in `GetFlightInfo`), before the release
//! schedule's clock starts (`[limits] release_quantum_ms`), and a neighbouring pair measured
//! 345-366 against 316-317 ms for that first query under a 300 ms quantum
//! (docs/privacy-analysis.md). Planning now lists the files only; the query that sees a change
//! reads them in its execution, inside its deadline and its schedule. A table the owner
//! declared public is still parsed by that first scan ([`ParsedFiles::public`]): its rows are
//! released exactly anyway, and the copy's row count gives the query a better join.
//!
//! A parse that fails (a value that does not parse as its declared type) is not kept: every
//! query until the files change scans the files as before, so the error is raised when the
//! query runs, where every execution error is handled ("Errors are outputs"), never while it
//! is planned, and its text (which can quote the row) is withheld as before. Larger tables are
//! scanned as before too: the copy is outside every query's memory pool, so its size is
//! bounded here.
//!
//! Not on a locked cluster: the scheduler would ship the copy in every plan
//! ([`crate::owner::Owner::open_files`]).

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{MemTable, Session, TableProvider};
use datafusion::common::Statistics;
use datafusion::datasource::listing::ListingTable;
use datafusion::error::Result;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;

/// The largest text table, in bytes of its files together, that [`ParsedFiles`] keeps in
/// memory parsed (its Arrow form holds about as many bytes again as the text, up to a few
/// times for short values). A table of more is scanned from its files on every query, as
/// DataFusion does; the owner can still declare it `in_memory = true`.
pub const PARSED_FILES_MAX_BYTES: u64 = 64 << 20;

/// What identifies one version of a table's files: each file's path, size, modification time
/// and ETag, and its partition values, sorted by path.
type Version = Vec<(String, u64, i64, Option<String>, Vec<String>)>;

/// A CSV or NDJSON table parsed once per version of its files (module docs).
pub struct ParsedFiles {
    files: Arc<ListingTable>,
    /// The owner's loading session: the files are listed and parsed with the owner's
    /// settings, never an analyst's, so the copy every analyst scans (its batches and
    /// partitions) does not depend on who happened to query first. An analyst's settings
    /// (`batch_size`, `target_partitions`: `ANALYST_SETTINGS`) do not change which files a
    /// scan reads.
    owner: SessionContext,
    copy: Arc<Mutex<Copy>>,
    /// Parses that were kept, since the table was opened.
    parses: Arc<AtomicUsize>,
    /// A public table is parsed by the first scan planned after its files change, not in the
    /// background ([`ParsedFiles::public`]).
    public: bool,
}

/// The parsed copy, and the parse under way.
#[derive(Default)]
struct Copy {
    /// The last version parsed, and its rows (`None`: it did not parse).
    kept: Option<(Version, Option<Arc<MemTable>>)>,
    /// The version a background parse is reading, if one is.
    parsing: Option<Version>,
}

impl std::fmt::Debug for ParsedFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParsedFiles")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// A poisoned lock is still usable: every critical section leaves the copy consistent.
fn lock(copy: &Mutex<Copy>) -> std::sync::MutexGuard<'_, Copy> {
    copy.lock().unwrap_or_else(|p| p.into_inner())
}

impl ParsedFiles {
    pub fn new(files: Arc<ListingTable>, owner: SessionContext) -> Self {
        Self {
            files,
            owner,
            copy: Arc::default(),
            parses: Arc::default(),
            public: false,
        }
    }

    /// The same, for a table the owner declared public: the first scan planned after its
    /// files change parses them and reads the copy. The parse's time is then part of that
    /// query's planning, outside its schedule, but a public table's rows are released exactly
    /// anyway, so its size tells nothing. The copy's exact row count lets DataFusion broadcast
    /// it in a join (a table of public keys joined to the protected rows), where a scan of
    /// the files, which has none, made that first query partition the protected side by the
    /// key: 0.70 against 0.49 s over 10M rows (BENCHMARKS.md, session of 2026-11-30).
    pub fn public(files: Arc<ListingTable>, owner: SessionContext) -> Self {
        Self {
            public: true,
            ..Self::new(files, owner)
        }
    }

    /// How many times the files were parsed and kept since the table was opened: once per
    /// version that a query read (in the background, after that query's scan).
    pub fn parses(&self) -> usize {
        self.parses.load(Ordering::Relaxed)
    }

    /// Whether a background parse is under way.
    pub fn parsing(&self) -> bool {
        lock(&self.copy).parsing.is_some()
    }

    /// The version of the files a scan reads, and their total size.
    async fn version(&self, state: &SessionState) -> Result<(Version, u64)> {
        let listed = self.files.list_files_for_scan(state, &[], None).await?;
        let mut version: Version = listed
            .file_groups
            .iter()
            .flat_map(|group| group.iter())
            .map(|file| {
                let meta = &file.object_meta;
                (
                    meta.location.to_string(),
                    meta.size,
                    meta.last_modified.timestamp_nanos_opt().unwrap_or(i64::MIN),
                    meta.e_tag.clone(),
                    file.partition_values
                        .iter()
                        .map(|v| v.to_string())
                        .collect(),
                )
            })
            .collect();
        version.sort();
        let bytes = version.iter().map(|f| f.1).sum();
        Ok((version, bytes))
    }

    /// The copy of the files' current version, if it is kept; otherwise, for a public table,
    /// the copy parsed now (`None` if it does not parse), and for a protected one `None`, and a
    /// background parse of that version is started unless one is under way. `None` for a table
    /// too large to keep. A version that did not parse is not parsed again: every query then
    /// scans the files until they change.
    async fn parsed(&self) -> Result<Option<Arc<MemTable>>> {
        let (version, bytes) = self.version(&self.owner.state()).await?;
        if bytes > PARSED_FILES_MAX_BYTES {
            return Ok(None);
        }
        {
            let mut copy = lock(&self.copy);
            if let Some((kept, table)) = &copy.kept {
                if *kept == version {
                    return Ok(table.clone());
                }
            }
            if !self.public {
                // Started under the lock, so the parse records its copy only after `parsing`
                // is set.
                if copy.parsing.as_ref() != Some(&version)
                    && self.parse_in_background(version.clone())
                {
                    copy.parsing = Some(version);
                }
                return Ok(None);
            }
        }
        let table = parse(&self.files, &self.owner).await;
        if table.is_some() {
            self.parses.fetch_add(1, Ordering::Relaxed);
        }
        lock(&self.copy).kept = Some((version, table.clone()));
        Ok(table)
    }

    /// Parses the files as of `version` on a thread of its own (a query's planning thread and
    /// runtime may end before it), and keeps the copy unless a newer parse began meanwhile.
    /// Whether the thread started (without one, the files are scanned and the next query tries
    /// again).
    fn parse_in_background(&self, version: Version) -> bool {
        let (files, owner) = (Arc::clone(&self.files), self.owner.clone());
        let (copy, parses) = (Arc::clone(&self.copy), Arc::clone(&self.parses));
        let parse = move || {
            let table = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()
                .and_then(|runtime| runtime.block_on(parse(&files, &owner)));
            let mut copy = lock(&copy);
            if copy.parsing.as_ref() == Some(&version) {
                if table.is_some() {
                    parses.fetch_add(1, Ordering::Relaxed);
                }
                copy.kept = Some((version, table));
                copy.parsing = None;
            }
        };
        std::thread::Builder::new()
            .name("dp-parse-table".to_string())
            .spawn(parse)
            .is_ok()
    }
}

/// The rows of `files` as the owner's session reads them, or `None` if they do not parse.
async fn parse(files: &Arc<ListingTable>, owner: &SessionContext) -> Option<Arc<MemTable>> {
    let state = owner.state();
    let scan = files.scan(&state, None, &[], None).await.ok()?;
    let partitions = datafusion::physical_plan::collect_partitioned(scan, owner.task_ctx())
        .await
        .ok()?;
    MemTable::try_new(files.schema(), partitions)
        .ok()
        .map(Arc::new)
}

#[async_trait]
impl TableProvider for ParsedFiles {
    fn schema(&self) -> SchemaRef {
        self.files.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    /// What the files' scan can use (partition values) is passed to it, but none is exact:
    /// the filters stay in the plan, which is then the same whether the scan reads the parsed
    /// copy (which filters nothing) or the files.
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        let files = self.files.supports_filters_pushdown(filters)?;
        Ok(files
            .into_iter()
            .map(|f| match f {
                TableProviderFilterPushDown::Unsupported => f,
                _ => TableProviderFilterPushDown::Inexact,
            })
            .collect())
    }

    fn statistics(&self) -> Option<Statistics> {
        None
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match self.parsed().await? {
            Some(table) => table.scan(state, projection, filters, limit).await,
            None => self.files.scan(state, projection, filters, limit).await,
        }
    }
}
