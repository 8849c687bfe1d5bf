//! Analysts' credentials: Argon2id password hashes (PHC strings), the `Basic` handshake header,
//! and bearer tokens (256 bits from the OS's CSPRNG). `dp-server` and a locked cluster's client
//! port (`dp-scheduler --owner-config`) log analysts in through the same [`LoginGate`].

use crate::owner::{Credential, OwnerConfig};
use argon2::password_hash::phc::PasswordHash;
use argon2::password_hash::PasswordHasher;
use argon2::{Algorithm, Argon2, Block, Params, Version};
use base64::Engine;
use rand::{RngCore, TryRngCore};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tonic::Status;

/// An Argon2id hash (default parameters, random salt) of `password`, as a PHC string for a
/// configuration's `password_hash`.
pub fn hash_password(password: &str) -> Result<String, String> {
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| format!("cannot hash the password: {e}"))
}

/// Whether `a == b`, in time that depends only on the lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether `password` matches the PHC string `hash`, computed in `memory` (grown to the
/// hash's memory cost and kept): the server reuses one such buffer per hashing permit instead
/// of allocating Argon2's 19 MiB per check, which the system allocator did not give back (the
/// freed blocks were cut up by small allocations: 48 looping clients grew the process by about
/// 9 MB per failed login even with two checks at a time).
fn verify_hash_in(hash: &str, password: &str, memory: &mut Vec<Block>) -> bool {
    let Ok(parsed) = PasswordHash::new(hash) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (&parsed.salt, &parsed.hash) else {
        return false;
    };
    let Ok(algorithm) = Algorithm::try_from(parsed.algorithm.as_str()) else {
        return false;
    };
    let version = match parsed.version.map(Version::try_from) {
        None => Version::default(),
        Some(Ok(version)) => version,
        Some(Err(_)) => return false,
    };
    let Ok(params) = Params::try_from(&parsed) else {
        return false;
    };
    let blocks = params.block_count();
    if memory.len() < blocks {
        memory.resize(blocks, Block::default());
    }
    let mut computed = vec![0u8; expected.len()];
    Argon2::new(algorithm, version, params)
        .hash_password_into_with_memory(
            password.as_bytes(),
            salt.as_ref(),
            &mut computed,
            &mut memory[..blocks],
        )
        .is_ok()
        && constant_time_eq(&computed, expected.as_ref())
}

#[cfg(test)]
fn verify_hash(hash: &str, password: &str) -> bool {
    verify_hash_in(hash, password, &mut Vec::new())
}

/// A hash no password matches in practice, verified for unknown names (and before comparing a
/// plaintext `password`) so that a failed login takes as long whether or not the analyst
/// exists: with the algorithm and parameters of the configuration's first `password_hash`
/// (the defaults of `--hash-password` without one), so it costs what a real check costs.
/// Made once, when the server starts ([`LoginGate::new`]), not at the first stranger.
fn decoy_hash(config: &OwnerConfig) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let password = hex(&bytes);
    let like = config.analysts.iter().find_map(|a| match &a.credential {
        Some(Credential::Hash(hash)) => {
            let parsed = PasswordHash::new(hash).ok()?;
            let algorithm = Algorithm::try_from(parsed.algorithm.as_str()).ok()?;
            let version = match parsed.version {
                Some(v) => Version::try_from(v).ok()?,
                None => Version::default(),
            };
            let params = Params::try_from(&parsed).ok()?;
            Some(Argon2::new(algorithm, version, params))
        }
        _ => None,
    });
    like.unwrap_or_default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .unwrap_or_default()
}

/// Checks `name`/`password` against the configuration. Every outcome runs exactly one Argon2id
/// verification (the analyst's hash, or the decoy for an unknown name, an analyst without a
/// credential, or before comparing a plaintext `password`), so the time does not tell whether a
/// name exists. An analyst without a credential (a `dpsql --config` shell only) cannot log in.
/// Argon2's working memory is `memory` ([`verify_hash_in`]).
/// `decoy` is [`decoy_hash`]'s.
fn check(
    config: &OwnerConfig,
    decoy: &str,
    name: &str,
    password: &str,
    memory: &mut Vec<Block>,
) -> bool {
    match config.analyst(name).and_then(|a| a.credential.as_ref()) {
        Some(Credential::Hash(hash)) => verify_hash_in(hash, password, memory),
        Some(Credential::Password(expected)) => {
            verify_hash_in(decoy, password, memory);
            constant_time_eq(expected.as_bytes(), password.as_bytes())
        }
        None => {
            verify_hash_in(decoy, password, memory);
            false
        }
    }
}

/// A user name as it may appear in a log line: quoted, with newlines, terminal escapes and
/// other control characters escaped (so a name cannot forge or hide lines), and cut to 64
/// characters.
pub fn log_name(name: &str) -> String {
    let cut: String = name.chars().take(64).collect();
    let more = if cut.len() < name.len() { "..." } else { "" };
    format!("{cut:?}{more}")
}

/// What a refused login is told, as a gRPC status.
fn backed_off(wait: Duration) -> Status {
    Status::unauthenticated(format!(
        "too many failed logins for this user name or from this address: retry in {} s \
         (login_backoff_max_seconds)",
        wait.as_secs_f64().ceil().max(1.0) as u64
    ))
}

/// How long a login waits for a free password check before it is refused.
const LOGIN_QUEUE: Duration = Duration::from_secs(10);

/// User names and peer addresses whose failures are remembered at most; beyond it the entries
/// whose wait ended first are forgotten (a flood of made-up names cannot grow the map).
const MAX_TRACKED: usize = 10_000;

/// What a back-off is kept by.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    Name(String),
    Peer(IpAddr),
}

/// The failures of one key: how many in a row, and until when logins are refused.
struct Failures {
    count: u32,
    last: Instant,
    until: Instant,
}

/// The state of logins: a semaphore bounding the password checks running at once (each takes
/// 19 MiB and a core for tens of milliseconds), and exponential back-off after failures per
/// user name and per peer address. (Rate limiters such as `governor` meter a steady rate; a
/// wait that doubles with each failure in a row and ends with a success is not one, hence
/// these few lines.)
pub struct LoginGate {
    hashing: Arc<Semaphore>,
    decoy: Arc<String>,
    /// Argon2's working memory, one buffer per permit, reused.
    memory: Arc<Mutex<Vec<Vec<Block>>>>,
    concurrency: usize,
    name_failures: u32,
    peer_failures: u32,
    max_wait: Duration,
    failures: Mutex<HashMap<Key, Failures>>,
    /// The program named in refused logins' log lines.
    process: &'static str,
}

impl LoginGate {
    /// `dp-server`'s logins.
    pub fn new(config: &OwnerConfig) -> Self {
        Self::for_process(config, "dp-server")
    }

    /// The logins of `process` (named in its log lines), with the limits of the owner's
    /// `[server]` section.
    pub fn for_process(config: &OwnerConfig, process: &'static str) -> Self {
        let server = &config.server;
        let concurrency = server.login_concurrency.max(1);
        Self {
            hashing: Arc::new(Semaphore::new(concurrency)),
            decoy: Arc::new(decoy_hash(config)),
            memory: Arc::new(Mutex::new(Vec::new())),
            concurrency,
            name_failures: server.login_name_failures,
            peer_failures: server.login_peer_failures,
            max_wait: Duration::from_secs(server.login_backoff_max_seconds.max(1)),
            failures: Mutex::new(HashMap::new()),
            process,
        }
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Failures>> {
        self.failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The wait left before `keys` may try again, if any is backed off.
    fn waiting(&self, keys: &[Key], now: Instant) -> Option<Duration> {
        let failures = self.failures();
        keys.iter()
            .filter_map(|key| failures.get(key))
            .filter(|f| f.until > now)
            .map(|f| f.until - now)
            .max()
    }

    /// Counts a failure of each of `keys`; past its free failures a key waits 1 s, then 2 s,
    /// 4 s, ... up to the maximum. Returns the longest wait started.
    fn fail(&self, keys: &[Key], now: Instant) -> Option<Duration> {
        let mut failures = self.failures();
        // Forget what is over: a key whose wait (or last failure) is older than the maximum
        // wait starts again from its free failures.
        if failures.len() >= MAX_TRACKED {
            let max_wait = self.max_wait;
            failures.retain(|_, f| now.saturating_duration_since(f.until.max(f.last)) < max_wait);
        }
        while failures.len() >= MAX_TRACKED {
            let Some(oldest) = failures
                .iter()
                .min_by_key(|(_, f)| f.until.max(f.last))
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            failures.remove(&oldest);
        }
        let mut longest = None;
        for key in keys {
            let free = match key {
                Key::Name(_) => self.name_failures,
                Key::Peer(_) => self.peer_failures,
            };
            let entry = failures.entry(key.clone()).or_insert(Failures {
                count: 0,
                last: now,
                until: now,
            });
            if now.saturating_duration_since(entry.until.max(entry.last)) >= self.max_wait {
                entry.count = 0;
            }
            entry.count = entry.count.saturating_add(1);
            entry.last = now;
            if entry.count > free {
                let doublings = (entry.count - free - 1).min(30);
                let wait = Duration::from_secs(1u64 << doublings).min(self.max_wait);
                entry.until = now + wait;
                longest = longest.max(Some(wait));
            }
        }
        longest
    }

    fn succeed(&self, keys: &[Key]) {
        let mut failures = self.failures();
        for key in keys {
            failures.remove(key);
        }
    }

    /// Checks a login of `name` with `password` from `peer`: refused at once (no password
    /// check) while the name or the address is backed off; otherwise one password check, run
    /// on the blocking pool only once one of the `login_concurrency` permits is free (waiting
    /// at most [`LOGIN_QUEUE`]). The analyst's configuration when the password matches.
    pub async fn login(
        &self,
        config: Arc<crate::owner::Owner>,
        name: &str,
        password: String,
        peer: Option<IpAddr>,
    ) -> Result<crate::owner::AnalystConfig, Status> {
        // Names are compared (and kept) cut to 256 bytes: a longer one is no analyst's.
        let key_name: String = name.chars().take(256).collect();
        let mut keys = vec![Key::Name(key_name)];
        keys.extend(peer.map(Key::Peer));
        if let Some(wait) = self.waiting(&keys, Instant::now()) {
            return Err(backed_off(wait));
        }
        let permit = tokio::time::timeout(LOGIN_QUEUE, Arc::clone(&self.hashing).acquire_owned())
            .await
            .map_err(|_| {
                Status::resource_exhausted(format!(
                    "the server is busy checking passwords ({} at once, login_concurrency): \
                     try again",
                    self.concurrency
                ))
            })?
            .map_err(|_| Status::unavailable("the server is shutting down"))?;
        // Failures recorded while this login queued count too: a burst of logins sent at once
        // is checked one permit at a time, not all before the first failure is counted.
        if let Some(wait) = self.waiting(&keys, Instant::now()) {
            return Err(backed_off(wait));
        }
        let checked_name = name.to_string();
        let owner = Arc::clone(&config);
        let memory = Arc::clone(&self.memory);
        let decoy = Arc::clone(&self.decoy);
        let valid = tokio::task::spawn_blocking(move || {
            let take = || {
                let mut buffers = memory.lock().unwrap_or_else(|p| p.into_inner());
                buffers.pop().unwrap_or_default()
            };
            // A permit holder always finds a buffer (or makes the one of its permit).
            let mut buffer = take();
            let valid = check(
                owner.config(),
                &decoy,
                &checked_name,
                &password,
                &mut buffer,
            );
            memory
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(buffer);
            drop(permit);
            valid
        })
        .await
        .unwrap_or(false);
        match config.config().analyst(name) {
            Some(analyst) if valid => {
                self.succeed(&keys);
                Ok(analyst.clone())
            }
            _ => {
                let wait = self.fail(&keys, Instant::now());
                match wait {
                    Some(wait) => eprintln!(
                        "{}: login refused for {} from {}; further logins wait {} s",
                        self.process,
                        log_name(name),
                        peer.map_or("an unknown address".to_string(), |p| p.to_string()),
                        wait.as_secs()
                    ),
                    None => eprintln!(
                        "{}: login refused for {} from {}",
                        self.process,
                        log_name(name),
                        peer.map_or("an unknown address".to_string(), |p| p.to_string())
                    ),
                }
                Err(Status::unauthenticated("invalid user name or password"))
            }
        }
    }
}

/// The user name and password of an `Authorization: Basic base64(user:password)` header.
pub fn parse_basic(header: &str) -> Option<(String, String)> {
    let encoded = header
        .strip_prefix("Basic ")
        .or_else(|| header.strip_prefix("basic "))?;
    // With or without padding: Go's Flight client sends unpadded base64.
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let decoded = engine.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh bearer token (or ticket): 256 random bits from the OS, in hex; `None` if the OS
/// cannot provide them.
pub fn new_token() -> Option<String> {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.try_fill_bytes(&mut bytes).ok()?;
    Some(hex(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_header_and_hashes() {
        // "alice:s3cret:x" (a password may contain ':').
        let header = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("alice:s3cret:x")
        );
        assert_eq!(
            parse_basic(&header),
            Some(("alice".to_string(), "s3cret:x".to_string()))
        );
        let unpadded = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode("bob:pw")
        );
        assert_eq!(
            parse_basic(&unpadded),
            Some(("bob".to_string(), "pw".to_string()))
        );
        assert_eq!(parse_basic("Bearer abc"), None);
        assert_eq!(parse_basic("Basic !!!"), None);

        let hash = hash_password("correct horse").unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(verify_hash(&hash, "correct horse"));
        assert!(!verify_hash(&hash, "correct horse "));
        assert!(!verify_hash("not a hash", "x"));

        let token = new_token().unwrap();
        assert_eq!(token.len(), 64);
        assert_ne!(Some(token), new_token());
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
