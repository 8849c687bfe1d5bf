//! The plan analysis that proves what one person can contribute, and that only DP leaves a
//! protected table.
//!
//! [`PlanAnalysis::relation`] walks a logical plan down to its scans and says, for the
//! relation each node outputs, whether it depends on protected rows and, if it does, how a
//! person is identified in it and whether one protected row can appear more than once. Each
//! operator states its stability next to its case (as OpenDP's transformations do):
//!
//! | operator | over protected rows |
//! |---|---|
//! | `Filter`, `Sort`, `Repartition`, alias | row by row: the bound holds |
//! | `Projection` | row by row; the unit column is carried only as the table's own column, unchanged (renaming is fine, `id + 100 AS id` is not the unit) |
//! | `Distinct` (all columns) | never adds rows: the bound holds; of the unit column alone, one row per unit |
//! | `Join` with a public relation, `Unnest` | can repeat a row: the bound holds only after bounding per unit |
//! | `Join` of two protected relations | only on equality of their unit columns (ZetaSQL's rule), then as above |
//! | `Union` of protected relations | can repeat a row (the same row in two branches); the unit column must be the same column of every protected branch |
//! | `Window` | only windows partitioned by the unit column (each value depends on one person's rows) |
//! | `BoundContributions` | keeps a subset of each unit's rows, chosen from that unit's rows alone: the bound of its caps |
//! | `Aggregate` | DP aggregates: their output is released (the group keys by the public-groups rules). Exact aggregates only grouped by the unit column: each output row is one unit's, and grouped by the unit alone one row per unit, which the plan then proves (no bounding); aggregates whose value follows the order of the rows are refused there |
//! | `Limit`, `DISTINCT ON`, outer joins that keep public rows, semi/anti joins filtering public rows by protected ones, recursive queries, extension nodes | not bounded: refused |
//!
//! Subqueries in expressions (`IN`, `EXISTS`, scalar, `ANY`/`ALL`) must not read protected
//! rows unless through a DP aggregate. Nothing depends on names the analyst writes: the unit
//! column is tracked by position from the protected scan, and tables are recognised by the
//! names the owner declared (a name the analyst could invent, a CTE or an alias, is never a
//! scan of a table).
//!
//! What a DP aggregate's input allows ([`Relation::contribution`]): public input, or rows of a
//! table protected row by row through operators that cannot repeat a row: one row in one group
//! per person; a carried unit column: bounding per unit
//! ([`crate::sql::privacy::rewrite::bounding`]) to `dp.max_rows_per_unit` rows in
//! `dp.max_groups_per_unit` groups; anything else is refused, with the reason.

use crate::sql::functions::aggregate::DpAggregate;
use crate::sql::privacy::plan::protection::{Protection, Protections};
use crate::sql::privacy::rewrite::bounding::node::BoundContributions;
use crate::sql::privacy::session::costs::is_order_sensitive;
use crate::stats::Contribution;
use arrow::datatypes::DataType;
use datafusion::catalog::CatalogProviderList;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{plan_err, Column, DFSchema, Result};
use datafusion::datasource::cte_worktable::CteWorkTable;
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::ExprSchemable;
use datafusion::logical_expr::{
    Aggregate, BinaryExpr, Distinct, Expr, Extension, JoinType, LogicalPlan, Operator,
};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::sync::Arc;

/// How a person is identified in a protected relation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unit {
    /// Each row is a person (tables protected row by row).
    Rows,
    /// The unit column, at this index of the relation's output.
    Column(usize),
    /// The relation has protected rows, but its unit column was not carried through; why.
    Lost(String),
}

/// A relation that depends on protected rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protected {
    /// The protected tables read, for error messages.
    pub tables: BTreeSet<String>,
    pub unit: Unit,
    /// Why one protected row may appear more than once (`None`: it cannot).
    pub repeats: Option<String>,
    /// Whether each unit has at most one row (a scan of a table declared
    /// [`Protection::UniqueUnit`], through operators that keep a subset of its rows).
    pub unique_units: bool,
}

impl Protected {
    fn names(&self) -> String {
        self.tables
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn lost(&self, why: String) -> Self {
        Self {
            unit: Unit::Lost(why),
            ..self.clone()
        }
    }

    fn repeated(mut self, why: impl Into<String>) -> Self {
        self.unique_units = false;
        if self.repeats.is_none() {
            self.repeats = Some(why.into());
        }
        self
    }

    /// The unit index shifted by `offset` (the right side of a join).
    fn shifted(mut self, offset: usize) -> Self {
        if let Unit::Column(i) = self.unit {
            self.unit = Unit::Column(i + offset);
        }
        self
    }
}

/// What a plan node outputs, for privacy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relation {
    /// Rows that do not depend on protected data (public tables, constants, DP releases).
    Public,
    Protected(Protected),
}

/// How a DP aggregate's input is made safe: the contribution bound its calibration uses and,
/// for a relation with a unit column, that column (bounding is applied on it).
#[derive(Debug, Clone, PartialEq)]
pub struct InputBound {
    pub contribution: Contribution,
    /// The unit column to bound contributions on, as the aggregated input names it.
    pub unit: Option<Expr>,
    /// The protected tables read (empty for a public input).
    pub tables: Vec<String>,
}

impl Relation {
    /// The bound for a DP aggregate `function` over this relation (`schema` its schema),
    /// grouped or not, with the session's per-unit limits; an error saying why not.
    pub fn contribution(
        &self,
        function: &str,
        schema: &DFSchema,
        grouped: bool,
        max_rows: u32,
        max_groups: u32,
    ) -> Result<InputBound> {
        let Relation::Protected(p) = self else {
            return Ok(InputBound {
                contribution: Contribution::ONE_ROW,
                unit: None,
                tables: vec![],
            });
        };
        let tables = p.tables.iter().cloned().collect();
        match &p.unit {
            Unit::Rows => match &p.repeats {
                None => Ok(InputBound {
                    contribution: Contribution::ONE_ROW,
                    unit: None,
                    tables,
                }),
                Some(why) => plan_err!(
                    "{function} over protected table {}: {why} can repeat a protected row, and \
                     the table is protected row by row, with no unit column to bound each \
                     person's rows on. The data owner can declare its unit column \
                     (SET dp.protected_tables = 'table(unit_column)', or datafusion_dp::protect \
                     with Protection::Unit), or aggregate the table without the join/union",
                    p.names()
                ),
            },
            Unit::Lost(why) => plan_err!(
                "{function} over protected table {}: {why}; the contribution of one person \
                 cannot be bounded, so the query is refused",
                p.names()
            ),
            // One row per unit, none repeated: one row in one group per person, and nothing
            // to bound.
            Unit::Column(_) if p.unique_units && p.repeats.is_none() => Ok(InputBound {
                contribution: Contribution::ONE_ROW,
                unit: None,
                tables,
            }),
            Unit::Column(i) => {
                let (qualifier, field) = schema.qualified_field(*i);
                Ok(InputBound {
                    contribution: Contribution {
                        rows: max_rows,
                        groups: if grouped { max_groups } else { 1 },
                    },
                    unit: Some(Expr::Column(Column::new(qualifier.cloned(), field.name()))),
                    tables,
                })
            }
        }
    }
}

/// The analysis of one plan against the session's declarations.
pub struct PlanAnalysis<'a> {
    protections: &'a Protections,
    config: &'a ConfigOptions,
    catalogs: Option<&'a Arc<dyn CatalogProviderList>>,
    /// Every protected table scanned, whatever reaches the output (for `EXPLAIN ANALYZE`).
    scanned: RefCell<BTreeSet<String>>,
}

#[recursive::recursive]
fn is_dp_call(expr: &Expr) -> bool {
    match expr {
        Expr::Alias(alias) => is_dp_call(&alias.expr),
        Expr::AggregateFunction(f) => f.func.inner().downcast_ref::<DpAggregate>().is_some(),
        _ => false,
    }
}

/// The column `expr` reads unchanged (through aliases and casts that keep every value
/// distinct are *not* accepted: only a plain column, possibly renamed).
#[recursive::recursive]
fn plain_column(expr: &Expr) -> Option<&Column> {
    match expr {
        Expr::Alias(alias) => plain_column(&alias.expr),
        Expr::Column(c) => Some(c),
        _ => None,
    }
}

/// An expression as the query wrote it: its alias (DataFusion names `count(*)` so), or its
/// schema name.
fn written(expr: &Expr) -> String {
    let mut inner = expr;
    while let Expr::Alias(alias) = inner {
        inner = &alias.expr;
    }
    match (expr, inner) {
        (_, Expr::AggregateFunction(f))
            if f.func.name() == "count"
                && matches!(f.params.args.as_slice(), [Expr::Literal(..)]) =>
        {
            "count(*)".to_string()
        }
        (Expr::Alias(alias), _) => alias.name.clone(),
        (other, _) => other.schema_name().to_string(),
    }
}

/// The first line of a node's display, to name the operator in errors.
fn operator(plan: &LogicalPlan) -> String {
    let text = format!("{}", plan.display());
    let line = text.lines().next().unwrap_or_default().to_string();
    if line.len() > 160 {
        format!("{}...", &line[..line.floor_char_boundary(157)])
    } else {
        line
    }
}

impl<'a> PlanAnalysis<'a> {
    pub fn new(
        protections: &'a Protections,
        config: &'a ConfigOptions,
        catalogs: Option<&'a Arc<dyn CatalogProviderList>>,
    ) -> Self {
        Self {
            protections,
            config,
            catalogs,
            scanned: RefCell::new(BTreeSet::new()),
        }
    }

    /// The protected tables scanned by the plans analysed so far.
    pub fn scanned(&self) -> BTreeSet<String> {
        self.scanned.borrow().clone()
    }

    /// Refuses a plan whose output is not public: a query may output only DP releases and
    /// what does not depend on protected rows.
    #[recursive::recursive]
    pub fn check_output(&self, plan: &LogicalPlan) -> Result<()> {
        match plan {
            LogicalPlan::Explain(explain) => return self.check_output(&explain.plan),
            LogicalPlan::Analyze(analyze) => {
                self.check_output(&analyze.input)?;
                if let Some(table) = self.scanned().into_iter().next() {
                    return plan_err!(
                        "EXPLAIN ANALYZE reads protected table '{table}': its metrics are exact \
                         row counts of protected rows. Use EXPLAIN (the plan, with each DP \
                         aggregate's contribution bound) instead"
                    );
                }
                return Ok(());
            }
            _ => {}
        }
        if let Relation::Protected(p) = self.relation(plan)? {
            let what = match plan {
                LogicalPlan::Dml(dml) => format!("{} into '{}'", dml.op, dml.table_name),
                LogicalPlan::Copy(copy) => format!("COPY TO '{}'", copy.output_url),
                _ => "the query".to_string(),
            };
            let functions: Vec<&str> = crate::sql::functions::aggregate::STATISTICS
                .iter()
                .map(|f| f.name())
                .collect();
            return plan_err!(
                "{what} would output rows of protected table {} ({}), or values computed \
                 exactly from them. Only DP aggregates ({}) and group keys declared public may \
                 leave a protected table",
                p.names(),
                operator(plan),
                functions.join(", ")
            );
        }
        Ok(())
    }

    /// Refuses expressions of `plan` whose subqueries read protected rows other than
    /// through a DP aggregate.
    fn check_subqueries(&self, plan: &LogicalPlan) -> Result<()> {
        plan.apply_subqueries(|subquery| {
            if let Relation::Protected(p) = self.relation(subquery)? {
                return plan_err!(
                    "a subquery in an expression ({}) reads protected table {}: its result is \
                     computed exactly from protected rows. Use a DP aggregate in the subquery, \
                     or a join that the planner can bound",
                    operator(plan),
                    p.names()
                );
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map(|_| ())
    }

    /// Whether `scan` reads a protected table (not a view, a CTE's work table, a table
    /// function or a public table).
    pub fn is_protected_scan(&self, scan: &datafusion::logical_expr::TableScan) -> bool {
        scan.source.get_logical_plan().is_none()
            && !is_work_table(scan)
            && !self.is_table_function(&scan.table_name)
            && !matches!(
                self.protections.of(&scan.table_name, self.config),
                Protection::Public
            )
    }

    /// The relation `plan` outputs (see the module docs for each operator).
    #[recursive::recursive]
    pub fn relation(&self, plan: &LogicalPlan) -> Result<Relation> {
        self.check_subqueries(plan)?;
        let one = |input: &LogicalPlan| self.relation(input);
        Ok(match plan {
            LogicalPlan::TableScan(scan) => {
                if let Some(view) = scan.source.get_logical_plan() {
                    let inner = self.relation(&view)?;
                    return Ok(match inner {
                        Relation::Protected(p) if scan.fetch.is_some() => {
                            let why = "LIMIT on a view".to_string();
                            Relation::Protected(p.lost(why))
                        }
                        Relation::Protected(p) => {
                            Relation::Protected(project_unit(p, scan.projection.as_deref()))
                        }
                        public => public,
                    });
                }
                if is_work_table(scan) || self.is_table_function(&scan.table_name) {
                    // A CTE's work table (a recursion over protected rows is refused at the
                    // RecursiveQuery) or a table function (generate_series, dp_budget()).
                    return Ok(Relation::Public);
                }
                let name = scan.table_name.to_string();
                let protection = self.protections.of(&scan.table_name, self.config);
                let unit = match &protection {
                    Protection::Public => return Ok(Relation::Public),
                    Protection::Rows => Unit::Rows,
                    Protection::Unit(column) | Protection::UniqueUnit(column) => {
                        let schema = scan.source.schema();
                        match schema.index_of(column) {
                            Ok(i) => Unit::Column(i),
                            Err(_) => {
                                return plan_err!(
                                    "protected table '{name}': its declared unit column \
                                     '{column}' is not a column of the table"
                                )
                            }
                        }
                    }
                };
                self.scanned.borrow_mut().insert(name.clone());
                let p = Protected {
                    tables: BTreeSet::from([name]),
                    unit,
                    repeats: None,
                    unique_units: matches!(protection, Protection::UniqueUnit(_)),
                };
                let p = project_unit(p, scan.projection.as_deref());
                if scan.fetch.is_some() {
                    Relation::Protected(p.lost(
                        "a row limit on the scan keeps rows chosen by other persons' data".into(),
                    ))
                } else {
                    Relation::Protected(p)
                }
            }
            LogicalPlan::Values(_) | LogicalPlan::EmptyRelation(_) => Relation::Public,
            LogicalPlan::Statement(_) | LogicalPlan::DescribeTable(_) | LogicalPlan::Ddl(_) => {
                Relation::Public
            }
            LogicalPlan::Explain(explain) => {
                self.check_output(&explain.plan)?;
                Relation::Public
            }
            LogicalPlan::Analyze(_) => {
                self.check_output(plan)?;
                Relation::Public
            }
            LogicalPlan::Filter(filter) => one(&filter.input)?,
            LogicalPlan::Sort(sort) => match one(&sort.input)? {
                Relation::Protected(p) if sort.fetch.is_some() => Relation::Protected(
                    p.lost("ORDER BY ... LIMIT keeps rows chosen by other persons' data".into()),
                ),
                r => r,
            },
            LogicalPlan::Repartition(r) => one(&r.input)?,
            LogicalPlan::SubqueryAlias(a) => one(&a.input)?,
            LogicalPlan::Subquery(s) => one(&s.subquery)?,
            LogicalPlan::Limit(limit) => match one(&limit.input)? {
                Relation::Protected(p) => Relation::Protected(
                    p.lost(
                        "LIMIT/OFFSET over protected rows keeps rows chosen by other persons' data"
                            .into(),
                    ),
                ),
                r => r,
            },
            LogicalPlan::Projection(projection) => match one(&projection.input)? {
                Relation::Protected(p) => {
                    let unit = match &p.unit {
                        Unit::Column(i) => {
                            let input = projection.input.schema();
                            let (q, f) = input.qualified_field(*i);
                            let unit_column = Column::new(q.cloned(), f.name());
                            match projection
                                .expr
                                .iter()
                                .position(|e| plain_column(e) == Some(&unit_column))
                            {
                                Some(j) => Unit::Column(j),
                                None => Unit::Lost(format!(
                                    "the unit column '{}' is not carried through a projection \
                                     unchanged (a computed column that takes its name is not \
                                     the unit)",
                                    f.name()
                                )),
                            }
                        }
                        other => other.clone(),
                    };
                    Relation::Protected(Protected { unit, ..p })
                }
                r => r,
            },
            LogicalPlan::Distinct(distinct) => match distinct {
                // DISTINCT of the unit column alone: one row per unit, whatever repeated it.
                Distinct::All(input) => match one(input)? {
                    Relation::Protected(p)
                        if p.unit == Unit::Column(0) && input.schema().fields().len() == 1 =>
                    {
                        Relation::Protected(Protected {
                            repeats: None,
                            unique_units: true,
                            ..p
                        })
                    }
                    r => r,
                },
                Distinct::On(on) => match one(&on.input)? {
                    Relation::Protected(p) => Relation::Protected(
                        p.lost("DISTINCT ON keeps one row chosen among other persons' rows".into()),
                    ),
                    r => r,
                },
            },
            LogicalPlan::Window(window) => match one(&window.input)? {
                Relation::Protected(p) => {
                    let unit_column = match &p.unit {
                        Unit::Column(i) => {
                            let (q, f) = window.input.schema().qualified_field(*i);
                            Some(Column::new(q.cloned(), f.name()))
                        }
                        _ => None,
                    };
                    for expr in &window.window_expr {
                        if !partitioned_by(expr, unit_column.as_ref()) {
                            return plan_err!(
                                "window function over protected table {} ({}): it computes \
                                 each row's value from other persons' rows. Only windows \
                                 PARTITION BY the unit column are allowed on protected rows; \
                                 use a DP aggregate with GROUP BY instead",
                                p.names(),
                                expr.schema_name()
                            );
                        }
                    }
                    Relation::Protected(p)
                }
                r => r,
            },
            LogicalPlan::Aggregate(aggregate) => match one(&aggregate.input)? {
                Relation::Public => Relation::Public,
                Relation::Protected(p) => {
                    if !aggregate.aggr_expr.iter().any(is_dp_call) {
                        if let Some(per_unit) = per_unit_aggregate(aggregate, &p)? {
                            return Ok(Relation::Protected(per_unit));
                        }
                    }
                    if let Some(exact) = aggregate.aggr_expr.iter().find(|e| !is_dp_call(e)) {
                        let per_unit = match &p.unit {
                            Unit::Column(i) => format!(
                                "; an exact aggregate is allowed per person only, in a GROUP BY \
                                 that holds the unit column {} (no GROUPING SETS, no DP \
                                 aggregate beside it)",
                                aggregate.input.schema().field(*i).name()
                            ),
                            _ => String::new(),
                        };
                        return plan_err!(
                            "{} over protected table {} is computed exactly: only DP \
                             aggregates may aggregate protected rows across persons ({}){per_unit}",
                            written(exact),
                            p.names(),
                            dp_function_names()
                        );
                    }
                    if aggregate.aggr_expr.is_empty() {
                        return plan_err!(
                            "GROUP BY or DISTINCT over protected table {} without a DP \
                             aggregate releases its exact keys ({}); add a DP aggregate (the \
                             keys are then released only when declared public or selected \
                             privately)",
                            p.names(),
                            operator(plan)
                        );
                    }
                    Relation::Public
                }
            },
            LogicalPlan::Join(join) => self.join(plan, join)?,
            LogicalPlan::Union(union) => {
                let mut protected: Vec<Protected> = Vec::new();
                let mut public = Vec::new();
                for input in &union.inputs {
                    match one(input)? {
                        Relation::Protected(p) => protected.push(p),
                        Relation::Public => public.push(input.as_ref()),
                    }
                }
                let Some(mut first) = protected.first().cloned() else {
                    return Ok(Relation::Public);
                };
                // Public rows with a value in the unit column's position would join that
                // person's rows in the bounding, which then picks among both: one person's
                // rows would decide which of the analyst's rows count, and replacing that
                // person would change the groups of two units (session 14's red team). Only
                // NULL there (the phantom rows of declared keys) belongs to no unit.
                if let Unit::Column(i) = first.unit {
                    if public.iter().any(|branch| !null_column(branch, i)) {
                        first.unit = Unit::Lost(
                            "a UNION with public rows that give the unit column values (they \
                             would share a person's contribution bound)"
                                .into(),
                        );
                        protected[0].unit = first.unit.clone();
                    }
                }
                let mut tables = BTreeSet::new();
                for p in &protected {
                    tables.extend(p.tables.iter().cloned());
                }
                let unit = if protected.iter().all(|p| p.unit == first.unit) {
                    first.unit.clone()
                } else {
                    match protected.iter().find_map(|p| match &p.unit {
                        Unit::Lost(why) => Some(why.clone()),
                        _ => None,
                    }) {
                        Some(why) => Unit::Lost(why),
                        None => Unit::Lost(
                            "the branches of a UNION do not carry the unit column in the same \
                             position (or mix tables protected by unit and row by row)"
                                .into(),
                        ),
                    }
                };
                let repeats = if protected.len() > 1 {
                    Some("a UNION of several protected relations".to_string())
                } else {
                    first.repeats.clone()
                };
                Relation::Protected(Protected {
                    tables,
                    unit,
                    repeats,
                    unique_units: false,
                })
            }
            LogicalPlan::Unnest(unnest) => match one(&unnest.input)? {
                Relation::Protected(p) => {
                    let unit = match &p.unit {
                        Unit::Column(i) => {
                            let unnested: BTreeSet<usize> = unnest
                                .list_type_columns
                                .iter()
                                .map(|(i, _)| *i)
                                .chain(unnest.struct_type_columns.iter().copied())
                                .collect();
                            match unnest
                                .dependency_indices
                                .iter()
                                .position(|d| d == i && !unnested.contains(d))
                            {
                                Some(j) => Unit::Column(j),
                                None => Unit::Lost("UNNEST of the unit column".into()),
                            }
                        }
                        other => other.clone(),
                    };
                    Relation::Protected(
                        Protected { unit, ..p }.repeated("UNNEST (one row per array element)"),
                    )
                }
                r => r,
            },
            LogicalPlan::RecursiveQuery(recursive) => {
                let a = one(&recursive.static_term)?;
                let b = one(&recursive.recursive_term)?;
                if let Some(Relation::Protected(p)) =
                    [a, b].into_iter().find(|r| *r != Relation::Public)
                {
                    return plan_err!(
                        "recursive query '{}' reads protected table {}: a recursion can repeat \
                         a protected row without bound",
                        recursive.name,
                        p.names()
                    );
                }
                Relation::Public
            }
            // Writing rows out is outputting them.
            LogicalPlan::Dml(dml) => one(&dml.input)?,
            LogicalPlan::Copy(copy) => one(&copy.input)?,
            LogicalPlan::Extension(extension) => match bounding(extension) {
                // Contribution bounding keeps a subset of each unit's rows, chosen from that
                // unit's rows alone: a per-unit transformation, like a filter.
                Some(node) => match one(&node.input)? {
                    Relation::Protected(p) => {
                        let unit_column = match &p.unit {
                            Unit::Column(i) => {
                                let (q, f) = node.input.schema().qualified_field(*i);
                                Some(Column::new(q.cloned(), f.name()))
                            }
                            _ => None,
                        };
                        if unit_column.as_ref() != Some(&node.unit) {
                            return plan_err!(
                                "contribution bounding over protected table {} on {}, which is \
                                 not its unit column",
                                p.names(),
                                node.unit
                            );
                        }
                        Relation::Protected(p)
                    }
                    r => r,
                },
                None => {
                    for input in extension.node.inputs() {
                        if let Relation::Protected(p) = one(input)? {
                            return plan_err!(
                                "extension node {} over protected table {}: the planner cannot \
                                 bound what it does with protected rows",
                                extension.node.name(),
                                p.names()
                            );
                        }
                    }
                    Relation::Public
                }
            },
        })
    }

    fn join(&self, plan: &LogicalPlan, join: &datafusion::logical_expr::Join) -> Result<Relation> {
        let left = self.relation(&join.left)?;
        let right = self.relation(&join.right)?;
        let left_len = join.left.schema().fields().len();
        use JoinType::*;
        Ok(match (left, right) {
            (Relation::Public, Relation::Public) => Relation::Public,
            (Relation::Protected(p), Relation::Public) => match join.join_type {
                // Protected rows filtered by public ones: no row repeated.
                LeftSemi | LeftAnti => Relation::Protected(p),
                Inner | Left => Relation::Protected(p.repeated(format!(
                    "a join with a public relation ({})",
                    operator(plan)
                ))),
                Right | Full | RightSemi | RightAnti | LeftMark | RightMark => {
                    self.public_rows_selected(plan, &p)?
                }
            },
            (Relation::Public, Relation::Protected(p)) => match join.join_type {
                RightSemi | RightAnti => Relation::Protected(p),
                Inner | Right => Relation::Protected(p.shifted(left_len).repeated(format!(
                    "a join with a public relation ({})",
                    operator(plan)
                ))),
                Left | Full | LeftSemi | LeftAnti | LeftMark | RightMark => {
                    self.public_rows_selected(plan, &p)?
                }
            },
            (Relation::Protected(l), Relation::Protected(r)) => {
                let names = format!("{}, {}", l.names(), r.names());
                let (Unit::Column(li), Unit::Column(ri)) = (&l.unit, &r.unit) else {
                    return plan_err!(
                        "join of protected relations ({names}): allowed only on equality of \
                         their unit columns, and {} has no unit column ({})",
                        if matches!(l.unit, Unit::Column(_)) {
                            r.names()
                        } else {
                            l.names()
                        },
                        match (&l.unit, &r.unit) {
                            (Unit::Lost(why), _) | (_, Unit::Lost(why)) => why.clone(),
                            _ => "it is protected row by row".into(),
                        }
                    );
                };
                if !joins_on_units(join, *li, *ri) {
                    return plan_err!(
                        "join of protected relations ({names}): allowed only on equality of \
                         their unit columns (ON a.unit = b.unit), so that every joined row \
                         belongs to one person ({})",
                        operator(plan)
                    );
                }
                let mut tables = l.tables.clone();
                tables.extend(r.tables.iter().cloned());
                let (unit, kept) = match join.join_type {
                    Inner | Left | LeftSemi | LeftAnti => (Unit::Column(*li), l),
                    Right => (Unit::Column(ri + left_len), r),
                    RightSemi | RightAnti => (Unit::Column(*ri), r),
                    Full | LeftMark | RightMark => {
                        return plan_err!(
                            "{} join of protected relations ({names}): rows of one side \
                             without a match have no unit; use an inner, left or right join",
                            join.join_type
                        )
                    }
                };
                let repeats = match join.join_type {
                    LeftSemi | LeftAnti | RightSemi | RightAnti => kept.repeats.clone(),
                    _ => Some("a join of two protected relations".to_string()),
                };
                Relation::Protected(Protected {
                    tables,
                    unit,
                    repeats,
                    unique_units: false,
                })
            }
        })
    }

    /// Public rows kept or dropped according to protected ones (an outer join that keeps
    /// public rows, a semi/anti join of public rows against protected ones): one person can
    /// change many of them, and they carry no unit.
    fn public_rows_selected(&self, plan: &LogicalPlan, p: &Protected) -> Result<Relation> {
        Ok(Relation::Protected(p.lost(format!(
            "public rows are kept or dropped according to protected rows ({}), so one person \
             can change any number of them",
            operator(plan)
        ))))
    }

    /// Whether a scan named `table` reads a table function: SQL names those scans
    /// `name()`, which no table of the session's catalogs is called. Every other scan is a
    /// table (a DataFrame's unnamed scan too: protected unless declared). Without catalogs
    /// nothing is a table function.
    fn is_table_function(&self, table: &datafusion::common::TableReference) -> bool {
        let Some(catalogs) = self.catalogs else {
            return false;
        };
        if !table.table().ends_with("()") {
            return false;
        }
        let resolved = table.clone().resolve(
            &self.config.catalog.default_catalog,
            &self.config.catalog.default_schema,
        );
        !catalogs
            .catalog(&resolved.catalog)
            .and_then(|c| c.schema(&resolved.schema))
            .is_some_and(|s| s.table_exist(&resolved.table))
    }
}

/// Whether `scan` reads the work table of a recursive CTE.
/// Whether column `i` of `plan`'s output is a NULL constant (possibly cast or aliased).
fn null_column(plan: &LogicalPlan, i: usize) -> bool {
    #[recursive::recursive]
    fn is_null(expr: &Expr) -> bool {
        match expr {
            Expr::Literal(value, _) => value.is_null(),
            Expr::Alias(alias) => is_null(&alias.expr),
            Expr::Cast(cast) => is_null(&cast.expr),
            Expr::TryCast(cast) => is_null(&cast.expr),
            _ => false,
        }
    }
    match plan {
        LogicalPlan::Projection(projection) => projection.expr.get(i).is_some_and(is_null),
        LogicalPlan::SubqueryAlias(alias) => null_column(&alias.input, i),
        _ => false,
    }
}

fn is_work_table(scan: &datafusion::logical_expr::TableScan) -> bool {
    source_as_provider(&scan.source).is_ok_and(|p| p.downcast_ref::<CteWorkTable>().is_some())
}

/// `p` seen through a scan's projection (column indices of the table).
fn project_unit(p: Protected, projection: Option<&[usize]>) -> Protected {
    match (&p.unit, projection) {
        (Unit::Column(i), Some(projection)) => match projection.iter().position(|c| c == i) {
            Some(j) => Protected {
                unit: Unit::Column(j),
                ..p
            },
            // A scan is pruned of columns only by the optimiser, which runs after this
            // analysis except on a statement DataFusion prepared (`PREPARE`, which
            // `analyst_sql` plans from its own copy).
            None => p.lost(
                "the scan does not read the unit column (pruned by the optimiser: a statement \
                 prepared with SQL PREPARE in a session that is not locked is optimised before \
                 this analysis; run the query itself)"
                    .into(),
            ),
        },
        _ => p,
    }
}

/// The names of the DP aggregates, from the registry, for refusal messages.
fn dp_function_names() -> String {
    crate::sql::functions::aggregate::STATISTICS
        .iter()
        .map(|f| f.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// An exact aggregation over `p` whose every group is one unit's: grouped by the unit column
/// (a plain column among the keys, no grouping sets), each output row is computed from one
/// unit's rows alone, a per-unit transformation as a filter is; grouped by the unit alone it
/// outputs one row per unit, which a DP aggregate over it then needs no bounding for (issue
/// 43: "when the plan proves one row per unit, no bounding work at all"). `None` when the
/// aggregation is not grouped so; an error for an aggregate whose value follows the order in
/// which the unit's rows arrive (`first_value` without a total order, `array_agg`): that order
/// depends on batch and partition boundaries, which other persons' rows move, so one unit's
/// output would depend on another person's presence.
fn per_unit_aggregate(aggregate: &Aggregate, p: &Protected) -> Result<Option<Protected>> {
    let Unit::Column(i) = p.unit else {
        return Ok(None);
    };
    if aggregate
        .group_expr
        .iter()
        .any(|e| matches!(e, Expr::GroupingSet(_)))
    {
        return Ok(None);
    }
    let (q, f) = aggregate.input.schema().qualified_field(i);
    let unit = Column::new(q.cloned(), f.name());
    let Some(j) = aggregate
        .group_expr
        .iter()
        .position(|e| plain_column(e) == Some(&unit))
    else {
        return Ok(None);
    };
    if let Some(sensitive) = aggregate.aggr_expr.iter().find(|e| is_order_sensitive(e)) {
        return plan_err!(
            "{} over protected table {}, grouped by the unit column {}: its value follows the \
             order in which one person's rows arrive, which other persons' rows can change \
             (batch and partition boundaries), so one person's result would depend on \
             another's presence; use an aggregate of the values alone (count, min, max, \
             bool_or, sum, ...)",
            written(sensitive),
            p.names(),
            f.name()
        );
    }
    let schema = aggregate.input.schema();
    if let Some(decimal) = aggregate
        .aggr_expr
        .iter()
        .find(|e| aggregates_decimal(e, schema))
    {
        return plan_err!(
            "{} over protected table {}, grouped by the unit column {}: over a DECIMAL its \
             accumulator can fail on one person's rows (an overflow), and the failure would \
             tell about them. Cast the argument to DOUBLE",
            written(decimal),
            p.names(),
            f.name()
        );
    }
    Ok(Some(Protected {
        tables: p.tables.clone(),
        unit: Unit::Column(j),
        repeats: None,
        unique_units: aggregate.group_expr.len() == 1,
    }))
}

/// Whether `expr` aggregates a DECIMAL argument (or one whose type is unknown), as the windows
/// of `rewrite/total.rs` are checked: `avg`'s accumulator fails where its result does not fit.
fn aggregates_decimal(expr: &Expr, schema: &DFSchema) -> bool {
    expr.exists(|e| {
        Ok(match e {
            Expr::AggregateFunction(f) => f.params.args.iter().any(|a| {
                a.get_type(schema).map_or(true, |t| {
                    matches!(
                        t,
                        DataType::Decimal32(..)
                            | DataType::Decimal64(..)
                            | DataType::Decimal128(..)
                            | DataType::Decimal256(..)
                    )
                })
            }),
            _ => false,
        })
    })
    .unwrap_or(true)
}

/// The contribution-bounding node `extension` is, if it is one.
fn bounding(extension: &Extension) -> Option<&BoundContributions> {
    extension.node.as_any().downcast_ref::<BoundContributions>()
}

/// Whether each value of a window expression depends only on one person's rows: it is
/// partitioned by `unit`.
fn partitioned_by(expr: &Expr, unit: Option<&Column>) -> bool {
    let Some(unit) = unit else {
        return false;
    };
    let mut all = true;
    let mut found_window = false;
    let _ = expr.apply(|e| {
        if let Expr::WindowFunction(window) = e {
            found_window = true;
            let partitioned = window
                .params
                .partition_by
                .iter()
                .any(|p| plain_column(p) == Some(unit));
            if !partitioned {
                all = false;
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found_window && all
}

/// Whether a join's condition equates the left unit column `li` with the right one `ri`
/// (an `ON`/`USING` pair or a conjunct of the join filter).
fn joins_on_units(join: &datafusion::logical_expr::Join, li: usize, ri: usize) -> bool {
    let column = |schema: &DFSchema, i: usize| {
        let (q, f) = schema.qualified_field(i);
        Column::new(q.cloned(), f.name())
    };
    let l = column(join.left.schema(), li);
    let r = column(join.right.schema(), ri);
    let pair = |a: &Expr, b: &Expr| {
        let (a, b) = (plain_column(a), plain_column(b));
        (a == Some(&l) && b == Some(&r)) || (a == Some(&r) && b == Some(&l))
    };
    join.on.iter().any(|(a, b)| pair(a, b))
        || join.filter.as_ref().is_some_and(|filter| {
            split_conjunction(filter).into_iter().any(|c| {
                matches!(c, Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) if pair(left, right))
            })
        })
}
