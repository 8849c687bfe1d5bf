//! Memory per analyst and per query. Each analyst's queries draw on a pool of their own, a
//! share of `[limits] memory_limit` ([`AnalystPools`], `analyst_memory_limit`), and each query
//! on a pool within it ([`QueryPool`], `query_memory_limit`). The shares are fixed, together at
//! most `memory_limit`: a query admitted to run can be refused memory only for what its own
//! analyst's queries hold, never for another analyst's use. Before the shares, fourteen
//! memory-hungry joins of one analyst filled the process's pool, and every DP query of another
//! analyst failed after its charge (issue 42); the attacker's own refusals said the pool was
//! full, which told her that others were querying.
//!
//! Whether a query passes its limit can depend on the data: a failure after the query was
//! charged keeps the charge, as every resources failure does (docs/server-limits.md).

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};
use datafusion::execution::TaskContext;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Each analyst's share of the process's memory: one pool of `analyst_memory_limit` bytes per
/// analyst (configured analysts only, so the map is as small as the configuration), kept for
/// the life of the server, so that a share never changes while a query of its analyst runs.
/// DataFusion's `FairSpillPool`: the analyst's operators that can spill share the pool fairly.
#[derive(Debug)]
pub struct AnalystPools {
    share: usize,
    pools: Mutex<HashMap<String, Arc<dyn MemoryPool>>>,
}

impl AnalystPools {
    /// Shares of `share` bytes (`[limits] analyst_memory_limit`).
    pub fn new(share: usize) -> Self {
        Self {
            share: share.max(1),
            pools: Mutex::new(HashMap::new()),
        }
    }

    /// `analyst`'s pool.
    pub fn of(&self, analyst: &str) -> Arc<dyn MemoryPool> {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(pools.entry(analyst.to_string()).or_insert_with(|| {
            Arc::new(AnalystPool(
                datafusion::execution::memory_pool::FairSpillPool::new(self.share),
                self.share,
            ))
        }))
    }
}

/// One analyst's share: a `FairSpillPool` of `.1` bytes whose refusals name
/// `[limits] analyst_memory_limit`.
#[derive(Debug)]
struct AnalystPool(datafusion::execution::memory_pool::FairSpillPool, usize);

impl std::fmt::Display for AnalystPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "analyst's pool of {} bytes", self.1)
    }
}

impl MemoryPool for AnalystPool {
    fn name(&self) -> &str {
        "AnalystPool"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.0.register(consumer)
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.0.unregister(consumer)
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.0.grow(reservation, additional)
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.0.shrink(reservation, shrink)
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        self.0.try_grow(reservation, additional).map_err(|_| {
            DataFusionError::ResourcesExhausted(format!(
                "your queries together hold your share of {} bytes of the server's memory \
                 ([limits] analyst_memory_limit)",
                self.1
            ))
        })
    }

    fn reserved(&self) -> usize {
        self.0.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.1)
    }
}

/// One query's memory: at most `limit` bytes of reservations, each also taken from (and given
/// back to) its analyst's pool `inner` (or, outside the server's analysts, the process's).
#[derive(Debug)]
pub struct QueryPool {
    inner: Arc<dyn MemoryPool>,
    limit: usize,
    reserved: AtomicUsize,
    /// Which pools refused memory so far: [`OVER_QUERY_LIMIT`], [`SHARED_POOL_FULL`].
    refused: AtomicU8,
}

/// [`QueryPool::try_grow`] refused memory past the query's limit.
const OVER_QUERY_LIMIT: u8 = 1;
/// The pool the query draws on (its analyst's share) refused memory within the query's limit.
const SHARED_POOL_FULL: u8 = 2;

impl QueryPool {
    pub fn new(inner: Arc<dyn MemoryPool>, limit: usize) -> Self {
        Self {
            inner,
            limit,
            reserved: AtomicUsize::new(0),
            refused: AtomicU8::new(0),
        }
    }

    /// `task` (a query's context, made by its session) with a pool of its own of `limit`
    /// bytes within `within` (its analyst's share); everything else of its runtime is shared.
    pub fn task(task: TaskContext, limit: usize, within: Arc<dyn MemoryPool>) -> TaskContext {
        let mut runtime = task.runtime_env().as_ref().clone();
        runtime.memory_pool = Arc::new(Self::new(within, limit));
        task.with_runtime(Arc::new(runtime))
    }

    fn release(&self, bytes: usize) {
        let _ = self
            .reserved
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
                Some(held.saturating_sub(bytes))
            });
    }
}

/// `error` saying which memory limit refused the query, when it is a resources error of a
/// query whose pool (`pool`, a [`QueryPool`]) refused memory. An operator refused memory may
/// try to spill, and without a spill directory fails with DataFusion's "DiskManager is
/// disabled", which names no limit; a DP aggregation's error is withheld
/// ([`crate::sql::privacy::exec::release`]) but stays a resources error. Other errors are
/// returned as they are.
pub fn name_the_limit(error: DataFusionError, pool: &Arc<dyn MemoryPool>) -> DataFusionError {
    let Some(query) = pool.downcast_ref::<QueryPool>() else {
        return error;
    };
    let DataFusionError::ResourcesExhausted(message) = error.find_root() else {
        return error;
    };
    let refused = query.refused.load(Ordering::SeqCst);
    let mut message = message.clone();
    if refused & OVER_QUERY_LIMIT != 0 && !message.contains("query_memory_limit") {
        message.push_str(&format!(
            "; the query was refused memory past its {} bytes ([limits] query_memory_limit)",
            query.limit
        ));
    }
    if refused & SHARED_POOL_FULL != 0 {
        message.push_str(&match query.inner.downcast_ref::<AnalystPool>() {
            Some(share) => format!(
                "; your queries together held your share of {} bytes of the server's memory \
                 ([limits] analyst_memory_limit)",
                share.1
            ),
            None => "; the process's memory pool for all queries ([limits] memory_limit) was full"
                .to_string(),
        });
    }
    match refused {
        0 => error,
        _ => DataFusionError::ResourcesExhausted(message),
    }
}

impl std::fmt::Display for QueryPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "query pool of {} bytes within {}",
            self.limit, self.inner
        )
    }
}

impl MemoryPool for QueryPool {
    fn name(&self) -> &str {
        "QueryPool"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.inner.register(consumer)
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.inner.unregister(consumer)
    }

    /// Infallible, as DataFusion's `grow` is: counted, so later `try_grow`s see it.
    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.inner.grow(reservation, additional);
        self.reserved.fetch_add(additional, Ordering::SeqCst);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.inner.shrink(reservation, shrink);
        self.release(shrink);
    }

    /// Refused past the query's limit (naming `query_memory_limit`) or when the pool it draws
    /// on refuses (naming that pool's limit); on refusal nothing is counted.
    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        self.reserved
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
                held.checked_add(additional).filter(|n| *n <= self.limit)
            })
            .map_err(|_| {
                self.refused.fetch_or(OVER_QUERY_LIMIT, Ordering::SeqCst);
                DataFusionError::ResourcesExhausted(format!(
                    "the query needs more memory than its {} bytes ([limits] \
                     query_memory_limit)",
                    self.limit
                ))
            })?;
        if let Err(e) = self.inner.try_grow(reservation, additional) {
            self.refused.fetch_or(SHARED_POOL_FULL, Ordering::SeqCst);
            self.release(additional);
            return Err(e);
        }
        Ok(())
    }

    /// This query's reservations.
    fn reserved(&self) -> usize {
        self.reserved.load(Ordering::SeqCst)
    }

    fn memory_limit(&self) -> MemoryLimit {
        match self.inner.memory_limit() {
            MemoryLimit::Finite(n) => MemoryLimit::Finite(n.min(self.limit)),
            _ => MemoryLimit::Finite(self.limit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::memory_pool::GreedyMemoryPool;

    fn pools(global: usize, limit: usize) -> (Arc<dyn MemoryPool>, Arc<dyn MemoryPool>) {
        let global: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(global));
        let query: Arc<dyn MemoryPool> = Arc::new(QueryPool::new(Arc::clone(&global), limit));
        (global, query)
    }

    #[test]
    fn grows_within_its_limit_and_refuses_past_it() {
        let (global, query) = pools(1000, 100);
        let a = MemoryConsumer::new("a").register(&query);
        let b = MemoryConsumer::new("b").register(&query);
        a.try_grow(60).unwrap();
        b.try_grow(40).unwrap();
        assert_eq!((query.reserved(), global.reserved()), (100, 100));
        // One byte more, by either consumer, is refused, naming the option; nothing counted.
        let e = b.try_grow(1).unwrap_err().to_string();
        assert!(e.contains("[limits] query_memory_limit"), "{e}");
        assert!(e.starts_with("Resources exhausted"), "{e}");
        assert_eq!(
            (query.reserved(), global.reserved(), b.size()),
            (100, 100, 40)
        );
        // Shrinking makes room again.
        a.shrink(50);
        assert_eq!((query.reserved(), global.reserved()), (50, 50));
        b.try_grow(50).unwrap();
        assert_eq!(query.reserved(), 100);
        // `grow` is infallible (DataFusion's contract): counted past the limit, then refused.
        a.grow(30);
        assert_eq!((query.reserved(), global.reserved()), (130, 130));
        assert!(a.try_grow(1).is_err());
        assert!(matches!(query.memory_limit(), MemoryLimit::Finite(100)));
    }

    #[test]
    fn releases_on_drop() {
        let (global, query) = pools(1000, 100);
        let a = MemoryConsumer::new("a").register(&query);
        a.try_grow(70).unwrap();
        let split = a.split(20);
        drop(a);
        assert_eq!((query.reserved(), global.reserved()), (20, 20));
        drop(split);
        assert_eq!((query.reserved(), global.reserved()), (0, 0));
        let again = MemoryConsumer::new("again").register(&query);
        again.try_grow(100).unwrap();
    }

    #[test]
    fn the_process_pool_still_bounds_all_queries() {
        let global: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(100));
        let first: Arc<dyn MemoryPool> = Arc::new(QueryPool::new(Arc::clone(&global), 60));
        let second: Arc<dyn MemoryPool> = Arc::new(QueryPool::new(Arc::clone(&global), 60));
        let a = MemoryConsumer::new("a").register(&first);
        let b = MemoryConsumer::new("b").register(&second);
        a.try_grow(60).unwrap();
        // Within the second query's limit, past the process's: refused by the process's pool,
        // and the query's count is rolled back.
        let e = b.try_grow(50).unwrap_err().to_string();
        assert!(!e.contains("query_memory_limit"), "{e}");
        assert_eq!((second.reserved(), global.reserved()), (0, 60));
        b.try_grow(40).unwrap();
        assert_eq!(global.reserved(), 100);
        drop(a);
        assert_eq!((first.reserved(), global.reserved()), (0, 40));
    }

    #[test]
    fn errors_name_the_limit_that_refused() {
        let spill = || {
            DataFusionError::ResourcesExhausted(
                "Memory Exhausted while SpillPool (DiskManager is disabled)".to_string(),
            )
        };
        let (_, query) = pools(100, 10);
        // Nothing refused yet: unchanged.
        let e = name_the_limit(spill(), &query).to_string();
        assert!(!e.contains("[limits]"), "{e}");
        let r = MemoryConsumer::new("r").register(&query);
        assert!(r.try_grow(11).is_err());
        let e = name_the_limit(spill().context("sorting"), &query).to_string();
        assert!(
            e.starts_with("Resources exhausted: Memory Exhausted while SpillPool")
                && e.contains("past its 10 bytes ([limits] query_memory_limit)")
                && !e.contains("memory_limit) was full"),
            "{e}"
        );
        // Our own error is not repeated; other errors are left alone.
        let own = r.try_grow(11).unwrap_err();
        let e = name_the_limit(own, &query).to_string();
        assert_eq!(e.matches("query_memory_limit").count(), 1, "{e}");
        let other = DataFusionError::Execution("x".to_string());
        assert_eq!(
            name_the_limit(other, &query).to_string(),
            "Execution error: x"
        );
        // The process's pool full.
        let (_, query) = pools(5, 10);
        let r = MemoryConsumer::new("r").register(&query);
        assert!(r.try_grow(6).is_err());
        let e = name_the_limit(spill(), &query).to_string();
        assert!(
            e.contains("([limits] memory_limit) was full") && !e.contains("query_memory_limit"),
            "{e}"
        );
    }

    /// Two analysts' shares are independent: one analyst's queries filling their share
    /// refuse memory to that analyst's next query, naming `analyst_memory_limit`, and never
    /// to another analyst's.
    #[test]
    fn an_analyst_s_share_is_theirs_whoever_else_queries() {
        let shares = AnalystPools::new(100);
        let (alice, bob) = (shares.of("alice"), shares.of("bob"));
        assert!(
            Arc::ptr_eq(&alice, &shares.of("alice")),
            "one pool per analyst"
        );
        let queries: Vec<Arc<dyn MemoryPool>> = (0..3)
            .map(|_| Arc::new(QueryPool::new(Arc::clone(&alice), 60)) as Arc<dyn MemoryPool>)
            .collect();
        let held: Vec<_> = queries
            .iter()
            .take(2)
            .map(|q| {
                let r = MemoryConsumer::new("join").register(q);
                r.try_grow(50).unwrap();
                r
            })
            .collect();
        let third = MemoryConsumer::new("third").register(&queries[2]);
        let e = third.try_grow(1).unwrap_err().to_string();
        assert!(e.contains("[limits] analyst_memory_limit"), "{e}");
        let e = name_the_limit(
            DataFusionError::ResourcesExhausted("DiskManager is disabled".to_string()),
            &queries[2],
        )
        .to_string();
        assert!(
            e.contains("share of 100 bytes") && !e.contains("memory_limit) was full"),
            "{e}"
        );
        // Bob's query gets all of its limit.
        let query: Arc<dyn MemoryPool> = Arc::new(QueryPool::new(Arc::clone(&bob), 60));
        let r = MemoryConsumer::new("bob").register(&query);
        r.try_grow(60).unwrap();
        assert_eq!((alice.reserved(), bob.reserved()), (100, 60));
        drop(held);
        assert_eq!(alice.reserved(), 0);
    }

    #[test]
    fn a_task_gets_its_own_pool_within_the_sessions() {
        let task = TaskContext::default();
        let session_pool = Arc::clone(task.memory_pool());
        let within = Arc::clone(&session_pool);
        let task = QueryPool::task(task, 64, within);
        let pool = task.memory_pool();
        assert!(pool.downcast_ref::<QueryPool>().is_some());
        let r = MemoryConsumer::new("r").register(pool);
        r.try_grow(64).unwrap();
        assert!(r.try_grow(1).is_err());
        assert_eq!(session_pool.reserved(), 64);
    }
}
