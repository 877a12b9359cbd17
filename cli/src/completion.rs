//! `agentplane completion SHELL`: the script a shell loads to complete agentplane's
//! command lines, e.g. `source <(agentplane completion bash)`. It is dynamic: the shell
//! asks the binary itself (`COMPLETE=bash agentplane -- ...`) what may come next, so
//! verbs, flags and their values complete, and so do the kinds and the resources of
//! the folder (`attach process/<TAB>`), read from `up`'s state folder.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use agentplane_controller::dir::state::StateDir;
use agentplane_crds::{Kind, ResourceRef};
use clap::Args;
use clap_complete::Shell;
use clap_complete::engine::CompletionCandidate;

#[derive(Args, Debug)]
pub struct CompletionArgs {
    /// bash, zsh, fish (also elvish, powershell).
    #[arg(value_enum)]
    shell: Shell,
}

pub fn run(args: CompletionArgs) -> anyhow::Result<i32> {
    let shells = clap_complete::env::Shells::builtins();
    let name = args.shell.to_string();
    let shell = shells.completer(&name).ok_or_else(|| anyhow::anyhow!("no completion for {name}"))?;
    // The script calls this very binary back, wherever it was run from.
    let completer = std::env::current_exe()
        .ok()
        .and_then(|p| p.to_str().map(str::to_string))
        .unwrap_or_else(|| "agentplane".to_string());
    // Written whole first: stdout may be a closed pipe, and a failed write of ours is an
    // error like any other.
    let mut script = Vec::new();
    shell.write_registration("COMPLETE", "agentplane", "agentplane", &completer, &mut script)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&script)?;
    stdout.flush()?;
    Ok(0)
}

/// Candidates for a `KIND/NAME` argument: each kind as `kind/`, and each resource
/// `up` recorded for the folder the command line names (`--dir`, `--state-dir`, else
/// $AGENTPLANE_DIR and $AGENTPLANE_STATE_DIR, else `agentplane.d`). Nothing is asked of
/// a cluster: completing must be instant and never fail.
pub fn resource_refs() -> Vec<CompletionCandidate> {
    let mut candidates: Vec<CompletionCandidate> = Kind::ALL
        .iter()
        .map(|kind| CompletionCandidate::new(format!("{}/", kind.as_str().to_ascii_lowercase())))
        .collect();
    let words: Vec<OsString> = std::env::args_os().collect();
    let flag = |name: &str| {
        let inline = format!("{name}=");
        words.iter().enumerate().rev().find_map(|(i, w)| {
            let w = w.to_str()?;
            if w == name { words.get(i + 1).map(PathBuf::from) } else { w.strip_prefix(&inline).map(PathBuf::from) }
        })
    };
    let dir = flag("--dir")
        .or_else(|| std::env::var_os("AGENTPLANE_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("agentplane.d"));
    let state = flag("--state-dir")
        .or_else(|| std::env::var_os("AGENTPLANE_STATE_DIR").map(PathBuf::from))
        .unwrap_or_else(|| dir.join(".agentplane"));
    let mut refs: Vec<String> = StateDir::new(state)
        .load_all()
        .into_iter()
        .flatten()
        .map(|object| {
            let key = object.key();
            ResourceRef { kind: key.kind, name: key.name }.to_string()
        })
        .collect();
    refs.sort();
    refs.dedup();
    candidates.extend(refs.into_iter().map(CompletionCandidate::new));
    candidates
}
