//! `inference-cache-fingerprint --block-size N [--cache-salt S] < ids.json`
//!
//! Reads a JSON array of token ids on standard input and prints the JSON
//! object `inference-cache fingerprint` prints (contract §12.5). Bad input
//! (a token id that is negative, not an integer or over 2^32−1; a block
//! size outside 1..=4096; anything but a JSON array; an unknown flag)
//! exits 1 with a message on standard error.

use std::io::Read;
use std::process::ExitCode;

use inference_cache_fingerprint::{fingerprint, json, MAX_BLOCK_SIZE};

const USAGE: &str = "usage: inference-cache-fingerprint [--block-size N] [--cache-salt S] < token_ids.json";

fn run() -> Result<String, String> {
    let mut block_size: usize = 16;
    let mut salt = String::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next()).ok_or_else(|| format!("{flag}: needs a value\n{USAGE}"));
        match flag.as_str() {
            "--block-size" => {
                let v = value()?;
                block_size = match v.parse::<usize>() {
                    Ok(b) if (1..=MAX_BLOCK_SIZE).contains(&b) => b,
                    _ => return Err(format!("--block-size {v}: must be between 1 and {MAX_BLOCK_SIZE}")),
                };
            }
            "--cache-salt" => salt = value()?,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown flag {other:?}\n{USAGE}")),
        }
    }
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).map_err(|e| format!("stdin: {e}"))?;
    let ids = json::token_ids(&input)?;
    let fp = fingerprint(&ids, block_size, Some(&salt)).map_err(|e| e.to_string())?;
    Ok(fp.to_json())
}

fn main() -> ExitCode {
    match run() {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}
