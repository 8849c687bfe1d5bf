//! THE KNOWN LEAKS: the classes of differences between neighbours that main is known to show
//! while their fix is under way. A difference in one of these classes is reported but does not
//! fail the test; every other difference does. Empty since issue 27's fixes landed (the
//! explain-file-details, schema-inference, internal-functions, execution-settings and
//! tiny-epsilon classes were listed while the harness was built): add an entry only with the
//! issue that fixes it, and remove it with the fix, so the test holds main to it.

use super::observe::Difference;

/// What a classifier sees of one difference (fields for the classifiers of listed leaks).
#[allow(dead_code)]
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

/// Expected failures on current main, with their classifiers: none.
pub const KNOWN_LEAKS: &[KnownLeak] = &[];

/// The category of a difference, `None` when it is not a known leak.
pub fn classify(finding: &Finding) -> Option<&'static str> {
    KNOWN_LEAKS
        .iter()
        .find(|k| (k.matches)(finding))
        .map(|k| k.category)
}
