//! The root search of [`super::invert_score_test`]: where a decreasing function of `ln θ`
//! crosses 0, from a starting point near the crossing.

use super::LOG_THETA_RANGE;

/// Bisection steps on `ln θ` (56 / 2⁶⁰ < 10⁻¹⁶: the last bit of an `f64`).
const BISECTION_STEPS: usize = 60;

/// Tolerance of the root search on `ln θ`: `10⁻¹³` (a relative `10⁻¹³` on `θ`).
const LOG_THETA_TOLERANCE: f64 = 1e-13;

/// Iterations of [`anderson_bjorck`] before it hands its bracket to bisection.
const ROOT_ITERATIONS: usize = 200;

/// Where `g` (decreasing in `ln θ`, `g(−28) > 0 ≥ g(28)`) crosses 0, given `g(start)`: a
/// bracket grown from `start` (the estimate, near which both ends lie) by doubling steps,
/// then [`anderson_bjorck`] on it, which converges superlinearly on the smooth `T`; about 7
/// evaluations per end where bisection of the whole range needs 60 (BENCHMARKS.md).
pub(super) fn crossing(g: &dyn Fn(f64) -> f64, start: f64, g_start: f64) -> f64 {
    let (mut lo, mut g_lo, mut hi, mut g_hi) = (start, g_start, start, g_start);
    let mut step = 0.25;
    if g_start > 0.0 {
        while hi < LOG_THETA_RANGE {
            (lo, g_lo) = (hi, g_hi);
            hi = (hi + step).min(LOG_THETA_RANGE);
            step *= 2.0;
            g_hi = g(hi);
            if g_hi <= 0.0 {
                break;
            }
        }
    } else {
        while lo > -LOG_THETA_RANGE {
            (hi, g_hi) = (lo, g_lo);
            lo = (lo - step).max(-LOG_THETA_RANGE);
            step *= 2.0;
            g_lo = g(lo);
            if g_lo > 0.0 {
                break;
            }
        }
    }
    // The callers check the range's ends first, so the bracket holds the sign change; should
    // a NaN break it, bisection still returns a point of the bracket.
    if g_lo > 0.0 && g_hi <= 0.0 {
        anderson_bjorck(g, (lo, g_lo), (hi, g_hi))
    } else {
        bisect_crossing(g, lo, hi)
    }
}

/// The root of `g` in a bracket `lo < hi` whose values `g(lo) > 0 ≥ g(hi)` are known, to
/// [`LOG_THETA_TOLERANCE`] on the bracket's width: regula falsi in which the end that stays
/// twice in a row has its value scaled by `1 − g(x)/g(replaced end)` (½ when that is not
/// positive): the Anderson-Björck (1973) variant of the Illinois method (Dowell & Jarratt
/// 1971), of order about 1.7 on smooth functions. Written here rather than taken from the
/// `roots` crate, whose regula falsi evaluates both ends of the bracket again (two of each
/// end's evaluations) and scales by ½ only.
fn anderson_bjorck(
    g: &dyn Fn(f64) -> f64,
    (mut lo, mut g_lo): (f64, f64),
    (mut hi, mut g_hi): (f64, f64),
) -> f64 {
    // Which end the last step replaced: 1 for `lo`, −1 for `hi`, 0 before the first.
    let mut last = 0;
    for _ in 0..ROOT_ITERATIONS {
        let mut x = (lo * g_hi - hi * g_lo) / (g_hi - g_lo);
        if !x.is_finite() {
            // An infinite end value (`T` where its variance vanishes): bisect this step.
            x = 0.5 * (lo + hi);
        }
        if hi - lo <= LOG_THETA_TOLERANCE {
            return x;
        }
        let g_x = g(x);
        if g_x == 0.0 {
            return x;
        }
        if g_x.is_nan() {
            return bisect_crossing(g, lo, hi);
        }
        if g_x > 0.0 {
            if last == 1 {
                g_hi *= stay_factor(g_x, g_lo);
            }
            (lo, g_lo, last) = (x, g_x, 1);
        } else {
            if last == -1 {
                g_lo *= stay_factor(g_x, g_hi);
            }
            (hi, g_hi, last) = (x, g_x, -1);
        }
    }
    bisect_crossing(g, lo, hi)
}

/// Anderson-Björck's factor for the end that stays when the new value `g_x` replaces the value
/// `g_replaced` on its side: `1 − g_x/g_replaced`, or ½ (Illinois) when that is not positive.
fn stay_factor(g_x: f64, g_replaced: f64) -> f64 {
    let m = 1.0 - g_x / g_replaced;
    if m > 0.0 {
        m
    } else {
        0.5
    }
}

/// The crossing of [`crossing`] by bisection of `[lo, hi]` (`g(lo) > 0 ≥ g(hi)`), to the last
/// bit of an `f64` ([`BISECTION_STEPS`]).
pub(super) fn bisect_crossing(g: &dyn Fn(f64) -> f64, mut lo: f64, mut hi: f64) -> f64 {
    for _ in 0..BISECTION_STEPS {
        let mid = 0.5 * (lo + hi);
        if g(mid) > 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// `(root, evaluations)` of [`crossing`] from `start` (its value given, as the callers do).
    fn counted(g: impl Fn(f64) -> f64, start: f64) -> (f64, usize) {
        let calls = Cell::new(0);
        let counting = |u: f64| {
            calls.set(calls.get() + 1);
            g(u)
        };
        let root = crossing(&counting, start, g(start));
        (root, calls.get())
    }

    #[test]
    fn crossing_reuses_known_values_and_converges_superlinearly() {
        // (g, start, root, evaluations): a line, the shape of a score statistic in ln θ (steep
        // near the estimate, flat far from it), a convex one, and one whose far end is +∞ (`T`
        // where its variance vanishes). The evaluations are this search's (it is
        // deterministic); the search used before (the `roots` crate's Illinois method, which
        // evaluated the bracket's ends again) takes 5, 11, 13 and 5 on these functions in a
        // replay, and bisection of the whole range takes 60.
        type Case<'a> = (&'a dyn Fn(f64) -> f64, f64, f64, usize);
        let cases: [Case; 4] = [
            (&|u| 0.5 - u, 0.0, 0.5, 3),
            (&|u| (3.0 * (0.3 - u)).tanh(), -1.0, 0.3, 9),
            (&|u| 1.0 - u.exp(), 1.5, 0.0, 9),
            (
                &|u| if u <= -2.0 { f64::INFINITY } else { -0.7 - u },
                0.0,
                -0.7,
                3,
            ),
        ];
        for (k, (g, start, root, most)) in cases.into_iter().enumerate() {
            let (found, calls) = counted(g, start);
            assert!((found - root).abs() < 1e-12, "case {k}: {found} vs {root}");
            assert!(
                calls <= most,
                "case {k}: {calls} evaluations, at most {most}"
            );
        }
    }
}
