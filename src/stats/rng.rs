//! Where noise randomness comes from.
//!
//! Every noise draw reads a ChaCha20 stream (RFC 8439), a cryptographically secure generator.
//! By default its key comes from the operating system ([`secure_rng`]), fresh for every
//! accumulator, so no two queries share randomness. [`seeded_rng`] is the **non-private**
//! reproduction mode behind `SET dp.seed = N`: the key is derived from the seed, the aggregate
//! call and the group key, so the same query gives the same noise however rows are partitioned,
//! and anyone who knows the seed can subtract the noise.

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use sha2::{Digest, Sha256};

/// The generator every sampler in this crate draws from.
pub type NoiseRng = ChaCha20Rng;

/// A ChaCha20 stream keyed from the operating system's entropy source.
pub fn secure_rng() -> Result<NoiseRng, String> {
    ChaCha20Rng::try_from_os_rng()
        .map_err(|e| format!("the operating system's random source failed: {e}"))
}

/// NON-PRIVATE: the reproducible base stream of one aggregate call.
///
/// The ChaCha20 key is SHA-256 over (seed, stream); `stream` names the aggregate call so two
/// calls in one query get independent noise. Each group then reads its own ChaCha20 stream
/// (the cipher's 64-bit stream id, [`group_stream`]) selected by its key digest, so the draw
/// does not depend on the order in which groups arrive. Use it for tests and reproduction only.
pub fn seeded_rng(seed: u64, stream: &str) -> NoiseRng {
    let mut hasher = Sha256::new();
    hasher.update(b"datafusion-dp/seeded-noise/v2");
    hasher.update(seed.to_le_bytes());
    hasher.update((stream.len() as u64).to_le_bytes());
    hasher.update(stream.as_bytes());
    ChaCha20Rng::from_seed(hasher.finalize().into())
}

/// NON-PRIVATE: the stream of one group (identified by its key digest) of a seeded base.
pub fn group_stream(base: &NoiseRng, group_key: u64) -> NoiseRng {
    let mut rng = base.clone();
    rng.set_stream(group_key);
    rng.set_word_pos(0);
    rng
}

/// A stable 64-bit digest of a group key given as the display strings of its values
/// (`None` for NULL). Stable across processes and partitionings, unlike `std`'s `Hash`.
pub fn group_key_digest<'a>(values: impl IntoIterator<Item = Option<&'a str>>) -> u64 {
    let mut hasher = Sha256::new();
    for value in values {
        match value {
            None => hasher.update([0u8]),
            Some(text) => {
                hasher.update([1u8]);
                hasher.update((text.len() as u64).to_le_bytes());
                hasher.update(text.as_bytes());
            }
        }
    }
    let digest = hasher.finalize();
    u64::from_le_bytes(digest[..8].try_into().expect("SHA-256 has 32 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngCore;

    #[test]
    fn seeded_streams_are_reproducible_and_distinct() {
        let draw = |seed, stream, key| group_stream(&seeded_rng(seed, stream), key).next_u64();
        let a = draw(1, "x", 5);
        assert_eq!(a, draw(1, "x", 5));
        assert_ne!(a, draw(2, "x", 5));
        assert_ne!(a, draw(1, "y", 5));
        assert_ne!(a, draw(1, "x", 6));
        // A group's stream does not depend on what was drawn from the base before.
        let mut base = seeded_rng(1, "x");
        let _ = group_stream(&base, 9).next_u64();
        base.next_u64();
        assert_eq!(group_stream(&base, 5).next_u64(), a);
    }

    #[test]
    fn group_key_digest_separates_null_and_boundaries() {
        let k = |v: &[Option<&str>]| group_key_digest(v.iter().copied());
        assert_ne!(k(&[None]), k(&[Some("")]));
        assert_ne!(k(&[Some("ab"), Some("c")]), k(&[Some("a"), Some("bc")]));
        assert_eq!(k(&[Some("north")]), k(&[Some("north")]));
    }

    #[test]
    fn secure_streams_differ() {
        let a = secure_rng().unwrap().next_u64();
        let b = secure_rng().unwrap().next_u64();
        assert_ne!(a, b);
    }
}
