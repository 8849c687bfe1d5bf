//! What the `dpsql` client and data-lake jobs share: a session with the DP functions and
//! `s3://` object stores from the environment, file registration, statement running and
//! output formatting. Thin: everything else is DataFusion's.

use crate::sql::options::DpOptions;
use arrow::array::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::object_store::{DefaultObjectStoreRegistry, ObjectStoreRegistry};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::DFParser;
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use object_store::ObjectStore;
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

/// A session with the DP functions and on-demand object stores.
pub fn session(config: SessionConfig) -> Result<SessionContext> {
    let runtime = RuntimeEnvBuilder::new()
        .with_object_store_registry(Arc::new(EnvObjectStoreRegistry::default()))
        .build_arc()?;
    let ctx = SessionContext::new_with_config_rt(config, runtime);
    crate::register(&ctx)?;
    Ok(ctx)
}

/// Registers a Parquet, CSV or NDJSON file or directory (hive-partitioned layouts are
/// detected) as table `name`, by the file extension (a directory: its first file's).
pub async fn register_path(ctx: &SessionContext, name: &str, location: &str) -> Result<()> {
    let format = table_format(location)?;
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

/// The result of one statement.
pub struct StatementResult {
    pub schema: arrow::datatypes::SchemaRef,
    pub batches: Vec<RecordBatch>,
}

/// Runs every statement of `sql` in order (`;`-separated), stopping at the first error.
pub async fn run_statements(ctx: &SessionContext, sql: &str) -> Result<Vec<StatementResult>> {
    let name = ctx.state().config().options().sql_parser.dialect;
    let dialect = dialect_from_str(name.as_ref()).ok_or_else(|| {
        DataFusionError::Configuration(format!("unsupported SQL dialect {}", name.as_ref()))
    })?;
    let statements = DFParser::parse_sql_with_dialect(sql, dialect.as_ref())?;
    let mut results = Vec::with_capacity(statements.len());
    for statement in statements {
        let plan = ctx.state().statement_to_plan(statement).await?;
        let frame = ctx.execute_logical_plan(plan).await?;
        let schema = Arc::new(frame.schema().as_arrow().clone());
        let batches = frame.collect().await?;
        results.push(StatementResult { schema, batches });
    }
    Ok(results)
}

/// Output formats of `dpsql`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Table,
    Csv,
    Json,
}

impl OutputFormat {
    pub fn parse(name: &str) -> std::result::Result<Self, String> {
        match name.to_ascii_lowercase().as_str() {
            "table" => Ok(Self::Table),
            "csv" => Ok(Self::Csv),
            "json" => Ok(Self::Json),
            other => Err(format!(
                "unknown format '{other}' (expected table, csv or json)"
            )),
        }
    }
}

/// Formats one statement's result.
pub fn format_result(result: &StatementResult, format: OutputFormat) -> Result<String> {
    Ok(match format {
        OutputFormat::Table => {
            if result.schema.fields().is_empty() {
                String::new()
            } else {
                arrow::util::pretty::pretty_format_batches(&result.batches)?.to_string()
            }
        }
        OutputFormat::Csv => {
            let mut out = Vec::new();
            {
                let mut writer = arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(&mut out);
                for batch in &result.batches {
                    writer.write(batch)?;
                }
            }
            String::from_utf8_lossy(&out).into_owned()
        }
        OutputFormat::Json => {
            let mut writer = arrow::json::ArrayWriter::new(Vec::new());
            let batches: Vec<&RecordBatch> = result.batches.iter().collect();
            writer.write_batches(&batches)?;
            writer.finish()?;
            String::from_utf8_lossy(&writer.into_inner()).into_owned()
        }
    })
}

/// The one-line warning printed after results computed in the non-private seeded mode.
pub fn seeded_warning(ctx: &SessionContext) -> Option<String> {
    let state = ctx.state();
    let seed = state
        .config()
        .options()
        .extensions
        .get::<DpOptions>()?
        .seed?;
    Some(format!(
        "warning: dp.seed = {seed} is set: DP results are reproducible and NOT private (tests only)"
    ))
}

/// An error as one line for a data engineer: the innermost DataFusion message.
pub fn one_line_error(error: &DataFusionError) -> String {
    let text = error.find_root().to_string();
    let line = text.lines().next().unwrap_or_default();
    // Coercion failures wrap our own message in DataFusion's: keep the innermost one.
    let inner = line
        .rsplit("Error during planning: ")
        .next()
        .unwrap_or(line);
    inner
        .split(". No function matches")
        .next()
        .unwrap_or(inner)
        .to_string()
}
