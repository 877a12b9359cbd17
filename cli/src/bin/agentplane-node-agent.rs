//! `agentplane-node-agent`: the node agent alone, as `agentplane node-agent` serves it
//! (the same flags, from the same file, `serve.rs`), without the rest of `agentplane`.
//! It is what `up` starts in each managed sandbox: its code does not lie among the
//! controller's, the Kubernetes client's and the CLI's, so an idle sandbox maps a
//! few MiB less of it. `agentplane node-agent` stays for what this one leaves out:
//! registering with a cluster (`--register`), the inspector's address, and its tools
//! (`convert`, `openapi`).

#[path = "../serve.rs"]
mod serve;

use clap::Parser;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(
    name = "agentplane-node-agent",
    version,
    about = "Run the node agent alone: the per-sandbox daemon that runs processes and terminals over HTTP."
)]
struct Cli {
    #[command(flatten)]
    serve: serve::ServeArgs,
}

/// Nothing around serving: the node agent alone.
struct Alone;

impl serve::Around for Alone {
    type Prepared = ();

    async fn prepare(&mut self, _: bool) -> anyhow::Result<()> {
        Ok(())
    }

    fn started(
        &mut self,
        (): (),
        _: &agentplane_node_agent::Server,
        _: Option<String>,
        _: &CancellationToken,
    ) -> anyhow::Result<()> {
        Ok(())
    }

    async fn stopped(self) {}
}

fn main() {
    let mut cli = Cli::parse();
    // Taken while this process has one thread: taking it edits the environment.
    if let Err(error) = cli.serve.take_inherited_listener() {
        eprintln!("error: {error:#}");
        std::process::exit(1);
    }
    // One thread for all async work, as `agentplane node-agent` (see its `main`).
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("the tokio runtime starts");
    let code = match runtime.block_on(serve::run(cli.serve, Alone)) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("error: {error:#}");
            1
        }
    };
    std::process::exit(code);
}
