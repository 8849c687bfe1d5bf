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
//! # in_memory = true             # read once at start, served from memory (never re-read)
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
//! Relative paths are relative to the configuration file's directory. Each section is read by
//! its own module; the numeric keys of `[server]` and `[limits]` are declared once, in
//! [`server::SERVER_LIMITS`] and [`limits::LIMITS`] ([`keys`]), which docs/server-limits.md's
//! tables are generated from.
//!
//! A protected table's schema is the owner's: CSV and NDJSON tables declare `columns` (an
//! inferred type or field would depend on the rows, so one person's value could show in
//! `DESCRIBE`), Parquet ones may take it from their files' metadata when every file has the
//! same, and hive layouts declare their `partition_columns`.

mod analysts;
pub mod keys;
pub mod limits;
mod options;
pub mod server;
mod tables;

pub use analysts::{AnalystConfig, Credential};
pub use keys::parse_size;
pub use limits::LimitsConfig;
pub use server::ServerConfig;
pub use tables::{sql_type, TableConfig};

use datafusion::error::{DataFusionError, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

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

/// The file's sections as TOML reads them; each is validated by its module.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    table: Vec<tables::RawTable>,
    #[serde(default)]
    options: BTreeMap<String, toml::Value>,
    #[serde(default)]
    analyst: Vec<analysts::RawAnalyst>,
    #[serde(default)]
    server: Option<toml::Table>,
    #[serde(default)]
    limits: Option<toml::Table>,
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
        let tables = tables::parse(raw.table, &resolve).map_err(error)?;
        let options = options::parse(raw.options).map_err(error)?;
        let analysts = analysts::parse(raw.analyst, &resolve).map_err(error)?;
        let server = server::parse(raw.server, &resolve).map_err(error)?;
        let limits = limits::parse(raw.limits, analysts.len(), &resolve).map_err(error)?;
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
    use crate::sql::accounting::measure::{Budget, BudgetMeasure};
    use crate::Protection;
    use datafusion::arrow::datatypes::DataType;
    use std::path::PathBuf;

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
        assert_eq!(alice.budget.epsilon, Some(2.0));
        assert_eq!(alice.budget.measure, BudgetMeasure::EpsilonDelta);
        assert_eq!(alice.ledger, PathBuf::from("/owner/alice.ledger"));
        assert_eq!(config.server.session_idle_seconds, 3600);
        assert_eq!(
            config.server.scheduler.as_deref(),
            Some("df://127.0.0.1:50050")
        );
    }

    /// docs/server-limits.md with its tables of `[server]` and `[limits]` limits generated
    /// from [`server::SERVER_LIMITS`] and [`limits::LIMITS`]: each between its marker comment
    /// and the end marker.
    fn server_limits_doc(text: &str) -> String {
        const END: &str = "<!-- end of the generated table -->";
        let tables = [
            (
                "<!-- [server] limits:",
                keys::markdown(server::SERVER_LIMITS, &[]),
            ),
            (
                "<!-- [limits] limits:",
                keys::markdown(limits::LIMITS, &limits::OTHER_KEYS),
            ),
        ];
        let mut text = text.to_string();
        for (marker, table) in tables {
            let start = text.find(marker).expect("the marker is in the doc");
            let body = start + text[start..].find('\n').unwrap() + 1;
            let end = body + text[body..].find(END).expect("the end marker follows");
            text.replace_range(body..end, &table);
        }
        text
    }

    /// The limits' tables in docs/server-limits.md are generated from their declarations;
    /// `DOC_UPDATE=1 cargo test --lib server_limits_doc` rewrites them.
    #[test]
    fn server_limits_doc_is_generated() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/server-limits.md");
        let text = std::fs::read_to_string(&path).unwrap();
        let generated = server_limits_doc(&text);
        if std::env::var_os("DOC_UPDATE").is_some() {
            std::fs::write(&path, &generated).unwrap();
        } else {
            assert!(
                text == generated,
                "docs/server-limits.md differs from the limits declared in src/owner/config/: \
                 run DOC_UPDATE=1 cargo test --lib server_limits_doc"
            );
        }
        assert!(generated.contains("| `max_query_threads` |"));
        assert!(generated.contains("| `spill_directory` | none |"));
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
        assert_eq!(d.login_concurrency, keys::cores());
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
        assert_eq!(d.threads_per_analyst, keys::cores());
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
        let cores = keys::cores();
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
    fn analysts_budgets_are_declared_in_one_measure() {
        let budget = |extra: &str| -> std::result::Result<Budget, String> {
            parse(&format!(
                "[[analyst]]\nname = \"a\"\nledger = \"a.l\"\n{extra}"
            ))
            .map(|c| c.analysts[0].budget)
            .map_err(|e| e.to_string())
        };
        let zcdp = |epsilon, delta, rho| Budget {
            measure: BudgetMeasure::Zcdp,
            epsilon,
            delta,
            rho,
        };
        // Old configurations keep their meaning: pure epsilon, (epsilon, delta).
        let pure = budget("epsilon_budget = 3").unwrap();
        assert_eq!(
            (pure.measure, pure.epsilon, pure.delta, pure.rho),
            (BudgetMeasure::EpsilonDelta, Some(3.0), None, None)
        );
        assert_eq!(pure.label(), "epsilon");
        let approx = budget("epsilon_budget = 3\ndelta_budget = 1e-6").unwrap();
        assert_eq!(approx.limits(), Some((3.0, 1e-6)));
        assert_eq!(approx.label(), "epsilon_delta");
        // zCDP: rho itself, or a target (epsilon, delta) converted to rho once.
        assert_eq!(
            budget("budget_measure = \"zcdp\"\nrho_budget = 0.5").unwrap(),
            zcdp(None, None, Some(0.5))
        );
        let target =
            budget("budget_measure = \"zcdp\"\nepsilon_budget = 10\ndelta_budget = 1e-4").unwrap();
        assert_eq!(target, zcdp(Some(10.0), Some(1e-4), None));
        let rho = target.rho_limit().unwrap();
        assert!((rho / 2.117 - 1.0).abs() < 1e-3, "{rho}");
        // The options a locked session is given for it.
        assert_eq!(
            target.options(),
            vec![
                ("budget_measure", "zcdp".to_string()),
                ("epsilon_budget", "10".to_string()),
                ("delta_budget", "0.0001".to_string()),
            ]
        );
        // Errors name the analyst and the keys.
        for (extra, expected) in [
            (
                "rho_budget = 0.5",
                "analyst 'a': rho_budget is a zCDP budget, but budget_measure is 'epsilon_delta'",
            ),
            ("delta_budget = 1e-6", "analyst 'a': needs epsilon_budget"),
            (
                "epsilon_budget = 1\nrho_budget = 0.5",
                "analyst 'a': rho_budget is a zCDP budget, but budget_measure is 'epsilon_delta': set budget_measure = 'zcdp'",
            ),
            (
                "budget_measure = \"zcdp\"\nrho_budget = 0.5\nepsilon_budget = 1\ndelta_budget = 1e-6",
                "analyst 'a': a zCDP budget is rho_budget, or epsilon_budget with delta_budget as a target (epsilon, delta) converted to rho: not both",
            ),
            (
                "budget_measure = \"zcdp\"\nepsilon_budget = 1",
                "analyst 'a': a zCDP budget (budget_measure = 'zcdp') is rho_budget, or a target (epsilon, delta) converted to rho: epsilon_budget > 0 with delta_budget in (0, 1); got epsilon_budget=1, delta_budget=none",
            ),
            (
                "budget_measure = \"zcdp\"",
                "analyst 'a': budget_measure = \"zcdp\" needs rho_budget, or epsilon_budget and delta_budget",
            ),
            (
                "budget_measure = \"zcdp\"\nrho_budget = -1",
                "analyst 'a': rho_budget must be a positive number, got -1",
            ),
            (
                "budget_measure = \"renyi\"\nepsilon_budget = 1",
                "analyst 'a': budget_measure must be 'epsilon_delta' or 'zcdp', got 'renyi'",
            ),
        ] {
            let err = budget(extra).unwrap_err();
            assert!(err.contains(expected), "{extra}: {err}");
        }
        assert!(err("[options]\nrho_budget = 1").contains("per analyst"));
        assert!(err("[options]\nbudget_measure = \"zcdp\"").contains("per analyst"));
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
