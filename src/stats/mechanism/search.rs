//! The one search every calibration shares: the least index at which a monotone test of a
//! privacy map passes, found by doubling and then bisecting (the unbounded search of Bentley &
//! Yao 1976, "An almost optimal algorithm for unbounded searching", Information Processing
//! Letters 5(3), doi:10.1016/0020-0190(76)90071-5).
//!
//! Each caller maps the index to what it steps over: group selection's threshold above its
//! floor (`selection.rs`), the per-value Gaussian calibration's `n`-th step of `σ²` and the
//! vector calibration's `σ²` on a grid of relative `10⁻⁹` (`gaussian.rs`). Each evaluation
//! costs a tail sum of `O(σ)` terms, so the number of evaluations is what an analyst's
//! extreme `ε` or `δ` can drive up; here it is logarithmic in the index found.

/// The least `n ≥ 1` at most `limit` for which `passes(n)` holds, where `passes` is monotone
/// (false up to some index, true from it on) and taken to be false at 0: `first` (raised to 1)
/// is tried, doubled until it passes (the last try is `limit` itself), and the gap to the
/// last index that failed is bisected. With `first = 1` that takes at most
/// `2·(⌈log₂ n⌉ + 1)` evaluations. `Ok(None)` when `passes(limit)` fails; an error of
/// `passes` ends the search and is returned.
pub fn least_passing_index<E>(
    first: u64,
    limit: u64,
    mut passes: impl FnMut(u64) -> Result<bool, E>,
) -> Result<Option<u64>, E> {
    let (mut fails, mut hi) = (0u64, first.clamp(1, limit.max(1)));
    loop {
        if passes(hi)? {
            break;
        }
        if hi >= limit {
            return Ok(None);
        }
        (fails, hi) = (hi, hi.saturating_mul(2).min(limit));
    }
    while hi - fails > 1 {
        let mid = fails + (hi - fails) / 2;
        if passes(mid)? {
            hi = mid;
        } else {
            fails = mid;
        }
    }
    Ok(Some(hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    fn search(first: u64, limit: u64, least: u64) -> (Option<u64>, u32) {
        let mut calls = 0;
        let found = least_passing_index::<Infallible>(first, limit, |n| {
            calls += 1;
            Ok(n >= least)
        })
        .unwrap();
        (found, calls)
    }

    #[test]
    fn the_least_passing_index_is_found_in_logarithmic_evaluations() {
        for least in [1u64, 2, 3, 4, 5, 1_000, 123_456_789, 1 << 50, (1 << 62) + 1] {
            for first in [0, 1, 2, 5, least, least + 1, 1 << 40] {
                let (found, calls) = search(first, u64::MAX, least);
                assert_eq!(found, Some(least), "first {first}, least {least}");
                // Doubling and bisection each take at most ⌈log2(span)⌉ + 1 evaluations.
                let span = least.max(first).max(1) as f64;
                let most = 2.0 * (span.log2().ceil() + 1.0);
                assert!(
                    f64::from(calls) <= most,
                    "{calls} evaluations for {least} from {first}"
                );
            }
        }
    }

    #[test]
    fn the_limit_is_tried_last_and_never_passed() {
        // The doubling's last try is the limit itself, not the next power of two.
        assert_eq!(search(1, 1000, 1000), (Some(1000), 11 + 9));
        assert_eq!(search(1, 1000, 1001).0, None);
        assert_eq!(search(5000, 1000, 1).0, Some(1));
        // At u64::MAX the doubling saturates and stops, where it could have wrapped.
        let (found, calls) = search(1, u64::MAX, u64::MAX);
        assert_eq!(found, Some(u64::MAX));
        assert!(calls <= 2 * 65, "{calls}");
        let mut calls = 0;
        let none = least_passing_index::<Infallible>(3, u64::MAX, |_| {
            calls += 1;
            Ok(false)
        });
        assert_eq!(none, Ok(None));
        assert!(calls <= 64, "{calls}");
    }

    #[test]
    fn an_error_of_the_test_ends_the_search() {
        let mut calls = 0;
        let found = least_passing_index(1, u64::MAX, |n| {
            calls += 1;
            if n >= 64 {
                Err(format!("stopped at {n}"))
            } else {
                Ok(false)
            }
        });
        assert_eq!(found, Err("stopped at 64".to_string()));
        assert_eq!(calls, 7);
    }
}
