//! A sqllogictest driver with the DP functions installed, for this crate's `sql-tests/` and
//! for downstream suites:
//!
//! ```no_run
//! # async fn run() {
//! let mut runner = sqllogictest::Runner::new(|| async { datafusion_dp::slt::DpSltDb::new() });
//! runner.run_file_async("tests/my_suite.slt").await.unwrap();
//! # }
//! ```
//!
//! Results are printed with Arrow's display formatting (NULL as `NULL`, structs as
//! `{field: value, ...}`). Statements (DDL, `SET`) complete without rows. Set a seed in the
//! file (`statement ok` / `SET dp.seed = 42`) for reproducible — and non-private — output.

use crate::register;
use arrow::array::RecordBatch;
use arrow::datatypes::DataType;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use async_trait::async_trait;
use datafusion::error::DataFusionError;
use datafusion::prelude::{SessionConfig, SessionContext};
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};

/// A DataFusion session with the DP functions, for the `sqllogictest` runner.
pub struct DpSltDb {
    ctx: SessionContext,
}

impl DpSltDb {
    /// A fresh session (default configuration plus `information_schema`) with everything
    /// registered.
    pub fn new() -> Result<Self, DataFusionError> {
        Self::with_config(SessionConfig::new().with_information_schema(true))
    }

    /// A fresh session with the given configuration.
    pub fn with_config(config: SessionConfig) -> Result<Self, DataFusionError> {
        let ctx = SessionContext::new_with_config(config);
        register(&ctx)?;
        Ok(Self { ctx })
    }

    /// Wraps an existing session; call [`crate::register`] on it first.
    pub fn from_context(ctx: SessionContext) -> Self {
        Self { ctx }
    }

    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }
}

fn column_type(data_type: &DataType) -> DefaultColumnType {
    match data_type {
        t if t.is_integer() => DefaultColumnType::Integer,
        t if t.is_floating() || matches!(t, DataType::Decimal128(_, _)) => {
            DefaultColumnType::FloatingPoint
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DefaultColumnType::Text,
        _ => DefaultColumnType::Any,
    }
}

fn format_rows(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, DataFusionError> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = formatters
                .iter()
                .map(|f| {
                    let text = f.value(row).to_string();
                    if text.is_empty() {
                        "(empty)".to_string()
                    } else {
                        text
                    }
                })
                .collect();
            // A multi-line value (an EXPLAIN plan) becomes one output row per line, so the
            // expected output can be written line by line.
            let lines: Vec<Vec<&str>> = cells.iter().map(|c| c.lines().collect()).collect();
            let height = lines.iter().map(Vec::len).max().unwrap_or(1).max(1);
            for i in 0..height {
                // Continuation lines carry only the cells that have a line there (an empty
                // cell would add a separator the expected text does not have).
                rows.push(
                    lines
                        .iter()
                        .filter_map(|l| l.get(i).map(|s| s.to_string()))
                        .filter(|s| i == 0 || !s.is_empty())
                        .collect(),
                );
            }
        }
    }
    Ok(rows)
}

#[async_trait]
impl AsyncDB for DpSltDb {
    type Error = DataFusionError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<Self::ColumnType>, Self::Error> {
        let frame = self.ctx.sql(sql).await?;
        let schema = frame.schema().as_arrow().clone();
        let batches = frame.collect().await?;
        if schema.fields().is_empty() {
            return Ok(DBOutput::StatementComplete(0));
        }
        Ok(DBOutput::Rows {
            types: schema
                .fields()
                .iter()
                .map(|f| column_type(f.data_type()))
                .collect(),
            rows: format_rows(&batches)?,
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "datafusion-dp"
    }
}
