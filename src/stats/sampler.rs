//! Exact samplers for integer noise: discrete Laplace and discrete Gaussian.
//!
//! These follow Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy"
//! (NeurIPS 2020), Algorithms 1-3. Every step is integer arithmetic on `u128`: the probability
//! of each output is exactly the stated one, so the floating-point attacks on textbook Laplace
//! sampling (Mironov 2012) do not apply. Randomness comes only from the `RngCore` passed in,
//! which is a ChaCha20 stream in this crate (see [`crate::stats::rng`]).

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

/// A uniform integer in `0..bound` by rejection on random bits (exactly uniform).
pub fn uniform_below<R: RngCore + ?Sized>(rng: &mut R, bound: u128) -> u128 {
    debug_assert!(bound > 0);
    if bound == 1 {
        return 0;
    }
    let bits = 128 - (bound - 1).leading_zeros();
    loop {
        let raw = if bits <= 32 {
            rng.next_u32() as u128
        } else if bits <= 64 {
            rng.next_u64() as u128
        } else {
            ((rng.next_u64() as u128) << 64) | rng.next_u64() as u128
        };
        let candidate = if bits == 128 {
            raw
        } else {
            raw & ((1u128 << bits) - 1)
        };
        if candidate < bound {
            return candidate;
        }
    }
}

/// Bernoulli(num / den) for `num <= den`.
fn bernoulli_ratio<R: RngCore + ?Sized>(rng: &mut R, num: u128, den: u128) -> bool {
    uniform_below(rng, den) < num
}

/// Bernoulli(exp(-num/den)) for `num/den` in [0, 1] (CKS Algorithm 1, first case).
fn bernoulli_exp_unit<R: RngCore + ?Sized>(rng: &mut R, num: u128, den: u128) -> bool {
    let mut k: u128 = 1;
    loop {
        // A ~ Bernoulli(gamma / k); the loop runs past k with probability gamma^k / k!.
        match den.checked_mul(k) {
            Some(scaled_den) if bernoulli_ratio(rng, num, scaled_den) => k += 1,
            // Overflow needs k > 2^28 with den <= 2^100: probability below 1/(2^28)!.
            _ => return k % 2 == 1,
        }
    }
}

/// Bernoulli(exp(-num/den)) for any non-negative rational (CKS Algorithm 1).
pub fn bernoulli_exp<R: RngCore + ?Sized>(rng: &mut R, num: u128, den: u128) -> bool {
    let whole = num / den;
    let mut i = 0;
    while i < whole {
        if !bernoulli_exp_unit(rng, 1, 1) {
            return false;
        }
        i += 1;
    }
    bernoulli_exp_unit(rng, num % den, den)
}

/// Discrete Laplace with `P(x) ∝ exp(-|x| · s / t)`, i.e. scale `t / s` (CKS Algorithm 2).
pub fn discrete_laplace<R: RngCore + ?Sized>(rng: &mut R, s: u128, t: u128) -> i64 {
    loop {
        let u = uniform_below(rng, t);
        if !bernoulli_exp(rng, u, t) {
            continue;
        }
        let mut v: u128 = 0;
        while bernoulli_exp_unit(rng, 1, 1) {
            v += 1;
        }
        let x = u + t * v;
        let y = x / s;
        let negative = rng.next_u32() & 1 == 1;
        if negative && y == 0 {
            continue;
        }
        let y = i64::try_from(y).unwrap_or(i64::MAX);
        return if negative { -y } else { y };
    }
}

/// Discrete Gaussian with `P(x) ∝ exp(-x² / (2σ²))`, `σ² = sigma2.num / sigma2.den`
/// (CKS Algorithm 3: discrete Laplace proposals of scale `t = ⌊σ⌋ + 1`, then rejection).
pub fn discrete_gaussian<R: RngCore + ?Sized>(rng: &mut R, sigma2: Rational) -> i64 {
    let (n, d) = (sigma2.num, sigma2.den);
    let t = (sigma2.to_f64().sqrt().floor() as u128) + 1;
    loop {
        let y = discrete_laplace(rng, 1, t);
        let abs_y = y.unsigned_abs() as u128;
        // Accept with probability exp(-(|y| - σ²/t)² / (2σ²)) = exp(-(|y|·t·d - n)² / (2·n·d·t²)).
        let accept = abs_y
            .checked_mul(t)
            .and_then(|v| v.checked_mul(d))
            .map(|v| v.abs_diff(n))
            .and_then(|diff| diff.checked_mul(diff))
            .zip(
                n.checked_mul(d)
                    .and_then(|v| v.checked_mul(t))
                    .and_then(|v| v.checked_mul(t))
                    .and_then(|v| v.checked_mul(2)),
            );
        match accept {
            Some((num, den)) => {
                if bernoulli_exp(rng, num, den) {
                    return y;
                }
            }
            // Only when |y| is tens of σ out, where the acceptance probability is below
            // exp(-700): rejecting instead changes no probability representable in f64.
            None => continue,
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
    fn uniform_below_is_uniform() {
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
