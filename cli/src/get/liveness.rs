//! What a record may claim when no `agentplane up` holds the directory: the line to
//! read before it, and the phases that stay true after `up` stops.

use agentplane_controller::dir::state::Liveness;

use super::place::store_flags;
use crate::printing::{age, clock};
use crate::store::{Store, StoreArgs};

/// The line to read before a status that no `agentplane up` keeps current (directory
/// store): as of when, since when nothing updates it, and how to refresh it. None while
/// an `up` holds the directory, and for a cluster, whose controller is not ours to see.
pub(super) fn staleness(store: &Store, args: &StoreArgs) -> Option<String> {
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
            // A clean stop stopped everything and said so: what is shown is as of then.
            // Otherwise, what was written while it ran; a record older than the run is
            // as of the run.
            let at = match run.stopped_at {
                Some(stopped) => stopped,
                None => written.unwrap_or(run.started_at).max(run.started_at),
            };
            format!("{} ({since}): {refresh}", as_of(at))
        }
    })
}

/// No `up` holds the directory, and the last one stopped cleanly: its node agent
/// stopped every process on the way out.
pub(super) fn stopped_cleanly(store: &Store) -> bool {
    let Store::Dir(workspace) = store else { return false };
    matches!(
        workspace.state.liveness(),
        Liveness::NotRunning { last_run: Some(run), .. } if run.stopped_at.is_some()
    )
}

/// Phases that stay true after `up` stops: nothing is alive in them.
pub(super) const FINAL_PHASES: [&str; 4] = ["Stopped", "Succeeded", "Failed", "Ended"];
