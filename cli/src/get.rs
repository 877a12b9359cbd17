//! `agentplane get` and `agentplane describe`: the resources of a watched directory as
//! the state directory records them, so both work whether or not `agentplane up` runs,
//! or of a cluster (`--kubeconfig`), printed alike. The table columns are the CRDs'
//! printer columns, as kubectl would show them, and a file that was not taken is shown
//! under the table: a person looking at `get` sees a broken file without reading logs.
//!
//! When no `agentplane up` holds the directory, its records only say what was true
//! when one last ran: the verbs say so first, and mark every phase that claims
//! something is alive now (`Running?`), so an old record is never read as the present.

use std::collections::{BTreeMap, BTreeSet};

use agentplane_controller::conditions::{self, READY, VALID};
use agentplane_controller::dir::state::Liveness;
use agentplane_controller::process::node_process_id;
use agentplane_crds::{Key, Kind, Object, ResourceRef};
use agentplane_node_agent::ProblemCode;
use agentplane_node_agent::client::Client;
use agentplane_node_agent::model::{OutputEncoding, OutputQuery, OutputStream};
use anyhow::bail;
use base64::Engine as _;
use clap::{Args, ValueEnum};
use futures_util::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};

use crate::cluster::event_time;
use crate::printing::{
    Format, age, age_of, clock, column_widths, flags, format_row, print_structured, print_table, shell_quote,
};
use crate::store::{Change, Events, Selection, Store, StoreArgs};
use crate::workspace::{not_found, parse_kind, parse_one};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GetFormat {
    /// More columns.
    Wide,
    Yaml,
    Json,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    /// processes (proc), sessions (sess) or sandboxes (sbx); or KIND/NAME.
    kind: String,
    /// Only this resource.
    name: Option<String>,
    /// The namespace (default: the kubeconfig context's, else `default`).
    #[arg(short, long, conflicts_with = "all_namespaces")]
    namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    /// Output format: a table by default.
    #[arg(short, long, value_enum)]
    output: Option<GetFormat>,
    /// After the list, print each resource again whenever it changes (Ctrl-C to stop).
    #[arg(short, long)]
    watch: bool,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Args, Debug)]
pub struct DescribeArgs {
    /// process, session or sandbox, and its name: `process web` or `process/web`.
    #[arg(required = true, num_args = 1..=2)]
    resource: Vec<String>,
    /// The namespace of the resource (default: the kubeconfig context's, else `default`).
    #[arg(short, long)]
    namespace: Option<String>,
    /// Lines of a Process's output shown (from its node agent).
    #[arg(long, default_value_t = 20)]
    tail: usize,
    #[command(flatten)]
    store: StoreArgs,
}

pub async fn get(args: GetArgs) -> anyhow::Result<i32> {
    let store = Store::open(&args.store).await?;
    let (kind, name) = match args.kind.contains('/') {
        true if args.name.is_none() => {
            let ResourceRef { kind, name } = args.kind.parse()?;
            (kind, Some(name))
        }
        true => bail!("give KIND/NAME or KIND NAME, not both"),
        false => (parse_kind(&args.kind)?, args.name.clone()),
    };
    let selection = Selection {
        kind,
        namespace: store.namespace(args.namespace.as_deref()),
        all_namespaces: args.all_namespaces,
        name,
    };
    let objects = match (store.select(&selection).await, &selection.name) {
        (Err(e), Some(name)) => return Err(placed(e, &selection_key(&selection, name), &args.store)),
        (result, _) => result?,
    };
    let stale = staleness(&store, &args.store);
    if let Some(line) = &stale {
        eprintln!("{line}");
    }
    let columns = Columns {
        kind,
        wide: args.output == Some(GetFormat::Wide),
        namespaces: args.all_namespaces,
        stale: std::cell::Cell::new(stale.is_some()),
        stopped_cleanly: std::cell::Cell::new(stopped_cleanly(&store)),
    };
    let mut shown_problems = BTreeSet::new();
    match args.output {
        None | Some(GetFormat::Wide) => {
            if args.watch {
                // Printed by `watch`, in the columns it keeps.
            } else if objects.is_empty() {
                match selection.scope() {
                    Some(ns) => eprintln!("No resources found in {ns} namespace."),
                    None => eprintln!("No resources found."),
                }
            } else {
                let rows: Vec<Vec<String>> = objects.iter().map(|o| columns.row(o)).collect();
                print_table(&columns.headers(), &rows);
            }
        }
        Some(format) => {
            let format = if format == GetFormat::Json { Format::Json } else { Format::Yaml };
            if selection.name.is_some() && !args.watch {
                print_structured(format, &objects[0].to_json())?;
            } else if !args.watch {
                let items: Vec<serde_json::Value> = objects.iter().map(Object::to_json).collect();
                print_structured(format, &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}))?;
            } else {
                for object in &objects {
                    print_watched(format, object)?;
                }
            }
        }
    }
    print_problems(&store, &mut shown_problems);
    if args.watch {
        watch(&store, &args.store, &selection, args.output, &columns, objects, shown_problems).await?;
    }
    Ok(0)
}

/// The flags that name the store a verb was run on, quoted for a shell: what a hint
/// must carry to find the same store when pasted.
pub fn store_flags(args: &StoreArgs) -> String {
    match &args.kubeconfig {
        Some(kubeconfig) => flags(&[
            ("--kubeconfig", Some(kubeconfig.as_os_str())),
            ("--context", args.context.as_deref().map(std::ffi::OsStr::new)),
        ]),
        None => flags(&[
            ("--dir", Some(args.dir.dir.as_os_str())),
            ("--state-dir", args.dir.state_dir.as_deref().map(std::path::Path::as_os_str)),
        ]),
    }
}

/// ` -n NAMESPACE` for a hint about a resource outside the store's default namespace.
pub fn namespace_flag(store: &Store, namespace: &str) -> String {
    if namespace == store.namespace(None) { String::new() } else { format!(" -n {}", shell_quote(namespace)) }
}

/// Where a verb looked, for an error: the folder (absolute, as the user may have given
/// it relative) or the cluster.
pub fn store_place(args: &StoreArgs) -> String {
    match &args.kubeconfig {
        Some(kubeconfig) => match &args.context {
            Some(context) => format!("in the cluster of {} (context {context})", kubeconfig.display()),
            None => format!("in the cluster of {}", kubeconfig.display()),
        },
        None => {
            let dir = std::path::absolute(&args.dir.dir).unwrap_or_else(|_| args.dir.dir.clone());
            match &args.dir.state_dir {
                Some(state) => format!("in the folder {} (status in {})", dir.display(), state.display()),
                None => format!("in the folder {}", dir.display()),
            }
        }
    }
}

/// The resource, or a "not found" that says where it was looked for.
pub async fn require(store: &Store, args: &StoreArgs, key: &Key) -> anyhow::Result<Object> {
    store.require(key).await.map_err(|e| placed(e, key, args))
}

/// A "not found" of `key`, with the place it was looked in; any other error as it is.
pub fn placed(error: anyhow::Error, key: &Key, args: &StoreArgs) -> anyhow::Error {
    let missing = not_found(key).to_string();
    if error.to_string() == missing { anyhow::anyhow!("{missing}, {}", store_place(args)) } else { error }
}

/// The line to read before a status that no `agentplane up` keeps current (directory
/// store): as of when, since when nothing updates it, and how to refresh it. None while
/// an `up` holds the directory, and for a cluster, whose controller is not ours to see.
fn staleness(store: &Store, args: &StoreArgs) -> Option<String> {
    let Store::Dir(workspace) = store else { return None };
    let Liveness::NotRunning { last_run, last_write } = workspace.state.liveness() else { return None };
    let refresh = format!("run `agentplane up{}` to refresh it", store_flags(args));
    let as_of = |at: time::OffsetDateTime| format!("status as of {}, when agentplane up last ran", clock(at));
    Some(match (last_run, last_write) {
        (None, None) => format!("no agentplane up has run on {} yet: {refresh}", args.dir.dir.display()),
        (None, Some(written)) => format!("{} (not running now): {refresh}", as_of(written)),
        (Some(run), written) => {
            let since = match run.stopped_at {
                Some(stopped) => format!("not running since {}, {} ago", clock(stopped), age(stopped)),
                None => format!(
                    "not running since an unknown time: it did not stop cleanly; it started {}, {} ago",
                    clock(run.started_at),
                    age(run.started_at)
                ),
            };
            // What was written while it ran; a record older than the run is as of the run.
            let at = written.unwrap_or(run.started_at).max(run.started_at);
            let at = run.stopped_at.map_or(at, |stopped| at.min(stopped));
            format!("{} ({since}): {refresh}", as_of(at))
        }
    })
}

/// No `up` holds the directory, and the last one stopped cleanly: its node agent
/// stopped every process on the way out.
fn stopped_cleanly(store: &Store) -> bool {
    let Store::Dir(workspace) = store else { return false };
    matches!(
        workspace.state.liveness(),
        Liveness::NotRunning { last_run: Some(run), .. } if run.stopped_at.is_some()
    )
}

/// What a Process's row shows of its phase and reason, and whether its pid is real:
/// after a clean stop of `up`, one it left alive was stopped with it.
fn process_phase(
    recorded: Option<String>,
    conditions: &[Condition],
    stopped_cleanly: bool,
) -> (Option<String>, String, bool) {
    let alive = recorded.as_deref().is_some_and(|p| !FINAL_PHASES.contains(&p));
    if stopped_cleanly && alive {
        return (Some("Stopped".into()), "UpStopped".into(), false);
    }
    let reason = reason(recorded.as_deref(), conditions);
    (recorded, reason, true)
}

fn selection_key(selection: &Selection, name: &str) -> Key {
    Key { kind: selection.kind, namespace: selection.namespace.clone(), name: name.to_string() }
}

fn print_watched(format: Format, object: &Object) -> anyhow::Result<()> {
    if matches!(format, Format::Yaml) {
        println!("---");
    }
    print_structured(format, &object.to_json())
}

/// The store's problems not shown yet (a file that was not taken), to stderr, where
/// they do not mix with a table read by a program.
fn print_problems(store: &Store, shown: &mut BTreeSet<String>) {
    for line in store.problems() {
        if shown.insert(line.clone()) {
            eprintln!("error: {line}");
        }
    }
}

/// kubectl's `-w`: the header once, then a row (or an object) per change, only when
/// what it shows changed.
async fn watch(
    store: &Store,
    store_args: &StoreArgs,
    selection: &Selection,
    output: Option<GetFormat>,
    columns: &Columns,
    initial: Vec<Object>,
    mut shown_problems: BTreeSet<String>,
) -> anyhow::Result<()> {
    let mut changes = store.changes(selection)?;
    let table = matches!(output, None | Some(GetFormat::Wide));
    let headers = columns.headers();
    let rows: Vec<Vec<String>> = initial.iter().map(|o| columns.row(o)).collect();
    let mut widths = watch_widths(columns.kind, &headers, &rows);
    if table {
        println!("{}", format_row(&widths, &headers));
        for row in &rows {
            println!("{}", format_row(&widths, row));
        }
    }
    // What was shown of each resource: its row in a table (a change it does not show,
    // such as a heartbeat, prints nothing), else the whole object.
    // AGE is left out: it moves with the clock, not with the resource.
    let age_column = headers.iter().position(|h| *h == "AGE");
    let shown_of = |object: &Object| match table {
        true => {
            let mut row = columns.row(object);
            if let Some(cell) = age_column.and_then(|i| row.get_mut(i)) {
                cell.clear();
            }
            serde_json::json!(row)
        }
        false => object.to_json(),
    };
    let mut last: BTreeMap<Key, serde_json::Value> = initial.iter().map(|o| (o.key(), shown_of(o))).collect();
    let mut show = |object: &Object, last: &BTreeMap<Key, serde_json::Value>| -> anyhow::Result<serde_json::Value> {
        let shown = shown_of(object);
        if last.get(&object.key()) != Some(&shown) {
            match output {
                None | Some(GetFormat::Wide) => {
                    let row = columns.row(object);
                    // A later cell wider than its column widens it for the rows after.
                    for (width, cell) in widths.iter_mut().zip(&row) {
                        *width = (*width).max(cell.chars().count());
                    }
                    println!("{}", format_row(&widths, &row));
                }
                Some(GetFormat::Json) => print_watched(Format::Json, object)?,
                Some(GetFormat::Yaml) => print_watched(Format::Yaml, object)?,
            }
        }
        Ok(shown)
    };
    // Nothing wakes a reader when `up` starts or stops (a lock has no event, and
    // `kill -9` writes nothing): it is asked again now and then.
    let mut liveness = tokio::time::interval(std::time::Duration::from_secs(1));
    liveness.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let change = tokio::select! {
            change = changes.next() => match change {
                Some(change) => change,
                None => break,
            },
            _ = liveness.tick() => {
                let stale = staleness(store, store_args);
                if stale.is_some() == columns.stale.get() {
                    continue;
                }
                match &stale {
                    Some(line) => eprintln!("{line}"),
                    None => eprintln!("agentplane up is running: the status is live again"),
                }
                columns.stale.set(stale.is_some());
                columns.stopped_cleanly.set(stopped_cleanly(store));
                Change::All(store.select(selection).await.unwrap_or_default())
            }
        };
        match change {
            Change::All(objects) => {
                last = objects.iter().map(|o| Ok((o.key(), show(o, &last)?))).collect::<anyhow::Result<_>>()?;
            }
            Change::Applied(object) => {
                let shown = show(&object, &last)?;
                last.insert(object.key(), shown);
            }
            Change::Deleted(key) => {
                last.remove(&key);
            }
        }
        print_problems(store, &mut shown_problems);
    }
    Ok(())
}

/// The columns of `get -w`, fixed at the start: each as wide as its widest cell so far,
/// and at least as wide as what the column usually holds, so that the rows printed
/// later line up under the header.
fn watch_widths(kind: Kind, headers: &[&str], rows: &[Vec<String>]) -> Vec<usize> {
    let mut widths = column_widths(headers, rows);
    for (width, header) in widths.iter_mut().zip(headers) {
        let usual = match *header {
            "NAME" | "NAMESPACE" => 16,
            // `AwaitingInput?`, `Running (invalid spec)`.
            "PHASE" if kind == Kind::Session => 14,
            "PHASE" => 9,
            "REASON" => 16,
            "COMMAND" => 24,
            "AGENT" | "MODEL" | "EXIT" | "RESTARTS" | "DELIVERED" | "READY" => 8,
            "AGE" | "PID" => 5,
            _ => 8,
        };
        *width = (*width).max(usual);
    }
    widths
}

/// The table of one kind.
struct Columns {
    kind: Kind,
    wide: bool,
    namespaces: bool,
    /// No `up` keeps the records current: phases that claim life are marked.
    stale: std::cell::Cell<bool>,
    /// The last `up` stopped cleanly, and stopped every process as it went: a Process
    /// it left Running is Stopped, whatever its record says.
    stopped_cleanly: std::cell::Cell<bool>,
}

impl Columns {
    fn headers(&self) -> Vec<&'static str> {
        let mut headers = if self.namespaces { vec!["NAMESPACE"] } else { vec![] };
        headers.extend(match self.kind {
            Kind::Process => vec!["NAME", "PHASE", "REASON", "COMMAND", "RESTARTS", "EXIT", "AGE"],
            Kind::Session => vec!["NAME", "PHASE", "REASON", "AGENT", "MODEL", "DELIVERED", "AGE"],
            Kind::Sandbox => {
                vec!["NAME", "PHASE", "READY", "REASON", "ISOLATION", "NETWORK", "CLAIMED BY", "ENDPOINT", "AGE"]
            }
            Kind::SandboxTemplate => vec!["NAME", "ISOLATION", "NETWORK", "TTL", "AGE"],
            Kind::SandboxWarmPool => vec!["NAME", "TEMPLATE", "REPLICAS", "READY", "AGE"],
        });
        if self.wide {
            headers.extend(match self.kind {
                Kind::Process => vec!["SANDBOX", "PID", "SOURCE", "READY"],
                Kind::Session => vec!["SANDBOX", "AGENT SESSION", "SOURCE"],
                Kind::Sandbox => vec!["VERSION", "RESTARTS", "DENIED", "SOURCE"],
                Kind::SandboxTemplate => vec!["SOURCE"],
                Kind::SandboxWarmPool => vec!["SANDBOXES", "SOURCE"],
            });
        }
        headers
    }

    fn row(&self, object: &Object) -> Vec<String> {
        let meta = object.meta();
        let mut row = if self.namespaces { vec![meta.namespace.clone().unwrap_or_default()] } else { vec![] };
        row.push(meta.name.clone().unwrap_or_default());
        let age = meta.creation_timestamp.as_ref().map(age_of).unwrap_or_default();
        let source = source(meta).unwrap_or_default();
        match object {
            Object::Process(p) => {
                let status = p.status.clone().unwrap_or_default();
                let (phase, reason, pid_is_real) = process_phase(
                    status.phase.map(|p| format!("{p:?}")),
                    &status.conditions,
                    self.stopped_cleanly.get(),
                );
                let exit = match (status.exit_code, &status.signal) {
                    (Some(code), _) => code.to_string(),
                    (None, Some(signal)) => signal.clone(),
                    (None, None) => String::new(),
                };
                row.extend([
                    self.phase_cell(meta, phase, &status.conditions),
                    reason,
                    command_line(&p.spec.command, &p.spec.args),
                    status.restarts.to_string(),
                    exit,
                    age,
                ]);
                if self.wide {
                    let ready =
                        conditions::get(&status.conditions, READY).map(|c| c.message.clone()).unwrap_or_default();
                    row.extend([
                        p.placed_sandbox().to_string(),
                        status.pid.filter(|_| pid_is_real).map(|p| p.to_string()).unwrap_or_default(),
                        source,
                        ready,
                    ]);
                }
            }
            Object::Session(s) => {
                let status = s.status.clone().unwrap_or_default();
                let phase = status.phase.map(|p| format!("{p:?}"));
                row.extend([
                    self.phase_cell(meta, phase.clone(), &status.conditions),
                    reason(phase.as_deref(), &status.conditions),
                    enum_word(&s.spec.agent),
                    s.spec.model.clone().unwrap_or_default(),
                    format!("{}/{}", status.delivered_messages, s.spec.messages.len()),
                    age,
                ]);
                if self.wide {
                    row.extend([
                        s.placed_sandbox().to_string(),
                        status.agent_session_id.clone().unwrap_or_default(),
                        source,
                    ]);
                }
            }
            Object::SandboxTemplate(t) => {
                let sandbox = &t.spec.sandbox;
                row.extend([
                    sandbox.isolation.map_or_else(|| "bubblewrap".to_string(), |i| enum_word(&i)),
                    enum_word(&sandbox.network),
                    format!("{}s", t.spec.ttl_seconds_after_finished),
                    age,
                ]);
                if self.wide {
                    row.push(source);
                }
            }
            Object::SandboxWarmPool(p) => {
                let status = p.status.clone().unwrap_or_default();
                row.extend([
                    p.spec.template.clone(),
                    format!("{}/{}", status.replicas, p.spec.replicas),
                    status.ready_replicas.to_string(),
                    age,
                ]);
                if self.wide {
                    row.extend([status.sandboxes.join(","), source]);
                }
            }
            Object::Sandbox(s) => {
                let status = s.status.clone().unwrap_or_default();
                let ready = conditions::get(&status.conditions, READY).map(|c| c.status.clone());
                let local = meta.name.as_deref() == Some(agentplane_crds::LOCAL_SANDBOX);
                let (phase, isolation, network) = match (&s.spec.endpoint, status.phase) {
                    (Some(_), _) if local => ("Embedded".to_string(), "none".to_string(), "host".to_string()),
                    (Some(_), _) => ("External".to_string(), "external".to_string(), String::new()),
                    (None, phase) => (
                        phase.map(|p| enum_word(&p)).unwrap_or_else(|| "Pending".into()),
                        status.isolation.clone().unwrap_or_default(),
                        enum_word(&s.spec.network),
                    ),
                };
                row.extend([
                    phase,
                    self.phase_cell(meta, ready, &status.conditions),
                    reason(None, &status.conditions),
                    isolation,
                    network,
                    status.claimed_by.clone().unwrap_or_default(),
                    s.endpoint().unwrap_or_default().to_string(),
                    age,
                ]);
                if self.wide {
                    row.extend([
                        status.node_agent_version.clone().unwrap_or_default(),
                        status.restarts.to_string(),
                        status.denied_connections.to_string(),
                        source,
                    ]);
                }
            }
        }
        row
    }

    /// The phase, or `Terminating` while being cleaned up; a spec that was not taken
    /// says so. Without a running `up`, a phase that claims something is alive or on its
    /// way is only what was true then: `Running?`.
    fn phase_cell(&self, meta: &ObjectMeta, phase: Option<String>, conditions: &[Condition]) -> String {
        let mut cell = if meta.deletion_timestamp.is_some() {
            "Terminating".to_string()
        } else {
            phase.unwrap_or_else(|| "Pending".into())
        };
        if self.stale.get() && !FINAL_PHASES.contains(&cell.as_str()) {
            cell.push('?');
        }
        if conditions::get(conditions, VALID).is_some_and(|c| c.status == "False") {
            cell.push_str(" (invalid spec)");
        }
        cell
    }
}

/// Phases that stay true after `up` stops: nothing is alive in them.
const FINAL_PHASES: [&str; 4] = ["Stopped", "Succeeded", "Failed", "Ended"];

/// Why a resource is not ready or not running, in one word, as `describe` shows it in
/// its conditions (see `conditions::explaining`, which the inspector shares); empty
/// when all is well.
fn reason(phase: Option<&str>, conditions: &[Condition]) -> String {
    conditions::explaining(phase, conditions).map(|c| c.reason.clone()).unwrap_or_default()
}

fn command_line(command: &str, args: &[String]) -> String {
    const MAX: usize = 40;
    let words: Vec<String> = std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .map(|w| if w.is_empty() || w.contains(char::is_whitespace) { format!("{w:?}") } else { w.to_string() })
        .collect();
    let line = words.join(" ");
    if line.chars().count() > MAX { format!("{}...", line.chars().take(MAX - 3).collect::<String>()) } else { line }
}

/// An enum as the YAML spells it (`claude`, `Always`).
fn enum_word<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

fn source(meta: &ObjectMeta) -> Option<String> {
    meta.annotations.as_ref()?.get(agentplane_controller::annotations::SOURCE).cloned()
}

pub async fn describe(args: DescribeArgs) -> anyhow::Result<i32> {
    let store = Store::open(&args.store).await?;
    let words = &args.resource;
    let (kind, name) = match words.as_slice() {
        [one] => {
            let ResourceRef { kind, name } =
                one.parse().map_err(|_| anyhow::anyhow!("{one:?}: expected KIND NAME or KIND/NAME"))?;
            (kind, name)
        }
        _ => {
            let kind = parse_kind(&words[0])?;
            (kind, parse_one(&words[1..], kind)?)
        }
    };
    let key = Key { kind, namespace: store.namespace(args.namespace.as_deref()), name };
    let object = require(&store, &args.store, &key).await?;
    let stale = staleness(&store, &args.store);
    // Hints are meant to be pasted: they carry the flags this was run with.
    let hint_flags = format!("{}{}", namespace_flag(&store, &key.namespace), store_flags(&args.store));
    let phase_word = |phase: String| match &stale {
        Some(_) if !FINAL_PHASES.contains(&phase.as_str()) => format!("{phase}? (as of when agentplane up last ran)"),
        _ => phase,
    };
    let mut out = Describe::default();
    if let Some(line) = &stale {
        out.text.push_str(&format!("Note: {line}\n"));
    }
    let meta = object.meta();
    out.field(0, "Name", meta.name.clone().unwrap_or_default());
    out.field(0, "Namespace", key.namespace.clone());
    out.field(0, "Kind", object.kind().to_string());
    out.field(0, "UID", meta.uid.clone().unwrap_or_default());
    out.field(0, "Generation", meta.generation.map(|g| g.to_string()).unwrap_or_default());
    if let Some(created) = &meta.creation_timestamp {
        out.field(0, "Created", format!("{} ({} ago)", created.0, age_of(created)));
    }
    if let Some(deleting) = &meta.deletion_timestamp {
        out.field(0, "Deleting", format!("since {} (the cleanup is not done yet)", deleting.0));
    }
    match source(meta).as_deref().and_then(|s| s.rsplit_once('#')) {
        Some((file, document)) => out.field(0, "Source", format!("{file} (document {document})")),
        None => out.field(0, "Source", "<none>".into()),
    }
    out.map(0, "Labels", meta.labels.as_ref());
    let annotations = meta.annotations.clone().map(|mut a| {
        a.remove(agentplane_controller::annotations::SOURCE);
        a
    });
    out.map(0, "Annotations", annotations.as_ref());
    let mut conditions = Vec::new();
    match &object {
        Object::SandboxTemplate(t) => {
            out.section("Spec");
            out.field(1, "TTL after finished", format!("{}s", t.spec.ttl_seconds_after_finished));
            out.field(1, "Sandbox", serde_json::to_string(&t.spec.sandbox).unwrap_or_default());
        }
        Object::SandboxWarmPool(p) => {
            out.section("Spec");
            out.field(1, "Template", p.spec.template.clone());
            out.field(1, "Replicas", p.spec.replicas.to_string());
            if let Some(status) = &p.status {
                out.section("Status");
                out.field(1, "Unclaimed", status.replicas.to_string());
                out.field(1, "Ready", status.ready_replicas.to_string());
                for name in &status.sandboxes {
                    out.field(2, "Sandbox", name.clone());
                }
                conditions = status.conditions.clone();
            }
        }
        Object::Process(p) => {
            let spec = &p.spec;
            out.section("Spec");
            out.field(1, "Command", command_line(&spec.command, &spec.args));
            out.field(
                1,
                "Sandbox",
                spec.sandbox_template.as_ref().map_or_else(|| spec.sandbox.clone(), |t| format!("from template {t}")),
            );
            out.optional(1, "Working dir", spec.cwd.clone());
            out.field(
                1,
                "Terminal",
                spec.tty.map(|t| format!("{}x{}", t.cols, t.rows)).unwrap_or_else(|| "no (pipes)".into()),
            );
            out.field(1, "Stdin", if spec.stdin || spec.tty.is_some() { "open".into() } else { "closed".into() });
            let env: Vec<&str> = spec.env.iter().map(|e| e.name.as_str()).collect();
            if !env.is_empty() {
                out.field(1, "Env", env.join(", "));
            }
            if !spec.env_from.is_empty() {
                let from: Vec<String> = spec
                    .env_from
                    .iter()
                    .filter_map(|e| {
                        e.file.clone().or_else(|| e.secret_ref.as_ref().map(|s| format!("secret {}", s.name)))
                    })
                    .collect();
                out.field(1, "Env from", from.join(", "));
            }
            out.optional(1, "Tag", spec.tag.clone());
            out.optional(1, "Session", spec.session_ref.clone());
            out.field(1, "Desired state", enum_word(&spec.desired_state));
            out.field(1, "Restart policy", enum_word(&spec.restart_policy));
            out.optional(1, "Stop signal", spec.stop_signal.clone());
            out.optional(1, "Stop timeout", spec.stop_timeout_seconds.map(|s| format!("{s}s")));
            if let Some(status) = &p.status {
                out.section("Status");
                let clean = stopped_cleanly(&store);
                let (phase, _, pid_is_real) =
                    process_phase(status.phase.map(|p| format!("{p:?}")), &status.conditions, clean);
                let phase = match phase {
                    Some(p) if !pid_is_real => Some(format!("{p} (agentplane up stopped it when it stopped)")),
                    other => other.map(phase_word),
                };
                out.optional(1, "Phase", phase);
                out.optional(1, "Observed generation", status.observed_generation.map(|g| g.to_string()));
                out.optional(1, "PID", status.pid.filter(|_| pid_is_real).map(|p| p.to_string()));
                out.optional(1, "Exit code", status.exit_code.map(|c| c.to_string()));
                out.optional(1, "Signal", status.signal.clone());
                out.optional(1, "Started", status.started_at.as_ref().map(|t| format!("{} ({} ago)", t.0, age_of(t))));
                out.optional(1, "Exited", status.exited_at.as_ref().map(|t| format!("{} ({} ago)", t.0, age_of(t))));
                out.field(1, "Restarts", status.restarts.to_string());
                out.optional(1, "Connect URL", status.connect_url.clone());
                conditions = status.conditions.clone();
            }
        }
        Object::Session(s) => {
            let spec = &s.spec;
            out.section("Spec");
            out.field(1, "Agent", enum_word(&spec.agent));
            out.optional(1, "Agent version", spec.agent_version.clone());
            out.optional(1, "Agent mode", spec.agent_mode.clone());
            out.field(1, "Permission mode", enum_word(&spec.permission_mode));
            out.optional(1, "Model", spec.model.clone());
            out.optional(1, "Variant", spec.variant.clone());
            out.field(
                1,
                "Sandbox",
                spec.sandbox_template.as_ref().map_or_else(|| spec.sandbox.clone(), |t| format!("from template {t}")),
            );
            out.optional(1, "Working dir", spec.working_dir.clone());
            if let Some(git) = spec.workspace.as_ref().and_then(|w| w.git.as_ref()) {
                let at = git.git_ref.as_deref().map(|r| format!(" at {r}")).unwrap_or_default();
                out.field(1, "Workspace", format!("{}{at}", git.url));
            }
            let env: Vec<&str> = spec.env.iter().map(|e| e.name.as_str()).collect();
            if !env.is_empty() {
                out.field(1, "Env", env.join(", "));
            }
            out.field(1, "Messages", spec.messages.len().to_string());
            for (i, message) in spec.messages.iter().enumerate() {
                out.field(2, &format!("{}", i + 1), one_line(message, 70));
            }
            out.field(1, "Replies", spec.replies.len().to_string());
            if spec.ended {
                out.field(1, "Ended", "yes".into());
            }
            if let Some(status) = &s.status {
                out.section("Status");
                out.optional(1, "Phase", status.phase.map(|p| phase_word(format!("{p:?}"))));
                out.optional(1, "Observed generation", status.observed_generation.map(|g| g.to_string()));
                out.optional(1, "Agent session", status.agent_session_id.clone());
                out.field(1, "Delivered", format!("{} of {}", status.delivered_messages, spec.messages.len()));
                out.optional(1, "Tokens", status.usage.map(|u| tokens_line(&u)));
                if let Some(workspace) = &status.workspace {
                    out.optional(1, "Workspace", workspace.path.clone());
                    out.optional(2, "Commit", workspace.commit.clone());
                    for file in &workspace.changed_files {
                        let from = file.from.as_deref().map(|f| format!(" (from {f})")).unwrap_or_default();
                        out.field(2, "Changed", format!("{} {}{from}", enum_word(&file.status), file.path));
                    }
                    if workspace.changed_files_truncated {
                        out.field(2, "Changed", "... more (agentplane diff shows them all)".into());
                    }
                }
                for question in &status.pending_questions {
                    let texts: Vec<&str> = question.questions.iter().map(|q| q.question.as_str()).collect();
                    out.field(
                        1,
                        "Question",
                        format!(
                            "{}: {} (agentplane reply session/{} {} --answer ...{hint_flags})",
                            question.id,
                            texts.join(" / "),
                            shell_quote(&key.name),
                            shell_quote(&question.id)
                        ),
                    );
                }
                for permission in &status.pending_permissions {
                    let summary = permission.summary.clone().unwrap_or_default();
                    out.field(
                        1,
                        "Permission",
                        format!(
                            "{}: {} {summary} (agentplane reply session/{} {} --decision once{hint_flags})",
                            permission.id,
                            permission.tool,
                            shell_quote(&key.name),
                            shell_quote(&permission.id)
                        ),
                    );
                }
                out.optional(1, "Events URL", status.events_url.clone());
                conditions = status.conditions.clone();
            }
        }
        Object::Sandbox(s) => {
            out.section("Spec");
            out.field(
                1,
                "Endpoint",
                s.spec.endpoint.clone().unwrap_or_else(|| "(none: managed by the controller)".into()),
            );
            out.optional(1, "Token secret", s.spec.token_secret_ref.as_ref().map(|r| format!("{}/{}", r.name, r.key)));
            for agent in &s.spec.agents {
                out.field(
                    1,
                    "Agent",
                    format!("{} {}", enum_word(&agent.agent), agent.version.clone().unwrap_or_default()),
                );
            }
            if s.spec.is_managed() {
                out.field(1, "Isolation", s.spec.isolation.map_or("bubblewrap (default)".into(), |i| enum_word(&i)));
                out.field(1, "Network", enum_word(&s.spec.network));
                for allowed in &s.spec.allow {
                    out.field(1, "Allow", allowed.clone());
                }
                out.optional(1, "Workspace", s.spec.workspace.clone());
                for bind in &s.spec.binds {
                    let inside = bind.path.clone().unwrap_or_else(|| bind.host_path.clone());
                    let how = if bind.writable { "writable" } else { "read-only" };
                    out.field(1, "Bind", format!("{} -> {inside} ({how})", bind.host_path));
                }
            }
            if let Some(status) = &s.status {
                out.section("Status");
                out.optional(1, "Phase", status.phase.map(|p| enum_word(&p)));
                out.optional(1, "Runs on", status.runs_on.clone());
                if s.spec.is_managed() {
                    out.optional(1, "Endpoint", status.endpoint.clone());
                }
                out.optional(1, "Started", status.started_at.as_ref().map(|t| format!("{} ({} ago)", t.0, age_of(t))));
                if status.restarts > 0 {
                    out.field(1, "Restarts", status.restarts.to_string());
                }
                if let Some(uid) = status.host_uid {
                    out.field(1, "User", format!("uid 1000 in a user namespace of its own; host uid {uid}"));
                }
                out.optional(1, "Seccomp", status.seccomp.clone());
                for limit in &status.applied_limits {
                    out.field(1, "Limit", limit.clone());
                }
                if status.isolation.as_deref() == Some("bubblewrap")
                    && let Ok(bytes) = agentplane_controller::dir::managed::cgroup::tmp_bytes(s.spec.limits.as_ref())
                {
                    out.field(1, "Tmp", format!("{} MiB (a tmpfs of that size)", bytes >> 20));
                }
                if s.spec.network == agentplane_crds::NetworkMode::Allowlist {
                    out.field(1, "Denied connections", status.denied_connections.to_string());
                    for denied in &status.last_denied {
                        out.field(2, "Denied", denied.clone());
                    }
                }
                out.optional(1, "Claimed by", status.claimed_by.clone());
                out.optional(1, "Node agent version", status.node_agent_version.clone());
                out.optional(
                    1,
                    "Last heartbeat",
                    status.last_heartbeat.as_ref().map(|t| format!("{} ({} ago)", t.0, age_of(t))),
                );
                for (agent, version) in &status.installed_agents {
                    out.field(1, "Installed", format!("{} {version}", enum_word(agent)));
                }
                conditions = status.conditions.clone();
            }
        }
    }
    print!("{}", out.text);
    println!("Conditions:");
    let rows: Vec<Vec<String>> = conditions
        .iter()
        .map(|c| {
            vec![
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone(),
                c.message.clone(),
                age_of(&c.last_transition_time),
            ]
        })
        .collect();
    print_indented_table(&["TYPE", "STATUS", "REASON", "MESSAGE", "AGE"], &rows);
    if let Object::Process(p) = &object {
        print_output_tail(store.output_source(&object).await, p, args.tail).await;
    }
    print_events(store.events(&object).await);
    Ok(0)
}

/// A table under a section of `describe`, or `<none>`.
fn print_indented_table(headers: &[&str], rows: &[Vec<String>]) {
    if rows.is_empty() {
        println!("  <none>");
        return;
    }
    let widths = column_widths(headers, rows);
    println!("  {}", format_row(&widths, headers));
    for row in rows {
        println!("  {}", format_row(&widths, row));
    }
}

/// What happened to the resource, as its reporters recorded it (cluster store).
fn print_events(events: Events) {
    let events = match events {
        Events::NotKept => return,
        Events::Unavailable(why) => {
            println!("Events: ({why})");
            return;
        }
        Events::Listed(events) => events,
    };
    println!("Events:");
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            let from = e
                .reporting_component
                .clone()
                .filter(|c| !c.is_empty())
                .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()));
            vec![
                e.type_.clone().unwrap_or_default(),
                e.reason.clone().unwrap_or_default(),
                event_time(e).as_ref().map(age_of).unwrap_or_default(),
                from.unwrap_or_default(),
                one_line(&e.message.clone().unwrap_or_default(), 100),
            ]
        })
        .collect();
    print_indented_table(&["TYPE", "REASON", "AGE", "FROM", "MESSAGE"], &rows);
}

/// The last lines a Process printed, when its node agent can tell.
async fn print_output_tail(source: Result<Client, String>, process: &agentplane_crds::Process, lines: usize) {
    let (client, uid) = match (source, process.metadata.uid.as_deref()) {
        (Ok(client), Some(uid)) => (client, uid),
        (Err(why), _) => return println!("Output: ({why})"),
        (Ok(_), None) => return println!("Output: (no uid: not started)"),
    };
    let id = node_process_id(uid);
    // A terminal has one stream; pipes have two, each worth seeing.
    let streams = if process.spec.tty.is_some() {
        vec![None]
    } else {
        vec![Some(OutputStream::Stdout), Some(OutputStream::Stderr)]
    };
    let mut printed = false;
    for stream in streams {
        let query =
            OutputQuery { offset: None, stream, limit: None, encoding: Some(OutputEncoding::Base64), wait: None };
        let chunk = match client.output(&id, &query).await {
            Ok(chunk) => chunk,
            Err(e) if e.code() == Some(ProblemCode::ProcessNotFound) => {
                println!("Output: (not started on the node agent)");
                return;
            }
            Err(e) => {
                println!("Output: (the node agent cannot be asked: {e})");
                return;
            }
        };
        let bytes = base64::engine::general_purpose::STANDARD.decode(chunk.data).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        let all: Vec<&str> = text.lines().collect();
        if all.is_empty() {
            continue;
        }
        let shown = &all[all.len().saturating_sub(lines)..];
        println!("Output ({}, last {} lines):", enum_word(&chunk.stream), shown.len());
        for line in shown {
            // Terminal control sequences would redraw the screen: shown defused.
            let line: String = line.chars().map(|c| if c.is_control() && c != '\t' { '.' } else { c }).collect();
            println!("  {line}");
        }
        printed = true;
    }
    if !printed {
        println!("Output: <none>");
    }
}

fn one_line(text: &str, max: usize) -> String {
    let flat = text.replace('\n', " ");
    if flat.chars().count() > max { format!("{}...", flat.chars().take(max - 3).collect::<String>()) } else { flat }
}

/// `Label:  value` lines aligned like kubectl describe's.
#[derive(Default)]
struct Describe {
    text: String,
}

impl Describe {
    const WIDTH: usize = 24;

    fn field(&mut self, depth: usize, label: &str, value: String) {
        let pad = "  ".repeat(depth);
        let width = Self::WIDTH.saturating_sub(pad.len() + 1);
        let value = crate::printing::visible(&value);
        self.text.push_str(&format!("{pad}{:<width$} {value}\n", format!("{label}:")));
    }

    fn optional(&mut self, depth: usize, label: &str, value: Option<String>) {
        if let Some(value) = value {
            self.field(depth, label, value);
        }
    }

    fn section(&mut self, label: &str) {
        self.text.push_str(&format!("{label}:\n"));
    }

    fn map(&mut self, depth: usize, label: &str, map: Option<&BTreeMap<String, String>>) {
        match map.filter(|m| !m.is_empty()) {
            None => self.field(depth, label, "<none>".into()),
            Some(map) => {
                let mut first = true;
                for (k, v) in map {
                    let label = if first { label } else { "" };
                    if first {
                        self.field(depth, label, format!("{k}={v}"));
                    } else {
                        self.text.push_str(&format!("{:width$}{k}={v}\n", "", width = Self::WIDTH));
                    }
                    first = false;
                }
            }
        }
    }
}

/// A Session's usage in one line: `1200 in, 340 out, 5000 cache read, 0 cache write, $0.0123`.
fn tokens_line(usage: &agentplane_crds::SessionUsage) -> String {
    let mut line = format!(
        "{} in, {} out, {} cache read, {} cache write",
        usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens
    );
    if let Some(cost) = usage.cost_usd {
        line.push_str(&format!(", ${cost:.4}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use agentplane_controller::conditions::{self, READY, VALID};

    use super::reason;

    #[test]
    fn the_reason_is_what_is_wrong_and_nothing_when_all_is_well() {
        let mut c = Vec::new();
        conditions::set(&mut c, READY, true, "Running", "running as pid 1", None);
        conditions::set(&mut c, VALID, true, "Valid", "the spec is in force", None);
        assert_eq!(reason(Some("Running"), &c), "");
        conditions::set(&mut c, READY, false, "BackOff", "restarting in 2s", None);
        assert_eq!(reason(Some("BackOff"), &c), "BackOff", "a phase that is a problem is its own reason");
        conditions::set(&mut c, READY, false, "Succeeded", "exited with code 0", None);
        assert_eq!(reason(Some("Succeeded"), &c), "", "nothing is wrong");
        conditions::set(&mut c, READY, false, "EnvNotResolved", "no claude.env", None);
        assert_eq!(reason(Some("Pending"), &c), "EnvNotResolved");
        conditions::set(&mut c, "RepliesAccepted", false, "ReplyNotPending", "no such request", None);
        assert_eq!(reason(Some("Pending"), &c), "ReplyNotPending", "another condition that is false comes first");
        conditions::set_valid(&mut c, Some("bad field"), None);
        assert_eq!(reason(Some("Pending"), &c), "InvalidSpec", "a spec not taken comes before all");
    }
}
