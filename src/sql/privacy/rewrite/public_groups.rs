//! Public group keys declared as a table: `SET dp.public_groups = 'regions'`.
//!
//! The table's rows are the public GROUP BY keys (its columns are matched to the keys by
//! unqualified name and cast to the keys' types; other columns are ignored). For a grouped DP
//! aggregation the planner rule then rewrites the aggregated input, visibly in `EXPLAIN`:
//!
//! ```text
//! Aggregate: groupBy=[[visits.region]], aggr=[[dp_count(visits.x, ...) FILTER (WHERE NOT __dp_phantom) AS ...]]
//!   Projection: region AS region, x AS x, __dp_phantom     -- back to visits.region, visits.x
//!     Union
//!       Projection: visits.region, visits.x, Boolean(false) AS __dp_phantom
//!         <contribution bounding, for a table protected by a unit>
//!           LeftSemi Join: visits.region = __dp_public_keys.region
//!             TableScan: visits
//!             SubqueryAlias: __dp_public_keys
//!               Aggregate: groupBy=[[region]], aggr=[[]]     -- DISTINCT
//!                 Projection: regions.region AS region     -- (CAST to the key's type if needed)
//!                   TableScan: regions
//!       Projection: __dp_public_keys.region AS region, Int32(NULL) AS x, Boolean(true) AS __dp_phantom
//!         SubqueryAlias: __dp_public_keys
//!           ... the same distinct keys
//! ```
//!
//! (A union's columns are unqualified; the projection above it gives them back the qualified
//! names the aggregation uses, which `EXPLAIN` does not print.)
//!
//! 1. Rows whose key is not declared are dropped (a semi join on the keys, NULL matching
//!    NULL): a key that occurs only in the private data is never released. The join is a
//!    row-by-row filter against a public table, so it comes *before* contribution bounding: a
//!    unit's `dp.max_groups_per_unit` groups are then chosen among declared keys only.
//! 2. One phantom row per distinct declared key (key columns from the table, every other
//!    column NULL, `__dp_phantom = true`) is added *after* bounding (phantom rows belong to no
//!    unit), so every declared key forms exactly one group, with or without data rows.
//! 3. Every aggregate of that aggregation (DP or not) gets `FILTER (WHERE NOT __dp_phantom)`,
//!    AND-ed with its own filter: a phantom row creates its group and counts nothing. A key
//!    without rows is then released like any other group, with noise on zero counts; nothing
//!    is special-cased in the accumulators (which honour the filter).
//!
//! Declaring keys costs no privacy budget and turns private group selection off. The table
//! must itself be public: keys computed from the private data (`SELECT DISTINCT region FROM
//! visits`) are released exactly, as with `'assert'`. Group keys must be plain columns;
//! GROUPING SETS / ROLLUP / CUBE are refused (use `'assert'`).
//!
//! The table is looked up when the query is planned, in the session's catalogs (captured by
//! [`crate::register`]: the catalog list every clone of the session state shares, so tables
//! created later are found; a catalog list swapped in afterwards is not), with the session's
//! default catalog and schema. `SchemaProvider::table` is async while an analyzer
//! rule is not: the lookup is polled once, which answers at once for DataFusion's in-memory,
//! listing and other non-blocking providers; a provider that has to wait (remote catalogs) is
//! waited for on a multi-thread tokio runtime (`block_in_place`) or, outside any runtime, on a
//! private one, and refused with an error on a current-thread runtime, where waiting would
//! block the only thread.

use arrow::compute::can_cast_types;
use datafusion::catalog::{CatalogProviderList, TableProvider};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{
    plan_datafusion_err, plan_err, Column, DFSchema, NullEquality, Result, ScalarValue,
    TableReference,
};
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{
    cast, lit, Aggregate, Expr, JoinType, LogicalPlan, LogicalPlanBuilder, Projection, Union,
};
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// The marker column: true on the phantom rows that stand for the declared keys.
pub const PHANTOM: &str = "__dp_phantom";
/// The alias of the distinct declared keys in the rewritten plan.
pub const KEYS_ALIAS: &str = "__dp_public_keys";

/// A table of public keys, looked up and matched to one aggregation's GROUP BY keys.
#[derive(Debug)]
pub struct DeclaredKeys {
    /// The option value, for error messages.
    name: String,
    /// The GROUP BY key columns, in order, as the aggregated input names them.
    columns: Vec<Column>,
    /// The distinct declared keys, one column per GROUP BY key named by the key's unqualified
    /// name and cast to its type, under [`KEYS_ALIAS`].
    keys: LogicalPlan,
}

fn keys_err<T>(name: &str, what: impl std::fmt::Display) -> Result<T> {
    plan_err!("dp.public_groups = '{name}': {what}")
}

impl DeclaredKeys {
    /// Looks up the table `name` (the value of `dp.public_groups`) and matches its columns to
    /// the GROUP BY keys `group_expr` of an aggregation whose input has schema `input`.
    pub fn resolve(
        name: &str,
        catalogs: Option<&Arc<dyn CatalogProviderList>>,
        config: &ConfigOptions,
        group_expr: &[Expr],
        input: &DFSchema,
    ) -> Result<Self> {
        if group_expr.iter().any(|e| matches!(e, Expr::GroupingSet(_))) {
            return keys_err(
                name,
                "GROUPING SETS, ROLLUP and CUBE are not supported with a table of keys (each \
                 grouping set has its own keys); declare the keys with dp.public_groups = 'assert'",
            );
        }
        let (table, provider) = lookup(name, catalogs, config)?;
        let table_schema = provider.schema();
        let mut columns: Vec<Column> = Vec::with_capacity(group_expr.len());
        let mut projection = Vec::with_capacity(group_expr.len());
        for expr in group_expr {
            let Expr::Column(column) = expr.clone().unalias() else {
                return keys_err(
                    name,
                    format!(
                        "the GROUP BY key {expr} is not a plain column, so it cannot be matched \
                         to a column of the keys table '{table}'; compute the key in a subquery \
                         and group by its column"
                    ),
                );
            };
            if columns.iter().any(|c| c.name == column.name) {
                return keys_err(
                    name,
                    format!(
                        "two GROUP BY keys are named '{}', so the column of the keys table \
                         '{table}' matching each is ambiguous; rename one in a subquery",
                        column.name
                    ),
                );
            }
            let (_, key_field) = input.qualified_field_from_column(&column)?;
            let Ok(declared) = table_schema.field_with_name(&column.name) else {
                return keys_err(
                    name,
                    format!(
                        "the keys table '{table}' has no column '{}' for the GROUP BY key {column} \
                         (its columns: {})",
                        column.name,
                        table_schema
                            .fields()
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            };
            let source = Expr::Column(Column::new(Some(table.clone()), declared.name()));
            let key_type = key_field.data_type();
            let value = if declared.data_type() == key_type {
                source
            } else if can_cast_types(declared.data_type(), key_type) {
                cast(source, key_type.clone())
            } else {
                return keys_err(
                    name,
                    format!(
                        "column '{}' of the keys table '{table}' is {} and cannot be cast to {}, \
                         the type of the GROUP BY key {column}",
                        declared.name(),
                        declared.data_type(),
                        key_type
                    ),
                );
            };
            projection.push(value.alias(&column.name));
            columns.push(column);
        }
        let keys = LogicalPlanBuilder::scan(table, provider_as_source(provider), None)?
            .project(projection)?
            .distinct()?
            .alias(KEYS_ALIAS)?
            .build()?;
        Ok(Self {
            name: name.to_string(),
            columns,
            keys,
        })
    }

    fn key_columns(&self) -> Vec<Column> {
        self.columns
            .iter()
            .map(|c| Column::new(Some(KEYS_ALIAS), &c.name))
            .collect()
    }

    /// `input` without the rows whose key is not declared (NULL keys match a declared NULL).
    pub fn restrict(&self, input: Arc<LogicalPlan>) -> Result<Arc<LogicalPlan>> {
        let plan = LogicalPlanBuilder::from(input)
            .join_detailed(
                self.keys.clone(),
                JoinType::LeftSemi,
                (self.columns.clone(), self.key_columns()),
                None,
                NullEquality::NullEqualsNull,
            )?
            .build()?;
        Ok(Arc::new(plan))
    }

    /// The aggregation over `input` (already restricted and bounded) plus one phantom row per
    /// declared key, its aggregates filtered to the real rows (see the module docs).
    pub fn aggregate(
        &self,
        input: Arc<LogicalPlan>,
        group_expr: Vec<Expr>,
        aggr_expr: Vec<Expr>,
    ) -> Result<Aggregate> {
        let schema = Arc::clone(input.schema());
        if schema.has_column_with_unqualified_name(PHANTOM) {
            return keys_err(
                &self.name,
                format!("the aggregated input already has a column named {PHANTOM}"),
            );
        }
        // The columns the aggregation reads, in input order.
        let mut used = BTreeSet::new();
        for expr in group_expr.iter().chain(&aggr_expr) {
            for column in expr.column_refs() {
                used.insert(schema.index_of_column(column)?);
            }
        }
        let mut key_of = vec![None; schema.fields().len()];
        for (k, column) in self.columns.iter().enumerate() {
            key_of[schema.index_of_column(column)?] = Some(k);
        }
        let declared = self.key_columns();
        // Both sides of the union name each column alike, unqualified (a union's columns
        // are); columns whose names clash (`t1.id`, `t2.id` after a join) get distinct names.
        let mut names: Vec<String> = Vec::with_capacity(used.len() + 1);
        let mut real = Vec::with_capacity(used.len() + 1);
        let mut phantom = Vec::with_capacity(used.len() + 1);
        let mut requalified = Vec::with_capacity(used.len() + 1);
        for &i in &used {
            let (qualifier, field) = schema.qualified_field(i);
            let mut name = field.name().clone();
            if names.contains(&name) {
                name = format!("__dp_{}_{}", names.len(), field.name());
            }
            let column = Expr::Column(Column::new(qualifier.cloned(), field.name()));
            real.push(if name == *field.name() {
                column
            } else {
                column.alias(&name)
            });
            let value = match key_of[i] {
                Some(k) => Expr::Column(declared[k].clone()),
                None => Expr::Literal(ScalarValue::try_from(field.data_type())?, None),
            };
            phantom.push(value.alias(&name));
            // The union's columns are unqualified: give them back the names the aggregation
            // uses.
            requalified.push(
                Expr::Column(Column::new_unqualified(&name))
                    .alias_qualified(qualifier.cloned(), field.name()),
            );
            names.push(name);
        }
        real.push(lit(false).alias(PHANTOM));
        phantom.push(lit(true).alias(PHANTOM));
        requalified.push(Expr::Column(Column::new_unqualified(PHANTOM)));
        let real = LogicalPlanBuilder::from(input).project(real)?.build()?;
        let phantom = LogicalPlanBuilder::from(self.keys.clone())
            .project(phantom)?
            .build()?;
        let union = LogicalPlan::Union(Union::try_new(vec![Arc::new(real), Arc::new(phantom)])?);
        let input = Projection::try_new(requalified, Arc::new(union))?;
        let aggr_expr = aggr_expr
            .into_iter()
            .map(real_rows_only)
            .collect::<Result<Vec<_>>>()?;
        Aggregate::try_new(
            Arc::new(LogicalPlan::Projection(input)),
            group_expr,
            aggr_expr,
        )
    }
}

/// An aggregate expression restricted to the real rows (`NOT __dp_phantom` AND-ed with its
/// filter), keeping its output name.
fn real_rows_only(expr: Expr) -> Result<Expr> {
    match expr {
        Expr::Alias(mut alias) => {
            alias.expr = Box::new(filter_real_rows(*alias.expr)?);
            Ok(Expr::Alias(alias))
        }
        other => {
            let name = other.schema_name().to_string();
            Ok(filter_real_rows(other)?.alias(name))
        }
    }
}

fn filter_real_rows(expr: Expr) -> Result<Expr> {
    match expr {
        Expr::AggregateFunction(mut call) => {
            let not_phantom = !Expr::Column(Column::new_unqualified(PHANTOM));
            call.params.filter = Some(Box::new(match call.params.filter.take() {
                Some(filter) => not_phantom.and(*filter),
                None => not_phantom,
            }));
            Ok(Expr::AggregateFunction(call))
        }
        other => plan_err!(
            "dp.public_groups: cannot restrict the aggregate expression {other} to real rows"
        ),
    }
}

/// The table named `name` in the session's catalogs.
fn lookup(
    name: &str,
    catalogs: Option<&Arc<dyn CatalogProviderList>>,
    config: &ConfigOptions,
) -> Result<(TableReference, Arc<dyn TableProvider>)> {
    let table =
        TableReference::parse_str_normalized(name, !config.sql_parser.enable_ident_normalization);
    let resolved = table.clone().resolve(
        &config.catalog.default_catalog,
        &config.catalog.default_schema,
    );
    let Some(catalogs) = catalogs else {
        return keys_err(
            name,
            "the planner rule has no catalogs to look the table up in (install it with \
             datafusion_dp::register)",
        );
    };
    let schema = catalogs
        .catalog(&resolved.catalog)
        .and_then(|catalog| catalog.schema(&resolved.schema));
    let provider = match schema {
        Some(schema) => poll_now(schema.table(&resolved.table))
            .map_err(|e| plan_datafusion_err!("dp.public_groups = '{name}': {e}"))??,
        None => None,
    };
    match provider {
        Some(provider) => Ok((table, provider)),
        None => keys_err(
            name,
            format!("no table {resolved} to read the public GROUP BY keys from; create it first"),
        ),
    }
}

/// The output of `future`, without blocking when it is ready at once (see the module docs).
fn poll_now<F: Future>(future: F) -> std::result::Result<F::Output, String> {
    let mut future = std::pin::pin!(future);
    if let Poll::Ready(output) = future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        return Ok(output);
    }
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => match handle.runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => {
                Ok(tokio::task::block_in_place(|| handle.block_on(future)))
            }
            _ => Err(
                "the catalog has to wait to look the table up, which the planner cannot do \
                      on a current-thread tokio runtime; use a multi-thread runtime or an \
                      in-memory table of keys"
                    .to_string(),
            ),
        },
        Err(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map(|runtime| runtime.block_on(future))
            .map_err(|e| format!("cannot start a runtime to look the table up: {e}")),
    }
}
