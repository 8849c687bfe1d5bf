//! Exact privacy amounts: budgets and charges as whole numbers of a fixed decimal unit, summed
//! in `u128`, so that no charge is ever lost to rounding.
//!
//! A running `f64` sum drops any charge below half its last bit: once `1e6` of epsilon was
//! spent, a charge below `5.8e-11` left the total unchanged, and queries at such an epsilon
//! were answered without end after the budget was spent (red team, issue 27). Here every
//! amount is counted in units of [`EPSILON_UNIT`] (`10^-12`) of epsilon, [`DELTA_UNIT`]
//! (`10^-30`) of delta and [`RHO_UNIT`] (`10^-12`) of zCDP's rho:
//! - a charge is rounded **up** to the unit (at least one unit for any positive amount, so the
//!   minimum charge is `10^-12` of epsilon, and of rho), a budget **down**: the accountant never charges
//!   less than was spent, nor allows more than the budget;
//! - sums are exact integer sums (checked: an amount past `u128` is refused, never wrapped).
//!
//! An `f64` is converted through its shortest round-trip decimal form (Rust's `Display`, the
//! form the ledger has always stored), read exactly digit by digit: a decimal amount such as
//! `0.1` is exactly `10^11` units, so ten charges of 0.1 fill a budget of 1 exactly, and the
//! ledger's text is the exact amount charged.

/// Decimal digits of epsilon's unit: amounts are whole multiples of `10^-12`.
pub const EPSILON_DIGITS: u32 = 12;
/// Decimal digits of delta's unit: whole multiples of `10^-30` (δ is typically `1e-5` to
/// `1e-12` per query, far above the unit).
pub const DELTA_DIGITS: u32 = 30;
/// The smallest epsilon charge (one unit): a query at a smaller epsilon is charged this.
pub const EPSILON_UNIT: f64 = 1e-12;
/// The smallest positive delta charge (one unit).
pub const DELTA_UNIT: f64 = 1e-30;
/// Decimal digits of rho's unit (zero-concentrated DP, Bun & Steinke 2016): whole multiples of
/// `10^-12`, as epsilon's (a query's ρ is `ε²/2` for a Laplace count, typically `1e-4` to 1).
pub const RHO_DIGITS: u32 = 12;
/// The smallest rho charge (one unit): a query with a smaller positive ρ is charged this.
pub const RHO_UNIT: f64 = 1e-12;

/// How a decimal that is not a whole number of units is rounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rounding {
    /// Charges: the next unit up.
    Up,
    /// Budgets: the unit below.
    Down,
}

/// `text` (a non-negative decimal, optionally with an exponent: `12.5`, `0.0000001`, `1e-7`)
/// times `10^digits`, rounded as asked. `None` when `text` is not such a decimal or the
/// result does not fit in `u128`.
fn decimal_units(text: &str, digits: u32, rounding: Rounding) -> Option<u128> {
    let text = text.trim();
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(i) => (&text[..i], text[i + 1..].parse::<i64>().ok()?),
        None => (text, 0),
    };
    let mantissa = mantissa.strip_prefix('+').unwrap_or(mantissa);
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    if !whole
        .bytes()
        .chain(fraction.bytes())
        .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    // value = D · 10^(exponent − |fraction|), D the digits; units = D · 10^shift.
    let all: String = whole.chars().chain(fraction.chars()).collect();
    let significant = all.trim_start_matches('0');
    let shift = exponent
        .checked_sub(fraction.len() as i64)?
        .checked_add(digits as i64)?;
    if significant.is_empty() {
        return Some(0);
    }
    let parse = |s: &str| -> Option<u128> {
        if s.is_empty() {
            return Some(0);
        }
        // u128::MAX has 39 digits; `parse` itself refuses anything larger.
        s.parse::<u128>().ok()
    };
    if shift >= 0 {
        // Whole units: the digits followed by `shift` zeros.
        if significant.len() as i64 + shift > 39 {
            return None;
        }
        let mut units = parse(significant)?;
        for _ in 0..shift {
            units = units.checked_mul(10)?;
        }
        Some(units)
    } else {
        // Drop the last −shift digits; any non-zero one among them is a partial unit.
        let dropped = shift.unsigned_abs();
        let keep = (significant.len() as u64).saturating_sub(dropped) as usize;
        let units = parse(&significant[..keep])?;
        let partial = significant[keep..].bytes().any(|b| b != b'0');
        match rounding {
            Rounding::Up if partial => units.checked_add(1),
            _ => Some(units),
        }
    }
}

/// A charge of `amount` in units of `10^-digits`, rounded up (at least one unit when
/// `amount > 0`). An error for a negative, NaN or infinite amount, or one past `u128` units.
pub fn charge_units(amount: f64, digits: u32) -> Result<u128, String> {
    if !(amount.is_finite() && amount >= 0.0) {
        return Err(format!("{amount} is not a finite amount >= 0"));
    }
    if amount == 0.0 {
        return Ok(0);
    }
    decimal_units(&amount.to_string(), digits, Rounding::Up)
        .map(|units| units.max(1))
        .ok_or_else(|| {
            format!(
                "{amount} is above the largest amount the accountant counts ({} in units of 1e-{digits})",
                u128::MAX
            )
        })
}

/// A budget of `amount` in units of `10^-digits`, rounded down (saturating at `u128::MAX`
/// units, which is also rounding down). Negative, NaN and infinite budgets are refused where
/// they are set ([`crate::sql::options`]); here they count as 0.
pub fn budget_units(amount: f64, digits: u32) -> u128 {
    if !(amount.is_finite() && amount > 0.0) {
        return 0;
    }
    decimal_units(&amount.to_string(), digits, Rounding::Down).unwrap_or(u128::MAX)
}

/// An amount as it was written in a ledger line, in units of `10^-digits`, rounded up (an old
/// ledger's shortest-`f64` text such as `0.30000000000000004` is charged `0.300000000001`).
pub fn parse_units(text: &str, digits: u32) -> Option<u128> {
    decimal_units(text, digits, Rounding::Up)
}

/// `units · 10^-digits` as an exact decimal (`100000000000` at 12 digits is `0.1`).
pub fn format_units(units: u128, digits: u32) -> String {
    let text = units.to_string();
    let digits = digits as usize;
    let (whole, fraction) = if text.len() > digits {
        let (w, f) = text.split_at(text.len() - digits);
        (w.to_string(), f.to_string())
    } else {
        ("0".to_string(), format!("{text:0>digits$}"))
    };
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        whole
    } else {
        format!("{whole}.{fraction}")
    }
}

/// `units · 10^-digits` as the nearest `f64` (through the exact decimal, so `9·10^23` units
/// of delta read as `9e-7`).
pub fn units_to_f64(units: u128, digits: u32) -> f64 {
    format_units(units, digits).parse().unwrap_or(f64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_convert_exactly() {
        assert_eq!(charge_units(0.1, 12), Ok(100_000_000_000));
        assert_eq!(charge_units(1.0, 12), Ok(1_000_000_000_000));
        assert_eq!(charge_units(1e-7, 30), Ok(100_000_000_000_000_000_000_000));
        assert_eq!(budget_units(1e-6, 30), 1_000_000_000_000_000_000_000_000);
        // Ten charges of 0.1 fill a budget of 1 exactly.
        assert_eq!(10 * charge_units(0.1, 12).unwrap(), budget_units(1.0, 12));
        assert_eq!(format_units(100_000_000_000, 12), "0.1");
        assert_eq!(format_units(1, 12), "0.000000000001");
        assert_eq!(format_units(0, 12), "0");
        assert_eq!(format_units(4_000_000_000_000, 12), "4");
        assert_eq!(
            format_units(900_000_000_000_000_000_000_000, 30),
            "0.0000009"
        );
        assert_eq!(units_to_f64(900_000_000_000_000_000_000_000, 30), 9e-7);
        for x in [0.1, 0.25, 2.125, 1e-7, 68.0, 999_999.999_999_999, 1e6] {
            let units = charge_units(x, 12).unwrap();
            assert_eq!(units_to_f64(units, 12), x, "{x}");
        }
    }

    #[test]
    fn rho_is_counted_exactly_in_its_own_unit() {
        // ρ has its own unit (10^-12), rounded up for charges and down for budgets.
        assert_eq!(RHO_UNIT, 1e-12);
        assert_eq!(charge_units(0.02117, RHO_DIGITS), Ok(21_170_000_000));
        assert_eq!(
            100 * charge_units(0.02, RHO_DIGITS).unwrap(),
            budget_units(2.0, RHO_DIGITS)
        );
        // A Laplace count at ε = 0.1 is ε²/2-zCDP, 0.005000000000000001 in f64: one unit more
        // than 0.005, never less.
        let rho = 0.1f64 * 0.1 / 2.0;
        assert_eq!(rho.to_string(), "0.005000000000000001");
        assert_eq!(charge_units(rho, RHO_DIGITS), Ok(5_000_000_001));
        assert_eq!(budget_units(rho, RHO_DIGITS), 5_000_000_000);
        assert_eq!(charge_units(1e-20, RHO_DIGITS), Ok(1));
        assert_eq!(format_units(21_170_000_000, RHO_DIGITS), "0.02117");
        assert_eq!(parse_units("2.117", RHO_DIGITS), Some(2_117_000_000_000));
    }

    #[test]
    fn charges_round_up_and_budgets_down() {
        // The smallest charges are one unit, at every positive amount down to the subnormals.
        for x in [
            f64::from_bits(1),
            f64::MIN_POSITIVE,
            1e-300,
            1e-30,
            1e-13,
            5e-13,
            1e-12,
        ] {
            assert_eq!(charge_units(x, 12), Ok(1), "{x}");
            assert_eq!(budget_units(x, 12), if x == 1e-12 { 1 } else { 0 }, "{x}");
        }
        assert_eq!(charge_units(1.5e-12, 12), Ok(2));
        assert_eq!(budget_units(1.5e-12, 12), 1);
        assert_eq!(charge_units(1.0 / 3.0, 12), Ok(333_333_333_334));
        assert_eq!(budget_units(1.0 / 3.0, 12), 333_333_333_333);
        assert_eq!(charge_units(0.0, 12), Ok(0));
        // Old ledgers' f64 sums are charged up.
        assert_eq!(
            parse_units("0.30000000000000004", 12),
            Some(300_000_000_001)
        );
        assert_eq!(parse_units("1e-7", 30), charge_units(1e-7, 30).ok());
        assert_eq!(parse_units("2.5E+2", 12), Some(250_000_000_000_000));
        for bad in ["", ".", "-1", "1e", "0x10", "NaN", "inf", "1.2.3"] {
            assert_eq!(parse_units(bad, 12), None, "{bad}");
        }
    }

    #[test]
    fn extremes_are_refused_or_saturate_downwards() {
        for x in [f64::NAN, f64::INFINITY, -1.0, f64::NEG_INFINITY] {
            assert!(charge_units(x, 12).is_err(), "{x}");
            assert_eq!(budget_units(x, 12), 0);
        }
        // u128::MAX units of 1e-12 is about 3.4e26.
        assert!(charge_units(3e26, 12).is_ok());
        let err = charge_units(4e26, 12).unwrap_err();
        assert!(err.contains("above the largest amount"), "{err}");
        assert!(charge_units(f64::MAX, 12).is_err());
        assert_eq!(budget_units(f64::MAX, 12), u128::MAX);
        assert_eq!(budget_units(1e300, 30), u128::MAX);
    }
}
