//! `agentplane proc ...`: the process endpoints of a node agent, from a terminal.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use agentplane_node_agent::client::Client;
use agentplane_node_agent::model::*;
use anyhow::{Context, bail};
use base64::Engine as _;
use clap::{Args, Subcommand};

use crate::printing::{Format, age, print_structured, print_table};
use crate::workspace::NodeAgentTarget;

#[derive(Args, Debug)]
pub struct ProcArgs {
    #[command(flatten)]
    target: NodeAgentTarget,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Format::Table)]
    output: Format,
    #[command(subcommand)]
    command: ProcCommand,
}

#[derive(Subcommand, Debug)]
enum ProcCommand {
    /// Start a process: `agentplane proc run --tty -- bash`.
    Run(RunArgs),
    /// List processes.
    Ls {
        /// Only processes with this tag.
        #[arg(long)]
        tag: Option<String>,
        /// Only processes with (true) or without (false) a terminal.
        #[arg(long)]
        pty: Option<bool>,
        /// Only processes that feed this session.
        #[arg(long)]
        session: Option<String>,
    },
    /// Show one process (by id or tag).
    Get { id: String },
    /// Stop a process: the stop signal to its process group, then SIGKILL after a timeout.
    Kill {
        id: String,
        /// The stop signal (default SIGHUP for a terminal, SIGTERM otherwise).
        #[arg(long, short = 's')]
        signal: Option<String>,
        /// Seconds before SIGKILL (default: the node agent's).
        #[arg(long)]
        timeout: Option<f64>,
        /// Also forget the process record.
        #[arg(long)]
        purge: bool,
    },
    /// Send a signal to a process group.
    Signal {
        id: String,
        /// A name (SIGINT, INT) or a number.
        signal: String,
        /// Send it to the terminal's foreground job instead, as a keypress would.
        #[arg(long)]
        foreground: bool,
    },
    /// Resize a terminal.
    Resize { id: String, rows: u16, cols: u16 },
    /// Write to a process's input; without DATA, stdin is sent.
    Send {
        id: String,
        data: Option<String>,
        /// Close the input afterwards.
        #[arg(long)]
        eof: bool,
        /// Do not append a newline to DATA.
        #[arg(long, short = 'n')]
        no_newline: bool,
    },
    /// Print a process's output.
    Logs {
        id: String,
        /// Keep following the output until the process exits.
        #[arg(long, short = 'f')]
        follow: bool,
        /// stdout or stderr (processes without a terminal).
        #[arg(long, value_enum)]
        stream: Option<StreamArg>,
        /// Start at this byte offset.
        #[arg(long, default_value_t = 0)]
        offset: u64,
    },
    /// Attach this terminal to a process (detach with Ctrl-]).
    Attach {
        id: String,
        /// Replay from this byte offset (default: what the node agent still has).
        #[arg(long)]
        offset: Option<u64>,
    },
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum StreamArg {
    Stdout,
    Stderr,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Run on a terminal (a PTY).
    #[arg(long, short = 't')]
    tty: bool,
    /// Terminal rows (default: this terminal's, else 24).
    #[arg(long)]
    rows: Option<u16>,
    /// Terminal columns (default: this terminal's, else 80).
    #[arg(long)]
    cols: Option<u16>,
    /// Keep stdin open (processes without a terminal).
    #[arg(long, short = 'i')]
    stdin: bool,
    #[arg(long)]
    id: Option<String>,
    #[arg(long)]
    tag: Option<String>,
    #[arg(long)]
    label: Option<String>,
    #[arg(long)]
    cwd: Option<String>,
    /// Feed this session: it sees the process start and exit, with its output, and
    /// its next message carries that output to the agent.
    #[arg(long)]
    session: Option<String>,
    /// KEY=VALUE, repeatable.
    #[arg(long = "env", short = 'e')]
    env: Vec<String>,
    /// Attach right away.
    #[arg(long, short = 'a')]
    attach: bool,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

pub async fn run(args: ProcArgs) -> anyhow::Result<i32> {
    let client = args.target.client()?;
    let format = args.output;
    match args.command {
        ProcCommand::Run(run) => {
            let env = run
                .env
                .iter()
                .map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
                .collect::<Option<BTreeMap<_, _>>>()
                .context("--env takes KEY=VALUE")?;
            let pty = run.tty.then(|| {
                let (cols, rows) = crossterm::terminal::size().unwrap_or((80, 24));
                PtySize { rows: run.rows.unwrap_or(rows), cols: run.cols.unwrap_or(cols) }
            });
            let mut command = run.command.into_iter();
            let request = CreateProcessRequest {
                id: run.id,
                command: command.next().expect("clap requires a command"),
                args: command.collect(),
                cwd: run.cwd,
                env,
                pty,
                stdin: run.stdin,
                tag: run.tag,
                label: run.label,
                annotations: Default::default(),
                session_id: run.session,
            };
            let info = client.create_process(&request).await?;
            if run.attach {
                return crate::attach::attach(&client, &info.id, Some(0)).await;
            }
            print_processes(format, &[info], true)?;
        }
        ProcCommand::Ls { tag, pty, session } => {
            let list = client.list_processes(&ListProcessesQuery { tag, pty, session }).await?;
            print_processes(format, &list, false)?;
        }
        ProcCommand::Get { id } => {
            let info = client.get_process(&id).await?;
            print_processes(format, &[info], true)?;
        }
        ProcCommand::Kill { id, signal, timeout, purge } => {
            let info = client.delete_process(&id, &DeleteProcessQuery { signal, timeout, purge }).await?;
            print_processes(format, &[info], true)?;
        }
        ProcCommand::Signal { id, signal, foreground } => {
            let target = if foreground { SignalTarget::Foreground } else { SignalTarget::Group };
            client.signal(&id, &SignalRequest { signal, target }).await?;
        }
        ProcCommand::Resize { id, rows, cols } => {
            let info = client.resize(&id, PtySize { rows, cols }).await?;
            print_processes(format, &[info], true)?;
        }
        ProcCommand::Send { id, data, eof, no_newline } => {
            let bytes = match data {
                Some(text) if no_newline => text.into_bytes(),
                Some(text) => format!("{text}\n").into_bytes(),
                None => {
                    let mut all = Vec::new();
                    tokio::task::spawn_blocking(move || std::io::stdin().read_to_end(&mut all).map(|_| all)).await??
                }
            };
            let data = base64::engine::general_purpose::STANDARD.encode(bytes);
            client.input(&id, &InputRequest { data, base64: true, eof }).await?;
        }
        ProcCommand::Logs { id, follow, stream, offset } => {
            let stream = stream.map(|s| match s {
                StreamArg::Stdout => OutputStream::Stdout,
                StreamArg::Stderr => OutputStream::Stderr,
            });
            return logs(&client, &id, stream, offset, follow).await;
        }
        ProcCommand::Attach { id, offset } => return crate::attach::attach(&client, &id, offset).await,
    }
    Ok(0)
}

pub(crate) async fn logs(
    client: &Client,
    id: &str,
    stream: Option<OutputStream>,
    mut offset: u64,
    follow: bool,
) -> anyhow::Result<i32> {
    let mut stdout = std::io::stdout();
    loop {
        let query = OutputQuery {
            offset: Some(offset),
            stream,
            limit: None,
            encoding: Some(OutputEncoding::Base64),
            wait: follow.then_some(30.0),
        };
        let chunk = client.output(id, &query).await?;
        if let Some(gap) = chunk.gap {
            eprintln!("agentplane: bytes {}..{} are no longer kept", gap.from, gap.to);
        }
        let bytes = base64::engine::general_purpose::STANDARD.decode(chunk.data)?;
        stdout.write_all(&bytes)?;
        stdout.flush()?;
        offset = chunk.next_offset;
        let drained = bytes.is_empty();
        if chunk.eof || (drained && (!follow || chunk.status == ProcessStatus::Exited)) {
            break;
        }
    }
    Ok(0)
}

fn print_processes(format: Format, list: &[ProcessInfo], single: bool) -> anyhow::Result<()> {
    match format {
        Format::Table => {
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|p| {
                    let exit = match (&p.exit_code, &p.signal) {
                        (Some(code), _) => code.to_string(),
                        (None, Some(signal)) => signal.clone(),
                        (None, None) => String::new(),
                    };
                    let command = std::iter::once(p.command.as_str())
                        .chain(p.args.iter().map(String::as_str))
                        .collect::<Vec<_>>()
                        .join(" ");
                    vec![
                        p.id.clone(),
                        p.tag.clone().unwrap_or_default(),
                        p.pid.to_string(),
                        if p.pty { "yes".into() } else { "no".into() },
                        format!("{:?}", p.status).to_lowercase(),
                        exit,
                        age(p.created_at),
                        command,
                    ]
                })
                .collect();
            print_table(&["ID", "TAG", "PID", "TTY", "STATUS", "EXIT", "AGE", "COMMAND"], &rows);
        }
        _ if single => {
            let Some(one) = list.first() else { bail!("nothing to print") };
            print_structured(format, one)?;
        }
        _ => print_structured(format, &ProcessList { processes: list.to_vec() })?,
    }
    Ok(())
}
