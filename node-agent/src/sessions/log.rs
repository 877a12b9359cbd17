//! The event log of one session: every event appended to `events.jsonl` (one JSON
//! envelope a line, written and flushed per batch, off the async runtime), the newest
//! ones also kept in memory.
//!
//! Memory stays bounded: at most `capacity` events are held; older offsets are read
//! back from the file (found quickly through a sparse index of line positions). So a
//! reader that falls behind, or comes back days later, still gets every event: the
//! SSE stream pulls from the log at the reader's pace instead of pushing into a
//! per-client buffer that could overflow. A `Gap` is reported only for sequences that
//! really are gone from the file (a failed write, a file damaged or truncated by hand),
//! never silently skipped.
//!
//! Appends are serialized by one async lock, which also orders a change to the
//! session's state with the events that announce it (see [`EventLog::append_with`]).

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use time::OffsetDateTime;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use crate::model::Gap;
use crate::universal::{EventData, EventSource, UniversalEvent};

/// One index entry per this many events: reading an old offset scans at most this
/// many lines before the first one wanted, for 16 bytes of memory per entry.
const INDEX_EVERY: u64 = 256;

/// An event before the log gives it a sequence and a time.
#[derive(Debug, Clone)]
pub struct EventDraft {
    pub source: EventSource,
    pub agent_session_id: Option<String>,
    pub data: EventData,
    pub raw: Option<String>,
}

/// Events to append as one step; see [`EventLog::append_with`].
#[derive(Default)]
pub struct Batch {
    drafts: Vec<EventDraft>,
    close: bool,
}

impl Batch {
    pub fn push(&mut self, draft: EventDraft) {
        self.drafts.push(draft);
    }

    /// The last events of the log: nothing is appended after this batch.
    pub fn close(&mut self) {
        self.close = true;
    }

    /// What was pushed, for tests of the changes that push.
    #[cfg(test)]
    pub(super) fn drafts(&self) -> &[EventDraft] {
        &self.drafts
    }

    #[cfg(test)]
    pub(super) fn closes(&self) -> bool {
        self.close
    }
}

pub struct EventLog {
    session_id: String,
    path: PathBuf,
    writer: tokio::sync::Mutex<Writer>,
    memory: Mutex<Memory>,
    /// The newest sequence readers can see.
    latest: watch::Sender<u64>,
    /// Where appended events are counted (the node agent's metrics), once set.
    emitted: std::sync::OnceLock<prometheus_client::metrics::counter::Counter>,
}

struct Writer {
    /// `None` when the file could not be opened: events then live in memory only.
    file: Option<tokio::fs::File>,
    next: u64,
    /// Bytes in the file: where the next line starts.
    position: u64,
    closed: bool,
}

struct Memory {
    events: VecDeque<UniversalEvent>,
    capacity: usize,
    /// One past the newest event readers can see.
    next: u64,
    /// (sequence, byte position of its line), ascending.
    index: Vec<(u64, u64)>,
    closed: bool,
}

impl Memory {
    fn oldest(&self) -> u64 {
        self.events.front().map_or(self.next, |e| e.sequence)
    }
}

impl EventLog {
    /// Opens (or creates) `path`. Its events are loaded, the newest `capacity` kept in
    /// memory; a line cut short by a crash is dropped. Sequences continue after the
    /// newest in the file and after `floor` (the newest the session record has seen), so
    /// none is ever reused. Blocking: call it off the async runtime.
    pub fn open(path: &Path, session_id: &str, capacity: usize, floor: u64, closed: bool) -> std::io::Result<EventLog> {
        let mut file = OpenOptions::new().read(true).append(true).create(true).mode(0o600).open(path)?;
        let mut memory = Memory { events: VecDeque::new(), capacity, next: 1, index: Vec::new(), closed };
        let mut position = 0u64;
        let mut last = 0u64;
        let mut complete = 0u64;
        {
            let mut reader = BufReader::new(&mut file);
            let mut line = Vec::new();
            loop {
                line.clear();
                let read = reader.read_until(b'\n', &mut line)?;
                if read == 0 {
                    break;
                }
                let start = position;
                position += read as u64;
                if line.last() != Some(&b'\n') {
                    break; // cut short: dropped below
                }
                complete = position;
                let Ok(event) = serde_json::from_slice::<UniversalEvent>(&line) else {
                    tracing::warn!(path = %path.display(), at = start, "skipping a damaged event line");
                    continue;
                };
                if event.sequence <= last {
                    continue;
                }
                last = event.sequence;
                note_position(&mut memory.index, event.sequence, start);
                memory.events.push_back(event);
                if memory.events.len() > capacity {
                    memory.events.pop_front();
                }
            }
        }
        if complete < position {
            file.set_len(complete)?;
        }
        let next = last.max(floor) + 1;
        memory.next = next;
        let file = tokio::fs::File::from_std(file);
        Ok(EventLog {
            session_id: session_id.to_string(),
            path: path.to_path_buf(),
            writer: tokio::sync::Mutex::new(Writer { file: Some(file), next, position: complete, closed }),
            memory: Mutex::new(memory),
            latest: watch::Sender::new(next - 1),
            emitted: std::sync::OnceLock::new(),
        })
    }

    /// Counts every event appended from now on into `counter`.
    pub fn count_into(&self, counter: prometheus_client::metrics::counter::Counter) {
        let _ = self.emitted.set(counter);
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends one event; false when the log is closed (the session ended).
    pub async fn append(&self, draft: EventDraft) -> bool {
        self.commit(|batch| batch.push(draft)).await.1
    }

    /// Runs `change` and appends the events it pushes, as one step: no other event is
    /// sequenced between them, and whoever sees the change and then appends an event of
    /// its own is sequenced after them. `change` always runs; on a closed log its events
    /// are dropped.
    pub async fn append_with<T>(&self, change: impl FnOnce(&mut Batch) -> T) -> T {
        self.commit(change).await.0
    }

    /// `append_with`, and whether the log was still open.
    async fn commit<T>(&self, change: impl FnOnce(&mut Batch) -> T) -> (T, bool) {
        let mut writer = self.writer.lock().await;
        let mut batch = Batch::default();
        let result = change(&mut batch);
        if writer.closed {
            return (result, false);
        }
        if batch.drafts.is_empty() && !batch.close {
            return (result, true);
        }
        let time = OffsetDateTime::now_utc();
        let appended = batch.drafts.len() as u64;
        let mut events = Vec::with_capacity(batch.drafts.len());
        let mut lines = Vec::new();
        let mut starts = Vec::new();
        for draft in batch.drafts {
            let event = UniversalEvent {
                sequence: writer.next,
                time,
                session_id: self.session_id.clone(),
                agent_session_id: draft.agent_session_id,
                source: draft.source,
                data: draft.data,
                raw: draft.raw,
            };
            writer.next += 1;
            starts.push(writer.position + lines.len() as u64);
            serde_json::to_writer(&mut lines, &event).expect("events serialize");
            lines.push(b'\n');
            events.push(event);
        }
        let written = lines.is_empty() || self.write(&mut writer, &lines).await;
        writer.closed |= batch.close;
        let closed = writer.closed;
        let newest = writer.next - 1;
        {
            let mut memory = self.memory();
            for (event, start) in events.into_iter().zip(starts) {
                note_position(&mut memory.index, event.sequence, start);
                memory.events.push_back(event);
                if memory.events.len() > memory.capacity {
                    memory.events.pop_front();
                }
            }
            memory.next = newest + 1;
            memory.closed = closed;
            // A finished session is read rarely: its events are served from the file
            // (as after a restart), so ended sessions hold no events in memory.
            if closed && written && writer.file.is_some() {
                memory.events.clear();
                memory.capacity = 0;
            }
        }
        drop(writer);
        if let Some(emitted) = self.emitted.get() {
            emitted.inc_by(appended);
        }
        self.latest.send_replace(newest);
        (result, true)
    }

    /// Opens a closed log again (a failed session restarted), if `change` agrees: it
    /// runs under the append lock, so no event is sequenced between the close and the
    /// change it makes. Sequences continue after the last one; the newest `capacity`
    /// events from now on are kept in memory again.
    pub async fn reopen<T, E>(
        &self,
        capacity: usize,
        change: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let mut writer = self.writer.lock().await;
        let result = change()?;
        writer.closed = false;
        let mut memory = self.memory();
        memory.closed = false;
        memory.capacity = capacity;
        Ok(result)
    }

    /// Writes and flushes; on failure the events stay in memory only (a later reader of
    /// the file is told of the gap), and a partial line is rolled back.
    async fn write(&self, writer: &mut Writer, lines: &[u8]) -> bool {
        let Some(file) = writer.file.as_mut() else { return false };
        let written = async {
            file.write_all(lines).await?;
            file.flush().await
        }
        .await;
        match written {
            Ok(()) => {
                writer.position += lines.len() as u64;
                true
            }
            Err(error) => {
                tracing::error!(path = %self.path.display(), %error, "could not write session events; they are kept in memory only");
                if file.set_len(writer.position).await.is_err() {
                    writer.file = None;
                }
                false
            }
        }
    }

    /// The sequence of the newest event (0 when none).
    pub fn latest(&self) -> u64 {
        *self.latest.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.latest.subscribe()
    }

    /// True once the closing batch (`session.ended`) is readable.
    pub fn is_closed(&self) -> bool {
        self.memory().closed
    }

    /// Up to `limit` events after `after`, in order, and the range of sequences after
    /// `after` that are lost, if any. Events older than memory come from the file.
    pub async fn read(&self, mut after: u64, limit: usize) -> (Option<Gap>, Vec<UniversalEvent>) {
        let limit = limit.max(1);
        let (oldest, start) = {
            let memory = self.memory();
            let oldest = memory.oldest();
            // `after` is a client's offset: `after + 1` wrapped for 2^64-1 and sent it
            // down the file path, answering with the whole log.
            if after.saturating_add(1) >= oldest {
                return (None, memory.events.iter().filter(|e| e.sequence > after).take(limit).cloned().collect());
            }
            let start = memory.index.iter().rev().find(|(seq, _)| *seq <= after + 1).map_or(0, |(_, pos)| *pos);
            (oldest, start)
        };
        let path = self.path.clone();
        let from_file = tokio::task::spawn_blocking(move || read_file(&path, start, after, oldest, limit))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        let mut events = match from_file {
            Ok(events) => events,
            Err(error) => {
                tracing::error!(path = %self.path.display(), %error, "could not read session events");
                Vec::new()
            }
        };
        let gap = match events.first() {
            Some(first) if first.sequence > after + 1 => Some(Gap { from: after + 1, to: first.sequence }),
            Some(_) => None,
            None => Some(Gap { from: after + 1, to: oldest }),
        };
        // The file part ends at a hole or at `oldest`; the next read reports a hole.
        if let Some(hole) = events.windows(2).position(|w| w[1].sequence != w[0].sequence + 1) {
            events.truncate(hole + 1);
            return (gap, events);
        }
        after = events.last().map_or(oldest - 1, |e| e.sequence);
        if events.len() < limit {
            let memory = self.memory();
            if after.saturating_add(1) >= memory.oldest() {
                let room = limit - events.len();
                events.extend(memory.events.iter().filter(|e| e.sequence > after).take(room).cloned());
            }
        }
        (gap, events)
    }
}

fn note_position(index: &mut Vec<(u64, u64)>, sequence: u64, position: u64) {
    if index.last().is_none_or(|(seq, _)| sequence >= seq + INDEX_EVERY) {
        index.push((sequence, position));
    }
}

/// Events with `after < sequence < until` from `start` on, at most `limit`.
fn read_file(path: &Path, start: u64, after: u64, until: u64, limit: usize) -> std::io::Result<Vec<UniversalEvent>> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(start))?;
    let mut events = Vec::new();
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    while events.len() < limit {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let Ok(event) = serde_json::from_slice::<UniversalEvent>(&line) else { continue };
        if event.sequence >= until {
            break;
        }
        if event.sequence > after && events.last().is_none_or(|e: &UniversalEvent| event.sequence > e.sequence) {
            events.push(event);
        }
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(n: u64) -> EventDraft {
        EventDraft {
            source: EventSource::Agent,
            agent_session_id: None,
            data: EventData::TurnStarted { turn: n },
            raw: None,
        }
    }

    fn sequences(events: &[UniversalEvent]) -> Vec<u64> {
        events.iter().map(|e| e.sequence).collect()
    }

    #[tokio::test]
    async fn old_offsets_come_from_the_file_and_lost_ones_are_a_gap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let log = EventLog::open(&path, "s", 4, 0, false).unwrap();
        for n in 1..=1000 {
            assert!(log.append(draft(n)).await);
        }
        assert_eq!(log.memory().events.len(), 4, "memory stays bounded");
        let (gap, events) = log.read(0, 10).await;
        assert_eq!((gap, sequences(&events)), (None, (1..=10).collect()));
        // Across the file/memory boundary, and from the sparse index.
        let (gap, events) = log.read(990, 100).await;
        assert_eq!((gap, sequences(&events)), (None, (991..=1000).collect()));
        let (gap, events) = log.read(600, 3).await;
        assert_eq!((gap, sequences(&events)), (None, vec![601, 602, 603]));
        assert_eq!(log.read(1000, 10).await.1.len(), 0);

        // Lines lost from the file (a failed write, a damaged file): told, not skipped.
        let text = std::fs::read_to_string(&path).unwrap();
        let kept: String = text
            .lines()
            .filter(|l| !l.contains("\"sequence\":5,") && !l.contains("\"sequence\":6,"))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&path, kept).unwrap();
        let (gap, events) = log.read(0, 10).await;
        assert_eq!((gap, sequences(&events)), (None, vec![1, 2, 3, 4]), "stops before the hole");
        let (gap, events) = log.read(4, 3).await;
        assert_eq!((gap, sequences(&events)), (Some(Gap { from: 5, to: 7 }), vec![7, 8, 9]));
        std::fs::write(&path, "").unwrap();
        let (gap, events) = log.read(0, 10).await;
        assert_eq!((gap, sequences(&events)), (Some(Gap { from: 1, to: 997 }), vec![997, 998, 999, 1000]));
    }

    #[tokio::test]
    async fn reopening_continues_the_sequence_and_drops_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let log = EventLog::open(&path, "s", 100, 0, false).unwrap();
        for n in 1..=3 {
            log.append(draft(n)).await;
        }
        log.append_with(|batch| {
            batch.push(draft(4));
            batch.close();
        })
        .await;
        assert!(log.is_closed());
        assert!(!log.append(draft(5)).await, "closed");
        assert!(log.memory().events.is_empty(), "a closed log is read from its file");
        assert_eq!(sequences(&log.read(2, 100).await.1), vec![3, 4]);
        drop(log);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut file, b"{\"sequence\":5,\"ti").unwrap();
        let log = EventLog::open(&path, "s", 2, 0, false).unwrap();
        assert_eq!(log.latest(), 4);
        log.append(draft(5)).await;
        assert_eq!(sequences(&log.read(0, 100).await.1), vec![1, 2, 3, 4, 5]);
        // The session record may have seen more than the file kept: never reuse those.
        drop(log);
        let log = EventLog::open(&path, "s", 2, 9, false).unwrap();
        log.append(draft(6)).await;
        assert_eq!(log.latest(), 10);
    }
}
