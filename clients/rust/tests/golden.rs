//! Every vector of fingerprint/testdata/fingerprint_vectors.json (made with
//! libxxhash, the reference C XXH3) through this crate.

use std::path::PathBuf;

use inference_cache_fingerprint::json::{self, Value};
use inference_cache_fingerprint::{chain, fingerprint, local_hash, SEED};

fn golden() -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fingerprint/testdata/fingerprint_vectors.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc = json::parse(&text).expect("golden file is JSON");
    assert_eq!(doc.get("seed"), Some(&Value::Number(SEED.to_string())));
    match doc.get("vectors") {
        Some(Value::Array(v)) if !v.is_empty() => v.clone(),
        _ => panic!("golden file holds no vectors"),
    }
}

fn str_of(v: &Value) -> &str {
    match v {
        Value::String(s) => s,
        Value::Number(n) => n,
        _ => panic!("not a string or number: {v:?}"),
    }
}

fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    match v.get(key) {
        Some(Value::Array(a)) => a,
        other => panic!("{key}: {other:?}"),
    }
}

fn u64s(v: &Value, key: &str) -> Vec<u64> {
    list(v, key).iter().map(|x| str_of(x).parse().unwrap()).collect()
}

#[test]
fn fingerprint_matches_every_golden_vector() {
    let vectors = golden();
    for v in &vectors {
        let name = str_of(v.get("name").unwrap());
        let bs: usize = str_of(v.get("block_size").unwrap()).parse().unwrap();
        let ids: Vec<u32> = list(v, "token_ids").iter().map(|x| str_of(x).parse().unwrap()).collect();
        let fp = fingerprint(&ids, bs, None).unwrap();
        assert_eq!(fp.block_hashes, u64s(v, "block_hashes"), "{name}: block hashes");
        let counts: Vec<u32> = list(v, "block_token_counts").iter().map(|x| str_of(x).parse().unwrap()).collect();
        assert_eq!(fp.block_token_counts, counts, "{name}: token counts");
        let want_prefix = match v.get("prefix_hash") {
            Some(Value::Null) => None,
            Some(p) => Some(str_of(p).parse::<u64>().unwrap()),
            None => panic!("{name}: no prefix_hash"),
        };
        assert_eq!(fp.prefix_hash, want_prefix, "{name}: prefix hash");
        let hex: Vec<String> = list(v, "block_hashes_hex").iter().map(|x| str_of(x).to_string()).collect();
        let got_hex: Vec<String> = fp.block_hashes.iter().map(|h| format!("{h:016x}")).collect();
        assert_eq!(got_hex, hex, "{name}: hex");
        // The pieces: local hashes, and the chain rebuilt from them.
        let locals: Vec<u64> = ids.chunks_exact(bs).map(local_hash).collect();
        assert_eq!(locals, u64s(v, "local_block_hashes"), "{name}: local hashes");
        let mut rebuilt = Vec::new();
        for (i, l) in locals.iter().enumerate() {
            rebuilt.push(if i == 0 { *l } else { chain(rebuilt[i - 1], *l) });
        }
        assert_eq!(rebuilt, fp.block_hashes, "{name}: chain of the local hashes");
    }
    assert!(vectors.len() >= 10, "only {} vectors", vectors.len());
}

#[test]
fn a_prefix_of_the_tokens_is_a_prefix_of_the_chain() {
    let ids: Vec<u32> = (0..1000u32).map(|i| i.wrapping_mul(2654435761)).collect();
    let whole = fingerprint(&ids, 16, Some("s")).unwrap();
    for cut in [0, 15, 16, 17, 500, 999] {
        let part = fingerprint(&ids[..cut], 16, Some("s")).unwrap();
        assert_eq!(part.block_hashes[..], whole.block_hashes[..cut / 16], "cut {cut}");
    }
}
