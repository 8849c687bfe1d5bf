//! The durable privacy ledger behind `SET dp.ledger = 'path'`: an append-only text file with
//! one line per charge, shared by every session and process that names it.
//!
//! Format: a fixed header line, then one line per charge,
//! `seq TAB unix_ms TAB pid TAB epsilon TAB delta TAB query TAB hash`, where `hash` is the
//! first 16 hex digits of SHA-256 over the previous line's hash and this line's content (a
//! chain: an edited, reordered or deleted line breaks every later hash). Amounts are written as
//! exact decimals of whole units ([`crate::sql::accounting::amount`]: `10^-12` of epsilon,
//! `10^-30` of delta) and read back digit by digit, so the totals read back are exactly the
//! totals charged; a line an older version wrote (Rust's shortest `f64` form, any decimal) is
//! read rounded up to the unit.
//!
//! Every access holds an OS file lock (`flock` on Unix, `LockFileEx` on Windows; std's
//! `File::lock`) for the whole read-verify-(check)-append-fsync sequence, so several processes
//! can share one ledger. The file is read and verified in full every time: another process may
//! have charged since. Anything that does not verify — a bad hash, a line without its newline
//! (a truncated file), an unparsable field, a wrong header — is an error that names the file and
//! the line: the ledger is never repaired or reset automatically. Removing whole lines from the
//! end cannot be detected from the file alone (protect it with file permissions); a session
//! that wrote a charge does detect its disappearance (see [`crate::sql::accounting::budget`]).

use crate::sql::accounting::amount::{self, DELTA_DIGITS, EPSILON_DIGITS};
use datafusion::common::{plan_datafusion_err, DataFusionError, Result};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The first line of every ledger (identifies the file and the format version).
const HEADER: &str = "# datafusion-dp privacy ledger v1: seq, unix_ms, pid, epsilon, delta, query, chained sha256 prefix";

/// Longest query description kept in a line (characters), so lines stay short.
const MAX_QUERY_CHARS: usize = 500;

/// One verified charge in a ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// 1-based position in the ledger.
    pub seq: u64,
    pub unix_ms: i64,
    /// The process that wrote the charge.
    pub pid: u32,
    pub epsilon: f64,
    pub delta: f64,
    /// The charge exactly, in units of `10^-12` of epsilon and `10^-30` of delta (rounded up).
    pub epsilon_units: u128,
    pub delta_units: u128,
    /// A description of the charged query.
    pub query: String,
    /// The chained checksum of this line.
    pub hash: String,
}

/// A charge to append: what the caller decided after seeing the current entries, in units of
/// `10^-12` of epsilon and `10^-30` of delta ([`crate::sql::accounting::amount`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NewCharge {
    pub unix_ms: i64,
    pub epsilon_units: u128,
    pub delta_units: u128,
    pub query: String,
}

/// The file's identity for comparing ledgers named by different spellings of one path.
pub fn identity(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

fn io_error(path: &Path, action: &str, e: std::io::Error) -> DataFusionError {
    plan_datafusion_err!("dp.ledger '{}': cannot {action}: {e}", path.display())
}

fn corrupt(path: &Path, line: usize, what: &str) -> DataFusionError {
    plan_datafusion_err!(
        "dp.ledger '{}' is corrupt at line {line}: {what}; refusing to charge or report (the ledger is never reset automatically: inspect it, and repair or restore it by hand)",
        path.display()
    )
}

fn chain_hash(previous: &str, content: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(previous.as_bytes());
    hasher.update(b"\n");
    hasher.update(content.as_bytes());
    hasher.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars().take(MAX_QUERY_CHARS) {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

fn unescape(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            '\\' => '\\',
            't' => '\t',
            'n' => '\n',
            'r' => '\r',
            _ => return None,
        });
    }
    Some(out)
}

/// The line (without its newline) recording `charge` as entry `seq` after `previous`.
fn format_line(seq: u64, pid: u32, charge: &NewCharge, previous: &str) -> (String, String) {
    let content = format!(
        "{seq}\t{}\t{pid}\t{}\t{}\t{}",
        charge.unix_ms,
        amount::format_units(charge.epsilon_units, EPSILON_DIGITS),
        amount::format_units(charge.delta_units, DELTA_DIGITS),
        escape(&charge.query)
    );
    let hash = chain_hash(previous, &content);
    (format!("{content}\t{hash}"), hash)
}

/// Parses and verifies a whole ledger file's text.
fn parse(path: &Path, text: &str) -> Result<Vec<Entry>> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut entries = Vec::with_capacity(lines.len().saturating_sub(1));
    let mut previous = String::new();
    for (index, raw) in lines.iter().enumerate() {
        let number = index + 1;
        let Some(line) = raw.strip_suffix('\n') else {
            return Err(corrupt(
                path,
                number,
                "the last line is incomplete (no newline: the file was truncated, or a process died while writing it; that charge's query was never allowed to run)",
            ));
        };
        if index == 0 {
            if line != HEADER {
                return Err(corrupt(
                    path,
                    number,
                    "not a datafusion-dp ledger (unexpected header)",
                ));
            }
            continue;
        }
        let bad = |what: &str| corrupt(path, number, what);
        let (content, hash) = line
            .rsplit_once('\t')
            .ok_or_else(|| bad("no checksum field"))?;
        if chain_hash(&previous, content) != hash {
            return Err(bad(
                "checksum mismatch (the line or one before it was edited, reordered or removed)",
            ));
        }
        let fields: Vec<&str> = content.split('\t').collect();
        let [seq, unix_ms, pid, epsilon, delta, query] = fields[..] else {
            return Err(bad("expected 7 tab-separated fields"));
        };
        let seq: u64 = seq.parse().map_err(|_| bad("unparsable sequence number"))?;
        if seq != index as u64 {
            return Err(bad(&format!(
                "sequence number {seq}, expected {index} (lines are missing or repeated)"
            )));
        }
        // The amount as a number (for reports) and exactly, in units rounded up.
        let amount = |v: &str, name: &str, digits: u32| -> Result<(f64, u128)> {
            match (v.parse::<f64>(), amount::parse_units(v, digits)) {
                (Ok(x), Some(units)) if x.is_finite() && x >= 0.0 => Ok((x, units)),
                _ => Err(bad(&format!("{name} '{v}' is not a finite number >= 0"))),
            }
        };
        let (epsilon, epsilon_units) = amount(epsilon, "epsilon", EPSILON_DIGITS)?;
        let (delta, delta_units) = amount(delta, "delta", DELTA_DIGITS)?;
        entries.push(Entry {
            seq,
            unix_ms: unix_ms.parse().map_err(|_| bad("unparsable time"))?,
            pid: pid.parse().map_err(|_| bad("unparsable process id"))?,
            epsilon,
            delta,
            epsilon_units,
            delta_units,
            query: unescape(query).ok_or_else(|| bad("bad escape in the query text"))?,
            hash: hash.to_string(),
        });
        previous = hash.to_string();
    }
    Ok(entries)
}

fn read_all(path: &Path, mut file: &File) -> Result<Vec<Entry>> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| io_error(path, "read", e))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let line = e.as_bytes()[..e.utf8_error().valid_up_to()]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1;
        corrupt(path, line, "not valid UTF-8")
    })?;
    parse(path, &text)
}

/// Reads and verifies the ledger under a shared lock; a missing file is an empty ledger.
pub fn read(path: &Path) -> Result<Vec<Entry>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(path, "open", e)),
    };
    file.lock_shared().map_err(|e| io_error(path, "lock", e))?;
    read_all(path, &file)
}

/// Under an exclusive lock: reads and verifies every entry, asks `decide` (given the entries and
/// the file's identity) for the charge to add, appends it and syncs it to disk before
/// returning it. An error from `decide` leaves the file unchanged.
pub fn append_with(
    path: &Path,
    decide: impl FnOnce(&[Entry], &Path) -> Result<NewCharge>,
) -> Result<Entry> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| io_error(path, "open", e))?;
    file.lock().map_err(|e| io_error(path, "lock", e))?;
    let entries = read_all(path, &file)?;
    let identity = identity(path);
    let charge = decide(&entries, &identity)?;
    let original_len = file
        .metadata()
        .map_err(|e| io_error(path, "stat", e))?
        .len();
    let seq = entries.len() as u64 + 1;
    let previous = entries.last().map_or("", |e| e.hash.as_str());
    let pid = std::process::id();
    let (line, hash) = format_line(seq, pid, &charge, previous);
    let mut text = String::new();
    if original_len == 0 {
        text.push_str(HEADER);
        text.push('\n');
    }
    text.push_str(&line);
    text.push('\n');
    let written = file
        .write_all(text.as_bytes())
        .and_then(|()| file.sync_all());
    if let Err(e) = written {
        // Leave no partial line behind if we can; if even that fails, the next read refuses
        // the file as truncated rather than under-counting.
        let _ = file.set_len(original_len).and_then(|()| file.sync_all());
        return Err(io_error(path, "append the charge", e));
    }
    if original_len == 0 {
        sync_parent_dir(path);
    }
    Ok(Entry {
        seq,
        unix_ms: charge.unix_ms,
        pid,
        epsilon: amount::units_to_f64(charge.epsilon_units, EPSILON_DIGITS),
        delta: amount::units_to_f64(charge.delta_units, DELTA_DIGITS),
        epsilon_units: charge.epsilon_units,
        delta_units: charge.delta_units,
        query: charge.query.chars().take(MAX_QUERY_CHARS).collect(),
        hash,
    })
}

/// Makes a newly created ledger's directory entry durable (best effort: some file systems do
/// not support syncing a directory; the charge itself is already synced).
fn sync_parent_dir(path: &Path) {
    #[cfg(unix)]
    if let Some(dir) = identity(path).parent() {
        if let Ok(dir) = File::open(dir) {
            let _ = dir.sync_all();
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charge(epsilon: f64, delta: f64, query: &str) -> NewCharge {
        NewCharge {
            unix_ms: 1_700_000_000_000,
            epsilon_units: amount::charge_units(epsilon, EPSILON_DIGITS).unwrap(),
            delta_units: amount::charge_units(delta, DELTA_DIGITS).unwrap(),
            query: query.to_string(),
        }
    }

    /// A line as the format's first version wrote it: amounts in Rust's shortest `f64` form.
    fn old_ledger_text(amounts: &[(f64, f64)]) -> String {
        let mut text = format!("{HEADER}\n");
        let mut previous = String::new();
        for (i, (epsilon, delta)) in amounts.iter().enumerate() {
            let content = format!("{}\t1700000000000\t7\t{epsilon}\t{delta}\tq", i + 1);
            let hash = chain_hash(&previous, &content);
            text.push_str(&format!("{content}\t{hash}\n"));
            previous = hash;
        }
        text
    }

    fn ledger_text(charges: &[NewCharge]) -> String {
        let mut text = format!("{HEADER}\n");
        let mut previous = String::new();
        for (i, c) in charges.iter().enumerate() {
            let (line, hash) = format_line(i as u64 + 1, 7, c, &previous);
            text.push_str(&line);
            text.push('\n');
            previous = hash;
        }
        text
    }

    #[test]
    fn lines_round_trip_exactly() {
        let charges = [
            charge(0.1, 0.0, "dp_count(t.x, Float64(0.1)) FROM t"),
            charge(1.0 / 3.0, 1e-7, "tab\there\nnewline \\ backslash"),
            // The smallest charge (one unit of each) and a large one.
            charge(1e-300, 5e-324, "tiny"),
            charge(999_999.999_999_999, 0.0, "large"),
        ];
        let text = ledger_text(&charges);
        assert!(text.contains("\t0.1\t0\t"), "{text}");
        assert!(text.contains("\t0.333333333334\t0.0000001\t"), "{text}");
        assert!(
            text.contains("\t0.000000000001\t0.000000000000000000000000000001\t"),
            "{text}"
        );
        assert!(text.contains("\t999999.999999999\t0\t"), "{text}");
        let entries = parse(Path::new("l"), &text).unwrap();
        assert_eq!(entries.len(), 4);
        for (entry, c) in entries.iter().zip(&charges) {
            assert_eq!(entry.epsilon_units, c.epsilon_units);
            assert_eq!(entry.delta_units, c.delta_units);
            assert_eq!(
                entry.epsilon,
                amount::units_to_f64(c.epsilon_units, EPSILON_DIGITS)
            );
            assert_eq!(entry.query, c.query);
            assert_eq!(entry.pid, 7);
        }
        assert_eq!(entries[0].epsilon, 0.1);
        assert_eq!(entries[1].delta, 1e-7);
        assert_eq!(entries[2].epsilon, 1e-12);
        assert_eq!(parse(Path::new("l"), "").unwrap(), Vec::new());
    }

    #[test]
    fn ledgers_written_as_f64_still_load_rounded_up() {
        // The first version wrote each amount in Rust's shortest f64 form, a decimal of any
        // length: it still loads, each amount read exactly and rounded up to the unit.
        let text = old_ledger_text(&[(0.1, 0.0), (0.30000000000000004, 1e-7), (1e-15, 1e-40)]);
        let entries = parse(Path::new("l"), &text).unwrap();
        let units: Vec<(u128, u128)> = entries
            .iter()
            .map(|e| (e.epsilon_units, e.delta_units))
            .collect();
        assert_eq!(
            units,
            vec![
                (100_000_000_000, 0),
                (300_000_000_001, 100_000_000_000_000_000_000_000),
                (1, 1),
            ]
        );
        assert_eq!(entries[1].epsilon, 0.30000000000000004);
        assert_eq!(entries[2].delta, 1e-40);
    }

    #[test]
    fn tampering_and_truncation_are_detected() {
        let text = ledger_text(&[charge(1.0, 0.0, "a"), charge(2.0, 0.0, "b")]);
        let err = |t: &str| parse(Path::new("l"), t).unwrap_err().to_string();
        // An edited amount breaks the line's checksum.
        let edited = text.replacen("\t2\t0\t", "\t0.2\t0\t", 1);
        assert_ne!(edited, text);
        assert!(
            err(&edited).contains("line 3: checksum mismatch"),
            "{}",
            err(&edited)
        );
        // A removed middle line breaks the chain.
        let lines: Vec<&str> = text.lines().collect();
        let removed = format!("{}\n{}\n", lines[0], lines[2]);
        assert!(err(&removed).contains("line 2"), "{}", err(&removed));
        // A partial last line (a crash mid-write, or truncation).
        let cut = &text[..text.len() - 5];
        assert!(err(cut).contains("incomplete"), "{}", err(cut));
        assert!(err(&text[..3]).contains("incomplete"));
        // Not a ledger at all.
        assert!(err("root:x:0:0\n").contains("not a datafusion-dp ledger"));
        // A valid-looking line with a bad number fails even with a matching checksum.
        let bad = old_ledger_text(&[(f64::NAN, 0.0)]);
        assert!(err(&bad).contains("epsilon 'NaN'"), "{}", err(&bad));
        let bad = old_ledger_text(&[(1.0, f64::INFINITY)]);
        assert!(err(&bad).contains("delta 'inf'"), "{}", err(&bad));
    }
}
