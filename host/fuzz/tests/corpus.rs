//! Every fuzz target on its committed corpus (`host/fuzz/corpus/<name>/`,
//! grown by `just fuzz`), on its seeds, and on seeded mutations of both:
//! the short fuzzing budget CI gives each decoder on stable Rust. A failing
//! input is written to `target/tmp/fuzz-failures/<name>-<n>` and named.
//!
//! `FERRY_FUZZ_MUTATIONS` sets the mutations per target (default 3000);
//! `FERRY_FUZZ_WRITE_SEEDS=1` writes the seeds into the corpus directories
//! (how the committed corpora were started).

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};

use ferry_fuzz::{TARGETS, Target, seeds};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn corpus_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(name)
}

fn corpus(name: &str) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(corpus_dir(name)) else { return Vec::new() };
    let mut files: Vec<(String, Vec<u8>)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_file())
        .filter_map(|e| Some((e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).ok()?)))
        .collect();
    files.sort();
    files
}

/// Runs `target` on `input`; on a panic, saves the input and says where.
fn run(name: &str, target: Target, input: &[u8], what: &str, failures: &mut Vec<String>) {
    if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| target(input))) {
        let why = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
        let _ = std::fs::create_dir_all(&dir);
        let file = dir.join(format!("{name}-{}", failures.len()));
        let _ = std::fs::write(&file, input);
        failures.push(format!("{name}: {what} failed ({why}); input saved as {}", file.display()));
    }
}

/// One mutation of `input`, as a fuzzer's simplest moves: flip, set,
/// insert or delete bytes, or splice in part of another input.
fn mutate(rng: &mut StdRng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let at = if out.is_empty() { 0 } else { rng.random_range(0..out.len()) };
        match rng.random_range(0..6) {
            0 if !out.is_empty() => out[at] ^= 1 << rng.random_range(0..8),
            1 if !out.is_empty() => out[at] = [0, 0xff, 0x7f, 0x80, b'"', b'{', b'\n', 0xc3][rng.random_range(0..8)],
            2 => out.insert(at, rng.random()),
            3 if !out.is_empty() => {
                let end = (at + rng.random_range(1..16)).min(out.len());
                out.drain(at..end);
            }
            4 if !other.is_empty() => {
                let from = rng.random_range(0..other.len());
                let end = (from + rng.random_range(1..64)).min(other.len());
                out.splice(at..at, other[from..end].iter().copied());
            }
            _ => out.truncate(at),
        }
    }
    out
}

#[test]
fn every_decoder_survives_its_corpus_and_mutations_of_it() {
    let mutations: usize = std::env::var("FERRY_FUZZ_MUTATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    let write_seeds = std::env::var_os("FERRY_FUZZ_WRITE_SEEDS").is_some();
    // The targets' own assertions report through the panic hook; keep the
    // output to the summary below.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures = Vec::new();
    let mut ran = 0usize;
    for (i, (name, target)) in TARGETS.iter().enumerate() {
        let seeds = seeds(name);
        assert!(!seeds.is_empty(), "{name} has no seeds");
        if write_seeds {
            std::fs::create_dir_all(corpus_dir(name)).expect("corpus dir");
            for (n, s) in seeds.iter().enumerate() {
                std::fs::write(corpus_dir(name).join(format!("seed-{n}")), s).expect("seed written");
            }
        }
        let mut inputs: Vec<Vec<u8>> = seeds.clone();
        for (file, bytes) in corpus(name) {
            run(name, *target, &bytes, &format!("corpus file {file}"), &mut failures);
            inputs.push(bytes);
        }
        for (n, s) in seeds.iter().enumerate() {
            run(name, *target, s, &format!("seed {n}"), &mut failures);
        }
        let mut rng = StdRng::seed_from_u64(0x5eed_0000 + i as u64);
        for m in 0..mutations {
            let input = &inputs[rng.random_range(0..inputs.len())];
            let other = &inputs[rng.random_range(0..inputs.len())];
            let mutated = mutate(&mut rng, input, other);
            run(name, *target, &mutated, &format!("mutation {m}"), &mut failures);
            ran += 1;
        }
    }
    std::panic::set_hook(hook);
    eprintln!("fuzz corpus replay: {} targets, {ran} mutations", TARGETS.len());
    assert!(failures.is_empty(), "{} inputs failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn every_target_has_a_committed_corpus() {
    for (name, _) in TARGETS {
        assert!(
            !corpus(name).is_empty(),
            "host/fuzz/corpus/{name}/ is empty: run FERRY_FUZZ_WRITE_SEEDS=1 cargo test -p ferry-fuzz"
        );
    }
}
