//! The owner's tables: a session with the DP functions and on-demand object stores (local
//! files, `s3://` from the environment), and registration of a file, directory or hive layout
//! as a table. `dpsql --table`, `dpsql --config`, `dp-server` and data-lake jobs share it.

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::object_store::{DefaultObjectStoreRegistry, ObjectStoreRegistry};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::prelude::{SessionConfig, SessionContext};
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

/// A runtime whose object stores resolve on first use (see [`EnvObjectStoreRegistry`]); one
/// runtime can serve many sessions (the server's).
pub fn runtime() -> Result<Arc<RuntimeEnv>> {
    RuntimeEnvBuilder::new()
        .with_object_store_registry(Arc::new(EnvObjectStoreRegistry::default()))
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

/// Registers the file, directory or hive layout at `location` as table `name`, in `format`
/// (`parquet`, `csv` with a header line, or `json` for NDJSON) or, without one, by the file
/// extension (a directory: its first file's).
pub async fn register_table(
    ctx: &SessionContext,
    name: &str,
    location: &str,
    format: Option<&str>,
) -> Result<()> {
    let format = match format {
        Some(format) => match format.to_ascii_lowercase().as_str() {
            "parquet" => "PARQUET",
            "csv" => "CSV",
            "json" | "ndjson" => "JSON",
            other => {
                return Err(DataFusionError::Configuration(format!(
                    "table {name}: unknown format '{other}' (expected parquet, csv or json)"
                )))
            }
        },
        None => table_format(location)?,
    };
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
