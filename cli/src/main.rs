//! `agentplane`: run the node agent, and drive one from a terminal.

// First, so that every module below uses these instead of std's: std's print macros
// panic when stdout is closed (`agentplane describe ... | head -3`).
#[macro_use]
mod print_macros;

mod acp;
mod agent;
mod agent_session;
mod apply;
mod attach;
mod cluster;
mod completion;
mod controller;
mod convert;
mod cp;
mod diff;
mod edit;
mod env;
mod fs;
mod get;
mod kubeconfig;
mod logs;
mod node_agent;
mod printing;
mod proc;
mod resources;
mod restart;
mod serve;
mod session;
mod store;
mod suspend;
mod tar_stream;
mod ui;
mod up;
mod workspace;
mod yaml_edit;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "agentplane",
    version,
    about = "Run AI coding agents and terminals in sandboxes, declared as resources."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// `agentplane node-agent ...`, parsed alone: what every sandbox starts. Parsing it
/// with [`Cli`] built the whole tree of thirty commands first, whose code then stayed
/// in each node agent's resident memory (the pages a start touches stay mapped).
#[derive(Parser)]
#[command(
    name = "agentplane node-agent",
    bin_name = "agentplane node-agent",
    version,
    about = "Run the node agent: the per-sandbox daemon that runs processes and terminals over HTTP."
)]
struct NodeAgentCli {
    #[command(flatten)]
    args: node_agent::NodeAgentArgs,
}

impl NodeAgentCli {
    /// The command line without its `node-agent`, when that is its command (and the
    /// shell is not asking for completions, which need the whole tree).
    fn arguments() -> Option<Vec<std::ffi::OsString>> {
        let mut arguments: Vec<_> = std::env::args_os().collect();
        if arguments.get(1).is_none_or(|command| command != "node-agent") || std::env::var_os("COMPLETE").is_some() {
            return None;
        }
        arguments.remove(1);
        Some(arguments)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller and a node agent on a watched directory of YAML resources:
    /// the embedded default, no cluster needed.
    Up(up::UpArgs),
    /// An ACP agent over stdio, for editors (Zed, JetBrains, Neovim, VS Code): their
    /// sessions run on a node agent, in a sandbox, or continue a Session resource.
    Acp(acp::AcpArgs),
    /// Run the controller on a Kubernetes cluster: reconciles the Session, Process and
    /// Sandbox resources of the API server (the cluster store).
    Controller(controller::ControllerArgs),
    /// Run the cluster's egress proxy: sandbox Pods with `network: allowlist` reach the
    /// network only through it; it enforces each one's allowlist by name and swaps its
    /// credentials in.
    EgressProxy(controller::EgressProxyArgs),
    /// Run the node agent: the per-sandbox daemon that runs processes and terminals over HTTP.
    NodeAgent(node_agent::NodeAgentArgs),
    /// Start, list, stop, and attach to processes and terminals on a node agent.
    #[command(alias = "process")]
    Proc(proc::ProcArgs),
    /// The agents of a node agent: list them, install one, their modes and models.
    Agent(agent::AgentArgs),
    /// The files of a node agent: ls, cat, put, rm, mkdir, mv.
    Fs(fs::FsArgs),
    /// List resources with their status: `get processes` (of a watched directory, or
    /// of a cluster with --kubeconfig).
    Get(get::GetArgs),
    /// Show one resource in detail: metadata, spec, status, conditions (and a
    /// Process's latest output).
    Describe(get::DescribeArgs),
    /// Check YAML files and copy them into the watched directory, all or nothing.
    Apply(apply::ApplyArgs),
    /// Remove resources from the files that declare them, and wait for their cleanup.
    Delete(apply::DeleteArgs),
    /// Print a Process's output, or a Session's events (from its node agent).
    Logs(logs::LogsArgs),
    /// Attach this terminal to a Process's terminal (detach with Ctrl-]).
    Attach(logs::AttachArgs),
    /// Copy files and directories between this machine and a Process's, Session's or
    /// Sandbox's node agent: `agentplane cp ./src process/web:/work/src`.
    Cp(cp::CpArgs),
    /// Print the changes in a Session's git workspace since the commit it was cloned
    /// at, untracked files included: `agentplane diff session/NAME`.
    Diff(diff::DiffArgs),
    /// Say something to a Session: appends to spec.messages (in its file, or in the cluster).
    Send(session::SendArgs),
    /// Answer a Session's question or permission request: appends to spec.replies.
    Reply(session::ReplyArgs),
    /// Run a Process again now, with its restart back-off reset; restart a Session's
    /// agent, resuming its conversation (an idle one at once, one mid-turn after that
    /// turn, a failed one starts again; an ended one is refused). The resource's file
    /// is not touched.
    Restart(restart::RestartArgs),
    /// Suspend a managed sandbox in a folder now, as if it were idle: its node agent and
    /// processes stop, its folder and conversations stay. A message, a reply, any client
    /// of its endpoint or `agentplane resume` wakes it. The file is not touched
    /// (`spec.suspend: true` is how to hold it suspended).
    Suspend(suspend::SuspendArgs),
    /// Wake a suspended sandbox and wait until it serves again (one held by
    /// `spec.suspend: true` wakes only when that says false).
    Resume(suspend::SuspendArgs),
    /// Create, list, message, follow, answer and end agent sessions on a node agent.
    #[command(name = "session")]
    AgentSession(agent_session::SessionArgs),
    /// Print a link to the web inspector of the `agentplane up` running on --dir, with
    /// a one-time login code (valid 10 minutes) in its fragment.
    Ui(ui::UiArgs),
    /// Print shell assignments of AGENTPLANE_URL and AGENTPLANE_TOKEN for the
    /// `agentplane up` running on --dir: `eval "$(agentplane env --dir DIR)"`, then
    /// the SDK's `AgentPlane.connect()`, `curl` or `agentplane proc ls` reach it.
    Env(env::EnvArgs),
    /// Print a shell's completion script: `source <(agentplane completion bash)`, or
    /// `agentplane completion zsh > "${fpath[1]}/_agentplane"`,
    /// `agentplane completion fish > ~/.config/fish/completions/agentplane.fish`.
    Completion(completion::CompletionArgs),
    /// Start a managed sandbox from the launch plan `up` wrote: join its cgroups, bind
    /// its node agent's socket, drop to its user, exec bubblewrap (see
    /// agentplane_controller::dir::managed::launch).
    #[command(hide = true)]
    SandboxExec(SandboxExecArgs),
}

#[derive(clap::Args, Debug)]
struct SandboxExecArgs {
    /// The launch plan (JSON, written by `up` in the sandbox's folder).
    #[arg(long = "launch", value_name = "FILE")]
    launch: std::path::PathBuf,
}

fn main() {
    // `COMPLETE=bash agentplane ...`: the shell asks what may come next (see `completion`).
    clap_complete::CompleteEnv::with_factory(Cli::command).complete();
    let parsed = match NodeAgentCli::arguments() {
        Some(arguments) => NodeAgentCli::try_parse_from(arguments).map(|n| Cli { command: Command::NodeAgent(n.args) }),
        None => Cli::try_parse(),
    };
    let cli = match parsed {
        Ok(cli) => cli,
        // A mistyped command line is an error like any other (exit 1); help is not.
        Err(error) => {
            let _ = error.print();
            std::process::exit(if error.use_stderr() { 1 } else { 0 });
        }
    };
    let cli = match cli.command {
        Command::SandboxExec(args) => {
            std::process::exit(agentplane_controller::dir::managed::launch::exec(&args.launch))
        }
        // The socket handed over by a launcher is taken while this process has one
        // thread: taking it edits the environment.
        Command::NodeAgent(mut args) => {
            if let Err(error) = args.take_inherited_listener() {
                eprintln!("error: {error:#}");
                std::process::exit(1);
            }
            Cli { command: Command::NodeAgent(args) }
        }
        command => Cli { command },
    };
    // One thread for all async work: every blocking read, write and wait of the node
    // agent has a thread of its own, so the async side only moves bytes between them
    // and sockets. A single thread does that with fewer wake-ups than a pool whose
    // workers hand tasks to each other (measured: about 20% less CPU streaming a PTY).
    let runtime = match &cli.command {
        // The controller parses, writes status and drives the node agent while the node
        // agent spawns: on several cores these overlap (measured: 1,000 files converge
        // about a third faster on two cores).
        Command::Up(_) | Command::Controller(_) | Command::EgressProxy(_) => {
            tokio::runtime::Builder::new_multi_thread().enable_all().build()
        }
        _ => tokio::runtime::Builder::new_current_thread().enable_all().build(),
    }
    .expect("the tokio runtime starts");
    if matches!(cli.command, Command::Up(_) | Command::Controller(_) | Command::EgressProxy(_) | Command::NodeAgent(_))
    {
        printing::running_a_daemon();
    }
    let code = runtime.block_on(async {
        let result = match cli.command {
            Command::Up(args) => up::run(args).await.map(|()| 0),
            Command::Acp(args) => acp::run(args).await,
            Command::NodeAgent(args) => node_agent::main(args).await,
            Command::Controller(args) => controller::run(args).await.map(|()| 0),
            Command::EgressProxy(args) => controller::run_egress_proxy(args).await.map(|()| 0),
            Command::Proc(args) => proc::run(args).await,
            Command::Agent(args) => agent::run(args).await,
            Command::Fs(args) => fs::run(args).await,
            Command::Get(args) => get::get(args).await,
            Command::Describe(args) => get::describe(args).await,
            Command::Apply(args) => apply::apply(args).await,
            Command::Delete(args) => apply::delete(args).await,
            Command::Logs(args) => logs::logs(args).await,
            Command::Attach(args) => logs::attach(args).await,
            Command::Cp(args) => cp::cp(args).await,
            Command::Diff(args) => diff::diff(args).await,
            Command::Send(args) => session::send(args).await,
            Command::Reply(args) => session::reply(args).await,
            Command::Restart(args) => restart::restart(args).await,
            Command::Suspend(args) => suspend::suspend(args).await,
            Command::Resume(args) => suspend::resume(args).await,
            Command::AgentSession(args) => agent_session::run(args).await,
            Command::Ui(args) => ui::run(args).await,
            Command::Env(args) => env::run(args),
            Command::Completion(args) => completion::run(args),
            Command::SandboxExec(args) => Ok(agentplane_controller::dir::managed::launch::exec(&args.launch)),
        };
        match result {
            Ok(code) => code,
            // The reader of our output went away (`| head`): what it read is what it
            // wanted; nothing failed, so no message and a zero exit, as ripgrep does.
            Err(error) if printing::is_closed_pipe(&error) => 0,
            Err(error) => {
                eprintln!("error: {error:#}");
                1
            }
        }
    });
    // A thread blocked reading stdin (attach, send) must not hold the exit back.
    std::process::exit(code);
}
