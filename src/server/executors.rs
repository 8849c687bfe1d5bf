//! CPU fairness between analysts: each analyst's queries execute on that analyst's own tokio
//! runtime ([`Executors`]), with `[server] threads_per_analyst` threads (by default as many as
//! the machine has cores), never on the runtime that serves the Flight calls.
//!
//! DataFusion runs a query's operators as tasks on the runtime that executes its plan. With
//! one runtime for everything, one analyst's CPU-bound queries (a large cross join or
//! aggregation) held every worker until the memory pool or the deadline stopped them, and
//! other analysts' queries, and the Flight calls themselves, waited behind them past their own
//! deadlines. With a runtime per analyst, the operating system's scheduler shares the cores
//! between the threads that have work, so an analyst with many heavy queries gets the same
//! threads as one with a single light query: while `n` analysts have work, each has about
//! `1/n` of the CPU, however many queries they send. The Flight runtime's threads mostly
//! wait for the network, so logins and other calls are served between the time slices.
//!
//! The planning of an analyst's statements is shared out the same way: as many at once per
//! analyst as the runtime has threads ([`Executor::planning_permit`]).
//!
//! Which runtime a query runs on depends only on who sent it, never on the data.

use arrow::record_batch::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use futures::{SinkExt, StreamExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

/// One analyst's query runtime; shut down in the background when dropped (a runtime dropped
/// in an async context would otherwise block, which tokio refuses with a panic).
pub struct Executor {
    runtime: Option<tokio::runtime::Runtime>,
    /// As many of the analyst's statements are planned at once as the runtime has threads:
    /// each plans on a thread of its own (`on_planning_stack`), and a long statement's
    /// planning is CPU-bound too.
    planning: Arc<Semaphore>,
    last_used: Mutex<Instant>,
    /// `[limits] query_memory_limit`: the memory pool of each query run here.
    query_memory_limit: usize,
}

impl Executor {
    /// A permit to plan one of the analyst's statements, waiting for one of the analyst's
    /// other statements to be planned if all are taken.
    pub async fn planning_permit(&self) -> Result<OwnedSemaphorePermit, Status> {
        Arc::clone(&self.planning)
            .acquire_owned()
            .await
            .map_err(|_| Status::unavailable("the server is shutting down"))
    }

    /// `task` (a query's context, from its session) with the query's own memory pool of
    /// `query_memory_limit` bytes within the process's (`memory.rs`).
    pub fn query_task(&self, task: TaskContext) -> TaskContext {
        crate::server::memory::QueryPool::task(task, self.query_memory_limit)
    }

    /// The handle to spawn a query's execution on.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime
            .as_ref()
            .expect("the runtime is only taken when the executor is dropped")
            .handle()
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The query runtimes of the analysts that ran queries recently, by analyst name (configured
/// analysts only, so the map is as small as the configuration).
pub struct Executors {
    threads: usize,
    query_memory_limit: usize,
    by_analyst: Mutex<HashMap<String, Arc<Executor>>>,
}

/// A runtime no query has used for this long is shut down (its threads end); the analyst's
/// next query starts a new one.
const IDLE: Duration = Duration::from_secs(60);

/// Blocking threads per analyst's runtime (DataFusion reads local files on them).
const MAX_BLOCKING_THREADS: usize = 4;

impl Executors {
    /// Runtimes of `threads` worker threads each (at least one; `[server]
    /// threads_per_analyst`), whose queries may hold `query_memory_limit` bytes each.
    pub fn new(threads: usize, query_memory_limit: usize) -> Self {
        Self {
            threads: threads.max(1),
            query_memory_limit,
            by_analyst: Mutex::new(HashMap::new()),
        }
    }

    /// `analyst`'s runtime, started if needed. Held by a query while it executes.
    #[allow(clippy::result_large_err)]
    pub fn of(&self, analyst: &str) -> Result<Arc<Executor>, Status> {
        let mut map = self.by_analyst.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(executor) = map.get(analyst) {
            *executor.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
            return Ok(Arc::clone(executor));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.threads)
            .max_blocking_threads(MAX_BLOCKING_THREADS)
            .thread_name("dp-query")
            .enable_all()
            .build()
            .map_err(|e| Status::unavailable(format!("cannot start query threads: {e}")))?;
        let executor = Arc::new(Executor {
            runtime: Some(runtime),
            planning: Arc::new(Semaphore::new(self.threads)),
            last_used: Mutex::new(Instant::now()),
            query_memory_limit: self.query_memory_limit,
        });
        map.insert(analyst.to_string(), Arc::clone(&executor));
        Ok(executor)
    }

    /// Shuts down the runtimes that no query holds and that were not used for [`IDLE`].
    pub fn sweep(&self) {
        let idle: Vec<Arc<Executor>> = {
            let mut map = self.by_analyst.lock().unwrap_or_else(|p| p.into_inner());
            let names: Vec<String> = map
                .iter()
                .filter(|(_, e)| {
                    Arc::strong_count(e) == 1
                        && e.last_used
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .elapsed()
                            >= IDLE
                })
                .map(|(name, _)| name.clone())
                .collect();
            names.iter().filter_map(|n| map.remove(n)).collect()
        };
        // Dropped outside the lock: each shuts its runtime down in the background.
        drop(idle);
    }
}

/// Aborts a task when dropped.
struct AbortTask(tokio::task::AbortHandle);

impl Drop for AbortTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Executes `plan` on `executor`'s runtime (DataFusion spawns the plan's tasks on the runtime
/// that executes it) and returns its batches, to be read on any runtime through a channel of
/// one batch. Dropping the stream stops the execution, within a few batches of any operator
/// (the session's plans yield from every join: [`crate::sql::cooperative`]); a panic of the execution ends the stream with an error, never with a
/// silently short result.
pub fn execute_on(
    executor: Arc<Executor>,
    plan: Arc<dyn ExecutionPlan>,
    task: Arc<TaskContext>,
) -> SendableRecordBatchStream {
    let schema = plan.schema();
    // A resources error names the memory limit that refused the query (memory.rs).
    let pool = Arc::clone(task.memory_pool());
    let (mut sender, receiver) = futures::channel::mpsc::channel::<Result<RecordBatch>>(1);
    let driver = executor.handle().spawn(async move {
        let mut batches = match execute_stream(plan, task) {
            Ok(batches) => batches,
            Err(e) => {
                let _ = sender.send(Err(e)).await;
                return;
            }
        };
        while let Some(batch) = batches.next().await {
            let failed = batch.is_err();
            if sender.send(batch).await.is_err() || failed {
                return;
            }
        }
    });
    let abort = AbortTask(driver.abort_handle());
    let finished = futures::stream::once(async move {
        match driver.await {
            Ok(()) => None,
            Err(e) => Some(Err(DataFusionError::Execution(format!(
                "the query's execution stopped: {e}"
            )))),
        }
    })
    .filter_map(std::future::ready);
    let batches = receiver.chain(finished).map(move |batch| {
        let _held = (&executor, &abort);
        batch.map_err(|e| crate::server::memory::name_the_limit(e, &pool))
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, batches))
}
