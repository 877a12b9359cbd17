//! `agentplane logs` and `agentplane attach` for a Process resource: its record gives
//! the uid, the uid the node-agent id, and the running `agentplane up` the node agent.

use agentplane_controller::dir::parse::{Key, Kind, Object};
use agentplane_controller::process::node_process_id;
use agentplane_node_agent::client::Client;
use agentplane_node_agent::model::OutputStream;
use anyhow::bail;
use clap::Args;

use crate::proc::StreamArg;
use crate::workspace::{DirArgs, Workspace, parse_one, ref_name};

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// process/NAME (or NAME).
    process: String,
    /// Keep following the output until the process exits.
    #[arg(short, long)]
    follow: bool,
    /// stdout or stderr (processes without a terminal).
    #[arg(long, value_enum)]
    stream: Option<StreamArg>,
    /// The namespace of the resource.
    #[arg(short, long, default_value = "default")]
    namespace: String,
    #[command(flatten)]
    dir: DirArgs,
}

#[derive(Args, Debug)]
pub struct AttachArgs {
    /// process/NAME (or NAME) of a process with `tty` (or `stdin`) in its spec.
    process: String,
    /// The namespace of the resource.
    #[arg(short, long, default_value = "default")]
    namespace: String,
    #[command(flatten)]
    dir: DirArgs,
}

/// The node agent and the id of a Process resource's process there.
async fn locate(dir: &DirArgs, namespace: &str, word: &str) -> anyhow::Result<(Client, String, agentplane_crds::Process)> {
    let workspace = Workspace::new(dir);
    let key = Key { kind: Kind::Process, namespace: namespace.to_string(), name: parse_one(&[word.to_string()], Kind::Process)? };
    let Object::Process(process) = workspace.require(&key)? else { bail!("{key} is not a Process") };
    let Some(uid) = process.metadata.uid.clone() else { bail!("{} has no uid in its record", ref_name(&key)) };
    let client = workspace.node_agent()?;
    let id = node_process_id(&uid);
    match client.get_process(&id).await {
        Ok(_) => Ok((client, id, process)),
        Err(e) if e.problem_code() == Some("process_not_found") => {
            let phase = process.status.as_ref().and_then(|s| s.phase).map_or("Pending".into(), |p| format!("{p:?}"));
            bail!("{} has not run on the node agent (phase {phase}): see `agentplane describe process {}`", ref_name(&key), key.name)
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn logs(args: LogsArgs) -> anyhow::Result<i32> {
    let (client, id, _) = locate(&args.dir, &args.namespace, &args.process).await?;
    let stream = args.stream.map(|s| match s {
        StreamArg::Stdout => OutputStream::Stdout,
        StreamArg::Stderr => OutputStream::Stderr,
    });
    crate::proc::logs(&client, &id, stream, 0, args.follow).await
}

pub async fn attach(args: AttachArgs) -> anyhow::Result<i32> {
    let (client, id, process) = locate(&args.dir, &args.namespace, &args.process).await?;
    if process.spec.tty.is_none() && !process.spec.stdin {
        let name = process.metadata.name.unwrap_or_default();
        bail!("process/{name} has neither a terminal nor stdin (spec.tty, spec.stdin): follow its output with `agentplane logs -f process/{name}`");
    }
    crate::attach::attach(&client, &id, None).await
}
