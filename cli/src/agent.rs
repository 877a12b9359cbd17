//! `agentplane agent ...`: the agents of a node agent, from a terminal: which are
//! installed, installing one (with a progress bar), and their modes and models.

use std::io::IsTerminal;

use agentplane_node_agent::client::Client;
use agentplane_node_agent::model::*;
use clap::{Args, Subcommand};

use crate::printing::{Format, print_structured, print_table};
use crate::workspace::NodeAgentTarget;

#[derive(Args, Debug)]
pub struct AgentArgs {
    #[command(flatten)]
    target: NodeAgentTarget,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Format::Table)]
    output: Format,
    #[command(subcommand)]
    command: AgentCommand,
}

#[derive(Subcommand, Debug)]
enum AgentCommand {
    /// List the agents: installed or not, version, credentials found, what they can do.
    Ls,
    /// Install an agent's CLI from the npm registry: `agent install claude@2.1.330`
    /// (without a version: the one this node agent pins).
    Install {
        /// AGENT or AGENT@VERSION.
        agent: String,
        /// Install again even if this version is there.
        #[arg(long)]
        reinstall: bool,
    },
    /// The agent's own modes (a session's agentMode) and the permission modes it takes.
    Modes { agent: String },
    /// The models a session may name for the agent.
    Models { agent: String },
}

pub async fn run(args: AgentArgs) -> anyhow::Result<i32> {
    let client = args.target.client()?;
    let format = args.output;
    match args.command {
        AgentCommand::Ls => {
            let agents = client.list_agents().await?;
            match format {
                Format::Table => {
                    let rows: Vec<Vec<String>> = agents
                        .iter()
                        .map(|a| {
                            vec![
                                a.id.clone(),
                                yes_no(a.installed),
                                a.version.clone().unwrap_or_default(),
                                yes_no(a.credentials_available),
                                capabilities(&a.capabilities),
                                a.path.clone().unwrap_or_default(),
                            ]
                        })
                        .collect();
                    print_table(&["AGENT", "INSTALLED", "VERSION", "CREDENTIALS", "CAPABILITIES", "PATH"], &rows);
                }
                _ => print_structured(format, &AgentList { agents })?,
            }
        }
        AgentCommand::Install { agent, reinstall } => {
            let (agent, version) = match agent.split_once('@') {
                Some((agent, version)) => (agent.to_string(), Some(version.to_string())),
                None => (agent, None),
            };
            let request = InstallRequest { version, reinstall };
            let result = install(&client, &agent, &request).await?;
            match format {
                Format::Table if result.already_installed => {
                    println!("{} {} is already installed: {}", result.agent, result.version, result.path)
                }
                Format::Table => println!(
                    "installed {} {}: {} ({})",
                    result.agent,
                    result.version,
                    result.path,
                    result.integrity.as_deref().unwrap_or("no integrity recorded")
                ),
                _ => print_structured(format, &result)?,
            }
        }
        AgentCommand::Modes { agent } => {
            let modes = client.agent_modes(&agent).await?;
            match format {
                Format::Table => {
                    let mut rows: Vec<Vec<String>> = modes
                        .agent_modes
                        .iter()
                        .map(|m| {
                            let default = modes.default_agent_mode.as_deref() == Some(m.id.as_str());
                            let description =
                                if default { format!("{} (default)", m.description) } else { m.description.clone() };
                            vec!["agentMode".into(), m.id.clone(), description]
                        })
                        .collect();
                    rows.extend(
                        modes
                            .permission_modes
                            .iter()
                            .map(|m| vec!["permissionMode".into(), permission_mode(*m).into(), String::new()]),
                    );
                    print_table(&["KIND", "MODE", "DESCRIPTION"], &rows);
                }
                _ => print_structured(format, &modes)?,
            }
        }
        AgentCommand::Models { agent } => {
            let models = client.agent_models(&agent).await?;
            match format {
                Format::Table => {
                    let rows: Vec<Vec<String>> = models
                        .models
                        .iter()
                        .map(|m| {
                            let default = models.default_model.as_deref() == Some(m.id.as_str());
                            vec![
                                m.id.clone(),
                                if default { format!("{} (default)", m.description) } else { m.description.clone() },
                            ]
                        })
                        .collect();
                    if !rows.is_empty() {
                        print_table(&["MODEL", "DESCRIPTION"], &rows);
                    }
                    println!("({}; {})", models.source, models.note);
                }
                _ => print_structured(format, &models)?,
            }
        }
    }
    Ok(0)
}

/// Installs with progress on stderr: a bar on a terminal, one line per step otherwise.
async fn install(client: &Client, agent: &str, request: &InstallRequest) -> anyhow::Result<InstallResult> {
    let tty = std::io::stderr().is_terminal();
    // npm does not say how many tarballs to expect: the bar counts the phases.
    let bar = tty.then(|| {
        let bar = indicatif::ProgressBar::new(PHASES);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {prefix} [{elapsed}] [{bar:12}] {wide_msg}")
                .expect("a valid template"),
        );
        bar.set_prefix(format!("installing {agent}"));
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        bar
    });
    let mut last_phase = None;
    let result = client
        .install_agent_with_progress(agent, request, |progress| {
            let line = progress_line(progress);
            match &bar {
                Some(bar) => {
                    bar.set_position(phase_number(progress.phase));
                    bar.set_message(line);
                }
                // Without a terminal: each phase, and each tarball while downloading.
                None if last_phase != Some(progress.phase) || progress.phase == InstallPhase::Downloading => {
                    eprintln!("{line}")
                }
                None => {}
            }
            last_phase = Some(progress.phase);
        })
        .await;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(result?)
}

const PHASES: u64 = 4;

fn phase_number(phase: InstallPhase) -> u64 {
    match phase {
        InstallPhase::Resolving => 0,
        InstallPhase::Downloading => 1,
        InstallPhase::Verifying => 3,
        InstallPhase::Done => PHASES,
    }
}

fn progress_line(p: &InstallProgress) -> String {
    let phase = match p.phase {
        InstallPhase::Resolving => "resolving",
        InstallPhase::Downloading => "downloading",
        InstallPhase::Verifying => "verifying",
        InstallPhase::Done => "done",
    };
    let mut line = format!(
        "{phase} {}@{}: {} packages resolved, {} tarballs fetched",
        p.agent, p.version, p.packages_resolved, p.tarballs_fetched
    );
    if let Some(message) = &p.message {
        line.push_str(&format!(" ({message})"));
    }
    line
}

fn yes_no(b: bool) -> String {
    if b { "yes".into() } else { "no".into() }
}

fn capabilities(c: &AgentCapabilities) -> String {
    let names = [
        (c.permissions, "permissions"),
        (c.questions, "questions"),
        (c.resume, "resume"),
        (c.streaming_deltas, "deltas"),
    ];
    let names: Vec<&str> = names.iter().filter(|(on, _)| *on).map(|(_, name)| *name).collect();
    if names.is_empty() { "-".into() } else { names.join(",") }
}

fn permission_mode(mode: PermissionMode) -> &'static str {
    match mode {
        PermissionMode::Default => "default",
        PermissionMode::Plan => "plan",
        PermissionMode::Bypass => "bypass",
    }
}
