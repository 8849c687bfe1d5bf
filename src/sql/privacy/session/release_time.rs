//! When a locked session's result is released: on a schedule that the analyst's own earlier
//! results fix, not at the moment the query happens to finish (`[limits] release_quantum_ms`).
//!
//! The time a query takes depends on the rows it reads: a join that keeps one person's rows
//! only when they are present, and the work a statement does on them, make it slower with
//! that person than without (docs/privacy-analysis.md, "What is not covered"). The noise covers
//! the value released, not the moment; an analyst who times answers reads that difference.
//!
//! This is *predictive mitigation* (Askarov, Zhang & Myers 2010, "Predictive black-box
//! mitigation of timing channels", CCS, doi:10.1145/1866307.1866341; for request/response
//! systems, Zhang, Askarov & Myers 2011, CCS, doi:10.1145/2046707.2046772). Each analyst has
//! a level `k`, starting at 0. A result (its first batch, its error, or its end) begun at `t`
//! is held until `t + q·2^k` (`q` the quantum): released then however early it was ready, so
//! its time says nothing about the data. A result not ready by then (a misprediction) is
//! released at the first `t + q·2^j`, `j > k`, that it is ready by, and the analyst's level
//! becomes `j` for every later result. The top level's interval is the query deadline
//! (`query_timeout_seconds`), past which no query runs.
//!
//! **What it bounds.** A result released at the analyst's current level shows nothing: its
//! time is fixed by the level, which earlier results set. Information flows only through
//! mispredictions, and each raises the level for good, so one analyst sees at most
//! `L = ⌈log₂(deadline / q)⌉` of them in the life of the process (13 at `q` = 100 ms and the
//! default 600 s deadline). Over `N` results, what the analyst can observe is which results
//! mispredicted (at most `L` of `N`) and the increasing levels they went to (a subset of `L`):
//! at most `N^L·2^L` schedules, so `L·(log₂N + 1)` bits, against a channel of unbounded
//! capacity without it (the counting argument of Askarov et al., in this setting). A query
//! stopped at the deadline is released when it is stopped, a few milliseconds after it.
//! Honest analysts pay latency only: each result waits for the level's interval, and a slow
//! query raises the interval of all that analyst's later ones.
//!
//! **What it does not bound.** Only the moment a result reaches the analyst is scheduled. Work
//! done for one analyst still takes cores from the others' queries (the runtimes per analyst
//! of `dp-server` share the machine), and a level is per process and per analyst (its ledger):
//! a restart of the process starts every analyst at level 0 again.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// One analyst's release schedule (module docs): the quantum, the deadline, the level.
#[derive(Debug)]
pub struct ReleaseSchedule {
    quantum: Duration,
    deadline: Duration,
    /// The last level: its interval is the deadline.
    top: u32,
    level: AtomicU32,
}

impl ReleaseSchedule {
    /// A schedule of intervals `quantum·2^k`, up to `deadline`, at level 0. `None` for a zero
    /// quantum (no schedule: results go as soon as they are ready).
    pub fn new(quantum: Duration, deadline: Duration) -> Option<Self> {
        if quantum.is_zero() {
            return None;
        }
        let mut top = 0;
        while scaled(quantum, top) < deadline && top < 31 {
            top += 1;
        }
        Some(Self {
            quantum,
            deadline,
            top,
            level: AtomicU32::new(0),
        })
    }

    /// The analyst's current level.
    pub fn level(&self) -> u32 {
        self.level.load(Ordering::SeqCst)
    }

    /// How long after its start a result is held at `level`.
    pub fn interval(&self, level: u32) -> Duration {
        scaled(self.quantum, level.min(self.top)).min(self.deadline.max(self.quantum))
    }

    /// When a result begun at `started` and ready at `ready` is released, raising the level
    /// if it was not ready within the current level's interval (module docs).
    pub fn release_at(&self, started: Instant, ready: Instant) -> Instant {
        let took = ready.saturating_duration_since(started);
        let current = self.level();
        let mut level = current;
        while level < self.top && self.interval(level) < took {
            level += 1;
        }
        if level > current {
            self.level.fetch_max(level, Ordering::SeqCst);
        }
        // An interval past what an `Instant` holds (an owner's deadline of centuries) is
        // the same as none left: released when ready.
        started
            .checked_add(self.interval(level))
            .map_or(ready, |at| at.max(ready))
    }
}

/// `quantum · 2^level`, saturating.
fn scaled(quantum: Duration, level: u32) -> Duration {
    quantum.saturating_mul(1u32.checked_shl(level).unwrap_or(u32::MAX))
}

/// A locked session's release schedule, kept in its configuration
/// ([`datafusion::prelude::SessionConfig::with_extension`]) by
/// [`crate::owner::Owner::locked_session`]; one per analyst, shared by the analyst's sessions.
#[derive(Debug, Clone)]
pub struct ReleaseTiming(pub std::sync::Arc<ReleaseSchedule>);

/// The release schedule of `ctx`'s results, if the owner set one.
pub fn release_schedule(
    ctx: &datafusion::prelude::SessionContext,
) -> Option<std::sync::Arc<ReleaseSchedule>> {
    ctx.state_ref()
        .read()
        .config()
        .get_extension::<ReleaseTiming>()
        .map(|t| std::sync::Arc::clone(&t.0))
}

/// `stream` with its first event (a batch, an error, or its end) held until `ctx`'s schedule
/// releases it, counted from this call; as it is when the session has no schedule.
#[cfg(feature = "cli")]
pub fn on_release_schedule(
    ctx: &datafusion::prelude::SessionContext,
    stream: datafusion::execution::SendableRecordBatchStream,
) -> datafusion::execution::SendableRecordBatchStream {
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
    use futures::StreamExt;
    let Some(schedule) = release_schedule(ctx) else {
        return stream;
    };
    let schema = stream.schema();
    let started = Instant::now();
    let state = (stream, Some(schedule));
    let held = futures::stream::unfold(state, move |(mut stream, schedule)| async move {
        let next = stream.next().await;
        if let Some(schedule) = schedule {
            let at = schedule.release_at(started, Instant::now());
            tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
        }
        next.map(|item| (item, (stream, None)))
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, held))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn schedule() -> ReleaseSchedule {
        ReleaseSchedule::new(100 * MS, Duration::from_secs(600)).expect("a quantum")
    }

    #[test]
    fn a_zero_quantum_is_no_schedule() {
        assert!(ReleaseSchedule::new(Duration::ZERO, Duration::from_secs(600)).is_none());
    }

    #[test]
    fn results_ready_within_the_interval_are_released_at_its_end() {
        let s = schedule();
        let t = Instant::now();
        for took in [0, 1, 50, 99, 100] {
            assert_eq!(
                s.release_at(t, t + took * MS),
                t + 100 * MS,
                "took {took} ms"
            );
        }
        assert_eq!(s.level(), 0);
    }

    #[test]
    fn a_late_result_goes_at_the_next_level_it_is_ready_by_and_the_level_stays() {
        let s = schedule();
        let t = Instant::now();
        // 250 ms: past 100 and 200, within 400.
        assert_eq!(s.release_at(t, t + 250 * MS), t + 400 * MS);
        assert_eq!(s.level(), 2);
        // A fast result afterwards waits for the raised interval.
        let u = t + Duration::from_secs(1);
        assert_eq!(s.release_at(u, u + MS), u + 400 * MS);
        // Exactly at an interval's end is within it.
        assert_eq!(s.release_at(u, u + 400 * MS), u + 400 * MS);
        assert_eq!(s.level(), 2);
    }

    #[test]
    fn the_top_level_is_the_deadline() {
        let s = schedule();
        // 100 ms · 2^13 = 819.2 s is the first interval at least the 600 s deadline.
        assert_eq!(s.top, 13);
        assert_eq!(s.interval(12), 409_600 * MS);
        assert_eq!(s.interval(13), Duration::from_secs(600));
        assert_eq!(s.interval(40), Duration::from_secs(600));
        let t = Instant::now();
        // A result past the deadline (its stopped query's error) goes when it is ready.
        let late = t + Duration::from_secs(601);
        assert_eq!(s.release_at(t, late), late);
        assert_eq!(s.level(), 13);
        assert_eq!(s.release_at(t, t + MS), t + Duration::from_secs(600));
    }

    /// The bound of the module docs: however the times fall, one analyst sees at most `top`
    /// mispredictions, and every other result's release is fixed by the level before it.
    #[test]
    fn mispredictions_are_at_most_the_levels() {
        let s = schedule();
        let mut t = Instant::now();
        let mut raised = 0;
        // Times that grow by 1.5x a query, from 1 ms to past the deadline: each is a candidate
        // misprediction.
        let mut took = MS;
        while took < Duration::from_secs(700) {
            let before = s.level();
            let released = s.release_at(t, t + took);
            if s.level() > before {
                raised += 1;
            } else {
                // Past the deadline (at the top level), when it was stopped.
                assert_eq!(released, (t + s.interval(before)).max(t + took));
            }
            t += Duration::from_secs(1000);
            took = took.mul_f64(1.5);
        }
        assert!(raised <= s.top, "{raised} mispredictions, {} levels", s.top);
        assert_eq!(s.level(), s.top);
    }

    /// Extreme settings an owner can write (a 1 ms quantum and a deadline of `u64::MAX`
    /// seconds, a quantum of an hour and a shorter deadline) neither overflow nor panic.
    #[test]
    fn extreme_settings_do_not_overflow() {
        let s = ReleaseSchedule::new(MS, Duration::from_secs(u64::MAX)).expect("a quantum");
        assert_eq!(s.top, 31);
        let t = Instant::now();
        assert_eq!(s.release_at(t, t + MS), t + MS);
        let late = t + Duration::from_secs(3600 * 24 * 365);
        assert_eq!(s.release_at(t, late), late);
        // A quantum longer than the deadline is one level of the quantum.
        let s = ReleaseSchedule::new(Duration::from_secs(3600), Duration::from_secs(600))
            .expect("a quantum");
        assert_eq!(s.top, 0);
        assert_eq!(s.release_at(t, t + MS), t + Duration::from_secs(3600));
    }

    /// The schedule is the same whatever the data: two analysts whose queries take different
    /// times within the interval see the same release times (the neighbour view of it).
    #[test]
    fn neighbouring_times_within_the_level_give_one_release() {
        let (with, without) = (schedule(), schedule());
        let t = Instant::now();
        for (a, b) in [(3, 40), (20, 95), (1, 100)] {
            assert_eq!(
                with.release_at(t, t + a * MS),
                without.release_at(t, t + b * MS)
            );
        }
    }
}
