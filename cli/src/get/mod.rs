//! `agentplane get` and `agentplane describe`: the resources of a watched directory as
//! the state directory records them, so both work whether or not `agentplane up` runs,
//! or of a cluster (`--kubeconfig`), printed alike. The table columns are the CRDs'
//! printer columns, as kubectl would show them, and a file that was not taken is shown
//! under the table: a person looking at `get` sees a broken file without reading logs.
//!
//! When no `agentplane up` holds the directory, its records only say what was true
//! when one last ran: the verbs say so first, and mark every phase that claims
//! something is alive now (`Running?`), so an old record is never read as the present.
//!
//! This file holds the verbs' arguments and `get` itself; `place.rs` where a verb
//! looked (the flags a pasted hint needs, and a "not found" that says where);
//! `liveness.rs` what an old record may claim when no `up` keeps it current;
//! `columns.rs` the table columns of each kind; `watch.rs` `get -w`; `describe.rs`
//! `describe`, laid out by `layout.rs`, ending with what others report of the
//! resource (`reported.rs`: its events, a Process's last output).

use std::collections::BTreeSet;

use agentplane_crds::{Key, Object, ResourceRef};
use anyhow::bail;
use clap::{Args, ValueEnum};

use crate::printing::{Format, print_structured, print_table};
use crate::store::{Selection, Store, StoreArgs};
use crate::workspace::parse_kind;

mod columns;
mod describe;
mod layout;
mod liveness;
mod place;
mod reported;
mod watch;

use columns::Columns;
pub use describe::describe;
use liveness::{staleness, stopped_cleanly};
use place::placed;
pub use place::{namespace_flag, require, store_flags};
use watch::watch;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GetFormat {
    /// More columns.
    Wide,
    Yaml,
    Json,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    /// processes (proc), sessions (sess), sandboxes (sbx), sandboxtemplates (sbxt) or
    /// sandboxwarmpools (sbxpool); or KIND/NAME.
    #[arg(add = clap_complete::ArgValueCandidates::new(crate::completion::resource_refs))]
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
    #[arg(required = true, num_args = 1..=2, add = clap_complete::ArgValueCandidates::new(crate::completion::resource_refs))]
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
    // `get errors`: the files a folder's `up` did not take, each with why, on stdout.
    if args.kind == "errors" && args.name.is_none() {
        let problems = store.problems();
        if problems.is_empty() {
            eprintln!("No file errors.");
        }
        for line in &problems {
            println!("{line}");
        }
        return Ok(0);
    }
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
    if args.watch {
        print_problems(&store, &mut shown_problems);
    } else {
        summarize_problems(&store, &args.store);
    }
    if args.watch {
        watch(&store, &args.store, &selection, args.output, &columns, objects, shown_problems).await?;
    }
    Ok(0)
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

/// The store's problems (files not taken), to stderr where they do not mix with a
/// table read by a program: one in full, several in one line that says where to see
/// them all, so that every `get` does not repeat them.
fn summarize_problems(store: &Store, args: &StoreArgs) {
    let problems = store.problems();
    match problems.as_slice() {
        [] => {}
        [one] => eprintln!("error: {one}"),
        [first, ..] => eprintln!(
            "error: {} files not taken (the first: {first}); `agentplane get errors{}` lists them all",
            problems.len(),
            store_flags(args)
        ),
    }
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
