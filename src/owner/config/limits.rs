//! The `[limits]` section: the memory the analysts' queries may hold, where they spill, and
//! how long one may run ([`LIMITS`]).

use super::keys::{field, read, refuse_unknown, Bound, Context, DefaultValue, Limit, Unit};
use std::path::PathBuf;

/// The `[limits]` section: what one analyst's query may take from the process. Its numeric
/// keys are declared in [`LIMITS`], which docs/server-limits.md's table is generated from.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitsConfig {
    /// The memory all queries of the process may hold together (`memory_limit = "2GiB"`), in
    /// bytes: one DataFusion memory pool (fair between the queries that spill) for every
    /// session, so a huge aggregation fails with a resources error instead of growing the
    /// process until the system kills it.
    pub memory_limit: usize,
    /// The memory one query may hold (`query_memory_limit = "1GiB"`), in bytes, within
    /// `memory_limit`: one analyst's query cannot take the whole pool from the others' queries.
    /// At most `memory_limit`; default a quarter of it.
    pub query_memory_limit: usize,
    /// The memory all queries of one analyst may hold together in `dp-server`
    /// (`analyst_memory_limit = "1GiB"`), in bytes: each analyst's queries draw on a share of
    /// `memory_limit` of their own, so what one analyst holds never refuses memory to
    /// another's query (which would fail after its charge for a reason of someone else's
    /// making). The shares together are at most `memory_limit`; default an equal share for each
    /// configured analyst.
    pub analyst_memory_limit: usize,
    /// Where sorts and aggregations spill when they are over their share of the memory;
    /// `None` (the default): no spilling, the query fails with a resources error instead
    /// (nothing an analyst sends fills the owner's disk).
    pub spill_directory: Option<PathBuf>,
    /// The longest a query of an analyst may run (`query_timeout_seconds`), from the start of
    /// its execution to its last batch: then it is stopped and fails with a resources error,
    /// so a slow query cannot hold a worker for ever.
    pub query_timeout_seconds: u64,
    /// The quantum of each analyst's release schedule (`release_quantum_ms`): a result is
    /// held until a time its analyst's earlier results fixed, so its time does not tell the
    /// data ([`crate::sql::privacy::session::release_time`]); 0 (the default): released when
    /// ready.
    pub release_quantum_ms: u64,
}

/// Every numeric limit of `[limits]`, in the order docs/server-limits.md lists them and they
/// are read (a default or a range that names another key comes after it).
pub const LIMITS: &[Limit<LimitsConfig>] = &[
    Limit::new(
        field!(LimitsConfig, memory_limit),
        Unit::Bytes,
        DefaultValue::Value(4 << 30),
        r#"The memory all analysts' queries together may hold. It is shared out in fixed shares (next row), so the process's queries never hold more."#,
    ),
    Limit::new(
        field!(LimitsConfig, analyst_memory_limit),
        Unit::Bytes,
        DefaultValue::Computed {
            doc: "`memory_limit` / the number of analysts",
            value: |c, context| (c.memory_limit / context.analysts.max(1)).max(1) as u64,
        },
        r#"The memory one analyst's queries may hold together: a pool of their own, kept for them whoever else is querying (`src/server/memory.rs`). One more byte is refused to that analyst's query with a resources error naming `[limits] analyst_memory_limit`, never to another analyst's. The shares together are at most `memory_limit` (a larger value is refused at start-up): a share that could be overcommitted would let one analyst's use fail another's query after its charge. Tested in `one_analyst_filling_memory_does_not_fail_another_s_charged_queries`: thirty joins of one analyst, together past `memory_limit`, are refused memory naming her share, and each of the other analyst's DP queries meanwhile is answered and charged once (before the shares, they failed after their charge)."#,
    ),
    Limit::new(
        field!(LimitsConfig, query_memory_limit),
        Unit::Bytes,
        DefaultValue::Computed {
            doc: "a quarter of `memory_limit` (1 GiB)",
            value: |c, _| (c.memory_limit / 4).max(1) as u64,
        },
        r#"The memory one query may hold, within its analyst's share. A query over it fails alone with a resources error naming `[limits] query_memory_limit`, while the analyst's other queries keep their memory (`src/server/memory.rs`; tested in `a_query_over_its_memory_share_fails_alone`). A DP aggregation's error text is withheld (it can quote a protected value), but a refusal of memory stays a resources error naming the limit that refused it."#,
    ).at_most(
        Bound::Key("memory_limit"),
        ": one query's memory is part of all queries'",
    ),
    Limit::new(
        field!(LimitsConfig, query_timeout_seconds),
        Unit::Seconds,
        DefaultValue::Value(600),
        r#"A statement's planning too (from when its planning starts; see below). A query's execution, from the start of its stream to its last batch; then stopped with a resources error naming the option. The deadline is watched on the Flight runtime, so it fires however busy the analyst's threads are. It counts wall-clock time: other analysts' queries slow a query by sharing the cores, but do not queue it; only the same analyst's queries can. On a cluster the job stops too: `dp-server --scheduler` cancels its job on the scheduler, and a locked cluster's scheduler cancels a job still running this long after its submission; either way the executors' tasks stop at their next batch (docs/distributed.md, "Deadlines and cancellation")."#,
    ),
    Limit::new(
        field!(LimitsConfig, release_quantum_ms),
        Unit::Milliseconds,
        DefaultValue::Value(0),
        r#"When a result reaches the analyst (`dp-server`, `dpsql --config`, the Python binding, a locked cluster's client port), so that its time does not tell whether one person's rows were there. Each analyst has a level k, from 0: a result (its first batch, its error, or its end) is held until its start plus this quantum times 2^k, however early it was ready. A result not ready by then goes at the first such time, k + 1, k + 2, ..., that it is ready by, and the analyst keeps that level for every later result (up to `query_timeout_seconds`), so one analyst sees at most log2(query_timeout_seconds / quantum) results whose time tells anything: predictive mitigation of timing channels (Askarov, Zhang and Myers 2010; `src/sql/privacy/session/release_time.rs`). Levels are per analyst and per process; at most 3,600,000 (an hour). Every result then takes at least the quantum; pick one above the time of the analysts' usual queries (100 ms for small tables). 0: released when ready, and the time of a query can depend on one person's rows (docs/privacy-analysis.md, "What is not covered")."#,
    )
    // At most an hour: a longer quantum holds every result past any sensible deadline.
    .within(Bound::Value(0), Bound::Value(3_600_000)),
];

/// The keys of `[limits]` that are not numbers: key, default and docs/server-limits.md's row.
pub const OTHER_KEYS: [(&str, &str, &str); 1] = [(
    "spill_directory",
    "none",
    "Where sorts, aggregations and repartitions may spill; without it, no spilling (nothing an analyst sends fills the owner's disk). With it, DataFusion 55.2.0 can stop a query that its memory refused, with no error, until `query_timeout_seconds` ends it: a repartition whose inputs spill at once waits on the wrong file (apache/datafusion#24883, fixed upstream by #24891, not in 55.2.0; reproduced here through `dpsql`, BENCHMARKS.md, \"Bounding: the unit table freed before the output\").",
)];

impl Default for LimitsConfig {
    /// The limits of a configuration without `[limits]` nor `[[analyst]]`.
    fn default() -> Self {
        parse(None, 0, &|path: &str| path.to_string())
            .expect("the defaults are within their ranges")
    }
}

/// The `[limits]` section from its `values` (`None`: absent), for a configuration of
/// `analysts` analysts; paths are resolved by `resolve`.
pub fn parse(
    values: Option<toml::Table>,
    analysts: usize,
    resolve: &dyn Fn(&str) -> String,
) -> Result<LimitsConfig, String> {
    let mut values = values.unwrap_or_default();
    let spill_directory = match values.remove("spill_directory") {
        None => None,
        Some(toml::Value::String(path)) => Some(PathBuf::from(resolve(&path))),
        Some(other) => {
            return Err(format!(
                "[limits] spill_directory: expected a path, got {other}"
            ))
        }
    };
    // Every limit is set from LIMITS below.
    let mut config = LimitsConfig {
        memory_limit: 0,
        query_memory_limit: 0,
        analyst_memory_limit: 0,
        spill_directory,
        query_timeout_seconds: 0,
        release_quantum_ms: 0,
    };
    read(
        "limits",
        LIMITS,
        &mut config,
        &mut values,
        &Context { analysts },
    )?;
    let keys: Vec<&str> = OTHER_KEYS.iter().map(|(key, ..)| *key).collect();
    refuse_unknown("limits", &values, &keys, LIMITS)?;
    // The analysts' shares together: a relation of two keys and the analysts, not a range.
    let shares = config.analyst_memory_limit.saturating_mul(analysts.max(1));
    if shares > config.memory_limit {
        return Err(format!(
            "[limits] analyst_memory_limit ({} bytes) times the {analysts} analysts ({shares} \
             bytes) must be at most memory_limit ({} bytes): each analyst's share is kept for \
             them, so that one analyst's queries never take memory another's query was promised",
            config.analyst_memory_limit, config.memory_limit
        ));
    }
    Ok(config)
}
