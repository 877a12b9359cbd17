//! The lifecycle event log behind `GET /v1/events/sse`.
//!
//! A bounded log of recent events with monotonic sequence numbers: a reconnecting
//! client names the last one it saw and gets the rest; one that was away too long is
//! told which sequence numbers it lost.

use std::collections::VecDeque;
use std::sync::Mutex;

use time::OffsetDateTime;
use tokio::sync::watch;

use crate::model::{Gap, LifecycleEvent, LifecycleEventType, ProcessInfo};

pub struct EventLog {
    inner: Mutex<Inner>,
    latest: watch::Sender<u64>,
}

struct Inner {
    events: VecDeque<LifecycleEvent>,
    capacity: usize,
    next: u64,
}

impl EventLog {
    pub fn new(capacity: usize) -> Self {
        EventLog {
            inner: Mutex::new(Inner { events: VecDeque::new(), capacity: capacity.max(1), next: 1 }),
            latest: watch::Sender::new(0),
        }
    }

    pub fn publish(&self, kind: LifecycleEventType, process: ProcessInfo) -> u64 {
        self.publish_with(kind, || Some(process)).expect("an event was given")
    }

    /// Makes a change and records its event as one step: `change` runs under the log's
    /// lock, so whoever observes the change and then publishes an event of their own
    /// is sequenced after this one. `None` from `change` records nothing.
    pub fn publish_with(&self, kind: LifecycleEventType, change: impl FnOnce() -> Option<ProcessInfo>) -> Option<u64> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let process = change()?;
        let sequence = inner.next;
        inner.next += 1;
        if inner.events.len() == inner.capacity {
            inner.events.pop_front();
        }
        inner.events.push_back(LifecycleEvent { sequence, kind, time: OffsetDateTime::now_utc(), process });
        drop(inner);
        self.latest.send_replace(sequence);
        Some(sequence)
    }

    /// The sequence number of the newest event (0 when none).
    pub fn latest(&self) -> u64 {
        *self.latest.borrow()
    }

    /// Events after `after`, and the range lost if some of them are no longer kept.
    pub fn since(&self, after: u64) -> (Option<Gap>, Vec<LifecycleEvent>) {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let oldest = inner.events.front().map_or(inner.next, |e| e.sequence);
        // `after` comes from a client: `after + 1` must not wrap (a wrapped 0 made
        // every event look lost, a gap on every read).
        let first_wanted = after.saturating_add(1);
        let gap = (first_wanted < oldest).then_some(Gap { from: first_wanted, to: oldest });
        let events = inner.events.iter().filter(|e| e.sequence > after).cloned().collect();
        (gap, events)
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.latest.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ProcessStatus;

    fn info() -> ProcessInfo {
        ProcessInfo {
            id: "p".into(),
            tag: None,
            label: None,
            annotations: Default::default(),
            command: "true".into(),
            args: vec![],
            cwd: "/".into(),
            pid: 1,
            pty: false,
            size: None,
            stdin: false,
            status: ProcessStatus::Running,
            exit_code: None,
            signal: None,
            created_at: OffsetDateTime::UNIX_EPOCH,
            exited_at: None,
            output_offset: 0,
            stderr_offset: None,
            session_id: None,
        }
    }

    #[test]
    fn replays_after_a_sequence_and_reports_what_fell_out() {
        let log = EventLog::new(3);
        for _ in 0..5 {
            log.publish(LifecycleEventType::ProcessUpdated, info());
        }
        let (gap, events) = log.since(3);
        assert_eq!(gap, None);
        assert_eq!(events.iter().map(|e| e.sequence).collect::<Vec<_>>(), vec![4, 5]);
        let (gap, events) = log.since(0);
        assert_eq!(gap, Some(Gap { from: 1, to: 3 }));
        assert_eq!(events.len(), 3);
        assert_eq!(log.since(5).1.len(), 0);
    }
}
