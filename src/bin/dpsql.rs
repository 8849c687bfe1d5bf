//! `dpsql`: a SQL client with the differentially private functions, options and planner rules
//! installed (DataFusion's own parsing, planning and printing underneath).
//!
//! ```text
//! dpsql                                   interactive, with history (~/.dpsql_history)
//! dpsql -c "SELECT ..." [-c ...]          run statements and exit
//! dpsql -f job.sql [-f ...]               run the statements in files and exit
//! dpsql --table visits=data/visits.csv    register a Parquet/CSV/NDJSON file or directory
//! dpsql --config owner.toml [--analyst A] a locked shell for an untrusted analyst: the owner's
//!                                         tables, protection, options and that analyst's budget
//! dpsql --format csv|json|table           output format (default table)
//! dpsql -c "SELECT ..." --plot rr.svg     also draw the result's interval column (the
//!                                         result of an interval statistic) as a forest plot
//! dpsql --slt a.slt [b.slt ...]           run sqllogictest files with the DP functions, as
//!                                         DataFusion's runner runs them (docs/dpsql.md)
//! dpsql --slt --public-tables [--seed N] a.slt
//!                                         ... every table public; seeded (NON-PRIVATE) noise
//! dpsql -c '\functions'                   list the DP aggregates (also `\df` in the shell)
//! dpsql --scheduler df://host:50050 ...   run on a Ballista cluster (feature `ballista`); a
//!                                         locked cluster's analyst connects as
//!                                         df://NAME@host:50051 with the password in DP_PASSWORD
//! ```
//! `s3://` locations use the usual AWS environment variables. Errors are one line. Output into a
//! pipe that closes early (`dpsql ... | head`) ends dpsql quietly with status 0; progress is
//! drawn only when stderr is a terminal ([`datafusion_dp::cli::terminal`]).

use datafusion::prelude::SessionConfig;
use datafusion_dp::cli::plot::{self, ForestRow, Statistic};
use datafusion_dp::cli::terminal::{note, print_line, Progress};
use datafusion_dp::cli::{
    dp_function_list, format_result, one_line_error, plan_statements, register_path,
    run_analyst_statements, run_statements, seeded_warning, session, MetaCommand, OutputFormat,
    StatementResult,
};
use datafusion_dp::owner::{Owner, OwnerConfig};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: dpsql [--scheduler df://HOST:PORT] [-c SQL]... [-f FILE]... [--table NAME=PATH]... [--config OWNER.toml [--analyst NAME]] [--format table|csv|json] [--plot FILE.svg] [-q] [--slt [--public-tables] [--seed N] FILE...]";

struct Args {
    commands: Vec<Command>,
    tables: Vec<(String, String)>,
    format: OutputFormat,
    quiet: bool,
    slt: Vec<String>,
    slt_public_tables: bool,
    slt_seed: Option<u64>,
    scheduler: Option<String>,
    config: Option<String>,
    analyst: Option<String>,
    plot: Option<String>,
}

enum Command {
    Sql(String),
    File(String),
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        commands: Vec::new(),
        tables: Vec::new(),
        format: OutputFormat::Table,
        quiet: false,
        slt: Vec::new(),
        slt_public_tables: false,
        slt_seed: None,
        scheduler: None,
        config: None,
        analyst: None,
        plot: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| it.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        match arg.as_str() {
            "-c" | "--command" => args.commands.push(Command::Sql(value(&arg)?)),
            "-f" | "--file" => args.commands.push(Command::File(value(&arg)?)),
            "-t" | "--table" => {
                let spec = value(&arg)?;
                let (name, path) = spec
                    .split_once('=')
                    .ok_or(format!("--table takes NAME=PATH, got '{spec}'"))?;
                args.tables.push((name.to_string(), path.to_string()));
            }
            "--format" => args.format = OutputFormat::parse(&value(&arg)?)?,
            "-q" | "--quiet" => args.quiet = true,
            "--scheduler" => args.scheduler = Some(value(&arg)?),
            "--config" => args.config = Some(value(&arg)?),
            "--analyst" => args.analyst = Some(value(&arg)?),
            "--plot" => args.plot = Some(value(&arg)?),
            "--slt" => {
                // Every argument after --slt is a file, or one of the driver's options.
                while let Some(arg) = it.next() {
                    match arg.as_str() {
                        "--public-tables" => args.slt_public_tables = true,
                        "--seed" => {
                            let seed = it.next().ok_or(format!("--seed needs a value\n{USAGE}"))?;
                            args.slt_seed = Some(parse_seed(&seed)?);
                        }
                        _ => args.slt.push(arg),
                    }
                }
            }
            "--public-tables" => args.slt_public_tables = true,
            "--seed" => args.slt_seed = Some(parse_seed(&value(&arg)?)?),
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument '{other}'\n{USAGE}")),
        }
    }
    if args.slt.is_empty() && (args.slt_public_tables || args.slt_seed.is_some()) {
        return Err("--public-tables and --seed are options of --slt FILE...".to_string());
    }
    if args.plot.is_some() && (!args.slt.is_empty() || args.commands.is_empty()) {
        return Err(
            "--plot FILE.svg draws the result of -c or -f statements (not with --slt or the \
             interactive shell)"
                .to_string(),
        );
    }
    if args.config.is_some() {
        let conflict = [
            (
                !args.tables.is_empty(),
                "--table (declare tables in the config)",
            ),
            (args.scheduler.is_some(), "--scheduler"),
            (!args.slt.is_empty(), "--slt"),
        ];
        if let Some((_, flag)) = conflict.iter().find(|(set, _)| *set) {
            return Err(format!("--config cannot be combined with {flag}"));
        }
    } else if args.analyst.is_some() {
        return Err("--analyst needs --config".to_string());
    }
    Ok(args)
}

fn parse_seed(value: &str) -> Result<u64, String> {
    value
        .parse()
        .map_err(|_| format!("--seed takes a non-negative integer, got '{value}'"))
}

/// What `--plot` draws: the last result with an interval column, and its statistic.
struct PlotSource {
    statistic: Statistic,
    rows: Vec<ForestRow>,
    confidence: Option<f64>,
    /// The epsilon and delta spent by the statements that produced it (`dp_budget()`).
    spent: (f64, f64),
}

/// The epsilon and delta the session has spent, from `dp_budget()`.
async fn spent(
    ctx: &datafusion::prelude::SessionContext,
    locked: bool,
) -> Result<(f64, f64), String> {
    let sql = "SELECT epsilon, delta FROM dp_budget() WHERE entry = 'spent'";
    let results = if locked {
        run_analyst_statements(ctx, sql).await
    } else {
        run_statements(ctx, sql).await
    }
    .map_err(|e| format!("--plot: reading dp_budget(): {}", one_line_error(&e)))?;
    use arrow::array::AsArray;
    use arrow::datatypes::Float64Type;
    let value = |column: usize| {
        results
            .first()
            .and_then(|r| r.batches.iter().find(|b| b.num_rows() > 0))
            .and_then(|b| {
                b.column(column)
                    .as_primitive_opt::<Float64Type>()
                    .map(|a| a.value(0))
            })
            .unwrap_or(0.0)
    };
    Ok((value(0), value(1)))
}

/// Runs SQL, printing each statement's result; a spinner on stderr (a terminal only) for
/// queries running longer than a second. With `--plot`, the last result with an interval
/// column is kept in `plot`.
async fn execute(
    ctx: &datafusion::prelude::SessionContext,
    sql: &str,
    args: &Args,
    plot: &mut Option<PlotSource>,
) -> Result<(), String> {
    let start = Instant::now();
    let locked = args.config.is_some();
    let spent_before = match args.plot {
        Some(_) => Some(spent(ctx, locked).await?),
        None => None,
    };
    let progress = (!args.quiet && datafusion_dp::cli::terminal::progress_enabled()).then(|| {
        tokio::spawn(async move {
            let mut progress = Progress::new("dpsql");
            let frames = ['|', '/', '-', '\\'];
            tokio::time::sleep(Duration::from_secs(1)).await;
            for i in 0.. {
                progress.update(&format!("{} running", frames[i % 4]));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    });
    let results = if locked {
        run_analyst_statements(ctx, sql).await
    } else {
        run_statements(ctx, sql).await
    };
    if let Some(task) = progress {
        // Dropping the task's Progress erases the line: wait for it before printing.
        task.abort();
        let _ = task.await;
    }
    let results = results.map_err(|e| one_line_error(&e))?;
    for result in &results {
        let text = format_result(result, args.format).map_err(|e| one_line_error(&e))?;
        if !text.is_empty() {
            print_line(text.trim_end())?;
        }
        if !args.quiet && args.format == OutputFormat::Table && !result.schema.fields().is_empty() {
            let rows: usize = result.batches.iter().map(|b| b.num_rows()).sum();
            note(&format!(
                "{rows} row(s) in {:.3}s",
                start.elapsed().as_secs_f64()
            ));
        }
    }
    if !results.iter().all(|r| r.schema.fields().is_empty()) {
        if let Some(warning) = seeded_warning(ctx) {
            note(&warning);
        }
    }
    if let Some(before) = spent_before {
        if let Some(source) = plot_source(ctx, sql, &results).await? {
            let after = spent(ctx, locked).await?;
            *plot = Some(PlotSource {
                spent: (after.0 - before.0, after.1 - before.1),
                ..source
            });
        }
    }
    Ok(())
}

/// The forest plot's data from the last of `results` with an interval column, if any: the
/// statements of `sql` are planned again (not run) to tell which statistic the column holds.
async fn plot_source(
    ctx: &datafusion::prelude::SessionContext,
    sql: &str,
    results: &[StatementResult],
) -> Result<Option<PlotSource>, String> {
    let Some(last) = results.iter().rposition(|r| {
        r.schema
            .fields()
            .iter()
            .any(|f| plot::is_interval(f.data_type()))
    }) else {
        return Ok(None);
    };
    let plans = plan_statements(ctx, sql)
        .await
        .map_err(|e| format!("--plot: {}", one_line_error(&e)))?;
    let plan = plans
        .get(last)
        .ok_or("--plot: the statements could not be matched with their results")?;
    let Some((column, statistic)) = plot::interval_column(&results[last], plan)? else {
        return Ok(None);
    };
    let (rows, confidence) = plot::forest_rows(&results[last], plan, column)?;
    Ok(Some(PlotSource {
        statistic,
        rows,
        confidence,
        spent: (0.0, 0.0),
    }))
}

/// Writes the forest plot of `source` to `path`.
fn write_plot(path: &str, source: &PlotSource, quiet: bool) -> Result<(), String> {
    let (epsilon, delta) = source.spent;
    let mut caption = format!("ε spent: {}", round_amount(epsilon));
    if delta > 0.0 {
        caption.push_str(&format!(", δ: {delta:e}"));
    }
    let groups = source.rows.len();
    caption.push_str(&format!(
        " by the statements drawn here (dp_budget()); {groups} group{}",
        if groups == 1 { "" } else { "s" }
    ));
    let svg = plot::forest_plot_svg(source.statistic, &source.rows, source.confidence, &caption);
    std::fs::write(path, svg).map_err(|e| format!("--plot: cannot write {path}: {e}"))?;
    if !quiet {
        note(&format!("wrote the forest plot to {path}"));
    }
    Ok(())
}

/// An amount of epsilon as people write it: the accountant's units (10^-12) rounded away.
fn round_amount(value: f64) -> String {
    let rounded = (value * 1e9).round() / 1e9;
    format!("{rounded}")
}

/// `\functions`: the DP aggregates of the registry with their signatures, on stdout.
fn print_functions() -> Result<(), String> {
    dp_function_list()
        .iter()
        .try_for_each(|line| print_line(line))
}

async fn repl(ctx: &datafusion::prelude::SessionContext, args: &Args) -> Result<(), String> {
    let mut editor = rustyline::DefaultEditor::new().map_err(|e| e.to_string())?;
    let history =
        std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".dpsql_history"));
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    note("dpsql: DataFusion with differentially private aggregates. End statements with ';', \\functions lists the DP functions, \\q quits.");
    let mut buffer = String::new();
    loop {
        let prompt = if buffer.is_empty() {
            "dpsql> "
        } else {
            "   ..> "
        };
        match editor.readline(prompt) {
            Ok(line) => {
                if buffer.is_empty() && matches!(line.trim(), "quit" | "exit") {
                    break;
                }
                if buffer.is_empty() {
                    if let Some(meta) = MetaCommand::parse(&line) {
                        let _ = editor.add_history_entry(line.trim());
                        match meta {
                            Ok(MetaCommand::Quit) => break,
                            Ok(MetaCommand::Functions) => print_functions()?,
                            Err(e) => note(&format!("error: {e}")),
                        }
                        continue;
                    }
                }
                buffer.push_str(&line);
                buffer.push('\n');
                if line.trim_end().ends_with(';') {
                    let _ = editor.add_history_entry(buffer.trim());
                    if let Err(e) = execute(ctx, &buffer, args, &mut None).await {
                        note(&format!("error: {e}"));
                    }
                    buffer.clear();
                }
            }
            Err(rustyline::error::ReadlineError::Interrupted) => buffer.clear(),
            Err(_) => break,
        }
    }
    if let Some(h) = &history {
        let _ = editor.save_history(h);
    }
    Ok(())
}

async fn run(args: Args) -> Result<(), String> {
    if !args.slt.is_empty() {
        let mut options = datafusion_dp::slt::DpSltOptions::new();
        if args.slt_public_tables {
            options = options.with_public_tables();
        }
        if let Some(seed) = args.slt_seed {
            options = options.with_seed(seed);
        }
        let mut failed = Vec::new();
        for file in &args.slt {
            let report = datafusion_dp::slt::run_file(file, &options)
                .await
                .map_err(|e| format!("{file}: {e}"))?;
            if report.failures.is_empty() {
                note(&format!("ok   {file}: {} records", report.ran));
            } else {
                for failure in &report.failures {
                    note(failure);
                }
                note(&format!(
                    "FAIL {file}: {} of {} records failed",
                    report.failures.len(),
                    report.ran
                ));
                failed.push(file.as_str());
            }
        }
        if !failed.is_empty() {
            return Err(format!("sqllogictest failures in {}", failed.join(", ")));
        }
        return Ok(());
    }
    let ctx = match (&args.config, &args.scheduler) {
        (Some(path), _) => locked_shell(path, args.analyst.as_deref()).await?,
        (None, None) => session(SessionConfig::new().with_information_schema(true))
            .map_err(|e| one_line_error(&e))?,
        (None, Some(url)) => remote(url).await?,
    };
    for (name, path) in &args.tables {
        register_path(&ctx, name, path)
            .await
            .map_err(|e| format!("table {name} ({path}): {}", one_line_error(&e)))?;
    }
    if args.commands.is_empty() {
        return repl(&ctx, &args).await;
    }
    let mut plotted = None;
    for command in &args.commands {
        let sql = match command {
            Command::Sql(sql) => match MetaCommand::parse(sql) {
                Some(Ok(MetaCommand::Functions)) => {
                    print_functions()?;
                    continue;
                }
                Some(Ok(MetaCommand::Quit)) => return Ok(()),
                Some(Err(e)) => return Err(e),
                None => sql.clone(),
            },
            Command::File(path) => {
                std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?
            }
        };
        let mut source = None;
        execute(&ctx, &sql, &args, &mut source).await?;
        plotted = source.or(plotted);
    }
    if let Some(path) = &args.plot {
        let source = plotted.ok_or(format!(
            "--plot {path}: no result has an interval column; select the result of {} (e.g. {}) \
             with GROUP BY",
            plot::interval_functions(),
            plot::interval_example()
        ))?;
        write_plot(path, &source, args.quiet)?;
    }
    Ok(())
}

/// The locked session the owner's configuration at `path` gives `analyst` (the only analyst
/// when there is one): the owner's tables and protection, that analyst's budget and ledger.
async fn locked_shell(
    path: &str,
    analyst: Option<&str>,
) -> Result<datafusion::prelude::SessionContext, String> {
    let config = OwnerConfig::load(std::path::Path::new(path)).map_err(|e| one_line_error(&e))?;
    let analyst = config
        .spending_analyst(analyst)
        .map_err(|e| format!("config {path}: {e}"))?
        .clone();
    let owner = Owner::open(config).await.map_err(|e| one_line_error(&e))?;
    owner
        .analyst_session(&analyst)
        .map_err(|e| one_line_error(&e))
}

/// A session on the Ballista cluster at `url`: queries are planned (and charged) here and run
/// on the cluster's executors. Errors name the URL without a password in it.
#[cfg(feature = "ballista")]
async fn remote(url: &str) -> Result<datafusion::prelude::SessionContext, String> {
    datafusion_dp::distributed::remote_context(url)
        .await
        .map_err(|e| {
            let shown = url::Url::parse(url).map_or(url.to_string(), |mut parsed| {
                let _ = parsed.set_password(None);
                parsed.to_string()
            });
            format!("scheduler {shown}: {}", one_line_error(&e))
        })
}

#[cfg(not(feature = "ballista"))]
async fn remote(_url: &str) -> Result<datafusion::prelude::SessionContext, String> {
    Err("--scheduler needs dpsql built with the 'ballista' feature (cargo build --features ballista)".to_string())
}

fn main() -> ExitCode {
    // Queries execute on worker threads with stacks sized for the limits on a plan
    // (`limits::EXECUTION_STACK_BYTES`), not tokio's 2 MiB.
    match datafusion_dp::sql::privacy::session::limits::execution_runtime().build() {
        Ok(runtime) => runtime.block_on(shell()),
        Err(e) => {
            note(&format!("error: cannot start the query threads: {e}"));
            ExitCode::FAILURE
        }
    }
}

async fn shell() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            note(&e);
            return ExitCode::from(2);
        }
    };
    if args.config.is_some() {
        // A locked shell: a panic's message (a kernel's, on a worker thread, turned into a
        // query error by DataFusion) could quote protected values; the analyst sees this line.
        std::panic::set_hook(Box::new(|_| {
            note("a worker thread panicked; its message is withheld (locked session)")
        }));
    }
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            note(&format!("error: {e}"));
            ExitCode::FAILURE
        }
    }
}
