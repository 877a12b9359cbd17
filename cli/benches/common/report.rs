//! The figures every benchmark reports into `scripts/bench.sh`'s one table.
//!
//! A benchmark prints its own detail as it goes; its headline figures go through
//! [`figure`], which prints them and, when `AGENTPLANE_BENCH_REPORT` names a file (as
//! `scripts/bench.sh` sets it), appends one tab-separated line per figure there:
//! benchmark, figure, value, peer or floor measured in the same run, target, verdict.
//! At smoke size (`AGENTPLANE_BENCH_SMOKE=1`) a speed target is not judged: its verdict
//! is `smoke`, while what must hold at any size (no byte lost, nothing run twice) is.

// Each benchmark uses what it needs of this.
#![allow(dead_code)]

use std::io::Write as _;

/// How a figure stands against its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A speed or size target, judged only at full size.
    Target(bool),
    /// What must hold at any size (integrity, exactly once).
    Must(bool),
    /// Printed for reference: no target.
    Info,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Target(_) if smoke() => "smoke",
            Verdict::Target(true) | Verdict::Must(true) => "MET",
            Verdict::Target(false) => "MISSED",
            Verdict::Must(false) => "FAILED",
            Verdict::Info => "",
        }
    }
}

/// Whether this run is the gate's small, unoptimised one.
pub fn smoke() -> bool {
    std::env::var_os("AGENTPLANE_BENCH_SMOKE").is_some_and(|v| v == "1")
}

/// One headline figure of benchmark `bench`: printed, and appended to the report file.
pub fn figure(bench: &str, name: &str, value: &str, peer: &str, target: &str, verdict: Verdict) {
    let word = verdict.word();
    println!("  {name}: {value}  [peer/floor: {peer}]  [target: {target}] {word}");
    let Some(path) = std::env::var_os("AGENTPLANE_BENCH_REPORT") else { return };
    let clean = |s: &str| s.replace(['\t', '\n'], " ");
    let line = [bench, name, value, peer, target, word].map(clean).join("\t");
    let written =
        std::fs::OpenOptions::new().create(true).append(true).open(&path).and_then(|mut file| writeln!(file, "{line}"));
    if let Err(error) = written {
        eprintln!("{bench}: could not append to {}: {error}", path.to_string_lossy());
    }
}

/// A size in MiB from the environment variable `var` (a positive number), else `default`.
pub fn mib_from_env(var: &str, default: u64) -> Result<u64, String> {
    match std::env::var(var) {
        Ok(value) => value
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{var}={value:?}: expected a positive number of MiB")),
        Err(_) => Ok(default),
    }
}
