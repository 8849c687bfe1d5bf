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
//! The runtimes' threads together are bounded by `[server] max_query_threads`: beyond
//! `max_query_threads / threads_per_analyst` analysts querying at once, an analyst takes the
//! place of one whose runtime runs no query, or shares a runtime ([`Executors`]).
//!
//! Which runtime a query runs on depends only on who sent it and, once `max_query_threads`
//! is reached, on which analysts have queries running (how long those run can depend on their
//! data, as their share of the cores always did). A stopped query's tasks end at their next yield: every join of a session's
//! plans yields ([`crate::sql::cooperative`]).

use crate::server::memory::AnalystPools;
use arrow::record_batch::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryPool;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use futures::{SinkExt, StreamExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

/// A query runtime of `[server] threads_per_analyst` worker threads; shut down in the
/// background when dropped (a runtime dropped in an async context would otherwise block, which
/// tokio refuses with a panic).
struct Lane {
    runtime: Option<tokio::runtime::Runtime>,
    /// The order the runtimes were started in.
    started: u64,
}

impl Drop for Lane {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// One analyst's executor: the runtime their queries run on (their own, or shared while
/// every runtime the process may start is running queries: [`Executors`]) and their own
/// planning permits.
pub struct Executor {
    lane: Arc<Lane>,
    /// As many of the analyst's statements are planned at once as the runtime has threads:
    /// each plans on a thread of its own (`on_planning_stack`), and a long statement's
    /// planning is CPU-bound too. The analyst's own, even on a shared runtime.
    planning: Arc<Semaphore>,
    last_used: Mutex<Instant>,
    /// `[limits] query_memory_limit`: the memory pool of each query run here.
    query_memory_limit: usize,
    /// The analyst's share of the server's memory (`[limits] analyst_memory_limit`), which
    /// every query of theirs draws on (memory.rs).
    memory: Arc<dyn MemoryPool>,
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
    /// `query_memory_limit` bytes within the analyst's share (`memory.rs`).
    pub fn query_task(&self, task: TaskContext) -> TaskContext {
        crate::server::memory::QueryPool::task(
            task,
            self.query_memory_limit,
            Arc::clone(&self.memory),
        )
    }

    /// The handle to spawn a query's execution on.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.lane
            .runtime
            .as_ref()
            .expect("the runtime is only taken when the lane is dropped")
            .handle()
    }
}

/// The query runtimes of the analysts that ran queries recently, by analyst name (configured
/// analysts only, so the map is as small as the configuration), at most `[server]
/// max_query_threads` threads in all.
///
/// While at most `max_query_threads / threads_per_analyst` analysts query at once, each has a
/// runtime of their own. An analyst without one starts one while the bound allows, else takes
/// the place of the runtime that no query holds and was used least recently (it is shut down,
/// and its analysts' next queries take a runtime anew). Only when every runtime is running
/// queries does the analyst share one: the runtime the fewest analysts share (ties: the one
/// started first), until no query of theirs holds it; their next query then takes a runtime
/// as if they had none. The runtimes still share the cores equally, and each analyst keeps
/// their own planning permits, so a busy analyst slows only those on their runtime, and only
/// while more analysts query at once than there are runtimes. Which runtime a query runs on
/// depends on who sent it and which analysts have queries running.
pub struct Executors {
    threads: usize,
    /// `max_query_threads / threads` (at least one): the runtimes that may run at once.
    max_lanes: usize,
    query_memory_limit: usize,
    /// Each analyst's share of the memory, kept when their runtime is shut down.
    memory: AnalystPools,
    by_analyst: Mutex<HashMap<String, Arc<Executor>>>,
    started: std::sync::atomic::AtomicU64,
}

/// A runtime in use, as [`Executors::lanes`] finds it.
struct LaneUse {
    lane: Arc<Lane>,
    /// The analysts whose executor runs on it.
    analysts: Vec<String>,
    /// Whether a query holds one of their executors.
    held: bool,
    /// The latest use of one of their executors.
    last_used: Instant,
}

/// A runtime no query has used for this long is shut down (its threads end); the analyst's
/// next query starts a new one.
const IDLE: Duration = Duration::from_secs(60);

/// Blocking threads per analyst's runtime (DataFusion reads local files on them).
const MAX_BLOCKING_THREADS: usize = 4;

/// Whether a query holds `executor` (the map holds one reference).
fn held(executor: &Arc<Executor>) -> bool {
    Arc::strong_count(executor) > 1
}

fn last_used(executor: &Executor) -> Instant {
    *executor.last_used.lock().unwrap_or_else(|p| p.into_inner())
}

impl Executors {
    /// Runtimes of `threads` worker threads each (at least one; `[server]
    /// threads_per_analyst`), at most `max_threads` in all (`[server] max_query_threads`; at
    /// least one runtime), whose queries may hold `query_memory_limit` bytes each, and each
    /// analyst's together `analyst_memory_limit` (`[limits]`).
    pub fn new(
        threads: usize,
        max_threads: usize,
        query_memory_limit: usize,
        analyst_memory_limit: usize,
    ) -> Self {
        let threads = threads.max(1);
        Self {
            threads,
            max_lanes: (max_threads / threads).max(1),
            query_memory_limit,
            memory: AnalystPools::new(analyst_memory_limit),
            by_analyst: Mutex::new(HashMap::new()),
            started: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The distinct runtimes of `map`, in the order they were started.
    fn lanes(map: &HashMap<String, Arc<Executor>>) -> Vec<LaneUse> {
        let mut lanes: Vec<LaneUse> = Vec::new();
        for (name, executor) in map {
            let i = match lanes
                .iter()
                .position(|l| Arc::ptr_eq(&l.lane, &executor.lane))
            {
                Some(i) => i,
                None => {
                    lanes.push(LaneUse {
                        lane: Arc::clone(&executor.lane),
                        analysts: Vec::new(),
                        held: false,
                        last_used: last_used(executor),
                    });
                    lanes.len() - 1
                }
            };
            let lane = &mut lanes[i];
            lane.analysts.push(name.clone());
            lane.held |= held(executor);
            lane.last_used = lane.last_used.max(last_used(executor));
        }
        lanes.sort_by_key(|l| l.lane.started);
        lanes
    }

    fn start_lane(&self) -> Result<Arc<Lane>, Status> {
        let runtime = crate::sql::privacy::session::limits::execution_runtime()
            .worker_threads(self.threads)
            .max_blocking_threads(MAX_BLOCKING_THREADS)
            .thread_name("dp-query")
            .build()
            .map_err(|e| Status::unavailable(format!("cannot start query threads: {e}")))?;
        Ok(Arc::new(Lane {
            runtime: Some(runtime),
            started: self
                .started
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }))
    }

    fn executor(&self, analyst: &str, lane: Arc<Lane>) -> Arc<Executor> {
        Arc::new(Executor {
            lane,
            planning: Arc::new(Semaphore::new(self.threads)),
            last_used: Mutex::new(Instant::now()),
            query_memory_limit: self.query_memory_limit,
            memory: self.memory.of(analyst),
        })
    }

    /// `analyst`'s runtime, started, taken from an analyst not querying or shared as the type's
    /// docs say. Held by a query while it plans and executes.
    #[allow(clippy::result_large_err)]
    pub fn of(&self, analyst: &str) -> Result<Arc<Executor>, Status> {
        // Executors replaced here are dropped after the lock (their runtimes shut down in the
        // background).
        let mut dropped: Vec<Arc<Executor>> = Vec::new();
        let mut map = self.by_analyst.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(executor) = map.get(analyst) {
            // A shared runtime is left once no query of the analyst holds it: the analyst
            // takes a runtime as if they had none (their own if one is free).
            let shared = Arc::strong_count(&executor.lane) > 1;
            if !shared || held(executor) {
                *executor.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
                return Ok(Arc::clone(executor));
            }
            dropped.extend(map.remove(analyst));
        }
        let lanes = Self::lanes(&map);
        // The runtime no query holds that was used least recently (the first started of
        // those) is shut down, and its analysts' next queries take a runtime anew.
        let idle = lanes
            .iter()
            .filter(|l| !l.held)
            .min_by_key(|l| l.last_used)
            .filter(|_| lanes.len() >= self.max_lanes);
        let lane = if lanes.len() < self.max_lanes {
            self.start_lane()?
        } else if let Some(idle) = idle {
            dropped.extend(idle.analysts.iter().filter_map(|name| map.remove(name)));
            self.start_lane()?
        } else {
            // Every runtime runs queries: the one the fewest analysts share (the first started
            // of those).
            lanes
                .iter()
                .min_by_key(|l| l.analysts.len())
                .map(|l| Arc::clone(&l.lane))
                .expect("max_lanes is at least one, and the map has them all")
        };
        drop(lanes);
        let executor = self.executor(analyst, lane);
        map.insert(analyst.to_string(), Arc::clone(&executor));
        drop(map);
        drop(dropped);
        Ok(executor)
    }

    /// The worker threads of the runtimes started.
    #[cfg(test)]
    fn threads(&self) -> usize {
        let map = self.by_analyst.lock().unwrap_or_else(|p| p.into_inner());
        Self::lanes(&map).len() * self.threads
    }

    /// Shuts down the runtimes that no query holds and that were not used for [`IDLE`].
    pub fn sweep(&self) {
        let idle: Vec<Arc<Executor>> = {
            let mut map = self.by_analyst.lock().unwrap_or_else(|p| p.into_inner());
            let names: Vec<String> = map
                .iter()
                .filter(|(_, e)| !held(e) && last_used(e).elapsed() >= IDLE)
                .map(|(name, _)| name.clone())
                .collect();
            names.iter().filter_map(|n| map.remove(n)).collect()
        };
        // Dropped outside the lock: each shuts its runtime down in the background.
        drop(idle);
    }
}

/// Aborts a task when dropped, and cancels its query's function calls (`_cancel`, dropped
/// just after: [`crate::sql::cooperative::QueryCancellation`]) so that it stops within one
/// call, not only at its next yield.
struct AbortTask {
    task: tokio::task::AbortHandle,
    _cancel: Option<crate::sql::cooperative::CancelOnDrop>,
}

impl Drop for AbortTask {
    fn drop(&mut self) {
        self.task.abort();
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
    let cancellation = task
        .session_config()
        .options()
        .extensions
        .get::<crate::sql::cooperative::QueryCancellation>()
        .cloned();
    // The driver holds the executor until its future is dropped, which, once aborted, is when
    // it next yields: a runtime still running a stopped query's batch counts as in use, so it
    // is not shut down (its thread would run on) and replaced by a new one.
    let in_use = Arc::clone(&executor);
    let driver = executor.handle().spawn(async move {
        let _in_use = in_use;
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
    let abort = AbortTask {
        task: driver.abort_handle(),
        _cancel: cancellation.map(|c| c.on_drop()),
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: &Executor, b: &Executor) -> bool {
        Arc::ptr_eq(&a.lane, &b.lane)
    }

    /// Runtimes of two threads, at most four threads: two analysts querying at once have a
    /// runtime each; a third and a fourth, while both run queries, share them, one each
    /// (ties: the runtime started first), so the threads stay at four.
    #[tokio::test]
    async fn threads_stay_within_the_bound() {
        let executors = Executors::new(2, 4, 1 << 20, 1 << 20);
        let a = executors.of("a").unwrap();
        let b = executors.of("b").unwrap();
        assert!(!same(&a, &b));
        assert_eq!(executors.threads(), 4);
        assert_eq!(a.handle().metrics().num_workers(), 2);
        let c = executors.of("c").unwrap();
        let d = executors.of("d").unwrap();
        assert!(same(&c, &a), "the first started of the least shared");
        assert!(same(&d, &b), "the least shared");
        assert_eq!(executors.threads(), 4);
        // Held executors are returned again.
        assert!(Arc::ptr_eq(&executors.of("a").unwrap(), &a));
        // Queries run on a shared runtime.
        let answer = c.handle().spawn(async { 6 * 7 }).await.unwrap();
        assert_eq!(answer, 42);
    }

    /// An analyst without a runtime takes the place of the analysts whose runtime no query
    /// holds (it is shut down), before sharing one that runs queries; an analyst sharing a
    /// runtime takes one of their own at their next query, once one is free.
    #[tokio::test]
    async fn an_idle_runtime_makes_way_and_sharing_ends() {
        let executors = Executors::new(1, 2, 1 << 20, 1 << 20);
        let a = executors.of("a").unwrap();
        let b = executors.of("b").unwrap();
        let c = executors.of("c").unwrap();
        assert!(same(&c, &a));
        // b stops querying: the next new analyst takes b's place, not a share.
        drop(b);
        let d = executors.of("d").unwrap();
        assert!(!same(&d, &a));
        assert_eq!(executors.threads(), 2);
        // c stops querying, and so does d: c's next query leaves a's runtime for d's place.
        drop((c, d));
        let c = executors.of("c").unwrap();
        assert!(!same(&c, &a));
        assert_eq!(executors.threads(), 2);
        // d comes back while a and c run queries: d shares, with a (the first started).
        let d = executors.of("d").unwrap();
        assert!(same(&d, &a));
        assert_eq!(executors.threads(), 2);
    }

    /// An analyst sharing a runtime keeps their own planning permits: another analyst's
    /// statements being planned do not hold up theirs.
    #[tokio::test]
    async fn a_shared_runtime_keeps_each_analyst_s_planning() {
        let executors = Executors::new(1, 1, 1 << 20, 1 << 20);
        let a = executors.of("a").unwrap();
        let b = executors.of("b").unwrap();
        assert!(same(&a, &b));
        let _planning = a.planning_permit().await.unwrap();
        let other = tokio::time::timeout(Duration::from_secs(5), b.planning_permit()).await;
        assert!(other.is_ok(), "b waited for a's permit");
        let again = tokio::time::timeout(Duration::from_millis(50), a.planning_permit()).await;
        assert!(again.is_err(), "a's own statements wait for a's permit");
    }
}
