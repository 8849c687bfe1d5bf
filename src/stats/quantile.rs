//! A DP quantile over a bounded domain by a noisy count tree (the "quantile tree" of Google's
//! differential-privacy library, `cc/algorithms/quantile-tree.h`; the hierarchical method of
//! Qardaji, Yang & Li 2013, PVLDB 6(14), and Cormode, Kulkarni & Srivastava 2019,
//! arXiv:1908.10268).
//!
//! `[lower, upper]` is cut into `BRANCHING^HEIGHT` equal leaves; a value (clamped to the
//! bounds) adds 1 to its leaf and to each of the leaf's ancestors, one node per level, so a
//! unit with `c` rows in a group changes at most `c · HEIGHT` node counts by at most `c` in
//! all: the tree's L1 sensitivity is `c · HEIGHT` ([`QuantileTree::sensitivity`]). Every node
//! count gets integer noise calibrated to that ([`crate::stats::CountNoise`]); the quantile is
//! then found by descending from the root, at each level into the child whose noisy
//! cumulative share passes the wanted rank, and interpolating inside the last node: pure
//! post-processing of the noisy counts. Only the children of visited nodes are read, so only
//! they are noised (`BRANCHING · HEIGHT` draws): the other nodes' noise is independent of what
//! is released, so leaving it undrawn changes nothing in the output's distribution.
//!
//! The state is the leaf counts, sparse ([`LeafCounts`]), merged by adding: partial states of
//! a group combine exactly before the noise is drawn once.

use crate::stats::mechanism::short_number;
use std::collections::BTreeMap;

/// Children per node (Google's default; Qardaji et al. 2013 find 16 near the best for range
/// queries).
pub const BRANCHING: u32 = 16;
/// Levels below the root: `16^4 = 65,536` leaves, a resolution of `(upper − lower) / 65,536`.
pub const HEIGHT: u32 = 4;
/// Noisy children below this share of their siblings' total are read as empty (they are
/// mostly noise), as Google's `kAlpha`.
const EMPTY_SHARE: f64 = 0.0075;
/// Ranks are kept in `[0.005, 0.995]`: the tree cannot tell the extremes from noise (Google's
/// `ClampQuantile`).
const RANK_MARGIN: f64 = 0.005;

/// The bounded domain of one quantile call: `lower < upper`, both finite.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantileTree {
    lower: f64,
    upper: f64,
}

/// How many clamped values fell in each leaf (leaf index → count), only leaves that were hit.
pub type LeafCounts = BTreeMap<u32, u64>;

impl QuantileTree {
    /// The tree over `[lower, upper]`; an error names the bound that is wrong (quoted, as an SQL
    /// argument).
    pub fn new(lower: f64, upper: f64) -> Result<Self, String> {
        if !lower.is_finite() {
            return Err(format!(
                "'lower' must be a finite number, got {}",
                short_number(lower)
            ));
        }
        if !upper.is_finite() {
            return Err(format!(
                "'upper' must be a finite number, got {}",
                short_number(upper)
            ));
        }
        if lower >= upper {
            return Err(format!(
                "'lower' must be less than 'upper', got {} and {}",
                short_number(lower),
                short_number(upper)
            ));
        }
        if !(upper - lower).is_finite() {
            return Err(format!(
                "'upper' - 'lower' must be a finite number, got {} and {}",
                short_number(lower),
                short_number(upper)
            ));
        }
        Ok(Self { lower, upper })
    }

    pub fn lower(&self) -> f64 {
        self.lower
    }

    pub fn upper(&self) -> f64 {
        self.upper
    }

    /// Number of leaves, `BRANCHING^HEIGHT`.
    pub const fn leaves() -> u32 {
        BRANCHING.pow(HEIGHT)
    }

    /// The leaf `value` falls in after clamping to the bounds; `None` for NaN (not counted,
    /// as NULL is not).
    pub fn leaf(&self, value: f64) -> Option<u32> {
        if value.is_nan() {
            return None;
        }
        let share = (value.clamp(self.lower, self.upper) - self.lower) / (self.upper - self.lower);
        let leaves = Self::leaves();
        // share in [0, 1]; the upper bound itself belongs to the last leaf.
        Some(((share * f64::from(leaves)) as u32).min(leaves - 1))
    }

    /// L1 sensitivity of the tree's node counts when a unit contributes at most
    /// `rows_per_unit` rows to a group: each row adds 1 to one node per level.
    pub fn sensitivity(rows_per_unit: u32) -> Result<u32, String> {
        rows_per_unit.checked_mul(HEIGHT).ok_or_else(|| {
            format!("rows per unit {rows_per_unit} times the tree height {HEIGHT} overflows")
        })
    }

    /// The `q`-quantile (`q` in `[0, 1]`) from the leaf counts, each node count read with one
    /// draw of `noise` added (integer noise calibrated to [`Self::sensitivity`]).
    pub fn quantile(
        &self,
        counts: &LeafCounts,
        q: f64,
        noise: &mut dyn FnMut() -> i64,
    ) -> Result<f64, String> {
        if !(0.0..=1.0).contains(&q) {
            return Err(format!("'q' must be a number in [0, 1], got {q}"));
        }
        let mut rank = q.clamp(RANK_MARGIN, 1.0 - RANK_MARGIN);
        // The node reached: its level (0 the root) and its index within the level.
        let (mut level, mut index) = (0u32, 0u32);
        while level < HEIGHT {
            let first_child = index * BRANCHING;
            let noisy: Vec<f64> = (0..BRANCHING)
                .map(|i| {
                    let exact = subtree_count(counts, level + 1, first_child + i);
                    (exact as i128 + noise() as i128) as f64
                })
                .collect();
            let total: f64 = noisy.iter().map(|c| c.max(0.0)).sum();
            if total <= 0.0 {
                break;
            }
            let kept: Vec<f64> = noisy
                .iter()
                .map(|&c| if c >= total * EMPTY_SHARE { c } else { 0.0 })
                .collect();
            let kept_total: f64 = kept.iter().sum();
            if kept_total <= 0.0 {
                break;
            }
            // The first kept child whose cumulative share reaches the rank (the last kept one
            // if rounding leaves the rank just above 1).
            let mut before = 0.0;
            let mut chosen = None;
            for (i, &c) in kept.iter().enumerate() {
                if c <= 0.0 {
                    continue;
                }
                chosen = Some((i as u32, before, c));
                if (before + c) / kept_total >= rank {
                    break;
                }
                before += c;
            }
            let Some((i, before, c)) = chosen else { break };
            rank = ((rank * kept_total - before) / c).clamp(0.0, 1.0);
            level += 1;
            index = first_child + i;
        }
        let (low, high) = self.node_range(level, index);
        Ok(low + rank * (high - low))
    }

    /// The values a node at `level` (0 the root) and `index` covers.
    fn node_range(&self, level: u32, index: u32) -> (f64, f64) {
        let width = f64::from(BRANCHING.pow(HEIGHT - level));
        let leaves = f64::from(Self::leaves());
        let at = |leaf: f64| self.lower + (self.upper - self.lower) * (leaf / leaves);
        (
            at(f64::from(index) * width),
            at((f64::from(index) + 1.0) * width),
        )
    }
}

/// Adds `times` values in `leaf` (partial states merge by adding each of their leaves);
/// whether `leaf` was new to `counts`, so a caller can keep its entry count.
pub fn add(counts: &mut LeafCounts, leaf: u32, times: u64) -> bool {
    match counts.entry(leaf) {
        std::collections::btree_map::Entry::Occupied(mut count) => {
            *count.get_mut() = count.get().saturating_add(times);
            false
        }
        std::collections::btree_map::Entry::Vacant(count) => {
            count.insert(times);
            true
        }
    }
}

/// Exact count of the values under the node at `level` (1..=HEIGHT) and `index`.
fn subtree_count(counts: &LeafCounts, level: u32, index: u32) -> u64 {
    let width = BRANCHING.pow(HEIGHT - level);
    let first = index * width;
    counts
        .range(first..first + width)
        .fold(0u64, |sum, (_, &c)| sum.saturating_add(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::mechanism::{CountNoise, GaussianCalibration, Mechanism};
    use crate::stats::rng::seeded_rng;

    fn counts_of(tree: &QuantileTree, values: impl IntoIterator<Item = f64>) -> LeafCounts {
        let mut counts = LeafCounts::new();
        for v in values {
            if let Some(leaf) = tree.leaf(v) {
                add(&mut counts, leaf, 1);
            }
        }
        counts
    }

    #[test]
    fn bounds_are_checked_and_named() {
        for (lower, upper, named) in [
            (f64::NAN, 1.0, "'lower'"),
            (0.0, f64::INFINITY, "'upper'"),
            (1.0, 1.0, "less than 'upper'"),
            (2.0, 1.0, "less than 'upper'"),
            (-f64::MAX, f64::MAX, "'upper' - 'lower'"),
        ] {
            let error = QuantileTree::new(lower, upper).unwrap_err();
            assert!(error.contains(named), "{lower} {upper}: {error}");
        }
        let tree = QuantileTree::new(0.0, 1.0).unwrap();
        let error = tree
            .quantile(&LeafCounts::new(), 1.5, &mut || 0)
            .unwrap_err();
        assert!(error.contains("'q' must be"), "{error}");
    }

    #[test]
    fn values_land_in_their_leaf_and_extremes_are_clamped() {
        let tree = QuantileTree::new(-10.0, 10.0).unwrap();
        let last = QuantileTree::leaves() - 1;
        assert_eq!(tree.leaf(-10.0), Some(0));
        assert_eq!(tree.leaf(-1e300), Some(0));
        assert_eq!(tree.leaf(10.0), Some(last));
        assert_eq!(tree.leaf(f64::INFINITY), Some(last));
        assert_eq!(tree.leaf(0.0), Some(QuantileTree::leaves() / 2));
        assert_eq!(tree.leaf(f64::NAN), None);
    }

    #[test]
    fn without_noise_the_quantile_is_within_one_leaf_of_the_exact_one() {
        // 10,001 values 0, 0.01, ..., 100 (exact q-quantile 100 q); without noise the descent
        // ends in the leaf that holds it, so the error is at most one leaf, 100 / 65,536.
        let tree = QuantileTree::new(0.0, 100.0).unwrap();
        let counts = counts_of(&tree, (0..=10_000).map(|i| f64::from(i) / 100.0));
        for q in [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99] {
            let got = tree.quantile(&counts, q, &mut || 0).unwrap();
            assert!(
                (got - 100.0 * q).abs() <= 100.0 / 65_536.0 + 0.01,
                "q {q}: {got}"
            );
        }
    }

    #[test]
    fn the_sensitivity_counts_every_level() {
        assert_eq!(QuantileTree::sensitivity(1), Ok(HEIGHT));
        assert_eq!(QuantileTree::sensitivity(3), Ok(3 * HEIGHT));
        assert!(QuantileTree::sensitivity(u32::MAX).is_err());
        // One value touches exactly HEIGHT node counts, each by 1.
        let tree = QuantileTree::new(0.0, 1.0).unwrap();
        let (a, b) = (
            counts_of(&tree, [0.1, 0.5]),
            counts_of(&tree, [0.1, 0.5, 0.77]),
        );
        let mut l1 = 0;
        for level in 1..=HEIGHT {
            for index in 0..BRANCHING.pow(level) {
                l1 += subtree_count(&b, level, index) - subtree_count(&a, level, index);
            }
        }
        assert_eq!(l1, u64::from(HEIGHT));
    }

    #[test]
    fn with_noise_the_median_is_accurate() {
        // 20,000 values evenly spread on [0, 1000) (exact median 500), Laplace noise at ε = 1
        // with sensitivity 4 (discrete Laplace, scale 4, sd 4√2 ≈ 5.7 per count). At each of
        // the first three levels the descent's cut falls after about 8 of 16 children, whose
        // summed noise has sd 5.7·√8 ≈ 16 counts, against 20,000, 1,250 and 78 values under
        // the node: a value error of 16/20,000·1000 = 16/1,250·62.5 = 16/78·3.9 ≈ 0.8 each;
        // at the last level the node is 0.24 wide. So one run's error has sd at most about
        // √(3·0.8² + 0.24²) ≈ 1.4 (measured over the 200 runs: 0.63). Each run must be within
        // 6 sd (8.4) and the mean of 200 within 4 standard errors (4·1.4/√200 ≈ 0.40).
        let tree = QuantileTree::new(0.0, 1000.0).unwrap();
        let counts = counts_of(&tree, (0..20_000).map(|i| f64::from(i) * 0.05));
        let noise = CountNoise::calibrate(
            Mechanism::Laplace,
            1.0,
            None,
            QuantileTree::sensitivity(1).unwrap(),
            GaussianCalibration::Analytic,
        )
        .unwrap();
        let mut rng = seeded_rng(7, "quantile-test");
        let mut errors = Vec::new();
        for _ in 0..200 {
            let got = tree
                .quantile(&counts, 0.5, &mut || noise.sample(&mut rng))
                .unwrap();
            assert!((got - 500.0).abs() < 8.4, "{got}");
            errors.push(got - 500.0);
        }
        let mean = errors.iter().sum::<f64>() / errors.len() as f64;
        assert!(mean.abs() < 0.40, "mean error {mean}");
    }

    #[test]
    fn an_empty_group_gives_a_value_inside_the_bounds() {
        // No data: the noisy counts are noise only; the answer is still in [lower, upper].
        let tree = QuantileTree::new(-5.0, 5.0).unwrap();
        let noise = CountNoise::calibrate(
            Mechanism::Laplace,
            0.1,
            None,
            4,
            GaussianCalibration::Analytic,
        )
        .unwrap();
        let mut rng = seeded_rng(11, "quantile-empty");
        for q in [0.0, 0.3, 1.0] {
            let got = tree
                .quantile(&LeafCounts::new(), q, &mut || noise.sample(&mut rng))
                .unwrap();
            assert!((-5.0..=5.0).contains(&got), "{got}");
        }
    }

    #[test]
    fn merging_partial_states_adds_counts() {
        let tree = QuantileTree::new(0.0, 1.0).unwrap();
        let mut a = counts_of(&tree, [0.1, 0.2]);
        let b = counts_of(&tree, [0.2, 0.9]);
        let new: Vec<bool> = b
            .iter()
            .map(|(&leaf, &times)| add(&mut a, leaf, times))
            .collect();
        assert_eq!(a, counts_of(&tree, [0.1, 0.2, 0.2, 0.9]));
        assert_eq!(
            new,
            [false, true],
            "the 0.2 leaf existed, the 0.9 leaf is new"
        );
    }
}
