//! `agentplane completion SHELL`: the shell's completion script for every verb, flag
//! and value clap knows, printed for the shell to load, e.g.
//! `source <(agentplane completion bash)`.

use std::io::Write;

use clap::Args;
use clap_complete::Shell;

#[derive(Args, Debug)]
pub struct CompletionArgs {
    /// bash, zsh, fish (also elvish, powershell).
    #[arg(value_enum)]
    shell: Shell,
}

pub fn run(args: CompletionArgs, mut command: clap::Command) -> anyhow::Result<i32> {
    // Generated whole first: clap_complete panics when it cannot write, and stdout may
    // be a closed pipe; a failed write of ours is an error like any other.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "agentplane", &mut script);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&script)?;
    stdout.flush()?;
    Ok(0)
}
