//! Link-time choices for the `agentplane` binary.
//!
//! On Linux with glibc, relative relocations are packed (`DT_RELR`, glibc 2.36+, GNU
//! ld 2.38+ or lld 15+): a position-independent binary of this size carries some
//! 58,000 of them, 1.4 MB of `.rela.dyn` that every process start read in full before
//! `main` (half the page faults of a node agent's start, and 1.4 MB of its idle RSS).
//! Packed, they are a few KB, and the binary stays position-independent (ASLR kept).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
