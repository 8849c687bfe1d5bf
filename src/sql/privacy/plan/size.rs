//! The size of what an analyst's statement makes the process build and run, bounded before
//! anything runs (issue 41: "the limits are checked on the plan that runs").
//!
//! [`crate::sql::privacy::session::limits`] bounds the statement as written (256 KiB, 256
//! levels). What runs is larger:
//! - **CTEs and subqueries are inlined.** A CTE referenced twice is planned twice, so a chain
//!   of CTEs that each read the previous one twice doubles the plan per level; and the
//!   optimiser replaces a column by the expression that computes it when it merges two
//!   projections or pushes a filter through one. Forty CTEs of `x + 1 + ... (200 terms)`, each
//!   under the nesting limit, became one expression 8,000 levels deep, evaluated recursively
//!   on a tokio worker's 2 MiB stack: an answer without one patient, a stack overflow (abort,
//!   exit 134) with them (issue 41).
//! - **Types have sizes.** A cast to `FixedSizeList(2147483647, Int64)` makes Arrow allocate
//!   rows x 16 GiB up front; gated by `CASE` on one person's rows it took 0.37 s and 0.8 GB
//!   with them (a size of 10^8) and a few ms without, and the same cast of a `NULL` literal
//!   killed the process at planning, when the optimiser folds it. The declared size is a type
//!   parameter, not a row's value, so the per-row caps of the total forms
//!   ([`crate::sql::privacy::udf::total`]) never see it.
//!
//! [`check_plan`] walks a plan before it is analysed, charged or optimised, every CTE
//! reference and subquery expanded (a shared subtree is walked once and counted as often as it
//! is referenced, so the walk is linear in the plan as written even when the expansion is
//! exponential), and refuses it, naming the limit, when:
//! - its operators are more than [`MAX_PLAN_DEPTH`] deep;
//! - an expression is more than [`MAX_EXPRESSION_DEPTH`] levels deep once every column is
//!   replaced by the expression that computes it (the most any merging of projections or
//!   pushing of filters can make of it: an aggregation's, a window's or a scan's output is a
//!   column of its own);
//! - its operators and expression nodes, so counted, are more than [`MAX_PLAN_SIZE`];
//! - any type it computes (an output column, a cast, any subexpression), at any depth of
//!   nesting, has a fixed part per value over [`max_value_bytes`]: 64 KiB
//!   ([`MAX_OUTPUT_BYTES`], the most any value may take), and at most
//!   [`MAX_FIXED_ARRAY_BYTES`] for a batch of the session's `batch_size` rows.
//!
//! Each decision reads the statement and the session's settings only, never a row, so it is
//! the same on neighbouring tables. Within the limits, evaluation takes at most
//! [`MAX_EXPRESSION_DEPTH`] nested calls per expression and polls at most a few streams per
//! operator of [`MAX_PLAN_DEPTH`]: far within the stacks of the threads that execute
//! analysts' queries ([`crate::sql::privacy::session::limits::EXECUTION_STACK_BYTES`]).
//! [`check_optimized`] and [`check_physical`] measure the plan that actually runs (after
//! the optimiser, and after physical planning) against [`SECOND_LINE`] times the same limits,
//! as a second line.

use arrow::datatypes::{DataType, FieldRef, UnionMode};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{plan_err, Column, DFSchema, Result};
use datafusion::logical_expr::type_coercion::binary::BinaryTypeCoercer;
use datafusion::logical_expr::type_coercion::functions::fields_with_udf;
use datafusion::logical_expr::{
    Expr, ExprSchemable, JoinType, LogicalPlan, ReturnFieldArgs, Subquery,
};
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

/// The deepest plan, in operators from its root to its deepest leaf, every CTE and subquery
/// inlined (`max_plan_depth`). A chain of 250 joins is about 500 deep.
pub const MAX_PLAN_DEPTH: u32 = 1_024;

/// The deepest expression, in nested operators and calls, once every column is replaced by
/// the expression that computes it (`max_expression_depth`): as deep as one statement may
/// nest ([`crate::sql::privacy::session::limits::MAX_NESTING_DEPTH`]).
pub const MAX_EXPRESSION_DEPTH: u32 = 256;

/// The most operators and expression nodes of a plan, every CTE and subquery inlined and every
/// column replaced by the expression that computes it (`max_plan_size`). A statement of the
/// largest size (256 KiB) has at most about 50,000.
pub const MAX_PLAN_SIZE: u64 = 1_000_000;

/// The most bytes any one value may take, whatever the batch size (`max_value_bytes` at small
/// batches): the largest fixed width of a type, and the per-row cap of a total form's output
/// (`crate::sql::privacy::udf::total::row_cap`).
pub const MAX_OUTPUT_BYTES: u64 = 1 << 16;

/// The most bytes the fixed part of one batch's array of one type may take
/// (`max_fixed_array_bytes`): 64 MiB, far below any memory an owner gives a query, so that no
/// cast or operator allocates more for a type than the memory pool would grant for its rows.
pub const MAX_FIXED_ARRAY_BYTES: u64 = 64 * 1024 * 1024;

/// The deepest nesting of a type (`max_type_depth`): a list of lists of ..., 64 levels.
/// Arrow's kernels recurse once per level of a type (casts, comparisons, the row format), and a
/// chain of aggregations (`array_agg` of `array_agg` of ...) nests one level per CTE without
/// making any expression deeper.
pub const MAX_TYPE_DEPTH: usize = 64;

/// The largest fixed part one value of a type may have at `batch_size` rows a batch
/// (`max_value_bytes`): [`MAX_OUTPUT_BYTES`] (64 KiB), and at most [`MAX_FIXED_ARRAY_BYTES`]
/// for the batch (8 KiB at the default 8,192 rows).
pub fn max_value_bytes(batch_size: usize) -> u64 {
    MAX_OUTPUT_BYTES.min(MAX_FIXED_ARRAY_BYTES / (batch_size.max(1) as u64))
}

/// The bytes one value of `data_type` takes whatever the data: its own width (a fixed-size
/// list or binary's whole content, a struct's fields together, a string's or list's offset),
/// not the variable-length contents of strings and lists.
pub fn fixed_width(data_type: &DataType) -> u64 {
    use DataType::*;
    if let Some(width) = data_type.primitive_width() {
        return width as u64;
    }
    match data_type {
        Null => 0,
        Boolean => 1,
        Binary | Utf8 | List(_) | Map(..) => 4,
        LargeBinary | LargeUtf8 | LargeList(_) | ListView(_) => 8,
        BinaryView | Utf8View | LargeListView(_) => 16,
        FixedSizeBinary(n) => (*n).max(0) as u64,
        FixedSizeList(field, n) => {
            fixed_width(field.data_type()).saturating_mul((*n).max(0) as u64)
        }
        Struct(fields) => fields.iter().fold(0u64, |sum, f| {
            sum.saturating_add(fixed_width(f.data_type()))
        }),
        Union(fields, UnionMode::Sparse) => fields.iter().fold(1u64, |sum, (_, f)| {
            sum.saturating_add(fixed_width(f.data_type()))
        }),
        Union(_, UnionMode::Dense) => 5,
        Dictionary(key, _) => fixed_width(key),
        RunEndEncoded(ends, _) => fixed_width(ends.data_type()),
        // Every other type is primitive (handled above).
        _ => 16,
    }
}

/// Refuses `data_type` when it, or any type nested in it, takes more than `limit` bytes a
/// value ([`fixed_width`]): an array of a list of fixed-size lists allocates each element's
/// full width too.
pub fn check_type(data_type: &DataType, batch_size: usize) -> Result<()> {
    let limit = max_value_bytes(batch_size);
    let mut pending = vec![(data_type, 1usize)];
    while let Some((t, depth)) = pending.pop() {
        if depth > MAX_TYPE_DEPTH {
            return plan_err!(
                "a value of type nested over the limit of {MAX_TYPE_DEPTH} levels \
                 (max_type_depth); the statement was refused before it ran"
            );
        }
        let width = fixed_width(t);
        if width > limit {
            let part = match t == data_type {
                true => String::new(),
                false => format!(" (its part {t})"),
            };
            return plan_err!(
                "a value of type {data_type}{part} takes {width} bytes whatever its data, \
                 over the limit of {limit} bytes a value at {batch_size} rows a batch \
                 (max_value_bytes: {MAX_OUTPUT_BYTES} bytes, and at most \
                 {MAX_FIXED_ARRAY_BYTES} bytes for a batch: max_fixed_array_bytes); the \
                 statement was refused before it ran"
            );
        }
        fn child(f: &FieldRef) -> &DataType {
            f.data_type()
        }
        let below = depth + 1;
        match t {
            DataType::List(f)
            | DataType::LargeList(f)
            | DataType::ListView(f)
            | DataType::LargeListView(f)
            | DataType::FixedSizeList(f, _)
            | DataType::Map(f, _) => pending.push((child(f), below)),
            DataType::Struct(fields) => pending.extend(fields.iter().map(|f| (child(f), below))),
            DataType::Union(fields, _) => {
                pending.extend(fields.iter().map(|(_, f)| (child(f), below)))
            }
            DataType::Dictionary(_, value) => pending.push((value, below)),
            DataType::RunEndEncoded(_, values) => pending.push((child(values), below)),
            _ => {}
        }
    }
    Ok(())
}

/// What the optimiser can make of one output column of a plan node: the depth and number of
/// nodes of the expression that computes it, with every column it reads replaced in turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Inlined {
    depth: u32,
    nodes: u64,
}

impl Inlined {
    /// A column of its own (a scan's, an aggregation's, a window's, a literal).
    const LEAF: Inlined = Inlined { depth: 1, nodes: 1 };

    fn max(self, other: Inlined) -> Inlined {
        Inlined {
            depth: self.depth.max(other.depth),
            nodes: self.nodes.max(other.nodes),
        }
    }
}

/// One plan node, every reference expanded: its operators and expression nodes counted as
/// [`check_plan`] counts them, its depth, and what each output column inlines to.
#[derive(Debug)]
struct Expanded {
    size: u64,
    depth: u32,
    columns: Vec<Inlined>,
}

/// The walk of [`check_plan`]: each distinct node (by address) measured once.
struct Walk {
    batch_size: usize,
    seen: HashMap<*const LogicalPlan, Rc<Expanded>>,
}

/// Refuses `plan` (a statement's plan, before it is analysed, optimised or run; its
/// subqueries included) over [`MAX_PLAN_DEPTH`], [`MAX_EXPRESSION_DEPTH`], [`MAX_PLAN_SIZE`]
/// or a type's [`max_value_bytes`] (module docs). Linear in the plan as written.
pub fn check_plan(plan: &LogicalPlan, config: &ConfigOptions) -> Result<()> {
    let mut walk = Walk {
        batch_size: config.execution.batch_size.into(),
        seen: HashMap::new(),
    };
    walk.node(plan, 1).map(|_| ())
}

/// The plans of the subqueries in `plan`'s own expressions.
fn subqueries(plan: &LogicalPlan) -> Result<Vec<Arc<LogicalPlan>>> {
    let mut found = Vec::new();
    plan.apply_expressions(|expr| {
        expr.apply(|e| {
            let subquery: Option<&Subquery> = match e {
                Expr::ScalarSubquery(s) => Some(s),
                Expr::Exists(exists) => Some(&exists.subquery),
                Expr::InSubquery(in_subquery) => Some(&in_subquery.subquery),
                Expr::SetComparison(comparison) => Some(&comparison.subquery),
                _ => None,
            };
            if let Some(subquery) = subquery {
                found.push(Arc::clone(&subquery.subquery));
            }
            Ok(TreeNodeRecursion::Continue)
        })
    })?;
    Ok(found)
}

impl Walk {
    /// `plan` expanded, at `level` operators from the root.
    #[recursive::recursive]
    fn node(&mut self, plan: &LogicalPlan, level: u32) -> Result<Rc<Expanded>> {
        if level > MAX_PLAN_DEPTH {
            return plan_err!(
                "plan too deep: with its CTEs and subqueries inlined, it is over the limit of \
                 {MAX_PLAN_DEPTH} operators deep (max_plan_depth); the statement was refused \
                 before it ran"
            );
        }
        let key = plan as *const LogicalPlan;
        if let Some(done) = self.seen.get(&key) {
            // The same subtree again (a CTE referenced twice): its depth from here may be
            // larger than where it was first met.
            if level.saturating_add(done.depth) > MAX_PLAN_DEPTH + 1 {
                return self.too_deep();
            }
            return Ok(Rc::clone(done));
        }
        let inputs = plan.inputs();
        let mut children = Vec::with_capacity(inputs.len());
        for input in &inputs {
            children.push(self.node(input, level + 1)?);
        }
        let subqueries = subqueries(plan)?;
        let mut size: u64 = 1;
        let mut depth: u32 = 1;
        for child in &children {
            size = size.saturating_add(child.size);
            depth = depth.max(child.depth.saturating_add(1));
        }
        for subquery in &subqueries {
            let expanded = self.node(subquery, level + 1)?;
            size = size.saturating_add(expanded.size);
            depth = depth.max(expanded.depth.saturating_add(1));
        }
        if level.saturating_add(depth) > MAX_PLAN_DEPTH + 1 {
            return self.too_deep();
        }
        // Every expression of the node, inlined through its inputs' columns.
        let lookup = Lookup {
            inputs: &inputs,
            columns: &children,
        };
        let mut expressions: Vec<Inlined> = Vec::new();
        plan.apply_expressions(|expr| {
            let inlined = inline(expr, &lookup)?;
            size = size.saturating_add(inlined.nodes);
            expressions.push(inlined);
            Ok(TreeNodeRecursion::Continue)
        })?;
        if size > MAX_PLAN_SIZE {
            return plan_err!(
                "plan too large: with its CTEs and subqueries inlined and each column replaced \
                 by the expression that computes it, it is over the limit of {MAX_PLAN_SIZE} \
                 operators and expression nodes (max_plan_size); the statement was refused \
                 before it ran"
            );
        }
        let columns = output_columns(plan, &children, &expressions);
        self.check_types(plan, &inputs)?;
        let expanded = Rc::new(Expanded {
            size,
            depth,
            columns,
        });
        self.seen.insert(key, Rc::clone(&expanded));
        Ok(expanded)
    }

    fn too_deep<T>(&self) -> Result<T> {
        plan_err!(
            "plan too deep: with its CTEs and subqueries inlined, it is over the limit of \
             {MAX_PLAN_DEPTH} operators deep (max_plan_depth); the statement was refused \
             before it ran"
        )
    }

    /// Refuses a type of `plan`'s output, or of any subexpression of its expressions, over
    /// [`max_value_bytes`].
    fn check_types(&self, plan: &LogicalPlan, inputs: &[&LogicalPlan]) -> Result<()> {
        for field in plan.schema().fields() {
            check_type(field.data_type(), self.batch_size)?;
        }
        let schema: DFSchema = match (plan, inputs) {
            (LogicalPlan::TableScan(scan), _) => {
                DFSchema::try_from_qualified_schema(scan.table_name.clone(), &scan.source.schema())?
            }
            (_, []) => DFSchema::empty(),
            (_, [only]) => only.schema().as_ref().clone(),
            (_, [first, rest @ ..]) => rest
                .iter()
                .try_fold(first.schema().as_ref().clone(), |merged, other| {
                    merged.join(other.schema())
                })
                .unwrap_or_else(|_| plan.schema().as_ref().clone()),
        };
        let batch_size = self.batch_size;
        plan.apply_expressions(|expr| {
            typed(expr, &schema, batch_size)?;
            Ok(TreeNodeRecursion::Continue)
        })?;
        Ok(())
    }
}

/// The columns of a node's inputs, for [`inline`].
struct Lookup<'a> {
    inputs: &'a [&'a LogicalPlan],
    columns: &'a [Rc<Expanded>],
}

impl Lookup<'_> {
    fn column(&self, column: &Column) -> Inlined {
        for (input, expanded) in self.inputs.iter().zip(self.columns) {
            if let Some(i) = input.schema().maybe_index_of_column(column) {
                return expanded.columns.get(i).copied().unwrap_or(Inlined::LEAF);
            }
        }
        Inlined::LEAF
    }
}

/// `expr` with every column replaced by what it inlines to; refuses it over
/// [`MAX_EXPRESSION_DEPTH`] (or [`MAX_PLAN_SIZE`] nodes on its own).
#[recursive::recursive]
fn inline(expr: &Expr, lookup: &Lookup) -> Result<Inlined> {
    let inlined = match expr {
        Expr::Column(column) => lookup.column(column),
        // An alias is a name, not a level of evaluation.
        Expr::Alias(alias) => inline(&alias.expr, lookup)?,
        // A subquery's plan is a child of the node (its own expressions are measured there).
        Expr::ScalarSubquery(_) | Expr::Exists(_) => Inlined::LEAF,
        _ => {
            let mut depth = 0u32;
            let mut nodes = 1u64;
            let mut failed = None;
            expr.apply_children(|child| {
                match inline(child, lookup) {
                    Ok(c) => {
                        depth = depth.max(c.depth);
                        nodes = nodes.saturating_add(c.nodes);
                    }
                    Err(e) => {
                        failed = Some(e);
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
            Inlined {
                depth: depth.saturating_add(1),
                nodes,
            }
        }
    };
    if inlined.depth > MAX_EXPRESSION_DEPTH {
        return plan_err!(
            "expression too deep: with the CTEs and subqueries it reads inlined (each column \
             replaced by the expression that computes it, as the optimiser may do), it is over \
             the limit of {MAX_EXPRESSION_DEPTH} levels (max_expression_depth); the statement \
             was refused before it ran"
        );
    }
    if inlined.nodes > MAX_PLAN_SIZE {
        return plan_err!(
            "plan too large: with the CTEs and subqueries it reads inlined and each column \
             replaced by the expression that computes it, one expression is over the limit of \
             {MAX_PLAN_SIZE} nodes (max_plan_size); the statement was refused before it ran"
        );
    }
    Ok(inlined)
}

/// What each output column of `plan` inlines to, from its inputs' (`children`) and its own
/// expressions' (`expressions`, in `apply_expressions` order).
fn output_columns(
    plan: &LogicalPlan,
    children: &[Rc<Expanded>],
    expressions: &[Inlined],
) -> Vec<Inlined> {
    let width = plan.schema().fields().len();
    let passed = |i: usize| -> Vec<Inlined> {
        children
            .get(i)
            .map(|c| c.columns.clone())
            .unwrap_or_default()
    };
    // The worst column of every input, for every output column: always an upper bound.
    let worst = || {
        let worst = children
            .iter()
            .flat_map(|c| c.columns.iter().copied())
            .fold(Inlined::LEAF, Inlined::max);
        vec![worst; width]
    };
    let columns = match plan {
        LogicalPlan::Projection(_) => expressions.to_vec(),
        // Computed here, then read as columns: nothing above inlines through them.
        LogicalPlan::Aggregate(_)
        | LogicalPlan::TableScan(_)
        | LogicalPlan::EmptyRelation(_)
        | LogicalPlan::Values(_)
        | LogicalPlan::Explain(_)
        | LogicalPlan::Analyze(_)
        | LogicalPlan::Statement(_)
        | LogicalPlan::DescribeTable(_)
        | LogicalPlan::Ddl(_)
        | LogicalPlan::Dml(_)
        | LogicalPlan::Copy(_) => vec![Inlined::LEAF; width],
        LogicalPlan::Window(_) => {
            let mut columns = passed(0);
            columns.resize(width, Inlined::LEAF);
            columns
        }
        LogicalPlan::Join(join) => {
            let (left, right) = (passed(0), passed(1));
            match join.join_type {
                JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full => {
                    left.into_iter().chain(right).collect()
                }
                JoinType::LeftSemi | JoinType::LeftAnti => left,
                JoinType::RightSemi | JoinType::RightAnti => right,
                JoinType::LeftMark => left.into_iter().chain([Inlined::LEAF]).collect(),
                JoinType::RightMark => right.into_iter().chain([Inlined::LEAF]).collect(),
            }
        }
        LogicalPlan::Union(_) | LogicalPlan::RecursiveQuery(_) => {
            let mut columns = vec![Inlined::LEAF; width];
            for child in children {
                for (c, inlined) in columns.iter_mut().zip(&child.columns) {
                    *c = c.max(*inlined);
                }
            }
            columns
        }
        LogicalPlan::Filter(_)
        | LogicalPlan::Sort(_)
        | LogicalPlan::Limit(_)
        | LogicalPlan::Repartition(_)
        | LogicalPlan::SubqueryAlias(_)
        | LogicalPlan::Subquery(_)
        | LogicalPlan::Distinct(_) => passed(0),
        _ => worst(),
    };
    if columns.len() == width {
        columns
    } else {
        worst()
    }
}

/// The type of `expr` over `schema`, computed bottom up (each node from its children's types,
/// so once per node: asking `get_type` at every node costs the subtree's size each time), and
/// every type on the way checked with [`check_type`]. `None` where a type cannot be told
/// (the statement is then left to DataFusion's planner, which fails on it).
#[recursive::recursive]
fn typed(expr: &Expr, schema: &DFSchema, batch_size: usize) -> Result<Option<DataType>> {
    let mut children: Vec<Option<DataType>> = Vec::new();
    expr.apply_children(|child| {
        children.push(typed(child, schema, batch_size)?);
        Ok(TreeNodeRecursion::Continue)
    })?;
    let known = || children.iter().cloned().collect::<Option<Vec<DataType>>>();
    let data_type = match expr {
        Expr::Column(column) => schema
            .qualified_field_from_column(column)
            .ok()
            .map(|(_, f)| f)
            .map(|f| f.data_type().clone()),
        Expr::Literal(value, _) => Some(value.data_type()),
        Expr::Alias(_) | Expr::Negative(_) => children.first().cloned().flatten(),
        Expr::Cast(cast) => Some(cast.field.data_type().clone()),
        Expr::TryCast(cast) => Some(cast.field.data_type().clone()),
        Expr::BinaryExpr(binary) => match known().as_deref() {
            Some([left, right]) => BinaryTypeCoercer::new(left, &binary.op, right)
                .get_result_type()
                .ok(),
            _ => None,
        },
        Expr::ScalarFunction(call) => known().and_then(|types| {
            let fields: Vec<FieldRef> = types
                .into_iter()
                .enumerate()
                .map(|(i, t)| Arc::new(arrow::datatypes::Field::new(format!("a{i}"), t, true)))
                .collect();
            let fields = fields_with_udf(&fields, call.func.as_ref()).ok()?;
            let scalars: Vec<_> = call
                .args
                .iter()
                .map(|a| match a {
                    Expr::Literal(value, _) => Some(value),
                    _ => None,
                })
                .collect();
            call.func
                .return_field_from_args(ReturnFieldArgs {
                    arg_fields: &fields,
                    scalar_arguments: &scalars,
                })
                .ok()
                .map(|f| f.data_type().clone())
        }),
        Expr::Not(_)
        | Expr::IsNull(_)
        | Expr::IsNotNull(_)
        | Expr::IsTrue(_)
        | Expr::IsFalse(_)
        | Expr::IsUnknown(_)
        | Expr::IsNotTrue(_)
        | Expr::IsNotFalse(_)
        | Expr::IsNotUnknown(_)
        | Expr::Like(_)
        | Expr::SimilarTo(_)
        | Expr::Between(_)
        | Expr::InList(_)
        | Expr::Exists(_)
        | Expr::InSubquery(_) => Some(DataType::Boolean),
        // Aggregates, windows, CASE and the rest: DataFusion's own typing (their arguments
        // were typed and checked above).
        other => other.get_type(schema).ok(),
    };
    if let Some(t) = &data_type {
        check_type(t, batch_size)?;
    }
    Ok(data_type)
}

/// The second line ([`check_optimized`], [`check_physical`]) allows this many times the
/// limits: it is there to catch a bound of [`check_plan`] that failed, which would show as a
/// plan many times over them, not the few levels the optimiser and the physical planner add (an
/// `IN` list of three turned into `OR`s, a projection per join, exchanges), which would refuse
/// a query after its charge.
pub const SECOND_LINE: usize = 4;

/// Refuses an optimised plan (the plan that will run, as the physical planner receives it)
/// over [`SECOND_LINE`] times [`MAX_PLAN_DEPTH`] deep or with an expression over
/// [`SECOND_LINE`] times [`MAX_EXPRESSION_DEPTH`] levels: [`check_plan`] bounds both before
/// the plan is optimised, so this is a second line.
pub fn check_optimized(plan: &LogicalPlan) -> Result<()> {
    let expression_limit = SECOND_LINE * MAX_EXPRESSION_DEPTH as usize;
    let plan_limit = SECOND_LINE * MAX_PLAN_DEPTH as usize;
    let mut deepest_expression = 0usize;
    let depth = plan_depth(plan, &mut |node| {
        let _ = node.apply_expressions(|expr| {
            deepest_expression = deepest_expression.max(expression_depth(expr));
            Ok(TreeNodeRecursion::Continue)
        });
    })?;
    if deepest_expression > expression_limit {
        return plan_err!(
            "expression too deep after optimisation: {deepest_expression} levels, over \
             {SECOND_LINE} times the limit of {MAX_EXPRESSION_DEPTH} (max_expression_depth)"
        );
    }
    if depth > plan_limit {
        return plan_err!(
            "plan too deep after optimisation: {depth} operators, over {SECOND_LINE} times \
             the limit of {MAX_PLAN_DEPTH} (max_plan_depth)"
        );
    }
    Ok(())
}

#[recursive::recursive]
fn plan_depth(plan: &LogicalPlan, visit: &mut dyn FnMut(&LogicalPlan)) -> Result<usize> {
    visit(plan);
    let mut deepest = 0;
    for input in plan.inputs() {
        deepest = deepest.max(plan_depth(input, visit)?);
    }
    for subquery in subqueries(plan)? {
        deepest = deepest.max(plan_depth(&subquery, visit)?);
    }
    Ok(deepest + 1)
}

/// The depth of `expr`, aliases not counted.
#[recursive::recursive]
fn expression_depth(expr: &Expr) -> usize {
    let mut deepest = 0;
    let _ = expr.apply_children(|child| {
        deepest = deepest.max(expression_depth(child));
        Ok(TreeNodeRecursion::Continue)
    });
    match expr {
        Expr::Alias(_) => deepest,
        _ => deepest + 1,
    }
}

/// Refuses a physical plan over [`SECOND_LINE`] times [`MAX_PLAN_DEPTH`] operators deep, or
/// with a physical expression over [`SECOND_LINE`] times [`MAX_EXPRESSION_DEPTH`] levels: the
/// plan that will be executed, measured as it will recurse (a second line behind
/// [`check_plan`]).
pub fn check_physical(plan: &Arc<dyn ExecutionPlan>) -> Result<()> {
    let plan_limit = SECOND_LINE * MAX_PLAN_DEPTH as usize;
    let expression_limit = SECOND_LINE * MAX_EXPRESSION_DEPTH as usize;
    let mut pending = vec![(Arc::clone(plan), 1usize)];
    while let Some((node, depth)) = pending.pop() {
        if depth > plan_limit {
            return plan_err!(
                "physical plan too deep: over {SECOND_LINE} times the limit of \
                 {MAX_PLAN_DEPTH} operators (max_plan_depth)"
            );
        }
        let mut deepest = 0usize;
        node.apply_expressions(&mut |expr| {
            deepest = deepest.max(physical_depth(expr, expression_limit));
            Ok(TreeNodeRecursion::Continue)
        })?;
        if deepest > expression_limit {
            return plan_err!(
                "expression too deep after physical planning: over {SECOND_LINE} times the \
                 limit of {MAX_EXPRESSION_DEPTH} levels (max_expression_depth)"
            );
        }
        for child in node.children() {
            pending.push((Arc::clone(child), depth + 1));
        }
    }
    Ok(())
}

/// The depth of a physical expression, or a depth over `limit` (iteratively: it is measured
/// to be refused).
fn physical_depth(expr: &Arc<dyn PhysicalExpr>, limit: usize) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(Arc::clone(expr), 1usize)];
    while let Some((node, depth)) = pending.pop() {
        deepest = deepest.max(depth);
        if depth > limit {
            break;
        }
        for child in node.children() {
            pending.push((Arc::clone(child), depth + 1));
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{SessionConfig, SessionContext};

    /// `sql` planned (not analysed, not optimised) and checked in a session of `batch_size`
    /// rows a batch: `Ok`, or the refusal's text.
    async fn check(sql: &str, batch_size: usize) -> std::result::Result<(), String> {
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_batch_size(batch_size));
        ctx.sql("CREATE TABLE t (x BIGINT, s VARCHAR) AS VALUES (1, 'a')")
            .await
            .unwrap();
        let state = ctx.state();
        let plan = state.create_logical_plan(sql).await.unwrap();
        check_plan(&plan, state.config_options()).map_err(|e| e.to_string())
    }

    /// `n` CTEs, each `x` plus `terms` ones over the previous: written, each is `terms` deep.
    fn chain(n: usize, terms: usize) -> String {
        let plus = " + 1".repeat(terms);
        let mut ctes = vec!["c0 AS (SELECT x FROM t)".to_string()];
        for i in 1..=n {
            ctes.push(format!("c{i} AS (SELECT x{plus} AS x FROM c{})", i - 1));
        }
        format!("WITH {} SELECT x FROM c{n}", ctes.join(", "))
    }

    #[tokio::test]
    async fn a_cte_chain_counts_as_deep_as_it_inlines() {
        // 4 x 50 levels: within 256; 40 x 50 (the shape that overflowed a worker's stack):
        // refused, though each CTE is 50 deep as written.
        assert_eq!(check(&chain(4, 50), 8192).await, Ok(()));
        let refused = check(&chain(40, 50), 8192).await.unwrap_err();
        assert!(refused.contains("max_expression_depth"), "{refused}");
        // A filter on the last CTE inlines through every level too.
        let filtered = format!("{} WHERE x > 0", chain(6, 50));
        let refused = check(&filtered, 8192).await.unwrap_err();
        assert!(refused.contains("max_expression_depth"), "{refused}");
        // Behind an aggregation the column starts anew.
        let grouped = format!(
            "WITH a AS ({}), b AS (SELECT max(x) AS x FROM a) SELECT x{} FROM b",
            chain(4, 50),
            " + 1".repeat(50)
        );
        assert_eq!(check(&grouped, 8192).await, Ok(()));
    }

    /// A plan that reads one subtree twice per level (as a CTE read twice is planned: the
    /// SQL statement is refused before planning, `limits::check_table_references`) is
    /// counted with every copy, and walked once per distinct node.
    #[test]
    fn a_subtree_read_twice_a_level_counts_every_copy() {
        use datafusion::logical_expr::{table_scan, LogicalPlanBuilder};
        let schema = arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new(
            "x",
            DataType::Int64,
            true,
        )]);
        let doubled = |levels: usize| {
            let mut plan = Arc::new(
                table_scan(Some("t"), &schema, None)
                    .unwrap()
                    .build()
                    .unwrap(),
            );
            for _ in 0..levels {
                let left = LogicalPlanBuilder::from(Arc::clone(&plan))
                    .alias("a")
                    .unwrap();
                let right = LogicalPlanBuilder::from(Arc::clone(&plan))
                    .alias("b")
                    .unwrap()
                    .build()
                    .unwrap();
                let joined = left.cross_join(right).unwrap();
                plan = Arc::new(
                    joined
                        .project(vec![datafusion::prelude::col("a.x")])
                        .unwrap()
                        .build()
                        .unwrap(),
                );
            }
            plan
        };
        let config = ConfigOptions::default();
        assert!(check_plan(&doubled(10), &config).is_ok());
        let refused = check_plan(&doubled(60), &config).unwrap_err().to_string();
        assert!(refused.contains("max_plan_size"), "{refused}");
    }

    #[tokio::test]
    async fn types_of_a_fixed_size_past_the_limit_are_refused() {
        for (sql, refused) in [
            (
                "SELECT arrow_cast(NULL, 'FixedSizeList(2147483647, Int64)')",
                true,
            ),
            ("SELECT arrow_cast(x, 'FixedSizeBinary(16)') FROM t", false),
            (
                "SELECT arrow_cast(s, 'FixedSizeBinary(100000)') FROM t",
                true,
            ),
            // Only inside an expression, not in any output column.
            (
                "SELECT x FROM t WHERE arrow_cast(NULL, 'FixedSizeList(100000, Int64)') IS NULL",
                true,
            ),
            // Nested: a list of wide values allocates each element's width.
            (
                "SELECT make_array(arrow_cast(NULL, 'FixedSizeList(100000, Int8)')) FROM t",
                true,
            ),
            (
                "SELECT arrow_cast(NULL, 'List(FixedSizeBinary(1000000))')",
                true,
            ),
            // Within the limit at 8,192 rows a batch (8 KiB a value).
            (
                "SELECT arrow_cast(NULL, 'FixedSizeList(1000, Float64)')",
                false,
            ),
            (
                "SELECT arrow_cast(NULL, 'FixedSizeList(1100, Float64)')",
                true,
            ),
        ] {
            match check(sql, 8192).await {
                Ok(()) => assert!(!refused, "{sql}: answered"),
                Err(e) => {
                    assert!(refused, "{sql}: {e}");
                    assert!(e.contains("max_value_bytes"), "{e}");
                }
            }
        }
    }

    #[tokio::test]
    async fn a_struct_doubled_per_level_is_refused_where_it_passes_the_limit() {
        // 1,000 bytes doubled per CTE: 2, 4, 8 KB fit at 8,192 rows a batch; 16 KB does not.
        let mut ctes =
            vec!["c0 AS (SELECT arrow_cast(NULL, 'FixedSizeBinary(1000)') AS x)".to_string()];
        for i in 1..=4 {
            ctes.push(format!(
                "c{i} AS (SELECT named_struct('a', x, 'b', x) AS x FROM c{})",
                i - 1
            ));
        }
        let sql = |last: usize| format!("WITH {} SELECT x FROM c{last}", ctes.join(", "));
        assert_eq!(check(&sql(3), 8192).await, Ok(()));
        assert!(check(&sql(4), 8192).await.is_err());
    }

    #[tokio::test]
    async fn a_type_nested_past_the_limit_is_refused() {
        // One level of list per CTE, each an aggregation (no expression grows).
        let chain = |n: usize| {
            let mut ctes = vec!["c0 AS (SELECT x FROM t)".to_string()];
            for i in 1..=n {
                ctes.push(format!(
                    "c{i} AS (SELECT array_agg(x) AS x FROM c{})",
                    i - 1
                ));
            }
            format!("WITH {} SELECT x FROM c{n}", ctes.join(", "))
        };
        assert_eq!(check(&chain(10), 8192).await, Ok(()));
        let refused = check(&chain(70), 8192).await.unwrap_err();
        assert!(refused.contains("max_type_depth"), "{refused}");
    }

    #[tokio::test]
    async fn the_limit_on_a_value_follows_the_batch_size() {
        let sql = "SELECT arrow_cast(NULL, 'FixedSizeBinary(4096)')";
        assert_eq!(check(sql, 8192).await, Ok(()));
        assert!(check(sql, 65536)
            .await
            .unwrap_err()
            .contains("65536 rows a batch"));
        // Never more than 64 KiB a value, however small the batches.
        let big = "SELECT arrow_cast(NULL, 'FixedSizeBinary(70000)')";
        assert!(check(big, 8).await.is_err());
    }

    #[test]
    fn fixed_widths() {
        use arrow::datatypes::Field;
        let fsl =
            |t: DataType, n: i32| DataType::FixedSizeList(Arc::new(Field::new("i", t, true)), n);
        assert_eq!(fixed_width(&DataType::Int64), 8);
        assert_eq!(fixed_width(&DataType::Utf8), 4);
        assert_eq!(fixed_width(&DataType::FixedSizeBinary(16)), 16);
        assert_eq!(fixed_width(&fsl(DataType::Int32, 10)), 40);
        assert_eq!(fixed_width(&fsl(fsl(DataType::Int8, 10), 10)), 100);
        assert_eq!(
            fixed_width(&fsl(DataType::Int64, i32::MAX)),
            8 * i32::MAX as u64
        );
        let fields = vec![
            Field::new("a", DataType::Decimal128(38, 0), true),
            Field::new("b", fsl(DataType::Float64, 4), true),
        ];
        assert_eq!(fixed_width(&DataType::Struct(fields.into())), 48);
    }
}
