//! Scans of protected tables show the optimiser no statistics.
//!
//! DataFusion's optimiser chooses plans from statistics, and for Parquet those are exact: the
//! row count, each column's minimum and maximum. A choice made from them shows in `EXPLAIN`:
//! the hash join's build side is the smaller input, so joining a protected table with `n`
//! constants and moving `n` until the sides swap gave the exact row count, and a filter
//! `income > X` beside an empty one gave the exact maximum income by bisection, for a DP call
//! of ε = 1e-12 each (session 14's red team). So in a query with a DP call every scan of a
//! protected table is wrapped ([`ProtectedTable`]): it scans as the table does (projection,
//! filters and limit pushed into it as before), but the plan it returns, [`ProtectedScanExec`],
//! reports unknown statistics, and the table reports none. Plans over protected rows are then
//! chosen as if nothing were known about them.

use crate::sql::privacy::exec::pass_through::{pass_through_plan, PassThrough};
use crate::sql::privacy::plan::analysis::PlanAnalysis;
use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Constraints, Result, Statistics};
use datafusion::datasource::TableType;
use datafusion::datasource::{provider_as_source, source_as_provider};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlan, TableProviderFilterPushDown};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use std::sync::Arc;

/// Every scan of a protected table in `plan` and its subqueries, wrapped (module docs). The
/// planner rule applies it in locked sessions and on a locked cluster's scheduler, where the
/// analyst is not trusted: a trusted user may see the statistics.
pub fn hide_statistics(plan: LogicalPlan, analysis: &PlanAnalysis) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        let LogicalPlan::TableScan(scan) = &node else {
            return Ok(Transformed::no(node));
        };
        let provider = match source_as_provider(&scan.source) {
            Ok(provider) if analysis.is_protected_scan(scan) => provider,
            _ => return Ok(Transformed::no(node)),
        };
        if provider.downcast_ref::<ProtectedTable>().is_some() {
            return Ok(Transformed::no(node));
        }
        let LogicalPlan::TableScan(mut scan) = node else {
            unreachable!()
        };
        scan.source = provider_as_source(Arc::new(ProtectedTable::new(provider)));
        Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
    })
    .map(|t| t.data)
}

/// `plan` with every [`ProtectedTable`] replaced by the table it wraps: a Ballista client sends
/// its plan to the scheduler, which serialises tables it knows by their own kind and plans the
/// physical plan (where statistics matter) itself.
pub fn unwrap_protected_tables(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        let LogicalPlan::TableScan(scan) = &node else {
            return Ok(Transformed::no(node));
        };
        let inner = match source_as_provider(&scan.source) {
            Ok(provider) => match provider.downcast_ref::<ProtectedTable>() {
                Some(protected) => Arc::clone(protected.inner()),
                None => return Ok(Transformed::no(node)),
            },
            Err(_) => return Ok(Transformed::no(node)),
        };
        let LogicalPlan::TableScan(mut scan) = node else {
            unreachable!()
        };
        scan.source = provider_as_source(inner);
        Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
    })
    .map(|t| t.data)
}

/// A protected table as scanned in a DP query: the table, without statistics (module docs).
#[derive(Debug)]
pub struct ProtectedTable {
    inner: Arc<dyn TableProvider>,
}

impl ProtectedTable {
    pub fn new(inner: Arc<dyn TableProvider>) -> Self {
        Self { inner }
    }

    /// The table it scans.
    pub fn inner(&self) -> &Arc<dyn TableProvider> {
        &self.inner
    }
}

#[async_trait]
impl TableProvider for ProtectedTable {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn constraints(&self) -> Option<&Constraints> {
        self.inner.constraints()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // No limit: a scan that stops after `limit` rows reads more or less of the table by
        // what its first rows hold (the `LIMIT` itself stays above the scan, and applies).
        let _ = limit;
        let scan = self.inner.scan(state, projection, filters, None).await?;
        Ok(Arc::new(ProtectedScanExec::new(scan)))
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.inner.supports_filters_pushdown(filters)
    }

    fn statistics(&self) -> Option<Statistics> {
        None
    }
}

/// The scan of a protected table, reporting unknown statistics (module docs). It runs its
/// input unchanged.
#[derive(Debug)]
pub struct ProtectedScanExec {
    input: Arc<dyn ExecutionPlan>,
}

impl ProtectedScanExec {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        Self { input }
    }
}

impl DisplayAs for ProtectedScanExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "ProtectedScanExec")
    }
}

impl PassThrough for ProtectedScanExec {
    const NAME: &'static str = "ProtectedScanExec";
    const BENEFITS_FROM_INPUT_PARTITIONING: bool = true;

    fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    fn with_input(&self, input: Arc<dyn ExecutionPlan>) -> Self {
        ProtectedScanExec::new(input)
    }

    fn execute_input(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.input.execute(partition, context)
    }
}

pass_through_plan!(ProtectedScanExec);
