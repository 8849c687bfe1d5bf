//! Running one analyst program in a fresh locked session and recording everything the analyst
//! sees, then comparing four such observations (D twice, D' twice) by the D1 == D2 rule.

use super::data::Dataset;
use datafusion::arrow::array::RecordBatch;
use datafusion::error::Result;
use datafusion::prelude::SessionContext;
use datafusion_dp::analyst_sql;
use std::path::Path;
use std::sync::Arc;

/// The DP aggregates over a 2x2 table (their values are releases, never compared).
pub const DP_RATIOS: [&str; 6] = [
    "dp_relative_risk",
    "dp_rr_ci",
    "dp_odds_ratio",
    "dp_or_ci",
    "dp_risk_difference",
    "dp_rd_ci",
];

/// Whether `sql` calls a DP aggregate of the registry (so its answer's values are releases).
pub fn releases(sql: &str) -> bool {
    let lower = sql.to_ascii_lowercase();
    datafusion_dp::sql::functions::aggregate::STATISTICS
        .iter()
        .any(|s| lower.contains(s.name()))
        || lower.contains("execute ")
}

/// What an analyst runs: statements in one session; the last is the one observed (the
/// others set the session up: `SET ...`, `PREPARE ...`).
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub statements: Vec<String>,
    /// The last statement's ORDER BY keys as (output column, descending), when known: the
    /// row-order contract sorts by these, then by every column ascending.
    pub order_by: Option<Vec<(usize, bool)>>,
}

impl Program {
    pub fn one(sql: &str) -> Self {
        let has_order = sql.to_ascii_lowercase().contains("order by");
        Self {
            statements: vec![sql.to_string()],
            order_by: if has_order { None } else { Some(vec![]) },
        }
    }

    pub fn text(&self) -> String {
        self.statements.join(";\n")
    }

    fn last(&self) -> &str {
        self.statements.last().map(String::as_str).unwrap_or("")
    }
}

/// Everything the analyst saw in one session, aspect by aspect.
#[derive(Clone, Debug)]
pub struct Observation {
    pub aspects: Vec<(&'static str, String)>,
    /// The row-order contract on the last statement's answer (`None`: not checked).
    pub order: Option<std::result::Result<(), String>>,
}

impl Observation {
    fn get(&self, aspect: &str) -> Option<&str> {
        self.aspects
            .iter()
            .find(|(a, _)| *a == aspect)
            .map(|(_, t)| t.as_str())
    }
}

/// Batches as text, one line a row, cells separated by ` | ` (no padding: the width of a
/// pretty-printed table would make every cell depend on the longest one).
pub fn table_text(batches: &[RecordBatch]) -> String {
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
    let options = FormatOptions::default().with_null("NULL");
    let mut out = String::new();
    for batch in batches {
        let formatters: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<std::result::Result<_, _>>()
            .unwrap_or_default();
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = formatters
                .iter()
                .map(|f| f.value(row).to_string())
                .collect();
            out.push_str(&cells.join(" | "));
            out.push('\n');
        }
    }
    out
}

async fn collect(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
    analyst_sql(ctx, sql).await?.collect().await
}

pub fn is_query(sql: &str) -> bool {
    let lower = sql.trim_start().to_ascii_lowercase();
    ["select", "with", "values", "("]
        .iter()
        .any(|k| lower.starts_with(k))
}

fn schema_text(
    batches: &[RecordBatch],
    schema: Option<datafusion::arrow::datatypes::SchemaRef>,
) -> String {
    let schema = batches.first().map(|b| b.schema()).or(schema);
    match schema {
        Some(s) => s
            .fields()
            .iter()
            .map(|f| {
                format!(
                    "{}: {} {}",
                    f.name(),
                    f.data_type(),
                    if f.is_nullable() { "NULL" } else { "NOT NULL" }
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
        None => String::new(),
    }
}

/// Runs `program` in a fresh locked session of `data` and records the outcome, the error's
/// text, the answer's schema, row count and (without releases) values, `EXPLAIN` of the last
/// statement and `dp_budget()` afterwards. A panic is recorded as an error.
pub async fn observe(data: Arc<Dataset>, program: Program, ledger: Arc<Path>) -> Observation {
    observe_with(data, program, ledger, false).await.0
}

/// [`observe`], and what the observed (last) statement cost the process: CPU time, wall time
/// and peak memory from its planning to its last batch ([`super::child::Usage`]; the worker
/// of [`super::child`] runs one program at a time, so the process's use is the program's).
pub async fn observe_measured(
    data: Arc<Dataset>,
    program: Program,
    ledger: Arc<Path>,
) -> (Observation, Option<super::child::Cost>) {
    observe_with(data, program, ledger, true).await
}

async fn observe_with(
    data: Arc<Dataset>,
    program: Program,
    ledger: Arc<Path>,
    measure: bool,
) -> (Observation, Option<super::child::Cost>) {
    let dir = data.dir.clone();
    let handle =
        tokio::spawn(async move { observe_inner(&data, &program, &ledger, measure).await });
    let (mut observation, cost) = match handle.await {
        Ok(o) => o,
        Err(e) => (
            Observation {
                aspects: vec![
                    ("outcome", "panic".into()),
                    ("error", format!("panic: {e}")),
                ],
                order: None,
            },
            None,
        ),
    };
    // Object-store paths are printed without the leading '/'.
    let relative = dir.trim_start_matches('/');
    for (_, text) in &mut observation.aspects {
        *text = text.replace(&dir, "<DATA>").replace(relative, "<DATA>");
    }
    (observation, cost)
}

async fn observe_inner(
    data: &Dataset,
    program: &Program,
    ledger: &Path,
    measure: bool,
) -> (Observation, Option<super::child::Cost>) {
    let mut aspects = Vec::new();
    let ctx = match data.session(ledger) {
        Ok(ctx) => ctx,
        Err(e) => {
            aspects.push(("outcome", "no session".into()));
            aspects.push(("error", e.to_string()));
            return (
                Observation {
                    aspects,
                    order: None,
                },
                None,
            );
        }
    };
    let n = program.statements.len();
    for (i, sql) in program.statements[..n - 1].iter().enumerate() {
        if let Err(e) = collect(&ctx, sql).await {
            aspects.push(("outcome", format!("error in statement {}", i + 1)));
            aspects.push(("error", e.to_string()));
            return (
                Observation {
                    aspects,
                    order: None,
                },
                None,
            );
        }
    }
    let last = program.last();
    if is_query(last) {
        let explain = match collect(&ctx, &format!("EXPLAIN {last}")).await {
            Ok(b) => table_text(&b),
            Err(e) => format!("error: {e}"),
        };
        aspects.push(("explain", explain));
    }
    let mut order = None;
    let usage = measure.then(super::child::Usage::start);
    let planned = analyst_sql(&ctx, last).await;
    let result = match planned {
        Ok(df) => {
            let schema = Arc::new(df.schema().as_arrow().clone());
            Ok((schema, df.collect().await))
        }
        Err(e) => Err(e),
    };
    let cost = usage.map(super::child::Usage::stop);
    match result {
        Err(e) => {
            aspects.push(("outcome", "error".into()));
            aspects.push(("error", e.to_string()));
        }
        Ok((schema, collected)) => {
            match collected {
                Err(e) => {
                    aspects.push(("outcome", "error in execution".into()));
                    aspects.push(("error", e.to_string()));
                }
                Ok(batches) => {
                    aspects.push(("outcome", "answered".into()));
                    aspects.push(("schema", schema_text(&batches, Some(schema))));
                    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                    aspects.push(("rows", rows.to_string()));
                    if !releases(last) {
                        aspects.push(("values", table_text(&batches)));
                    }
                    // The contract holds for releases (a query with a DP call): what else a
                    // locked session answers reads no protected row.
                    let ordered = is_query(last) && releases(last);
                    if let (Some(keys), true) = (&program.order_by, ordered) {
                        order = Some(super::order::check(&batches, keys));
                    }
                }
            }
        }
    }
    let budget = match collect(&ctx, "SELECT * FROM dp_budget()").await {
        Ok(b) => table_text(&b),
        Err(e) => format!("error: {e}"),
    };
    aspects.push(("budget", budget));
    (Observation { aspects, order }, cost)
}

/// One aspect that differs between D and D' although it did not vary within either.
#[derive(Clone, Debug)]
pub struct Difference {
    pub aspect: &'static str,
    pub d: String,
    pub d_prime: String,
    /// The differing tokens (D's, D''s), at most a few.
    pub tokens: Vec<(String, String)>,
}

/// Splits text into tokens: runs of letters, digits and `_.-:/=`, and single other characters
/// (whitespace dropped).
pub fn tokens(text: &str) -> Vec<&str> {
    let word = |c: char| c.is_alphanumeric() || "_.-:/=".contains(c);
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        if word(c) {
            start.get_or_insert(i);
            continue;
        }
        if let Some(s) = start.take() {
            out.push(&text[s..i]);
        }
        if !c.is_whitespace() {
            out.push(&text[i..i + c.len_utf8()]);
        }
    }
    if let Some(s) = start {
        out.push(&text[s..]);
    }
    out
}

/// One side's runs of an aspect, masked: `None` when the runs differ in shape (token
/// count), so the aspect is a DP output there; otherwise the tokens with every position that
/// varies between runs replaced by `None` (noise, a per-query salt).
fn masked(runs: &[&str]) -> Option<Vec<Option<String>>> {
    let t: Vec<Vec<&str>> = runs.iter().map(|r| tokens(r)).collect();
    let n = t[0].len();
    if t.iter().any(|x| x.len() != n) {
        return None;
    }
    Some(
        (0..n)
            .map(|i| {
                if t.iter().all(|x| x[i] == t[0][i]) {
                    Some(t[0][i].to_string())
                } else {
                    None
                }
            })
            .collect(),
    )
}

/// The D1 == D2 rule for one aspect, over any number of runs on each side. An aspect whose
/// runs on D agree (token by token, in shape) and whose runs on D' agree is deterministic
/// where they agree, and there D must equal D': a token that is fixed on both sides and
/// differs, or a different number of tokens, is a difference. Positions that vary within a
/// side are random (noise, a per-query salt) and skipped; an aspect whose shape varies
/// within a side (rows under private group selection) is a DP output and not compared.
pub fn compare(aspect: &'static str, d: &[&str], p: &[&str]) -> Option<Difference> {
    let (md, mp) = (masked(d)?, masked(p)?);
    let differing: Vec<(String, String)> = if md.len() != mp.len() {
        let first = md
            .iter()
            .zip(&mp)
            .position(|(a, b)| a.is_some() && b.is_some() && a != b)
            .unwrap_or(md.len().min(mp.len()));
        let show = |m: &[Option<String>]| {
            m.get(first)
                .cloned()
                .flatten()
                .unwrap_or_else(|| "<end>".into())
        };
        vec![
            (
                format!("{} tokens", md.len()),
                format!("{} tokens", mp.len()),
            ),
            (show(&md), show(&mp)),
        ]
    } else {
        md.iter()
            .zip(&mp)
            .filter_map(|(a, b)| match (a, b) {
                (Some(a), Some(b)) if a != b => Some((a.clone(), b.clone())),
                _ => None,
            })
            .take(6)
            .collect()
    };
    if differing.is_empty() {
        return None;
    }
    Some(Difference {
        aspect,
        d: d[0].to_string(),
        d_prime: p[0].to_string(),
        tokens: differing,
    })
}

/// Every aspect that differs between D and D' by [`compare`] (an aspect missing from an
/// observation counts as empty text).
pub fn differences(d: &[Observation], p: &[Observation]) -> Vec<Difference> {
    let mut names: Vec<&'static str> = Vec::new();
    for o in d.iter().chain(p) {
        for (a, _) in &o.aspects {
            if !names.contains(a) {
                names.push(a);
            }
        }
    }
    names
        .into_iter()
        .filter_map(|a| {
            let get = |o: &Observation| o.get(a).unwrap_or("").to_string();
            let dt: Vec<String> = d.iter().map(get).collect();
            let pt: Vec<String> = p.iter().map(get).collect();
            let dr: Vec<&str> = dt.iter().map(String::as_str).collect();
            let pr: Vec<&str> = pt.iter().map(String::as_str).collect();
            compare(a, &dr, &pr)
        })
        .collect()
}
