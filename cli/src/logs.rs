//! `agentplane logs` and `agentplane attach` for a Process resource, and `logs` for a
//! Session (its universal events): the store gives the uid, the uid the node-agent
//! id, and the store the node agent (a running `agentplane up`'s, or in a cluster the
//! one the resource's Sandbox names).

use agentplane_controller::dir::parse::{Key, Kind, Object};
use agentplane_controller::process::node_process_id;
use agentplane_controller::session::node_session_id;
use agentplane_node_agent::client::{Client, SessionStreamItem};
use agentplane_node_agent::model::{OutputStream, SessionEventsQuery};
use agentplane_node_agent::universal::{EventData, UniversalEvent};
use anyhow::bail;
use clap::Args;
use futures_util::StreamExt;

use crate::proc::StreamArg;
use crate::store::{Store, StoreArgs};
use crate::workspace::{parse_one, ref_name};

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// process/NAME (or NAME): its output; session/NAME: its events.
    process: String,
    /// Keep following until the process exits (the session ends).
    #[arg(short, long)]
    follow: bool,
    /// For a session: `text` (one line an event, text deltas left out) or `json`
    /// (the universal events as they are, one a line).
    #[arg(short, long, value_enum, default_value = "text")]
    output: EventFormat,
    /// stdout or stderr (processes without a terminal).
    #[arg(long, value_enum)]
    stream: Option<StreamArg>,
    /// The namespace of the resource (default: the kubeconfig context's, else `default`).
    #[arg(short, long)]
    namespace: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Args, Debug)]
pub struct AttachArgs {
    /// process/NAME (or NAME) of a process with `tty` (or `stdin`) in its spec.
    process: String,
    /// The namespace of the resource (default: the kubeconfig context's, else `default`).
    #[arg(short, long)]
    namespace: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
}

/// A resource of the store with its node agent, and its uid there.
struct Located {
    key: Key,
    object: Object,
    client: Client,
    uid: String,
}

async fn locate(store: &Store, namespace: Option<&str>, kind: Kind, name: &str) -> anyhow::Result<Located> {
    let key = Key { kind, namespace: store.namespace(namespace), name: name.to_string() };
    let object = store.require(&key).await?;
    let Some(uid) = object.meta().uid.clone() else { bail!("{} has no uid in its record", ref_name(&key)) };
    let client = store.node_agent(&object).await?;
    Ok(Located { key, object, client, uid })
}

/// The node agent and the id of a Process resource's process there.
async fn locate_process(
    args: &StoreArgs,
    namespace: Option<&str>,
    word: &str,
) -> anyhow::Result<(Client, String, agentplane_crds::Process)> {
    let store = Store::open(args).await?;
    let Located { key, object, client, uid } =
        locate(&store, namespace, Kind::Process, &parse_one(&[word.to_string()], Kind::Process)?).await?;
    let Object::Process(process) = object else { bail!("{key} is not a Process") };
    let id = node_process_id(&uid);
    match client.get_process(&id).await {
        Ok(_) => Ok((client, id, process)),
        Err(e) if e.problem_code() == Some("process_not_found") => {
            let phase = process.status.as_ref().and_then(|s| s.phase).map_or("Pending".into(), |p| format!("{p:?}"));
            bail!(
                "{} has not run on the node agent (phase {phase}): see `agentplane describe process {}`",
                ref_name(&key),
                key.name
            )
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EventFormat {
    Text,
    Json,
}

pub async fn logs(args: LogsArgs) -> anyhow::Result<i32> {
    if let Some((kind, name)) = args.process.split_once('/')
        && Kind::from_user(kind) == Some(Kind::Session)
    {
        return session_logs(&args, name).await;
    }
    let (client, id, _) = locate_process(&args.store, args.namespace.as_deref(), &args.process).await?;
    let stream = args.stream.map(|s| match s {
        StreamArg::Stdout => OutputStream::Stdout,
        StreamArg::Stderr => OutputStream::Stderr,
    });
    crate::proc::logs(&client, &id, stream, 0, args.follow).await
}

pub async fn attach(args: AttachArgs) -> anyhow::Result<i32> {
    let (client, id, process) = locate_process(&args.store, args.namespace.as_deref(), &args.process).await?;
    if process.spec.tty.is_none() && !process.spec.stdin {
        let name = process.metadata.name.unwrap_or_default();
        bail!(
            "process/{name} has neither a terminal nor stdin (spec.tty, spec.stdin): follow its output with `agentplane logs -f process/{name}`"
        );
    }
    crate::attach::attach(&client, &id, None).await
}

/// A session's universal events: those so far, then (`-f`) the rest as they come.
async fn session_logs(args: &LogsArgs, name: &str) -> anyhow::Result<i32> {
    let store = Store::open(&args.store).await?;
    let Located { key, client, uid, .. } = locate(&store, args.namespace.as_deref(), Kind::Session, name).await?;
    let id = node_session_id(&uid);
    let mut last = 0;
    loop {
        let page = match client.session_events(&id, &SessionEventsQuery { offset: Some(last), limit: Some(1000) }).await
        {
            Ok(page) => page,
            Err(e) if e.problem_code() == Some("session_not_found") => {
                bail!(
                    "{} has no session on the node agent yet: see `agentplane describe session {name}`",
                    ref_name(&key)
                )
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(gap) = &page.gap {
            eprintln!("(events {} to {} are lost)", gap.from, gap.to.saturating_sub(1));
        }
        for event in &page.events {
            if !printed(print_event(event, args.output, name))? {
                return Ok(0);
            }
            last = event.sequence;
        }
        if !page.has_more {
            break;
        }
    }
    if !args.follow {
        return Ok(0);
    }
    let mut events = client.session_events_sse(&id, None, Some(last)).await?;
    while let Some(item) = events.next().await {
        match item? {
            SessionStreamItem::Event(event) => {
                if !printed(print_event(&event, args.output, name))? {
                    return Ok(0);
                }
            }
            SessionStreamItem::Gap(gap) => eprintln!("(events {} to {} are lost)", gap.from, gap.to.saturating_sub(1)),
        }
    }
    Ok(0)
}

/// Whether to go on: a reader that went away (`| head`) ends the listing quietly.
fn printed(result: anyhow::Result<()>) -> anyhow::Result<bool> {
    match result {
        Ok(()) => Ok(true),
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) => {
            Ok(false)
        }
        Err(e)
            if e.downcast_ref::<serde_json::Error>()
                .is_some_and(|e| e.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe)) =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

fn print_event(event: &UniversalEvent, format: EventFormat, session: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if format == EventFormat::Json {
        serde_json::to_writer(&mut out, event)?;
        writeln!(out)?;
        return Ok(());
    }
    let time = event.time.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
    let line = match &event.data {
        EventData::ItemDelta { .. } => return Ok(()),
        // A message's text comes with its completion; only a tool call says something at its start.
        EventData::ItemStarted { item } if item.tool.is_none() && item.text.is_none() => return Ok(()),
        EventData::ItemStarted { item } | EventData::ItemCompleted { item } => {
            let verb = if matches!(event.data, EventData::ItemStarted { .. }) { "started" } else { "completed" };
            let kind =
                serde_json::to_value(item.kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
            let who = item.role.and_then(|r| serde_json::to_value(r).ok()).and_then(|v| v.as_str().map(str::to_string));
            let what = item
                .text
                .clone()
                .or_else(|| item.output.clone())
                .or_else(|| {
                    item.tool
                        .as_ref()
                        .map(|t| format!("{t} {}", item.input.as_ref().map(|i| i.to_string()).unwrap_or_default()))
                })
                .unwrap_or_default();
            match who {
                Some(who) if verb == "completed" => format!("{kind} {who}: {what}"),
                _ => format!("{kind} {verb}: {what}"),
            }
        }
        EventData::PermissionRequested(request) => format!(
            "permission requested {}: {} {} (answer: agentplane reply session/{session} {} --decision once|always|reject)",
            request.id, request.tool, request.input, request.id
        ),
        EventData::QuestionRequested(request) => {
            let questions: Vec<String> = request
                .questions
                .iter()
                .map(|q| {
                    if q.options.is_empty() {
                        q.question.clone()
                    } else {
                        format!("{} [{}]", q.question, q.options.join(" / "))
                    }
                })
                .collect();
            format!(
                "question {}: {} (answer: agentplane reply session/{session} {} --answer ...)",
                request.id,
                questions.join("; "),
                request.id
            )
        }
        other => {
            let value = serde_json::to_value(other)?;
            let kind = value["type"].as_str().unwrap_or_default().to_string();
            match &value["data"] {
                serde_json::Value::Null => kind,
                data => format!("{kind} {data}"),
            }
        }
    };
    writeln!(out, "{:>5} {time} {line}", event.sequence)?;
    Ok(())
}
