//! The inference-cache content fingerprint (contract §3), bit for bit the
//! Go server's (`fingerprint` package), for Rust gateways and routers.
//!
//! A prompt's token ids are cut into blocks of `block_size` tokens (the
//! partial tail is dropped). Every hash is XXH3-64 with seed 1337 ([`SEED`]):
//!
//! ```text
//! local_i = XXH3-64(LE32(t[i·B]) ‖ … ‖ LE32(t[(i+1)·B − 1]))
//! h_0     = local_0                                  (no salt, §3.2)
//! h_0     = XXH3-64(LE64(s) ‖ LE64(local_0)),  s = XXH3-64(salt bytes)   (salted, §3.4)
//! h_i     = XXH3-64(LE64(h_{i−1}) ‖ LE64(local_i))   for i ≥ 1
//! ```
//!
//! `block_hashes = [h_0 … h_{k−1}]`, `prefix_hash = h_{k−1}` (none when
//! there is no full block). The golden vectors of
//! `fingerprint/testdata/fingerprint_vectors.json`, made with libxxhash,
//! lock the scheme; this crate's tests check every one.
//!
//! ```
//! use inference_cache_fingerprint::fingerprint;
//! let fp = fingerprint(&(0..16).collect::<Vec<u32>>(), 16, None).unwrap();
//! assert_eq!(fp.prefix_hash, Some(15310707395893867146));
//! assert_eq!(fp.block_token_counts, vec![16]);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;

use xxhash_rust::xxh3::xxh3_64_with_seed;

pub mod json;

/// The XXH3 seed of every hash of the scheme (contract §3.2).
pub const SEED: u64 = 1337;

/// The largest block size in tokens (contract §3.1).
pub const MAX_BLOCK_SIZE: usize = 4096;

/// The key of a token sequence (contract §3.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// Tokens per block, as given.
    pub block_size: usize,
    /// The chained block hashes `h_0 … h_{k−1}`.
    pub block_hashes: Vec<u64>,
    /// `block_size` for every block (as many as `block_hashes`).
    pub block_token_counts: Vec<u32>,
    /// `h_{k−1}`, or `None` without a full block (no key: the server
    /// answers NO_HINT for it).
    pub prefix_hash: Option<u64>,
}

/// Why a fingerprint could not be computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The block size (the value given) is outside `1..=MAX_BLOCK_SIZE`.
    BlockSize(usize),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BlockSize(b) => write!(f, "block size {b}: must be between 1 and {MAX_BLOCK_SIZE}"),
        }
    }
}

impl std::error::Error for Error {}

/// XXH3-64 with seed 1337 of one block's token ids as little-endian u32s:
/// the block's local hash (contract §3.2).
pub fn local_hash(block: &[u32]) -> u64 {
    let mut buf = Vec::with_capacity(block.len() * 4);
    for t in block {
        buf.extend_from_slice(&t.to_le_bytes());
    }
    xxh3_64_with_seed(&buf, SEED)
}

/// XXH3-64 with seed 1337 of `LE64(parent) ‖ LE64(local)`: the hash of the
/// prefix ending in the block whose local hash is `local` (contract §3.2).
pub fn chain(parent: u64, local: u64) -> u64 {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&parent.to_le_bytes());
    b[8..].copy_from_slice(&local.to_le_bytes());
    xxh3_64_with_seed(&b, SEED)
}

/// The chain root of a cache salt: XXH3-64 with seed 1337 of its UTF-8
/// bytes, or `None` for the empty salt (the unsalted chain, contract §3.4).
pub fn salt_root(salt: &str) -> Option<u64> {
    if salt.is_empty() {
        None
    } else {
        Some(xxh3_64_with_seed(salt.as_bytes(), SEED))
    }
}

/// The key of `token_ids` with `block_size` tokens per block (contract §3),
/// in the hash domain of `cache_salt` (vLLM's per-request `cache_salt`;
/// `None` or `Some("")` is unsalted). Errors: [`Error::BlockSize`].
pub fn fingerprint(token_ids: &[u32], block_size: usize, cache_salt: Option<&str>) -> Result<Fingerprint, Error> {
    if block_size == 0 || block_size > MAX_BLOCK_SIZE {
        return Err(Error::BlockSize(block_size));
    }
    let k = token_ids.len() / block_size;
    let mut hashes = Vec::with_capacity(k);
    let mut parent = cache_salt.and_then(salt_root);
    let mut buf = Vec::with_capacity(block_size * 4);
    for block in token_ids.chunks_exact(block_size) {
        buf.clear();
        for t in block {
            buf.extend_from_slice(&t.to_le_bytes());
        }
        let local = xxh3_64_with_seed(&buf, SEED);
        let h = match parent {
            None => local,
            Some(p) => chain(p, local),
        };
        hashes.push(h);
        parent = Some(h);
    }
    Ok(Fingerprint {
        block_size,
        prefix_hash: hashes.last().copied(),
        block_token_counts: vec![block_size as u32; k],
        block_hashes: hashes,
    })
}

impl Fingerprint {
    /// The JSON object `inference-cache fingerprint` prints (contract
    /// §12.5), on one line without a newline: hashes as unsigned decimal
    /// strings, `prefix_hash` null without a full block.
    pub fn to_json(&self) -> String {
        let hashes: Vec<String> = self.block_hashes.iter().map(|h| format!("\"{h}\"")).collect();
        let counts: Vec<String> = self.block_token_counts.iter().map(|c| c.to_string()).collect();
        let prefix = match self.prefix_hash {
            Some(h) => format!("\"{h}\""),
            None => "null".to_string(),
        };
        format!(
            "{{\"block_size\":{},\"block_hashes\":[{}],\"block_token_counts\":[{}],\"prefix_hash\":{}}}",
            self.block_size,
            hashes.join(","),
            counts.join(","),
            prefix
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_size_out_of_range_is_refused_naming_it() {
        assert_eq!(fingerprint(&[1], 0, None), Err(Error::BlockSize(0)));
        assert_eq!(fingerprint(&[1], 4097, None).unwrap_err().to_string(), "block size 4097: must be between 1 and 4096");
        assert_eq!(fingerprint(&[0; 4096], 4096, None).unwrap().block_hashes.len(), 1);
    }

    #[test]
    fn empty_salt_is_the_unsalted_chain() {
        let t: Vec<u32> = (0..48).collect();
        assert_eq!(fingerprint(&t, 16, Some("")), fingerprint(&t, 16, None));
    }

    #[test]
    fn salted_chain_roots_at_the_salt_hash() {
        let t: Vec<u32> = (100..112).collect();
        let s = xxh3_64_with_seed(b"tenant-a-salt", SEED);
        let fp = fingerprint(&t, 4, Some("tenant-a-salt")).unwrap();
        let mut want = Vec::new();
        let mut parent = s;
        for b in t.chunks(4) {
            let bytes: Vec<u8> = b.iter().flat_map(|x| x.to_le_bytes()).collect();
            parent = chain(parent, xxh3_64_with_seed(&bytes, SEED));
            want.push(parent);
        }
        assert_eq!(fp.block_hashes, want);
        let plain = fingerprint(&t, 4, None).unwrap();
        assert!(fp.block_hashes.iter().zip(&plain.block_hashes).all(|(a, b)| a != b));
    }

    #[test]
    fn json_of_no_key_has_null_prefix() {
        let fp = fingerprint(&[1, 2, 3], 4, None).unwrap();
        assert_eq!(fp.to_json(), r#"{"block_size":4,"block_hashes":[],"block_token_counts":[],"prefix_hash":null}"#);
    }
}
