//! What the `dpsql` client and data-lake jobs share: statement running, output formatting and
//! one-line errors (sessions and table registration live in [`crate::owner::tables`] and are
//! re-exported here). Thin: everything else is DataFusion's.

use crate::sql::options::DpOptions;
use arrow::array::{ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{Field, Schema};
use datafusion::error::{DataFusionError, Result};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::{DFParser, Statement};
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use std::sync::Arc;

pub mod plot;
pub mod terminal;

pub use crate::sql::errors::{one_line_error, TableError};

pub use crate::owner::tables::{register_path, session, EnvObjectStoreRegistry};

/// The result of one statement.
pub struct StatementResult {
    pub schema: arrow::datatypes::SchemaRef,
    pub batches: Vec<RecordBatch>,
}

/// The statements of `sql` (`;`-separated), in the session's dialect.
fn parse_statements(ctx: &SessionContext, sql: &str) -> Result<Vec<Statement>> {
    let name = ctx.state().config().options().sql_parser.dialect;
    let dialect = dialect_from_str(name.as_ref()).ok_or_else(|| {
        DataFusionError::Configuration(format!("unsupported SQL dialect {}", name.as_ref()))
    })?;
    Ok(DFParser::parse_sql_with_dialect(sql, dialect.as_ref())?.into())
}

/// Runs every statement of `sql` as an untrusted analyst in a locked session (each through
/// [`crate::owner::analyst_sql`]), stopping at the first error.
pub async fn run_analyst_statements(
    ctx: &SessionContext,
    sql: &str,
) -> Result<Vec<StatementResult>> {
    // On a thread with a large stack, as analyst_sql plans: the input is parsed, printed and
    // dropped here, and each result is collected here (crate::sql::privacy::session::limits).
    let ctx = ctx.clone();
    let sql = sql.to_string();
    crate::sql::privacy::session::limits::on_planning_stack(async move {
        analyst_statements(&ctx, &sql).await
    })
    .await
}

async fn analyst_statements(ctx: &SessionContext, sql: &str) -> Result<Vec<StatementResult>> {
    let statements = parse_statements(ctx, sql)?;
    let single = statements.len() == 1;
    let mut results = Vec::new();
    for statement in statements {
        // One statement goes as written, so messages quote the analyst's own text.
        let text = if single {
            sql.to_string()
        } else {
            statement.to_string()
        };
        let frame = crate::owner::analyst_sql(ctx, &text).await?;
        results.push(collect_within_deadline(ctx, frame).await?);
    }
    Ok(results)
}

/// The logical plans of the statements of `sql`, built (not run, not charged) in `ctx`: what
/// a result's columns come from ([`plot::column_origin`]).
pub async fn plan_statements(
    ctx: &SessionContext,
    sql: &str,
) -> Result<Vec<datafusion::logical_expr::LogicalPlan>> {
    // On the planning thread's large stack, as the statements themselves were planned.
    let ctx = ctx.clone();
    let sql = sql.to_string();
    crate::sql::privacy::session::limits::on_planning_stack(async move {
        let mut plans = Vec::new();
        for statement in parse_statements(&ctx, &sql)? {
            plans.push(ctx.state().statement_to_plan(statement).await?);
        }
        Ok(plans)
    })
    .await
}

/// Runs every statement of `sql` in order (`;`-separated), stopping at the first error.
pub async fn run_statements(ctx: &SessionContext, sql: &str) -> Result<Vec<StatementResult>> {
    let statements = parse_statements(ctx, sql)?;
    let mut results = Vec::with_capacity(statements.len());
    for statement in statements {
        // A table that cannot be created (missing files, credentials, files that disagree on
        // a column's type) is named in the error, with its location.
        let table = match &statement {
            Statement::CreateExternalTable(create) => {
                Some((create.name.to_string(), create.locations.join(", ")))
            }
            _ => None,
        };
        let result = run_statement(ctx, statement).await;
        let result = match (result, table) {
            (Err(source), Some((table, location))) => {
                Err(DataFusionError::External(Box::new(TableError {
                    table,
                    location,
                    source,
                })))
            }
            (result, _) => result,
        };
        results.push(result?);
    }
    Ok(results)
}

async fn run_statement(ctx: &SessionContext, statement: Statement) -> Result<StatementResult> {
    let plan = ctx.state().statement_to_plan(statement).await?;
    collect(ctx.execute_logical_plan(plan).await?).await
}

/// An analyst's statement collected: stopped at the owner's per-query deadline when the
/// session has one ([`crate::sql::privacy::session::limits::with_deadline`]), and its batches
/// counted against the session's memory pool as they arrive. The shell holds a result whole
/// before printing it, outside any operator's reservation: `SELECT * FROM range(1e10)` grew
/// the process until the system killed it; now it fails with a resources error naming
/// `[limits] memory_limit`.
async fn collect_within_deadline(
    ctx: &SessionContext,
    frame: datafusion::prelude::DataFrame,
) -> Result<StatementResult> {
    use datafusion::execution::memory_pool::MemoryConsumer;
    use futures::StreamExt;
    let schema = Arc::new(frame.schema().as_arrow().clone());
    // The statement's own configuration with its cancellation, set when the statement ends
    // (at its deadline, or on an error), so that its function calls stop inside the batch
    // they are in, not only at their next yield (crate::sql::cooperative::QueryCancellation).
    let (mut state, logical) = frame.into_parts();
    let cancellation =
        crate::sql::cooperative::QueryCancellation::install(state.config_mut().options_mut());
    state.mark_start_execution();
    let plan = state.create_physical_plan(&logical).await?;
    let stream = datafusion::physical_plan::execute_stream(
        plan,
        Arc::new(datafusion::execution::TaskContext::from(&state)),
    )?;
    let _stop = cancellation.on_drop();
    let stream = match crate::sql::privacy::session::limits::query_deadline(ctx) {
        Some(limit) => crate::sql::privacy::session::limits::with_deadline(stream, limit),
        None => stream,
    };
    // Its first batch, error or end released on the analyst's schedule (`[limits]
    // release_quantum_ms`): the shell prints nothing of it before then.
    let mut stream = crate::sql::privacy::session::release_time::on_release_schedule(ctx, stream);
    let result = MemoryConsumer::new("dpsql result").register(&ctx.runtime_env().memory_pool);
    let mut batches = Vec::new();
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(name_the_memory_limit)?;
        result
            .try_grow(batch.get_array_memory_size())
            .map_err(|_| {
                DataFusionError::ResourcesExhausted(
                    "the statement's result is larger than the memory the session may hold \
                     ([limits] memory_limit); select fewer rows"
                        .to_string(),
                )
            })?;
        batches.push(batch);
    }
    Ok(StatementResult { schema, batches })
}

/// A resources error of an analyst's statement, naming the limit that refused it: the
/// session's pool is the owner's `[limits] memory_limit` (a DP aggregation's error text is
/// withheld, but a refusal of memory stays a resources error).
fn name_the_memory_limit(error: DataFusionError) -> DataFusionError {
    match error.find_root() {
        DataFusionError::ResourcesExhausted(message) if !message.contains("[limits]") => {
            DataFusionError::ResourcesExhausted(format!(
                "{message}; the session's memory ([limits] memory_limit) was full"
            ))
        }
        _ => error,
    }
}

async fn collect(frame: datafusion::prelude::DataFrame) -> Result<StatementResult> {
    let schema = Arc::new(frame.schema().as_arrow().clone());
    let batches = frame.collect().await?;
    Ok(StatementResult { schema, batches })
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
    // Statements without output (SET, CREATE ...) print nothing in any format.
    if result.schema.fields().is_empty() {
        return Ok(String::new());
    }
    Ok(match format {
        OutputFormat::Table => {
            arrow::util::pretty::pretty_format_batches(&result.batches)?.to_string()
        }
        OutputFormat::Csv => {
            let mut out = Vec::new();
            {
                let mut writer = arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(&mut out);
                for batch in &result.batches {
                    writer.write(&flatten_structs(batch)?)?;
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

/// `batch` with every struct column (such as an interval statistic's result) replaced by one column per
/// field, named `column.field`, since CSV has no nested values.
fn flatten_structs(batch: &RecordBatch) -> Result<RecordBatch> {
    fn push(name: &str, column: &ArrayRef, fields: &mut Vec<Field>, columns: &mut Vec<ArrayRef>) {
        match column.as_struct_opt() {
            Some(inner) => {
                for (field, child) in inner.fields().iter().zip(inner.columns()) {
                    push(&format!("{name}.{}", field.name()), child, fields, columns);
                }
            }
            None => {
                fields.push(Field::new(name, column.data_type().clone(), true));
                columns.push(Arc::clone(column));
            }
        }
    }
    let (mut fields, mut columns) = (Vec::new(), Vec::new());
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        push(field.name(), column, &mut fields, &mut columns);
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
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

/// What `dpsql`'s `\functions` (or `\df`) prints: every DP aggregate of the registry
/// ([`crate::sql::functions::aggregate::STATISTICS`]) with its SQL signature (derived from its
/// declared arguments), the one-line summary of its documentation and the keys its per-call
/// options string accepts, so a statistic added to the registry is listed without touching
/// the shell.
pub fn dp_function_list() -> Vec<String> {
    use crate::sql::functions::aggregate::STATISTICS;
    let mut lines = Vec::with_capacity(3 * STATISTICS.len() + 1);
    lines.push(format!(
        "{} DP aggregates (SHOW ALL lists the dp.* options; docs/sql-reference.md documents each):",
        STATISTICS.len()
    ));
    for statistic in STATISTICS {
        lines.push(format!("  {}", statistic.signature()));
        lines.push(format!("      {}", statistic.doc().summary));
        let keys = statistic.option_keys();
        if !keys.is_empty() {
            lines.push(format!("      options: {}", keys.join(", ")));
        }
    }
    lines
}

/// A `dpsql` meta-command: a line starting with `\`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaCommand {
    /// `\q`: leave the interactive shell.
    Quit,
    /// `\functions` or `\df`: [`dp_function_list`].
    Functions,
}

impl MetaCommand {
    /// `None` for a line that is not a meta-command (SQL); an error names an unknown one.
    pub fn parse(line: &str) -> Option<Result<Self, String>> {
        let line = line.trim();
        let name = line.strip_prefix('\\')?;
        Some(match name.trim_end_matches(';').trim() {
            "q" | "quit" => Ok(Self::Quit),
            "functions" | "df" => Ok(Self::Functions),
            other => Err(format!(
                "unknown meta-command '\\{other}' (\\functions lists the DP functions, \\q quits)"
            )),
        })
    }
}

#[cfg(test)]
mod meta_tests {
    use super::*;
    use crate::sql::functions::aggregate::STATISTICS;

    #[test]
    fn the_function_list_names_every_statistic_of_the_registry() {
        let lines = dp_function_list();
        let mut rest = &lines[1..];
        for statistic in STATISTICS {
            let (signature, summary) = (&rest[0], &rest[1]);
            assert_eq!(signature, &format!("  {}", statistic.signature()));
            assert_eq!(summary.trim(), statistic.doc().summary);
            rest = &rest[2..];
            if !statistic.option_keys().is_empty() {
                let options = &rest[0];
                for key in statistic.option_keys() {
                    assert!(options.contains(key), "{options}: {key}");
                }
                rest = &rest[1..];
            }
        }
        assert!(rest.is_empty(), "{rest:?}");
        assert!(lines.iter().any(
            |l| l.contains("dp_quantile(expr, q, lower, upper, epsilon [, options]) -> DOUBLE")
        ));
    }

    #[test]
    fn meta_commands_are_parsed_and_others_refused() {
        assert_eq!(
            MetaCommand::parse("\\functions"),
            Some(Ok(MetaCommand::Functions))
        );
        assert_eq!(
            MetaCommand::parse("  \\df; "),
            Some(Ok(MetaCommand::Functions))
        );
        assert_eq!(MetaCommand::parse("\\q"), Some(Ok(MetaCommand::Quit)));
        assert_eq!(MetaCommand::parse("SELECT 1;"), None);
        let err = MetaCommand::parse("\\dt").unwrap().unwrap_err();
        assert!(err.contains("unknown meta-command '\\dt'"), "{err}");
    }
}
