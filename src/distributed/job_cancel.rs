//! A cluster's job stops when its result is no longer wanted.
//!
//! Ballista's client (`DistributedQueryExec`, ballista-core 55.0.0
//! `src/execution_plans/distributed_query.rs`) submits a job and polls its status; dropping its
//! stream stops the polling, not the job, which the executors run to its end, holding their
//! task slots from every other query. That is what happens to a query stopped at
//! `[limits] query_timeout_seconds`, cancelled by `CancelFlightInfo`, or whose client went away
//! in `dp-server --scheduler` (where one trusted cluster serves every analyst), and to a
//! `dpsql --scheduler` statement stopped by Ctrl-C. [`CancelJobOnDropExec`] over the client's
//! plan cancels the job (the scheduler's `CancelJob`, which cancels its running tasks on the
//! executors) when the stream is dropped before its end.
//!
//! A job whose submission was still in flight when its stream was dropped has no id yet, so
//! the client cannot cancel it. A locked cluster's client port cancels it itself: when a push
//! client's status stream is dropped before the job's end was shown on it
//! (`locked::CancelUnlessShown`), and when a pull client has not asked for the job's status for
//! `locked::STATUS_LEASE` before its end was shown (`locked::cancel_when_unwatched`). On a
//! trusted cluster it runs to its end as before.

use crate::sql::privacy::exec::pass_through::{pass_through_plan, PassThrough};
use ballista_core::execution_plans::DistributedQueryExec;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::protobuf::CancelJobParams;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use datafusion_proto::protobuf::LogicalPlanNode;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;

/// How long a cancellation may take to reach the scheduler before it is given up (the job then
/// runs to its end, as without it).
const CANCEL_TIMEOUT: Duration = Duration::from_secs(10);

/// The client's plan of a query sent to a cluster, whose job is cancelled when its stream is
/// dropped before its end (see the module docs). It has the plan's properties and one child,
/// the plan.
#[derive(Debug)]
pub(crate) struct CancelJobOnDropExec {
    input: Arc<dyn ExecutionPlan>,
    /// The scheduler's gRPC endpoint (`http://host:port`).
    scheduler: String,
    /// The bearer token of a locked cluster's analyst, whom its client port asks.
    token: Option<String>,
}

impl CancelJobOnDropExec {
    pub(crate) fn new(
        input: Arc<dyn ExecutionPlan>,
        scheduler: String,
        token: Option<String>,
    ) -> Self {
        Self {
            input,
            scheduler,
            token,
        }
    }
}

/// The id of the job `plan` submitted (the first `DistributedQueryExec` in it), once the
/// scheduler accepted it.
fn submitted_job(plan: &Arc<dyn ExecutionPlan>) -> Option<String> {
    let mut job = None;
    let _ = plan.apply(
        |node| match node.downcast_ref::<DistributedQueryExec<LogicalPlanNode>>() {
            Some(query) => {
                job = query.job_id().map(|id| id.to_string());
                Ok(TreeNodeRecursion::Stop)
            }
            None => Ok(TreeNodeRecursion::Continue),
        },
    );
    job
}

/// Asks the scheduler at `scheduler` to cancel `job`, on a thread of its own: the stream may be
/// dropped on a runtime that is shutting down (an idle analyst's, `dp-server`), or on none.
fn cancel_in_background(scheduler: String, token: Option<String>, job: String) {
    let id = job.clone();
    let spawned = std::thread::Builder::new()
        .name("dp-cancel-job".to_string())
        .spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            let cancelled = runtime.block_on(async {
                tokio::time::timeout(CANCEL_TIMEOUT, cancel(&scheduler, token.as_deref(), &job))
                    .await
            });
            if !matches!(cancelled, Ok(Ok(()))) {
                eprintln!("could not cancel job {job} on the Ballista scheduler at {scheduler}");
            }
        });
    if spawned.is_err() {
        eprintln!("no thread to cancel job {id}: it runs to its end");
    }
}

/// `CancelJob` of `job` on the scheduler at `scheduler`, with the bearer `token` if any.
async fn cancel(scheduler: &str, token: Option<&str>, job: &str) -> Result<(), String> {
    let mut client = SchedulerGrpcClient::connect(scheduler.to_string())
        .await
        .map_err(|e| e.to_string())?;
    let mut request = tonic::Request::new(CancelJobParams {
        job_id: job.to_string(),
    });
    if let Some(token) = token {
        let bearer = super::locked::bearer(token).map_err(|e| e.to_string())?;
        request.metadata_mut().insert("authorization", bearer);
    }
    client
        .cancel_job(request)
        .await
        .map(|_| ())
        .map_err(|e| e.message().to_string())
}

/// Cancels the job of `plan` when dropped, unless its stream ended (`ended`).
struct CancelGuard {
    plan: Arc<dyn ExecutionPlan>,
    scheduler: String,
    token: Option<String>,
    ended: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        if let Some(job) = submitted_job(&self.plan) {
            cancel_in_background(self.scheduler.clone(), self.token.take(), job);
        }
    }
}

impl DisplayAs for CancelJobOnDropExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "CancelJobOnDropExec")
    }
}

impl PassThrough for CancelJobOnDropExec {
    const NAME: &'static str = "CancelJobOnDropExec";
    const BENEFITS_FROM_INPUT_PARTITIONING: bool = false;

    fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    fn with_input(&self, input: Arc<dyn ExecutionPlan>) -> Self {
        Self::new(input, self.scheduler.clone(), self.token.clone())
    }

    fn execute_input(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let stream = self.input.execute(partition, context)?;
        let schema = stream.schema();
        let guard = CancelGuard {
            plan: Arc::clone(&self.input),
            scheduler: self.scheduler.clone(),
            token: self.token.clone(),
            ended: false,
        };
        // The guard lives in the stream's state: dropped with it, marked at the stream's end.
        let guarded = futures::stream::unfold(Some((stream, guard)), |state| async move {
            let (mut stream, mut guard) = state?;
            match stream.next().await {
                Some(item) => Some((item, Some((stream, guard)))),
                None => {
                    guard.ended = true;
                    None
                }
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, guarded)))
    }
}

pass_through_plan!(CancelJobOnDropExec);

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::empty::EmptyExec;

    #[test]
    fn a_plan_without_a_distributed_query_has_no_job() {
        let schema = Arc::new(arrow::datatypes::Schema::empty());
        let plan: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(schema));
        assert_eq!(submitted_job(&plan), None);
    }
}
