//! The clamping grid of a clamped sum, shared by the sum and the mean statistics: the bounds
//! checked, each value clamped to `[lower, upper]` and rounded to a power-of-two grid, the exact sum in
//! integer grid units, and the integer noise calibrated in grid units.
//!
//! Sensitivity (replace-one neighbours): a unit adds at most `rows = max_rows_per_unit` values
//! to a group, each in `[lower, upper]`, so its share of one group's sum lies in
//! `[rows·min(lower, 0), rows·max(upper, 0)]` and replacing it changes that sum by at most
//! `Δ = rows·(max(upper, 0) − min(lower, 0))` ([`sum_noise`] calibrates for it).
//!
//! Noise without the floating-point leak: adding a floating-point Laplace sample to a float
//! leaks through the pattern of representable outputs (Mironov 2012, "On significance of the
//! least significant bits for differential privacy", CCS, doi:10.1145/2382196.2382264), and a
//! floating-point sum can exceed its nominal sensitivity by rounding. So, as OpenDP's
//! discretised Laplace and Google DP's secure noise do, every clamped value is rounded to a
//! grid of `g = 2^k` ([`Clamp`]), the sum is kept exactly in integer grid units ([`GridSums`],
//! checked), and the exact discrete Laplace or Gaussian sampler of [`crate::stats::CountNoise`]
//! adds integer noise in grid units, calibrated for the exact sensitivity in grid units
//! ([`Grid`]); the release is `units·g`. Rounding is monotone, so a rounded value stays within
//! the rounded bounds and the sensitivity in grid units is exact. The grid is the finest that
//! keeps the sensitivity within `2^30` grid units and the noise scale within the sampler's
//! `2^40` grid units (for Laplace noise of scale `b`: no coarser than `max(Δ/2^29, b/2^38)`,
//! rounding negligible against the noise; `2^12` units for the Gaussian, whose exact sampler is
//! checked up to `σ = 1e5` units). Integer inputs with integer bounds stay on integers
//! (`k ≥ 0`, `k = 0` unless `Δ > 2^30`); NaN values do not count (as NULL); `±∞` clamp to the
//! bounds.

use super::statistic::{Call, StatisticNoise};
use crate::stats::mechanism::{short_number, PrivacyLoss, ReleaseShape};
use crate::stats::CountNoise;
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use datafusion::common::{exec_datafusion_err, internal_err, plan_err, Result, ScalarValue};
use datafusion::logical_expr::EmitTo;
use datafusion_functions_aggregate_common::aggregate::groups_accumulator::accumulate::accumulate;

/// The largest grid exponent: the release `units·2^k` (at most `2^100` units) stays finite.
const MAX_GRID_EXPONENT: i32 = 900;

/// Validates the bounds (the first two constants) and calibrates the noise of a clamped sum
/// whose release costs `(epsilon, delta)` and a replaced unit moves `sides` sums in each of
/// its groups ([`Call::shape`]): the grid and its noise for real inputs and, with integer
/// bounds, for integer inputs.
pub(super) fn sum_noise(
    call: &Call<'_>,
    epsilon: f64,
    delta: Option<f64>,
    sides: u32,
) -> Result<SumNoise> {
    let name = call.name;
    let coordinates = call.shape(sides, 1)?.coordinates;
    let release = (epsilon, delta, coordinates);
    let (lower, upper) = (call.number(0, "lower")?, call.number(1, "upper")?);
    if lower > upper {
        return plan_err!(
            "{name}: argument 'lower'={} is above argument 'upper'={}",
            short_number(lower),
            short_number(upper)
        );
    }
    // The sensitivity `rows·(max(upper, 0) − min(lower, 0))`, in floating point to choose
    // the grid; past the largest DOUBLE it is refused by name.
    let width = call.contribution.rows as f64 * (upper.max(0.0) - lower.min(0.0));
    if !width.is_finite() {
        return plan_err!(
            "{name}: arguments 'lower'={} and 'upper'={}: the sensitivity max_rows_per_unit x (max(upper, 0) - min(lower, 0)) overflows a DOUBLE",
            short_number(lower),
            short_number(upper)
        );
    }
    let real = Grid::choose(call, release, width, -1022, MAX_GRID_EXPONENT, |k| {
        let scale = 2f64.powi(-k);
        (
            (lower * scale).round() as i128,
            (upper * scale).round() as i128,
        )
    })?;
    let integer = match call.constants_i64() {
        Some((l, u)) => {
            let (l, u) = (l as i128, u as i128);
            Some(Grid::choose(call, release, width, 0, 120, |k| {
                (round_shift(l, k), round_shift(u, k))
            })?)
        }
        None => None,
    };
    Ok(SumNoise {
        lower,
        upper,
        integer: integer.map(|g| (g, call.constants_i64())),
        real,
    })
}

impl Call<'_> {
    /// The integer bounds, when both constants are integers.
    fn constants_i64(&self) -> Option<(i64, i64)> {
        match self.constants {
            [ScalarValue::Int64(Some(l)), ScalarValue::Int64(Some(u)), ..] => Some((*l, *u)),
            _ => None,
        }
    }
}

/// `round(x / 2^k)` in integers (halves up), monotone in `x`.
fn round_shift(x: i128, k: i32) -> i128 {
    if k <= 0 {
        x
    } else {
        (x + (1i128 << (k - 1))) >> k
    }
}

/// A grid `2^exponent`, the bounds in grid units and the noise calibrated in grid units.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Grid {
    pub(super) exponent: i32,
    pub(super) lower: i128,
    pub(super) upper: i128,
    pub(super) noise: CountNoise,
}

impl Grid {
    /// The coarsest-needed grid: from the first exponent at which the sensitivity is at most
    /// `2^30` grid units (`2^12` for the Gaussian, whose exact sampler is checked up to
    /// `σ = 1e5` units) upwards, the first at which the noise calibrates.
    /// `bounds(k)` gives the bounds in units of `2^k`; `width` is the sensitivity; `release`
    /// is the whole release's `(ε, δ)` and how many sums a unit moves.
    fn choose(
        call: &Call<'_>,
        release: (f64, Option<f64>, u32),
        width: f64,
        min_exponent: i32,
        max_exponent: i32,
        bounds: impl Fn(i32) -> (i128, i128),
    ) -> Result<Self> {
        let rows = call.contribution.rows as i128;
        let options = call.options;
        let (epsilon, delta, coordinates) = release;
        // The grid aims at each sum's share of ε (the per-value calibration's scale).
        let target = options
            .mechanism
            .law()
            .grid_sensitivity(epsilon / coordinates as f64);
        let first = if width > 0.0 {
            ((width / target.max(1.0)).log2().ceil() as i32).clamp(min_exponent, max_exponent)
        } else {
            min_exponent.max(0)
        };
        let mut last = String::from("no grid is fine enough");
        for exponent in first..=max_exponent {
            let (lower, upper) = bounds(exponent);
            let units = upper
                .max(0)
                .checked_sub(lower.min(0))
                .and_then(|w| w.checked_mul(rows))
                .and_then(|u| u32::try_from(u).ok());
            let Some(units) = units else {
                last = format!("the sensitivity is more than 2^32 units of the grid 2^{exponent}");
                continue;
            };
            match CountNoise::calibrate_release(
                options.mechanism,
                epsilon,
                delta,
                ReleaseShape::new(coordinates, units.max(1)),
                options.gaussian_calibration,
            ) {
                Ok(noise) => {
                    return Ok(Self {
                        exponent,
                        lower,
                        upper,
                        noise,
                    })
                }
                Err(e) => last = e,
            }
        }
        plan_err!(
            "{}: arguments 'lower' and 'upper' are too wide for the epsilon (no grid up to 2^{max_exponent} calibrates: {last})",
            call.name
        )
    }
}

/// The calibration of one clamped sum: the bounds, and the grid and noise for real inputs
/// and (integer bounds only) for integer inputs.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SumNoise {
    pub(super) lower: f64,
    pub(super) upper: f64,
    pub(super) integer: Option<(Grid, Option<(i64, i64)>)>,
    pub(super) real: Grid,
}

impl StatisticNoise for SumNoise {
    /// The real grid's noise (the integer grid, when there is one, is calibrated for the same
    /// release and used instead of it, never beside it).
    fn loss(&self) -> PrivacyLoss {
        self.real.noise.loss()
    }
}

/// How a value becomes grid units, and the grid's noise.
pub(super) enum Clamp {
    Integer {
        lower: i64,
        upper: i64,
        exponent: u32,
        grid: Grid,
    },
    Real {
        lower: f64,
        upper: f64,
        inverse_grid: f64,
        grid: Grid,
    },
}

impl Clamp {
    /// The clamping and grid for the input type (`Int64` or `Float64`, after coercion) of a
    /// call of the function `name`.
    pub(super) fn for_input(name: &str, noise: &SumNoise, types: &[DataType]) -> Result<Self> {
        Ok(match types.first() {
            Some(DataType::Int64) => match &noise.integer {
                Some((grid, Some((l, u)))) => Clamp::Integer {
                    lower: *l,
                    upper: *u,
                    exponent: grid.exponent as u32,
                    grid: grid.clone(),
                },
                _ => return internal_err!("{name}: integer input without integer bounds"),
            },
            Some(DataType::Float64) => Clamp::Real {
                lower: noise.lower,
                upper: noise.upper,
                inverse_grid: 2f64.powi(-noise.real.exponent),
                grid: noise.real.clone(),
            },
            other => return internal_err!("{name}: unexpected input type {other:?}"),
        })
    }

    /// Calls `f(group, units)` for every counted row (non-NULL, not NaN, the filter holds).
    pub(super) fn accumulate(
        &self,
        values: &ArrayRef,
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        mut f: impl FnMut(usize, i64) + Send,
    ) {
        match self {
            // Grid 1 (integer bounds within 2^30): no rounding.
            Clamp::Integer {
                lower,
                upper,
                exponent: 0,
                ..
            } => accumulate(
                group_indices,
                values.as_primitive::<Int64Type>(),
                opt_filter,
                |group, v| f(group, v.clamp(*lower, *upper)),
            ),
            Clamp::Integer {
                lower,
                upper,
                exponent,
                ..
            } => accumulate(
                group_indices,
                values.as_primitive::<Int64Type>(),
                opt_filter,
                |group, v| f(group, int_units(v, *lower, *upper, *exponent)),
            ),
            Clamp::Real {
                lower,
                upper,
                inverse_grid,
                ..
            } => accumulate(
                group_indices,
                values.as_primitive::<Float64Type>(),
                opt_filter,
                |group, v| {
                    if let Some(u) = real_units(v, *lower, *upper, *inverse_grid) {
                        f(group, u)
                    }
                },
            ),
        }
    }

    /// Every row's units into `units` (NaN: 0) in one branch-free pass that the compiler
    /// vectorises, so that the add by group is DataFusion's `sum` loop; returns the number of
    /// NaN rows. `None` (nothing written) when the batch has NULLs or a filter, or holds
    /// integers: then [`Clamp::accumulate`] goes row by row. (An integer's clamp is two
    /// conditional moves in the add loop; as a pass of its own it does not vectorise, SSE2
    /// has no 64-bit comparison, and it costs a write and a read of the batch.)
    pub(super) fn batch_units(
        &self,
        values: &ArrayRef,
        opt_filter: Option<&BooleanArray>,
        units: &mut Vec<i64>,
    ) -> Option<usize> {
        if values.null_count() > 0 || opt_filter.is_some() {
            return None;
        }
        match self {
            Clamp::Integer { .. } => None,
            Clamp::Real {
                lower,
                upper,
                inverse_grid,
                ..
            } => {
                let values = values.as_primitive::<Float64Type>().values();
                Some(real_units_into(
                    values,
                    *lower,
                    *upper,
                    *inverse_grid,
                    units,
                ))
            }
        }
    }

    /// Noisy sums in grid units as DOUBLEs, `units·2^k` rounded once: the grid's size is
    /// computed once, and units within 64 bits (all but sums of about 2^30 rows) are converted
    /// from `i64`, the same rounding as from `i128` without its library call.
    pub(super) fn to_value(&self) -> impl Fn(i128) -> f64 {
        let size = 2f64.powi(self.grid().exponent);
        move |units| i64::try_from(units).map_or_else(|_| units as f64, |u| u as f64) * size
    }

    /// The largest magnitude of one row's units: the bounds' ([`Grid::choose`] rounds them as
    /// the rows are rounded, so no clamped row's units exceed them).
    pub(super) fn max_units(&self) -> u64 {
        let grid = self.grid();
        u64::try_from(grid.lower.unsigned_abs().max(grid.upper.unsigned_abs())).unwrap_or(u64::MAX)
    }

    pub(super) fn grid(&self) -> &Grid {
        match self {
            Self::Integer { grid, .. } | Self::Real { grid, .. } => grid,
        }
    }
}

fn int_units(v: i64, lower: i64, upper: i64, exponent: u32) -> i64 {
    // Within the bounds' units, below 2^33 in magnitude (`Grid::choose`).
    round_shift(v.clamp(lower, upper) as i128, exponent as i32) as i64
}

fn real_units(v: f64, lower: f64, upper: f64, inverse_grid: f64) -> Option<i64> {
    // NaN does not count; ±∞ clamp to the bounds. Scaling by a power of two and rounding are
    // monotone, so the units stay within the bounds' units.
    (!v.is_nan()).then(|| round_to_units(clamp_real(v, lower, upper) * inverse_grid))
}

/// `v` clamped to `[lower, upper]` by comparisons (branch-free, vectorised in a loop), NaN
/// passed through, where `f64::clamp` would also check its bounds on every call.
#[inline(always)]
fn clamp_real(v: f64, lower: f64, upper: f64) -> f64 {
    let clamped = if v < lower { lower } else { v };
    if clamped > upper {
        upper
    } else {
        clamped
    }
}

/// `1.5·2^52`: adding it to `|x| < 2^51` leaves `round(x)` (ties to even) in the low bits.
const ROUNDING: f64 = 6_755_399_441_055_744.0;

/// `x.round() as i64` (halves away from zero) for `|x| < 2^51` (units of a clamped value are
/// below `2^33`, `Grid::choose`), in float and integer operations only, so a loop of it is
/// vectorised: no libm `round` and no f64-to-integer instruction, which SSE2 has only scalar.
#[inline(always)]
fn round_to_units(x: f64) -> i64 {
    let magnitude = x.abs();
    let shifted = magnitude + ROUNDING; // exact rounding to an integer, ties to even
    let even = (shifted.to_bits() as i64).wrapping_sub(ROUNDING.to_bits() as i64);
    // Exact: both below 2^51 and within 1/2 of each other. A tie rounded down goes up.
    let up = i64::from(magnitude - (shifted - ROUNDING) == 0.5);
    let negative = -i64::from(x < 0.0);
    ((even + up) ^ negative) - negative
}

/// The first pass of [`real_units_into`]: every row's units, halves rounded to even; whether
/// a row was a half or NaN. Compiled also for AVX2 and AVX-512 and chosen at run time
/// (`multiversion`): the same IEEE operations on wider registers, so the same units.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx512dq", "x86_64+avx2"))]
fn round_halves_to_even(
    values: &[f64],
    lower: f64,
    upper: f64,
    inverse_grid: f64,
    units: &mut [i64],
) -> bool {
    // NaN passes through the clamp, to be caught.
    let mut halves_or_nans = false;
    for (u, &v) in units.iter_mut().zip(values) {
        let x = clamp_real(v, lower, upper) * inverse_grid;
        let shifted = x + ROUNDING;
        *u = (shifted.to_bits() as i64).wrapping_sub(ROUNDING.to_bits() as i64);
        // A half (rounded to even, maybe not away from 0) or NaN.
        let off = (x - (shifted - ROUNDING)).abs();
        halves_or_nans |= (off >= 0.5) | off.is_nan();
    }
    halves_or_nans
}

/// Every row's units into `units` (0 for NaN), in branch-free loops the compiler vectorises;
/// returns the number of NaNs. A first pass rounds halves to even (two float operations a
/// row); only a batch with a NaN or a value exactly halfway between two units takes the
/// second pass, [`round_to_units`] and a NaN mask.
fn real_units_into(
    values: &[f64],
    lower: f64,
    upper: f64,
    inverse_grid: f64,
    units: &mut Vec<i64>,
) -> usize {
    // Resized only when the batch size changes: no fill per batch.
    if units.len() != values.len() {
        units.resize(values.len(), 0);
    }
    if !round_halves_to_even(values, lower, upper, inverse_grid, units) {
        return 0;
    }
    let clamp = |v: f64| clamp_real(v, lower, upper);
    let mut nans = 0;
    for (u, &v) in units.iter_mut().zip(values) {
        let nan = v.is_nan();
        nans += usize::from(nan);
        let rounded = round_to_units(clamp(v) * inverse_grid);
        *u = if nan { 0 } else { rounded };
    }
    nans
}

/// Exact per-group sums in grid units, added as `i64`: half the memory traffic of `i128` in
/// the per-row loop of a clamped sum. A row's units are below `2^33` in magnitude
/// ([`Grid::choose`]), so a group's `i64` overflows only after about `2^30` of its rows; its
/// sum then moves to `carried` (`i128`), checked, never wrapped.
#[derive(Debug, Default)]
pub(super) struct GridSums {
    narrow: Vec<i64>,
    carried: std::collections::HashMap<usize, i128>,
    /// Set when a sum left `i128` (reported by [`GridSums::take`]).
    overflow: bool,
    /// At least the magnitude of every `narrow` sum: what was added since all were 0.
    bound: u128,
}

impl GridSums {
    pub(super) fn resize(&mut self, groups: usize) {
        self.narrow.resize(groups, 0);
    }

    /// The `i64` sums, to add to without a check, when `rows` more rows of at most `max_units`
    /// each cannot overflow any of them (`bound` plus this batch's worst case within `i64`:
    /// the first `2^30` rows of units below `2^33`).
    pub(super) fn unchecked(&mut self, rows: usize, max_units: u64) -> Option<&mut [i64]> {
        let grown = self
            .bound
            .saturating_add(rows as u128 * u128::from(max_units));
        (grown <= i64::MAX as u128).then(|| {
            self.bound = grown;
            &mut self.narrow[..]
        })
    }

    #[inline]
    pub(super) fn add(&mut self, group: usize, units: i128) {
        self.bound = self.bound.saturating_add(units.unsigned_abs());
        match i64::try_from(units)
            .ok()
            .and_then(|u| self.narrow[group].checked_add(u))
        {
            Some(sum) => self.narrow[group] = sum,
            None => self.carry(group, units),
        }
    }

    #[cold]
    fn carry(&mut self, group: usize, units: i128) {
        let wide = self.carried.entry(group).or_insert(0);
        match wide
            .checked_add(i128::from(self.narrow[group]))
            .and_then(|w| w.checked_add(units))
        {
            Some(w) => {
                *wide = w;
                self.narrow[group] = 0;
            }
            None => self.overflow = true,
        }
    }

    /// The sums of the groups `emit_to` names, removed (the others renumbered from 0).
    pub(super) fn take(&mut self, emit_to: EmitTo, name: &str) -> Result<Vec<i128>> {
        let overflow = || exec_datafusion_err!("{name}: a sum left the range of a 128-bit integer");
        if self.overflow {
            return Err(overflow());
        }
        let mut sums: Vec<i128> = emit_to
            .take_needed(&mut self.narrow)
            .into_iter()
            .map(i128::from)
            .collect();
        let n = sums.len();
        if self.narrow.is_empty() {
            self.bound = 0;
        }
        for (group, wide) in std::mem::take(&mut self.carried) {
            if group < n {
                sums[group] = sums[group].checked_add(wide).ok_or_else(overflow)?;
            } else {
                self.carried.insert(group - n, wide);
            }
        }
        Ok(sums)
    }

    pub(super) fn size(&self) -> usize {
        self.narrow.capacity() * size_of::<i64>()
            + self.carried.capacity() * (size_of::<(usize, i128)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int64Array};
    use std::sync::Arc;

    /// The function named in these tests' errors.
    const NAME: &str = "dp_clamped";

    #[test]
    fn grid_sums_are_exact_past_i64_and_refuse_past_i128() {
        let mut sums = GridSums::default();
        sums.resize(3);
        let big = 1i128 << 62;
        for _ in 0..5 {
            sums.add(1, big); // 5 · 2^62 > i64::MAX: carried
            sums.add(2, -big);
        }
        sums.add(0, 7);
        sums.add(2, i128::from(i64::MIN) - 1); // a partial sum beyond i64 (merge_batch)
        assert_eq!(sums.take(EmitTo::First(2), NAME).unwrap(), vec![7, 5 * big]);
        // Group 2 is now group 0, its carried sum with it.
        sums.resize(1);
        assert_eq!(
            sums.take(EmitTo::All, NAME).unwrap(),
            vec![-5 * big + i128::from(i64::MIN) - 1]
        );
        // Unchecked additions only while every sum provably stays within i64.
        sums.resize(1);
        assert!(sums.unchecked(1 << 20, 1 << 33).is_some());
        assert!(sums.unchecked(1 << 29, 1 << 33).is_some()); // bound 2^53 + 2^62
        assert!(sums.unchecked(1 << 29, 1 << 33).is_none()); // would be past 2^63 - 1
        assert!(sums.take(EmitTo::All, NAME).unwrap() == vec![0]);
        sums.resize(1);
        assert!(sums.unchecked(1 << 29, 1 << 33).is_some()); // bound reset when all emitted
        sums.add(0, i128::MAX);
        sums.add(0, i128::MAX);
        let err = sums.take(EmitTo::All, NAME).unwrap_err().to_string();
        assert!(
            err.contains("dp_clamped: a sum left the range of a 128-bit integer"),
            "{err}"
        );
    }

    #[test]
    fn units_round_as_f64_round_does() {
        let below_2_51 = (1u64 << 51) as f64;
        let edges = [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            -2.5,
            0.49999999999999994,
            -0.49999999999999994,
            below_2_51 - 0.5,
            -below_2_51 + 0.5,
            below_2_51 - 1.5,
            below_2_51 - 1.0,
            (1u64 << 33) as f64 - 0.5,
            -((1u64 << 33) as f64) + 0.5,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let random = (0..100_000).map(|_| {
            // xorshift: values of every magnitude up to 2^40, with every fraction.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x as i64 >> 23) as f64 / 1024.0
        });
        for v in edges.into_iter().chain(random) {
            assert_eq!(round_to_units(v), v.round() as i64, "{v}");
        }
    }

    /// The vectorised pass gives every real row the units the row-by-row path gives it (NaN:
    /// 0), and leaves integers, and batches with NULLs or a filter, to that path.
    #[test]
    fn batch_units_are_the_row_by_row_units() {
        let grid = |exponent| Grid {
            exponent,
            lower: 0,
            upper: 0,
            noise: CountNoise::calibrate(
                crate::stats::mechanism::Mechanism::Laplace,
                1.0,
                None,
                1,
                Default::default(),
            )
            .unwrap(),
        };
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let ints: Vec<i64> = (0..5000)
            .map(|_| (next() as i64) >> (next() % 64))
            .chain([i64::MIN, i64::MAX, 0, -1])
            .collect();
        let mut reals: Vec<f64> = (0..5000)
            .map(|_| (next() as i64 >> 11) as f64 / 2f64.powi((next() % 80) as i32))
            .collect();
        reals.extend([f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.5, -2.5]);
        // Whole units at 2^-10 and no NaN: the first pass alone.
        let eighths: Vec<f64> = (0..5000).map(|r| (r % 1000) as f64 / 8.0 - 7.0).collect();
        let ints: ArrayRef = Arc::new(Int64Array::from(ints));
        let reals: ArrayRef = Arc::new(Float64Array::from(reals));
        let eighths: ArrayRef = Arc::new(Float64Array::from(eighths));
        let real = |lower: f64, upper: f64, exponent: i32| Clamp::Real {
            lower,
            upper,
            inverse_grid: 2f64.powi(-exponent),
            grid: grid(exponent),
        };
        // Integers are clamped in the add loop, row by row.
        for exponent in [0, 20] {
            let clamp = Clamp::Integer {
                lower: -3,
                upper: 1 << 40,
                exponent,
                grid: grid(exponent as i32),
            };
            assert_eq!(clamp.batch_units(&ints, None, &mut Vec::new()), None);
        }
        let clamps = [
            (real(-2.5, 1e6, -10), &reals, 1),
            (real(1.0, 3e9, 1), &reals, 1),
            (real(-2.5, 1e6, -10), &eighths, 0),
            (real(-2.5, 100.0, 1), &eighths, 0), // halves: the second pass
        ];
        for (clamp, values, want_nans) in clamps {
            let rows = values.len();
            let mut want = vec![0i64; rows];
            let rows_as_groups: Vec<usize> = (0..rows).collect();
            clamp.accumulate(values, &rows_as_groups, None, |row, u| want[row] = u);
            let mut units = vec![7; 3]; // a previous batch's, of another size
            let nans = clamp.batch_units(values, None, &mut units);
            assert_eq!(units, want);
            assert_eq!(nans, Some(want_nans));
            let filter = BooleanArray::from(vec![true; rows]);
            assert_eq!(clamp.batch_units(values, Some(&filter), &mut units), None);
            let with_null = arrow::compute::kernels::nullif::nullif(
                values,
                &BooleanArray::from((0..rows).map(|r| r == 0).collect::<Vec<_>>()),
            )
            .unwrap();
            assert_eq!(clamp.batch_units(&with_null, None, &mut units), None);
        }
    }
}
