//! Whether anything is going on in this node agent, for a controller that suspends an
//! idle sandbox (`idleTimeoutSeconds`): `GET /v1/activity` says what keeps it busy now
//! and how long nothing has.
//!
//! Busy is: a session preparing, installing, starting, in a turn, with messages queued
//! or waiting for a reply; a client following something (a terminal, a session's events,
//! a process's output, a folder's changes). Each report compares the processes' output
//! with the last one's, so output in between counts as activity: a reporter asked every
//! second sees it within a second, with no cost on the output path itself.
//!
//! A client that says it only observes (`X-Agentplane-Observer`, the controller's own
//! streams, which it keeps open for as long as the sandbox lives) is not counted.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use axum::http::HeaderMap;

/// The header a client sends on a stream it follows only to observe.
pub const OBSERVER_HEADER: &str = "x-agentplane-observer";

/// What keeps this node agent busy, and since when nothing has.
#[derive(Debug, Default)]
pub struct Activity {
    followers: AtomicUsize,
    seen: Mutex<Seen>,
}

#[derive(Debug)]
struct Seen {
    /// When something was last going on.
    at: Instant,
    /// The processes' output in bytes at the last report.
    output: u64,
    /// Whether the last report found something going on: it ended since, at a moment
    /// between the two reports, so the quiet one counts from itself (late, never early).
    busy: bool,
}

impl Default for Seen {
    fn default() -> Self {
        Seen { at: Instant::now(), output: 0, busy: false }
    }
}

/// One client following a stream, counted while it lives.
#[derive(Debug)]
pub struct Following(Option<Arc<Activity>>);

impl Drop for Following {
    fn drop(&mut self) {
        if let Some(activity) = self.0.take() {
            activity.followers.fetch_sub(1, Ordering::Relaxed);
            activity.touch();
        }
    }
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::default()
    }

    /// Counts a client following a stream until the guard drops, unless its request
    /// says it only observes.
    pub fn follow(self: &Arc<Self>, headers: &HeaderMap) -> Following {
        if headers.contains_key(OBSERVER_HEADER) {
            return Following(None);
        }
        self.followers.fetch_add(1, Ordering::Relaxed);
        self.touch();
        Following(Some(Arc::clone(self)))
    }

    fn touch(&self) {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).at = Instant::now();
    }

    /// The report now: `busy` says what the sessions are doing (empty: nothing), and
    /// `output` is the processes' output so far, in bytes.
    pub fn report(&self, mut busy: Vec<String>, output: u64) -> crate::model::ActivityReport {
        let followers = self.followers.load(Ordering::Relaxed);
        if followers > 0 {
            busy.push(format!("{followers} client(s) following a stream"));
        }
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.output != output {
            seen.output = output;
            seen.at = Instant::now();
        }
        if !busy.is_empty() || seen.busy {
            seen.at = Instant::now();
        }
        seen.busy = !busy.is_empty();
        crate::model::ActivityReport { busy, idle_seconds: seen.at.elapsed().as_secs() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observer() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(OBSERVER_HEADER, "1".parse().unwrap());
        headers
    }

    #[test]
    fn busy_sessions_followers_and_new_output_each_keep_it_awake() {
        let activity = Activity::new();
        // Backdate the last activity, as if the node agent had been quiet a while.
        let quiet = || activity.seen.lock().unwrap().at = Instant::now() - std::time::Duration::from_secs(60);
        quiet();
        let report = activity.report(Vec::new(), 0);
        assert!(report.busy.is_empty() && report.idle_seconds >= 60, "{report:?}");

        let report = activity.report(vec!["session s: a turn is running".into()], 0);
        assert_eq!((report.busy.len(), report.idle_seconds), (1, 0));
        // The turn ended after that report: idle counts from the first quiet one.
        activity.seen.lock().unwrap().at = Instant::now() - std::time::Duration::from_secs(60);
        assert_eq!(activity.report(Vec::new(), 0).idle_seconds, 0);

        quiet();
        assert_eq!(activity.report(Vec::new(), 10).idle_seconds, 0, "output since the last report");
        quiet();
        assert!(activity.report(Vec::new(), 10).idle_seconds >= 60, "the same output is not new");

        let following = activity.follow(&HeaderMap::new());
        quiet();
        let report = activity.report(Vec::new(), 10);
        assert_eq!(report.busy, vec!["1 client(s) following a stream".to_string()]);
        drop(following);
        assert_eq!(activity.report(Vec::new(), 10).idle_seconds, 0, "a client leaving is activity too");
    }

    #[test]
    fn an_observer_is_not_counted() {
        let activity = Activity::new();
        let _observing = activity.follow(&observer());
        activity.seen.lock().unwrap().at = Instant::now() - std::time::Duration::from_secs(5);
        let report = activity.report(Vec::new(), 0);
        assert!(report.busy.is_empty() && report.idle_seconds >= 5, "{report:?}");
    }
}
