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
//! dpsql --slt a.slt [b.slt ...]           run sqllogictest files with the DP functions
//! dpsql --scheduler df://host:50050 ...   run on a Ballista cluster (feature `ballista`)
//! ```
//! `s3://` locations use the usual AWS environment variables. Errors are one line.

use datafusion::prelude::SessionConfig;
use datafusion_dp::cli::{
    format_result, one_line_error, register_path, run_analyst_statements, run_statements,
    seeded_warning, session, OutputFormat,
};
use datafusion_dp::owner::{Owner, OwnerConfig};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: dpsql [--scheduler df://HOST:PORT] [-c SQL]... [-f FILE]... [--table NAME=PATH]... [--config OWNER.toml [--analyst NAME]] [--format table|csv|json] [-q] [--slt FILE...]";

struct Args {
    commands: Vec<Command>,
    tables: Vec<(String, String)>,
    format: OutputFormat,
    quiet: bool,
    slt: Vec<String>,
    scheduler: Option<String>,
    config: Option<String>,
    analyst: Option<String>,
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
        scheduler: None,
        config: None,
        analyst: None,
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
            "--slt" => {
                args.slt.extend(it.by_ref());
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument '{other}'\n{USAGE}")),
        }
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

/// Runs SQL, printing each statement's result; a spinner on stderr for long queries.
async fn execute(
    ctx: &datafusion::prelude::SessionContext,
    sql: &str,
    args: &Args,
) -> Result<(), String> {
    let start = Instant::now();
    let locked = args.config.is_some();
    let progress = (!args.quiet && std::io::stderr().is_terminal()).then(|| {
        tokio::spawn(async move {
            let frames = ['|', '/', '-', '\\'];
            let mut i = 0;
            tokio::time::sleep(Duration::from_millis(500)).await;
            loop {
                eprint!(
                    "\r{} running {:.1}s ",
                    frames[i % 4],
                    start.elapsed().as_secs_f64()
                );
                i += 1;
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
        task.abort();
        eprint!("\r\x1b[K");
    }
    let results = results.map_err(|e| one_line_error(&e))?;
    for result in &results {
        let text = format_result(result, args.format).map_err(|e| one_line_error(&e))?;
        if !text.is_empty() {
            println!("{}", text.trim_end());
        }
        if !args.quiet && args.format == OutputFormat::Table && !result.schema.fields().is_empty() {
            let rows: usize = result.batches.iter().map(|b| b.num_rows()).sum();
            eprintln!("{rows} row(s) in {:.3}s", start.elapsed().as_secs_f64());
        }
    }
    if !results.iter().all(|r| r.schema.fields().is_empty()) {
        if let Some(warning) = seeded_warning(ctx) {
            eprintln!("{warning}");
        }
    }
    Ok(())
}

async fn repl(ctx: &datafusion::prelude::SessionContext, args: &Args) -> Result<(), String> {
    let mut editor = rustyline::DefaultEditor::new().map_err(|e| e.to_string())?;
    let history =
        std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".dpsql_history"));
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    eprintln!("dpsql: DataFusion with differentially private aggregates. End statements with ';', \\q to quit.");
    let mut buffer = String::new();
    loop {
        let prompt = if buffer.is_empty() {
            "dpsql> "
        } else {
            "   ..> "
        };
        match editor.readline(prompt) {
            Ok(line) => {
                if buffer.is_empty() && matches!(line.trim(), "\\q" | "quit" | "exit") {
                    break;
                }
                buffer.push_str(&line);
                buffer.push('\n');
                if line.trim_end().ends_with(';') {
                    let _ = editor.add_history_entry(buffer.trim());
                    if let Err(e) = execute(ctx, &buffer, args).await {
                        eprintln!("error: {e}");
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
        for file in &args.slt {
            let mut runner =
                sqllogictest::Runner::new(|| async { datafusion_dp::slt::DpSltDb::new() });
            runner
                .run_file_async(file)
                .await
                .map_err(|e| format!("{file}: {}", e.display(false)))?;
            eprintln!("ok   {file}");
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
    for command in &args.commands {
        let sql = match command {
            Command::Sql(sql) => sql.clone(),
            Command::File(path) => {
                std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?
            }
        };
        execute(&ctx, &sql, &args).await?;
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
/// on the cluster's executors.
#[cfg(feature = "ballista")]
async fn remote(url: &str) -> Result<datafusion::prelude::SessionContext, String> {
    datafusion_dp::distributed::remote_context(url)
        .await
        .map_err(|e| format!("scheduler {url}: {}", one_line_error(&e)))
}

#[cfg(not(feature = "ballista"))]
async fn remote(_url: &str) -> Result<datafusion::prelude::SessionContext, String> {
    Err("--scheduler needs dpsql built with the 'ballista' feature (cargo build --features ballista)".to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if args.config.is_some() {
        // A locked shell: a panic's message (a kernel's, on a worker thread, turned into a
        // query error by DataFusion) could quote protected values; the analyst sees this line.
        std::panic::set_hook(Box::new(|_| {
            eprintln!("a worker thread panicked; its message is withheld (locked session)")
        }));
    }
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
