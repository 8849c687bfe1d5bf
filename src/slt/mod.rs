//! A sqllogictest driver with the DP functions installed, built on DataFusion's own runner's
//! conventions, so that a `.slt` file that passes under DataFusion's runner (the
//! `datafusion-sqllogictest` crate, 55.x) passes here unchanged, and the same file can add DP
//! queries:
//!
//! ```no_run
//! # async fn run() {
//! use datafusion_dp::slt::{run_file, DpSltOptions};
//! let report = run_file("tests/my_suite.slt", &DpSltOptions::new().with_public_tables())
//!     .await
//!     .unwrap();
//! assert!(report.failures.is_empty(), "{}", report.failures.join("\n\n"));
//! # }
//! ```
//!
//! What is DataFusion's here (see [`normalize`] for the files it follows):
//! - the session: default configuration with 4 target partitions (upstream's `TestContext`;
//!   plans do not depend on the machine), `information_schema` off until a file sets
//!   `datafusion.catalog.information_schema`; every connection of a file shares it;
//! - results: numbers normalised (`1`, `1.23`, `Infinity`), `(empty)`, `NULL`, `EXPLAIN`
//!   plans one numbered line per row (`01)`, indentation as `-`), column type letters
//!   `B D I P R T ?` checked strictly;
//! - errors: `DataFusion error: ` and DataFusion's message, as `statement error` patterns
//!   upstream are written;
//! - records: the label `Datafusion` (upstream's `onlyif`/`skipif Datafusion` hold here) and
//!   the engine name `datafusion-dp` (`onlyif datafusion-dp` records run here only), `halt`.
//!
//! What is the extension's: the DP functions and planner rule ([`crate::register`]). Tables
//! nobody declared are protected, so reading one outside a DP aggregate is refused; a suite
//! of ordinary SQL declares them public, and a suite with DP queries can fix the noise:
//! - as a driver option: [`DpSltOptions::with_public_tables`] (`dp.public_tables = '*'`),
//!   [`DpSltOptions::with_seed`] (`dp.seed`: reproducible, NON-PRIVATE noise), or in the shell
//!   `dpsql --slt --public-tables --seed 42 FILE`;
//! - in the file, as directives in the comment lines at its top (before the first record):
//!   `# datafusion-dp: public_tables = *`, `# datafusion-dp: seed = 42`. Any `dp.*` option can
//!   be set this way. DataFusion's runner reads them as comments, so the file still runs there.
//!
//! The lower-level pieces ([`DpSltDb`], the `sqllogictest` [`Runner`] [`runner`] configures)
//! are public for suites that drive records themselves.

pub mod normalize;

pub use normalize::{df_value_validator, value_normalizer, DpColumnType};

use crate::register;
use arrow::error::ArrowError;
use async_trait::async_trait;
use datafusion::error::DataFusionError;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_plan::common::collect;
use datafusion::physical_plan::execute_stream;
use datafusion::prelude::{SessionConfig, SessionContext};
use sqllogictest::{AsyncDB, DBOutput, MakeConnection, Record, RecordOutput, Runner};
use std::path::Path;
use std::sync::Arc;

/// The comment prefix of a file-level directive.
pub const DIRECTIVE_PREFIX: &str = "datafusion-dp:";

/// The label DataFusion's runner gives its records (`onlyif Datafusion`, `skipif Datafusion`).
pub const UPSTREAM_LABEL: &str = "Datafusion";

/// How [`DpSltDb`] sessions start: `dp.*` options set before the first record (driver options
/// and file directives), and the path written `WORKSPACE_ROOT` in results.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DpSltOptions {
    /// `dp.*` options (`name` without the prefix, value), in order.
    pub settings: Vec<(String, String)>,
    /// Written `WORKSPACE_ROOT` wherever it appears in a result (upstream writes its checkout's
    /// root so, for plans that show file paths).
    pub workspace_root: Option<String>,
}

impl DpSltOptions {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every table not declared otherwise is public (`dp.public_tables = '*'`): ordinary SQL
    /// reads it as DataFusion would. For suites written for DataFusion.
    pub fn with_public_tables(self) -> Self {
        self.with_setting("public_tables", "*")
    }

    /// Seeded noise (`dp.seed`): reproducible DP output for expected results, and NOT private.
    pub fn with_seed(self, seed: u64) -> Self {
        self.with_setting("seed", &seed.to_string())
    }

    /// Any `dp.*` option (`name` with or without the `dp.` prefix).
    pub fn with_setting(mut self, name: &str, value: &str) -> Self {
        let name = name.trim().strip_prefix("dp.").unwrap_or(name.trim());
        self.settings.retain(|(n, _)| n != name);
        self.settings
            .push((name.to_string(), value.trim().to_string()));
        self
    }

    /// `root` written `WORKSPACE_ROOT` in results.
    pub fn with_workspace_root(mut self, root: impl Into<String>) -> Self {
        self.workspace_root = Some(root.into());
        self
    }

    /// These options with the directives of `script` (a file's text) applied after them:
    /// comment lines `# datafusion-dp: name = value` among the comments and blank lines at its
    /// top, before the first record. A directive further down is an error (it would read as
    /// applying to the records above it).
    pub fn with_directives(mut self, script: &str) -> Result<Self, DpSltError> {
        let mut header = true;
        for (number, line) in script.lines().enumerate() {
            let trimmed = line.trim();
            let directive = trimmed
                .strip_prefix('#')
                .and_then(|c| c.trim_start().strip_prefix(DIRECTIVE_PREFIX));
            if !trimmed.is_empty() && !trimmed.starts_with('#') {
                header = false;
            }
            let Some(directive) = directive else {
                continue;
            };
            let at = number + 1;
            if !header {
                return Err(DpSltError::Directive(format!(
                    "line {at}: '{trimmed}': directives go in the comments at the top of the \
                     file, before the first record"
                )));
            }
            let Some((name, value)) = directive.split_once('=') else {
                return Err(DpSltError::Directive(format!(
                    "line {at}: '{trimmed}': write '# {DIRECTIVE_PREFIX} name = value' (e.g. \
                     public_tables = *, seed = 42)"
                )));
            };
            let value = value.trim().trim_matches('\'');
            self = self.with_setting(name, value);
        }
        Ok(self)
    }
}

/// An error of a statement, written as DataFusion's runner writes it (upstream
/// `DFSqlLogicTestError`, `src/engines/datafusion_engine/error.rs`): `DataFusion error: `, then
/// DataFusion's message without a backtrace.
#[derive(Debug)]
pub enum DpSltError {
    DataFusion(DataFusionError),
    Arrow(ArrowError),
    /// A malformed or misplaced file directive, or an unusable driver option.
    Directive(String),
    /// Anything else (upstream's `Other Error`).
    Other(String),
}

impl std::fmt::Display for DpSltError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::DataFusion(e) => write!(f, "DataFusion error: {}", e.strip_backtrace()),
            Self::Arrow(e) => write!(f, "Arrow error: {e}"),
            Self::Directive(e) => write!(f, "datafusion-dp directive: {e}"),
            Self::Other(e) => write!(f, "Other Error: {e}"),
        }
    }
}

impl std::error::Error for DpSltError {}

impl From<DataFusionError> for DpSltError {
    fn from(e: DataFusionError) -> Self {
        Self::DataFusion(e)
    }
}

impl From<normalize::ConvertError> for DpSltError {
    fn from(e: normalize::ConvertError) -> Self {
        match e {
            normalize::ConvertError::Arrow(e) => Self::Arrow(e),
            normalize::ConvertError::SchemaMismatch(m) => {
                Self::DataFusion(DataFusionError::Internal(m))
            }
        }
    }
}

/// A DataFusion session with the DP functions, for the `sqllogictest` runner.
pub struct DpSltDb {
    ctx: SessionContext,
    workspace_root: Option<String>,
}

impl DpSltDb {
    /// A fresh session as DataFusion's runner makes one (upstream `TestContext`: default
    /// configuration and features, 4 target partitions), with everything registered.
    pub fn new() -> Result<Self, DpSltError> {
        Self::with_options(&DpSltOptions::default())
    }

    /// [`DpSltDb::new`], with `options` applied.
    pub fn with_options(options: &DpSltOptions) -> Result<Self, DpSltError> {
        let db = Self::with_config(upstream_config())?;
        db.apply(options)
    }

    /// A fresh session with the given configuration, with everything registered.
    pub fn with_config(config: SessionConfig) -> Result<Self, DpSltError> {
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .build();
        let ctx = SessionContext::new_with_state(state);
        register(&ctx)?;
        Ok(Self::from_context(ctx))
    }

    /// Wraps an existing session; call [`crate::register`] on it first.
    pub fn from_context(ctx: SessionContext) -> Self {
        Self {
            ctx,
            workspace_root: None,
        }
    }

    /// Sets `options`' `dp.*` settings in the session (as `SET` would) and keeps its workspace
    /// root.
    pub fn apply(mut self, options: &DpSltOptions) -> Result<Self, DpSltError> {
        {
            let state = self.ctx.state_ref();
            let mut state = state.write();
            for (name, value) in &options.settings {
                state
                    .config_mut()
                    .options_mut()
                    .set(&format!("dp.{name}"), value)?;
            }
        }
        if options.workspace_root.is_some() {
            self.workspace_root.clone_from(&options.workspace_root);
        }
        Ok(self)
    }

    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }
}

/// The configuration of DataFusion's runner's sessions (upstream `TestContext::
/// try_new_for_test_file`, `src/test_context.rs`): 4 target partitions, so that plans are
/// the same on every machine.
pub fn upstream_config() -> SessionConfig {
    SessionConfig::new().with_target_partitions(4)
}

#[async_trait]
impl AsyncDB for DpSltDb {
    type Error = DpSltError;
    type ColumnType = DpColumnType;

    /// Upstream `run_query` (`src/engines/datafusion_engine/runner.rs`).
    async fn run(&mut self, sql: &str) -> Result<DBOutput<Self::ColumnType>, Self::Error> {
        let frame = self.ctx.sql(sql).await?;
        let task_ctx = Arc::new(frame.task_ctx());
        let plan = frame.create_physical_plan().await?;
        let schema = plan.schema();
        let stream = execute_stream(plan, task_ctx)?;
        let types = normalize::convert_schema_to_types(stream.schema().fields());
        let batches = collect(stream).await?;
        let rows = normalize::convert_batches(&schema, batches, self.workspace_root.as_deref())?;
        if rows.is_empty() && types.is_empty() {
            Ok(DBOutput::StatementComplete(0))
        } else {
            Ok(DBOutput::Rows { types, rows })
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "datafusion-dp"
    }

    async fn sleep(duration: std::time::Duration) {
        tokio::time::sleep(duration).await;
    }
}

/// A `sqllogictest` runner set up as DataFusion's (upstream `bin/sqllogictests.rs`,
/// `run_test_file`): the label `Datafusion`, [`value_normalizer`], [`df_value_validator`],
/// strict column types; every connection shares one [`DpSltDb`] session made with `options`.
pub fn runner(
    options: &DpSltOptions,
) -> Result<Runner<DpSltDb, impl MakeConnection<Conn = DpSltDb>>, DpSltError> {
    let db = DpSltDb::with_options(options)?;
    let ctx = db.ctx.clone();
    let root = db.workspace_root.clone();
    let mut runner = Runner::new(move || {
        let db = DpSltDb {
            ctx: ctx.clone(),
            workspace_root: root.clone(),
        };
        async move { Ok::<_, DpSltError>(db) }
    });
    runner.add_label(UPSTREAM_LABEL);
    runner.with_normalizer(value_normalizer);
    runner.with_validator(df_value_validator);
    runner.with_column_validator(sqllogictest::strict_column_validator);
    Ok(runner)
}

/// What [`run_file`] found.
#[derive(Debug, Default)]
pub struct SltReport {
    /// Statements and queries run (records skipped by `onlyif`/`skipif` not counted).
    pub ran: usize,
    /// Of those, the ones that failed: each error as the runner writes it, with its location.
    pub failures: Vec<String>,
}

impl SltReport {
    pub fn passed(&self) -> usize {
        self.ran - self.failures.len()
    }
}

/// Runs the sqllogictest file at `path` with `options` and the file's directives
/// ([`DpSltOptions::with_directives`]), every record (a failure does not stop the file, as in
/// DataFusion's runner). The error is a file that cannot be read or parsed, or a bad directive.
pub async fn run_file(
    path: impl AsRef<Path>,
    options: &DpSltOptions,
) -> Result<SltReport, DpSltError> {
    let path = path.as_ref();
    let records = sqllogictest::parse_file(path)
        .map_err(|e| DpSltError::Other(format!("{}: {e}", path.display())))?;
    let options = file_options(path, options)?;
    run_records(records, &options).await
}

/// [`run_file`] of records already parsed (a suite's own selection), with `options` as given
/// (read a file's directives with [`DpSltOptions::with_directives`]).
pub async fn run_records(
    records: Vec<Record<DpColumnType>>,
    options: &DpSltOptions,
) -> Result<SltReport, DpSltError> {
    let mut runner = runner(options)?;
    let mut report = SltReport::default();
    for record in records {
        if let Record::Halt { .. } = record {
            break;
        }
        match runner.run_async(record).await {
            Ok(RecordOutput::Nothing) => {}
            Ok(_) => report.ran += 1,
            Err(e) => {
                report.ran += 1;
                report.failures.push(e.display(false).to_string());
            }
        }
    }
    runner.shutdown_async().await;
    Ok(report)
}

/// Rewrites the expected output of the file at `path` from what it produces now (the runner's
/// `update_test_file`, with DataFusion's conventions), directives applied. Review the diff.
pub async fn update_file(path: impl AsRef<Path>, options: &DpSltOptions) -> Result<(), String> {
    let path = path.as_ref();
    let options = file_options(path, options).map_err(|e| e.to_string())?;
    let mut runner = runner(&options).map_err(|e| e.to_string())?;
    let result = runner
        .update_test_file(
            path,
            " ",
            df_value_validator,
            value_normalizer,
            sqllogictest::strict_column_validator,
        )
        .await
        .map_err(|e| format!("{}: {e}", path.display()));
    runner.shutdown_async().await;
    result
}

fn file_options(path: &Path, options: &DpSltOptions) -> Result<DpSltOptions, DpSltError> {
    let script = std::fs::read_to_string(path)
        .map_err(|e| DpSltError::Other(format!("{}: {e}", path.display())))?;
    options
        .clone()
        .with_directives(&script)
        .map_err(|e| DpSltError::Directive(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_are_read_from_the_top_of_a_file() {
        let script = "# Licensed ...\n\n# datafusion-dp: public_tables = *\n#datafusion-dp: seed = '42'\n\nstatement ok\nSELECT 1\n";
        let options = DpSltOptions::new()
            .with_seed(7)
            .with_directives(script)
            .unwrap();
        assert_eq!(
            options.settings,
            vec![
                ("public_tables".to_string(), "*".to_string()),
                ("seed".to_string(), "42".to_string())
            ]
        );
        let late = "statement ok\nSELECT 1\n\n# datafusion-dp: seed = 1\n";
        assert!(DpSltOptions::new().with_directives(late).is_err());
        assert!(DpSltOptions::new()
            .with_directives("# datafusion-dp: seed\n")
            .is_err());
    }

    #[tokio::test]
    async fn options_reach_the_session_and_errors_read_as_upstream_s() {
        let mut db =
            DpSltDb::with_options(&DpSltOptions::new().with_public_tables().with_seed(3)).unwrap();
        assert!(db.run("CREATE TABLE t (x INT) AS VALUES (1)").await.is_ok());
        let Ok(output) = db.run("SELECT x FROM t").await else {
            panic!("error")
        };
        match output {
            DBOutput::Rows { types, rows } => {
                assert_eq!(types, vec![DpColumnType::Integer]);
                assert_eq!(rows, vec![vec!["1".to_string()]]);
            }
            DBOutput::StatementComplete(_) => panic!("no rows"),
            _ => panic!("unexpected output"),
        }
        let Err(error) = db.run("SELECT nope FROM t").await else {
            panic!("no error")
        };
        let error = error.to_string();
        assert!(
            error.starts_with("DataFusion error: Schema error: No field named nope"),
            "{error}"
        );
        // Undeclared tables are protected without the option.
        let mut db = DpSltDb::new().unwrap();
        assert!(db.run("CREATE TABLE t (x INT) AS VALUES (1)").await.is_ok());
        let Err(error) = db.run("SELECT x FROM t").await else {
            panic!("no error")
        };
        let error = error.to_string();
        assert!(error.starts_with("DataFusion error: "), "{error}");
        assert!(error.contains("protected"), "{error}");
    }
}
