//! The numeric keys of `[server]` and `[limits]`, each declared once in its section's table
//! ([`super::server::SERVER_LIMITS`], [`super::limits::LIMITS`]), as the `dp.*` options are in
//! `OPTIONS`: its name (the field's), unit, default, range and documentation. Reading a
//! section, its defaults, the errors naming the section and key, and the tables of
//! docs/server-limits.md all come from that declaration.

/// What a limit counts, which says how the owner writes it and how docs print it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A whole number of things (connections, queries, threads, failures).
    Count,
    /// A whole number of seconds.
    Seconds,
    /// A whole number of milliseconds.
    Milliseconds,
    /// A size in bytes: an integer, or a string with a unit (`"4GiB"`, [`parse_size`]).
    Bytes,
}

/// One end of a limit's range: a number, or the value of an earlier key of the same section.
#[derive(Debug, Clone, Copy)]
pub enum Bound {
    Value(u64),
    Key(&'static str),
}

/// What the configuration knows beyond the section itself when a default is computed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context {
    /// The `[[analyst]]` sections.
    pub analysts: usize,
}

/// A limit's value when the owner does not set it.
pub enum DefaultValue<C> {
    Value(u64),
    /// Computed from the section's earlier keys, the machine or the [`Context`]; `doc` says
    /// how, for docs/server-limits.md.
    Computed {
        doc: &'static str,
        value: fn(&C, &Context) -> u64,
    },
}

/// A key with how to read and write its field of `C`, as `field!` gives them.
pub type Field<C> = (&'static str, fn(&C) -> u64, fn(&mut C, u64));

/// One numeric key of a section whose values are of type `C`.
pub struct Limit<C> {
    /// The key, which is also the name of `C`'s field (see `field!`).
    pub key: &'static str,
    pub unit: Unit,
    pub default: DefaultValue<C>,
    /// The least value allowed (0 would refuse everything for most limits).
    pub min: Bound,
    /// The most value allowed, if any.
    pub max: Option<Bound>,
    /// Whether an error states the whole range (`min` to `max`) rather than the end passed.
    pub between: bool,
    /// Why the range is what it is, added to the error of a value past `max` (`""`: nothing).
    pub why: &'static str,
    /// What it bounds and what happens beyond it: its row in docs/server-limits.md.
    pub doc: &'static str,
    pub get: fn(&C) -> u64,
    pub set: fn(&mut C, u64),
}

/// The `key`, `get` and `set` of a [`Limit`] over field `$field` of `$config`: the key is the
/// field's name, so the two cannot differ.
macro_rules! field {
    ($config:ty, $field:ident) => {
        (
            stringify!($field),
            |c: &$config| c.$field as u64,
            |c: &mut $config, v: u64| c.$field = v as _,
        )
    };
}
pub(crate) use field;

impl<C> Limit<C> {
    /// A limit over `(key, get, set)` as `field!` gives them.
    pub const fn new(
        (key, get, set): Field<C>,
        unit: Unit,
        default: DefaultValue<C>,
        doc: &'static str,
    ) -> Self {
        Self {
            key,
            unit,
            default,
            min: Bound::Value(1),
            max: None,
            between: false,
            why: "",
            doc,
            get,
            set,
        }
    }

    /// The same limit within `min` to `max`.
    pub const fn within(self, min: Bound, max: Bound) -> Self {
        Self {
            min,
            max: Some(max),
            between: true,
            ..self
        }
    }

    /// The same limit from `min` (1 unless said).
    pub const fn from(self, min: Bound) -> Self {
        Self { min, ..self }
    }

    /// The same limit at most `max`, for the reason `why` (`": ..."`).
    pub const fn at_most(self, max: Bound, why: &'static str) -> Self {
        Self {
            max: Some(max),
            why,
            ..self
        }
    }
}

/// Sets every limit of `limits` on `config`, in the table's order: from `section`'s value for
/// its key, taken out of `values`, or its default. Errors name the section and the key.
pub fn read<C>(
    section: &str,
    limits: &[Limit<C>],
    config: &mut C,
    values: &mut toml::Table,
    context: &Context,
) -> Result<(), String> {
    for limit in limits {
        let n = match values.remove(limit.key) {
            None => match &limit.default {
                DefaultValue::Value(n) => *n,
                DefaultValue::Computed { value, .. } => value(config, context),
            },
            Some(value) => limit
                .unit
                .parse(&value)
                .map_err(|e| format!("[{section}] {}: {e}", limit.key))?,
        };
        check(section, limits, limit, config, n)?;
        (limit.set)(config, n);
    }
    Ok(())
}

/// Refuses the keys left in `values` once `section` has read its `known` keys and `limits`.
pub fn refuse_unknown<C>(
    section: &str,
    values: &toml::Table,
    known: &[&str],
    limits: &[Limit<C>],
) -> std::result::Result<(), String> {
    match values.keys().next() {
        None => Ok(()),
        Some(key) => {
            let expected: Vec<&str> = known
                .iter()
                .copied()
                .chain(limits.iter().map(|l| l.key))
                .collect();
            Err(format!(
                "[{section}] unknown key '{key}' (expected one of: {})",
                expected.join(", ")
            ))
        }
    }
}

/// Refuses `n` for `limit` when it is outside its range.
fn check<C>(
    section: &str,
    limits: &[Limit<C>],
    limit: &Limit<C>,
    config: &C,
    n: u64,
) -> Result<(), String> {
    // A bound's value, and how an error names it.
    let bound = |b: Bound| match b {
        Bound::Value(v) => (v, limit.unit.show(v)),
        Bound::Key(key) => {
            let other = limits.iter().find(|l| l.key == key).expect("declared");
            let v = (other.get)(config);
            (v, format!("{key} ({})", limit.unit.show(v)))
        }
    };
    let (min, min_text) = bound(limit.min);
    let key = limit.key;
    let max = limit.max.map(bound);
    match max {
        Some((max, max_text)) if limit.between && !(min..=max).contains(&n) => Err(format!(
            "[{section}] {key} must be between {min_text} and {max_text}, got {n}"
        )),
        _ if n < min => Err(format!("[{section}] {key} must be at least {min_text}")),
        Some((max, max_text)) if n > max => Err(format!(
            "[{section}] {key} ({}) must be at most {max_text}{}",
            limit.unit.show(n),
            limit.why
        )),
        _ => Ok(()),
    }
}

impl Unit {
    /// The value the owner wrote.
    fn parse(self, value: &toml::Value) -> Result<u64, String> {
        match (self, value) {
            (Unit::Bytes, value) => parse_size(value).map(|n| n as u64),
            (_, toml::Value::Integer(i)) if *i >= 0 => Ok(*i as u64),
            (Unit::Seconds, _) => Err(format!("expected a whole number of seconds, got {value}")),
            (Unit::Milliseconds, _) => Err(format!(
                "expected a whole number of milliseconds, got {value}"
            )),
            (Unit::Count, _) => Err(format!("expected a whole number, got {value}")),
        }
    }

    /// `n` as errors say it: sizes in bytes.
    fn show(self, n: u64) -> String {
        match self {
            Unit::Bytes => format!("{n} bytes"),
            _ => n.to_string(),
        }
    }

    /// `n` as docs/server-limits.md says it: `4 MiB`, `28800 (8 h)`.
    fn doc(self, n: u64) -> String {
        match self {
            Unit::Count => n.to_string(),
            Unit::Seconds if n >= 7200 && n.is_multiple_of(3600) => format!("{n} ({} h)", n / 3600),
            Unit::Seconds => n.to_string(),
            Unit::Milliseconds => format!("{n} ms"),
            Unit::Bytes => [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")]
                .into_iter()
                .find(|(shift, _)| n >= 1 << shift && n.is_multiple_of(1 << shift))
                .map_or(format!("{n} bytes"), |(shift, unit)| {
                    format!("{} {unit}", n >> shift)
                }),
        }
    }
}

/// The rows of docs/server-limits.md's table for `limits` (Markdown, one line each), then
/// `more` rows of keys that are not numbers (key, default, what).
pub fn markdown<C>(limits: &[Limit<C>], more: &[(&str, &str, &str)]) -> String {
    let mut text = String::from(
        "| Option | Default | What it bounds, and what happens beyond it |\n|---|---|---|\n",
    );
    for limit in limits {
        let default = match &limit.default {
            DefaultValue::Value(n) => limit.unit.doc(*n),
            DefaultValue::Computed { doc, .. } => doc.to_string(),
        };
        text.push_str(&format!(
            "| `{}` | {default} | {} |\n",
            limit.key, limit.doc
        ));
    }
    for (key, default, doc) in more {
        text.push_str(&format!("| `{key}` | {default} | {doc} |\n"));
    }
    text
}

/// A size in bytes as the owner writes it: an integer (bytes) or a string with a unit,
/// `"512MiB"`, `"2 GiB"`, `"64MB"`, `"1G"` (binary units: K, M, G, T with or without `iB`;
/// `KB`, `MB`, `GB`, `TB` are decimal).
pub fn parse_size(value: &toml::Value) -> std::result::Result<usize, String> {
    let text = match value {
        toml::Value::Integer(i) if *i > 0 => return Ok(*i as usize),
        toml::Value::String(s) => s.trim(),
        _ => return Err(format!("expected a size such as \"2GiB\", got {value}")),
    };
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let multiplier: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => {
            return Err(format!(
                "unknown unit in size '{text}' (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            ))
        }
    };
    match number.parse::<f64>() {
        Ok(n) if n > 0.0 && (n * multiplier) < usize::MAX as f64 && n * multiplier >= 1.0 => {
            Ok((n * multiplier) as usize)
        }
        _ => Err(format!(
            "expected a positive size such as \"2GiB\", got '{text}'"
        )),
    }
}

/// The cores this process may use: the default of the limits that scale with them.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
