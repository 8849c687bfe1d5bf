//! Random analyst programs from a small grammar over the owner's tables (in the spirit of
//! SQLancer and sqlsmith), and a shrinker that simplifies a failing program while it still
//! shows the same difference. [`grammar`] extends it (issue 41) to every function a locked
//! session resolves, casts to every type family, chains of CTEs, joins of protected relations
//! and prepared statements; [`Generator::new`] draws the programs it always drew.

use super::data::{Rng, EXTREME, TARGET};
use super::observe::Program;
use std::sync::Arc;

#[path = "grammar.rs"]
pub mod grammar;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ty {
    Int,
    Num,
    Str,
    Bool,
    Date,
    // The fuzz grammar's types ([`grammar`]): values built from the ones above.
    /// A list (of any element type).
    List,
    Struct,
    /// Bytes.
    Bin,
    /// A timestamp.
    Ts,
    /// A decimal.
    Dec,
    /// An interval.
    Ival,
    /// The untyped NULL.
    Null,
    /// Anything else (a map, a time, a duration): used through `IS NULL` only.
    Other,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Col(String),
    Lit(String),
    Bin(Box<Expr>, &'static str, Box<Expr>),
    Not(Box<Expr>),
    IsNull(Box<Expr>),
    Case(Box<Expr>, Box<Expr>, Box<Expr>),
    Func(String, Vec<Expr>),
    Cast(Box<Expr>, &'static str),
    /// A window function: the text before `OVER`, its arguments and the `OVER (...)` text.
    Window(String, Vec<Expr>, String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum From {
    Table(String),
    /// `left JOIN right ON on`, or `CROSS JOIN` without `on`.
    Join(Box<From>, String, Option<Expr>),
    /// `left <kind> right ON on` between two sources the shrinker can simplify (a join of
    /// two protected relations).
    Joined(Box<From>, &'static str, Box<From>, Expr),
    Sub(Box<Select>, String),
    Union(Box<Select>, Box<Select>, String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Select {
    pub items: Vec<(Expr, Option<String>)>,
    pub from: From,
    pub filter: Option<Expr>,
    pub group_by: Vec<Expr>,
    /// Output positions (0-based) and descending.
    pub order_by: Vec<(usize, bool)>,
    pub limit: Option<u64>,
}

/// A generated program: `SET` statements, then a query (or `EXPLAIN` of it).
#[derive(Clone, Debug, PartialEq)]
pub struct Gen {
    pub sets: Vec<String>,
    pub select: Select,
    pub explain: bool,
    /// A chain of CTEs the select reads (`WITH ... chain AS (...)`).
    pub chain: Option<grammar::Chain>,
    /// Parameters (SQL type, or "" for none: typed by its value; value): the query is prepared
    /// with `$1`, `$2`, ... in its text and executed with these values.
    pub params: Vec<(&'static str, String)>,
}

impl Expr {
    pub fn sql(&self) -> String {
        match self {
            Expr::Col(c) | Expr::Lit(c) => c.clone(),
            Expr::Bin(a, op, b) => format!("({} {op} {})", a.sql(), b.sql()),
            Expr::Not(a) => format!("(NOT {})", a.sql()),
            Expr::IsNull(a) => format!("({} IS NULL)", a.sql()),
            Expr::Case(c, a, b) => format!(
                "CASE WHEN {} THEN {} ELSE {} END",
                c.sql(),
                a.sql(),
                b.sql()
            ),
            Expr::Func(f, args) => format!(
                "{f}({})",
                args.iter().map(Expr::sql).collect::<Vec<_>>().join(", ")
            ),
            Expr::Cast(a, ty) => format!("CAST({} AS {ty})", a.sql()),
            Expr::Window(f, args, over) => format!(
                "{f}({}) OVER ({over})",
                args.iter().map(Expr::sql).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::Col(_) | Expr::Lit(_) => vec![],
            Expr::Bin(a, _, b) => vec![a, b],
            Expr::Not(a) | Expr::IsNull(a) | Expr::Cast(a, _) => vec![a],
            Expr::Case(c, a, b) => vec![c, a, b],
            Expr::Func(_, args) | Expr::Window(_, args, _) => args.iter().collect(),
        }
    }

    /// Simpler expressions to try in this one's place.
    fn shrinks(&self) -> Vec<Expr> {
        let mut out: Vec<Expr> = Vec::new();
        let is_dp = matches!(self, Expr::Func(f, _) if f.starts_with("dp_"));
        if !is_dp {
            out.extend(self.children().into_iter().cloned());
        }
        match self {
            Expr::Lit(l) if l != "1" && l != "1.0" && !l.starts_with('\'') => {
                out.push(Expr::Lit("1".into()))
            }
            Expr::Lit(l) if l.starts_with('\'') && l.len() > 3 => out.push(Expr::Lit("'a'".into())),
            Expr::Col(_) | Expr::Lit(_) => {}
            _ if !is_dp => out.push(Expr::Lit("1".into())),
            _ => {}
        }
        // Each child shrunk in place.
        let rebuild = |i: usize, e: Expr| -> Expr {
            let mut copy = self.clone();
            match &mut copy {
                Expr::Bin(a, _, b) => **[a, b][i] = e,
                Expr::Not(a) | Expr::IsNull(a) | Expr::Cast(a, _) => **a = e,
                Expr::Case(c, a, b) => **[c, a, b][i] = e,
                Expr::Func(_, args) | Expr::Window(_, args, _) => args[i] = e,
                Expr::Col(_) | Expr::Lit(_) => {}
            }
            copy
        };
        for (i, child) in self.children().into_iter().enumerate() {
            for s in child.shrinks() {
                out.push(rebuild(i, s));
            }
        }
        // A DP call's options argument dropped.
        if let Expr::Func(f, args) = self {
            if is_dp && args.len() > 2 {
                let last = args.last().unwrap();
                if matches!(last, Expr::Lit(l) if l.starts_with('\'')) {
                    out.push(Expr::Func(f.clone(), args[..args.len() - 1].to_vec()));
                }
            }
        }
        out
    }
}

impl From {
    pub fn sql(&self) -> String {
        match self {
            From::Table(t) => t.clone(),
            From::Join(l, r, Some(on)) => format!("{} JOIN {r} ON {}", l.sql(), on.sql()),
            From::Join(l, r, None) => format!("{} CROSS JOIN {r}", l.sql()),
            From::Joined(l, kind, r, on) => {
                format!("{} {kind} {} ON {}", l.sql(), r.sql(), on.sql())
            }
            From::Sub(s, alias) => format!("({}) AS {alias}", s.sql()),
            From::Union(a, b, alias) => format!("({} UNION ALL {}) AS {alias}", a.sql(), b.sql()),
        }
    }

    fn shrinks(&self) -> Vec<From> {
        let mut out = Vec::new();
        match self {
            From::Table(_) => {}
            From::Join(l, r, on) => {
                out.push((**l).clone());
                if on.is_some() {
                    out.push(From::Join(l.clone(), r.clone(), None));
                }
                for s in l.shrinks() {
                    out.push(From::Join(Box::new(s), r.clone(), on.clone()));
                }
            }
            From::Joined(l, kind, r, on) => {
                if *kind != "JOIN" {
                    out.push(From::Joined(l.clone(), "JOIN", r.clone(), on.clone()));
                }
                for s in l.shrinks() {
                    out.push(From::Joined(Box::new(s), kind, r.clone(), on.clone()));
                }
                for s in r.shrinks() {
                    out.push(From::Joined(l.clone(), kind, Box::new(s), on.clone()));
                }
            }
            From::Sub(s, alias) => {
                for x in s.shrinks() {
                    out.push(From::Sub(Box::new(x), alias.clone()));
                }
            }
            From::Union(a, b, alias) => {
                out.push(From::Sub(a.clone(), alias.clone()));
                for x in b.shrinks() {
                    out.push(From::Union(a.clone(), Box::new(x), alias.clone()));
                }
            }
        }
        out
    }
}

impl Select {
    pub fn sql(&self) -> String {
        let items: Vec<String> = self
            .items
            .iter()
            .map(|(e, a)| match a {
                Some(a) => format!("{} AS {a}", e.sql()),
                None => e.sql(),
            })
            .collect();
        let mut sql = format!("SELECT {} FROM {}", items.join(", "), self.from.sql());
        if let Some(f) = &self.filter {
            sql.push_str(&format!(" WHERE {}", f.sql()));
        }
        if !self.group_by.is_empty() {
            let keys: Vec<String> = self.group_by.iter().map(Expr::sql).collect();
            sql.push_str(&format!(" GROUP BY {}", keys.join(", ")));
        }
        if !self.order_by.is_empty() {
            let keys: Vec<String> = self
                .order_by
                .iter()
                .map(|(p, d)| format!("{}{}", p + 1, if *d { " DESC" } else { "" }))
                .collect();
            sql.push_str(&format!(" ORDER BY {}", keys.join(", ")));
        }
        if let Some(n) = self.limit {
            sql.push_str(&format!(" LIMIT {n}"));
        }
        sql
    }

    fn shrinks(&self) -> Vec<Select> {
        let mut out = Vec::new();
        let with = |f: &dyn Fn(&mut Select)| {
            let mut s = self.clone();
            f(&mut s);
            s
        };
        if self.filter.is_some() {
            out.push(with(&|s| s.filter = None));
        }
        if self.limit.is_some() {
            out.push(with(&|s| s.limit = None));
        }
        if !self.order_by.is_empty() {
            out.push(with(&|s| s.order_by.clear()));
        }
        if !self.group_by.is_empty() {
            out.push(with(&|s| s.group_by.clear()));
        }
        if self.items.len() > 1 {
            for i in 0..self.items.len() {
                out.push(with(&|s| {
                    s.items.remove(i);
                    s.order_by.retain(|(p, _)| *p != i);
                    for (p, _) in &mut s.order_by {
                        if *p > i {
                            *p -= 1;
                        }
                    }
                }));
            }
        }
        for f in self.from.shrinks() {
            out.push(with(&|s| s.from = f.clone()));
        }
        if let Some(filter) = &self.filter {
            for e in filter.shrinks() {
                out.push(with(&|s| s.filter = Some(e.clone())));
            }
        }
        for (i, (e, _)) in self.items.iter().enumerate() {
            for x in e.shrinks() {
                out.push(with(&|s| s.items[i].0 = x.clone()));
            }
        }
        for (i, e) in self.group_by.iter().enumerate() {
            for x in e.shrinks() {
                out.push(with(&|s| s.group_by[i] = x.clone()));
            }
        }
        out
    }
}

impl Gen {
    pub fn program(&self) -> Program {
        let mut statements = self.sets.clone();
        let mut query = self.select.sql();
        if let Some(chain) = &self.chain {
            query = format!("{} {query}", chain.sql());
        }
        let explain = self.explain && self.params.is_empty();
        if !self.params.is_empty() {
            let types: Vec<&str> = self.params.iter().map(|p| p.0).collect();
            let values: Vec<&str> = self.params.iter().map(|p| p.1.as_str()).collect();
            // An untyped parameter ("") leaves the PREPARE untyped: EXECUTE's values type it.
            statements.push(match types.contains(&"") {
                true => format!("PREPARE q AS {query}"),
                false => format!("PREPARE q({}) AS {query}", types.join(", ")),
            });
            query = format!("EXECUTE q({})", values.join(", "));
        }
        statements.push(if explain {
            format!("EXPLAIN {query}")
        } else {
            query
        });
        Program {
            statements,
            order_by: Some(if explain {
                vec![]
            } else {
                self.select.order_by.clone()
            }),
        }
    }

    /// Simpler programs, simplest changes first.
    pub fn shrinks(&self) -> Vec<Gen> {
        let mut out = Vec::new();
        for i in 0..self.sets.len() {
            let mut g = self.clone();
            g.sets.remove(i);
            out.push(g);
        }
        if self.explain {
            let mut g = self.clone();
            g.explain = false;
            out.push(g);
        }
        if let Some(chain) = &self.chain {
            for c in chain.shrinks() {
                let mut g = self.clone();
                g.chain = Some(c);
                out.push(g);
            }
        }
        for s in self.select.shrinks() {
            out.push(Gen {
                select: s,
                ..self.clone()
            });
        }
        out
    }
}

// ---- generation ----

/// A source of rows: its FROM, its columns (SQL reference, type), its unit column if any.
struct Source {
    from: From,
    cols: Vec<(String, Ty)>,
    unit: Option<String>,
}

const VISITS: [(&str, Ty); 8] = [
    ("patient_id", Ty::Int),
    ("region", Ty::Str),
    ("outcome", Ty::Bool),
    ("exposed", Ty::Bool),
    ("tags", Ty::Str),
    ("visit_date", Ty::Date),
    ("score", Ty::Num),
    ("note", Ty::Str),
];
const T: [(&str, Ty); 5] = [
    ("id", Ty::Int),
    ("x", Ty::Int),
    ("outcome", Ty::Bool),
    ("exposed", Ty::Bool),
    ("g", Ty::Str),
];

fn cols(prefix: &str, table: &[(&str, Ty)]) -> Vec<(String, Ty)> {
    table
        .iter()
        .map(|(c, t)| {
            (
                if prefix.is_empty() {
                    c.to_string()
                } else {
                    format!("{prefix}.{c}")
                },
                *t,
            )
        })
        .collect()
}

const EPSILONS: [&str; 17] = [
    "1.0", "0.5", "2.0", "0.1", "1.0", "1.0", "1e-300", "1e300", "700", "5e-324", "0.001", "100",
    "-1", "0", "1e-9", "1e-12", "1e-15",
];
/// Clamping bounds of `dp_sum`, `dp_avg` and `dp_quantile`.
const BOUNDS: [(&str, &str); 8] = [
    ("0", "10"),
    ("-5", "5"),
    ("0", "100000"),
    ("10", "0"),
    ("3", "3"),
    ("1e-300", "2e-300"),
    ("-1e308", "1e308"),
    ("0", "1e308"),
];
/// `dp_quantile`'s `q`.
const QUANTILES: [&str; 5] = ["0.5", "0", "1", "0.99", "1.5"];
const OPTIONS: [&str; 11] = [
    "mechanism=gaussian, delta=1e-6",
    "confidence=0.9",
    "ci_method=plain",
    "ci_method=bootstrap",
    "confidence=0.999999",
    "mechanism=gaussian, delta=0.5",
    "ci_method=log, confidence=0.5",
    "method=ptr, ptr_bound=1e300",
    "max_rows_per_unit=3",
    "method=noised_log, bias_correction=true",
    "confidence=1e-300",
];
const SETS: [&str; 15] = [
    "SET datafusion.execution.batch_size = 1",
    "SET datafusion.execution.perfect_hash_join_min_key_density = 0",
    "SET datafusion.execution.batch_size = 3",
    "SET datafusion.execution.target_partitions = 1",
    "SET datafusion.execution.target_partitions = 7",
    "SET datafusion.execution.collect_statistics = false",
    "SET datafusion.execution.skip_partial_aggregation_probe_rows_threshold = 1",
    "SET datafusion.optimizer.prefer_hash_join = false",
    "SET dp.confidence = 0.9",
    "SET dp.max_rows_per_unit = 4",
    "SET dp.max_groups_per_unit = 3",
    "SET dp.mechanism = 'gaussian'",
    "SET dp.delta = 1e-9",
    "SET dp.ci_method = 'bootstrap'",
    "SET dp.selection_epsilon = 1e-300",
];

pub struct Generator {
    rng: Rng,
    /// The fuzz grammar's functions ([`Generator::fuzz`]); `None`: the original grammar, whose
    /// programs for a seed stay what they were.
    catalogue: Option<Arc<grammar::Catalogue>>,
    /// The fuzz grammar is drawing work meant to be costly (the largest sizes).
    heavy: bool,
}

impl Generator {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng(seed),
            catalogue: None,
            heavy: false,
        }
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.rng.below(xs.len())]
    }

    fn op(&mut self, ops: &[&'static str]) -> &'static str {
        ops[self.rng.below(ops.len())]
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.chance(p)
    }

    fn lit(&mut self, ty: Ty) -> Expr {
        let l = match ty {
            Ty::Int => self
                .pick(&[
                    "0".to_string(),
                    "1".to_string(),
                    "2".to_string(),
                    TARGET.to_string(),
                    EXTREME.to_string(),
                    "-1".to_string(),
                    "9223372036854775807".to_string(),
                    "NULL".to_string(),
                ])
                .clone(),
            Ty::Num => self
                .pick(&["0.5", "1e300", "-2.5", "1e-300", "'NaN'::DOUBLE", "3.0"])
                .to_string(),
            Ty::Str => self
                .pick(&["'a'", "'north'", "'zz_far'", "''", "'x'", "'%'", "'b'"])
                .to_string(),
            Ty::Bool => self.pick(&["true", "false", "NULL"]).to_string(),
            Ty::Date => self
                .pick(&[
                    "DATE '2021-06-01'",
                    "DATE '9999-12-31'",
                    "DATE '0001-01-01'",
                    "CAST(NULL AS DATE)",
                ])
                .to_string(),
            other => return self.constructed_lit(other),
        };
        Expr::Lit(l)
    }

    fn col(&mut self, src: &Source, ty: Ty) -> Option<Expr> {
        let matching: Vec<&(String, Ty)> = src.cols.iter().filter(|(_, t)| *t == ty).collect();
        if matching.is_empty() {
            None
        } else {
            Some(Expr::Col(self.pick(&matching).0.clone()))
        }
    }

    fn leaf(&mut self, src: &Source, ty: Ty) -> Expr {
        if self.chance(0.7) {
            if let Some(c) = self.col(src, ty) {
                return c;
            }
        }
        self.lit(ty)
    }

    /// `CASE WHEN unit = K THEN a ELSE b END`: an expression that singles out one person.
    fn targeted(&mut self, src: &Source, ty: Ty, depth: u32) -> Expr {
        let unit = src
            .unit
            .clone()
            .or_else(|| {
                src.cols
                    .iter()
                    .find(|(_, t)| *t == Ty::Int)
                    .map(|c| c.0.clone())
            })
            .unwrap_or_else(|| "1".into());
        let k = if self.chance(0.5) { TARGET } else { EXTREME };
        Expr::Case(
            Box::new(Expr::Bin(
                Box::new(Expr::Col(unit)),
                "=",
                Box::new(Expr::Lit(k.to_string())),
            )),
            Box::new(self.expr(src, ty, depth)),
            Box::new(self.expr(src, ty, depth)),
        )
    }

    fn expr(&mut self, src: &Source, ty: Ty, depth: u32) -> Expr {
        // The fuzz grammar's calls and gates (no draw without a catalogue).
        if let Some(e) = self.fuzz_expr(src, ty, depth) {
            return e;
        }
        if depth == 0 || self.chance(0.35) {
            return self.leaf(src, ty);
        }
        let d = depth - 1;
        if self.chance(0.12) {
            return self.targeted(src, ty, d);
        }
        let f = |name: &str, args: Vec<Expr>| Expr::Func(name.to_string(), args);
        match ty {
            Ty::Int => match self.rng.below(9) {
                0 => Expr::Bin(
                    Box::new(self.expr(src, Ty::Int, d)),
                    self.op(&["+", "-", "*", "/", "%"]),
                    Box::new(self.expr(src, Ty::Int, d)),
                ),
                1 => f("length", vec![self.expr(src, Ty::Str, d)]),
                2 => f("abs", vec![self.expr(src, Ty::Int, d)]),
                3 => Expr::Cast(Box::new(self.expr(src, Ty::Str, d)), "BIGINT"),
                4 => Expr::Cast(Box::new(self.expr(src, Ty::Num, d)), "BIGINT"),
                5 => f(
                    "strpos",
                    vec![self.expr(src, Ty::Str, d), self.lit(Ty::Str)],
                ),
                6 => Expr::Cast(Box::new(self.expr(src, Ty::Date, d)), "INT"),
                7 => f("ascii", vec![self.expr(src, Ty::Str, d)]),
                _ => Expr::Cast(Box::new(self.expr(src, Ty::Bool, d)), "INT"),
            },
            Ty::Num => match self.rng.below(5) {
                0 => Expr::Bin(
                    Box::new(self.expr(src, Ty::Num, d)),
                    self.op(&["+", "*", "/"]),
                    Box::new(self.expr(src, Ty::Num, d)),
                ),
                1 => Expr::Cast(Box::new(self.expr(src, Ty::Int, d)), "DOUBLE"),
                2 => f("sqrt", vec![f("abs", vec![self.expr(src, Ty::Num, d)])]),
                3 => f("power", vec![self.expr(src, Ty::Num, d), self.lit(Ty::Num)]),
                _ => f("ln", vec![self.expr(src, Ty::Num, d)]),
            },
            Ty::Str => match self.rng.below(9) {
                0 => f("upper", vec![self.expr(src, Ty::Str, d)]),
                1 => f(
                    "substr",
                    vec![
                        self.expr(src, Ty::Str, d),
                        Expr::Lit("1".into()),
                        Expr::Lit("3".into()),
                    ],
                ),
                2 => f(
                    "lpad",
                    vec![
                        self.expr(src, Ty::Str, d),
                        Expr::Lit("5".into()),
                        Expr::Lit("'*'".into()),
                    ],
                ),
                3 => Expr::Bin(
                    Box::new(self.expr(src, Ty::Str, d)),
                    "||",
                    Box::new(self.expr(src, Ty::Str, d)),
                ),
                4 => Expr::Cast(Box::new(self.expr(src, Ty::Int, d)), "VARCHAR"),
                5 => f(
                    "replace",
                    vec![
                        self.expr(src, Ty::Str, d),
                        self.lit(Ty::Str),
                        self.lit(Ty::Str),
                    ],
                ),
                6 => f("reverse", vec![self.expr(src, Ty::Str, d)]),
                7 => Expr::Cast(Box::new(self.expr(src, Ty::Date, d)), "VARCHAR"),
                _ => f(
                    "coalesce",
                    vec![self.expr(src, Ty::Str, d), self.lit(Ty::Str)],
                ),
            },
            Ty::Bool => match self.rng.below(10) {
                0 | 1 => {
                    let t = *self.pick(&[Ty::Int, Ty::Str, Ty::Num, Ty::Date]);
                    Expr::Bin(
                        Box::new(self.expr(src, t, d)),
                        self.op(&["=", "<", ">=", "<>"]),
                        Box::new(self.expr(src, t, d)),
                    )
                }
                2 => Expr::Bin(
                    Box::new(self.expr(src, Ty::Bool, d)),
                    self.op(&["AND", "OR"]),
                    Box::new(self.expr(src, Ty::Bool, d)),
                ),
                3 => Expr::Not(Box::new(self.expr(src, Ty::Bool, d))),
                4 => {
                    let t = *self.pick(&[Ty::Int, Ty::Str, Ty::Num, Ty::Date, Ty::Bool]);
                    Expr::IsNull(Box::new(self.expr(src, t, d)))
                }
                5 => Expr::Bin(
                    Box::new(self.expr(src, Ty::Str, d)),
                    "LIKE",
                    Box::new(self.lit(Ty::Str)),
                ),
                6 => f(
                    "regexp_like",
                    vec![
                        self.expr(src, Ty::Str, d),
                        Expr::Lit(self.pick(&["'n.*'", "'(a'", "'^z'"]).to_string()),
                    ],
                ),
                7 => f(
                    "starts_with",
                    vec![self.expr(src, Ty::Str, d), self.lit(Ty::Str)],
                ),
                8 => {
                    // unit <> K OR cond: the condition only runs on the targeted person.
                    let unit = src.unit.clone().unwrap_or_else(|| "1".into());
                    Expr::Bin(
                        Box::new(Expr::Bin(
                            Box::new(Expr::Col(unit)),
                            "<>",
                            Box::new(Expr::Lit(TARGET.to_string())),
                        )),
                        "OR",
                        Box::new(self.expr(src, Ty::Bool, d)),
                    )
                }
                9 if self.chance(0.3) => {
                    // The internal keyed hash (contribution bounding's) on a column.
                    let unit = src.unit.clone().unwrap_or_else(|| "1".into());
                    Expr::Bin(
                        Box::new(Expr::Bin(
                            Box::new(f(
                                "dp_keyed_hash",
                                vec![Expr::Lit("arrow_cast(7, 'UInt64')".into()), Expr::Col(unit)],
                            )),
                            "%",
                            Box::new(Expr::Lit("arrow_cast(2, 'UInt64')".into())),
                        )),
                        "=",
                        Box::new(Expr::Lit("arrow_cast(0, 'UInt64')".into())),
                    )
                }
                _ => Expr::Cast(Box::new(self.expr(src, Ty::Str, d)), "BOOLEAN"),
            },
            Ty::Date => match self.rng.below(3) {
                0 => Expr::Cast(Box::new(self.expr(src, Ty::Str, d)), "DATE"),
                1 => f(
                    "coalesce",
                    vec![self.expr(src, Ty::Date, d), self.lit(Ty::Date)],
                ),
                _ => self.leaf(src, Ty::Date),
            },
            other => self.constructed(src, other, d),
        }
    }

    fn any_ty(&mut self) -> Ty {
        *self.pick(&[Ty::Int, Ty::Num, Ty::Str, Ty::Bool, Ty::Date])
    }

    fn visits_select(&mut self, prefix_filter: bool) -> Select {
        let base = Source {
            from: From::Table("visits".into()),
            cols: cols("", &VISITS),
            unit: Some("patient_id".into()),
        };
        let mut items: Vec<(Expr, Option<String>)> = ["patient_id", "region", "outcome", "exposed"]
            .iter()
            .map(|c| (Expr::Col(c.to_string()), None))
            .collect();
        if self.chance(0.5) {
            let ty = self.any_ty();
            items.push((self.expr(&base, ty, 2), Some("w".into())));
        }
        Select {
            items,
            from: base.from.clone(),
            filter: if prefix_filter && self.chance(0.5) {
                Some(self.expr(&base, Ty::Bool, 2))
            } else {
                None
            },
            group_by: vec![],
            order_by: vec![],
            limit: None,
        }
    }

    /// A source over protected rows.
    fn protected_source(&mut self) -> Source {
        let sub_cols = |alias: &str, extra: Option<(&str, Ty)>| {
            let mut c = vec![
                (format!("{alias}.patient_id"), Ty::Int),
                (format!("{alias}.region"), Ty::Str),
                (format!("{alias}.outcome"), Ty::Bool),
                (format!("{alias}.exposed"), Ty::Bool),
            ];
            if let Some((name, ty)) = extra {
                c.push((format!("{alias}.{name}"), ty));
            }
            c
        };
        match self.rng.below(12) {
            0..=3 => Source {
                from: From::Table("visits".into()),
                cols: cols("", &VISITS),
                unit: Some("patient_id".into()),
            },
            4 | 5 => Source {
                from: From::Table("t".into()),
                cols: cols("", &T),
                unit: Some("id".into()),
            },
            6 => {
                let mut c = cols("visits", &VISITS);
                c.extend(cols("lookup", &[("k", Ty::Str), ("v", Ty::Int)]));
                Source {
                    from: From::Join(
                        Box::new(From::Table("visits".into())),
                        "lookup".into(),
                        Some(Expr::Bin(
                            Box::new(Expr::Col("visits.tags".into())),
                            "=",
                            Box::new(Expr::Col("lookup.k".into())),
                        )),
                    ),
                    cols: c,
                    unit: Some("visits.patient_id".into()),
                }
            }
            7 => {
                let n = *self.pick(&[2, 10, 1000]);
                let table = if self.chance(0.5) { "visits" } else { "t" };
                let (c, unit) = if table == "visits" {
                    (cols("visits", &VISITS), "visits.patient_id")
                } else {
                    (cols("t", &T), "t.id")
                };
                let series = if self.chance(0.5) {
                    format!("generate_series(1, {n})")
                } else {
                    format!("range({n})")
                };
                Source {
                    from: From::Join(Box::new(From::Table(table.into())), series, None),
                    cols: c,
                    unit: Some(unit.into()),
                }
            }
            8 => Source {
                from: From::Join(
                    Box::new(From::Table("visits AS a".into())),
                    "visits AS b".into(),
                    Some(Expr::Bin(
                        Box::new(Expr::Col("a.patient_id".into())),
                        "=",
                        Box::new(Expr::Col("b.patient_id".into())),
                    )),
                ),
                cols: cols("a", &VISITS),
                unit: Some("a.patient_id".into()),
            },
            9 => {
                let s = self.visits_select(true);
                let w = s.items.get(4).is_some();
                let ty = if w { Some(("w", Ty::Str)) } else { None };
                let mut c = sub_cols("s", None);
                if ty.is_some() {
                    // The type of `w` is not tracked: use it only in IS NULL tests.
                    c.push(("(s.w IS NULL)".into(), Ty::Bool));
                }
                Source {
                    from: From::Sub(Box::new(s), "s".into()),
                    cols: c,
                    unit: Some("s.patient_id".into()),
                }
            }
            10 => {
                let mut a = self.visits_select(false);
                let mut b = self.visits_select(true);
                a.items.truncate(4);
                b.items.truncate(4);
                Source {
                    from: From::Union(Box::new(a), Box::new(b), "u".into()),
                    cols: sub_cols("u", None),
                    unit: Some("u.patient_id".into()),
                }
            }
            _ => {
                let over = self
                    .pick(&[
                        "PARTITION BY patient_id ORDER BY visit_date",
                        "PARTITION BY patient_id",
                        "ORDER BY visit_date",
                        "",
                    ])
                    .to_string();
                let f = self
                    .pick(&["row_number", "count", "rank", "dp_unit_sample"])
                    .to_string();
                let args = match f.as_str() {
                    "count" => vec![Expr::Col("region".into())],
                    "dp_unit_sample" => {
                        let first = self.pick(&["patient_id", "region"]).to_string();
                        let mut args = vec![Expr::Col(first)];
                        for _ in 0..4 {
                            let n = self.pick(&["0", "1", "2"]);
                            args.push(Expr::Lit(format!("arrow_cast({n}, 'UInt64')")));
                        }
                        args
                    }
                    _ => vec![],
                };
                let mut s = self.visits_select(false);
                s.items.truncate(4);
                s.items
                    .push((Expr::Window(f, args, over), Some("r".into())));
                Source {
                    from: From::Sub(Box::new(s), "w".into()),
                    cols: sub_cols("w", Some(("r", Ty::Int))),
                    unit: Some("w.patient_id".into()),
                }
            }
        }
    }

    fn dp_call(&mut self, src: &Source) -> Expr {
        let eps = if self.catalogue.is_some() {
            // The fuzz grammar: mostly valid, so that the program reaches execution.
            self.eps()
        } else {
            Expr::Lit(self.pick(&EPSILONS).to_string())
        };
        if self.chance(0.25) {
            return self.clamped_call(src, eps);
        }
        let mut args = match self.rng.below(7) {
            0..=2 => {
                let ty = self.any_ty();
                vec![self.expr(src, ty, 2), eps]
            }
            _ => vec![
                self.expr(src, Ty::Bool, 1),
                self.expr(src, Ty::Bool, 1),
                eps,
            ],
        };
        let name = if args.len() == 2 {
            "dp_count".to_string()
        } else {
            self.pick(dp_ratios()).to_string()
        };
        // (The fuzz grammar passes options less often: most do not apply to every call.)
        if self.chance(0.3) && (self.catalogue.is_none() || self.chance(0.3)) {
            args.push(Expr::Lit(format!("'{}'", self.pick(&OPTIONS))));
        }
        Expr::Func(name, args)
    }

    /// `dp_sum`, `dp_avg` or `dp_quantile` of a number, with declared bounds (and `q`) from
    /// the edges an analyst would try: reversed, equal, tiny, as wide as a DOUBLE.
    fn clamped_call(&mut self, src: &Source, eps: Expr) -> Expr {
        let value = self.expr(src, Ty::Num, 2);
        let (lower, upper) = *self.pick(&BOUNDS);
        let bounds = [Expr::Lit(lower.into()), Expr::Lit(upper.into())];
        let name = *self.pick(&["dp_sum", "dp_avg", "dp_quantile"]);
        let mut args = vec![value];
        if name == "dp_quantile" {
            args.push(Expr::Lit(self.pick(&QUANTILES).to_string()));
        }
        args.extend(bounds);
        args.push(eps);
        if self.chance(0.3) {
            args.push(Expr::Lit(format!("'{}'", self.pick(&OPTIONS[..1]))));
        }
        Expr::Func(name.to_string(), args)
    }

    /// A DP query over protected rows.
    fn dp_select(&mut self) -> Select {
        let src = self.protected_source();
        let mut items = Vec::new();
        let mut group_by = Vec::new();
        if self.chance(0.4) {
            let key = if self.chance(0.7) {
                let strs: Vec<&(String, Ty)> = src
                    .cols
                    .iter()
                    .filter(|(c, t)| matches!(t, Ty::Str | Ty::Bool) && !c.contains(' '))
                    .collect();
                if strs.is_empty() {
                    self.lit(Ty::Str)
                } else {
                    Expr::Col(self.pick(&strs).0.clone())
                }
            } else {
                let ty = self.any_ty();
                self.expr(&src, ty, 1)
            };
            items.push((key.clone(), None));
            group_by.push(key);
        }
        for _ in 0..1 + self.rng.below(2) {
            items.push((self.dp_call(&src), None));
        }
        let filter = if self.chance(0.5) {
            Some(self.expr(&src, Ty::Bool, 3))
        } else {
            None
        };
        let mut order_by = Vec::new();
        if self.chance(0.4) {
            order_by.push((self.rng.below(items.len()), self.chance(0.5)));
        }
        Select {
            items,
            from: src.from,
            filter,
            group_by,
            order_by,
            limit: if self.chance(0.15) {
                Some(*self.pick(&[0, 1, 3]))
            } else {
                None
            },
        }
    }

    /// A query over public tables and table functions only (answered exactly).
    fn public_select(&mut self) -> Select {
        let (from, c) = match self.rng.below(5) {
            4 => (
                From::Table("dp_budget()".into()),
                vec![
                    ("entry".to_string(), Ty::Str),
                    ("epsilon".to_string(), Ty::Num),
                    ("delta".to_string(), Ty::Num),
                ],
            ),
            0 => (
                From::Table("lookup".into()),
                vec![("k".to_string(), Ty::Str), ("v".to_string(), Ty::Int)],
            ),
            1 => (
                From::Table("regions".into()),
                vec![("region".to_string(), Ty::Str)],
            ),
            2 => (
                From::Table(format!("range({})", self.pick(&[0, 3, 100]))),
                vec![("value".to_string(), Ty::Int)],
            ),
            _ => (
                From::Join(
                    Box::new(From::Table("lookup".into())),
                    "regions".into(),
                    None,
                ),
                vec![
                    ("k".to_string(), Ty::Str),
                    ("v".to_string(), Ty::Int),
                    ("region".to_string(), Ty::Str),
                ],
            ),
        };
        let src = Source {
            from,
            cols: c,
            unit: None,
        };
        let mut items = Vec::new();
        for _ in 0..1 + self.rng.below(3) {
            let ty = self.any_ty();
            items.push((self.expr(&src, ty, 2), None));
        }
        if self.chance(0.3) {
            let col = src.cols[0].0.clone();
            let f = self.pick(&["row_number", "rank"]).to_string();
            items.push((
                Expr::Window(f, vec![], format!("ORDER BY {col}")),
                Some("r".into()),
            ));
        }
        let n = items.len();
        let filter = if self.chance(0.4) {
            Some(self.expr(&src, Ty::Bool, 2))
        } else {
            None
        };
        Select {
            items,
            from: src.from,
            filter,
            group_by: vec![],
            order_by: if self.chance(0.5) {
                vec![(self.rng.below(n), self.chance(0.5))]
            } else {
                vec![]
            },
            limit: if self.chance(0.2) { Some(2) } else { None },
        }
    }

    /// A query that reads protected rows without a DP aggregate (refused).
    fn direct_select(&mut self) -> Select {
        let src = self.protected_source();
        let ty = self.any_ty();
        let item = if self.chance(0.3) {
            Expr::Func(
                self.pick(&["count", "max", "sum"]).to_string(),
                vec![self.leaf(&src, Ty::Int)],
            )
        } else {
            self.expr(&src, ty, 2)
        };
        let filter = if self.chance(0.5) {
            Some(self.expr(&src, Ty::Bool, 2))
        } else {
            None
        };
        Select {
            items: vec![(item, None)],
            from: src.from,
            filter,
            group_by: vec![],
            order_by: vec![],
            limit: None,
        }
    }

    pub fn program(&mut self) -> Gen {
        if self.catalogue.is_some() {
            return self.fuzz_program();
        }
        self.classic_program()
    }

    /// A program of the original grammar.
    fn classic_program(&mut self) -> Gen {
        let select = match self.rng.below(20) {
            0..=12 => self.dp_select(),
            13 | 14 => {
                // A DP answer used as a subquery.
                let mut inner = self.dp_select();
                inner.order_by.clear();
                inner.limit = None;
                let n = inner.items.len();
                inner.items[n - 1].1 = Some("n".into());
                Select {
                    items: vec![(
                        Expr::Bin(
                            Box::new(Expr::Col("n".into())),
                            "*",
                            Box::new(Expr::Lit("2".into())),
                        ),
                        None,
                    )],
                    from: From::Sub(Box::new(inner), "q".into()),
                    filter: None,
                    group_by: vec![],
                    order_by: vec![],
                    limit: None,
                }
            }
            15..=17 => self.public_select(),
            _ => self.direct_select(),
        };
        let mut sets = Vec::new();
        while sets.len() < 2 && self.chance(0.25) {
            sets.push(self.pick(&SETS).to_string());
        }
        Gen {
            sets,
            select,
            explain: self.chance(0.08),
            chain: None,
            params: vec![],
        }
    }
}

/// The DP aggregates over a 2x2 table.
fn dp_ratios() -> &'static [&'static str] {
    &super::observe::DP_RATIOS
}
