//! `get -w`, as kubectl's: the header once, then a row (or an object) per change.

use std::collections::{BTreeMap, BTreeSet};

use agentplane_crds::{Key, Kind, Object};
use futures_util::StreamExt;

use super::columns::Columns;
use super::liveness::{staleness, stopped_cleanly};
use super::{GetFormat, print_problems, print_watched};
use crate::printing::{Format, column_widths, format_row};
use crate::store::{Change, Selection, Store, StoreArgs};

/// kubectl's `-w`: the header once, then a row (or an object) per change, only when
/// what it shows changed.
pub(super) async fn watch(
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
            // `Suspended (12m)`.
            "PHASE" if kind == Kind::Sandbox => 15,
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
