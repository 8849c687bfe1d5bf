//! Analysts' sessions by bearer token: each login gets its own locked `SessionContext` (so
//! `SET dp.confidence` stays in that connection) over the owner's shared tables, and its own
//! one-use result tickets and prepared statements, which no other session can use.
//!
//! What one analyst holds is bounded (docs/server-limits.md): a session ends when idle for
//! `session_idle_seconds`, `token_lifetime_seconds` after its login, when the client closes it
//! (`CloseSession`), or when the analyst opens more than `max_sessions_per_analyst` (the least
//! recently used is closed); a session keeps at most `max_prepared_statements` (Flight SQL's and
//! SQL `PREPARE`s together); and each query,
//! from its planning to the end of its result, holds one of the analyst's
//! `max_queries_per_analyst` slots and one of the server's `max_queries` ([`QuerySlots`]).

use super::auth;
use crate::owner::ServerConfig;
use crate::sql::privacy::session::lock::PreparedStatementCap;
use arrow::record_batch::RecordBatch;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use futures::stream::{AbortHandle, AbortRegistration};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

/// One query's place among the queries running at once: released when dropped (the end of
/// its result stream, or its unfetched ticket dropped).
pub struct QuerySlot {
    _analyst: OwnedSemaphorePermit,
    _total: OwnedSemaphorePermit,
}

/// The slots of the queries running at once, per analyst and in total. A query waits up to
/// `query_queue_seconds` for both, then is refused with `ResourceExhausted`; it takes a slot
/// before it is planned, so a refused query is never charged.
pub struct QuerySlots {
    total: Arc<Semaphore>,
    max_total: usize,
    per_analyst: Mutex<HashMap<String, Arc<Semaphore>>>,
    max_per_analyst: usize,
    queue: Duration,
}

impl QuerySlots {
    pub fn new(server: &ServerConfig) -> Self {
        let max_total = server.max_queries.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            total: Arc::new(Semaphore::new(max_total)),
            max_total,
            per_analyst: Mutex::new(HashMap::new()),
            max_per_analyst: server
                .max_queries_per_analyst
                .clamp(1, Semaphore::MAX_PERMITS),
            queue: Duration::from_secs(server.query_queue_seconds.max(1)),
        }
    }

    /// A slot for one query of `analyst` (a configured analyst: the map stays as small as the
    /// configuration), or `ResourceExhausted` naming the limit after the queue's wait.
    pub async fn acquire(&self, analyst: &str) -> Result<QuerySlot, Status> {
        let own = Arc::clone(
            lock(&self.per_analyst)
                .entry(analyst.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.max_per_analyst))),
        );
        let waited = self.queue.as_secs();
        let deadline = tokio::time::Instant::now() + self.queue;
        let analyst_permit = tokio::time::timeout_at(deadline, own.acquire_owned())
            .await
            .map_err(|_| {
                Status::resource_exhausted(format!(
                    "too many queries at once: {} of yours are running or waiting for their DoGet \
                     (max_queries_per_analyst = {}); waited {waited} s (query_queue_seconds); \
                     nothing was charged: fetch or drop a result, then try again",
                    self.max_per_analyst, self.max_per_analyst
                ))
            })?
            .map_err(|_| Status::unavailable("the server is shutting down"))?;
        let total_permit =
            tokio::time::timeout_at(deadline, Arc::clone(&self.total).acquire_owned())
                .await
                .map_err(|_| {
                    Status::resource_exhausted(format!(
                "the server is busy: {} queries of all analysts are running (max_queries = {}); \
                     waited {waited} s (query_queue_seconds); nothing was charged: try again",
                self.max_total, self.max_total
            ))
                })?
                .map_err(|_| Status::unavailable("the server is shutting down"))?;
        Ok(QuerySlot {
            _analyst: analyst_permit,
            _total: total_permit,
        })
    }
}

/// A planned (and charged) query waiting for its one `DoGet`, holding its query slot.
pub struct Pending {
    pub plan: Arc<dyn ExecutionPlan>,
    pub task: Arc<TaskContext>,
    pub slot: QuerySlot,
    /// Whether planning charged the analyst's budget (the query has DP aggregates).
    pub charged: bool,
    planned: Instant,
}

impl Pending {
    pub fn new(
        plan: Arc<dyn ExecutionPlan>,
        task: Arc<TaskContext>,
        slot: QuerySlot,
        charged: bool,
    ) -> Self {
        Self {
            plan,
            task,
            slot,
            charged,
            planned: Instant::now(),
        }
    }
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
    /// Results streaming now, by ticket: `CancelFlightInfo` stops them.
    running: HashMap<Vec<u8>, AbortHandle>,
}

/// Keeps a streaming result cancellable while it runs: removed from the session when the stream
/// ends or is dropped.
pub struct Running {
    session: Arc<AnalystSession>,
    ticket: Vec<u8>,
}

impl Drop for Running {
    fn drop(&mut self) {
        lock(&self.session.handles).running.remove(&self.ticket);
    }
}

/// One analyst's logged-in session.
pub struct AnalystSession {
    pub analyst: String,
    pub ctx: SessionContext,
    opened: Instant,
    last_used: Mutex<Instant>,
    handles: Mutex<Handles>,
    /// `max_prepared_statements`, shared with the session's SQL `PREPARE`s
    /// ([`crate::sql::privacy::session::lock::share_prepared_statement_cap`]).
    prepared_cap: Arc<PreparedStatementCap>,
}

/// A poisoned lock is still usable here: every critical section leaves the maps consistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// At most this many results planned and not yet fetched per session (each holds a plan).
const MAX_PENDING: usize = 64;

/// An unfetched result is dropped (its slot freed) after the session's query deadline, or
/// this long without one.
const PENDING_WITHOUT_DEADLINE: Duration = Duration::from_secs(600);

impl AnalystSession {
    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    /// Keeps a planned query under a new one-use ticket.
    pub fn add_pending(&self, pending: Pending) -> Option<Vec<u8>> {
        let handle = auth::new_token()?.into_bytes();
        let mut handles = lock(&self.handles);
        if handles.pending.len() >= MAX_PENDING {
            // The client does not fetch its results: drop an arbitrary old one (already
            // charged; it will never be released).
            if let Some(key) = handles.pending.keys().next().cloned() {
                handles.pending.remove(&key);
            }
        }
        handles.pending.insert(handle.clone(), pending);
        Some(handle)
    }

    /// Takes the planned query of `ticket`: it can be taken once.
    pub fn take_pending(&self, ticket: &[u8]) -> Option<Pending> {
        lock(&self.handles).pending.remove(ticket)
    }

    /// Registers the result of `ticket` as streaming: its abort registration (for
    /// `futures::stream::Abortable`) and the guard that unregisters it when dropped.
    pub fn start_running(
        self: &Arc<Self>,
        ticket: &[u8],
    ) -> (AbortHandle, AbortRegistration, Running) {
        let (handle, registration) = AbortHandle::new_pair();
        lock(&self.handles)
            .running
            .insert(ticket.to_vec(), handle.clone());
        let running = Running {
            session: Arc::clone(self),
            ticket: ticket.to_vec(),
        };
        (handle, registration, running)
    }

    /// Cancels the query of `ticket`: an unfetched result is dropped (its slot freed, its
    /// charge kept), a streaming one stopped. Whether there was one.
    pub fn cancel(&self, ticket: &[u8]) -> bool {
        let mut handles = lock(&self.handles);
        if handles.pending.remove(ticket).is_some() {
            return true;
        }
        match handles.running.remove(ticket) {
            Some(running) => {
                running.abort();
                true
            }
            None => false,
        }
    }

    /// Drops results not fetched within the session's query deadline, freeing their slots.
    fn drop_stale_pending(&self) {
        let ttl = crate::sql::privacy::session::limits::query_deadline(&self.ctx)
            .unwrap_or(PENDING_WITHOUT_DEADLINE);
        lock(&self.handles)
            .pending
            .retain(|_, p| p.planned.elapsed() < ttl);
    }

    /// Keeps a prepared statement, or refuses it over `max_prepared_statements`, which counts
    /// the session's SQL `PREPARE`s too.
    pub fn add_prepared(&self, prepared: Prepared) -> Result<Vec<u8>, Status> {
        let handle = auth::new_token()
            .ok_or_else(|| Status::internal("no randomness from the OS for a handle"))?
            .into_bytes();
        if !self.prepared_cap.try_take() {
            return Err(Status::resource_exhausted(format!(
                "too many prepared statements in this session: {} (max_prepared_statements, \
                 SQL PREPAREs included); close or DEALLOCATE one first",
                self.prepared_cap.max()
            )));
        }
        lock(&self.handles)
            .prepared
            .insert(handle.clone(), prepared);
        Ok(handle)
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
        if lock(&self.handles).prepared.remove(handle).is_some() {
            self.prepared_cap.give_back();
        }
    }
}

/// Why a session is over, for the refusal's message.
enum Ended {
    Idle,
    Lifetime,
}

/// Every logged-in session, by token.
pub struct Sessions {
    by_token: Mutex<HashMap<String, Arc<AnalystSession>>>,
    idle: Duration,
    lifetime: Duration,
    max_per_analyst: usize,
    max_prepared: usize,
}

impl Sessions {
    pub fn new(server: &ServerConfig) -> Self {
        Self {
            by_token: Mutex::new(HashMap::new()),
            idle: Duration::from_secs(server.session_idle_seconds.max(1)),
            lifetime: Duration::from_secs(server.token_lifetime_seconds.max(1)),
            max_per_analyst: server.max_sessions_per_analyst.max(1),
            max_prepared: server.max_prepared_statements,
        }
    }

    fn ended(&self, session: &AnalystSession) -> Option<Ended> {
        if session.opened.elapsed() >= self.lifetime {
            Some(Ended::Lifetime)
        } else if lock(&session.last_used).elapsed() >= self.idle {
            Some(Ended::Idle)
        } else {
            None
        }
    }

    /// Opens a session for `analyst` on `ctx` and returns its token, closing ended sessions
    /// and, at `max_sessions_per_analyst`, the analyst's least recently used one.
    pub fn open(&self, analyst: &str, ctx: SessionContext) -> Option<String> {
        let token = auth::new_token()?;
        let now = Instant::now();
        // One cap for the session's Flight SQL and SQL prepared statements.
        let prepared_cap = Arc::new(PreparedStatementCap::new(
            self.max_prepared,
            "max_prepared_statements, Flight SQL prepared statements included",
        ));
        crate::sql::privacy::session::lock::share_prepared_statement_cap(
            &ctx,
            Arc::clone(&prepared_cap),
        );
        let session = Arc::new(AnalystSession {
            analyst: analyst.to_string(),
            ctx,
            opened: now,
            last_used: Mutex::new(now),
            handles: Mutex::new(Handles::default()),
            prepared_cap,
        });
        let mut sessions = lock(&self.by_token);
        sessions.retain(|_, s| self.ended(s).is_none());
        loop {
            let own = sessions.iter().filter(|(_, s)| s.analyst == analyst);
            if own.clone().count() < self.max_per_analyst {
                break;
            }
            let Some(oldest) = own
                .min_by_key(|(_, s)| *lock(&s.last_used))
                .map(|(t, _)| t.clone())
            else {
                break;
            };
            sessions.remove(&oldest);
        }
        sessions.insert(token.clone(), session);
        Some(token)
    }

    /// The session of `token`, or why there is none: unknown or closed, idle for too long,
    /// or older than the token lifetime.
    #[allow(clippy::result_large_err)]
    pub fn get(&self, token: &str) -> Result<Arc<AnalystSession>, Status> {
        let mut sessions = lock(&self.by_token);
        let session = sessions.get(token).ok_or_else(|| {
            Status::unauthenticated("unknown, closed or expired session token: log in again")
        })?;
        match self.ended(session) {
            Some(ended) => {
                sessions.remove(token);
                Err(Status::unauthenticated(match ended {
                    Ended::Lifetime => format!(
                        "session token expired: older than {} s (token_lifetime_seconds): log in again",
                        self.lifetime.as_secs()
                    ),
                    Ended::Idle => format!(
                        "session token expired: unused for {} s (session_idle_seconds): log in again",
                        self.idle.as_secs()
                    ),
                }))
            }
            None => {
                session.touch();
                Ok(Arc::clone(session))
            }
        }
    }

    /// Closes the session of `token` (its tickets and prepared statements with it).
    pub fn close(&self, token: &str) -> bool {
        lock(&self.by_token).remove(token).is_some()
    }

    /// Closes ended sessions and drops stale unfetched results (run periodically, so a
    /// client that went away frees its memory and query slots without anyone logging in).
    pub fn sweep(&self) {
        let live: Vec<Arc<AnalystSession>> = {
            let mut sessions = lock(&self.by_token);
            sessions.retain(|_, s| self.ended(s).is_none());
            sessions.values().cloned().collect()
        };
        for session in live {
            session.drop_stale_pending();
        }
    }
}
