//! `agentplane`: run the node agent, and drive one from a terminal.

mod attach;
mod node_agent;
mod printing;
mod proc;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "agentplane", version, about = "Run AI coding agents and terminals in sandboxes, declared as resources.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the node agent: the per-sandbox daemon that runs processes and terminals over HTTP.
    NodeAgent(node_agent::NodeAgentArgs),
    /// Start, list, stop, and attach to processes and terminals on a node agent.
    #[command(alias = "process")]
    Proc(proc::ProcArgs),
}

fn main() {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        // The node agent's hot paths (PTY reads, waits) run on their own threads; two
        // workers keep the async side responsive without idle threads per core.
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the tokio runtime starts");
    let code = runtime.block_on(async {
        let result = match cli.command {
            Command::NodeAgent(args) => node_agent::run(args).await.map(|()| 0),
            Command::Proc(args) => proc::run(args).await,
        };
        match result {
            Ok(code) => code,
            Err(error) => {
                eprintln!("error: {error:#}");
                1
            }
        }
    });
    // A thread blocked reading stdin (attach, send) must not hold the exit back.
    std::process::exit(code);
}
