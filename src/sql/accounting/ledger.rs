//! The durable privacy ledger behind `SET dp.ledger = 'path'`: an append-only text file with
//! one line per charge, shared by every session and process that names it.
//!
//! Format: a header line that names the format's version, then one line per charge. Two
//! versions, both read and appended to in their own format (a file is never rewritten):
//! - **v1** ([`HEADER_V1`], every ledger written before budgets had measures): lines
//!   `seq TAB unix_ms TAB pid TAB epsilon TAB delta TAB query TAB hash`; an (ε, δ) ledger.
//! - **v2** ([`header_v2`], every new ledger): the header also names the budget measure the
//!   ledger counts in (`epsilon_delta` or `zcdp`, [`BudgetMeasure`]), and each line adds the
//!   charge's ρ after delta: `seq TAB unix_ms TAB pid TAB epsilon TAB delta TAB rho TAB query
//!   TAB hash`, `rho` being `none` for a release without a zCDP map (only in an
//!   `epsilon_delta` ledger: a `zcdp` ledger counts every charge in ρ). The first line's hash
//!   is chained on the header, so the measure cannot be changed without breaking the chain.
//!
//! `hash` is the first 16 hex digits of SHA-256 over the previous line's hash and this line's
//! content (a chain: an edited, reordered or deleted line breaks every later hash). Amounts are
//! written as exact decimals of whole units ([`crate::sql::accounting::amount`]: `10^-12` of
//! epsilon, `10^-30` of delta, `10^-12` of rho) and read back digit by digit, so the totals
//! read back are exactly the totals charged; a line an older version wrote (Rust's shortest
//! `f64` form, any decimal) is read rounded up to the unit.
//!
//! **A ledger belongs to one budget measure.** A session appends to, or reports from, a ledger
//! only if its budget is in the ledger's measure (a v1 ledger's is `epsilon_delta`); otherwise
//! it is refused with an error naming the file and both measures, and nothing is written: (ε,
//! δ) charges are not counted against a zCDP budget, nor ρ against an (ε, δ) one.
//!
//! Every access holds an OS file lock (`flock` on Unix, `LockFileEx` on Windows; std's
//! `File::lock`) for the whole read-verify-(check)-append sequence, so several processes can
//! share one ledger, and a process's threads first take a lock of their own per file (they
//! queue there, not on the OS lock). Under the lock a charge reads what was appended since this
//! process last verified the file (another process may have charged since): the process keeps,
//! per file (by device and inode), the length it verified, its last line, the number of
//! charges, the chain's mark ([`Mark`]) and the totals. When the file still holds that last
//! line where it was, only the bytes after it are read, parsed and checked, chained on the
//! last verified hash; a shorter file, or another line there (an edit that moved it, a
//! truncation, a rewrite), is read and verified again from the start. So what a charge reads
//! does not grow with the ledger (the first charge of a process reads the whole file), and
//! what the process keeps of a ledger has a fixed size. A session checks that its last charge
//! is still in the file from the mark of the chain it was appended to, and reads the file's
//! lines for it only when the file has been read from its start since (a new chain). Every
//! read goes a piece of whole lines at a time ([`PIECE_BYTES`]), so reading a long ledger, in
//! full or not, takes memory bounded by the piece. What this gives up: an edit of an earlier
//! line that leaves every byte offset as it was (a digit for a digit) is not seen by a
//! process that verified the line before; that process counts the line as it verified it, so
//! it never counts less than was charged, and every full read ([`read`], `dp_budget()`, the
//! first charge of each process) refuses the broken chain.
//! Anything that does not verify — a bad hash, a line without its newline (a truncated file),
//! an unparsable field, a wrong header — is an error that names the file and the line: the
//! ledger is never repaired or reset automatically. Removing whole lines from the end cannot
//! be detected from the file alone (protect it with file permissions); a session that wrote a
//! charge does detect its disappearance (see [`crate::sql::accounting::budget`]).
//!
//! **Durable before release, with group commit.** A charge is returned (and its query may run
//! and be released) only after an `fsync` of the file that began after the charge was
//! written. The `fsync` runs after the lock is released, shared by every charge this process
//! wrote meanwhile: the first waiter syncs, the charges written while it does wait for the
//! next sync, done by one of them (as databases group-commit their logs; e.g. PostgreSQL's
//! `commit_delay` documentation). One `fsync` thus covers many concurrent charges instead of
//! one each, and the decisions stay exact: each is taken under the lock over every charge
//! written before it, synced or not, so concurrent charges never together exceed a budget.
//! Correctness: `fsync` writes every earlier write to the file to disk, whoever made it, and
//! lines are only appended, so a released charge and every line before it are on disk. A
//! charge written but not yet synced is counted by other processes (over-counting only if the
//! machine then fails, and its query was not released); when only the process dies (`kill
//! -9`), a written line is in the OS's cache and stays. A failed `fsync` fails every charge
//! it covered (they stay in the file: counted, never released), and the process takes no more
//! charges on that file until restarted, since Linux does not report a lost write twice. The
//! first charge of a new file is synced, with its directory entry, before the lock is
//! released.

use crate::sql::accounting::amount::{self, DELTA_DIGITS, EPSILON_DIGITS, RHO_DIGITS};
use crate::sql::accounting::measure::BudgetMeasure;
use datafusion::common::{plan_datafusion_err, DataFusionError, Result};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

/// Milliseconds since the Unix epoch, as a charge's time is written (0 before it).
pub(crate) fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The first line of a ledger of the first format (identifies the file and the version): an
/// (ε, δ) ledger without ρ.
pub const HEADER_V1: &str = "# datafusion-dp privacy ledger v1: seq, unix_ms, pid, epsilon, delta, query, chained sha256 prefix";

/// The first line of a ledger of the second format, counting in `measure`.
pub fn header_v2(measure: BudgetMeasure) -> String {
    format!(
        "# datafusion-dp privacy ledger v2, budget measure {measure}: seq, unix_ms, pid, epsilon, delta, rho, query, chained sha256 prefix"
    )
}

/// A ledger's format, from its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// [`HEADER_V1`]: (ε, δ), no ρ.
    V1,
    /// [`header_v2`]: its measure, and ρ on every line.
    V2(BudgetMeasure),
}

impl Format {
    /// The format whose header is `line`.
    fn of_header(line: &str) -> Option<Self> {
        if line == HEADER_V1 {
            return Some(Self::V1);
        }
        BudgetMeasure::ALL
            .into_iter()
            .find(|m| line == header_v2(*m))
            .map(Self::V2)
    }

    fn header(self) -> String {
        match self {
            Self::V1 => HEADER_V1.to_string(),
            Self::V2(measure) => header_v2(measure),
        }
    }

    /// The measure the ledger counts in.
    fn measure(self) -> BudgetMeasure {
        match self {
            Self::V1 => BudgetMeasure::EpsilonDelta,
            Self::V2(measure) => measure,
        }
    }

    /// What the first line's hash is chained on: nothing in v1, the header in v2 (so the
    /// measure it names is part of the chain).
    fn chain_start(self) -> String {
        match self {
            Self::V1 => String::new(),
            Self::V2(_) => self.header(),
        }
    }
}

/// The refusal of a ledger kept in another measure than the session's budget.
fn other_measure(path: &Path, ledger: BudgetMeasure, budget: BudgetMeasure) -> DataFusionError {
    plan_datafusion_err!(
        "dp.ledger '{}' counts charges in the budget measure '{ledger}' (its header), but this budget is in '{budget}' (dp.budget_measure): a ledger belongs to one budget measure, and its charges are not counted in another; give this budget a ledger file of its own",
        path.display()
    )
}

/// Longest query description kept in a line (characters), so lines stay short.
pub const MAX_QUERY_CHARS: usize = 500;

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
    /// The charge's ρ (zCDP): `None` on a v1 line, or for a release without a zCDP map.
    pub rho: Option<f64>,
    /// The charge exactly, in units of `10^-12` of epsilon, `10^-30` of delta and `10^-12` of
    /// rho (rounded up).
    pub epsilon_units: u128,
    pub delta_units: u128,
    pub rho_units: Option<u128>,
    /// A description of the charged query.
    pub query: String,
    /// The chained checksum of this line.
    pub hash: String,
}

/// A charge to append: what the caller decided after seeing the current entries, in units of
/// `10^-12` of epsilon, `10^-30` of delta and `10^-12` of rho
/// ([`crate::sql::accounting::amount`]; `rho_units` is `None` for a release without a zCDP
/// map, and is not kept in a v1 ledger).
#[derive(Debug, Clone, PartialEq)]
pub struct NewCharge {
    pub unix_ms: i64,
    pub epsilon_units: u128,
    pub delta_units: u128,
    pub rho_units: Option<u128>,
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

/// The text of a v2 line's `rho` field for a charge without a zCDP map.
const NO_RHO: &str = "none";

/// The line (without its newline) recording `charge` as entry `seq` after `previous` in a
/// ledger of `format`.
fn format_line(
    format: Format,
    seq: u64,
    pid: u32,
    charge: &NewCharge,
    previous: &str,
) -> (String, String) {
    let rho = match (format, charge.rho_units) {
        (Format::V1, _) => String::new(),
        (Format::V2(_), Some(units)) => format!("\t{}", amount::format_units(units, RHO_DIGITS)),
        (Format::V2(_), None) => format!("\t{NO_RHO}"),
    };
    let content = format!(
        "{seq}\t{}\t{pid}\t{}\t{}{rho}\t{}",
        charge.unix_ms,
        amount::format_units(charge.epsilon_units, EPSILON_DIGITS),
        amount::format_units(charge.delta_units, DELTA_DIGITS),
        escape(&charge.query)
    );
    let hash = chain_hash(previous, &content);
    (format!("{content}\t{hash}"), hash)
}

/// Parses and verifies a whole ledger file's text: its format (`None` for an empty file) and
/// entries.
#[cfg(test)]
fn parse(path: &Path, text: &str) -> Result<(Option<Format>, Vec<Entry>)> {
    let mut entries = Vec::new();
    let mut format = None;
    let mut previous = String::new();
    parse_lines(path, text, &mut format, 0, &mut previous, |e| {
        entries.push(e)
    })?;
    Ok((format, entries))
}

/// Parses and verifies `text`, the lines of a ledger that follow its first `verified` entries
/// in a file of `format` (`None`: `text` is the whole file, header included, which sets it),
/// chained after the hash `previous` (updated line by line), and gives each entry to `each`:
/// each line is checked exactly as if the whole file were parsed.
fn parse_lines(
    path: &Path,
    text: &str,
    format: &mut Option<Format>,
    verified: usize,
    previous: &mut String,
    mut each: impl FnMut(Entry),
) -> Result<()> {
    // Line index 0 is the header; entry k (1-based) is at index k.
    let first_index = if format.is_none() { 0 } else { verified + 1 };
    for (offset, raw) in text.split_inclusive('\n').enumerate() {
        let index = first_index + offset;
        let number = index + 1;
        let Some(line) = raw.strip_suffix('\n') else {
            return Err(corrupt(
                path,
                number,
                "the last line is incomplete (no newline: the file was truncated, or a process died while writing it; that charge's query was never allowed to run)",
            ));
        };
        if index == 0 {
            let Some(found) = Format::of_header(line) else {
                return Err(corrupt(
                    path,
                    number,
                    "not a datafusion-dp ledger (unexpected header)",
                ));
            };
            *format = Some(found);
            *previous = found.chain_start();
            continue;
        }
        let Some(line_format) = *format else {
            return Err(corrupt(path, number, "a charge before the header"));
        };
        let entry = parse_line(path, line_format, number, index, line, previous)?;
        previous.clone_from(&entry.hash);
        each(entry);
    }
    Ok(())
}

/// Parses and verifies one charge line (without its newline) of a ledger of `format`: entry
/// `index`, line `number` of the file, chained after the hash `previous`.
fn parse_line(
    path: &Path,
    format: Format,
    number: usize,
    index: usize,
    line: &str,
    previous: &str,
) -> Result<Entry> {
    let bad = |what: &str| corrupt(path, number, what);
    let (content, hash) = line
        .rsplit_once('\t')
        .ok_or_else(|| bad("no checksum field"))?;
    if chain_hash(previous, content) != hash {
        return Err(bad(
            "checksum mismatch (the line or one before it was edited, reordered or removed)",
        ));
    }
    let fields: Vec<&str> = content.split('\t').collect();
    let (seq, unix_ms, pid, epsilon, delta, rho, query) = match (format, &fields[..]) {
        (Format::V1, &[seq, unix_ms, pid, epsilon, delta, query]) => {
            (seq, unix_ms, pid, epsilon, delta, None, query)
        }
        (Format::V2(_), &[seq, unix_ms, pid, epsilon, delta, rho, query]) => {
            (seq, unix_ms, pid, epsilon, delta, Some(rho), query)
        }
        (Format::V1, _) => return Err(bad("expected 7 tab-separated fields")),
        (Format::V2(_), _) => return Err(bad("expected 8 tab-separated fields")),
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
    let rho = match rho {
        None => None,
        Some(NO_RHO) if format == Format::V2(BudgetMeasure::Zcdp) => {
            return Err(bad(
                "rho 'none' in a zcdp ledger (every charge of a zCDP budget has a rho)",
            ))
        }
        Some(NO_RHO) => None,
        Some(rho) => Some(amount(rho, "rho", RHO_DIGITS)?),
    };
    Ok(Entry {
        seq,
        unix_ms: unix_ms.parse().map_err(|_| bad("unparsable time"))?,
        pid: pid.parse().map_err(|_| bad("unparsable process id"))?,
        epsilon,
        delta,
        rho: rho.map(|(rho, _)| rho),
        epsilon_units,
        delta_units,
        rho_units: rho.map(|(_, units)| units),
        query: unescape(query).ok_or_else(|| bad("bad escape in the query text"))?,
        hash: hash.to_string(),
    })
}

/// `bytes` as text, or the corrupt-ledger error naming the line (counted from `first_line`)
/// where it stops being UTF-8.
fn utf8<'a>(path: &Path, bytes: &'a [u8], first_line: usize) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + first_line;
        corrupt(path, line, "not valid UTF-8")
    })
}

/// What the charges of a ledger add up to, exactly, in units ([`amount`]): `None` in ε or δ
/// when the sum passes `u128` (the accountant then refuses to charge), in ρ also when some
/// charge has no ρ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub epsilon_units: Option<u128>,
    pub delta_units: Option<u128>,
    pub rho_units: Option<u128>,
}

impl Default for Totals {
    /// No charge.
    fn default() -> Self {
        Self {
            epsilon_units: Some(0),
            delta_units: Some(0),
            rho_units: Some(0),
        }
    }
}

impl Totals {
    /// Counts `entry` in.
    pub fn add(&mut self, entry: &Entry) {
        let plus = |a: Option<u128>, b: Option<u128>| a.zip(b).and_then(|(a, b)| a.checked_add(b));
        self.epsilon_units = plus(self.epsilon_units, Some(entry.epsilon_units));
        self.delta_units = plus(self.delta_units, Some(entry.delta_units));
        self.rho_units = plus(self.rho_units, entry.rho_units);
    }
}

/// One verified chain of a ledger file in this process: a charge appended under a mark is in
/// the file, with the hash it was written with, for as long as the file's chain keeps that
/// mark ([`Ledger::holds_appended`]). A file is given a new mark whenever this process reads it
/// from its start (its first read, a file replaced, shortened or edited before the last line it
/// verified), so the process keeps no hash per charge to tell which of its charges are still
/// there: the hash chain does (each line's hash covers every line before it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mark(u64);

impl Mark {
    /// A mark no chain had before in this process.
    fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Mark(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

/// What this process has verified of one ledger file (by device and inode, [`shared`]), kept
/// between charges so that a charge reads only what was appended since the last one (module
/// docs): the length verified, the last verified line, the format (`None` while the file is
/// empty), the number of verified charges, the chain's [`Mark`] and the charges' totals: a
/// fixed size, whatever the ledger's length. Used only while holding the file's OS lock.
#[derive(Default)]
struct Verified {
    /// Bytes verified from the file's start (0: nothing; the file is read from its start).
    bytes: u64,
    /// The last verified line with its newline (the header while there is no charge).
    last_line: Vec<u8>,
    format: Option<Format>,
    /// How many charges are verified.
    count: u64,
    /// The chain verified (a new one after every read from the file's start).
    mark: Mark,
    /// The last verified hash as written (the chain's start while there is no charge).
    previous: String,
    totals: Totals,
}

/// What a charge's decision sees of a ledger ([`append_with`]): every charge in it, verified.
pub struct Ledger<'a> {
    verified: &'a Verified,
    path: &'a Path,
    file: &'a File,
}

impl Ledger<'_> {
    /// How many charges the ledger holds.
    pub fn len(&self) -> u64 {
        self.verified.count
    }

    /// Whether the ledger holds no charge.
    pub fn is_empty(&self) -> bool {
        self.verified.count == 0
    }

    /// What its charges add up to.
    pub fn totals(&self) -> Totals {
        self.verified.totals
    }

    /// The mark of the chain a charge decided now is appended to.
    pub fn mark(&self) -> Mark {
        self.verified.mark
    }

    /// Whether charge `seq`, appended by this process to the chain marked `mark`, is still in
    /// the ledger with the hash it was written with: `Some(true)` while the file keeps that
    /// chain (it has only grown since, as far as this process can see, module docs); `None`
    /// when the file is not that chain any more, and only its lines can tell
    /// ([`Self::hashes_at`]).
    pub fn holds_appended(&self, seq: u64, mark: Mark) -> Option<bool> {
        (mark == self.verified.mark).then_some(seq <= self.verified.count)
    }

    /// The hashes of the charges `seqs` that the ledger holds, read from the file (all of it,
    /// a piece at a time, verified as every read is).
    pub fn hashes_at(
        &self,
        seqs: &std::collections::HashSet<u64>,
    ) -> Result<std::collections::HashMap<u64, String>> {
        let mut found = std::collections::HashMap::new();
        entries_of(self.path, self.file, self.verified.bytes, |e| {
            if seqs.contains(&e.seq) {
                found.insert(e.seq, e.hash);
            }
        })?;
        Ok(found)
    }
}

impl Verified {
    /// Brings `self` up to date with the file (under its lock). When the file is at least as
    /// long as what was verified and still holds the last verified line where it was, only the
    /// bytes after it are read, parsed and checked, each line chained on the last verified
    /// hash; otherwise (a shorter file, or a different line there: an edit that moved it, a
    /// truncation, a rewrite) the whole file is read and verified again from its start.
    fn refresh(&mut self, path: &Path, file: &File) -> Result<()> {
        let file_len = file
            .metadata()
            .map_err(|e| io_error(path, "read", e))?
            .len();
        if self.bytes > 0 && file_len >= self.bytes {
            let start = self.bytes - self.last_line.len() as u64;
            if read_from(path, file, start, self.bytes)? == self.last_line {
                return read_lines(path, file, self.bytes, file_len, |piece| {
                    let first_line = first_line(self.format, self.count);
                    self.extend(path, utf8(path, piece, first_line)?)
                });
            }
        }
        // Start again: nothing of the old contents is trusted, and the chain is a new one.
        *self = Verified::default();
        let mut fresh = Verified {
            mark: Mark::new(),
            ..Verified::default()
        };
        read_lines(path, file, 0, file_len, |piece| {
            let first_line = first_line(fresh.format, fresh.count);
            fresh.extend(path, utf8(path, piece, first_line)?)
        })?;
        *self = fresh;
        Ok(())
    }

    /// Verifies `text`, the file's bytes after what `self` verified, and counts its lines in;
    /// on an error `self` is left as it was.
    fn extend(&mut self, path: &Path, text: &str) -> Result<()> {
        let mut format = self.format;
        let mut previous = self.previous.clone();
        let (mut count, mut totals) = (self.count, self.totals);
        let verified = usize::try_from(count).unwrap_or(usize::MAX);
        parse_lines(path, text, &mut format, verified, &mut previous, |e| {
            count += 1;
            totals.add(&e);
        })?;
        self.count = count;
        self.format = format;
        self.previous = previous;
        self.totals = totals;
        self.bytes += text.len() as u64;
        // A text that was parsed ends with a newline (a partial line is refused): its last
        // line runs from the newline before that one.
        if let Some(body) = text.strip_suffix('\n') {
            let last = body.rfind('\n').map_or(text, |at| &text[at + 1..]);
            self.last_line = last.as_bytes().to_vec();
        }
        Ok(())
    }
}

/// How much of a ledger is read at once: whole lines, about this many bytes (a line holds at
/// most [`MAX_QUERY_CHARS`] of its query), so reading a ledger takes memory bounded by this,
/// not by the file. The unit tests read in pieces of a line or two, so that every one of them
/// crosses pieces.
const PIECE_BYTES: usize = if cfg!(test) { 64 } else { 1 << 20 };

/// Gives `piece` the bytes of `file` from `start` to `end` in pieces of whole lines of about
/// [`PIECE_BYTES`] (the last one as it is: a line without its newline is a truncated file,
/// which the parser refuses).
fn read_lines(
    path: &Path,
    file: &File,
    start: u64,
    end: u64,
    mut piece: impl FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    use std::io::{BufRead, BufReader, Seek, SeekFrom};
    let mut reader = file;
    reader
        .seek(SeekFrom::Start(start))
        .map_err(|e| io_error(path, "read", e))?;
    // A charge's read is usually a line or two: buffers no larger than what is to be read.
    let size = PIECE_BYTES.min(usize::try_from(end.saturating_sub(start)).unwrap_or(PIECE_BYTES));
    let mut reader = BufReader::with_capacity(size.max(1), reader.take(end.saturating_sub(start)));
    let mut bytes = Vec::with_capacity(size);
    loop {
        let n = reader
            .read_until(b'\n', &mut bytes)
            .map_err(|e| io_error(path, "read", e))?;
        let at_end = n == 0 || !bytes.ends_with(b"\n");
        if !bytes.is_empty() && (at_end || bytes.len() >= PIECE_BYTES) {
            piece(&bytes)?;
            bytes.clear();
        }
        if at_end {
            return Ok(());
        }
    }
}

/// The line number, in the file, of the first line after `verified` charges of a ledger of
/// `format` (`None`: nothing read yet, the header is next).
fn first_line(format: Option<Format>, verified: u64) -> usize {
    match format {
        None => 1,
        Some(_) => usize::try_from(verified)
            .unwrap_or(usize::MAX)
            .saturating_add(2),
    }
}

/// The bytes of `file` from `start` to `end`.
fn read_from(path: &Path, file: &File, start: u64, end: u64) -> Result<Vec<u8>> {
    use std::io::{Seek, SeekFrom};
    let mut reader = file;
    reader
        .seek(SeekFrom::Start(start))
        .map_err(|e| io_error(path, "read", e))?;
    let mut bytes = Vec::with_capacity(end.saturating_sub(start) as usize);
    reader
        .take(end.saturating_sub(start))
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, "read", e))?;
    if (bytes.len() as u64) < end.saturating_sub(start) {
        return Err(io_error(
            path,
            "read",
            std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
        ));
    }
    Ok(bytes)
}

/// Whether every charge written to a file by this process has been synced to disk, and the
/// group commit of those syncs (see [`wait_durable`]).
#[derive(Default)]
struct SyncState {
    /// Charges written (appended, not necessarily synced) by this process, counted.
    written: u64,
    /// Every charge up to this count is on disk.
    synced: u64,
    /// A thread is syncing now.
    syncing: bool,
    /// A sync failed: its charges may not be on disk, and later syncs cannot be trusted to
    /// report it again (Linux marks the pages clean), so the file takes no more charges in
    /// this process.
    failed: Option<String>,
}

/// What this process keeps of one ledger file (one device and inode), for its lifetime: what
/// it verified of it ([`Verified`]: a fixed size) and the sync state. The lock of the
/// verified contents serialises this process's threads before they contend for the OS lock.
#[derive(Default)]
struct Shared {
    verified: Mutex<Verified>,
    sync: Mutex<SyncState>,
    synced: Condvar,
}

/// A poisoned lock is taken anyway: [`SyncState`]'s counters only grow, and the map of
/// [`shared`] only gains entries.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The verified contents of `shared`, emptied (to be read again from the start) if a thread
/// panicked while holding them.
fn lock_verified(shared: &Shared) -> MutexGuard<'_, Verified> {
    shared.verified.lock().unwrap_or_else(|poisoned| {
        shared.verified.clear_poison();
        let mut verified = poisoned.into_inner();
        *verified = Verified::default();
        verified
    })
}

/// The [`Shared`] state of the file `file` is open on, by device and inode (so a ledger
/// replaced by another file, or named by two spellings, is told apart or kept together
/// correctly); where the platform gives no inode, a fresh one (nothing cached, each charge
/// synced on its own).
fn shared(file: &File) -> Arc<Shared> {
    #[cfg(unix)]
    {
        use std::collections::HashMap;
        use std::os::unix::fs::MetadataExt;
        /// Each open ledger's shared state, by (device, inode).
        type ByInode = HashMap<(u64, u64), Arc<Shared>>;
        static FILES: OnceLock<Mutex<ByInode>> = OnceLock::new();
        if let Ok(metadata) = file.metadata() {
            let key = (metadata.dev(), metadata.ino());
            let mut files = lock(FILES.get_or_init(Default::default));
            return Arc::clone(files.entry(key).or_default());
        }
    }
    let _ = file;
    Arc::new(Shared::default())
}

/// Waits until the charge counted `ticket` in `shared.sync` is on disk: group commit. The
/// first waiter finding no sync running syncs the file (`fsync`: every write to the file
/// before it started, by any thread or process, is then on disk) and records that every
/// charge counted when it started is synced; the charges written meanwhile wait for the next
/// sync, done by one of them. So one `fsync` releases every charge written while the previous
/// one ran, and no charge is released before a sync that began after its write.
fn wait_durable(shared: &Shared, ticket: u64, file: &File, path: &Path) -> Result<()> {
    let mut state = lock(&shared.sync);
    loop {
        if let Some(failed) = &state.failed {
            return Err(sync_failed(path, failed));
        }
        if state.synced >= ticket {
            return Ok(());
        }
        if state.syncing {
            state = shared
                .synced
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            continue;
        }
        state.syncing = true;
        let target = state.written;
        drop(state);
        let result = file.sync_all();
        state = lock(&shared.sync);
        state.syncing = false;
        match result {
            Ok(()) => state.synced = state.synced.max(target),
            Err(e) => state.failed = Some(e.to_string()),
        }
        shared.synced.notify_all();
    }
}

fn sync_failed(path: &Path, error: &str) -> DataFusionError {
    plan_datafusion_err!(
        "dp.ledger '{}': syncing charges to disk failed ({error}); they may not be on disk, so this process takes no more charges on it: check the disk, then restart (charges written are counted)",
        path.display()
    )
}

/// Reads and verifies the whole ledger under a shared lock, whatever its measure, a piece of
/// whole lines at a time ([`PIECE_BYTES`]: memory bounded by the piece, not the file), giving
/// each entry to `each` in order: the measure it counts in (`None` for a missing or empty
/// file, an empty ledger).
pub fn for_each_entry(path: &Path, each: impl FnMut(Entry)) -> Result<Option<BudgetMeasure>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path, "open", e)),
    };
    file.lock_shared().map_err(|e| io_error(path, "lock", e))?;
    let len = file
        .metadata()
        .map_err(|e| io_error(path, "read", e))?
        .len();
    Ok(entries_of(path, &file, len, each)?.map(Format::measure))
}

/// Verifies the bytes of `file` up to `end` from its start, a piece at a time, giving each
/// entry to `each` in order: the ledger's format (`None` for an empty one). The caller holds
/// the file's lock.
fn entries_of(
    path: &Path,
    file: &File,
    end: u64,
    mut each: impl FnMut(Entry),
) -> Result<Option<Format>> {
    let (mut format, mut previous, mut count) = (None, String::new(), 0);
    read_lines(path, file, 0, end, |piece| {
        let first_line = first_line(format, count as u64);
        parse_lines(
            path,
            utf8(path, piece, first_line)?,
            &mut format,
            count,
            &mut previous,
            |e| {
                count += 1;
                each(e)
            },
        )
    })?;
    Ok(format)
}

/// Reads and verifies the whole ledger under a shared lock, whatever its measure: the measure
/// it counts in (`None` for a missing or empty file, an empty ledger) and its entries.
pub fn read_with_measure(path: &Path) -> Result<(Option<BudgetMeasure>, Vec<Entry>)> {
    let mut entries = Vec::new();
    let measure = for_each_entry(path, |e| entries.push(e))?;
    Ok((measure, entries))
}

/// Reads and verifies the ledger's entries, whatever its measure; a missing file is an empty
/// ledger.
pub fn read(path: &Path) -> Result<Vec<Entry>> {
    read_with_measure(path).map(|(_, entries)| entries)
}

/// [`read`] for a budget in `measure`: refused when the ledger counts in another.
pub fn read_in(path: &Path, measure: BudgetMeasure) -> Result<Vec<Entry>> {
    let (found, entries) = read_with_measure(path)?;
    check_measure(path, found, measure)?;
    Ok(entries)
}

/// Refuses a ledger found counting in another measure than a budget's `measure` (an empty
/// ledger, `None`, counts in any).
pub(crate) fn check_measure(
    path: &Path,
    found: Option<BudgetMeasure>,
    measure: BudgetMeasure,
) -> Result<()> {
    match found {
        Some(ledger) if ledger != measure => Err(other_measure(path, ledger, measure)),
        _ => Ok(()),
    }
}

/// Under an exclusive lock: reads and verifies every entry, refuses a ledger that counts in
/// another measure than `measure` (a new ledger is a v2 one in `measure`), asks `decide`
/// (given the entries and the file's identity) for the charge to add and appends it, in the
/// file's format; then, the lock released, waits until the charge is synced to disk (group
/// commit, [`wait_durable`]) before returning it. An error from `decide` leaves the file
/// unchanged; an error returned after the append leaves the charge in the file (counted, never
/// lost: its query must not be released).
pub fn append_with(
    path: &Path,
    measure: BudgetMeasure,
    decide: impl FnOnce(&Ledger<'_>, &Path) -> Result<NewCharge>,
) -> Result<Entry> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| io_error(path, "open", e))?;
    let shared = shared(&file);
    if let Some(failed) = &lock(&shared.sync).failed {
        return Err(sync_failed(path, failed));
    }
    let mut verified = lock_verified(&shared);
    file.lock().map_err(|e| io_error(path, "lock", e))?;
    verified.refresh(path, &file)?;
    let format = match verified.format {
        Some(format) if format.measure() != measure => {
            return Err(other_measure(path, format.measure(), measure))
        }
        Some(format) => format,
        None => Format::V2(measure),
    };
    let identity = identity(path);
    let charge = decide(
        &Ledger {
            verified: &verified,
            path,
            file: &file,
        },
        &identity,
    )?;
    if format == Format::V2(BudgetMeasure::Zcdp) && charge.rho_units.is_none() {
        return Err(plan_datafusion_err!(
            "dp.ledger '{}' counts in zCDP, but the charge has no rho; refusing",
            path.display()
        ));
    }
    // The file was verified to its end under the lock: this is its length.
    let original_len = verified.bytes;
    let seq = verified.count + 1;
    let previous = match verified.format {
        Some(_) => verified.previous.clone(),
        None => format.chain_start(),
    };
    let pid = std::process::id();
    let (line, hash) = format_line(format, seq, pid, &charge, &previous);
    let mut text = String::new();
    if original_len == 0 {
        text.push_str(&format.header());
        text.push('\n');
    }
    text.push_str(&line);
    text.push('\n');
    let mut written = file.write_all(text.as_bytes());
    if original_len == 0 {
        // A new ledger: its first charge and its directory entry are synced before the lock is
        // released, so no later charge can be released from a file that may not survive.
        written = written.and_then(|()| file.sync_all());
    }
    if let Err(e) = written {
        // Leave no partial line behind if we can; if even that fails, the next read refuses
        // the file as truncated rather than under-counting.
        let _ = file.set_len(original_len).and_then(|()| file.sync_all());
        *verified = Verified::default();
        return Err(io_error(path, "append the charge", e));
    }
    let kept_rho = match format {
        Format::V1 => None,
        Format::V2(_) => charge.rho_units,
    };
    let entry = Entry {
        seq,
        unix_ms: charge.unix_ms,
        pid,
        epsilon: amount::units_to_f64(charge.epsilon_units, EPSILON_DIGITS),
        delta: amount::units_to_f64(charge.delta_units, DELTA_DIGITS),
        epsilon_units: charge.epsilon_units,
        delta_units: charge.delta_units,
        // What a line of this format keeps (a v1 line has no ρ).
        rho: kept_rho.map(|units| amount::units_to_f64(units, RHO_DIGITS)),
        rho_units: kept_rho,
        query: charge.query.chars().take(MAX_QUERY_CHARS).collect(),
        hash,
    };
    verified.bytes += text.len() as u64;
    verified.last_line = format!("{line}\n").into_bytes();
    verified.format = Some(format);
    verified.count = seq;
    verified.previous.clone_from(&entry.hash);
    verified.totals.add(&entry);
    if original_len == 0 {
        sync_parent_dir(path);
        return Ok(entry);
    }
    let ticket = {
        let mut sync = lock(&shared.sync);
        sync.written += 1;
        sync.written
    };
    // Other threads and processes may charge now: they see this charge (written, if not yet
    // synced) and count it.
    let _ = file.unlock();
    drop(verified);
    wait_durable(&shared, ticket, &file, path)?;
    Ok(entry)
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

    /// A charge without a ρ (a release without a zCDP map).
    fn charge(epsilon: f64, delta: f64, query: &str) -> NewCharge {
        NewCharge {
            unix_ms: 1_700_000_000_000,
            epsilon_units: amount::charge_units(epsilon, EPSILON_DIGITS).unwrap(),
            delta_units: amount::charge_units(delta, DELTA_DIGITS).unwrap(),
            rho_units: None,
            query: query.to_string(),
        }
    }

    /// A charge with a ρ.
    fn charge_rho(epsilon: f64, delta: f64, rho: f64, query: &str) -> NewCharge {
        NewCharge {
            rho_units: Some(amount::charge_units(rho, RHO_DIGITS).unwrap()),
            ..charge(epsilon, delta, query)
        }
    }

    const ED: BudgetMeasure = BudgetMeasure::EpsilonDelta;
    const ZCDP: BudgetMeasure = BudgetMeasure::Zcdp;

    /// A line as the format's first version wrote it: amounts in Rust's shortest `f64` form.
    fn old_ledger_text(amounts: &[(f64, f64)]) -> String {
        let mut text = format!("{HEADER_V1}\n");
        let mut previous = String::new();
        for (i, (epsilon, delta)) in amounts.iter().enumerate() {
            let content = format!("{}\t1700000000000\t7\t{epsilon}\t{delta}\tq", i + 1);
            let hash = chain_hash(&previous, &content);
            text.push_str(&format!("{content}\t{hash}\n"));
            previous = hash;
        }
        text
    }

    /// A ledger of `format` holding `charges`, as [`append_with`] writes one.
    fn ledger_text_in(format: Format, charges: &[NewCharge]) -> String {
        let mut text = format!("{}\n", format.header());
        let mut previous = format.chain_start();
        for (i, c) in charges.iter().enumerate() {
            let (line, hash) = format_line(format, i as u64 + 1, 7, c, &previous);
            text.push_str(&line);
            text.push('\n');
            previous = hash;
        }
        text
    }

    /// A new (ε, δ) ledger holding `charges`.
    fn ledger_text(charges: &[NewCharge]) -> String {
        ledger_text_in(Format::V2(ED), charges)
    }

    /// The entries of a ledger's text.
    fn entries(text: &str) -> Vec<Entry> {
        parse(Path::new("l"), text).unwrap().1
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
        assert!(text.contains("\t999999.999999999\t0\tnone\t"), "{text}");
        let entries = entries(&text);
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
        assert_eq!(parse(Path::new("l"), "").unwrap(), (None, Vec::new()));
    }

    #[test]
    fn every_format_round_trips_its_amounts() {
        let charges = [
            charge_rho(1.0, 0.0, 0.5, "laplace"),
            charge_rho(1.0, 1e-6, 0.021_17, "gaussian"),
            charge_rho(1e-300, 0.0, 1e-300, "tiny"),
        ];
        // A v1 ledger keeps (ε, δ) only; v2 ones keep ρ too, in either measure.
        for format in [Format::V1, Format::V2(ED), Format::V2(ZCDP)] {
            let text = ledger_text_in(format, &charges);
            let (read, entries) = parse(Path::new("l"), &text).unwrap();
            assert_eq!(read, Some(format));
            assert_eq!(entries.len(), 3);
            let rhos: Vec<Option<u128>> = entries.iter().map(|e| e.rho_units).collect();
            match format {
                Format::V1 => {
                    assert!(text.contains("\t1\t0.000001\tgaussian\t"), "{text}");
                    assert_eq!(rhos, vec![None; 3]);
                }
                Format::V2(_) => {
                    assert!(
                        text.contains("\t1\t0.000001\t0.02117\tgaussian\t"),
                        "{text}"
                    );
                    // 0.5 and 0.02117 exactly, and the smallest ρ charge is one unit.
                    assert_eq!(
                        rhos,
                        vec![Some(500_000_000_000), Some(21_170_000_000), Some(1)]
                    );
                    assert_eq!(entries[1].rho, Some(0.02117));
                }
            }
            assert_eq!(entries[1].epsilon_units, 1_000_000_000_000);
            assert_eq!(entries[1].delta_units, charges[1].delta_units);
        }
        // An (ε, δ) ledger keeps a charge without a zCDP map as `none`.
        let text = ledger_text(&[charge(1.0, 1e-6, "ptr")]);
        assert!(text.contains("\t1\t0.000001\tnone\tptr\t"), "{text}");
        assert_eq!(entries(&text)[0].rho, None);
    }

    #[test]
    fn a_ledger_belongs_to_one_measure() {
        let err = |t: &str| parse(Path::new("l"), t).unwrap_err().to_string();
        // The header names the measure, and the first line's hash is chained on it: relabelling
        // an (ε, δ) ledger as zcdp breaks the chain.
        let text = ledger_text(&[charge_rho(1.0, 0.0, 0.5, "q")]);
        let relabelled = text.replacen(&header_v2(ED), &header_v2(ZCDP), 1);
        assert_ne!(relabelled, text);
        assert!(
            err(&relabelled).contains("line 2: checksum mismatch"),
            "{}",
            err(&relabelled)
        );
        // A zcdp ledger's lines all have a ρ, even with a matching checksum.
        let no_rho = ledger_text_in(Format::V2(ZCDP), &[charge(1.0, 1e-6, "ptr")]);
        assert!(
            err(&no_rho).contains("rho 'none' in a zcdp ledger"),
            "{}",
            err(&no_rho)
        );
        // A v1 line (no rho) in a v2 ledger, chained correctly, has the wrong number of fields.
        let content = "1\t1700000000000\t7\t1\t0\tq";
        let hash = chain_hash(&header_v2(ED), content);
        let mixed = format!("{}\n{content}\t{hash}\n", header_v2(ED));
        assert!(
            err(&mixed).contains("line 2: expected 8 tab-separated fields"),
            "{}",
            err(&mixed)
        );

        // Appending: a ledger takes charges of its own measure only, and is left unchanged.
        for (first, second) in [(ED, ZCDP), (ZCDP, ED)] {
            let path = temp_ledger(&format!("measure-{first}"));
            append_with(&path, first, |_, _| Ok(charge_rho(1.0, 0.0, 0.5, "q"))).unwrap();
            let before = std::fs::read(&path).unwrap();
            let refused = append_with(&path, second, |_, _| Ok(charge_rho(1.0, 0.0, 0.5, "q")))
                .unwrap_err()
                .to_string();
            assert!(
                refused.contains(&format!(
                    "counts charges in the budget measure '{first}' (its header), but this budget is in '{second}'"
                )),
                "{refused}"
            );
            assert_eq!(std::fs::read(&path).unwrap(), before);
            let refused = read_in(&path, second).unwrap_err().to_string();
            assert!(
                refused.contains("a ledger belongs to one budget measure"),
                "{refused}"
            );
            assert_eq!(read_in(&path, first).unwrap().len(), 1);
            assert_eq!(read_with_measure(&path).unwrap().0, Some(first));
            let _ = std::fs::remove_file(&path);
        }
        // A zcdp ledger refuses a charge without a ρ.
        let path = temp_ledger("zcdp-no-rho");
        let refused = append_with(&path, ZCDP, |_, _| Ok(charge(1.0, 0.0, "q")))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("the charge has no rho"), "{refused}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_first_version_ledger_is_appended_to_in_its_own_format() {
        // A v1 ledger (as every ledger before budget measures) is an (ε, δ) ledger: it counts,
        // takes new (ε, δ) charges as v1 lines, and is refused to a zCDP budget.
        let path = temp_ledger("v1");
        std::fs::write(
            &path,
            old_ledger_text(&[(0.1, 0.0), (0.30000000000000004, 1e-7)]),
        )
        .unwrap();
        let refused = append_with(&path, ZCDP, |_, _| Ok(charge_rho(1.0, 0.0, 0.5, "q")))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("measure 'epsilon_delta'"), "{refused}");
        let entry = append_with(&path, ED, |ledger, _| {
            assert_eq!(ledger.len(), 2);
            Ok(charge_rho(2.0, 0.0, 2.0, "new"))
        })
        .unwrap();
        assert_eq!((entry.seq, entry.rho_units), (3, None));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(HEADER_V1), "{text}");
        let last = text.lines().last().unwrap();
        assert!(last.starts_with("3\t"), "{text}");
        assert!(
            last.contains("\t2\t0\tnew\t"),
            "a v1 line has no rho: {text}"
        );
        let (measure, entries) = read_with_measure(&path).unwrap();
        assert_eq!(measure, Some(ED));
        let units: Vec<u128> = entries.iter().map(|e| e.epsilon_units).collect();
        assert_eq!(
            units,
            vec![100_000_000_000, 300_000_000_001, 2_000_000_000_000]
        );
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn ledgers_written_as_f64_still_load_rounded_up() {
        // The first version wrote each amount in Rust's shortest f64 form, a decimal of any
        // length: it still loads, each amount read exactly and rounded up to the unit.
        let text = old_ledger_text(&[(0.1, 0.0), (0.30000000000000004, 1e-7), (1e-15, 1e-40)]);
        let entries = entries(&text);
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
        assert!(text.contains("\t2\t0\tnone\t"), "{text}");
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

    /// A fresh ledger path in the temporary directory.
    fn temp_ledger(name: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!(
            "dp-ledger-test-{}-{name}.ledger",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        path
    }

    /// Charges `epsilon` (in units) if the ledger's total plus it stays within `budget`
    /// units, as the accountant does; `Ok(None)` when it does not fit.
    fn charge_within(path: &Path, units: u128, budget: u128) -> Result<Option<Entry>> {
        let result = append_with(path, ED, |ledger, _| {
            let spent = ledger.totals().epsilon_units.unwrap();
            if spent + units > budget {
                return Err(plan_datafusion_err!("over budget"));
            }
            Ok(NewCharge {
                unix_ms: 1_700_000_000_000,
                epsilon_units: units,
                delta_units: 0,
                rho_units: None,
                query: "q".to_string(),
            })
        });
        match result {
            Ok(entry) => Ok(Some(entry)),
            Err(e) if e.to_string().contains("over budget") => Ok(None),
            Err(e) => Err(e),
        }
    }

    #[test]
    fn concurrent_charges_land_once_and_never_exceed_the_budget() {
        // 8 threads race 40 charges each against a budget of 100 charges: exactly 100 are
        // granted, each written once, in one chain, and each granted entry is in the file.
        let path = temp_ledger("concurrent");
        let unit = 1_000_000_000_000u128;
        let budget = 100 * unit;
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || {
                    (0..40)
                        .filter_map(|_| charge_within(&path, unit, budget).unwrap())
                        .collect::<Vec<Entry>>()
                })
            })
            .collect();
        let mut granted: Vec<Entry> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        granted.sort_by_key(|e| e.seq);
        let text = std::fs::read_to_string(&path).unwrap();
        let (_, entries) = parse(&path, &text).unwrap();
        assert_eq!(granted.len(), 100);
        assert_eq!(entries.len(), 100);
        assert_eq!(
            entries.iter().map(|e| e.epsilon_units).sum::<u128>(),
            budget
        );
        for (granted, written) in granted.iter().zip(&entries) {
            assert_eq!(granted.seq, written.seq);
            assert_eq!(granted.hash, written.hash);
        }
        assert_eq!(read(&path).unwrap(), entries);
        let _ = std::fs::remove_file(&path);
    }

    /// Environment variable that makes [`processes_sharing_a_ledger_never_exceed_the_budget`]
    /// a child process charging the ledger it names.
    const CHILD_LEDGER: &str = "DP_LEDGER_TEST_CHILD";

    #[test]
    fn processes_sharing_a_ledger_never_exceed_the_budget() {
        let unit = 1_000_000_000_000u128;
        let budget = 120 * unit;
        if let Ok(path) = std::env::var(CHILD_LEDGER) {
            // A child: 4 threads charge until the budget is spent.
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let path = PathBuf::from(&path);
                    std::thread::spawn(move || {
                        while charge_within(&path, unit, budget).unwrap().is_some() {}
                    })
                })
                .collect();
            for thread in threads {
                thread.join().unwrap();
            }
            return;
        }
        // Three processes (each with its cache of the file and its own group commit) and this
        // one's threads: every charge of the others is seen, none is lost or doubled.
        let path = temp_ledger("processes");
        let children: Vec<_> = (0..3)
            .map(|_| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args([
                        "--exact",
                        "sql::accounting::ledger::tests::processes_sharing_a_ledger_never_exceed_the_budget",
                        "--test-threads=1",
                    ])
                    .env(CHILD_LEDGER, &path)
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut mine = 0;
        while charge_within(&path, unit, budget).unwrap().is_some() {
            mine += 1;
        }
        for mut child in children {
            assert!(child.wait().unwrap().success());
        }
        let entries = read(&path).unwrap();
        assert_eq!(entries.len(), 120, "{mine} charged here");
        assert_eq!(
            entries.iter().map(|e| e.epsilon_units).sum::<u128>(),
            budget
        );
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn changes_after_a_verified_read_are_detected() {
        // The bytes verified before are compared with the file on every access: an edit of
        // an already verified line is refused as a full parse would refuse it.
        let path = temp_ledger("edited");
        let unit = 1_000_000_000_000u128;
        for _ in 0..3 {
            charge_within(&path, unit, u128::MAX).unwrap().unwrap();
        }
        assert_eq!(read(&path).unwrap().len(), 3);
        let text = std::fs::read_to_string(&path).unwrap();
        let edited = text.replacen("\t1\t0\tnone\tq\t", "\t0.5\t0\tnone\tq\t", 1);
        assert_ne!(edited, text);
        std::fs::write(&path, &edited).unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(err.contains("line 2: checksum mismatch"), "{err}");
        let err = charge_within(&path, unit, u128::MAX)
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2: checksum mismatch"), "{err}");
        // Restored, it is accepted again; a line appended by another writer (here by hand,
        // as another process would) is verified and counted.
        let lines: Vec<&str> = text.lines().collect();
        let last_hash = lines[3].rsplit_once('\t').unwrap().1;
        let (line, _) = format_line(Format::V2(ED), 4, 9, &charge(2.0, 0.0, "other"), last_hash);
        std::fs::write(&path, format!("{text}{line}\n")).unwrap();
        let entries = read(&path).unwrap();
        assert_eq!(entries.len(), 4);
        assert_eq!(entries[3].pid, 9);
        // A charge reads only that line past what it verified, and counts it.
        let spent_before = |path: &Path| {
            let mut seen = None;
            append_with(path, ED, |ledger, _| {
                seen = Some((ledger.len(), ledger.totals().epsilon_units));
                Err(plan_datafusion_err!("only looking"))
            })
            .unwrap_err();
            seen.unwrap()
        };
        assert_eq!(spent_before(&path), (4, Some(5 * unit)));
        // A torn line appended after a verified read is refused, by a full read and by a
        // charge reading the tail.
        std::fs::write(&path, format!("{text}{line}\n{}", &line[..10])).unwrap();
        for err in [
            read(&path).unwrap_err().to_string(),
            charge_within(&path, unit, u128::MAX)
                .unwrap_err()
                .to_string(),
        ] {
            assert!(
                err.contains("at line 6: the last line is incomplete"),
                "{err}"
            );
        }
        std::fs::write(&path, format!("{text}{}", &line[..10])).unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(
            err.contains("at line 5: the last line is incomplete"),
            "{err}"
        );
        // Whole lines removed from the end (undetectable from the file alone, as before):
        // the shorter file is read again from the start, and charging continues its chain.
        let shorter = format!("{}\n{}\n", lines[0], lines[1]);
        std::fs::write(&path, shorter).unwrap();
        let entry = charge_within(&path, unit, u128::MAX).unwrap().unwrap();
        assert_eq!(entry.seq, 2);
        assert_eq!(read(&path).unwrap().len(), 2);
        parse(&path, &std::fs::read_to_string(&path).unwrap()).unwrap();
        // A file replaced by another (a new inode) is read as itself.
        let other = temp_ledger("other");
        charge_within(&other, unit, u128::MAX).unwrap().unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert_eq!(read(&path).unwrap().len(), 1);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_charge_is_held_by_its_chain_and_looked_up_after_a_new_one() {
        // What a session's check reads (budget::SessionCharges::check_kept_in): nothing while
        // the file keeps the chain a charge was appended to; the file's lines once it was read
        // from its start since.
        let path = temp_ledger("marks");
        let unit = 1_000_000_000_000u128;
        let mut appended = Vec::new();
        for _ in 0..3 {
            let mut mark = Mark::default();
            let entry = append_with(&path, ED, |ledger, _| {
                mark = ledger.mark();
                Ok(charge(1.0, 0.0, "q"))
            })
            .unwrap();
            appended.push((entry, mark));
        }
        let wanted: std::collections::HashSet<u64> = [2, 3].into();
        let look = |path: &Path, (entry, mark): &(Entry, Mark)| {
            let mut seen = None;
            append_with(path, ED, |ledger, _| {
                seen = Some((
                    ledger.mark(),
                    ledger.holds_appended(entry.seq, *mark),
                    ledger.hashes_at(&wanted).unwrap(),
                ));
                Err(plan_datafusion_err!("only looking"))
            })
            .unwrap_err();
            seen.unwrap()
        };
        let (mark, held, hashes) = look(&path, &appended[1]);
        assert!(appended
            .iter()
            .all(|(_, m)| *m == mark && mark != Mark::default()));
        assert_eq!(held, Some(true));
        assert_eq!(hashes[&2], appended[1].0.hash);
        assert_eq!(hashes[&3], appended[2].0.hash);
        // Charged past by this process: still the same chain.
        charge_within(&path, unit, u128::MAX).unwrap().unwrap();
        assert_eq!(look(&path, &appended[1]).0, mark);
        // The last two lines removed in place: the file is read from its start, a new chain,
        // which holds charge 2 and not 3.
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        std::fs::write(&path, format!("{}\n{}\n{}\n", lines[0], lines[1], lines[2])).unwrap();
        let (new_mark, held, hashes) = look(&path, &appended[1]);
        assert_ne!(new_mark, mark);
        assert_eq!(held, None);
        assert_eq!(hashes.len(), 1);
        assert_eq!(hashes[&2], appended[1].0.hash);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn an_edit_that_moves_no_byte_is_counted_as_verified_and_refused_by_full_reads() {
        // What charging by the tail gives up (module docs): a digit changed for a digit in a
        // line this process verified. The process keeps counting the line as it verified it
        // (never less than was charged), and a full read refuses the broken chain.
        let path = temp_ledger("same-length");
        let unit = 1_000_000_000_000u128;
        for _ in 0..3 {
            charge_within(&path, 2 * unit, u128::MAX).unwrap().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let edited = text.replacen("\t2\t0\tnone\tq\t", "\t1\t0\tnone\tq\t", 1);
        assert_ne!(edited, text);
        assert_eq!(edited.len(), text.len());
        std::fs::write(&path, &edited).unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(err.contains("line 2: checksum mismatch"), "{err}");
        let entry = charge_within(&path, 2 * unit, 8 * unit).unwrap().unwrap();
        assert_eq!(entry.seq, 4);
        // The edited line is still counted at 2: a fifth charge of 2 would pass 8.
        assert!(charge_within(&path, 2 * unit, 8 * unit).unwrap().is_none());
        // An edit that moves the last verified line is seen at once.
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replacen("\tq\t", "\tqq\t", 1)).unwrap();
        let err = charge_within(&path, unit, u128::MAX)
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2: checksum mismatch"), "{err}");
        let _ = std::fs::remove_file(&path);
    }
}
