//! Analysts' sessions by bearer token: each login gets its own locked `SessionContext` (so
//! `SET dp.confidence` stays in that connection) over the owner's shared tables, and its own
//! one-use result tickets and prepared statements, which no other session can use. Sessions
//! idle for longer than the configured time are closed.

use super::auth;
use arrow::record_batch::RecordBatch;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A planned (and charged) query waiting for its one `DoGet`.
struct Pending {
    plan: Arc<dyn ExecutionPlan>,
    task: Arc<TaskContext>,
}

/// A prepared statement: its SQL and the parameter values bound last.
#[derive(Clone)]
pub struct Prepared {
    pub sql: String,
    pub params: Option<RecordBatch>,
}

#[derive(Default)]
struct Handles {
    pending: HashMap<Vec<u8>, Pending>,
    prepared: HashMap<Vec<u8>, Prepared>,
}

/// One analyst's logged-in session.
pub struct AnalystSession {
    pub analyst: String,
    pub ctx: SessionContext,
    last_used: Mutex<Instant>,
    handles: Mutex<Handles>,
}

/// A poisoned lock is still usable here: every critical section leaves the maps consistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// At most this many results planned and not yet fetched per session (each holds a plan).
const MAX_PENDING: usize = 64;

impl AnalystSession {
    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    /// Keeps a planned query under a new one-use ticket.
    pub fn add_pending(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        task: Arc<TaskContext>,
    ) -> Option<Vec<u8>> {
        let handle = auth::new_token()?.into_bytes();
        let mut handles = lock(&self.handles);
        if handles.pending.len() >= MAX_PENDING {
            // The client does not fetch its results: drop an arbitrary old one (already
            // charged; it will never be released).
            if let Some(key) = handles.pending.keys().next().cloned() {
                handles.pending.remove(&key);
            }
        }
        handles
            .pending
            .insert(handle.clone(), Pending { plan, task });
        Some(handle)
    }

    /// Takes the planned query of `ticket`: it can be taken once.
    pub fn take_pending(
        &self,
        ticket: &[u8],
    ) -> Option<(Arc<dyn ExecutionPlan>, Arc<TaskContext>)> {
        lock(&self.handles)
            .pending
            .remove(ticket)
            .map(|p| (p.plan, p.task))
    }

    pub fn add_prepared(&self, prepared: Prepared) -> Option<Vec<u8>> {
        let handle = auth::new_token()?.into_bytes();
        lock(&self.handles)
            .prepared
            .insert(handle.clone(), prepared);
        Some(handle)
    }

    pub fn prepared(&self, handle: &[u8]) -> Option<Prepared> {
        lock(&self.handles).prepared.get(handle).cloned()
    }

    /// Binds parameter values to a prepared statement; `None` if there is no such statement.
    pub fn bind_prepared(&self, handle: &[u8], params: Option<RecordBatch>) -> Option<()> {
        lock(&self.handles)
            .prepared
            .get_mut(handle)
            .map(|p| p.params = params)
    }

    pub fn close_prepared(&self, handle: &[u8]) {
        lock(&self.handles).prepared.remove(handle);
    }
}

/// Every logged-in session, by token.
pub struct Sessions {
    by_token: Mutex<HashMap<String, Arc<AnalystSession>>>,
    idle: Duration,
}

impl Sessions {
    pub fn new(idle: Duration) -> Self {
        Self {
            by_token: Mutex::new(HashMap::new()),
            idle,
        }
    }

    /// Opens a session for `analyst` on `ctx` and returns its token (closing idle sessions).
    pub fn open(&self, analyst: &str, ctx: SessionContext) -> Option<String> {
        let token = auth::new_token()?;
        let session = Arc::new(AnalystSession {
            analyst: analyst.to_string(),
            ctx,
            last_used: Mutex::new(Instant::now()),
            handles: Mutex::new(Handles::default()),
        });
        let mut sessions = lock(&self.by_token);
        let idle = self.idle;
        sessions.retain(|_, s| lock(&s.last_used).elapsed() < idle);
        sessions.insert(token.clone(), session);
        Some(token)
    }

    /// The session of `token`, if it is open and not idle for too long.
    pub fn get(&self, token: &str) -> Option<Arc<AnalystSession>> {
        let mut sessions = lock(&self.by_token);
        let session = sessions.get(token)?;
        if lock(&session.last_used).elapsed() >= self.idle {
            sessions.remove(token);
            return None;
        }
        session.touch();
        Some(Arc::clone(session))
    }
}
