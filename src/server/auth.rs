//! Analysts' credentials: Argon2id password hashes (PHC strings), the `Basic` handshake header,
//! and bearer tokens (256 bits from the OS's CSPRNG).

use crate::owner::{Credential, OwnerConfig};
use argon2::password_hash::phc::PasswordHash;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use argon2::Argon2;
use base64::Engine;
use rand::{RngCore, TryRngCore};
use std::sync::OnceLock;

/// An Argon2id hash (default parameters, random salt) of `password`, as a PHC string for a
/// configuration's `password_hash`.
pub fn hash_password(password: &str) -> Result<String, String> {
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| format!("cannot hash the password: {e}"))
}

/// Whether `a == b`, in time that depends only on the lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn verify_hash(hash: &str, password: &str) -> bool {
    PasswordHash::new(hash).ok().is_some_and(|parsed| {
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

/// A hash no password matches in practice, verified for unknown names so that a failed login
/// takes as long whether or not the analyst exists.
fn decoy_hash() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        hash_password(&hex(&bytes)).unwrap_or_default()
    })
}

/// Checks `name`/`password` against the configuration; the analyst's name when they match.
/// An analyst without a credential (a `dpsql --config` shell only) cannot log in.
pub fn check(config: &OwnerConfig, name: &str, password: &str) -> bool {
    match config.analyst(name).and_then(|a| a.credential.as_ref()) {
        Some(Credential::Hash(hash)) => verify_hash(hash, password),
        Some(Credential::Password(expected)) => {
            constant_time_eq(expected.as_bytes(), password.as_bytes())
        }
        None => {
            verify_hash(decoy_hash(), password);
            false
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
