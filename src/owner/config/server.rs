//! The `[server]` section: where `dp-server` listens, its TLS files, the trusted scheduler,
//! and the limits of [`SERVER_LIMITS`].

use super::keys::{cores, field, read, refuse_unknown, Bound, Context, DefaultValue, Limit, Unit};
use std::path::PathBuf;

/// The `[server]` section: where `dp-server` listens, and what one analyst or one stranger
/// reaching the port may take from it. Its numeric keys are declared in [`SERVER_LIMITS`],
/// which docs/server-limits.md's table is generated from; the defaults below are theirs.
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
    /// work for ever; default 8 h.
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
    /// yet, 1 to `max_connections`; default half of it. The
    /// rest of `max_connections` is kept for analysts' connections; a new connection beyond
    /// it closes the oldest such connection of the address holding the most, so idle
    /// strangers cannot keep an analyst from connecting and logging in.
    pub max_unauthenticated_connections: usize,
    /// A connection on which no login (nor call with a valid token) succeeded this long after
    /// it was accepted is closed, whatever it sent: the TLS handshake, the HTTP/2 preface and
    /// the login together have this long.
    pub login_window_seconds: u64,
    /// An analyst's connection on which no call started for this long is closed (the client
    /// reconnects on its next call; its session and token stay).
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
    /// [`MAX_QUERY_THREADS`]; default four times the cores. Beyond
    /// `max_query_threads / threads_per_analyst` analysts querying at once, analysts share
    /// runtimes (`src/server/executors.rs`).
    pub max_query_threads: usize,
}

/// The most `[server] threads_per_analyst` may be: more threads than that per analyst only
/// multiply the process's threads by the analysts querying at once.
pub const MAX_THREADS_PER_ANALYST: usize = 256;

/// The most `[server] max_query_threads` may be.
pub const MAX_QUERY_THREADS: usize = 4096;

/// The keys of `[server]` that are not limits (docs/server.md describes them).
const OTHER_KEYS: [&str; 4] = ["listen", "tls_cert", "tls_key", "scheduler"];

/// Every limit of `[server]`, in the order docs/server-limits.md lists them and they are read
/// (a default or a range that names another key comes after it).
pub const SERVER_LIMITS: &[Limit<ServerConfig>] = &[
    Limit::new(
        field!(ServerConfig, max_connections),
        Unit::Count,
        DefaultValue::Value(512),
        r#"TCP connections open at once, strangers' and analysts' (see "Connections" below). A new connection beyond it replaces a stranger's connection (closing it); if every connection is an analyst's, the new one is closed as soon as it is accepted, before any TLS handshake (the client sees the connection close), so no one can use up the process's file descriptors. Keep it below the process's open-file limit (`ulimit -n`)."#,
    ),
    Limit::new(
        field!(ServerConfig, max_connections_per_address),
        Unit::Count,
        DefaultValue::Value(128),
        r#"The same from one peer IP address; one more from that address is closed as soon as it is accepted (it replaces nothing)."#,
    ),
    Limit::new(
        field!(ServerConfig, max_unauthenticated_connections),
        Unit::Count,
        DefaultValue::Computed {
            doc: "half of `max_connections`",
            value: |c, _| (c.max_connections as u64 / 2).max(1),
        },
        r#"Strangers' connections open at once: those on which no login (Flight handshake) nor call with a valid token succeeded yet. 1 to `max_connections`; the rest of `max_connections` is kept for analysts' connections. A new connection beyond it closes the oldest stranger's connection of the address holding the most strangers' connections (the newcomer's own, if that is the one), rather than being refused: idle connections, even from many addresses, cannot keep an honest analyst from connecting and logging in."#,
    ).within(Bound::Value(1), Bound::Key("max_connections")),
    Limit::new(
        field!(ServerConfig, login_window_seconds),
        Unit::Seconds,
        DefaultValue::Value(20),
        r#"A stranger's connection is closed this long after it was accepted, whatever it sent: nothing, part of a TLS handshake, only the HTTP/2 preface, failed logins. The TLS handshake (at most 10 s itself), the preface and the login share the window, on plain TCP and TLS alike. The default outlasts a login's 10 s wait for a password-check permit under a login flood. A client whose connection closes before it logs in reconnects and logs in again."#,
    ),
    Limit::new(
        field!(ServerConfig, connection_idle_seconds),
        Unit::Seconds,
        DefaultValue::Value(3600),
        r#"An analyst's connection on which no call started for this long is closed; HTTP/2 keep-alive pings do not count. The client reconnects at its next call, and its token still works (sessions end by `session_idle_seconds`, not with connections). Counted from the start of the last call, so keep it above `[limits] query_timeout_seconds` + 30 s, or a result read longer than it is cut."#,
    ),
    Limit::new(
        field!(ServerConfig, login_concurrency),
        Unit::Count,
        DefaultValue::Computed {
            doc: "the number of cores",
            value: |_, _| cores() as u64,
        },
        r#"Password checks running at once. Every failed login, for a known name or not, with a `password_hash` or a plaintext `password`, runs exactly one Argon2 check (a decoy with the parameters of the configuration's first `password_hash` for unknown names), so its time does not tell whether the name exists. Each is one Argon2id verification (19 MiB, tens of ms of a core), run on the blocking pool only with a permit and in a buffer reused per permit, so a flood of handshakes holds at most this many buffers. A login waits at most 10 s for a permit, then `ResourceExhausted` ("login_concurrency")."#,
    ),
    Limit::new(
        field!(ServerConfig, login_name_failures),
        Unit::Count,
        DefaultValue::Value(5),
        r#"Failed logins in a row for one user name before back-off: each further failure doubles a wait (1 s, 2 s, 4 s, ...). While a name or address waits, its logins are refused at once with `Unauthenticated` "retry in N s", without a password check; the refusals do not lengthen the wait. A success ends both waits."#,
    ).from(Bound::Value(0))
    .at_most(Bound::Value(u32::MAX as u64), ": too large"),
    Limit::new(
        field!(ServerConfig, login_peer_failures),
        Unit::Count,
        DefaultValue::Value(20),
        r#"The same per peer IP address (higher: several honest users may share one address)."#,
    ).from(Bound::Value(0))
    .at_most(Bound::Value(u32::MAX as u64), ": too large"),
    Limit::new(
        field!(ServerConfig, login_backoff_max_seconds),
        Unit::Seconds,
        DefaultValue::Value(60),
        r#"The longest wait. A wait (or a last failure) older than this is forgotten. An attacker flooding one analyst's name delays that analyst's login by at most this much per failed attempt they win."#,
    ),
    Limit::new(
        field!(ServerConfig, session_idle_seconds),
        Unit::Seconds,
        DefaultValue::Value(3600),
        r#"A session unused this long is closed."#,
    ),
    Limit::new(
        field!(ServerConfig, token_lifetime_seconds),
        Unit::Seconds,
        DefaultValue::Value(8 * 3600),
        r#"A token is refused this long after its login, however recently used: "session token expired: older than N s (token_lifetime_seconds)"."#,
    ),
    Limit::new(
        field!(ServerConfig, max_sessions_per_analyst),
        Unit::Count,
        DefaultValue::Value(16),
        r#"Open sessions per analyst. A login beyond it closes that analyst's least recently used session (its token, tickets and prepared statements): a client that never closes its sessions only loses its own oldest ones, and an honest login is never refused for it."#,
    ),
    Limit::new(
        field!(ServerConfig, max_prepared_statements),
        Unit::Count,
        DefaultValue::Value(64),
        r#"Prepared statements per session, Flight SQL's (`CreatePreparedStatement`; each holds its SQL, up to 256 KiB, and its bound parameters, up to `max_parameter_bytes`) and SQL `PREPARE`s together (each holds its logical plan, once: DataFusion's own optimised copy is no longer stored). One more of either kind is refused ("max_prepared_statements") until one is closed or `DEALLOCATE`d. With `max_sessions_per_analyst`, an analyst holds at most 16 × 64 = 1,024 statements: about 1.3 GiB at worst (a 256 KiB statement with 1 MiB of parameters each; a SQL `PREPARE` of a statement near 256 KiB plans to about 0.5 MB, measured as 3.4 GB for 3,700 when each was stored twice), so lower it where analysts are many. `dpsql --config` has no Flight statements and keeps its fixed cap of 256 SQL `PREPARE`s a session. Tested in `sql_prepares_count_with_flight_prepared_statements`."#,
    ),
    Limit::new(
        field!(ServerConfig, max_message_bytes),
        Unit::Bytes,
        DefaultValue::Value(4 << 20),
        r#"The largest gRPC message the server decodes (tonic's `max_decoding_message_size`); a larger one is refused by tonic ("decoded message length too large")."#,
    ),
    Limit::new(
        field!(ServerConfig, max_parameter_bytes),
        Unit::Bytes,
        DefaultValue::Value(1 << 20),
        r#"Bytes of one `DoPut` of prepared-statement parameters. The stream is read message by message and refused as soon as it passes the limit ("max_parameter_bytes"); only its first non-empty batch (one row of values) is kept. A batch that does not decode (a type nested past the IPC reader's 64 levels, a malformed message) is refused as `InvalidArgument`. The analyst writes the batch's schema, so its values reach every Arrow type: a dictionary-encoded value is taken as its value (as arrow-flight's client sends it), and each is bounded as a literal of its type is (`max_value_bytes`, `max_type_depth`, the casts a locked session refuses), before the charge (`prepared_parameters_of_any_type_are_bounded_as_literals`, and through ADBC in `python_adbc_client`)."#,
    ),
    Limit::new(
        field!(ServerConfig, max_parameter_batches),
        Unit::Count,
        DefaultValue::Value(16),
        r#"Messages of one such `DoPut` (the schema counts as one); beyond, refused ("max_parameter_batches")."#,
    ),
    Limit::new(
        field!(ServerConfig, max_queries_per_analyst),
        Unit::Count,
        DefaultValue::Value(16),
        r#"Queries of one analyst at once. A query holds a slot from before it is planned (`GetFlightInfo`) to the end of its result stream (`DoGet`), or until its unfetched ticket is dropped (see below)."#,
    ),
    Limit::new(
        field!(ServerConfig, max_queries),
        Unit::Count,
        DefaultValue::Value(64),
        r#"Queries of all analysts at once."#,
    ),
    Limit::new(
        field!(ServerConfig, query_queue_seconds),
        Unit::Seconds,
        DefaultValue::Value(10),
        r#"How long a query waits for both slots; then `ResourceExhausted` naming the limit, and **nothing is charged** (the slot is taken before planning). A `DoPut` update, a `CreatePreparedStatement` and a `DoGet` of `GetTables` or `GetDbSchemas` take a slot the same way (see "Updates, catalog calls and planning" below)."#,
    ),
    Limit::new(
        field!(ServerConfig, threads_per_analyst),
        Unit::Count,
        DefaultValue::Computed {
            doc: "the number of cores",
            value: |_, _| cores() as u64,
        },
        r#"Worker threads of each analyst's query runtime, and statements of one analyst planned at once (see "CPU" below); 1 to 256. Fewer leave cores to the other analysts when one is busy."#,
    ).within(Bound::Value(1), Bound::Value(MAX_THREADS_PER_ANALYST as u64)),
    Limit::new(
        field!(ServerConfig, max_query_threads),
        Unit::Count,
        DefaultValue::Computed {
            doc: "4 times the number of cores (at least `threads_per_analyst`)",
            value: |c, _| (4 * cores()).clamp(c.threads_per_analyst, MAX_QUERY_THREADS) as u64,
        },
        r#"Worker threads of all analysts' query runtimes together, `threads_per_analyst` to 4096: at most `max_query_threads / threads_per_analyst` runtimes run at once. Beyond, an analyst without a runtime takes the place of one whose runtime runs no query (used least recently), else shares the runtime the fewest analysts share until their queries there end (see "CPU" below)."#,
    ).within(Bound::Key("threads_per_analyst"), Bound::Value(MAX_QUERY_THREADS as u64)),
];

impl Default for ServerConfig {
    fn default() -> Self {
        parse(None, &|path: &str| path.to_string()).expect("the defaults are within their ranges")
    }
}

/// The `[server]` section from its `values` (`None`: absent); paths are resolved by `resolve`.
pub fn parse(
    values: Option<toml::Table>,
    resolve: &dyn Fn(&str) -> String,
) -> Result<ServerConfig, String> {
    let mut values = values.unwrap_or_default();
    let mut text = |key: &str| match values.remove(key) {
        None => Ok(None),
        Some(toml::Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!("[server] {key}: expected a string, got {other}")),
    };
    let (listen, tls_cert, tls_key, scheduler) = (
        text("listen")?,
        text("tls_cert")?,
        text("tls_key")?,
        text("scheduler")?,
    );
    if tls_cert.is_some() != tls_key.is_some() {
        return Err("[server] TLS needs both tls_cert and tls_key (PEM files)".to_string());
    }
    // Every limit is set from SERVER_LIMITS below.
    let mut config = ServerConfig {
        listen,
        tls_cert: tls_cert.map(|p| PathBuf::from(resolve(&p))),
        tls_key: tls_key.map(|p| PathBuf::from(resolve(&p))),
        session_idle_seconds: 0,
        token_lifetime_seconds: 0,
        max_sessions_per_analyst: 0,
        max_prepared_statements: 0,
        max_message_bytes: 0,
        max_connections: 0,
        max_connections_per_address: 0,
        max_unauthenticated_connections: 0,
        login_window_seconds: 0,
        connection_idle_seconds: 0,
        max_parameter_bytes: 0,
        max_parameter_batches: 0,
        login_concurrency: 0,
        login_name_failures: 0,
        login_peer_failures: 0,
        login_backoff_max_seconds: 0,
        max_queries_per_analyst: 0,
        max_queries: 0,
        query_queue_seconds: 0,
        scheduler,
        threads_per_analyst: 0,
        max_query_threads: 0,
    };
    read(
        "server",
        SERVER_LIMITS,
        &mut config,
        &mut values,
        &Context::default(),
    )?;
    refuse_unknown("server", &values, &OTHER_KEYS, SERVER_LIMITS)?;
    Ok(config)
}
