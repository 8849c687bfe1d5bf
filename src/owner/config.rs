//! The data owner's configuration file (TOML), read by `dpsql --config` and `dp-server --config`:
//! the tables and how each is protected, the `dp.*` options the owner fixes before locking, the
//! analysts with their credentials, budgets and ledgers, the server's address and TLS files, and
//! the limits on what the analysts' queries take from the process (memory, spilling).
//!
//! ```toml
//! [[table]]
//! name = "visits"
//! location = "data/visits.csv"   # a file, a directory or hive layout, or s3://bucket/prefix/
//! unit = "patient_id"            # protected: one person is every row with one patient_id
//! columns = ["visit_id BIGINT", "patient_id BIGINT", "region VARCHAR", "month VARCHAR",
//!            "exposed BOOLEAN", "outcome BOOLEAN"]   # SQL types; a CSV's in its column order
//! # partition_columns = ["year INT"]   # a hive layout's key=value directories, outermost first
//! # in_memory = true             # read once at start, served from memory (small tables)
//!
//! [[table]]
//! name = "regions"
//! location = "data/regions.csv"
//! protection = "public"          # "rows" (each row a person; the default), "unit",
//!                                # "unique_unit" (one row per unit: no bounding), "public"
//!
//! [options]                      # dp.* options fixed by the owner (analysts cannot SET them)
//! public_groups = "regions"
//!
//! [[analyst]]
//! name = "alice"
//! password_hash = "$argon2id$v=19$..."   # from `dp-server --hash-password`
//! epsilon_budget = 5.0
//! delta_budget = 1e-6
//! ledger = "ledgers/alice.ledger"
//!
//! [server]
//! listen = "127.0.0.1:50051"
//! # scheduler = "df://10.0.0.5:50050"   # run queries on this trusted Ballista cluster
//! token_lifetime_seconds = 28800 # and the other limits of docs/server-limits.md
//!
//! [limits]
//! memory_limit = "4GiB"          # all queries together (the default); then a resources error
//! query_memory_limit = "1GiB"    # one query (default: a quarter of memory_limit)
//! # analyst_memory_limit = "1GiB" # one analyst's queries (default: an equal share each)
//! # spill_directory = "/var/tmp/dp-spill"   # spill there instead; no spilling by default
//! query_timeout_seconds = 600    # a query running longer is stopped (the default)
//! ```
//! Relative paths are relative to the configuration file's directory.
//!
//! A protected table's schema is the owner's: CSV and NDJSON tables declare `columns` (an
//! inferred type or field would depend on the rows, so one person's value could show in
//! `DESCRIBE`), Parquet ones may take it from their files' metadata when every file has the
//! same, and hive layouts declare their `partition_columns`.

use crate::Protection;
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::DFSchema;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{Cast, Expr};
use datafusion::prelude::{SessionConfig, SessionContext};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One `[[table]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TableConfig {
    /// The table's SQL name: a lower-case identifier.
    pub name: String,
    /// A local path (resolved against the configuration's directory) or an object-store URL.
    pub location: String,
    /// `parquet`, `csv` or `json`; by the file extension when absent.
    pub format: Option<String>,
    pub protection: Protection,
    /// The declared columns (`columns = ["name TYPE", ...]`): a CSV file's by position (in its
    /// header's order), NDJSON fields and Parquet columns by name (a missing one is NULL);
    /// `None`: undeclared (a Parquet table's file metadata, or a public table's inference).
    pub columns: Option<Vec<Field>>,
    /// A hive layout's partition columns (`partition_columns = ["name TYPE", ...]`), outermost
    /// directory first; they follow `columns` in the table's schema.
    pub partition_columns: Vec<Field>,
    /// `in_memory = true`: the rows are read once when the tables are opened and every query
    /// scans that copy (files changed later are not seen); `dp-server` and `dpsql` only.
    pub in_memory: bool,
}

/// One `[[analyst]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalystConfig {
    pub name: String,
    /// How the analyst's password is checked; `None`: the analyst cannot log in to the
    /// server (a `dpsql --config` shell the owner hands over).
    pub credential: Option<Credential>,
    pub epsilon_budget: f64,
    pub delta_budget: Option<f64>,
    /// The analyst's durable ledger (resolved against the configuration's directory).
    pub ledger: PathBuf,
}

/// An analyst's stored credential.
#[derive(Clone, PartialEq)]
pub enum Credential {
    /// An Argon2 hash in PHC format (`$argon2id$v=19$...`), as `dp-server --hash-password`
    /// prints it: the form to use.
    Hash(String),
    /// A password in clear text (tests and throw-away set-ups only).
    Password(String),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Hash(_) => write!(f, "Hash(..)"),
            Credential::Password(_) => write!(f, "Password(..)"),
        }
    }
}

/// The `[server]` section: where `dp-server` listens, and what one analyst or one stranger
/// reaching the port may take from it (docs/server-limits.md lists every limit).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Address to listen on (`dp-server --listen` overrides it); default `127.0.0.1:50051`.
    pub listen: Option<String>,
    /// PEM certificate chain and private key: with both, the server speaks TLS only.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// A session (bearer token) unused for this long is closed; default 3600.
    pub session_idle_seconds: u64,
    /// A token is refused this long after its login, used or not, so a stolen token does not
    /// work for ever; default [`DEFAULT_TOKEN_LIFETIME_SECONDS`] (8 h).
    pub token_lifetime_seconds: u64,
    /// Open sessions per analyst: a login beyond it closes that analyst's least recently used
    /// session (a client that never closes its sessions only hurts its own analyst).
    pub max_sessions_per_analyst: usize,
    /// Prepared statements per session: one more is refused until one is closed.
    pub max_prepared_statements: usize,
    /// Largest gRPC message the server decodes (tonic's `max_decoding_message_size`).
    pub max_message_bytes: usize,
    /// Connections open at once, in total and from one peer IP address: one more is closed
    /// as soon as it is accepted, so a stranger cannot use up the file descriptors.
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    /// Connections open at once on which no login (nor call with a valid token) succeeded
    /// yet, 1 to `max_connections`; default [`default_max_unauthenticated_connections`]. The
    /// rest of `max_connections` is kept for analysts' connections; a new connection beyond
    /// it closes the oldest such connection of the address holding the most, so idle
    /// strangers cannot keep an analyst from connecting and logging in.
    pub max_unauthenticated_connections: usize,
    /// A connection on which no login (nor call with a valid token) succeeded this long after
    /// it was accepted is closed, whatever it sent: the TLS handshake, the HTTP/2 preface and
    /// the login together have this long. Default [`DEFAULT_LOGIN_WINDOW_SECONDS`].
    pub login_window_seconds: u64,
    /// An analyst's connection on which no call started for this long is closed (the client
    /// reconnects on its next call; its session and token stay). Default
    /// [`DEFAULT_CONNECTION_IDLE_SECONDS`].
    pub connection_idle_seconds: u64,
    /// A `DoPut` of prepared-statement parameters: at most this many bytes and batches, refused
    /// (never buffered) beyond.
    pub max_parameter_bytes: usize,
    pub max_parameter_batches: usize,
    /// Password checks (Argon2id, 19 MiB each) running at once; default the number of cores.
    pub login_concurrency: usize,
    /// Failed logins allowed for one user name, and from one peer address, before each further
    /// failure doubles a wait (1 s, 2 s, 4 s, ...) during which logins are refused at once.
    pub login_name_failures: u32,
    pub login_peer_failures: u32,
    /// The longest such wait, in seconds.
    pub login_backoff_max_seconds: u64,
    /// Queries (planned and not yet fetched, or streaming) at once per analyst, and in total.
    pub max_queries_per_analyst: usize,
    pub max_queries: usize,
    /// How long a query waits for a free slot before it is refused with `ResourceExhausted`
    /// (before it is charged).
    pub query_queue_seconds: u64,
    /// A trusted Ballista scheduler (`df://host:port`) the server plans onto (`dp-server
    /// --scheduler` overrides it); `None`: queries run in the server's process.
    pub scheduler: Option<String>,
    /// Worker threads of each analyst's query runtime (and statements planned at once per
    /// analyst), 1 to [`MAX_THREADS_PER_ANALYST`]; default the number of cores.
    pub threads_per_analyst: usize,
    /// Worker threads of all analysts' query runtimes together, `threads_per_analyst` to
    /// [`MAX_QUERY_THREADS`]; default [`default_max_query_threads`]. Beyond
    /// `max_query_threads / threads_per_analyst` analysts querying at once, analysts share
    /// runtimes (`src/server/executors.rs`).
    pub max_query_threads: usize,
}

/// The default of `[server] session_idle_seconds`: 1 hour.
pub const DEFAULT_SESSION_IDLE_SECONDS: u64 = 3600;
/// The default of `[server] token_lifetime_seconds`: 8 hours.
pub const DEFAULT_TOKEN_LIFETIME_SECONDS: u64 = 8 * 3600;
/// The default of `[server] max_sessions_per_analyst`.
pub const DEFAULT_MAX_SESSIONS_PER_ANALYST: usize = 16;
/// The default of `[server] max_prepared_statements` (per session).
pub const DEFAULT_MAX_PREPARED_STATEMENTS: usize = 64;
/// The default of `[server] max_message_bytes`: 4 MiB (tonic's own default, made explicit).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 << 20;
/// The default of `[server] max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// The default of `[server] max_connections_per_address`.
pub const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = 128;
/// The default of `[server] login_window_seconds`: longer than the 10 s a login may wait for
/// a password-check permit under a login flood, plus the check itself.
pub const DEFAULT_LOGIN_WINDOW_SECONDS: u64 = 20;
/// The default of `[server] connection_idle_seconds`: 1 hour, longer than a query's default
/// timeout and its result's time to be read, so a streaming result is not cut.
pub const DEFAULT_CONNECTION_IDLE_SECONDS: u64 = 3600;

/// The default of `[server] max_unauthenticated_connections`: half of `max_connections` (at
/// least 1), the other half kept for analysts.
pub fn default_max_unauthenticated_connections(max_connections: usize) -> usize {
    (max_connections / 2).max(1)
}
/// The default of `[server] max_parameter_bytes`: 1 MiB (parameters are one row).
pub const DEFAULT_MAX_PARAMETER_BYTES: usize = 1 << 20;
/// The default of `[server] max_parameter_batches`.
pub const DEFAULT_MAX_PARAMETER_BATCHES: usize = 16;
/// The default of `[server] login_name_failures`.
pub const DEFAULT_LOGIN_NAME_FAILURES: u32 = 5;
/// The default of `[server] login_peer_failures`.
pub const DEFAULT_LOGIN_PEER_FAILURES: u32 = 20;
/// The default of `[server] login_backoff_max_seconds`.
pub const DEFAULT_LOGIN_BACKOFF_MAX_SECONDS: u64 = 60;
/// The default of `[server] max_queries_per_analyst`.
pub const DEFAULT_MAX_QUERIES_PER_ANALYST: usize = 16;
/// The default of `[server] max_queries` (all analysts together).
pub const DEFAULT_MAX_QUERIES: usize = 64;
/// The default of `[server] query_queue_seconds`.
pub const DEFAULT_QUERY_QUEUE_SECONDS: u64 = 10;

/// The default of `[server] login_concurrency`: the cores this process may use.
pub fn default_login_concurrency() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The most `[server] threads_per_analyst` may be: more threads than that per analyst only
/// multiply the process's threads by the analysts querying at once.
pub const MAX_THREADS_PER_ANALYST: usize = 256;

/// The default of `[server] threads_per_analyst`: the cores this process may use.
pub fn default_threads_per_analyst() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The most `[server] max_query_threads` may be.
pub const MAX_QUERY_THREADS: usize = 4096;

/// The default of `[server] max_query_threads`: four times the cores this process may use
/// (four analysts' runtimes at once with the default `threads_per_analyst`), and at least
/// `threads_per_analyst` (one runtime).
pub fn default_max_query_threads(threads_per_analyst: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (4 * cores).clamp(threads_per_analyst, MAX_QUERY_THREADS)
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: None,
            tls_cert: None,
            tls_key: None,
            session_idle_seconds: DEFAULT_SESSION_IDLE_SECONDS,
            token_lifetime_seconds: DEFAULT_TOKEN_LIFETIME_SECONDS,
            max_sessions_per_analyst: DEFAULT_MAX_SESSIONS_PER_ANALYST,
            max_prepared_statements: DEFAULT_MAX_PREPARED_STATEMENTS,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_address: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            max_unauthenticated_connections: default_max_unauthenticated_connections(
                DEFAULT_MAX_CONNECTIONS,
            ),
            login_window_seconds: DEFAULT_LOGIN_WINDOW_SECONDS,
            connection_idle_seconds: DEFAULT_CONNECTION_IDLE_SECONDS,
            max_parameter_bytes: DEFAULT_MAX_PARAMETER_BYTES,
            max_parameter_batches: DEFAULT_MAX_PARAMETER_BATCHES,
            login_concurrency: default_login_concurrency(),
            login_name_failures: DEFAULT_LOGIN_NAME_FAILURES,
            login_peer_failures: DEFAULT_LOGIN_PEER_FAILURES,
            login_backoff_max_seconds: DEFAULT_LOGIN_BACKOFF_MAX_SECONDS,
            max_queries_per_analyst: DEFAULT_MAX_QUERIES_PER_ANALYST,
            max_queries: DEFAULT_MAX_QUERIES,
            query_queue_seconds: DEFAULT_QUERY_QUEUE_SECONDS,
            scheduler: None,
            threads_per_analyst: default_threads_per_analyst(),
            max_query_threads: default_max_query_threads(default_threads_per_analyst()),
        }
    }
}

/// The `[limits]` section: what one analyst's query may take from the process.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitsConfig {
    /// The memory all queries of the process may hold together (`memory_limit = "2GiB"`), in
    /// bytes: one DataFusion memory pool (fair between the queries that spill) for every
    /// session, so a huge aggregation fails with a resources error instead of growing the
    /// process until the system kills it. Default [`DEFAULT_MEMORY_LIMIT`].
    pub memory_limit: usize,
    /// The memory one query may hold (`query_memory_limit = "1GiB"`), in bytes, within
    /// `memory_limit`: one analyst's query cannot take the whole pool from the others' queries.
    /// At most `memory_limit`; default a quarter of it ([`default_query_memory_limit`]).
    pub query_memory_limit: usize,
    /// The memory all queries of one analyst may hold together in `dp-server`
    /// (`analyst_memory_limit = "1GiB"`), in bytes: each analyst's queries draw on a share of
    /// `memory_limit` of their own, so what one analyst holds never refuses memory to
    /// another's query (which would fail after its charge for a reason of someone else's
    /// making). The shares together are at most `memory_limit`; default an equal share for each
    /// configured analyst ([`default_analyst_memory_limit`]).
    pub analyst_memory_limit: usize,
    /// Where sorts and aggregations spill when they are over their share of the memory;
    /// `None` (the default): no spilling, the query fails with a resources error instead
    /// (nothing an analyst sends fills the owner's disk).
    pub spill_directory: Option<PathBuf>,
    /// The longest a query of an analyst may run (`query_timeout_seconds`), from the start of
    /// its execution to its last batch: then it is stopped and fails with a resources error,
    /// so a slow query cannot hold a worker for ever. Default [`DEFAULT_QUERY_TIMEOUT_SECONDS`].
    pub query_timeout_seconds: u64,
}

/// The default of `[limits] query_timeout_seconds`: 10 minutes.
pub const DEFAULT_QUERY_TIMEOUT_SECONDS: u64 = 600;

/// The default of `[limits] memory_limit`: 4 GiB.
pub const DEFAULT_MEMORY_LIMIT: usize = 4 << 30;

/// The default of `[limits] query_memory_limit` for a `memory_limit`: a quarter of it (at
/// least one byte), so that four queries at their limit still fit together.
pub fn default_query_memory_limit(memory_limit: usize) -> usize {
    (memory_limit / 4).max(1)
}

/// The default of `[limits] analyst_memory_limit`: `memory_limit` shared equally by the
/// `analysts` configured (at least one byte each), so every analyst's share is theirs at any
/// time, whoever else is querying.
pub fn default_analyst_memory_limit(memory_limit: usize, analysts: usize) -> usize {
    (memory_limit / analysts.max(1)).max(1)
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            memory_limit: DEFAULT_MEMORY_LIMIT,
            query_memory_limit: default_query_memory_limit(DEFAULT_MEMORY_LIMIT),
            analyst_memory_limit: DEFAULT_MEMORY_LIMIT,
            spill_directory: None,
            query_timeout_seconds: DEFAULT_QUERY_TIMEOUT_SECONDS,
        }
    }
}

/// A size in bytes as the owner writes it: an integer (bytes) or a string with a unit,
/// `"512MiB"`, `"2 GiB"`, `"64MB"`, `"1G"` (binary units: K, M, G, T with or without `iB`;
/// `KB`, `MB`, `GB`, `TB` are decimal).
pub fn parse_size(value: &toml::Value) -> std::result::Result<usize, String> {
    let text = match value {
        toml::Value::Integer(i) if *i > 0 => return Ok(*i as usize),
        toml::Value::String(s) => s.trim(),
        _ => return Err(format!("expected a size such as \"2GiB\", got {value}")),
    };
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let multiplier: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => {
            return Err(format!(
                "unknown unit in size '{text}' (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            ))
        }
    };
    match number.parse::<f64>() {
        Ok(n) if n > 0.0 && (n * multiplier) < usize::MAX as f64 && n * multiplier >= 1.0 => {
            Ok((n * multiplier) as usize)
        }
        _ => Err(format!(
            "expected a positive size such as \"2GiB\", got '{text}'"
        )),
    }
}

/// A whole configuration, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnerConfig {
    /// Where it was read from (for messages).
    pub source: String,
    pub tables: Vec<TableConfig>,
    /// `dp.*` options (keys without the `dp.` prefix) and their values as `SET` takes them.
    pub options: Vec<(String, String)>,
    pub analysts: Vec<AnalystConfig>,
    pub server: ServerConfig,
    pub limits: LimitsConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    table: Vec<RawTable>,
    #[serde(default)]
    options: BTreeMap<String, toml::Value>,
    #[serde(default)]
    analyst: Vec<RawAnalyst>,
    #[serde(default)]
    server: Option<RawServer>,
    #[serde(default)]
    limits: Option<RawLimits>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory_limit: Option<toml::Value>,
    query_memory_limit: Option<toml::Value>,
    analyst_memory_limit: Option<toml::Value>,
    spill_directory: Option<String>,
    query_timeout_seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    name: String,
    location: String,
    format: Option<String>,
    protection: Option<String>,
    unit: Option<String>,
    columns: Option<Vec<String>>,
    partition_columns: Option<Vec<String>>,
    in_memory: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAnalyst {
    name: String,
    password: Option<String>,
    password_hash: Option<String>,
    epsilon_budget: Option<f64>,
    delta_budget: Option<f64>,
    ledger: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<String>,
    tls_cert: Option<String>,
    tls_key: Option<String>,
    session_idle_seconds: Option<u64>,
    token_lifetime_seconds: Option<u64>,
    max_sessions_per_analyst: Option<u64>,
    max_prepared_statements: Option<u64>,
    max_message_bytes: Option<toml::Value>,
    max_connections: Option<u64>,
    max_connections_per_address: Option<u64>,
    max_unauthenticated_connections: Option<u64>,
    login_window_seconds: Option<u64>,
    connection_idle_seconds: Option<u64>,
    max_parameter_bytes: Option<toml::Value>,
    max_parameter_batches: Option<u64>,
    login_concurrency: Option<u64>,
    login_name_failures: Option<u64>,
    login_peer_failures: Option<u64>,
    login_backoff_max_seconds: Option<u64>,
    max_queries_per_analyst: Option<u64>,
    max_queries: Option<u64>,
    query_queue_seconds: Option<u64>,
    scheduler: Option<String>,
    threads_per_analyst: Option<u64>,
    max_query_threads: Option<u64>,
}

/// Options an analyst's budget sets (per analyst, never in `[options]`).
const PER_ANALYST: [&str; 3] = ["epsilon_budget", "delta_budget", "ledger"];

/// Options the `[[table]]` sections set.
const PER_TABLE: [&str; 2] = ["protected_tables", "public_tables"];

/// The Arrow type of SQL type name `sql` (`BIGINT`, `VARCHAR`, `DECIMAL(10, 2)`, ...), as
/// DataFusion's SQL planner reads it in a `CAST`; strings are `Utf8`, as CSV inference gives.
pub fn sql_type(sql: &str) -> std::result::Result<DataType, String> {
    let sql = sql.trim();
    let unknown = || format!("unknown SQL type '{sql}'");
    if sql.is_empty()
        || !sql
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " _(),".contains(c))
    {
        return Err(unknown());
    }
    // One planner for every declaration (a session registers all of DataFusion's functions).
    static PLANNER: std::sync::OnceLock<SessionContext> = std::sync::OnceLock::new();
    let ctx = PLANNER.get_or_init(|| {
        SessionContext::new_with_config(
            SessionConfig::new()
                .set_bool("datafusion.sql_parser.map_string_types_to_utf8view", false),
        )
    });
    match ctx.parse_sql_expr(&format!("CAST(NULL AS {sql})"), &DFSchema::empty()) {
        Ok(Expr::Cast(Cast { expr, field })) if matches!(*expr, Expr::Literal(..)) => {
            Ok(field.data_type().clone())
        }
        _ => Err(unknown()),
    }
}

/// The columns declared in `decls` (`"name TYPE"` each), for messages as `what` of `table`.
fn parse_columns(
    table: &str,
    what: &str,
    decls: &[String],
) -> std::result::Result<Vec<Field>, String> {
    let mut fields: Vec<Field> = Vec::with_capacity(decls.len());
    for decl in decls {
        let (name, sql) = decl.trim().split_once(char::is_whitespace).ok_or_else(|| {
            format!("table '{table}': {what} entry '{decl}' must be \"NAME TYPE\" (e.g. \"patient_id BIGINT\")")
        })?;
        let data_type =
            sql_type(sql).map_err(|e| format!("table '{table}': {what} entry '{decl}': {e}"))?;
        if fields.iter().any(|f| f.name() == name) {
            return Err(format!(
                "table '{table}': column '{name}' is declared twice"
            ));
        }
        fields.push(Field::new(name, data_type, true));
    }
    Ok(fields)
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl OwnerConfig {
    /// Reads and validates the configuration at `path`.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            DataFusionError::Configuration(format!("config {}: cannot read: {e}", path.display()))
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base, &path.display().to_string())
    }

    /// Parses and validates configuration `text`; relative paths are resolved against `base`,
    /// and errors begin with `config SOURCE:`.
    pub fn parse(text: &str, base: &Path, source: &str) -> Result<Self> {
        let error =
            |message: String| DataFusionError::Configuration(format!("config {source}: {message}"));
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            error(
                e.to_string()
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('|'))
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        })?;
        let resolve = |location: &str| -> String {
            if location.contains("://") || Path::new(location).is_absolute() {
                location.to_string()
            } else {
                base.join(location).to_string_lossy().into_owned()
            }
        };

        let mut tables: Vec<TableConfig> = Vec::new();
        for t in raw.table {
            if !is_identifier(&t.name) {
                return Err(error(format!(
                    "table name '{}' must be a lower-case SQL identifier (letters, digits, _)",
                    t.name
                )));
            }
            if tables.iter().any(|other| other.name == t.name) {
                return Err(error(format!("table '{}' is declared twice", t.name)));
            }
            let protection = match (t.protection.as_deref().map(str::to_ascii_lowercase), t.unit) {
                (None, None) => Protection::Rows,
                (None, Some(unit)) => Protection::Unit(unit),
                (Some(p), None) if p == "rows" => Protection::Rows,
                (Some(p), None) if p == "public" => Protection::Public,
                (Some(p), Some(unit)) if p == "unit" => Protection::Unit(unit),
                (Some(p), Some(unit)) if p == "unique_unit" => Protection::UniqueUnit(unit),
                (Some(p), None) if p == "unit" || p == "unique_unit" => {
                    return Err(error(format!(
                        "table '{}': protection = \"{p}\" needs unit = \"COLUMN\" (the column that identifies a person)",
                        t.name
                    )))
                }
                (Some(p), Some(_)) if p == "rows" || p == "public" => {
                    return Err(error(format!(
                        "table '{}': unit = ... goes with protection = \"unit\", not \"{p}\"",
                        t.name
                    )))
                }
                (Some(p), _) => {
                    return Err(error(format!(
                        "table '{}': unknown protection '{p}' (expected \"rows\", \"unit\", \"unique_unit\" or \"public\")",
                        t.name
                    )))
                }
            };
            if let Some(unit) = protection.unit_column() {
                if unit.trim().is_empty() {
                    return Err(error(format!("table '{}': unit is empty", t.name)));
                }
            }
            if let Some(format) = &t.format {
                if !crate::owner::tables::FORMATS.contains(&format.to_ascii_lowercase().as_str()) {
                    return Err(error(format!(
                        "table '{}': unknown format '{format}' (expected parquet, csv or json)",
                        t.name
                    )));
                }
            }
            let columns = match &t.columns {
                Some(decls) if decls.is_empty() => {
                    return Err(error(format!(
                        "table '{}': columns is empty (declare each column as \"NAME TYPE\")",
                        t.name
                    )))
                }
                Some(decls) => Some(parse_columns(&t.name, "columns", decls).map_err(&error)?),
                None => None,
            };
            let partition_columns = parse_columns(
                &t.name,
                "partition_columns",
                t.partition_columns.as_deref().unwrap_or_default(),
            )
            .map_err(&error)?;
            let declared: Vec<&str> = columns
                .iter()
                .flatten()
                .chain(&partition_columns)
                .map(|f| f.name().as_str())
                .collect();
            if let Some(twice) = partition_columns
                .iter()
                .find(|p| columns.iter().flatten().any(|c| c.name() == p.name()))
            {
                return Err(error(format!(
                    "table '{}': column '{}' is in both columns and partition_columns",
                    t.name,
                    twice.name()
                )));
            }
            if let (Some(unit), Some(_)) = (protection.unit_column(), &columns) {
                if !declared.contains(&unit) {
                    return Err(error(format!(
                        "table '{}': unit '{unit}' is not one of its declared columns",
                        t.name
                    )));
                }
            }
            tables.push(TableConfig {
                name: t.name,
                location: resolve(&t.location),
                format: t.format,
                protection,
                columns,
                partition_columns,
                in_memory: t.in_memory.unwrap_or(false),
            });
        }

        let mut options = Vec::new();
        for (key, value) in raw.options {
            let key = key.strip_prefix("dp.").unwrap_or(&key).to_string();
            if PER_ANALYST.contains(&key.as_str()) {
                return Err(error(format!(
                    "[options] dp.{key}: budgets and ledgers are set per analyst ([[analyst]] epsilon_budget, delta_budget, ledger)"
                )));
            }
            if PER_TABLE.contains(&key.as_str()) {
                return Err(error(format!(
                    "[options] dp.{key}: declare each table's protection in its [[table]] section (unit = \"COLUMN\", protection = \"rows\" or \"public\")"
                )));
            }
            if key == "locked" {
                return Err(error(
                    "[options] dp.locked: sessions from this configuration are always locked"
                        .to_string(),
                ));
            }
            let value = match value {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => {
                    return Err(error(format!(
                        "[options] dp.{key}: expected a string, number or boolean, got {}",
                        other.type_str()
                    )))
                }
            };
            // Validate now, so a typo fails at start-up rather than in an analyst's session.
            let mut probe = crate::DpOptions::default();
            datafusion::config::ExtensionOptions::set(&mut probe, &key, &value).map_err(|e| {
                error(format!(
                    "[options] {}",
                    crate::sql::errors::one_line_error(&e)
                ))
            })?;
            options.push((key, value));
        }

        let mut analysts: Vec<AnalystConfig> = Vec::new();
        for a in raw.analyst {
            let who = format!("analyst '{}'", a.name);
            if a.name.is_empty() || a.name.contains(':') || a.name.chars().any(char::is_whitespace)
            {
                return Err(error(format!(
                    "analyst name '{}' must be non-empty, without ':' or spaces",
                    a.name
                )));
            }
            if analysts.iter().any(|other| other.name == a.name) {
                return Err(error(format!("{who} is declared twice")));
            }
            let credential = match (a.password, a.password_hash) {
                (Some(_), Some(_)) => {
                    return Err(error(format!(
                        "{who}: give password_hash or password, not both"
                    )))
                }
                (None, Some(hash)) => Some(Credential::Hash(hash)),
                (Some(password), None) => Some(Credential::Password(password)),
                (None, None) => None,
            };
            let epsilon_budget = a.epsilon_budget.ok_or_else(|| {
                error(format!(
                    "{who}: needs epsilon_budget (a locked session requires a budget)"
                ))
            })?;
            if !(epsilon_budget.is_finite() && epsilon_budget > 0.0) {
                return Err(error(format!(
                    "{who}: epsilon_budget must be a positive number, got {epsilon_budget}"
                )));
            }
            if let Some(delta) = a.delta_budget {
                if !(0.0..1.0).contains(&delta) {
                    return Err(error(format!(
                        "{who}: delta_budget must be in [0, 1), got {delta}"
                    )));
                }
            }
            let ledger = a.ledger.ok_or_else(|| {
                error(format!(
                    "{who}: needs ledger = \"PATH\" (the file that keeps the analyst's spending across sessions and restarts)"
                ))
            })?;
            let ledger = PathBuf::from(resolve(&ledger));
            if let Some(other) = analysts.iter().find(|o| o.ledger == ledger) {
                return Err(error(format!(
                    "{who}: ledger {} is also analyst '{}''s: each analyst needs their own (a ledger is one budget and one history)",
                    ledger.display(),
                    other.name
                )));
            }
            analysts.push(AnalystConfig {
                name: a.name,
                credential,
                epsilon_budget,
                delta_budget: a.delta_budget,
                ledger,
            });
        }

        let server = match raw.server {
            None => ServerConfig::default(),
            Some(s) => {
                if s.tls_cert.is_some() != s.tls_key.is_some() {
                    return Err(error(
                        "[server] TLS needs both tls_cert and tls_key (PEM files)".to_string(),
                    ));
                }
                let d = ServerConfig::default();
                // A count or a number of seconds: at least 1 (0 would refuse everything).
                let positive = |key: &str, value: Option<u64>, default: u64| match value {
                    Some(0) => Err(error(format!("[server] {key} must be at least 1"))),
                    Some(n) => Ok(n),
                    None => Ok(default),
                };
                let count = |key: &str, value: Option<u64>, default: usize| {
                    positive(key, value, default as u64)
                        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                };
                let size = |key: &str, value: &Option<toml::Value>, default: usize| match value {
                    None => Ok(default),
                    Some(value) => {
                        parse_size(value).map_err(|e| error(format!("[server] {key}: {e}")))
                    }
                };
                let failures = |key: &str, value: Option<u64>, default: u32| match value {
                    None => Ok(default),
                    Some(n) => u32::try_from(n)
                        .map_err(|_| error(format!("[server] {key}: {n} is too large"))),
                };
                let threads_per_analyst = match s.threads_per_analyst {
                    None => d.threads_per_analyst,
                    Some(n) if (1..=MAX_THREADS_PER_ANALYST as u64).contains(&n) => n as usize,
                    Some(n) => {
                        return Err(error(format!(
                            "[server] threads_per_analyst must be between 1 and \
                             {MAX_THREADS_PER_ANALYST}, got {n}"
                        )))
                    }
                };
                let max_query_threads = match s.max_query_threads {
                    None => default_max_query_threads(threads_per_analyst),
                    Some(n)
                        if (threads_per_analyst as u64..=MAX_QUERY_THREADS as u64).contains(&n) =>
                    {
                        n as usize
                    }
                    Some(n) => {
                        return Err(error(format!(
                            "[server] max_query_threads must be between threads_per_analyst \
                             ({threads_per_analyst}) and {MAX_QUERY_THREADS}, got {n}"
                        )))
                    }
                };
                let max_connections =
                    count("max_connections", s.max_connections, d.max_connections)?;
                let max_unauthenticated_connections = match s.max_unauthenticated_connections {
                    None => default_max_unauthenticated_connections(max_connections),
                    Some(n) if (1..=max_connections as u64).contains(&n) => n as usize,
                    Some(n) => {
                        return Err(error(format!(
                            "[server] max_unauthenticated_connections must be between 1 and \
                             max_connections ({max_connections}), got {n}"
                        )))
                    }
                };
                ServerConfig {
                    listen: s.listen,
                    tls_cert: s.tls_cert.map(|p| PathBuf::from(resolve(&p))),
                    tls_key: s.tls_key.map(|p| PathBuf::from(resolve(&p))),
                    session_idle_seconds: positive(
                        "session_idle_seconds",
                        s.session_idle_seconds,
                        d.session_idle_seconds,
                    )?,
                    token_lifetime_seconds: positive(
                        "token_lifetime_seconds",
                        s.token_lifetime_seconds,
                        d.token_lifetime_seconds,
                    )?,
                    max_sessions_per_analyst: count(
                        "max_sessions_per_analyst",
                        s.max_sessions_per_analyst,
                        d.max_sessions_per_analyst,
                    )?,
                    max_prepared_statements: count(
                        "max_prepared_statements",
                        s.max_prepared_statements,
                        d.max_prepared_statements,
                    )?,
                    max_message_bytes: size(
                        "max_message_bytes",
                        &s.max_message_bytes,
                        d.max_message_bytes,
                    )?,
                    max_connections,
                    max_connections_per_address: count(
                        "max_connections_per_address",
                        s.max_connections_per_address,
                        d.max_connections_per_address,
                    )?,
                    max_unauthenticated_connections,
                    login_window_seconds: positive(
                        "login_window_seconds",
                        s.login_window_seconds,
                        d.login_window_seconds,
                    )?,
                    connection_idle_seconds: positive(
                        "connection_idle_seconds",
                        s.connection_idle_seconds,
                        d.connection_idle_seconds,
                    )?,
                    max_parameter_bytes: size(
                        "max_parameter_bytes",
                        &s.max_parameter_bytes,
                        d.max_parameter_bytes,
                    )?,
                    max_parameter_batches: count(
                        "max_parameter_batches",
                        s.max_parameter_batches,
                        d.max_parameter_batches,
                    )?,
                    login_concurrency: count(
                        "login_concurrency",
                        s.login_concurrency,
                        d.login_concurrency,
                    )?,
                    login_name_failures: failures(
                        "login_name_failures",
                        s.login_name_failures,
                        d.login_name_failures,
                    )?,
                    login_peer_failures: failures(
                        "login_peer_failures",
                        s.login_peer_failures,
                        d.login_peer_failures,
                    )?,
                    login_backoff_max_seconds: positive(
                        "login_backoff_max_seconds",
                        s.login_backoff_max_seconds,
                        d.login_backoff_max_seconds,
                    )?,
                    max_queries_per_analyst: count(
                        "max_queries_per_analyst",
                        s.max_queries_per_analyst,
                        d.max_queries_per_analyst,
                    )?,
                    max_queries: count("max_queries", s.max_queries, d.max_queries)?,
                    query_queue_seconds: positive(
                        "query_queue_seconds",
                        s.query_queue_seconds,
                        d.query_queue_seconds,
                    )?,
                    scheduler: s.scheduler,
                    threads_per_analyst,
                    max_query_threads,
                }
            }
        };

        let limits = match raw.limits {
            None => LimitsConfig {
                analyst_memory_limit: default_analyst_memory_limit(
                    DEFAULT_MEMORY_LIMIT,
                    analysts.len(),
                ),
                ..LimitsConfig::default()
            },
            Some(l) => {
                let memory_limit = match &l.memory_limit {
                    None => DEFAULT_MEMORY_LIMIT,
                    Some(value) => parse_size(value)
                        .map_err(|e| error(format!("[limits] memory_limit: {e}")))?,
                };
                let query_memory_limit = match &l.query_memory_limit {
                    None => default_query_memory_limit(memory_limit),
                    Some(value) => parse_size(value)
                        .map_err(|e| error(format!("[limits] query_memory_limit: {e}")))?,
                };
                if query_memory_limit > memory_limit {
                    return Err(error(format!(
                        "[limits] query_memory_limit ({query_memory_limit} bytes) must be at \
                         most memory_limit ({memory_limit} bytes): one query's memory is part \
                         of all queries'"
                    )));
                }
                let analyst_memory_limit = match &l.analyst_memory_limit {
                    None => default_analyst_memory_limit(memory_limit, analysts.len()),
                    Some(value) => parse_size(value)
                        .map_err(|e| error(format!("[limits] analyst_memory_limit: {e}")))?,
                };
                let shares = analyst_memory_limit.saturating_mul(analysts.len().max(1));
                if shares > memory_limit {
                    return Err(error(format!(
                        "[limits] analyst_memory_limit ({analyst_memory_limit} bytes) times the \
                         {} analysts ({shares} bytes) must be at most memory_limit \
                         ({memory_limit} bytes): each analyst's share is kept for them, so that \
                         one analyst's queries never take memory another's query was promised",
                        analysts.len()
                    )));
                }
                LimitsConfig {
                    memory_limit,
                    query_memory_limit,
                    analyst_memory_limit,
                    spill_directory: l.spill_directory.map(|p| PathBuf::from(resolve(&p))),
                    query_timeout_seconds: match l.query_timeout_seconds {
                        Some(0) => {
                            return Err(error(
                                "[limits] query_timeout_seconds must be at least 1".to_string(),
                            ))
                        }
                        Some(seconds) => seconds,
                        None => DEFAULT_QUERY_TIMEOUT_SECONDS,
                    },
                }
            }
        };

        Ok(Self {
            source: source.to_string(),
            tables,
            options,
            analysts,
            server,
            limits,
        })
    }

    /// The analyst called `name`.
    pub fn analyst(&self, name: &str) -> Option<&AnalystConfig> {
        self.analysts.iter().find(|a| a.name == name)
    }

    /// The analyst whose budget and ledger a locked shell or cluster spends: `name`, or the
    /// only analyst when there is one.
    pub fn spending_analyst(
        &self,
        name: Option<&str>,
    ) -> std::result::Result<&AnalystConfig, String> {
        match (name, self.analysts.as_slice()) {
            (Some(name), _) => self.analyst(name).ok_or_else(|| {
                format!("no analyst '{name}' (declare it in an [[analyst]] section)")
            }),
            (None, [only]) => Ok(only),
            (None, []) => Err(
                "no [[analyst]] section: a locked shell or cluster spends one analyst's budget and ledger"
                    .to_string(),
            ),
            (None, _) => Err(format!(
                "{} analysts: name the one whose budget is spent with --analyst NAME",
                self.analysts.len()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<OwnerConfig> {
        OwnerConfig::parse(text, Path::new("/owner"), "test.toml")
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn parses_tables_options_analysts() {
        let config = parse(
            r#"
            [[table]]
            name = "visits"
            location = "data/visits.csv"
            unit = "patient_id"
            [[table]]
            name = "survey"
            location = "s3://bucket/survey/"
            format = "parquet"
            [[table]]
            name = "regions"
            location = "/abs/regions.csv"
            protection = "public"
            [options]
            "dp.confidence" = 0.9
            public_groups = "regions"
            [[analyst]]
            name = "alice"
            password = "pw"
            epsilon_budget = 2
            ledger = "alice.ledger"
            [server]
            listen = "127.0.0.1:0"
            scheduler = "df://127.0.0.1:50050"
            "#,
        )
        .unwrap();
        assert_eq!(config.tables.len(), 3);
        assert_eq!(config.tables[0].location, "/owner/data/visits.csv");
        assert_eq!(
            config.tables[0].protection,
            Protection::Unit("patient_id".into())
        );
        assert_eq!(config.tables[1].location, "s3://bucket/survey/");
        assert_eq!(config.tables[1].protection, Protection::Rows, "fail closed");
        assert_eq!(config.tables[2].protection, Protection::Public);
        assert_eq!(
            config.options,
            vec![
                ("confidence".to_string(), "0.9".to_string()),
                ("public_groups".to_string(), "regions".to_string())
            ]
        );
        let alice = config.analyst("alice").unwrap();
        assert_eq!(alice.epsilon_budget, 2.0);
        assert_eq!(alice.ledger, PathBuf::from("/owner/alice.ledger"));
        assert_eq!(config.server.session_idle_seconds, 3600);
        assert_eq!(
            config.server.scheduler.as_deref(),
            Some("df://127.0.0.1:50050")
        );
    }

    #[test]
    fn in_memory_is_off_unless_declared() {
        let table = |extra: &str| {
            parse(&format!(
                "[[table]]\nname = \"t\"\nlocation = \"t.parquet\"\n{extra}"
            ))
            .map(|c| c.tables[0].in_memory)
        };
        assert!(!table("").unwrap());
        assert!(table("in_memory = true").unwrap());
        assert!(!table("in_memory = false").unwrap());
        assert!(table("in_memory = \"yes\"").is_err());
    }

    #[test]
    fn columns_are_sql_types_in_order() {
        let config = parse(
            r#"
            [[table]]
            name = "t"
            location = "t/"
            unit = "region"
            columns = ["id BIGINT", "b BOOLEAN", "i INT", "n INTEGER", "d DOUBLE", "f FLOAT",
                       "s VARCHAR", "x TEXT", "day DATE", "at TIMESTAMP", "amount DECIMAL(10, 2)"]
            partition_columns = ["region VARCHAR", "year INT"]
            "#,
        )
        .unwrap();
        let t = &config.tables[0];
        let types: Vec<_> = t
            .columns
            .iter()
            .flatten()
            .map(|f| (f.name().as_str(), f.data_type().clone()))
            .collect();
        use datafusion::arrow::datatypes::TimeUnit;
        assert_eq!(
            types,
            vec![
                ("id", DataType::Int64),
                ("b", DataType::Boolean),
                ("i", DataType::Int32),
                ("n", DataType::Int32),
                ("d", DataType::Float64),
                ("f", DataType::Float32),
                ("s", DataType::Utf8),
                ("x", DataType::Utf8),
                ("day", DataType::Date32),
                ("at", DataType::Timestamp(TimeUnit::Nanosecond, None)),
                ("amount", DataType::Decimal128(10, 2)),
            ]
        );
        let parts: Vec<_> = t
            .partition_columns
            .iter()
            .map(|f| (f.name().as_str(), f.data_type().clone()))
            .collect();
        assert_eq!(
            parts,
            vec![("region", DataType::Utf8), ("year", DataType::Int32)]
        );
        assert_eq!(
            parse("[[table]]\nname = \"t\"\nlocation = \"t.parquet\"")
                .unwrap()
                .tables[0]
                .columns,
            None
        );
    }

    #[test]
    fn limits_section() {
        let limits = |text: &str| parse(text).unwrap().limits;
        assert_eq!(limits(""), LimitsConfig::default());
        assert_eq!(limits("").memory_limit, 4 << 30);
        let l = limits("[limits]\nmemory_limit = \"64MiB\"\nspill_directory = \"/tmp/spill\"");
        assert_eq!(l.memory_limit, 64 << 20);
        assert_eq!(l.spill_directory, Some(PathBuf::from("/tmp/spill")));
        assert_eq!(
            limits("[limits]\nmemory_limit = \"2 GiB\"").memory_limit,
            2 << 30
        );
        assert_eq!(
            limits("[limits]\nmemory_limit = \"1.5G\"").memory_limit,
            3 << 29
        );
        assert_eq!(
            limits("[limits]\nmemory_limit = \"64MB\"").memory_limit,
            64_000_000
        );
        assert_eq!(
            limits("[limits]\nmemory_limit = 1048576").memory_limit,
            1 << 20
        );
        assert!(err("[limits]\nmemory_limit = \"2 parsecs\"").contains("[limits] memory_limit"));
        assert!(err("[limits]\nmemory_limit = -1").contains("memory_limit"));
        assert!(err("[limits]\nmemory_limit = \"0MiB\"").contains("positive"));
        // query_memory_limit: a quarter of memory_limit by default, at most memory_limit.
        assert_eq!(limits("").query_memory_limit, 1 << 30);
        assert_eq!(
            limits("[limits]\nmemory_limit = \"64MiB\"").query_memory_limit,
            16 << 20
        );
        assert_eq!(
            limits("[limits]\nmemory_limit = 3").query_memory_limit,
            1,
            "at least one byte"
        );
        let l = limits("[limits]\nmemory_limit = \"64MiB\"\nquery_memory_limit = \"64MiB\"");
        assert_eq!((l.memory_limit, l.query_memory_limit), (64 << 20, 64 << 20));
        assert_eq!(
            limits("[limits]\nquery_memory_limit = \"100MB\"").query_memory_limit,
            100_000_000
        );
        let over = err("[limits]\nmemory_limit = \"64MiB\"\nquery_memory_limit = \"65MiB\"");
        assert!(
            over.contains("[limits] query_memory_limit")
                && over.contains("must be at most memory_limit"),
            "{over}"
        );
        assert!(err("[limits]\nquery_memory_limit = \"5GiB\"").contains("at most memory_limit"));
        assert!(
            err("[limits]\nquery_memory_limit = \"lots\"").contains("[limits] query_memory_limit")
        );
        assert!(err("[limits]\nquery_memory_limit = 0").contains("query_memory_limit"));
        // analyst_memory_limit: memory_limit shared equally by the analysts by default; the
        // shares together at most memory_limit.
        let two = "[[analyst]]\nname = \"a\"\nepsilon_budget = 1.0\nledger = \"a.l\"\n\
                   [[analyst]]\nname = \"b\"\nepsilon_budget = 1.0\nledger = \"b.l\"\n";
        assert_eq!(limits("").analyst_memory_limit, 4 << 30);
        assert_eq!(limits(two).analyst_memory_limit, 2 << 30);
        assert_eq!(
            limits(&format!("{two}[limits]\nmemory_limit = \"64MiB\"")).analyst_memory_limit,
            32 << 20
        );
        assert_eq!(
            limits(&format!("{two}[limits]\nanalyst_memory_limit = \"1GiB\"")).analyst_memory_limit,
            1 << 30
        );
        let over = err(&format!(
            "{two}[limits]\nmemory_limit = \"64MiB\"\nanalyst_memory_limit = \"33MiB\""
        ));
        assert!(
            over.contains("[limits] analyst_memory_limit") && over.contains("2 analysts"),
            "{over}"
        );
        assert!(err("[limits]\nanalyst_memory_limit = \"lots\"")
            .contains("[limits] analyst_memory_limit"));
        assert!(
            err("[limits]\nmemory = 1").contains("memory"),
            "unknown keys"
        );
    }

    #[test]
    fn server_section() {
        let server = |text: &str| parse(text).unwrap().server;
        assert_eq!(server(""), ServerConfig::default());
        assert_eq!(server("[server]"), ServerConfig::default());
        let d = ServerConfig::default();
        assert_eq!(d.session_idle_seconds, 3600);
        assert_eq!(d.token_lifetime_seconds, 8 * 3600);
        assert_eq!(d.max_message_bytes, 4 << 20);
        assert_eq!(d.login_concurrency, default_login_concurrency());
        let s = server(
            "[server]\ntoken_lifetime_seconds = 60\nmax_sessions_per_analyst = 2\n\
             max_prepared_statements = 3\nmax_message_bytes = \"1MiB\"\n\
             max_parameter_bytes = 4096\nmax_parameter_batches = 2\nlogin_concurrency = 1\n\
             login_name_failures = 0\nlogin_peer_failures = 7\nlogin_backoff_max_seconds = 5\n\
             max_queries_per_analyst = 1\nmax_queries = 2\nquery_queue_seconds = 3\n\
             max_connections = 10\nmax_connections_per_address = 4",
        );
        assert_eq!((s.max_connections, s.max_connections_per_address), (10, 4));
        assert_eq!(d.max_connections, 512);
        // Strangers' connections: half of max_connections by default, at most all of it.
        assert_eq!(s.max_unauthenticated_connections, 5);
        assert_eq!(d.max_unauthenticated_connections, 256);
        assert_eq!(
            (d.login_window_seconds, d.connection_idle_seconds),
            (20, 3600)
        );
        let c = server(
            "[server]\nmax_connections = 10\nmax_unauthenticated_connections = 10\n\
             login_window_seconds = 2\nconnection_idle_seconds = 30",
        );
        assert_eq!(
            (
                c.max_unauthenticated_connections,
                c.login_window_seconds,
                c.connection_idle_seconds
            ),
            (10, 2, 30)
        );
        for wrong in [
            "max_connections = 10\nmax_unauthenticated_connections = 11",
            "max_unauthenticated_connections = 0",
            "login_window_seconds = 0",
            "connection_idle_seconds = 0",
        ] {
            assert!(parse(&format!("[server]\n{wrong}")).is_err(), "{wrong}");
        }
        assert_eq!(
            (s.token_lifetime_seconds, s.max_sessions_per_analyst),
            (60, 2)
        );
        assert_eq!(
            (s.max_prepared_statements, s.max_message_bytes),
            (3, 1 << 20)
        );
        assert_eq!((s.max_parameter_bytes, s.max_parameter_batches), (4096, 2));
        assert_eq!(
            (
                s.login_concurrency,
                s.login_name_failures,
                s.login_peer_failures
            ),
            (1, 0, 7)
        );
        assert_eq!(s.login_backoff_max_seconds, 5);
        assert_eq!(
            (
                s.max_queries_per_analyst,
                s.max_queries,
                s.query_queue_seconds
            ),
            (1, 2, 3)
        );
        for key in [
            "session_idle_seconds",
            "token_lifetime_seconds",
            "max_sessions_per_analyst",
            "max_queries",
            "query_queue_seconds",
        ] {
            let e = err(&format!("[server]\n{key} = 0"));
            assert!(
                e.contains(&format!("[server] {key} must be at least 1")),
                "{e}"
            );
        }
        assert!(err("[server]\nmax_parameter_bytes = \"lots\"").contains("max_parameter_bytes"));
        assert!(err("[server]\nlogin_name_failures = 99999999999").contains("too large"));
        // threads_per_analyst: the cores by default, 1 to 256.
        assert_eq!(d.threads_per_analyst, default_threads_per_analyst());
        assert!(d.threads_per_analyst >= 1);
        let threads = |n: &str| server(&format!("[server]\nthreads_per_analyst = {n}"));
        assert_eq!(threads("1").threads_per_analyst, 1);
        assert_eq!(threads("256").threads_per_analyst, 256);
        for n in ["0", "257", "100000000000"] {
            let e = err(&format!("[server]\nthreads_per_analyst = {n}"));
            assert!(
                e.contains("[server] threads_per_analyst must be between 1 and 256"),
                "{e}"
            );
        }
        assert!(err("[server]\nthreads_per_analyst = -1").contains("threads_per_analyst"));
        // max_query_threads: four times the cores by default, at least threads_per_analyst;
        // threads_per_analyst to 4096.
        let cores = default_threads_per_analyst();
        assert_eq!(d.max_query_threads, 4 * cores);
        assert_eq!(threads("256").max_query_threads, (4 * cores).max(256));
        let max = |text: &str| server(&format!("[server]\n{text}")).max_query_threads;
        assert_eq!(max("threads_per_analyst = 2\nmax_query_threads = 2"), 2);
        assert_eq!(
            max("threads_per_analyst = 2\nmax_query_threads = 4096"),
            4096
        );
        for (text, low) in [
            ("threads_per_analyst = 2\nmax_query_threads = 1", 2),
            ("threads_per_analyst = 8\nmax_query_threads = 7", 8),
            ("threads_per_analyst = 1\nmax_query_threads = 0", 1),
            ("threads_per_analyst = 1\nmax_query_threads = 4097", 1),
        ] {
            let e = err(&format!("[server]\n{text}"));
            assert!(
                e.contains(&format!(
                    "[server] max_query_threads must be between threads_per_analyst ({low}) \
                     and 4096"
                )),
                "{e}"
            );
        }
        assert!(err("[server]\nmax_query_threads = -1").contains("max_query_threads"));
        assert!(
            err("[server]\nmax_session = 1").contains("max_session"),
            "unknown keys"
        );
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        let t = |extra: &str| format!("[[table]]\nname = \"t\"\nlocation = \"t.csv\"\n{extra}");
        assert!(err(&t("protection = \"unit\"")).contains("needs unit"));
        assert!(err(&t("protection = \"public\"\nunit = \"id\"")).contains("goes with"));
        assert!(err(&t("protection = \"secret\"")).contains("unknown protection 'secret'"));
        assert!(err(&t("format = \"xls\"")).contains("unknown format 'xls'"));
        assert!(err(&t("colour = 1")).contains("colour"), "unknown keys");
        assert!(err("[[table]]\nname = \"Visits\"\nlocation = \"v.csv\"").contains("lower-case"));
        assert!(err("[options]\nepsilon_budget = 1").contains("per analyst"));
        assert!(err("[options]\n\"dp.public_tables\" = \"*\"").contains("[[table]]"));
        assert!(err("[options]\nlocked = false").contains("always locked"));
        assert!(err("[options]\nconfidence = 2").contains("confidence"));
        let a = |extra: &str| format!("[[analyst]]\nname = \"a\"\n{extra}");
        assert!(parse(&a("epsilon_budget = 1\nledger = \"l\""))
            .unwrap()
            .analysts[0]
            .credential
            .is_none());
        assert!(err(&a("password = \"p\"\npassword_hash = \"h\"")).contains("not both"));
        assert!(err(&a("password = \"p\"\nledger = \"l\"")).contains("needs epsilon_budget"));
        assert!(err(&a("password = \"p\"\nepsilon_budget = 1")).contains("needs ledger"));
        assert!(
            err(&a("password = \"p\"\nepsilon_budget = -1\nledger = \"l\"")).contains("positive")
        );
        let two =
            "[[analyst]]\nname = \"a\"\npassword = \"p\"\nepsilon_budget = 1\nledger = \"l\"\n\
                   [[analyst]]\nname = \"b\"\npassword = \"p\"\nepsilon_budget = 1\nledger = \"l\"";
        assert!(err(two).contains("each analyst needs their own"));
        assert!(err("[server]\ntls_cert = \"c.pem\"").contains("both tls_cert and tls_key"));
        assert!(err(&t("columns = []")).contains("columns is empty"));
        assert!(err(&t("columns = [\"id\"]")).contains("\"NAME TYPE\""));
        assert!(err(&t("columns = [\"id WHATEVER\"]")).contains("unknown SQL type 'WHATEVER'"));
        assert!(err(&t("columns = [\"id INT) + (1\"]")).contains("unknown SQL type"));
        assert!(err(&t("columns = [\"id INT\", \"id BIGINT\"]")).contains("declared twice"));
        assert!(err(&t(
            "columns = [\"id INT\"]\npartition_columns = [\"id INT\"]"
        ))
        .contains("both columns and partition_columns"));
        assert!(err(&t("unit = \"pid\"\ncolumns = [\"id INT\"]")).contains("unit 'pid'"));
        let syntax = err("[[table]\n");
        assert!(
            syntax.contains("config test.toml: ") && syntax.contains("line 1"),
            "{syntax}"
        );
    }
}
