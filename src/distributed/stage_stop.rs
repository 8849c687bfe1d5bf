//! An executor's task stops working when its job is cancelled.
//!
//! Ballista 55's executor cancels a task by aborting the future that awaits its stage's output
//! (`Executor::cancel_task`, ballista-executor 55.0.0 `src/executor.rs`). The stage's work does
//! not run in that future: `ShuffleWriterExec::execute` spawns a coordinator task that drives
//! the whole stage (ballista-core 55.0.0 `src/execution_plans/shuffle_writer.rs`, `execute`),
//! detached, so a cancelled task freed its slot and went on using a core until its stage
//! ended. A job stopped at `[limits] query_timeout_seconds` (a locked cluster's scheduler) or
//! cancelled by `dp-server` ([`super::job_cancel`]) thus kept the executors busy: measured on
//! a cross join of 67 million rows, 7 s of one core after the cancellation, and a query of
//! hours would have run for hours.
//!
//! [`StoppableEngine`], the executors' execution engine (`dp-executor`,
//! [`super::executor_config`]), gives each task a stop flag, set when the task's future is
//! dropped before its end (the abort), and puts a [`StopExec`] above every leaf and every
//! operator that multiplies its input ([`crate::sql::cooperative::multiplies`]) of the task's
//! plan: the stage's streams end with an error at their next batch, and the coordinator with
//! them. A stage's work between two batches of those operators is the most it does after a
//! cancellation.

use crate::sql::privacy::exec::pass_through::{pass_through_plan, PassThrough};
use ballista_core::client::BallistaClient;
use ballista_core::client_pool::{BallistaClientPool, PooledClient};
use ballista_core::extension::BallistaConfigGrpcEndpoint;
use ballista_core::serde::protobuf::{ShuffleWritePartition, TaskColumnStats};
use ballista_core::utils::GrpcClientConfig;
use ballista_core::JobId;
use ballista_executor::execution_engine::{
    DefaultExecutionEngine, ExecutionEngine, QueryStageExecutor,
};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use datafusion::prelude::SessionConfig;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The executors' execution engine: Ballista's own, with each task's plan stoppable (see the
/// module docs).
pub(crate) struct StoppableEngine {
    inner: DefaultExecutionEngine,
}

impl StoppableEngine {
    /// Ballista's engine, with its shuffle reads' connections kept for `client_ttl` seconds
    /// (`dp-executor --client-ttl`; 0: a connection per read), as Ballista's executor does.
    pub(crate) fn new(client_ttl: u64) -> Self {
        let inner = match client_ttl {
            0 => DefaultExecutionEngine::new(),
            ttl => DefaultExecutionEngine::with_client_pool(Arc::new(ClientPool::new(
                Duration::from_secs(ttl),
            ))),
        };
        Self { inner }
    }
}

impl ExecutionEngine for StoppableEngine {
    fn create_query_stage_exec(
        &self,
        job_id: JobId,
        stage_id: usize,
        task_id: usize,
        global_output_partition_ids: Vec<usize>,
        plan: Arc<dyn ExecutionPlan>,
        work_dir: &str,
        config: &SessionConfig,
    ) -> Result<Arc<dyn QueryStageExecutor>> {
        let stop = Arc::new(AtomicBool::new(false));
        let plan = with_stops(plan, &stop)?;
        let stage = self.inner.create_query_stage_exec(
            job_id,
            stage_id,
            task_id,
            global_output_partition_ids,
            plan,
            work_dir,
            config,
        )?;
        Ok(Arc::new(StoppableStage { stage, stop }))
    }
}

/// `plan` (a stage: a shuffle writer at its root) with a [`StopExec`] on `stop` above every
/// leaf and every operator that multiplies its input. The root keeps its place: Ballista's
/// engine reads its writer from it.
fn with_stops(
    plan: Arc<dyn ExecutionPlan>,
    stop: &Arc<AtomicBool>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let children = plan
        .children()
        .into_iter()
        .map(|child| {
            Arc::clone(child)
                .transform_up(|node| {
                    if node.children().is_empty() || crate::sql::cooperative::multiplies(&node) {
                        let stoppable = StopExec::new(node, Arc::clone(stop));
                        return Ok(Transformed::yes(
                            Arc::new(stoppable) as Arc<dyn ExecutionPlan>
                        ));
                    }
                    Ok(Transformed::no(node))
                })
                .map(|t| t.data)
        })
        .collect::<Result<Vec<_>>>()?;
    if children.is_empty() {
        return Ok(plan);
    }
    datafusion::physical_plan::replace_children_if_necessary(plan, children)
}

/// A task's stage whose [`StopExec`]s stop when the future running it is dropped before its
/// end (the executor's abort of a cancelled task).
#[derive(Debug)]
struct StoppableStage {
    stage: Arc<dyn QueryStageExecutor>,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Display for StoppableStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.stage.fmt(f)
    }
}

/// Sets the flag when dropped, unless disarmed.
struct StopOnDrop(Option<Arc<AtomicBool>>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(stop) = self.0.take() {
            stop.store(true, Ordering::SeqCst);
        }
    }
}

#[async_trait::async_trait]
impl QueryStageExecutor for StoppableStage {
    async fn execute_query_stage(
        &self,
        task_id: usize,
        context: Arc<TaskContext>,
    ) -> Result<Vec<ShuffleWritePartition>> {
        let mut armed = StopOnDrop(Some(Arc::clone(&self.stop)));
        let written = self.stage.execute_query_stage(task_id, context).await;
        armed.0 = None;
        written
    }

    fn collect_plan_metrics(&self) -> Vec<MetricsSet> {
        self.stage.collect_plan_metrics()
    }

    fn collect_runtime_stats_reports(
        &self,
    ) -> Vec<ballista_core::serde::protobuf::RuntimeStatsReport> {
        self.stage.collect_runtime_stats_reports()
    }

    fn collect_window_state_reports(
        &self,
    ) -> Result<Vec<ballista_core::serde::protobuf::WindowStateReport>> {
        self.stage.collect_window_state_reports()
    }

    fn collect_column_stats(&self) -> Vec<TaskColumnStats> {
        self.stage.collect_column_stats()
    }
}

/// Its input's output, unchanged, until its task is stopped: then an error, at the next batch
/// asked for. No metrics of its own, so a task reports one metrics set per operator of the
/// stage the scheduler planned.
#[derive(Debug)]
pub(crate) struct StopExec {
    input: Arc<dyn ExecutionPlan>,
    stop: Arc<AtomicBool>,
}

impl StopExec {
    fn new(input: Arc<dyn ExecutionPlan>, stop: Arc<AtomicBool>) -> Self {
        Self { input, stop }
    }
}

/// The error a stopped task's streams end with.
fn stopped() -> DataFusionError {
    DataFusionError::Execution("the task was cancelled: its job was stopped".to_string())
}

impl DisplayAs for StopExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "StopExec")
    }
}

impl PassThrough for StopExec {
    const NAME: &'static str = "StopExec";
    const BENEFITS_FROM_INPUT_PARTITIONING: bool = false;

    fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    fn with_input(&self, input: Arc<dyn ExecutionPlan>) -> Self {
        Self::new(input, Arc::clone(&self.stop))
    }

    fn execute_input(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if self.stop.load(Ordering::SeqCst) {
            return Err(stopped());
        }
        let input = self.input.execute(partition, context)?;
        let schema = input.schema();
        let stop = Arc::clone(&self.stop);
        let checked = futures::stream::unfold(Some(input), move |input| {
            let stop = Arc::clone(&stop);
            async move {
                let mut input = input?;
                if stop.load(Ordering::SeqCst) {
                    return Some((Err(stopped()), None));
                }
                let next = input.next().await?;
                Some((next, Some(input)))
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, checked)))
    }
}

pass_through_plan!(StopExec);

/// Connections to other executors for shuffle reads, kept for reuse while idle less than a
/// time: what Ballista's executor does by default (`DefaultBallistaClientPool`, private to
/// ballista-executor 55, so an engine of one's own must bring its own).
struct ClientPool {
    idle: Arc<Mutex<IdleClients>>,
    idle_timeout: Duration,
}

type PoolKey = (String, u16, GrpcClientConfig);

/// Idle connections by executor and configuration, with when each was returned.
type IdleClients = HashMap<PoolKey, Vec<(BallistaClient, Instant)>>;

impl std::fmt::Debug for ClientPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientPool")
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

impl ClientPool {
    fn new(idle_timeout: Duration) -> Self {
        Self {
            idle: Arc::default(),
            idle_timeout,
        }
    }
}

/// The connections of `idle` used within `timeout`.
fn without_expired(idle: &mut IdleClients, timeout: Duration) {
    idle.retain(|_, clients| {
        clients.retain(|(_, since)| since.elapsed() < timeout);
        !clients.is_empty()
    });
}

#[async_trait::async_trait]
impl BallistaClientPool for ClientPool {
    async fn acquire(
        &self,
        host: &str,
        port: u16,
        config: &GrpcClientConfig,
        customize_endpoint: Option<Arc<BallistaConfigGrpcEndpoint>>,
    ) -> ballista_core::error::Result<PooledClient> {
        let key = (host.to_string(), port, config.clone());
        let reused = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            without_expired(&mut idle, self.idle_timeout);
            idle.get_mut(&key)
                .and_then(Vec::pop)
                .map(|(client, _)| client)
        };
        let client = match reused {
            Some(client) => client,
            None => {
                BallistaClient::try_new(
                    host,
                    port,
                    config.max_message_size,
                    config.use_tls,
                    customize_endpoint,
                    config.io_retries_times,
                    config.io_retry_wait_time_ms,
                    config.initial_connection_window_size,
                    config.initial_stream_window_size,
                )
                .await?
            }
        };
        let idle = Arc::clone(&self.idle);
        Ok(PooledClient::new(
            client,
            Box::new(move |client| {
                let mut idle = idle.lock().unwrap_or_else(|p| p.into_inner());
                idle.entry(key).or_default().push((client, Instant::now()));
            }),
        ))
    }

    async fn evict_idle(&self) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        without_expired(&mut idle, self.idle_timeout);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::datasource::source::DataSourceExec;
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::joins::CrossJoinExec;

    fn source(rows: i64) -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from_iter_values(0..rows))],
        )
        .unwrap();
        DataSourceExec::from_data_source(
            MemorySourceConfig::try_new(&[vec![batch]], schema, None).unwrap(),
        )
    }

    /// A stage's shape: a single-input root over a cross join of two leaves.
    fn stage() -> Arc<dyn ExecutionPlan> {
        let join = Arc::new(CrossJoinExec::new(source(3), source(4)));
        Arc::new(CoalescePartitionsExec::new(join))
    }

    /// The operators of `plan`, depth first.
    fn names(plan: &Arc<dyn ExecutionPlan>) -> Vec<String> {
        let mut all = vec![plan.name().to_string()];
        for child in plan.children() {
            all.extend(names(child));
        }
        all
    }

    #[test]
    fn every_leaf_and_join_below_the_root_is_stoppable() {
        let stop = Arc::new(AtomicBool::new(false));
        let plan = with_stops(stage(), &stop).unwrap();
        assert_eq!(
            names(&plan),
            [
                "CoalescePartitionsExec",
                "StopExec",
                "CrossJoinExec",
                "StopExec",
                "DataSourceExec",
                "StopExec",
                "DataSourceExec"
            ]
        );
        // No metrics of its own: the task's metrics sets are the stage's.
        let count = |p: &Arc<dyn ExecutionPlan>| {
            ballista_core::utils::collect_plan_metrics(p.as_ref()).len()
        };
        assert_eq!(count(&plan), count(&stage()));
    }

    #[tokio::test]
    async fn a_stopped_task_s_streams_end_with_an_error() {
        let stop = Arc::new(AtomicBool::new(false));
        let plan = with_stops(stage(), &stop).unwrap();
        let ctx = Arc::new(TaskContext::default());
        // Unstopped: the cross join's 12 rows.
        let rows: usize = datafusion::physical_plan::collect(Arc::clone(&plan), Arc::clone(&ctx))
            .await
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum();
        assert_eq!(rows, 12);
        // Stopped between two batches of a running stream: its next batch is the error.
        let mut running = plan.children()[0].execute(0, Arc::clone(&ctx)).unwrap();
        assert!(running.next().await.unwrap().is_ok());
        stop.store(true, Ordering::SeqCst);
        let err = running.next().await.unwrap().unwrap_err();
        assert!(err.to_string().contains("cancelled"), "{err}");
        assert!(running.next().await.is_none());
        // And a stream started after the stop fails at once.
        assert!(plan.execute(0, ctx).is_err());
    }

    #[tokio::test]
    async fn a_stage_dropped_before_its_end_stops_and_one_that_ended_does_not() {
        let stop = Arc::new(AtomicBool::new(false));
        {
            let mut armed = StopOnDrop(Some(Arc::clone(&stop)));
            armed.0 = None;
        }
        assert!(!stop.load(Ordering::SeqCst), "an ended stage stopped");
        drop(StopOnDrop(Some(Arc::clone(&stop))));
        assert!(stop.load(Ordering::SeqCst), "a dropped stage did not stop");
    }
}
