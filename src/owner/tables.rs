//! The owner's tables: a session with the DP functions and on-demand object stores (local
//! files, `s3://` from the environment), and registration of a file, directory or hive layout
//! as a table. `dpsql --table`, `dpsql --config`, `dp-server` and data-lake jobs share it.

use crate::owner::parsed::ParsedFiles;
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::catalog::{MemTable, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::common::TableReference;
use datafusion::datasource::listing::helpers::parse_partitions_for_path;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::object_store::{DefaultObjectStoreRegistry, ObjectStoreRegistry};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::SessionState;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::TryStreamExt;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use std::collections::HashMap;
use std::sync::Arc;
use url::Url;

/// Object stores resolved on first use: local files as DataFusion does, and `s3://bucket/...`
/// built from the usual environment variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, ...), so `CREATE EXTERNAL TABLE ...
/// LOCATION 's3://...'` works without code.
#[derive(Debug, Default)]
pub struct EnvObjectStoreRegistry {
    inner: DefaultObjectStoreRegistry,
}

impl ObjectStoreRegistry for EnvObjectStoreRegistry {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        self.inner.register_store(url, store)
    }

    fn get_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        if let Ok(store) = self.inner.get_store(url) {
            return Ok(store);
        }
        match url.scheme() {
            #[cfg(feature = "s3")]
            "s3" => {
                let bucket = url
                    .host_str()
                    .ok_or_else(|| DataFusionError::Configuration(format!("no bucket in {url}")))?;
                let mut builder =
                    object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
                // object_store reads AWS_ENDPOINT; accept the AWS CLI's AWS_ENDPOINT_URL too.
                if let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL") {
                    builder = builder.with_endpoint(endpoint);
                }
                let store: Arc<dyn ObjectStore> = Arc::new(builder.build().map_err(|e| {
                    DataFusionError::Configuration(format!("s3 store for {bucket}: {e}"))
                })?);
                let base = Url::parse(&format!("s3://{bucket}")).expect("valid url");
                self.inner.register_store(&base, Arc::clone(&store));
                Ok(store)
            }
            _ => self.inner.get_store(url),
        }
    }
}

/// A runtime whose object stores resolve on first use (see [`EnvObjectStoreRegistry`]); one
/// runtime can serve many sessions (the server's).
pub fn runtime() -> Result<Arc<RuntimeEnv>> {
    RuntimeEnvBuilder::new()
        .with_object_store_registry(Arc::new(EnvObjectStoreRegistry::default()))
        .build_arc()
}

/// The owner's runtime (every session of `dp-server` or `dpsql --config`): as [`runtime`],
/// with one memory pool of `[limits] memory_limit` bytes for all queries (DataFusion's
/// `FairSpillPool`: queries that can spill share it fairly) instead of DataFusion's unbounded
/// one, and spilling to `spill_directory` only when the owner names one (otherwise a query over
/// its memory fails with a resources error).
pub fn limited_runtime(limits: &crate::owner::LimitsConfig) -> Result<Arc<RuntimeEnv>> {
    use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
    use datafusion::execution::memory_pool::FairSpillPool;
    let disk = match &limits.spill_directory {
        Some(directory) => DiskManagerMode::Directories(vec![directory.clone()]),
        None => DiskManagerMode::Disabled,
    };
    RuntimeEnvBuilder::new()
        .with_object_store_registry(Arc::new(EnvObjectStoreRegistry::default()))
        .with_memory_pool(Arc::new(FairSpillPool::new(limits.memory_limit)))
        .with_disk_manager_builder(DiskManagerBuilder::default().with_mode(disk))
        .build_arc()
}

/// A session with the DP functions and on-demand object stores.
pub fn session(config: SessionConfig) -> Result<SessionContext> {
    session_with_runtime(config, runtime()?)
}

/// A session with the DP functions on a shared runtime.
pub fn session_with_runtime(
    config: SessionConfig,
    runtime: Arc<RuntimeEnv>,
) -> Result<SessionContext> {
    let ctx = SessionContext::new_with_config_rt(config, runtime);
    crate::register(&ctx)?;
    Ok(ctx)
}

/// Registers a Parquet, CSV or NDJSON file or directory (hive-partitioned layouts are
/// detected) as table `name`, by the file extension (a directory: its first file's).
pub async fn register_path(ctx: &SessionContext, name: &str, location: &str) -> Result<()> {
    register_table(ctx, name, location, None).await
}

/// The formats a table can be stored in, as `CREATE EXTERNAL TABLE ... STORED AS` names them.
pub const FORMATS: [&str; 3] = ["parquet", "csv", "json"];

/// `format` (`parquet`, `csv`, `json`) as `STORED AS` names it or, without one, by the
/// extension of the file at `location` (a directory: its first file's).
fn format_of(name: &str, location: &str, format: Option<&str>) -> Result<&'static str> {
    match format {
        Some(format) => match format.to_ascii_lowercase().as_str() {
            "parquet" => Ok("PARQUET"),
            "csv" => Ok("CSV"),
            "json" | "ndjson" => Ok("JSON"),
            other => Err(DataFusionError::Configuration(format!(
                "table {name}: unknown format '{other}' (expected parquet, csv or json)"
            ))),
        },
        None => table_format(location),
    }
}

/// Registers the file, directory or hive layout at `location` as table `name`, in `format`
/// (`parquet`, `csv` with a header line, or `json` for NDJSON) or, without one, by the file
/// extension (a directory: its first file's). The schema is inferred from the files (their
/// rows for CSV and NDJSON): for a trusted user's session; the owner's tables are opened with
/// [`open_table`].
pub async fn register_table(
    ctx: &SessionContext,
    name: &str,
    location: &str,
    format: Option<&str>,
) -> Result<()> {
    let format = format_of(name, location, format)?;
    let header = if format == "CSV" {
        " OPTIONS ('format.has_header' 'true')"
    } else {
        ""
    };
    let location = if std::path::Path::new(location).is_dir() && !location.ends_with('/') {
        format!("{location}/")
    } else {
        location.to_string()
    };
    let sql = format!(
        "CREATE EXTERNAL TABLE \"{}\" STORED AS {format} LOCATION '{}'{header}",
        name.replace('"', "\"\""),
        location.replace('\'', "''")
    );
    ctx.sql(&sql).await?;
    Ok(())
}

/// Opens the owner's table `table` with the schema the owner declared, so that nothing the
/// analyst sees of it (`DESCRIBE`, `information_schema`) is inferred from its rows: CSV and
/// NDJSON read the declared `columns` (a protected one without them is refused), Parquet reads
/// them or, undeclared, its files' own schema when all agree (refused when they differ, as a
/// merge would show a column of one person's file), and a hive layout's partition columns are
/// the declared `partition_columns` (refused when the layout has some and none are declared,
/// or a directory's value does not parse as its type).
/// Only a public table's undeclared CSV or NDJSON schema is inferred (its rows are released).
pub async fn open_table(
    ctx: &SessionContext,
    table: &crate::owner::TableConfig,
    reading: Reading,
) -> Result<Arc<dyn TableProvider>> {
    let name = table.name.as_str();
    let refuse = |message: String| DataFusionError::Configuration(message);
    let format = format_of(name, &table.location, table.format.as_deref())?;
    let public = matches!(table.protection, crate::Protection::Public);
    if table.columns.is_none() && format != "PARQUET" && !public {
        return Err(refuse(format!(
            "declare its columns: a {} table's column types and fields would be inferred from \
             its rows (one person's value could change them); add to its [[table]] section \
             columns = [\"NAME TYPE\", ...] (SQL types, in the files' column order, e.g. \
             columns = [\"patient_id BIGINT\", \"region VARCHAR\", \"outcome BOOLEAN\"])",
            if format == "CSV" { "CSV" } else { "NDJSON" }
        )));
    }
    let location =
        if std::path::Path::new(&table.location).is_dir() && !table.location.ends_with('/') {
            format!("{}/", table.location)
        } else {
            table.location.clone()
        };
    let url = ListingTableUrl::parse(&location)?.with_table_ref(TableReference::bare(name));
    // The checks below see every file below the location: an analyst may SET
    // datafusion.execution.listing_table_ignore_subdirectory = false, and queries then read the
    // files in subdirectories too.
    let mut state = ctx.state();
    state
        .config_mut()
        .options_mut()
        .execution
        .listing_table_ignore_subdirectory = false;
    let mut options = HashMap::new();
    if format == "CSV" {
        options.insert("format.has_header".to_string(), "true".to_string());
    }
    let file_format = state
        .get_file_format_factory(format)
        .ok_or_else(|| refuse(format!("no {format} reader in this session")))?
        .create(&state, &options)?;
    let extension = if url.is_collection() {
        match format {
            "PARQUET" => ".parquet",
            "CSV" => ".csv",
            _ if first_file(std::path::Path::new(&table.location))
                .is_some_and(|f| f.to_ascii_lowercase().ends_with(".ndjson")) =>
            {
                ".ndjson"
            }
            _ => ".json",
        }
    } else {
        ""
    };
    let partition_columns: Vec<(String, DataType)> = table
        .partition_columns
        .iter()
        .map(|f| (f.name().clone(), f.data_type().clone()))
        .collect();
    let listing = ListingOptions::new(Arc::clone(&file_format))
        .with_file_extension(extension)
        .with_table_partition_cols(partition_columns);
    if table.partition_columns.is_empty() {
        if url.is_collection() {
            let keys = listing.infer_partitions(&state, &url).await?;
            if !keys.is_empty() {
                return Err(refuse(format!(
                    "its files are in a hive layout ({}=...): declare partition_columns = [{}] \
                     (SQL types)",
                    keys.join("=.../"),
                    keys.iter()
                        .map(|k| format!("\"{k} TYPE\""))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
    } else {
        listing.validate_partitions(&state, &url).await?;
    }
    let store = state.runtime_env().object_store(&url)?;
    let files: Vec<ObjectMeta> = url
        .list_all_files(&state, store.as_ref(), &listing.file_extension)
        .await?
        .try_collect()
        .await?;
    if files.is_empty() {
        return Err(DataFusionError::Plan(format!(
            "No files found at {}",
            url.as_str()
        )));
    }
    // A directory value that does not parse as its declared type would fail every query that
    // lists it, with the value in the error's text (listing is planning, before the release
    // guard): checked here, for the files there at start.
    let partition_names: Vec<&str> = table
        .partition_columns
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    for file in files.iter().filter(|_| !partition_names.is_empty()) {
        let Some(values) = parse_partitions_for_path(&url, &file.location, partition_names.clone())
        else {
            continue; // not in a partition directory: DataFusion skips it
        };
        for (value, column) in values.into_iter().zip(&table.partition_columns) {
            if ScalarValue::try_from_string(value.into_owned(), column.data_type()).is_err() {
                return Err(refuse(format!(
                    "a directory's value of partition column '{}' does not parse as its \
                     declared type ({}): fix the layout or declare partition_columns with a type \
                     every value parses as (VARCHAR does)",
                    column.name(),
                    column.data_type()
                )));
            }
        }
    }
    if let (Some(columns), "CSV") = (&table.columns, format) {
        let names: Vec<&str> = columns.iter().map(|f| f.name().as_str()).collect();
        for file in &files {
            if csv_header(store.as_ref(), file, &state).await? != names {
                return Err(refuse(format!(
                    "a CSV file's header line does not name the declared columns in order \
                     ({}): a CSV's columns are read by position, so declare them in the files' \
                     column order",
                    names.join(", ")
                )));
            }
        }
    }
    let schema: SchemaRef = match &table.columns {
        Some(columns) => Arc::new(Schema::new(columns.clone())),
        // Every column nullable: a writer that marked a column NOT NULL because no row had a
        // NULL would show (DESCRIBE, plans that drop `IS NULL`) whether one person's NULL is
        // there.
        None if format == "PARQUET" && !public => {
            let files_schema =
                uniform_parquet_schema(&state, &store, &files, &listing, &refuse).await?;
            let fields: Vec<_> = files_schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect();
            Arc::new(Schema::new(fields))
        }
        None => listing.infer_schema(&state, &url).await?,
    };
    let config = ListingTableConfig::new(url)
        .with_listing_options(listing)
        .with_schema(schema);
    let provider = ListingTable::try_new(config)?
        .with_cache(state.runtime_env().cache_manager.get_file_statistic_cache());
    match (table.in_memory, format, reading) {
        (true, ..) => in_memory(ctx, Arc::new(provider)).await,
        (false, "CSV" | "JSON", Reading::ParsedOnce) => {
            let (files, owner) = (Arc::new(provider), ctx.clone());
            Ok(Arc::new(match table.protection {
                crate::Protection::Public => ParsedFiles::public(files, owner),
                _ => ParsedFiles::new(files, owner),
            }))
        }
        _ => Ok(Arc::new(provider)),
    }
}

/// How [`open_table`] reads a text (CSV, NDJSON) table's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Parsed once per version of its files and kept, when small ([`ParsedFiles`]):
    /// `dpsql --config` and `dp-server`.
    ParsedOnce,
    /// Scanned from the files by every query: a locked cluster, whose executors read them.
    Files,
}

/// `provider`'s rows read now, as a table in memory (`in_memory = true`): a query then scans
/// them without listing, opening or parsing files: over a 4,000-row CSV, dp-server answered
/// 1.3-1.4x the DP queries per second (BENCHMARKS.md, "Session 20"). Its statistics stay
/// hidden from analysts' plans like any protected table's (`ProtectedTable`).
async fn in_memory(
    ctx: &SessionContext,
    provider: Arc<dyn TableProvider>,
) -> Result<Arc<dyn TableProvider>> {
    // The scan itself, not a query: the owner's loading session plans queries as an analyst's
    // (a table is protected row by row until declared otherwise).
    let state = ctx.state();
    // Partition by partition, as the scan read them: queries over the copy scan in parallel.
    let scan = provider.scan(&state, None, &[], None).await?;
    let partitions = datafusion::physical_plan::collect_partitioned(scan, ctx.task_ctx()).await?;
    Ok(Arc::new(MemTable::try_new(provider.schema(), partitions)?))
}

/// The column names in the header line of CSV `file` (its first 64 KiB), split as the
/// session's CSV options say.
async fn csv_header(
    store: &dyn ObjectStore,
    file: &ObjectMeta,
    state: &SessionState,
) -> Result<Vec<String>> {
    let options = &state.default_table_options().csv;
    let bytes = store
        .get_range(&file.location, 0..file.size.min(64 * 1024))
        .await?;
    let line = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    let mut format = datafusion::arrow::csv::reader::Format::default()
        .with_header(true)
        .with_delimiter(options.delimiter)
        .with_quote(options.quote);
    if let Some(escape) = options.escape {
        format = format.with_escape(escape);
    }
    let (schema, _) = format.infer_schema(line, Some(0))?;
    Ok(schema.fields().iter().map(|f| f.name().clone()).collect())
}

/// The schema every Parquet file of a table has (its columns' names, types and nullability);
/// refused when they differ: DataFusion would merge them, and a column in one person's file
/// would show (the message names no file and no count: paths and counts can hold values).
async fn uniform_parquet_schema(
    state: &SessionState,
    store: &Arc<dyn ObjectStore>,
    files: &[ObjectMeta],
    listing: &ListingOptions,
    refuse: &dyn Fn(String) -> DataFusionError,
) -> Result<SchemaRef> {
    let columns = |schema: &Schema| {
        schema
            .fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone(), f.is_nullable()))
            .collect::<Vec<_>>()
    };
    let mut first: Option<SchemaRef> = None;
    for file in files {
        let schema = listing
            .format
            .infer_schema(state, store, std::slice::from_ref(file))
            .await?;
        match &first {
            None => first = Some(schema),
            Some(first) if columns(first) != columns(&schema) => {
                return Err(refuse(
                    "its Parquet files do not all have the same columns (names, types, \
                     nullability): declare the table's columns = [\"NAME TYPE\", ...] (SQL \
                     types), which every file is then read as (by name; a missing one is NULL)"
                        .to_string(),
                ))
            }
            Some(_) => {}
        }
    }
    first.ok_or_else(|| refuse("no Parquet files".to_string()))
}

fn table_format(location: &str) -> Result<&'static str> {
    let path = std::path::Path::new(location);
    let probe = if path.is_dir() {
        first_file(path).unwrap_or_default()
    } else {
        location.to_string()
    };
    let lower = probe.to_ascii_lowercase();
    if lower.ends_with(".parquet") {
        Ok("PARQUET")
    } else if lower.ends_with(".csv") {
        Ok("CSV")
    } else if lower.ends_with(".json") || lower.ends_with(".ndjson") {
        Ok("JSON")
    } else if location.contains("://") {
        Err(DataFusionError::Configuration(format!(
            "cannot tell the format of '{location}': expected a .parquet, .csv, .json or .ndjson \
             file (for a directory in an object store: CREATE EXTERNAL TABLE ... STORED AS \
             PARQUET LOCATION '{location}')"
        )))
    } else if !path.exists() {
        Err(DataFusionError::Configuration(format!(
            "no such file or directory: '{location}'"
        )))
    } else if path.is_dir() && probe.is_empty() {
        Err(DataFusionError::Configuration(format!(
            "no files in directory '{location}'"
        )))
    } else {
        Err(DataFusionError::Configuration(format!(
            "cannot tell the format of '{location}': expected .parquet, .csv, .json or .ndjson files"
        )))
    }
}

fn first_file(dir: &std::path::Path) -> Option<String> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    entries.into_iter().find_map(|p| {
        if p.is_dir() {
            first_file(&p)
        } else {
            Some(p.to_string_lossy().into_owned())
        }
    })
}
