//! `agentplane-model-server`: the scripted model server on a fixed address, for trying
//! the real agent CLIs by hand without a provider account. It prints where it listens
//! and the environment each agent needs, then serves until Ctrl-C or SIGTERM.
//!
//! A binary of this test-tool crate rather than a command of `agentplane`, so the
//! release binary carries none of it: `cargo run -p agentplane-model-server`.

use std::net::SocketAddr;
use std::process::ExitCode;

use agentplane_model_server::ModelServer;
use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Serve the scripted model server the tests use, for trying the real agent CLIs
/// without a provider account: it speaks Anthropic Messages, OpenAI Responses and
/// Chat Completions, Gemini and Amp's API, and answers by a script (`[[run:CMD]]`
/// in a message asks for a shell tool call; otherwise it says how many messages it saw).
#[derive(Parser, Debug)]
#[command(name = "agentplane-model-server", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, env = "AGENTPLANE_MODEL_SERVER_LISTEN", default_value = "127.0.0.1:8089")]
    listen: SocketAddr,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let server = match ModelServer::bind(args.listen).await {
        Ok(server) => server,
        Err(error) => {
            eprintln!("agentplane-model-server: {error}");
            return ExitCode::FAILURE;
        }
    };
    let url = server.url();
    // The first line says it listens: whoever started it may wait for that line.
    println!("scripted model server on {url}");
    println!("  claude:   ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY=any");
    println!("  codex, opencode, pi: OPENAI_BASE_URL={url}/v1 OPENAI_API_KEY=any");
    println!("  gemini:   GOOGLE_GEMINI_BASE_URL={url} GEMINI_API_KEY=any");
    println!("  amp:      AMP_URL={url} AMP_API_KEY=any");
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let mut terminate = match signal(SignalKind::terminate()) {
        Ok(terminate) => terminate,
        Err(error) => {
            eprintln!("agentplane-model-server: listening for SIGTERM: {error}");
            return ExitCode::FAILURE;
        }
    };
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        stop.cancel();
    });
    server.wait(shutdown).await;
    ExitCode::SUCCESS
}
