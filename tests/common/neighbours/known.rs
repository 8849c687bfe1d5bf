//! THE KNOWN LEAKS: the classes of differences between neighbours that current main shows
//! and that are being fixed in parallel (issue 27). A difference in one of these classes is
//! reported but does not fail the test; every other difference does. Remove an entry once
//! its fix lands: the test then holds main to it.

use super::observe::Difference;

/// What a classifier sees of one difference.
pub struct Finding<'a> {
    /// The program, statements joined by `;`.
    pub program: &'a str,
    pub difference: &'a Difference,
    /// Columns whose name or type differs between the pair's `information_schema.columns`.
    pub schema_changed: &'a [String],
}

pub struct KnownLeak {
    pub category: &'static str,
    /// Why it leaks, and what fixes it.
    pub reason: &'static str,
    pub matches: fn(&Finding) -> bool,
}

/// Expected failures on current main. Empty this list as the fixes land.
pub const KNOWN_LEAKS: &[KnownLeak] = &[KnownLeak {
    category: "tiny-epsilon",
    reason: "at a tiny epsilon the noise wraps the integer result",
    matches: tiny_epsilon,
}];

/// The category of a difference, `None` when it is not a known leak.
pub fn classify(finding: &Finding) -> Option<&'static str> {
    KNOWN_LEAKS
        .iter()
        .find(|k| (k.matches)(finding))
        .map(|k| k.category)
}

/// The program has a number literal below 1e-6 (an epsilon, a delta or a confidence).
fn tiny_epsilon(f: &Finding) -> bool {
    f.program
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-'))
        .filter(|w| w.contains("e-"))
        .filter_map(|w| w.parse::<f64>().ok())
        .any(|v| v > 0.0 && v < 1e-6)
}
