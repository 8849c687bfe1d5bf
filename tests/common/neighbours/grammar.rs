//! The fuzz grammar (issue 41): programs drawn from everything an analyst can reach in a
//! locked session, in the spirit of SQLancer's and sqlsmith's grammar-driven generation and of
//! DataFusion's own fuzz cases (`datafusion/core/tests/fuzz_cases`), which run random inputs
//! through an operator two ways and compare. Here the two ways are neighbouring tables, and
//! what is compared is everything the analyst sees.
//!
//! - **Every function** a locked session resolves (scalar, aggregate, window, table), with
//!   arguments of each type it accepts: the [`Catalogue`] is probed once at start-up, by asking
//!   DataFusion for the result type of each function over candidate argument lists drawn from a
//!   pool of typed expressions (columns and literals of each [`Ty`]). Nothing is executed: the
//!   probe is the planner's own signature check (`ExprSchemable::to_field`), microseconds a
//!   candidate, so it is not cached.
//! - **`arrow_cast` to every type family** ([`CAST_TYPES`]): fixed-size lists and binaries
//!   small and huge, nested, dictionaries, run-end encoded, decimals at their limits, structs,
//!   maps, unions, intervals, durations, timestamps with time zones, views.
//! - **Gates on one person's rows**: `CASE WHEN unit = K THEN ... END`, `unit <> K OR ...`,
//!   `unit = K AND ...`, `COALESCE(CASE ...)`, around work made large on purpose (long strings,
//!   long lists: [`Generator::amplified`]), so that the work runs on one person's rows only.
//! - **Chains of CTEs** ([`Chain`]) that the optimiser inlines into one deep expression.
//! - **Joins of protected with protected relations** (one side filtered to one person, the other
//!   computing something costly) and with public ones.
//! - **Per-unit aggregates and windows** from the registry, feeding a DP aggregate.
//! - **Prepared statements**: the person's id as a parameter.
//!
//! The classic grammar of [`super`] still makes a quarter of the programs.

use super::{cols, Expr, From, Gen, Generator, Select, Source, Ty, EPSILONS, T, TARGET, VISITS};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::TableFunctionArgs;
use datafusion::common::DFSchema;
use datafusion::error::Result;
use datafusion::logical_expr::expr::{AggregateFunction, ScalarFunction, WindowFunction};
use datafusion::logical_expr::{ExprSchemable, WindowFunctionDefinition};
use datafusion::prelude::SessionContext;
use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

/// `arrow_cast` targets: every type family, at small sizes and at their limits. Those Arrow's
/// parser does not read are dropped when the catalogue is built (and counted).
pub const CAST_TYPES: &[&str] = &[
    "Null",
    "Boolean",
    "Int8",
    "Int16",
    "Int32",
    "Int64",
    "UInt8",
    "UInt16",
    "UInt32",
    "UInt64",
    "Float16",
    "Float32",
    "Float64",
    "Utf8",
    "LargeUtf8",
    "Utf8View",
    "Binary",
    "LargeBinary",
    "BinaryView",
    "Date32",
    "Date64",
    "Time32(Second)",
    "Time64(Nanosecond)",
    "Duration(Second)",
    "Duration(Nanosecond)",
    "Timestamp(Second, None)",
    "Timestamp(Nanosecond, None)",
    "Timestamp(Millisecond, Some(\"+14:00\"))",
    "Timestamp(Microsecond, Some(\"UTC\"))",
    "Timestamp(Nanosecond, Some(\"America/New_York\"))",
    "Interval(YearMonth)",
    "Interval(DayTime)",
    "Interval(MonthDayNano)",
    // Decimals at their precision and scale limits.
    "Decimal32(9, 0)",
    "Decimal32(9, 9)",
    "Decimal64(18, 18)",
    "Decimal128(1, 0)",
    "Decimal128(38, 0)",
    "Decimal128(38, 38)",
    "Decimal128(38, -38)",
    "Decimal256(1, 0)",
    "Decimal256(76, 0)",
    "Decimal256(76, 76)",
    // Fixed sizes: a type parameter, allocated per row whatever the data (10^7 elements: 80
    // MB a row, enough to show, cheap enough to repeat; 2^31 - 1: past any memory).
    "FixedSizeBinary(1)",
    "FixedSizeBinary(16)",
    "FixedSizeBinary(65536)",
    "FixedSizeBinary(10000000)",
    "FixedSizeBinary(2147483647)",
    "FixedSizeList(1, Int64)",
    "FixedSizeList(3, Utf8)",
    "FixedSizeList(100000, Int64)",
    "FixedSizeList(10000000, Int64)",
    "FixedSizeList(2147483647, Int64)",
    "FixedSizeList(1000, FixedSizeList(1000, Int64))",
    "FixedSizeList(2, FixedSizeBinary(1000000))",
    "FixedSizeList(65536, FixedSizeList(65536, Int8))",
    "List(FixedSizeList(10000000, Int64))",
    "Struct(\"a\": FixedSizeList(100000, Int64))",
    "Dictionary(Int8, FixedSizeList(100000, Int64))",
    // Nested.
    "List(Int64)",
    "LargeList(Int64)",
    "List(Utf8)",
    "ListView(Int64)",
    "LargeListView(Utf8)",
    "List(List(Int64))",
    "List(Struct(\"a\": Int64))",
    "Struct(\"a\": Int64, \"b\": Utf8)",
    "Struct()",
    "Map(\"entries\": Struct(\"key\": Utf8, \"value\": Int64), unsorted)",
    "Union(Sparse, 0: (\"a\": Int64), 1: (\"b\": Utf8))",
    // Encodings.
    "Dictionary(Int8, Utf8)",
    "Dictionary(Int32, Int64)",
    "Dictionary(UInt16, LargeUtf8)",
    "RunEndEncoded(\"run_ends\": Int32, \"values\": Utf8)",
    "RunEndEncoded(\"run_ends\": Int16, \"values\": Int64)",
];

/// What kind of function a name resolves to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Scalar,
    Aggregate,
    Window,
    Table,
}

/// One argument of a signature: its type, and whether it must be a literal (a type name, a
/// pattern, a count some functions read at planning).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Arg {
    pub ty: Ty,
    pub literal: bool,
}

/// A function and the argument lists it was seen to accept, with their result types.
#[derive(Clone, Debug)]
pub struct Function {
    pub name: String,
    pub kind: Kind,
    pub sigs: Vec<(Vec<Arg>, Ty)>,
}

/// The functions of a locked session, with the signatures found by probing.
#[derive(Debug, Default)]
pub struct Catalogue {
    pub functions: Vec<Function>,
    /// Names a locked session resolves, per kind.
    pub names: BTreeMap<String, usize>,
    /// Candidate argument lists tried.
    pub tried: usize,
    /// `arrow_cast` targets Arrow's parser reads.
    pub types: Vec<&'static str>,
    /// Scalar functions by result type (indices into `functions`).
    returning: BTreeMap<Ty, Vec<usize>>,
}

/// The probe's pool: (SQL over a table `p(i BIGINT, f DOUBLE, s VARCHAR, b BOOLEAN, d DATE)`,
/// type, literal).
const POOL: &[(&str, Ty, bool)] = &[
    ("i", Ty::Int, false),
    ("f", Ty::Num, false),
    ("s", Ty::Str, false),
    ("b", Ty::Bool, false),
    ("d", Ty::Date, false),
    ("make_array(i, 2)", Ty::List, false),
    ("named_struct('a', i)", Ty::Struct, false),
    ("CAST(s AS BYTEA)", Ty::Bin, false),
    ("CAST(d AS TIMESTAMP)", Ty::Ts, false),
    ("CAST(i AS DECIMAL(20, 2))", Ty::Dec, false),
    ("2", Ty::Int, true),
    ("'a'", Ty::Str, true),
    ("INTERVAL '1 day'", Ty::Ival, true),
    ("NULL", Ty::Null, true),
];
/// Pool items used beyond one argument (not the untyped NULL).
const WIDE: usize = 13;
/// Signatures kept per function.
const MAX_SIGS: usize = 12;

/// The fuzz grammar's type of an Arrow type.
pub fn ty_of(t: &DataType) -> Ty {
    use DataType::*;
    match t {
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 => Ty::Int,
        Float16 | Float32 | Float64 => Ty::Num,
        Utf8 | LargeUtf8 | Utf8View => Ty::Str,
        Boolean => Ty::Bool,
        Date32 | Date64 => Ty::Date,
        List(_) | LargeList(_) | FixedSizeList(_, _) | ListView(_) | LargeListView(_) => Ty::List,
        Struct(_) => Ty::Struct,
        Binary | LargeBinary | BinaryView | FixedSizeBinary(_) => Ty::Bin,
        Timestamp(_, _) => Ty::Ts,
        Decimal32(_, _) | Decimal64(_, _) | Decimal128(_, _) | Decimal256(_, _) => Ty::Dec,
        Interval(_) => Ty::Ival,
        Null => Ty::Null,
        _ => Ty::Other,
    }
}

impl Catalogue {
    /// Probes every function `ctx` (a locked session) resolves.
    pub fn probe(ctx: &SessionContext) -> Result<Self> {
        let schema = Schema::new(vec![
            Field::new("i", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Boolean, true),
            Field::new("d", DataType::Date32, true),
        ]);
        let df_schema = DFSchema::try_from_qualified_schema("p", &schema)?;
        let pool: Vec<datafusion::prelude::Expr> = POOL
            .iter()
            .map(|(sql, _, _)| ctx.parse_sql_expr(sql, &df_schema))
            .collect::<Result<_>>()?;
        let state = ctx.state();
        let mut catalogue = Catalogue {
            types: CAST_TYPES
                .iter()
                .copied()
                .filter(|t| DataType::from_str(t).is_ok())
                .collect(),
            ..Default::default()
        };
        let result = |e: datafusion::prelude::Expr| -> Option<Ty> {
            e.to_field(&df_schema)
                .ok()
                .map(|(_, f)| ty_of(f.data_type()))
        };
        // Every name resolves, aliases included; each function is probed once, under its
        // own name.
        let mut seen = std::collections::BTreeSet::new();
        let mut scalars: Vec<_> = state.scalar_functions().iter().collect();
        scalars.sort_by(|a, b| a.0.cmp(b.0));
        *catalogue.names.entry("scalar".into()).or_default() = scalars.len();
        for (_, udf) in scalars {
            if !seen.insert(("s", udf.name().to_string())) {
                continue;
            }
            let udf = Arc::clone(udf);
            let f = catalogue.probe_one(udf.name(), Kind::Scalar, &pool, |args| {
                result(datafusion::prelude::Expr::ScalarFunction(
                    ScalarFunction::new_udf(Arc::clone(&udf), args),
                ))
            });
            catalogue.functions.push(f);
        }
        let mut aggregates: Vec<_> = state.aggregate_functions().iter().collect();
        aggregates.sort_by(|a, b| a.0.cmp(b.0));
        *catalogue.names.entry("aggregate".into()).or_default() = aggregates.len();
        for (_, udaf) in aggregates {
            // The DP aggregates are drawn with their own arguments (super::Generator::dp_call).
            if udaf.name().starts_with("dp_") || !seen.insert(("a", udaf.name().to_string())) {
                continue;
            }
            let udaf = Arc::clone(udaf);
            let f = catalogue.probe_one(udaf.name(), Kind::Aggregate, &pool, |args| {
                result(datafusion::prelude::Expr::AggregateFunction(
                    AggregateFunction::new_udf(Arc::clone(&udaf), args, false, None, vec![], None),
                ))
            });
            catalogue.functions.push(f);
        }
        let mut windows: Vec<_> = state.window_functions().iter().collect();
        windows.sort_by(|a, b| a.0.cmp(b.0));
        *catalogue.names.entry("window".into()).or_default() = windows.len();
        for (_, udwf) in windows {
            if !seen.insert(("w", udwf.name().to_string())) {
                continue;
            }
            let udwf = Arc::clone(udwf);
            let f = catalogue.probe_one(udwf.name(), Kind::Window, &pool, |args| {
                result(datafusion::prelude::Expr::WindowFunction(Box::new(
                    WindowFunction::new(
                        WindowFunctionDefinition::WindowUDF(Arc::clone(&udwf)),
                        args,
                    ),
                )))
            });
            catalogue.functions.push(f);
        }
        let mut tables: Vec<_> = state.table_functions().iter().collect();
        tables.sort_by(|a, b| a.0.cmp(b.0));
        *catalogue.names.entry("table".into()).or_default() = tables.len();
        for (name, tf) in tables {
            let tf = Arc::clone(tf);
            // Table functions are called with literals only.
            let literals: Vec<datafusion::prelude::Expr> = POOL
                .iter()
                .zip(&pool)
                .filter(|((_, _, lit), _)| *lit)
                .map(|(_, e)| e.clone())
                .collect();
            let kinds: Vec<(&str, Ty, bool)> =
                POOL.iter().copied().filter(|(_, _, lit)| *lit).collect();
            let mut sigs = Vec::new();
            for arity in 0..=3usize {
                for combo in 0..literals.len().pow(arity as u32) {
                    let idx: Vec<usize> = (0..arity)
                        .map(|k| combo / literals.len().pow(k as u32) % literals.len())
                        .collect();
                    catalogue.tried += 1;
                    let args: Vec<_> = idx.iter().map(|&k| literals[k].clone()).collect();
                    let call = TableFunctionArgs::new(&args, &state);
                    if tf.create_table_provider_with_args(call).is_ok() {
                        sigs.push((
                            idx.iter()
                                .map(|&k| Arg {
                                    ty: kinds[k].1,
                                    literal: true,
                                })
                                .collect(),
                            Ty::Other,
                        ));
                    }
                }
            }
            sigs.truncate(MAX_SIGS);
            catalogue.functions.push(Function {
                name: name.clone(),
                kind: Kind::Table,
                sigs,
            });
        }
        for (i, f) in catalogue.functions.iter().enumerate() {
            if f.kind != Kind::Scalar {
                continue;
            }
            let mut rets: Vec<Ty> = f.sigs.iter().map(|s| s.1).collect();
            rets.sort();
            rets.dedup();
            for r in rets {
                catalogue.returning.entry(r).or_default().push(i);
            }
        }
        Ok(catalogue)
    }

    /// The argument lists `f` accepts among the candidates: every list of up to two pool
    /// items, and lists of three and four of a few shapes or extending accepted ones (the
    /// planner's own signature check decides).
    fn probe_one(
        &mut self,
        name: &str,
        kind: Kind,
        pool: &[datafusion::prelude::Expr],
        plan: impl Fn(Vec<datafusion::prelude::Expr>) -> Option<Ty>,
    ) -> Function {
        let mut accepted: Vec<(Vec<usize>, Ty)> = Vec::new();
        let mut try_list = |idx: Vec<usize>, accepted: &mut Vec<(Vec<usize>, Ty)>| {
            if accepted.iter().any(|(a, _)| *a == idx) {
                return;
            }
            self.tried += 1;
            if let Some(ty) = plan(idx.iter().map(|&k| pool[k].clone()).collect()) {
                accepted.push((idx, ty));
            }
        };
        try_list(vec![], &mut accepted);
        for a in 0..POOL.len() {
            try_list(vec![a], &mut accepted);
        }
        for a in 0..WIDE {
            for b in 0..WIDE {
                try_list(vec![a, b], &mut accepted);
            }
        }
        // Longer lists: one type repeated, a first argument then another type repeated (an
        // array and its positions, a string and its replacements), two of one type then
        // another (a string, a delimiter, an index), and extensions of accepted shorter lists.
        for a in 0..WIDE {
            for b in 0..WIDE {
                try_list(vec![a, b, b], &mut accepted);
                try_list(vec![a, a, b], &mut accepted);
                try_list(vec![a, b, b, b], &mut accepted);
            }
        }
        for arity in 3..=4 {
            for a in 0..WIDE {
                try_list(vec![a; arity], &mut accepted);
            }
            let shorter: Vec<Vec<usize>> = accepted
                .iter()
                .filter(|(a, _)| a.len() == arity - 1)
                .map(|(a, _)| a.clone())
                .take(if arity == 3 { 6 } else { 3 })
                .collect();
            for s in shorter {
                for x in 0..WIDE {
                    let mut l = s.clone();
                    l.push(x);
                    try_list(l, &mut accepted);
                }
            }
        }
        // A literal where a column is accepted too adds nothing.
        let column_form = |k: usize| match POOL[k] {
            (_, Ty::Int, true) => 0,
            (_, Ty::Str, true) => 2,
            _ => k,
        };
        let all = accepted.clone();
        accepted.retain(|(idx, _)| {
            let general: Vec<usize> = idx.iter().map(|&k| column_form(k)).collect();
            general == *idx || !all.iter().any(|(a, _)| *a == general)
        });
        // Fewest literals and NULLs first, then the shortest.
        accepted.sort_by_key(|(idx, _)| {
            let special = idx.iter().filter(|&&k| POOL[k].2).count();
            (special, idx.len())
        });
        let sigs = accepted
            .into_iter()
            .take(MAX_SIGS)
            .map(|(idx, ty)| {
                (
                    idx.iter()
                        .map(|&k| Arg {
                            ty: POOL[k].1,
                            literal: POOL[k].2 && POOL[k].1 != Ty::Null,
                        })
                        .collect(),
                    ty,
                )
            })
            .collect();
        Function {
            name: name.to_string(),
            kind,
            sigs,
        }
    }

    /// Per kind: names resolved, functions probed, functions with an accepted signature.
    pub fn summary(&self) -> String {
        let kinds = [
            (Kind::Scalar, "scalar"),
            (Kind::Aggregate, "aggregate"),
            (Kind::Window, "window"),
            (Kind::Table, "table"),
        ];
        let mut parts = Vec::new();
        for (k, n) in kinds {
            let probed = self.functions.iter().filter(|f| f.kind == k).count();
            let typed = self
                .functions
                .iter()
                .filter(|f| f.kind == k && !f.sigs.is_empty())
                .count();
            parts.push(format!(
                "{n}: {} names, {probed} functions, {typed} with signatures",
                self.names.get(n).copied().unwrap_or(0)
            ));
        }
        format!(
            "{}; {} candidate argument lists tried; {} of {} cast targets parse",
            parts.join("; "),
            self.tried,
            self.types.len(),
            CAST_TYPES.len()
        )
    }

    /// Functions for which no candidate argument list planned.
    pub fn untyped(&self) -> Vec<&str> {
        self.functions
            .iter()
            .filter(|f| f.sigs.is_empty())
            .map(|f| f.name.as_str())
            .collect()
    }

    fn of_kind(&self, kind: Kind) -> Vec<usize> {
        self.functions
            .iter()
            .enumerate()
            .filter(|(_, f)| f.kind == kind && !f.sigs.is_empty())
            .map(|(i, _)| i)
            .collect()
    }
}

// ---- CTE chains ----

/// How each level of a [`Chain`] computes `x` from the level before.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// `x op operand op operand ...`: `terms` operands.
    Infix(&'static str, String),
    /// `f(f(... f(x, extra) ..., extra), extra)`: `terms` calls.
    Wrap(String, Vec<String>),
    /// `(x op x)`: the previous level twice (its size doubles if the optimiser inlines it).
    Twice(&'static str),
}

/// `WITH c1 AS (base), c2 AS (SELECT keep, step(x) AS x FROM c1), ..., chain AS (...)`: levels
/// that each stay within the statement's nesting limit, which the optimiser inlines into one
/// expression `levels * terms` deep.
#[derive(Clone, Debug, PartialEq)]
pub struct Chain {
    /// The first level: `keep` columns, then `x`.
    pub base: Select,
    pub keep: Vec<String>,
    pub step: Step,
    pub levels: usize,
    pub terms: usize,
}

impl Chain {
    fn name(&self, level: usize) -> String {
        if level == self.levels {
            "chain".into()
        } else {
            format!("c{level}")
        }
    }

    fn step_sql(&self) -> String {
        match &self.step {
            Step::Infix(op, operand) => {
                let mut s = String::from("x");
                for _ in 0..self.terms {
                    s.push_str(&format!(" {op} {operand}"));
                }
                s
            }
            Step::Wrap(f, extra) => {
                let tail: String = extra.iter().map(|e| format!(", {e}")).collect();
                let mut s = String::from("x");
                for _ in 0..self.terms {
                    s = format!("{f}({s}{tail})");
                }
                s
            }
            Step::Twice(op) => format!("(x {op} x)"),
        }
    }

    pub fn sql(&self) -> String {
        let mut parts = vec![format!("{} AS ({})", self.name(1), self.base.sql())];
        let step = self.step_sql();
        for level in 2..=self.levels {
            parts.push(format!(
                "{} AS (SELECT {}, {step} AS x FROM {})",
                self.name(level),
                self.keep.join(", "),
                self.name(level - 1)
            ));
        }
        format!("WITH {}", parts.join(", "))
    }

    pub fn shrinks(&self) -> Vec<Chain> {
        let mut out = Vec::new();
        let with = |f: &dyn Fn(&mut Chain)| {
            let mut c = self.clone();
            f(&mut c);
            c
        };
        if self.levels > 1 {
            out.push(with(&|c| c.levels = (c.levels / 2).max(1)));
            out.push(with(&|c| c.levels -= 1));
        }
        if self.terms > 1 {
            out.push(with(&|c| c.terms = (c.terms / 2).max(1)));
            out.push(with(&|c| c.terms -= 1));
        }
        for s in self.base.shrinks() {
            if s.items.len() == self.base.items.len() {
                out.push(with(&|c| c.base = s.clone()));
            }
        }
        out
    }
}

// ---- literals' rewriting (prepared statements) ----

impl Expr {
    fn walk_mut(&mut self, f: &mut dyn FnMut(&mut Expr)) {
        f(self);
        match self {
            Expr::Col(_) | Expr::Lit(_) => {}
            Expr::Bin(a, _, b) => {
                a.walk_mut(f);
                b.walk_mut(f);
            }
            Expr::Not(a) | Expr::IsNull(a) | Expr::Cast(a, _) => a.walk_mut(f),
            Expr::Case(c, a, b) => {
                c.walk_mut(f);
                a.walk_mut(f);
                b.walk_mut(f);
            }
            Expr::Func(_, args) | Expr::Window(_, args, _) => {
                for a in args {
                    a.walk_mut(f);
                }
            }
        }
    }
}

impl Select {
    /// Every expression of the select and its subqueries.
    fn walk_mut(&mut self, f: &mut dyn FnMut(&mut Expr)) {
        for (e, _) in &mut self.items {
            e.walk_mut(f);
        }
        if let Some(e) = &mut self.filter {
            e.walk_mut(f);
        }
        for e in &mut self.group_by {
            e.walk_mut(f);
        }
        self.from.walk_mut(f);
    }
}

impl From {
    fn walk_mut(&mut self, f: &mut dyn FnMut(&mut Expr)) {
        match self {
            From::Table(_) => {}
            From::Join(l, _, on) => {
                l.walk_mut(f);
                if let Some(on) = on {
                    on.walk_mut(f);
                }
            }
            From::Joined(l, _, r, on) => {
                l.walk_mut(f);
                r.walk_mut(f);
                on.walk_mut(f);
            }
            From::Sub(s, _) => s.walk_mut(f),
            From::Union(a, b, _) => {
                a.walk_mut(f);
                b.walk_mut(f);
            }
        }
    }
}

// ---- generation ----

/// Integer literals where a function reads a count, a size, a position.
const INTS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "-1",
    "10",
    "100",
    "1000",
    "10000",
    "65536",
    "2147483647",
    "-2147483648",
    "9223372036854775807",
    "NULL",
];
/// String literals where a function reads a pattern, a format, a type, a unit.
const STRS: &[&str] = &[
    "'a'",
    "''",
    "'%'",
    "'north'",
    "'(a'",
    "'^(a|b)*$'",
    "'(x+x+)+y'",
    "'%Y-%m-%d'",
    "'day'",
    "'Int64'",
    "'Utf8'",
    "'sha256'",
    "'hex'",
    "'base64'",
    "'UTC'",
    "'i'",
    "' '",
    "','",
];
const SIZES: &[&str] = &["100", "1000", "5000", "10000"];
/// Settings a locked session accepts (`lock::ANALYST_SETTINGS` and the analyst's `dp.*`
/// options), at their edges.
const FUZZ_SETS: &[&str] = &[
    "SET datafusion.execution.batch_size = 8",
    "SET datafusion.execution.batch_size = 65536",
    "SET datafusion.execution.target_partitions = 1",
    "SET datafusion.execution.target_partitions = 64",
    "SET dp.confidence = 0.9",
    "SET dp.max_rows_per_unit = 1",
    "SET dp.max_rows_per_unit = 1000",
    "SET dp.max_groups_per_unit = 3",
    "SET dp.mechanism = 'gaussian'; SET dp.delta = 1e-9",
    "SET dp.selection_mechanism = 'gaussian'",
    // The selection's ε at the Gaussian's smallest (σ ≈ 9e4: its threshold's search once took
    // minutes to plan, session 54) and near its largest (700 for the whole release).
    "SET dp.selection_mechanism = 'gaussian'; SET dp.selection_epsilon = 1e-4",
    "SET dp.selection_epsilon = 1e-4",
    "SET dp.selection_epsilon = 500",
];

impl Generator {
    /// The fuzz grammar over `catalogue`'s functions.
    pub fn fuzz(seed: u64, catalogue: Arc<Catalogue>) -> Self {
        let mut g = Self::new(seed);
        g.catalogue = Some(catalogue);
        g
    }

    fn catalogue(&self) -> Arc<Catalogue> {
        Arc::clone(self.catalogue.as_ref().expect("the fuzz grammar"))
    }

    /// The id of a person whom a neighbour adds, removes or replaces.
    fn person(&mut self) -> String {
        if self.chance(0.5) {
            TARGET.to_string()
        } else {
            super::EXTREME.to_string()
        }
    }

    /// The fuzz grammar's hook in [`Generator::expr`]: a call from the registry, or a gated
    /// costly expression, or nothing (no draw without a catalogue or at depth 0).
    pub(super) fn fuzz_expr(&mut self, src: &Source, ty: Ty, depth: u32) -> Option<Expr> {
        self.catalogue.as_ref()?;
        if depth == 0 {
            return None;
        }
        let r = self.rng.below(100);
        if r < 30 {
            return Some(self.call(src, ty, depth - 1, 0.25));
        }
        if r < 40 {
            let inner = self.call(src, ty, depth - 1, 0.8);
            return Some(self.gate(src, ty, inner));
        }
        if r < 45 && ty == Ty::Bool {
            return Some(Expr::IsNull(Box::new(self.cast_call(src, depth - 1))));
        }
        None
    }

    /// An interesting literal of `ty`, where a function needs one.
    fn interesting(&mut self, ty: Ty) -> Expr {
        match ty {
            Ty::Int => Expr::Lit(self.pick(INTS).to_string()),
            Ty::Str => {
                if self.chance(0.1) {
                    Expr::Lit(format!("'{}'", self.pick(&self.catalogue().types)))
                } else {
                    Expr::Lit(self.pick(STRS).to_string())
                }
            }
            other => self.lit(other),
        }
    }

    /// A literal of the fuzz grammar's types.
    pub(super) fn constructed_lit(&mut self, ty: Ty) -> Expr {
        let l = match ty {
            Ty::List => *self.pick(&[
                "make_array(1, 2, 3)",
                "make_array('a', NULL)",
                "make_array()",
            ]),
            Ty::Struct => *self.pick(&["named_struct('a', 1)", "struct(1, 'b')"]),
            Ty::Bin => *self.pick(&["X'0102'", "CAST('' AS BYTEA)"]),
            Ty::Ts => *self.pick(&[
                "TIMESTAMP '2021-01-01 00:00:00'",
                "TIMESTAMP '9999-12-31 23:59:59'",
            ]),
            Ty::Dec => *self.pick(&[
                "CAST(1.5 AS DECIMAL(10, 2))",
                "CAST(99999999999999999999999999999999999999 AS DECIMAL(38, 0))",
            ]),
            Ty::Ival => *self.pick(&["INTERVAL '1 day'", "INTERVAL '1000000 years'"]),
            Ty::Other => "arrow_cast(1, 'Duration(Second)')",
            _ => "NULL",
        };
        Expr::Lit(l.to_string())
    }

    /// A value of the fuzz grammar's types built from the source's columns.
    pub(super) fn constructed(&mut self, src: &Source, ty: Ty, d: u32) -> Expr {
        let f = |name: &str, args: Vec<Expr>| Expr::Func(name.to_string(), args);
        match ty {
            Ty::List => match self.rng.below(4) {
                0 => f(
                    "make_array",
                    vec![self.expr(src, Ty::Int, d), self.expr(src, Ty::Int, d)],
                ),
                1 => f("make_array", vec![self.expr(src, Ty::Str, d)]),
                2 => f(
                    "string_to_array",
                    vec![self.expr(src, Ty::Str, d), Expr::Lit("' '".into())],
                ),
                _ => self.amplified(src, Ty::List, d),
            },
            Ty::Struct => f(
                "named_struct",
                vec![
                    Expr::Lit("'a'".into()),
                    self.expr(src, Ty::Int, d),
                    Expr::Lit("'b'".into()),
                    self.expr(src, Ty::Str, d),
                ],
            ),
            Ty::Bin => Expr::Cast(Box::new(self.expr(src, Ty::Str, d)), "BYTEA"),
            Ty::Ts => Expr::Cast(Box::new(self.expr(src, Ty::Date, d)), "TIMESTAMP"),
            Ty::Dec => Expr::Cast(Box::new(self.expr(src, Ty::Int, d)), "DECIMAL(38, 10)"),
            Ty::Other => self.cast_call(src, d),
            _ => self.constructed_lit(ty),
        }
    }

    /// A large value of `ty` from the source's rows: long strings and lists (within the
    /// per-row cap of 64 KiB), so that work per row shows.
    fn amplified(&mut self, src: &Source, ty: Ty, d: u32) -> Expr {
        let f = |name: &str, args: Vec<Expr>| Expr::Func(name.to_string(), args);
        let n = Expr::Lit(if self.heavy {
            SIZES[SIZES.len() - 1].to_string()
        } else {
            self.pick(SIZES).to_string()
        });
        match ty {
            Ty::Str => {
                let base = self.leaf(src, Ty::Str);
                match self.rng.below(4) {
                    0 => f("lpad", vec![base, n, Expr::Lit("'ab'".into())]),
                    1 => f("rpad", vec![base, n]),
                    _ => f("repeat", vec![base, n]),
                }
            }
            Ty::List => match self.rng.below(3) {
                0 => f("array_repeat", vec![self.leaf(src, Ty::Int), n]),
                1 => f("generate_series", vec![Expr::Lit("1".into()), n]),
                _ => f(
                    "string_to_array",
                    vec![
                        f("repeat", vec![self.leaf(src, Ty::Str), n]),
                        Expr::Lit("'o'".into()),
                    ],
                ),
            },
            Ty::Bin => Expr::Cast(Box::new(self.amplified(src, Ty::Str, d)), "BYTEA"),
            other => self.expr(src, other, d),
        }
    }

    /// Arguments for `args` over `src`: an interesting literal where the function reads a
    /// literal, else an expression one level deep.
    fn arguments(&mut self, args: &[Arg], src: &Source) -> Vec<Expr> {
        args.iter()
            .map(|a| match a.literal {
                true => self.interesting(a.ty),
                false => self.expr(src, a.ty, 1),
            })
            .collect()
    }

    /// A call of a scalar function of the registry returning `ty` (or any, made `ty` by `IS
    /// NULL` or a cast to a string), each argument amplified with probability `amplify`.
    fn call(&mut self, src: &Source, ty: Ty, d: u32, amplify: f64) -> Expr {
        let cat = self.catalogue();
        let direct = cat.returning.get(&ty).cloned().unwrap_or_default();
        let (index, wrap) = if !direct.is_empty() && self.chance(0.8) {
            (*self.pick(&direct), None)
        } else {
            let any = cat.of_kind(Kind::Scalar);
            let i = *self.pick(&any);
            match ty {
                Ty::Bool => (i, Some("isnull")),
                Ty::Str => (i, Some("varchar")),
                _ if !direct.is_empty() => (*self.pick(&direct), None),
                _ => return self.leaf(src, ty),
            }
        };
        let function = &cat.functions[index];
        let sigs: Vec<&(Vec<Arg>, Ty)> = function
            .sigs
            .iter()
            .filter(|s| wrap.is_some() || s.1 == ty)
            .collect();
        let (args, _) = (*self.pick(&sigs)).clone();
        let args: Vec<Expr> = args
            .iter()
            .map(|a| {
                if a.literal {
                    self.interesting(a.ty)
                } else if self.chance(amplify) {
                    self.amplified(src, a.ty, d)
                } else {
                    self.expr(src, a.ty, d)
                }
            })
            .collect();
        let call = Expr::Func(function.name.clone(), args);
        match wrap {
            Some("isnull") => Expr::IsNull(Box::new(call)),
            Some(_) => Expr::Cast(Box::new(call), "VARCHAR"),
            None => call,
        }
    }

    /// `arrow_cast(value, '<type>')` to a type of any family, from a value of a fitting kind.
    fn cast_call(&mut self, src: &Source, d: u32) -> Expr {
        let cat = self.catalogue();
        // Half the time a type whose size is a parameter (fixed sizes, decimals at their
        // limits, nested types of them): what an allocation can be sized by.
        let sized: Vec<&'static str> = cat
            .types
            .iter()
            .copied()
            .filter(|t| t.contains("Fixed") || t.contains("Decimal") || t.contains("List("))
            .collect();
        let target = if !sized.is_empty() && self.chance(0.5) {
            *self.pick(&sized)
        } else {
            *self.pick(&cat.types)
        };
        let from = if target.contains("List") && self.chance(0.7) {
            Ty::List
        } else if target.contains("Binary") && self.chance(0.5) {
            Ty::Bin
        } else if target.starts_with("Struct") || target.starts_with("Map") {
            if self.chance(0.7) {
                Ty::Struct
            } else {
                Ty::Str
            }
        } else if target.starts_with("Decimal") {
            *self.pick(&[Ty::Int, Ty::Num, Ty::Str, Ty::Dec])
        } else if target.starts_with("Timestamp") || target.starts_with("Date") {
            *self.pick(&[Ty::Date, Ty::Int, Ty::Str, Ty::Ts])
        } else {
            *self.pick(&[Ty::Int, Ty::Str, Ty::Num, Ty::Bool, Ty::Date, Ty::Null])
        };
        let value = if from == Ty::List && self.chance(0.5) {
            Expr::Func("make_array".into(), {
                let ty = *self.pick(&[Ty::Int, Ty::Int, Ty::Str]);
                vec![self.leaf(src, ty)]
            })
        } else {
            self.expr(src, from, d)
        };
        Expr::Func(
            "arrow_cast".into(),
            vec![value, Expr::Lit(format!("'{target}'"))],
        )
    }

    /// `unit = K`, or a test that holds for one person's rows only, on the source's unit.
    fn is_person(&mut self, src: &Source) -> Expr {
        let unit = src.unit.clone().unwrap_or_else(|| "1".into());
        match self.rng.below(6) {
            0 => Expr::Lit(format!("{unit} IN ({TARGET}, {})", super::EXTREME)),
            1 => Expr::Bin(
                Box::new(Expr::Col(unit)),
                ">",
                Box::new(Expr::Lit(super::super::data::BASE_PEOPLE.to_string())),
            ),
            _ => Expr::Bin(
                Box::new(Expr::Col(unit)),
                "=",
                Box::new(Expr::Lit(self.person())),
            ),
        }
    }

    /// `inner` evaluated on one person's rows only: `CASE`, `OR`, `AND`, `COALESCE`.
    fn gate(&mut self, src: &Source, ty: Ty, inner: Expr) -> Expr {
        let when = self.is_person(src);
        let default = self.lit(ty);
        match (ty, self.rng.below(5)) {
            (Ty::Bool, 0) => Expr::Bin(Box::new(Expr::Not(Box::new(when))), "OR", Box::new(inner)),
            (Ty::Bool, 1) => Expr::Bin(Box::new(when), "AND", Box::new(inner)),
            (_, 2) => Expr::Func(
                "coalesce".into(),
                vec![
                    Expr::Case(
                        Box::new(when),
                        Box::new(inner),
                        Box::new(Expr::Lit("NULL".into())),
                    ),
                    default,
                ],
            ),
            _ => Expr::Case(Box::new(when), Box::new(inner), Box::new(default)),
        }
    }

    /// A condition that uses column `x` of type `ty`.
    fn uses(&mut self, x: &str, ty: Ty) -> Expr {
        let col = Box::new(Expr::Col(x.into()));
        match ty {
            Ty::Int | Ty::Num => Expr::Bin(col, ">", Box::new(Expr::Lit("0".into()))),
            Ty::Str => Expr::Bin(
                Box::new(Expr::Func("length".into(), vec![Expr::Col(x.into())])),
                ">",
                Box::new(Expr::Lit("3".into())),
            ),
            Ty::Bool => Expr::Col(x.into()),
            _ => Expr::Not(Box::new(Expr::IsNull(col))),
        }
    }

    pub(super) fn eps(&mut self) -> Expr {
        Expr::Lit(
            if self.chance(0.8) {
                *self.pick(&["1.0", "0.1", "0.01"])
            } else {
                *self.pick(&EPSILONS)
            }
            .to_string(),
        )
    }

    /// A source over protected rows: the classic ones, per-unit aggregates and windows of
    /// the registry.
    fn fuzz_source(&mut self) -> Source {
        let cat = self.catalogue();
        let visits = Source {
            from: From::Table("visits".into()),
            cols: cols("", &VISITS),
            unit: Some("patient_id".into()),
        };
        match self.rng.below(20) {
            // Refused (an exact aggregate of protected rows), alike on both sides: rare.
            0 => {
                // A per-unit aggregate of the registry.
                let aggs = cat.of_kind(Kind::Aggregate);
                if aggs.is_empty() {
                    return self.protected_source();
                }
                let f = &cat.functions[*self.pick(&aggs)];
                let (args, ret) = self.pick(&f.sigs).clone();
                let args = self.arguments(&args, &visits);
                let mut c = vec![("s.patient_id".to_string(), Ty::Int)];
                if matches!(ret, Ty::Int | Ty::Num | Ty::Str | Ty::Bool | Ty::Date) {
                    c.push(("s.a".into(), ret));
                } else {
                    c.push(("(s.a IS NULL)".into(), Ty::Bool));
                }
                Source {
                    from: From::Sub(
                        Box::new(Select {
                            items: vec![
                                (Expr::Col("patient_id".into()), None),
                                (Expr::Func(f.name.clone(), args), Some("a".into())),
                            ],
                            from: From::Table("visits".into()),
                            filter: None,
                            group_by: vec![Expr::Col("patient_id".into())],
                            order_by: vec![],
                            limit: None,
                        }),
                        "s".into(),
                    ),
                    cols: c,
                    unit: Some("s.patient_id".into()),
                }
            }
            1..=3 => {
                // A window function of the registry over each person's rows.
                let windows = cat.of_kind(Kind::Window);
                if windows.is_empty() {
                    return self.protected_source();
                }
                let f = &cat.functions[*self.pick(&windows)];
                let (args, ret) = self.pick(&f.sigs).clone();
                let args = self.arguments(&args, &visits);
                let over = self
                    .pick(&[
                        "PARTITION BY patient_id ORDER BY visit_date",
                        "PARTITION BY patient_id ORDER BY visit_date, region",
                        "PARTITION BY patient_id",
                    ])
                    .to_string();
                let mut c = vec![
                    ("w.patient_id".to_string(), Ty::Int),
                    ("w.region".to_string(), Ty::Str),
                ];
                if matches!(ret, Ty::Int | Ty::Num | Ty::Str | Ty::Bool | Ty::Date) {
                    c.push(("w.r".into(), ret));
                }
                Source {
                    from: From::Sub(
                        Box::new(Select {
                            items: vec![
                                (Expr::Col("patient_id".into()), None),
                                (Expr::Col("region".into()), None),
                                (Expr::Window(f.name.clone(), args, over), Some("r".into())),
                            ],
                            from: From::Table("visits".into()),
                            filter: None,
                            group_by: vec![],
                            order_by: vec![],
                            limit: None,
                        }),
                        "w".into(),
                    ),
                    cols: c,
                    unit: Some("w.patient_id".into()),
                }
            }
            _ => self.protected_source(),
        }
    }

    /// A DP query over `src` with at least one gate on one person's rows.
    fn gated_select(&mut self, src: Source) -> Select {
        let mut items = Vec::new();
        let n = 1 + self.rng.below(2);
        for _ in 0..n {
            items.push((self.dp_call(&src), None));
        }
        let inner = if self.chance(0.2) {
            Expr::IsNull(Box::new(self.cast_call(&src, 1)))
        } else {
            let ty = *self.pick(&[Ty::Bool, Ty::Int, Ty::Str, Ty::Num]);
            let call = self.call(&src, ty, 2, 0.8);
            match ty {
                Ty::Bool => call,
                Ty::Str => Expr::Bin(
                    Box::new(Expr::Func("length".into(), vec![call])),
                    ">",
                    Box::new(Expr::Lit("3".into())),
                ),
                _ => Expr::Bin(Box::new(call), ">", Box::new(Expr::Lit("0".into()))),
            }
        };
        let filter = self.gate(&src, Ty::Bool, inner);
        Select {
            items,
            from: src.from,
            filter: Some(filter),
            group_by: vec![],
            order_by: vec![],
            limit: None,
        }
    }

    /// Casts to every type family: gated on one person's rows, on everyone's, as a DP
    /// aggregate's argument, and of constants alone (planning folds them).
    fn cast_select(&mut self) -> Select {
        let src = self.fuzz_source();
        match self.rng.below(10) {
            0..=3 => {
                let cast = Expr::IsNull(Box::new(self.cast_call(&src, 1)));
                let filter = self.gate(&src, Ty::Bool, cast);
                let dp = self.dp_call(&src);
                Select {
                    items: vec![(dp, None)],
                    from: src.from,
                    filter: Some(filter),
                    group_by: vec![],
                    order_by: vec![],
                    limit: None,
                }
            }
            4 | 5 => {
                let cast = Expr::IsNull(Box::new(self.cast_call(&src, 1)));
                let dp = self.dp_call(&src);
                Select {
                    items: vec![(dp, None)],
                    from: src.from,
                    filter: Some(cast),
                    group_by: vec![],
                    order_by: vec![],
                    limit: None,
                }
            }
            6 | 7 => {
                let cast = self.cast_call(&src, 1);
                let when = self.is_person(&src);
                let gated = Expr::Case(
                    Box::new(when),
                    Box::new(cast),
                    Box::new(Expr::Lit("NULL".into())),
                );
                let eps = self.eps();
                Select {
                    items: vec![(
                        Expr::Func("dp_count".into(), vec![Expr::IsNull(Box::new(gated)), eps]),
                        None,
                    )],
                    from: src.from,
                    filter: None,
                    group_by: vec![],
                    order_by: vec![],
                    limit: None,
                }
            }
            _ => {
                let constant = Source {
                    from: From::Table("sink".into()),
                    cols: vec![],
                    unit: None,
                };
                let cast = Expr::IsNull(Box::new(self.cast_call(&constant, 0)));
                Select {
                    items: vec![(cast, None)],
                    from: constant.from,
                    filter: None,
                    group_by: vec![],
                    order_by: vec![],
                    limit: None,
                }
            }
        }
    }

    /// A chain of CTEs over a protected table, then a DP query gated on `x`.
    fn chain_program(&mut self) -> (Chain, Select) {
        let cat = self.catalogue();
        let on_t = self.chance(0.25);
        let (table, keep, unit): (&str, [&str; 4], &str) = if on_t {
            ("t", ["id", "g", "outcome", "exposed"], "id")
        } else {
            (
                "visits",
                ["patient_id", "region", "outcome", "exposed"],
                "patient_id",
            )
        };
        let base_src = Source {
            from: From::Table(table.into()),
            cols: if on_t {
                cols("", &T)
            } else {
                cols("", &VISITS)
            },
            unit: Some(unit.into()),
        };
        let ty = *self.pick(&[Ty::Int, Ty::Int, Ty::Num, Ty::Str]);
        let x0 = self.expr(&base_src, ty, 1);
        // A unary function of the registry from `ty` to `ty`, for a step that nests calls.
        let unary: Vec<String> = cat
            .returning
            .get(&ty)
            .into_iter()
            .flatten()
            .map(|&i| &cat.functions[i])
            .filter(|f| {
                f.sigs
                    .iter()
                    .any(|(a, r)| *r == ty && a.len() == 1 && a[0].ty == ty && !a[0].literal)
            })
            .map(|f| f.name.clone())
            .collect();
        let step = match self.rng.below(10) {
            4..=7 if !unary.is_empty() => Step::Wrap(self.pick(&unary).clone(), vec![]),
            8 => Step::Twice(if ty == Ty::Str { "||" } else { "+" }),
            _ => match ty {
                Ty::Str => Step::Infix("||", "'a'".into()),
                Ty::Num => Step::Infix(self.op(&["+", "*", "-"]), "1.5".into()),
                _ => Step::Infix(self.op(&["+", "-", "*"]), "1".into()),
            },
        };
        let x0 = if ty == Ty::Int && !matches!(x0, Expr::Col(_) | Expr::Lit(_)) && self.chance(0.5)
        {
            Expr::Col(unit.into())
        } else {
            x0
        };
        // Each CTE's body counts towards the statement's nesting limit (256 levels, the CTEs
        // before it included) and sqlparser's recursion limit (50 nested calls); after inlining,
        // the expression is `levels * terms` deep. Planning time grows with that depth, the
        // same on both sides (a debug build took 1.3 s a plan for 4,000 levels of `+`, 2.8 s
        // for 8,000, 13 s for 2,000 of `||` and 4-10 s for 2,000 nested calls, a total form
        // each): most chains stay under half a second, a few go to 4,000 levels.
        let levels = if matches!(step, Step::Twice(_)) {
            2 + self.rng.below(11)
        } else {
            10 + self.rng.below(51)
        };
        let (most, limit) = match step {
            Step::Twice(_) => (1, 1),
            Step::Infix("||", _) => (20, 200),
            Step::Wrap(..) => (40, 300),
            _ if self.chance(0.05) => (240 - levels, 4_000),
            _ => (240 - levels, 1_500),
        };
        let mut terms = (*self.pick(&[1, 10, 20, 50, 100, 200])).min(most);
        while levels * terms > limit && terms > 1 {
            terms /= 2;
        }
        let mut base_items: Vec<(Expr, Option<String>)> = keep
            .iter()
            .map(|c| (Expr::Col(c.to_string()), None))
            .collect();
        base_items.push((x0, Some("x".into())));
        let chain = Chain {
            base: Select {
                items: base_items,
                from: From::Table(table.into()),
                filter: None,
                group_by: vec![],
                order_by: vec![],
                limit: None,
            },
            keep: keep.iter().map(|c| c.to_string()).collect(),
            step,
            levels,
            terms,
        };
        let mut c = vec![
            (keep[0].to_string(), Ty::Int),
            (keep[1].to_string(), Ty::Str),
            (keep[2].to_string(), Ty::Bool),
            (keep[3].to_string(), Ty::Bool),
        ];
        c.push(("x".into(), ty));
        let src = Source {
            from: From::Table("chain".into()),
            cols: c,
            unit: Some(unit.into()),
        };
        let mut items = vec![(
            Expr::Func("dp_count".into(), vec![Expr::Col(unit.into()), self.eps()]),
            None,
        )];
        if self.chance(0.3) {
            items.push((self.dp_call(&src), None));
        }
        let uses = self.uses("x", ty);
        let filter = if self.chance(0.8) {
            Some(self.gate(&src, Ty::Bool, uses))
        } else {
            Some(uses)
        };
        let select = Select {
            items,
            from: src.from,
            filter,
            group_by: vec![],
            order_by: vec![],
            limit: None,
        };
        (chain, select)
    }

    /// A join of a protected relation filtered to one person with one (protected or public)
    /// whose rows cost work: a join that skips its other side when one is empty shows the
    /// person.
    fn join_select(&mut self) -> Select {
        // `t` has no unit column: its joins are refused (alike on both sides).
        let on_t = self.chance(0.05);
        let (table, unit, table_cols): (&str, &str, Vec<(String, Ty)>) = if on_t {
            ("t", "id", cols("", &T))
        } else {
            ("visits", "patient_id", cols("", &VISITS))
        };
        let base = Source {
            from: From::Table(table.into()),
            cols: table_cols.clone(),
            unit: Some(unit.into()),
        };
        let person = self.is_person(&base);
        let one = Select {
            items: vec![(Expr::Col("*".into()), None)],
            from: From::Table(table.into()),
            filter: Some(person),
            group_by: vec![],
            order_by: vec![],
            limit: None,
        };
        let public = self.chance(0.25);
        let hty = *self.pick(&[Ty::Str, Ty::Int, Ty::Bool, Ty::Num]);
        let (other, on) = if public {
            let src = Source {
                from: From::Table("range(1000)".into()),
                cols: vec![("value".into(), Ty::Int)],
                unit: None,
            };
            let heavy = self.call(&src, hty, 2, 0.8);
            (
                Select {
                    items: vec![(Expr::Col("value".into()), None), (heavy, Some("h".into()))],
                    from: src.from,
                    filter: None,
                    group_by: vec![],
                    order_by: vec![],
                    limit: None,
                },
                Expr::Bin(
                    Box::new(Expr::Lit(format!("a.{unit} % 7"))),
                    "=",
                    Box::new(Expr::Lit("b.value % 7".into())),
                ),
            )
        } else {
            // Two costly columns, both used: the work the join skips must show.
            self.heavy = true;
            let heavy = self.call(&base, hty, 2, 0.8);
            let heavy2 = self.call(&base, Ty::Bool, 2, 0.9);
            self.heavy = false;
            (
                Select {
                    items: vec![
                        (Expr::Col(unit.into()), None),
                        (heavy, Some("h".into())),
                        (heavy2, Some("h2".into())),
                    ],
                    from: From::Table(table.into()),
                    filter: None,
                    group_by: vec![],
                    order_by: vec![],
                    limit: None,
                },
                Expr::Bin(
                    Box::new(Expr::Col(format!("a.{unit}"))),
                    "=",
                    Box::new(Expr::Col(format!("b.{unit}"))),
                ),
            )
        };
        let kind = if self.chance(0.05) {
            "FULL JOIN"
        } else {
            *self.pick(&["JOIN", "JOIN", "LEFT JOIN", "RIGHT JOIN"])
        };
        let (l, r) = (
            From::Sub(Box::new(one), "a".into()),
            From::Sub(Box::new(other), "b".into()),
        );
        let from = if self.chance(0.3) {
            From::Joined(Box::new(r), kind, Box::new(l), on)
        } else {
            From::Joined(Box::new(l), kind, Box::new(r), on)
        };
        let mut c = cols("a", if on_t { &T[..] } else { &VISITS[..] });
        c.push(("b.h".into(), hty));
        let second = !public;
        let src = Source {
            from,
            cols: c,
            unit: Some(format!("a.{unit}")),
        };
        let dp = self.dp_call(&src);
        let mut filter = self.uses("b.h", hty);
        if second {
            filter = Expr::Bin(
                Box::new(filter),
                "OR",
                Box::new(Expr::Func(
                    "coalesce".into(),
                    vec![Expr::Col("b.h2".into()), Expr::Lit("false".into())],
                )),
            );
        }
        Select {
            items: vec![(dp, None)],
            from: src.from,
            filter: Some(filter),
            group_by: vec![],
            order_by: vec![],
            limit: None,
        }
    }

    /// A query over public relations with the registry's aggregates, windows, table
    /// functions and casts (answered exactly: its values are compared).
    fn public_fuzz_select(&mut self) -> Select {
        let cat = self.catalogue();
        let lookup = Source {
            from: From::Table("lookup".into()),
            cols: vec![("k".to_string(), Ty::Str), ("v".to_string(), Ty::Int)],
            unit: None,
        };
        let args_for = |g: &mut Generator, args: &[Arg]| g.arguments(args, &lookup);
        let simple = |items: Vec<(Expr, Option<String>)>, from: From| Select {
            items,
            from,
            filter: None,
            group_by: vec![],
            order_by: vec![],
            limit: None,
        };
        let kinds = [
            cat.of_kind(Kind::Aggregate),
            cat.of_kind(Kind::Window),
            cat.of_kind(Kind::Table),
        ];
        let mut r = self.rng.below(5);
        if r < 3 && kinds[r].is_empty() {
            r = 3;
        }
        match r {
            0 => {
                let aggs = cat.of_kind(Kind::Aggregate);
                let f = &cat.functions[*self.pick(&aggs)];
                let (args, _) = self.pick(&f.sigs).clone();
                let args = args_for(self, &args);
                simple(
                    vec![(Expr::Func(f.name.clone(), args), None)],
                    From::Table("lookup".into()),
                )
            }
            1 => {
                let windows = cat.of_kind(Kind::Window);
                let f = &cat.functions[*self.pick(&windows)];
                let (args, _) = self.pick(&f.sigs).clone();
                let args = args_for(self, &args);
                let mut s = simple(
                    vec![
                        (Expr::Col("k".into()), None),
                        (Expr::Col("v".into()), None),
                        (
                            Expr::Window(f.name.clone(), args, "ORDER BY v, k".into()),
                            None,
                        ),
                    ],
                    From::Table("lookup".into()),
                );
                s.order_by = vec![(1, false), (0, false)];
                s
            }
            2 => {
                let tables = cat.of_kind(Kind::Table);
                let f = &cat.functions[*self.pick(&tables)];
                let (args, _) = self.pick(&f.sigs).clone();
                // Small sizes: a public table of 2^63 rows is slow everywhere, not a leak.
                let args: Vec<String> = args
                    .iter()
                    .map(|a| match a.ty {
                        Ty::Int => self.pick(&["0", "1", "3", "10", "-1"]).to_string(),
                        t => self.interesting(t).sql(),
                    })
                    .collect();
                let mut s = simple(
                    vec![(Expr::Lit("count(*)".into()), None)],
                    From::Table(format!("{}({})", f.name, args.join(", "))),
                );
                s.limit = Some(5);
                s
            }
            _ => {
                // Casts and calls of constants and public columns.
                let item = if self.chance(0.5) {
                    Expr::IsNull(Box::new(self.cast_call(&lookup, 1)))
                } else {
                    let ty = *self.pick(&[Ty::Int, Ty::Str, Ty::Bool, Ty::Num]);
                    self.call(&lookup, ty, 2, 0.3)
                };
                let from = if self.chance(0.3) {
                    From::Table("sink".into())
                } else {
                    From::Table("lookup".into())
                };
                let mut s = simple(vec![(item, None)], from);
                s.order_by = vec![(0, false)];
                s
            }
        }
    }

    /// A program of the fuzz grammar.
    pub(super) fn fuzz_program(&mut self) -> Gen {
        let mut chain = None;
        let mut params = Vec::new();
        let select = match self.rng.below(100) {
            0..=24 => return self.classic_program(),
            25..=49 => {
                let src = self.fuzz_source();
                self.gated_select(src)
            }
            50..=53 => {
                // A DP query whose arguments and filter are the registry's, ungated.
                self.dp_select()
            }
            54..=59 => self.cast_select(),
            60..=67 => {
                let (c, s) = self.chain_program();
                chain = Some(c);
                s
            }
            68..=83 => self.join_select(),
            84..=86 => {
                // A prepared statement whose parameter's type is the analyst's (any type a
                // cast can name, so sized ones too), used only on one person's rows: the
                // PREPARE leaves it untyped and EXECUTE binds a NULL of that type.
                let src = self.fuzz_source();
                let cat = self.catalogue();
                let target = *self.pick(&cat.types);
                let when = self.is_person(&src);
                let gated = Expr::Case(
                    Box::new(when),
                    Box::new(Expr::Lit("$1".into())),
                    Box::new(Expr::Lit("NULL".into())),
                );
                params.push(("", format!("arrow_cast(NULL, '{target}')")));
                Select {
                    items: vec![(self.dp_call(&src), None)],
                    from: src.from,
                    filter: Some(Expr::IsNull(Box::new(gated))),
                    group_by: vec![],
                    order_by: vec![],
                    limit: None,
                }
            }
            87..=91 => {
                // A prepared statement: the person's id is the parameter.
                let mut s = if self.chance(0.5) {
                    self.join_select()
                } else {
                    let src = self.fuzz_source();
                    self.gated_select(src)
                };
                let mut replaced: Option<String> = None;
                s.walk_mut(&mut |e| {
                    if let Expr::Bin(_, "=", k) = e {
                        if let Expr::Lit(l) = k.as_mut() {
                            let person =
                                *l == TARGET.to_string() || *l == super::EXTREME.to_string();
                            if person && replaced.get_or_insert(l.clone()) == l {
                                *l = "$1".into();
                            }
                        }
                    }
                });
                if let Some(k) = replaced {
                    params.push(("BIGINT", k));
                }
                s
            }
            _ => self.public_fuzz_select(),
        };
        let mut sets = Vec::new();
        if self.chance(0.1) {
            sets.extend(self.pick(FUZZ_SETS).split("; ").map(str::to_string));
        }
        Gen {
            sets,
            select,
            explain: self.chance(0.05),
            chain,
            params,
        }
    }
}
