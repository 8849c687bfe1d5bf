//! The door of a locked cluster's client port: who may call it, and which jobs they may see.
//!
//! The analyst whose budget the cluster spends logs in with the owner's credentials for that
//! analyst (a Flight handshake with `authorization: Basic`, through `dp-server`'s
//! [`LoginGate`]: bounded password checks, back-off after failures) and gets a bearer token
//! with `dp-server`'s lifetimes (`[server] token_lifetime_seconds`, `session_idle_seconds`,
//! `max_sessions_per_analyst`). Every other call carries `authorization: Bearer TOKEN` (or
//! `Basic`, checked like a login). A job's status, results and cancellation are answered only
//! for the jobs submitted through the port; its results are fetched with a capability the
//! port hands out in the job's status (Ballista's client sends no metadata with a fetch).

use crate::owner::auth::{self, LoginGate};
use crate::owner::{AnalystConfig, Owner};
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};
use tonic::metadata::MetadataMap;
use tonic::Status;

/// Jobs remembered at most; beyond it the oldest are forgotten (their status and results are
/// then answered as not found).
const MAX_JOBS: usize = 10_000;

/// One bearer token's times.
struct Token {
    issued: Instant,
    last_used: Instant,
}

/// A job submitted through the client port: the capability that fetches its released
/// partitions (random, 256 bits), valid as long as the credentials that submitted it; when it
/// was submitted, and when its end is shown to its analyst (the analyst's release schedule,
/// [`super::locked`]); whether the analyst cancelled it, and whether the owner's deadline
/// stopped it; when its client last asked for its status, and whether its end has reached the
/// client.
#[derive(Clone)]
pub(crate) struct Job {
    pub result: String,
    expires: Instant,
    /// When the port recorded the submission, on the monotonic clock and in milliseconds
    /// since the epoch (the scheduler stamps a job's end in the latter).
    pub submitted: Instant,
    pub submitted_ms: u64,
    /// When the job's end is shown, fixed the first time the port sees it ended.
    pub shown_end: Arc<OnceLock<Instant>>,
    /// When the analyst first asked the port to cancel it.
    cancelled: Arc<OnceLock<Instant>>,
    stopped_at_deadline: Arc<AtomicBool>,
    /// When its status was last asked for through the port, in milliseconds after `submitted`.
    last_asked_ms: Arc<AtomicU64>,
    /// Whether the port has shown its end (success or failure) to its client.
    end_delivered: Arc<AtomicBool>,
}

impl Job {
    /// Whether the scheduler cancelled the job at `[limits] query_timeout_seconds`.
    pub fn stopped_at_deadline(&self) -> bool {
        self.stopped_at_deadline.load(Ordering::SeqCst)
    }

    /// Records that the scheduler cancels the job at the deadline.
    pub fn stop_at_deadline(&self) {
        self.stopped_at_deadline.store(true, Ordering::SeqCst);
    }

    /// Records that the analyst asked to cancel the job (the first time counts).
    pub fn cancel_requested(&self) {
        let _ = self.cancelled.set(Instant::now());
    }

    /// Whether the analyst asked to cancel the job before `shown_end`, when its end is shown:
    /// a job that had already finished then is shown cancelled too, as a running one would
    /// be, so the answer to a cancellation does not tell whether the job had ended.
    pub fn cancelled_before(&self, shown_end: Instant) -> bool {
        self.cancelled.get().is_some_and(|&at| at < shown_end)
    }

    /// Records that its client asked for its status now.
    pub fn asked(&self) {
        let ms = u64::try_from(self.submitted.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_asked_ms.fetch_max(ms, Ordering::SeqCst);
    }

    /// How long since its client last asked for its status (or since its submission).
    pub fn unasked_for(&self) -> Duration {
        let asked = Duration::from_millis(self.last_asked_ms.load(Ordering::SeqCst));
        self.submitted.elapsed().saturating_sub(asked)
    }

    /// Records that the port showed its end to its client.
    pub fn deliver_end(&self) {
        self.end_delivered.store(true, Ordering::SeqCst);
    }

    /// Whether the port has shown its end to its client.
    pub fn end_delivered(&self) -> bool {
        self.end_delivered.load(Ordering::SeqCst)
    }
}

#[derive(Default)]
struct Jobs {
    by_id: HashMap<String, Job>,
    order: VecDeque<String>,
}

/// An authenticated call: until when its credentials hold.
pub(crate) struct Caller {
    expires: Instant,
}

/// The client port's logins, tokens and jobs.
pub(crate) struct Door {
    owner: Arc<Owner>,
    analyst: String,
    logins: LoginGate,
    tokens: Mutex<HashMap<String, Token>>,
    jobs: Mutex<Jobs>,
    lifetime: Duration,
    idle: Duration,
    max_tokens: usize,
}

impl std::fmt::Debug for Door {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Door")
            .field("analyst", &self.analyst)
            .finish_non_exhaustive()
    }
}

/// A poisoned lock is still usable: every critical section leaves the maps consistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a call without valid credentials is told.
pub(crate) fn no_credentials() -> Status {
    Status::unauthenticated(
        "this locked cluster's client port needs the analyst's credentials: log in with a Flight \
         handshake ('authorization: Basic') on this port and send 'authorization: Bearer TOKEN' \
         with every call (datafusion-dp's client does it: df://USER@host:port with the password \
         in DP_PASSWORD)",
    )
}

/// What a job that was not submitted through the client port, or does not exist, is answered
/// with: the same text either way.
pub(crate) fn not_found(job_id: &str) -> Status {
    Status::not_found(format!("job {job_id:?} not found"))
}

impl Door {
    /// The owner's configuration the port serves.
    pub(crate) fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The door for `analyst`, the one whose budget the cluster spends; the analyst must have
    /// a `password` or `password_hash` in the owner's configuration.
    pub fn new(owner: Arc<Owner>, analyst: &AnalystConfig) -> Result<Self, String> {
        if analyst.credential.is_none() {
            return Err(format!(
                "analyst '{}' has no password or password_hash: a locked cluster's client port \
                 logs its analyst in with one (dp-server --hash-password < pw prints a hash)",
                analyst.name
            ));
        }
        let server = &owner.config().server;
        let (lifetime, idle, max_tokens) = (
            Duration::from_secs(server.token_lifetime_seconds.max(1)),
            Duration::from_secs(server.session_idle_seconds.max(1)),
            server.max_sessions_per_analyst.max(1),
        );
        Ok(Self {
            logins: LoginGate::for_process(owner.config(), "dp-scheduler"),
            owner,
            analyst: analyst.name.clone(),
            tokens: Mutex::new(HashMap::new()),
            jobs: Mutex::new(Jobs::default()),
            lifetime,
            idle,
            max_tokens,
        })
    }

    /// Checks `Basic` credentials: the owner's for the analyst this cluster spends, through
    /// the login gate (so the time does not tell which names exist).
    async fn check_basic(&self, header: &str, peer: Option<IpAddr>) -> Result<(), Status> {
        let (name, password) = auth::parse_basic(header).ok_or_else(no_credentials)?;
        let analyst = self
            .logins
            .login(Arc::clone(&self.owner), &name, password, peer)
            .await?;
        if analyst.name != self.analyst {
            return Err(Status::permission_denied(format!(
                "{} is not the analyst whose budget this cluster spends: log in as that \
                 analyst (or use dp-server)",
                auth::log_name(&analyst.name)
            )));
        }
        Ok(())
    }

    /// Logs the analyst in with the `Basic` credentials of `metadata`: a new bearer token.
    pub async fn log_in(
        &self,
        metadata: &MetadataMap,
        peer: Option<IpAddr>,
    ) -> Result<String, Status> {
        let header = header(metadata).ok_or_else(no_credentials)?;
        self.check_basic(header, peer).await?;
        let token =
            auth::new_token().ok_or_else(|| Status::internal("no randomness from the OS"))?;
        let now = Instant::now();
        let mut tokens = lock(&self.tokens);
        tokens.retain(|_, t| self.valid(t, now));
        // One more than allowed closes the least recently used (only this analyst's).
        while tokens.len() >= self.max_tokens {
            let Some(oldest) = tokens
                .iter()
                .min_by_key(|(_, t)| t.last_used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            tokens.remove(&oldest);
        }
        tokens.insert(
            token.clone(),
            Token {
                issued: now,
                last_used: now,
            },
        );
        eprintln!("dp-scheduler: {} logged in", auth::log_name(&self.analyst));
        Ok(token)
    }

    fn valid(&self, token: &Token, now: Instant) -> bool {
        now.saturating_duration_since(token.issued) < self.lifetime
            && now.saturating_duration_since(token.last_used) < self.idle
    }

    /// The caller of a request with `metadata`: a valid bearer token, or valid `Basic`
    /// credentials; `Unauthenticated` otherwise.
    pub async fn caller(
        &self,
        metadata: &MetadataMap,
        peer: Option<IpAddr>,
    ) -> Result<Caller, Status> {
        let header = header(metadata).ok_or_else(no_credentials)?;
        if let Some(token) = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
        {
            let now = Instant::now();
            let mut tokens = lock(&self.tokens);
            return match tokens.get_mut(token.trim()) {
                Some(t) if self.valid(t, now) => {
                    t.last_used = now;
                    Ok(Caller {
                        expires: t.issued + self.lifetime,
                    })
                }
                _ => Err(Status::unauthenticated(
                    "the bearer token is unknown or has expired (token_lifetime_seconds, \
                     session_idle_seconds): log in again",
                )),
            };
        }
        self.check_basic(header, peer).await?;
        Ok(Caller {
            expires: Instant::now() + self.lifetime,
        })
    }

    /// Records `job_id` as submitted through the port by `caller`, whose request arrived at
    /// `received` (a job already recorded keeps its capability): whether it is new.
    pub fn submitted(
        &self,
        job_id: &str,
        caller: &Caller,
        received: Instant,
    ) -> Result<bool, Status> {
        let mut jobs = lock(&self.jobs);
        if jobs.by_id.contains_key(job_id) {
            return Ok(false);
        }
        let result =
            auth::new_token().ok_or_else(|| Status::internal("no randomness from the OS"))?;
        while jobs.order.len() >= MAX_JOBS {
            let Some(oldest) = jobs.order.pop_front() else {
                break;
            };
            jobs.by_id.remove(&oldest);
        }
        jobs.order.push_back(job_id.to_string());
        jobs.by_id.insert(
            job_id.to_string(),
            Job {
                result,
                expires: caller.expires,
                submitted: received,
                submitted_ms: SystemTime::now()
                    .checked_sub(received.elapsed())
                    .and_then(|at| at.duration_since(SystemTime::UNIX_EPOCH).ok())
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                shown_end: Arc::default(),
                cancelled: Arc::default(),
                stopped_at_deadline: Arc::default(),
                last_asked_ms: Arc::default(),
                end_delivered: Arc::default(),
            },
        );
        Ok(true)
    }

    /// The job `job_id` if it was submitted through the port and its credentials still hold.
    pub fn job(&self, job_id: &str) -> Option<Job> {
        lock(&self.jobs)
            .by_id
            .get(job_id)
            .filter(|job| job.expires > Instant::now())
            .cloned()
    }
}

/// A request's `authorization` header, if it has one.
pub(crate) fn header(metadata: &MetadataMap) -> Option<&str> {
    metadata.get("authorization").and_then(|v| v.to_str().ok())
}
