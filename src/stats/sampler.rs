//! Exact samplers for integer noise: discrete Laplace and discrete Gaussian.
//!
//! These follow Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy"
//! (NeurIPS 2020), Algorithms 1-3. Every step is integer arithmetic on `u64`/`u128`: the
//! probability of each output is exactly the stated one, so the floating-point attacks on
//! textbook Laplace sampling (Mironov 2012) do not apply. Randomness
//! comes only from the `RngCore` passed in, which is a ChaCha20 stream in this crate (see
//! [`crate::stats::rng`]).
//!
//! For speed (see `BENCHMARKS.md`), the building blocks are evaluated with as few random bits
//! and unpredictable branches as possible, each step exact: random bits are read from one
//! 64-bit word at a time ([`RandomBits`]); a Bernoulli(p) for rational `p` compares 8 random
//! bits with `p` and is decided in one round except with probability `2^-8`; the part of
//! Algorithm 1 that does not depend on `γ` (the Bernoulli(1/k) chain) is drawn from one uniform
//! integer; whole units of an exponent are peeled off by subtraction rather than division; and
//! the discrete Gaussian's per-`σ²` constants are computed once ([`DiscreteGaussian`]).

use rand::RngCore;

/// A positive rational `num / den`, kept in `u128` so the samplers stay exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rational {
    pub num: u128,
    pub den: u128,
}

impl Rational {
    /// The exact value of a positive finite `f64` (every such value is a dyadic rational).
    ///
    /// Fails when the value needs more than 100 bits of numerator or denominator, which only
    /// happens for epsilons far outside any meaningful range (below ~1e-13 or above ~1e13).
    pub fn from_f64(x: f64) -> Result<Self, String> {
        if !(x.is_finite() && x > 0.0) {
            return Err(format!("{x} is not a positive finite number"));
        }
        let bits = x.to_bits();
        let exponent = ((bits >> 52) & 0x7ff) as i32;
        let fraction = bits & ((1u64 << 52) - 1);
        // x = mantissa * 2^power exactly.
        let (mantissa, power) = if exponent == 0 {
            (fraction, -1074)
        } else {
            (fraction | (1u64 << 52), exponent - 1075)
        };
        let shift = mantissa.trailing_zeros() as i32;
        let (mantissa, power) = (mantissa >> shift, power + shift);
        if power >= 0 {
            if power > 70 {
                return Err(format!("{x} is too large to represent exactly"));
            }
            Ok(Self {
                num: (mantissa as u128) << power,
                den: 1,
            })
        } else {
            if -power > 100 {
                return Err(format!("{x} is too small to represent exactly"));
            }
            Ok(Self {
                num: mantissa as u128,
                den: 1u128 << (-power),
            })
        }
    }

    /// Smallest dyadic `num / 2^bits` that is `>= x`: rounding up keeps a noise scale private.
    pub fn ceil_dyadic(x: f64, bits: u32) -> Result<Self, String> {
        if !(x.is_finite() && x > 0.0) {
            return Err(format!("{x} is not a positive finite number"));
        }
        let scaled = (x * 2f64.powi(bits as i32)).ceil();
        if scaled >= 2f64.powi(100) {
            return Err(format!("{x} is too large to represent exactly"));
        }
        // `scaled` is an integer-valued f64 below 2^100, so the cast is exact; bump by one
        // when the product rounded down so the result is never below `x`.
        let mut num = scaled as u128;
        if (num as f64) / 2f64.powi(bits as i32) < x {
            num += 1;
        }
        Ok(Self {
            num: num.max(1),
            den: 1u128 << bits,
        })
    }

    pub fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

/// Fair random bits for the samplers below, read from the generator 64 at a time.
///
/// The exact algorithms make many small random decisions (a Bernoulli(p) reads 8 bits, see
/// [`RandomBits::bernoulli_ratio`]; a uniform below `t` about `log2 t + 8`), so one `u64` from
/// the generator serves several of them: a discrete Gaussian sample reads about 20 bytes of
/// the ChaCha20 stream, where one generator call per decision read about 95. Bits still unused
/// when a sample is finished are dropped: every bit handed out is a fresh fair bit independent
/// of all others, which is all the algorithms assume, so dropping bits changes only which
/// stream positions are used, never the law of the output.
struct RandomBits<'a, R: RngCore + ?Sized> {
    rng: &'a mut R,
    word: u64,
    /// How many low bits of `word` are still unused.
    left: u32,
}

impl<'a, R: RngCore + ?Sized> RandomBits<'a, R> {
    fn new(rng: &'a mut R) -> Self {
        Self {
            rng,
            word: 0,
            left: 0,
        }
    }

    #[inline(always)]
    fn bit(&mut self) -> bool {
        if self.left == 0 {
            self.word = self.rng.next_u64();
            self.left = 64;
        }
        let bit = self.word & 1 == 1;
        self.word >>= 1;
        self.left -= 1;
        bit
    }

    /// `k` fresh bits (`1 <= k <= 64`) as an integer in `0..2^k`: the unused bits of the
    /// current word, topped up from the next one when they are too few.
    #[inline(always)]
    fn bits(&mut self, k: u32) -> u64 {
        debug_assert!((1..=64).contains(&k));
        let mask = u64::MAX >> (64 - k);
        if k <= self.left {
            let value = self.word & mask;
            self.word = self.word.checked_shr(k).unwrap_or(0);
            self.left -= k;
            return value;
        }
        // The bits of `word` above `left` are zero (words are only shifted right).
        let fresh = self.rng.next_u64();
        let value = (self.word | (fresh << self.left)) & mask;
        let used = k - self.left;
        self.word = fresh.checked_shr(used).unwrap_or(0);
        self.left = 64 - used;
        value
    }

    /// A uniform integer in `0..bound`, exactly.
    ///
    /// Bounds below `2^24` use Lemire's multiply-and-reject ("Fast random integer generation in
    /// an interval", 2019) on `c = ⌈log2 bound⌉ + 8` random bits `W`: the result is
    /// `⌊W·bound / 2^c⌋`, and draws whose low part `W·bound mod 2^c` is below `2^c mod bound`
    /// are redrawn, which leaves every result with exactly `⌊2^c / bound⌋` values of `W`
    /// (a redraw has probability below `2^-8`; `W·bound < 2^56` fits in 64 bits). Larger
    /// bounds draw `⌈log2 bound⌉` bits until they are below `bound`.
    #[inline(always)]
    fn uniform_below(&mut self, bound: u128) -> u128 {
        debug_assert!(bound > 0);
        if bound >> 24 != 0 {
            return self.uniform_below_large(bound);
        }
        let bound = bound as u64;
        let c = 64 - bound.leading_zeros() + 8;
        loop {
            let m = self.bits(c) * bound;
            let low = m & (u64::MAX >> (64 - c));
            // 2^c mod bound is below bound: compute it only when the draw may be rejected.
            if low < bound && low < (1u64 << c) % bound {
                continue;
            }
            return (m >> c) as u128;
        }
    }

    #[inline(never)]
    fn uniform_below_large(&mut self, bound: u128) -> u128 {
        let k = 128 - (bound - 1).leading_zeros();
        loop {
            let candidate = if k <= 64 {
                self.bits(k) as u128
            } else {
                ((self.bits(k - 64) as u128) << 64) | self.bits(64) as u128
            };
            if candidate < bound {
                return candidate;
            }
        }
    }

    /// Bernoulli(num / den) for `num <= den`, exactly, reading 8 random bits per round.
    ///
    /// Compares a uniform `U` in `[0, 1)`, read 8 bits at a time, with `p = num/den`. Write
    /// `U = (W + U')/2^8` with `W` the next 8 bits and `U'` uniform in `[0, 1)`; then
    /// `U < rem/den ⟺ U'·den < rem·2^8 − W·den =: r`. If `r <= 0` the answer is no, if
    /// `r >= den` it is yes, whatever `U'` is; otherwise (one value of `W` in 256) the question
    /// is the same one, `U' < r/den`, for the fresh `U'`. So `P(yes) = p` exactly, after one
    /// round with probability at least `1 - 2^-8`.
    #[inline(always)]
    fn bernoulli_ratio(&mut self, num: u128, den: u128) -> bool {
        debug_assert!(num <= den && den > 0);
        if den >> 56 != 0 {
            return self.bernoulli_ratio_wide(num, den);
        }
        // The first round inline, in 64 bits: rem·2^8 and W·den are below 2^64.
        let (num, den) = (num as u64, den as u64);
        let x = num << 8;
        let y = self.bits(8) * den;
        let r = x.wrapping_sub(y);
        if (y < x) & (r < den) {
            return self.bernoulli_ratio_rounds(r as u128, den as u128);
        }
        y < x
    }

    /// [`Self::bernoulli_ratio`] for `den >= 2^56`: the first round inline in 128 bits while
    /// `den < 2^120` (the Gaussian's acceptance test), the rest by the general loop.
    #[inline(always)]
    fn bernoulli_ratio_wide(&mut self, num: u128, den: u128) -> bool {
        if den >> 120 != 0 {
            return self.bernoulli_ratio_rounds(num, den);
        }
        let x = num << 8;
        let y = self.bits(8) as u128 * den;
        let r = x.wrapping_sub(y);
        if (y < x) & (r < den) {
            return self.bernoulli_ratio_rounds(r, den);
        }
        y < x
    }

    /// The rounds of [`Self::bernoulli_ratio`] for any `den`: `c = 8` bits per round while
    /// `rem·2^c` fits in 128 bits, fewer for denominators of `2^120` or more, and one bit at a
    /// time (by long division, [`Self::bernoulli_ratio_bitwise`]) from `2^127`.
    #[inline(never)]
    fn bernoulli_ratio_rounds(&mut self, num: u128, den: u128) -> bool {
        let c = den.leading_zeros().min(8);
        if c == 0 {
            return self.bernoulli_ratio_bitwise(num, den);
        }
        let mut rem = num;
        loop {
            let x = rem << c;
            let y = self.bits(c) as u128 * den;
            let r = x.wrapping_sub(y);
            if (y < x) & (r < den) {
                rem = r;
                continue;
            }
            return y < x;
        }
    }

    /// [`Self::bernoulli_ratio`] one bit at a time, for any `den` up to `2^128 − 1`: at the
    /// first binary digit where `U` and `p` (expanded by long division) differ, `U < p` exactly
    /// when `p`'s digit is the 1.
    #[cold]
    fn bernoulli_ratio_bitwise(&mut self, num: u128, den: u128) -> bool {
        let mut rem = num;
        loop {
            if rem == den {
                return true;
            }
            if rem == 0 {
                return false;
            }
            // Next digit of p: 1 iff 2·rem >= den, i.e. rem >= den - rem (no overflow); the
            // new remainder 2·rem − den or 2·rem is below den.
            let gap = den - rem;
            let digit = rem >= gap;
            rem = if digit { rem - gap } else { rem + rem };
            if self.bit() != digit {
                return digit;
            }
        }
    }

    /// `J`, the first `k` with `B_k = 0` for independent `B_k ~ Bernoulli(1/k)` (`B_1 = 1`, so
    /// `J >= 2`), the part of CKS Algorithm 1 that does not depend on `γ`.
    ///
    /// `P(J > k) = P(B_1 = … = B_k = 1) = 1/k!`. With `W` uniform in `0..6! = 720`, the nested
    /// events `W < 720/k!` (integers for `k <= 6`) have exactly these probabilities, so
    /// `J = 2 + #{k in 2..=6 : W < 720/k!}` for `J <= 6`; when `W = 0` (`J > 6`, probability
    /// 1/720) the remaining `B_7, B_8, …` are drawn one by one.
    #[inline(always)]
    fn first_inverse_failure(&mut self) -> u64 {
        let w = self.uniform_below(720);
        if w == 0 {
            return self.first_inverse_failure_beyond_six();
        }
        2 + (w < 360) as u64 + (w < 120) as u64 + (w < 30) as u64 + (w < 6) as u64
    }

    /// `J` given `J > 6`: `B_7, B_8, …` one by one.
    #[cold]
    fn first_inverse_failure_beyond_six(&mut self) -> u64 {
        let mut k = 7;
        while self.bernoulli_ratio(1, k as u128) {
            k += 1;
        }
        k
    }

    /// Bernoulli(exp(-num/den)) for `num <= den`: CKS Algorithm 1 for `γ = num/den ∈ [0, 1]`.
    ///
    /// Algorithm 1 draws `A_k ~ Bernoulli(γ/k)` for `k = 1, 2, …` until the first `A_k = 0`
    /// and returns whether that `K` is odd; `P(K odd) = exp(-γ)`. We draw each `A_k` as
    /// `B_k·C_k` with independent `B_k ~ Bernoulli(1/k)` and `C_k ~ Bernoulli(γ)` (probability
    /// exactly `γ/k`), so `K = min(J, G)` where `J` is the first `k` with `B_k = 0`
    /// ([`Self::first_inverse_failure`], drawn in one go) and `G` the first with `C_k = 0`.
    /// `C_1` is drawn first, since `B_1 = 1` and `C_1 = 0` already decides `K = 1`.
    fn bernoulli_exp_unit(&mut self, num: u128, den: u128) -> bool {
        debug_assert!(num <= den);
        if !self.bernoulli_ratio(num, den) {
            return true;
        }
        let j = self.first_inverse_failure();
        let mut k = 2;
        while k < j {
            if !self.bernoulli_ratio(num, den) {
                return k % 2 == 1;
            }
            k += 1;
        }
        j % 2 == 1
    }

    /// Bernoulli(exp(-1)): CKS Algorithm 1 with `γ = 1`, where every `C_k = 1` and `K = J`.
    #[inline]
    fn bernoulli_exp_minus_one(&mut self) -> bool {
        self.first_inverse_failure() % 2 == 1
    }

    /// Bernoulli(exp(-γ)) for `γ = (hi·2^128 + lo) / den >= 0` (CKS Algorithm 1, `γ > 1`):
    /// `exp(-γ) = exp(-1)^⌊γ⌋ · exp(-(γ - ⌊γ⌋))`, one independent Bernoulli(exp(-1)) per whole
    /// unit of `γ` (stopping at the first failure) and then the fractional part. The whole units
    /// are peeled off by subtracting `den` rather than dividing: the loop stops at its first
    /// failed draw, after at most `1/(1 - e^-1) ≈ 1.6` rounds on average whatever `γ` is, and
    /// a numerator wider than 128 bits (a far-out Gaussian proposal) needs no big division.
    fn bernoulli_exp_wide(&mut self, mut hi: u128, mut lo: u128, den: u128) -> bool {
        debug_assert!(den > 0);
        while hi > 0 || lo >= den {
            if !self.bernoulli_exp_minus_one() {
                return false;
            }
            let (rest, borrow) = lo.overflowing_sub(den);
            lo = rest;
            hi -= borrow as u128;
        }
        self.bernoulli_exp_unit(lo, den)
    }

    /// Discrete Laplace with `P(x) ∝ exp(-|x| · s / t)` (CKS Algorithm 2).
    fn discrete_laplace(&mut self, s: u128, t: u128) -> i64 {
        loop {
            // U uniform in 0..t, kept with probability exp(-U/t).
            let u = self.uniform_below(t);
            if !self.bernoulli_exp_unit(u, t) {
                continue;
            }
            // V ~ Geometric(1 - exp(-1)): the number of Bernoulli(exp(-1)) successes in a row.
            let mut v: u128 = 0;
            while self.bernoulli_exp_minus_one() {
                v += 1;
            }
            // X = U + t·V ~ Geometric(1 - exp(-1/t)), Y = ⌊X/s⌋. Saturating: X >= 2^128 takes
            // V >= 2^128/t successes in a row, and for s <= 2^65 gives Y >= 2^63, which is
            // clamped to i64::MAX below either way.
            let x = t.saturating_mul(v).saturating_add(u);
            let y = if s == 1 { x } else { x / s };
            let negative = self.bit();
            if negative && y == 0 {
                continue;
            }
            // |Y| >= 2^63 has probability below exp(-2^63·s/t), below exp(-2^23) at the largest
            // scale t/s = 2^40 any calibration accepts (mechanism::MAX_NOISE_SCALE); the clamp
            // is never reached there, and every caller adds the draw in checked arithmetic
            // (mechanism::add_noise), so even a clamped draw is an error, never a wrap (at 2^70,
            // before issue 27, it was drawn almost always and `count - i64::MAX` was released).
            let y = i64::try_from(y).unwrap_or(i64::MAX);
            return if negative { -y } else { y };
        }
    }
}

/// A uniform integer in `0..bound` by rejection on random bits (exactly uniform).
pub fn uniform_below<R: RngCore + ?Sized>(rng: &mut R, bound: u128) -> u128 {
    RandomBits::new(rng).uniform_below(bound)
}

/// Bernoulli(exp(-num/den)) for any non-negative rational (CKS Algorithm 1).
pub fn bernoulli_exp<R: RngCore + ?Sized>(rng: &mut R, num: u128, den: u128) -> bool {
    RandomBits::new(rng).bernoulli_exp_wide(0, num, den)
}

/// Discrete Laplace with `P(x) ∝ exp(-|x| · s / t)`, i.e. scale `t / s` (CKS Algorithm 2).
pub fn discrete_laplace<R: RngCore + ?Sized>(rng: &mut R, s: u128, t: u128) -> i64 {
    RandomBits::new(rng).discrete_laplace(s, t)
}

/// `a²` as its high and low 128-bit halves, for `a < 2^127`.
fn widening_square(a: u128) -> (u128, u128) {
    debug_assert!(a >> 127 == 0);
    let (high, low) = (a >> 64, a & u64::MAX as u128);
    let (hh, hl, ll) = (high * high, high * low, low * low);
    // a² = hh·2^128 + hl·2^65 + ll, and hl·2^65 = (hl >> 63)·2^128 + (hl << 65 mod 2^128).
    let (lo, carry) = ll.overflowing_add(hl << 65);
    (hh + (hl >> 63) + carry as u128, lo)
}

/// The discrete Gaussian `N_Z(0, σ²)`, `P(x) ∝ exp(-x² / (2σ²))`, for one rational
/// `σ² = n/d`, with the constants of CKS Algorithm 3 computed once (at calibration).
///
/// Algorithm 3: draw `Y` from the discrete Laplace `P(y) ∝ exp(-|y|/t)` and accept it with
/// probability `exp(-(|Y| - σ²/t)² / (2σ²))`, else start over. Since
/// `exp(-|y|/t) · exp(-(|y| - σ²/t)²/(2σ²)) = exp(-y²/(2σ²)) · exp(-σ²/(2t²))`, the accepted
/// `Y` has exactly the discrete Gaussian law for every scale `t > 0`; `t` only sets the
/// expected number of proposals, `Z_L(t)·exp(σ²/(2t²)) / Z_G` with `Z_L(t) = coth(1/(2t))` and
/// `Z_G` the normalising constants, which is smallest near `t = σ`. CKS take `t = ⌊σ⌋ + 1`; we
/// take whichever of `⌊σ⌋` and `⌊σ⌋ + 1` needs fewer proposals (the comparison is done in
/// `f64` once, at construction: it only picks one of two valid scales, so its rounding cannot
/// change the law). That is up to 1.3x fewer proposals
/// for `σ` between 1 and 2 (1.43 instead of 1.81 at `σ ≈ 1.03`), up to 1.12x between 2 and 3,
/// under 1.07x beyond, and never more.
///
/// Multiplying out the denominators, the acceptance exponent is `a² / D` with the integers
/// `a = |Y|·t·d − n` and `D = 2·n·d·t²`, evaluated by [`RandomBits::bernoulli_exp_wide`]
/// without any division (`a²` is formed in 256 bits when `a >= 2^64`, so no proposal is ever
/// rejected for lack of precision).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiscreteGaussian {
    sigma2: Rational,
    /// The proposal's scale, `⌊σ⌋` or `⌊σ⌋ + 1`.
    t: u128,
    /// `t·d`, so that `a = |Y|·td − n`.
    td: u128,
    /// `D = 2·n·d·t²`.
    den: u128,
}

impl DiscreteGaussian {
    /// The sampler for `σ² = sigma2.num / sigma2.den`. Fails when the constants do not fit:
    /// `t·d` must be below `2^64` (so `|Y|·t·d < 2^127` for every `i64` proposal) and
    /// `2·n·d·t²` below `2^128`; `σ²` as calibrated (a dyadic rational with a numerator below
    /// `2^55` and at most 40 fraction bits) always fits.
    pub fn new(sigma2: Rational) -> Result<Self, String> {
        let Rational { num: n, den: d } = sigma2;
        if n == 0 || d == 0 {
            return Err(format!("sigma^2 = {n}/{d} is not a positive number"));
        }
        let too_large = || format!("sigma^2 = {n}/{d} needs too many bits for the exact sampler");
        // ⌊σ⌋ = ⌊√⌊n/d⌋⌋ exactly, in integers; then the better of the two scales around σ.
        let floor_sigma = (n / d).isqrt();
        let proposals = |t: u128| {
            let t = t as f64;
            (1.0 / (2.0 * t)).tanh().recip() * (sigma2.to_f64() / (2.0 * t * t)).exp()
        };
        let t = if floor_sigma >= 1 && proposals(floor_sigma) < proposals(floor_sigma + 1) {
            floor_sigma
        } else {
            floor_sigma + 1
        };
        let td = t
            .checked_mul(d)
            .filter(|&td| td < 1 << 64)
            .ok_or_else(too_large)?;
        let den = n
            .checked_mul(td)
            .and_then(|v| v.checked_mul(t))
            .and_then(|v| v.checked_mul(2))
            .ok_or_else(too_large)?;
        Ok(Self { sigma2, t, td, den })
    }

    /// The exact `σ²` sampled.
    pub fn sigma2(&self) -> Rational {
        self.sigma2
    }

    /// One draw (CKS Algorithm 3).
    pub fn sample<R: RngCore + ?Sized>(&self, rng: &mut R) -> i64 {
        let mut bits = RandomBits::new(rng);
        loop {
            let y = bits.discrete_laplace(1, self.t);
            // Accept with probability exp(-(|y| - σ²/t)²/(2σ²)) = exp(-a²/D).
            let a = (y.unsigned_abs() as u128 * self.td).abs_diff(self.sigma2.num);
            let (hi, lo) = if a >> 64 == 0 {
                (0, a * a)
            } else {
                widening_square(a)
            };
            if bits.bernoulli_exp_wide(hi, lo, self.den) {
                return y;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    #[test]
    fn rational_from_f64_is_exact() {
        for x in [0.5, 0.1, 1.0, 3.0, 1e-6, 12345.678] {
            let r = Rational::from_f64(x).unwrap();
            assert_eq!(r.num as f64 / r.den as f64, x);
        }
        assert!(Rational::from_f64(0.0).is_err());
        assert!(Rational::from_f64(f64::NAN).is_err());
    }

    #[test]
    fn ceil_dyadic_never_rounds_down() {
        for x in [0.1, 2.0 / 3.0, 38.9, 1e4 / 7.0] {
            let r = Rational::ceil_dyadic(x, 20).unwrap();
            assert!(r.to_f64() >= x && r.to_f64() - x <= 1.0 / (1u64 << 20) as f64);
        }
    }

    #[test]
    fn uniform_below_is_uniform_on_three_values() {
        // 60,000 draws over 3 cells: each count is Binomial(60000, 1/3) with sd ~115;
        // 5 sd (575) bounds a fixed-seed deviation unless the sampler is biased.
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let mut counts = [0u32; 3];
        for _ in 0..60_000 {
            counts[uniform_below(&mut rng, 3) as usize] += 1;
        }
        for c in counts {
            assert!((c as i64 - 20_000).abs() < 575, "{counts:?}");
        }
    }

    #[test]
    fn bernoulli_exp_has_the_right_mean() {
        // p = exp(-1.5) ≈ 0.2231; 100,000 draws have sd sqrt(p(1-p)/1e5) ≈ 0.00132; 5 sd.
        let mut rng = ChaCha20Rng::seed_from_u64(11);
        let hits = (0..100_000)
            .filter(|_| bernoulli_exp(&mut rng, 3, 2))
            .count();
        let p = (-1.5f64).exp();
        assert!((hits as f64 / 1e5 - p).abs() < 5.0 * 0.00132, "{hits}");
    }

    /// Asserts that each of `counts` (from `n` draws) is within 5 standard errors of its
    /// expectation `n·p`. Each count is Binomial(n, p), standard error `sqrt(n p (1 - p))`;
    /// with every `n·p` here in the hundreds or more the normal approximation holds, and an
    /// exact sampler fails one cell with probability about 5.7e-7 (fixed seeds, so the tests
    /// are deterministic).
    fn assert_counts(counts: &[u64], probs: &[f64], what: &str) {
        let n = counts.iter().sum::<u64>() as f64;
        for (i, (&c, &p)) in counts.iter().zip(probs).enumerate() {
            let se = (n * p * (1.0 - p)).sqrt();
            assert!(
                (c as f64 - n * p).abs() <= 5.0 * se,
                "{what}: cell {i}: {c} vs {:.1} (se {se:.1}); {counts:?}",
                n * p
            );
        }
    }

    #[test]
    fn uniform_below_is_uniform_on_every_path() {
        // Lemire's method (bounds below 2^24), bit rejection (up to 64 and up to 128 bits).
        // 60,000 draws sorted into 6 buckets by `v·6/bound`; bucket j holds exactly
        // ⌈(j+1)·bound/6⌉ − ⌈j·bound/6⌉ of the bound's values.
        let bounds: [u128; 6] = [
            6,
            720,
            1_000_003,
            (1 << 24) + 3,
            (1 << 40) - 5,
            (1 << 90) + 7,
        ];
        for (i, bound) in bounds.into_iter().enumerate() {
            let mut rng = ChaCha20Rng::seed_from_u64(20 + i as u64);
            let mut counts = [0u64; 6];
            for _ in 0..60_000 {
                let v = uniform_below(&mut rng, bound);
                assert!(v < bound);
                // v·6/bound without overflow: v < 2^91.
                counts[(v * 6 / bound) as usize] += 1;
            }
            let ceil = |j: u128| (j * bound).div_ceil(6);
            let probs: Vec<f64> = (0..6)
                .map(|j| (ceil(j + 1) - ceil(j)) as f64 / bound as f64)
                .collect();
            assert_counts(&counts, &probs, &format!("uniform_below({bound})"));
        }
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        assert_eq!(uniform_below(&mut rng, 1), 0);
    }

    #[test]
    fn bernoulli_ratio_is_exact_on_every_path() {
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let mut bits = RandomBits::new(&mut rng);
        // Certain outcomes use no luck.
        for den in [1u128, 7, 1 << 60, 1 << 125, u128::MAX] {
            assert!((0..100).all(|_| bits.bernoulli_ratio(den, den)));
            assert!((0..100).all(|_| !bits.bernoulli_ratio(0, den)));
        }
        // 100,000 draws each; the mean has standard error sqrt(p(1-p)/1e5); 5 of them.
        // Denominators below 2^56 (64-bit rounds), up to 2^120 (128-bit rounds), beyond
        // (fewer bits per round) and from 2^127 (bit by bit). `p = 1/256 + tiny` lands in the
        // undecided case of the first round for one value of its 8 bits.
        let cases: [(u128, u128); 9] = [
            (1, 3),
            (5, 7),
            (1, 2),
            ((1 << 48) + 1, 1 << 56),
            ((1 << 52) + 1, (1 << 60) + 3),
            ((u128::MAX / 3) >> 10, u128::MAX >> 10),
            ((u128::MAX / 3) >> 4, u128::MAX >> 4),
            (u128::MAX / 3, u128::MAX),
            ((1 << 126) + 12345, (1 << 127) + 1),
        ];
        for (num, den) in cases {
            let hits = (0..100_000)
                .filter(|_| bits.bernoulli_ratio(num, den))
                .count();
            let p = num as f64 / den as f64;
            let se = (p * (1.0 - p) / 1e5).sqrt();
            assert!(
                (hits as f64 / 1e5 - p).abs() <= 5.0 * se,
                "{num}/{den}: {hits}"
            );
        }
    }

    #[test]
    fn first_inverse_failure_has_the_factorial_law() {
        // P(J = k) = 1/(k-1)! − 1/k! for k >= 2; cells 2, …, 6 and "7 or more" (1/720, the
        // one-by-one continuation), 300,000 draws.
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let mut bits = RandomBits::new(&mut rng);
        let mut counts = [0u64; 6];
        for _ in 0..300_000 {
            let j = bits.first_inverse_failure();
            assert!(j >= 2);
            counts[(j.min(7) - 2) as usize] += 1;
        }
        let fact = |k: u32| (1..=k).map(f64::from).product::<f64>();
        let mut probs: Vec<f64> = (2..=6).map(|k| 1.0 / fact(k - 1) - 1.0 / fact(k)).collect();
        probs.push(1.0 / 720.0);
        assert_counts(&counts, &probs, "J");
    }

    #[test]
    fn widening_square_is_exact() {
        for a in [0u128, 1, 3, u64::MAX as u128, 12_345_678_901_234_567] {
            assert_eq!(widening_square(a), (0, a * a));
        }
        // Reference values computed with arbitrary-precision integers.
        let cases: [(u128, u128, u128); 5] = [
            (1 << 64, 1, 0),
            ((1 << 64) + 1, 1, 0x2_0000_0000_0000_0001),
            ((1 << 127) - 1, (1 << 126) - 1, 1),
            (
                (1 << 100) + 12345,
                0x1000000000000000000,
                0x60720000000000000000009156cb1,
            ),
            (
                0x123456789abcdef00fedcba987654321,
                0x14b66dc33f6acdca825fc924d94cf84,
                0x456b6be0628bf63accdeec6cd7a44a41,
            ),
        ];
        for (a, hi, lo) in cases {
            assert_eq!(widening_square(a), (hi, lo), "{a:#x}");
        }
    }

    #[test]
    fn bernoulli_exp_is_exact_for_small_large_and_wide_exponents() {
        // 100,000 draws each, 5 standard errors sqrt(p(1-p)/1e5) of p = exp(-γ).
        let mut rng = ChaCha20Rng::seed_from_u64(13);
        let mut bits = RandomBits::new(&mut rng);
        let big = 1u128 << 110;
        let cases: [(u128, u128, u128, f64); 7] = [
            (0, 0, 1, 0.0),
            (0, 3, 10, 0.3),
            (0, 1, 1, 1.0),
            (0, 27, 10, 2.7),
            (0, big / 3, big, 1.0 / 3.0),
            (0, 5 * (big / 2) + 7, big, 2.5),
            // (2^128 + 2^126) / 2^127 = 2.5, with the numerator in two 128-bit halves.
            (1, 1 << 126, 1 << 127, 2.5),
        ];
        for (hi, lo, den, gamma) in cases {
            let hits = (0..100_000)
                .filter(|_| bits.bernoulli_exp_wide(hi, lo, den))
                .count();
            let p = (-gamma).exp();
            let se = (p * (1.0 - p) / 1e5).sqrt();
            assert!(
                (hits as f64 / 1e5 - p).abs() <= 5.0 * se + 1e-12,
                "exp(-{gamma}): {hits}"
            );
        }
        // A huge exponent (γ ≈ 2^100) is rejected after a Bernoulli(exp(-1)) or two.
        assert!((0..1000).all(|_| !bits.bernoulli_exp_wide(1, 0, 1 << 28)));
    }

    #[test]
    fn discrete_gaussian_constants() {
        let gaussian = |num, den| DiscreteGaussian::new(Rational { num, den }).unwrap();
        // t is ⌊σ⌋ or ⌊σ⌋ + 1, whichever needs fewer proposals: 1 at σ ≈ 1.03 (CKS: 2),
        // 2 at σ ≈ 1.49 and σ ≈ 2.09, 71 at σ ≈ 70.7.
        assert_eq!(gaussian(1063, 1000).t, 1);
        assert_eq!(gaussian(222, 100).t, 2);
        assert_eq!(gaussian(437, 100).t, 2);
        assert_eq!(gaussian(5000, 1).t, 71);
        assert_eq!(gaussian(3, 10).t, 1);
        let g = gaussian(437, 100);
        assert_eq!((g.td, g.den), (200, 2 * 437 * 100 * 4));
        // The largest σ² calibration produces fits; zero and oversized ones are refused.
        assert!(DiscreteGaussian::new(Rational {
            num: (1 << 55) - 1,
            den: 1
        })
        .is_ok());
        assert!(DiscreteGaussian::new(Rational {
            num: (1 << 55) - 1,
            den: 1 << 40
        })
        .is_ok());
        assert!(DiscreteGaussian::new(Rational { num: 0, den: 1 }).is_err());
        assert!(DiscreteGaussian::new(Rational {
            num: 1,
            den: 1 << 70
        })
        .is_err());
    }

    #[test]
    fn discrete_laplace_pmf_matches_at_zero_and_one() {
        // Scale 2: P(0) = (1-q)/(1+q), P(1) = P(0)·q with q = exp(-1/2). 200,000 draws give
        // sd <= sqrt(0.25/2e5) ≈ 0.0011 for each frequency; 5 sd.
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let q = (-0.5f64).exp();
        let p0 = (1.0 - q) / (1.0 + q);
        let draws: Vec<i64> = (0..200_000)
            .map(|_| discrete_laplace(&mut rng, 1, 2))
            .collect();
        let f0 = draws.iter().filter(|&&x| x == 0).count() as f64 / 2e5;
        let f1 = draws.iter().filter(|&&x| x == 1).count() as f64 / 2e5;
        let fm1 = draws.iter().filter(|&&x| x == -1).count() as f64 / 2e5;
        assert!((f0 - p0).abs() < 0.0055, "{f0} vs {p0}");
        assert!((f1 - p0 * q).abs() < 0.0055, "{f1} vs {}", p0 * q);
        assert!((fm1 - p0 * q).abs() < 0.0055, "{fm1} vs {}", p0 * q);
    }
}
