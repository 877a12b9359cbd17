//! Output retention: one fixed-size ring per stream, addressed by absolute byte offsets.
//!
//! Offsets count every byte since the process started, so a client that reconnects
//! with `offset=N` gets exactly what it missed, or a [`Gap`] saying which bytes are
//! gone. Live subscribers (attached terminals) hold a cursor: the writer waits for a
//! lagging subscriber before overwriting bytes it has not read, but never longer than
//! `stall_timeout`, so one stuck client cannot stall a program forever. Past that the
//! bytes are overwritten and that subscriber is told so with a gap: never a silently
//! shortened stream, never unbounded memory.
//!
//! A pipe process's two rings share a [`ChunkIndex`]: the order and time in which
//! chunks of either stream arrived, so that stdout and stderr can be read back
//! interleaved as they were printed, each chunk with the time the node agent got it.

use std::collections::VecDeque;
use std::sync::{
    Arc, Condvar, Mutex, OnceLock, Weak,
    atomic::{AtomicBool, AtomicU64, Ordering},
};
use std::time::{Duration, Instant};

use time::OffsetDateTime;
use tokio::sync::watch;

use crate::model::{Gap, OutputStream};

/// The writer-visible state that subscribers wait on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputState {
    pub total: u64,
    pub closed: bool,
}

struct Ring {
    /// Grows up to `capacity`, then wraps: untouched memory is never allocated.
    buf: Vec<u8>,
    capacity: usize,
    total: u64,
    closed: bool,
    cursors: Vec<Weak<AtomicU64>>,
}

impl Ring {
    fn start(&self) -> u64 {
        self.total - self.buf.len() as u64
    }

    /// The byte at absolute offset `o` lives at index `o % capacity`, both while the
    /// ring grows (then `total <= capacity` and the index is just `o`) and once full.
    fn write(&mut self, mut data: &[u8]) {
        let capacity = self.capacity;
        if self.total + data.len() as u64 <= capacity as u64 {
            self.buf.extend_from_slice(data);
            self.total += data.len() as u64;
            return;
        }
        // This write wraps: from now on the ring is full-size.
        self.buf.resize(capacity, 0);
        if data.len() > capacity {
            let skip = data.len() - capacity;
            self.total += skip as u64;
            data = &data[skip..];
        }
        let pos = (self.total % capacity as u64) as usize;
        let first = data.len().min(capacity - pos);
        self.buf[pos..pos + first].copy_from_slice(&data[..first]);
        self.buf[..data.len() - first].copy_from_slice(&data[first..]);
        self.total += data.len() as u64;
    }

    fn copy_out(&self, from: u64, max: usize, out: &mut Vec<u8>) {
        let n = ((self.total - from) as usize).min(max);
        if n == 0 {
            return;
        }
        let len = self.buf.len();
        let pos = (from % self.capacity as u64) as usize;
        let first = n.min(len - pos);
        out.extend_from_slice(&self.buf[pos..pos + first]);
        out.extend_from_slice(&self.buf[..n - first]);
    }

    /// The lowest offset a live subscriber still needs, ignoring those already past
    /// saving (behind the retained start: they will get a gap anyway).
    fn min_live_cursor(&mut self) -> Option<u64> {
        let start = self.start();
        let mut min = None::<u64>;
        self.cursors.retain(|weak| match weak.upgrade() {
            Some(cursor) => {
                let at = cursor.load(Ordering::SeqCst);
                if at >= start {
                    min = Some(min.map_or(at, |m| m.min(at)));
                }
                true
            }
            None => false,
        });
        min
    }
}

/// What a read found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReadResult {
    /// Set when the requested offset is older than the oldest retained byte.
    pub gap: Option<Gap>,
    /// Offset of the first byte of `data`.
    pub offset: u64,
    pub data: Vec<u8>,
    pub total: u64,
    pub closed: bool,
}

pub struct OutputBuffer {
    ring: Mutex<Ring>,
    writer_waiting: AtomicBool,
    progress: Condvar,
    state: watch::Sender<OutputState>,
    stall_timeout: Duration,
    /// Where each appended chunk is recorded, with this buffer's stream (pipe processes).
    index: OnceLock<(Arc<ChunkIndex>, OutputStream)>,
}

impl std::fmt::Debug for OutputBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputBuffer").field("state", &*self.state.borrow()).finish()
    }
}

impl OutputBuffer {
    pub fn new(capacity: usize, stall_timeout: Duration) -> Arc<Self> {
        assert!(capacity > 0, "output buffer capacity must be positive");
        Arc::new(OutputBuffer {
            ring: Mutex::new(Ring { buf: Vec::new(), capacity, total: 0, closed: false, cursors: Vec::new() }),
            writer_waiting: AtomicBool::new(false),
            progress: Condvar::new(),
            state: watch::Sender::new(OutputState { total: 0, closed: false }),
            stall_timeout,
            index: OnceLock::new(),
        })
    }

    /// Records every chunk appended from now on in `index`, as `stream`. Call it before
    /// the first append; a buffer keeps the first index it is given.
    pub fn record_in(&self, index: &Arc<ChunkIndex>, stream: OutputStream) {
        let _ = self.index.set((Arc::clone(index), stream));
    }

    /// The index this buffer's chunks are recorded in, if any.
    pub fn index(&self) -> Option<&Arc<ChunkIndex>> {
        self.index.get().map(|(index, _)| index)
    }

    pub fn state(&self) -> OutputState {
        *self.state.borrow()
    }

    /// Appends bytes. Blocking: call it from the reader thread, never from async code.
    /// Waits (up to the stall timeout) for live subscribers that have not yet read the
    /// bytes this write would overwrite.
    pub fn append(&self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let mut deadline: Option<Instant> = None;
        loop {
            // Set before looking at cursors: a subscriber that moves after this sees
            // the flag and wakes us (see `advance`).
            self.writer_waiting.store(true, Ordering::SeqCst);
            let new_total = ring.total + data.len() as u64;
            let evict_to = new_total.saturating_sub(ring.capacity as u64).min(ring.total);
            let blocked = matches!(ring.min_live_cursor(), Some(min) if min < evict_to);
            if !blocked {
                break;
            }
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + self.stall_timeout);
            let now = Instant::now();
            if now >= deadline {
                tracing::debug!(evict_to, "a subscriber fell behind; overwriting what it has not read");
                break;
            }
            ring = self.progress.wait_timeout(ring, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
        self.writer_waiting.store(false, Ordering::SeqCst);
        let offset = ring.total;
        ring.write(data);
        let state = OutputState { total: ring.total, closed: ring.closed };
        drop(ring);
        // Recorded once the bytes are readable, so a reader of the index never finds
        // a chunk whose bytes are not there yet. One reader thread appends to a ring,
        // so its chunks reach the index in offset order.
        if let Some((index, stream)) = self.index.get() {
            index.record(*stream, offset, data.len() as u64, OffsetDateTime::now_utc());
        }
        self.state.send_replace(state);
    }

    /// Marks the stream finished: nothing more will be appended.
    pub fn close(&self) {
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let was_closed = std::mem::replace(&mut ring.closed, true);
        let state = OutputState { total: ring.total, closed: true };
        drop(ring);
        if !was_closed && let Some((index, _)) = self.index.get() {
            index.close_stream();
        }
        self.state.send_replace(state);
    }

    /// Reads at most `max` bytes from absolute offset `from` (clamped to the end).
    pub fn read(&self, from: u64, max: usize) -> ReadResult {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let start = ring.start();
        let from = from.min(ring.total);
        let (gap, from) = if from < start { (Some(Gap { from, to: start }), start) } else { (None, from) };
        let mut data = Vec::with_capacity(((ring.total - from) as usize).min(max));
        ring.copy_out(from, max, &mut data);
        ReadResult { gap, offset: from, data, total: ring.total, closed: ring.closed }
    }

    /// The oldest retained offset.
    pub fn start(&self) -> u64 {
        self.ring.lock().unwrap_or_else(|e| e.into_inner()).start()
    }

    /// Waits until the stream holds bytes past `offset`, is closed, or `changed` resolves.
    pub async fn wait_past(&self, offset: u64) {
        let mut rx = self.state.subscribe();
        let _ = rx.wait_for(|s| s.total > offset || s.closed).await;
    }

    /// A live reader starting at `from` (absent: the oldest retained byte). Its cursor
    /// holds the writer back for up to the stall timeout.
    pub fn subscribe(self: &Arc<Self>, from: Option<u64>) -> Subscription {
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let pos = from.unwrap_or_else(|| ring.start()).min(ring.total);
        let cursor = Arc::new(AtomicU64::new(pos));
        ring.cursors.push(Arc::downgrade(&cursor));
        drop(ring);
        Subscription { buffer: Arc::clone(self), rx: self.state.subscribe(), cursor, pos }
    }

    fn advance(&self) {
        if self.writer_waiting.load(Ordering::SeqCst) {
            // Taking the lock orders this wake-up after the writer's wait began.
            let _ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
            self.progress.notify_all();
        }
    }
}

/// One chunk as a reader thread got it: which stream, which bytes, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkEntry {
    /// Arrival order across both streams, from 0.
    pub seq: u64,
    pub stream: OutputStream,
    /// Absolute offset of the chunk's first byte in its stream.
    pub offset: u64,
    pub len: u64,
    /// When the node agent appended it; never earlier than the chunk before it.
    pub at: OffsetDateTime,
}

/// What the index holds now past a sequence number.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct IndexRead {
    /// Sequence numbers asked for that the index no longer holds.
    pub gap: Option<Gap>,
    pub entries: Vec<ChunkEntry>,
    /// One past the newest chunk recorded.
    pub next_seq: u64,
    /// Every stream recorded in the index has ended.
    pub closed: bool,
}

/// The arrival order and time of the chunks of a pipe process's stdout and stderr.
///
/// Bounded by what the rings keep: an entry is dropped once the bytes it names have
/// left its ring (they could not be read anyway; entries are dropped from the oldest,
/// so one behind a still-kept older chunk of the other stream waits for it), and there
/// are never more than `max_entries`. A chunk holds at least one byte, so the rings
/// alone bound the entries that name kept bytes by their capacity; but that is 2 Mi
/// entries of 48 bytes for two 1 MiB rings filled a byte at a time, so the count is
/// also capped at one entry per [`BYTES_PER_ENTRY`] bytes kept: memory at most three
/// quarters of the rings'. A program writing lines gets all it has kept indexed; one
/// that writes a byte at a time loses the order (not the bytes) of its oldest output.
pub struct ChunkIndex {
    inner: Mutex<IndexInner>,
    /// `next_seq` and the streams still open, for long polls.
    state: watch::Sender<(u64, usize)>,
}

/// Kept bytes per index entry at most: about a line of output.
pub const BYTES_PER_ENTRY: usize = 64;

struct IndexInner {
    entries: VecDeque<ChunkEntry>,
    next_seq: u64,
    /// Bytes appended so far, by stream (what each ring's `total` is).
    totals: [u64; 2],
    capacity: u64,
    max_entries: usize,
    last_at: Option<OffsetDateTime>,
    open: usize,
}

fn slot(stream: OutputStream) -> usize {
    match stream {
        OutputStream::Stderr => 1,
        OutputStream::Stdout | OutputStream::Pty => 0,
    }
}

impl std::fmt::Debug for ChunkIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkIndex").field("state", &*self.state.borrow()).finish()
    }
}

impl ChunkIndex {
    /// An index for `streams` rings of `ring_capacity` bytes each.
    pub fn new(ring_capacity: usize, streams: usize) -> Arc<Self> {
        let kept = ring_capacity.saturating_mul(streams);
        Arc::new(ChunkIndex {
            inner: Mutex::new(IndexInner {
                entries: VecDeque::new(),
                next_seq: 0,
                totals: [0; 2],
                capacity: ring_capacity as u64,
                max_entries: (kept / BYTES_PER_ENTRY).max(1),
                last_at: None,
                open: streams,
            }),
            state: watch::Sender::new((0, streams)),
        })
    }

    /// Records a chunk of `len` bytes at `offset` of `stream`, received at `at`.
    pub fn record(&self, stream: OutputStream, offset: u64, len: u64, at: OffsetDateTime) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        // The wall clock may step back; times follow the arrival order regardless, so
        // a reader can cut the sequence by time.
        let at = inner.last_at.map_or(at, |last| last.max(at));
        inner.last_at = Some(at);
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let end = offset.saturating_add(len);
        inner.totals[slot(stream)] = end;
        inner.entries.push_back(ChunkEntry { seq, stream, offset, len, at });
        let capacity = inner.capacity;
        while let Some(front) = inner.entries.front() {
            let kept_from = inner.totals[slot(front.stream)].saturating_sub(capacity);
            let gone = front.offset.saturating_add(front.len) <= kept_from;
            if !gone && inner.entries.len() <= inner.max_entries {
                break;
            }
            inner.entries.pop_front();
        }
        let state = (inner.next_seq, inner.open);
        drop(inner);
        self.state.send_replace(state);
    }

    fn close_stream(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.open = inner.open.saturating_sub(1);
        let state = (inner.next_seq, inner.open);
        drop(inner);
        self.state.send_replace(state);
    }

    /// The chunks from `seq` on (at most `max`), leaving out those received before `since`.
    pub fn read(&self, seq: u64, since: Option<OffsetDateTime>, max: usize) -> IndexRead {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let first = inner.entries.front().map_or(inner.next_seq, |e| e.seq);
        let seq = seq.min(inner.next_seq);
        let gap = (seq < first).then_some(Gap { from: seq, to: first });
        // Entries are consecutive from `first`, and their times never go down.
        let mut from = (seq.max(first) - first) as usize;
        if let Some(since) = since {
            from = from.max(inner.entries.partition_point(|e| e.at < since));
        }
        let entries = inner.entries.range(from.min(inner.entries.len())..).take(max).copied().collect();
        IndexRead { gap, entries, next_seq: inner.next_seq, closed: inner.open == 0 }
    }

    /// How many entries the index holds now.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until a chunk at or past `seq` is recorded or every stream has ended.
    pub async fn wait_past(&self, seq: u64) {
        let mut rx = self.state.subscribe();
        let _ = rx.wait_for(|&(next, open)| next > seq || open == 0).await;
    }
}

/// What a subscriber gets next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    Data {
        offset: u64,
        data: Vec<u8>,
    },
    Gap(Gap),
    /// The stream is closed and everything has been read.
    Closed,
}

pub struct Subscription {
    buffer: Arc<OutputBuffer>,
    rx: watch::Receiver<OutputState>,
    cursor: Arc<AtomicU64>,
    pos: u64,
}

impl Subscription {
    /// The offset of the next byte this subscriber will get.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Bytes written past this subscriber's position (some may be gone: a gap).
    pub fn available(&self) -> u64 {
        self.rx.borrow().total.saturating_sub(self.pos)
    }

    /// Whether the stream has ended (nothing more will be written).
    pub fn closed(&self) -> bool {
        self.rx.borrow().closed
    }

    /// Returns what is available now, without waiting: `None` when caught up with an open stream.
    pub fn try_next(&mut self, max: usize) -> Option<Next> {
        self.rx.borrow_and_update();
        let read = self.buffer.read(self.pos, max);
        if let Some(gap) = read.gap {
            self.set_position(gap.to);
            return Some(Next::Gap(gap));
        }
        if !read.data.is_empty() {
            self.set_position(read.offset + read.data.len() as u64);
            return Some(Next::Data { offset: read.offset, data: read.data });
        }
        if read.closed {
            return Some(Next::Closed);
        }
        None
    }

    /// Waits for the next data, gap, or the end of the stream.
    pub async fn next(&mut self, max: usize) -> Next {
        loop {
            if let Some(next) = self.try_next(max) {
                return next;
            }
            if self.rx.changed().await.is_err() {
                return Next::Closed;
            }
        }
    }

    /// Resolves when the buffer changes after the last `try_next`.
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    fn set_position(&mut self, pos: u64) {
        self.pos = pos;
        self.cursor.store(pos, Ordering::SeqCst);
        self.buffer.advance();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(capacity: usize) -> Arc<OutputBuffer> {
        OutputBuffer::new(capacity, Duration::from_millis(50))
    }

    #[test]
    fn offsets_are_absolute_and_wrap() {
        let b = buffer(8);
        b.append(b"abcdef");
        assert_eq!(b.read(2, 100).data, b"cdef");
        b.append(b"ghijk");
        let r = b.read(0, 100);
        assert_eq!(r.gap, Some(Gap { from: 0, to: 3 }));
        assert_eq!((r.offset, r.data.as_slice(), r.total), (3, &b"defghijk"[..], 11));
        assert_eq!(b.read(9, 1).data, b"j");
        assert_eq!(b.read(99, 10).data, b"");
    }

    #[test]
    fn a_write_larger_than_the_ring_keeps_its_tail() {
        let b = buffer(4);
        b.append(b"0123456789");
        let r = b.read(0, 100);
        assert_eq!(r.gap, Some(Gap { from: 0, to: 6 }));
        assert_eq!(r.data, b"6789");
    }

    #[test]
    fn matches_a_plain_vector_for_any_write_sizes() {
        for capacity in [1, 3, 7, 16] {
            let b = buffer(capacity);
            let mut model: Vec<u8> = Vec::new();
            let mut seed = 0x9e37_79b9_u32;
            for round in 0..200u32 {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let len = (seed % 40) as usize;
                let chunk: Vec<u8> = (0..len).map(|i| (round as usize * 31 + i) as u8).collect();
                b.append(&chunk);
                model.extend_from_slice(&chunk);
                let start = model.len().saturating_sub(capacity);
                for from in [0, start, (start + model.len()) / 2, model.len()] {
                    let r = b.read(from as u64, usize::MAX);
                    let from_kept = from.max(start);
                    assert_eq!(r.offset, from_kept as u64);
                    assert_eq!(r.data, &model[from_kept..], "capacity {capacity}, round {round}, from {from}");
                    assert_eq!(r.gap.is_some(), from < start);
                }
            }
        }
    }

    #[test]
    fn a_stalled_subscriber_gets_a_gap_after_the_timeout() {
        let b = buffer(4);
        let mut sub = b.subscribe(Some(0));
        b.append(b"abcd");
        let started = Instant::now();
        b.append(b"ef"); // would overwrite "ab", unread: waits for the stall timeout
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(sub.try_next(100), Some(Next::Gap(Gap { from: 0, to: 2 })));
        assert_eq!(sub.try_next(100), Some(Next::Data { offset: 2, data: b"cdef".to_vec() }));
        assert_eq!(sub.try_next(100), None);
        b.close();
        assert_eq!(sub.try_next(100), Some(Next::Closed));
    }

    #[test]
    fn a_subscriber_that_reads_holds_the_writer_back_without_loss() {
        let b = OutputBuffer::new(16, Duration::from_secs(30));
        let mut sub = b.subscribe(Some(0));
        let writer = {
            let b = Arc::clone(&b);
            std::thread::spawn(move || {
                for i in 0..10_000u32 {
                    b.append(&i.to_le_bytes());
                }
                b.close();
            })
        };
        let mut got = Vec::new();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            loop {
                match sub.next(5).await {
                    Next::Data { offset, data } => {
                        assert_eq!(offset, got.len() as u64);
                        got.extend_from_slice(&data);
                    }
                    Next::Gap(gap) => panic!("lost bytes {gap:?}"),
                    Next::Closed => break,
                }
            }
        });
        writer.join().unwrap();
        let expected: Vec<u8> = (0..10_000u32).flat_map(|i| i.to_le_bytes()).collect();
        assert_eq!(got, expected);
    }

    fn at(ms: i64) -> OffsetDateTime {
        OffsetDateTime::UNIX_EPOCH + time::Duration::milliseconds(ms)
    }

    #[test]
    fn the_index_keeps_the_arrival_order_across_streams_and_its_times_never_go_down() {
        let index = ChunkIndex::new(1024, 2);
        index.record(OutputStream::Stdout, 0, 3, at(10));
        index.record(OutputStream::Stderr, 0, 3, at(20));
        // The clock stepped back: the time is held at the one before.
        index.record(OutputStream::Stdout, 3, 3, at(5));
        let read = index.read(0, None, usize::MAX);
        let got: Vec<_> = read.entries.iter().map(|e| (e.seq, e.stream, e.offset, e.at)).collect();
        assert_eq!(
            got,
            [
                (0, OutputStream::Stdout, 0, at(10)),
                (1, OutputStream::Stderr, 0, at(20)),
                (2, OutputStream::Stdout, 3, at(20))
            ]
        );
        assert_eq!((read.gap, read.next_seq, read.closed), (None, 3, false));
        assert_eq!(index.read(1, None, 1).entries.iter().map(|e| e.seq).collect::<Vec<_>>(), [1]);
        // By time: chunks received at or after 15 ms.
        assert_eq!(index.read(0, Some(at(15)), 10).entries.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
        assert!(index.read(0, Some(at(21)), 10).entries.is_empty());
        // A sequence number past the end is the end.
        assert_eq!(index.read(u64::MAX, None, 10), IndexRead { next_seq: 3, ..Default::default() });
    }

    #[test]
    fn the_index_drops_an_entry_once_its_bytes_left_the_ring() {
        let index = ChunkIndex::new(BYTES_PER_ENTRY * 4, 2);
        let cap = (BYTES_PER_ENTRY * 4) as u64;
        index.record(OutputStream::Stderr, 0, 10, at(0));
        index.record(OutputStream::Stdout, 0, cap, at(1));
        // stdout's first chunk still fully kept, stderr's too.
        assert_eq!(index.len(), 2);
        index.record(OutputStream::Stdout, cap, 1, at(2));
        // stdout's first byte left the ring, but not its whole chunk: kept.
        assert_eq!(index.len(), 3);
        index.record(OutputStream::Stderr, 10, cap, at(3));
        // stderr's first chunk is gone from its ring, and with it from the index.
        let read = index.read(0, None, usize::MAX);
        assert_eq!(read.gap, Some(Gap { from: 0, to: 1 }));
        assert_eq!(read.entries.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
        index.record(OutputStream::Stdout, cap + 1, cap, at(4));
        // Both stdout chunks before it are now out of their ring.
        assert_eq!(index.read(0, None, usize::MAX).entries.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4]);
    }

    #[test]
    fn the_index_never_holds_more_than_one_entry_per_bytes_per_entry_kept() {
        let capacity = 4096;
        let index = ChunkIndex::new(capacity, 2);
        let max = 2 * capacity / BYTES_PER_ENTRY;
        // A byte at a time, alternating: every chunk's byte is still in its ring.
        for i in 0..10 * max as u64 {
            let stream = if i % 2 == 0 { OutputStream::Stdout } else { OutputStream::Stderr };
            index.record(stream, i / 2, 1, at(i as i64));
            assert!(index.len() <= max, "{} entries after {i}", index.len());
        }
        assert_eq!(index.len(), max);
        // What the bound in the type's comment counts on: an entry costs less than the bytes it stands for.
        assert!(std::mem::size_of::<ChunkEntry>() <= BYTES_PER_ENTRY * 3 / 4, "{}", std::mem::size_of::<ChunkEntry>());
        let read = index.read(0, None, usize::MAX);
        let first = (10 * max - max) as u64;
        assert_eq!(read.gap, Some(Gap { from: 0, to: first }));
        assert_eq!(read.entries.first().map(|e| e.seq), Some(first));
        assert_eq!(read.next_seq, 10 * max as u64);
    }

    #[test]
    fn buffers_record_their_chunks_in_a_shared_index_and_close_it() {
        let index = ChunkIndex::new(1024, 2);
        let (out, err) = (buffer(1024), buffer(1024));
        out.record_in(&index, OutputStream::Stdout);
        err.record_in(&index, OutputStream::Stderr);
        out.append(b"o1\n");
        err.append(b"e1\n");
        out.append(b"o2\n");
        let read = index.read(0, None, usize::MAX);
        let got: Vec<_> = read.entries.iter().map(|e| (e.stream, e.offset, e.len)).collect();
        assert_eq!(got, [(OutputStream::Stdout, 0, 3), (OutputStream::Stderr, 0, 3), (OutputStream::Stdout, 3, 3)]);
        out.close();
        out.close();
        assert!(!index.read(0, None, 0).closed, "stderr is still open");
        err.close();
        assert!(index.read(0, None, 0).closed);
    }
}
