//! Files: `/v1/fs/...` lists, stats, reads (with ranges), writes (atomically),
//! makes directories, moves, deletes, packs and unpacks tar streams and watches,
//! confined to the node agent's file roots (see [`crate::fs`]).
//!
//! Bodies are streamed both ways, never held whole: a read or a download is produced
//! by a blocking thread into a small bounded channel that the response body drains; a
//! write or an upload feeds the request body into one that a blocking thread empties
//! into the file. The request body limit that guards JSON routes does not apply here:
//! these handlers take the body as a stream, which no limit counts.

use std::convert::Infallible;
use std::io::{self, Read, Write};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use cap_std::fs::MetadataExt;
use futures_util::{Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, Problem, Result};
use crate::fs::{FsPath, FsRoots, SET_ID_BITS, create_temporary, fs_error, remove_temporary};
use crate::model::*;

use super::{AppState, Json, Query, Route, route};

/// Bytes read from a file per chunk of a response body: large enough that a
/// gigabyte is a few thousand channel hops, small enough to keep memory per reader low.
const READ_CHUNK: usize = 256 * 1024;
/// Chunks a reading thread may be ahead of the client: with [`READ_CHUNK`], 1 MiB per
/// download at most, and a slow client stops the thread rather than filling memory.
const READ_AHEAD: usize = 4;
/// Request body chunks (each at most what one socket read gave, some tens of KiB)
/// waiting for the writing thread: enough to keep it busy while the next arrive.
const WRITE_QUEUE: usize = 16;

pub(super) const ROUTES: &[Route] = &[
    route!(list_entries),
    route!(stat_entry),
    route!(read_file, write_file),
    route!(make_directory),
    route!(move_entry),
    route!(delete_entry),
    route!(upload_tar),
    route!(download_tar),
    route!(watch),
];

/// Runs blocking file work off the async runtime.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(work).await.map_err(|e| Error::io("a file task", io::Error::other(e)))?
}

/// The entries of a directory, by name (symlinks as symlinks).
#[utoipa::path(get, path = "/v1/fs/entries", tag = "files", params(FsPathQuery),
    responses((status = 200, body = FsEntries),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "forbidden_path"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "not_found")))]
async fn list_entries(State(state): State<AppState>, Query(query): Query<FsPathQuery>) -> Result<Json<FsEntries>> {
    let roots = state.fs.clone();
    let path = roots.resolve(&query.path)?;
    blocking(move || {
        let entries = roots.entries(&path)?;
        Ok(Json(FsEntries { path: path.display().to_string(), entries }))
    })
    .await
}

/// One entry, as `lstat` sees it: a symlink is reported with its target, not followed.
#[utoipa::path(get, path = "/v1/fs/stat", tag = "files", params(FsPathQuery),
    responses((status = 200, body = FsEntry),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "forbidden_path"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "not_found")))]
async fn stat_entry(State(state): State<AppState>, Query(query): Query<FsPathQuery>) -> Result<Json<FsEntry>> {
    let roots = state.fs.clone();
    let path = roots.resolve(&query.path)?;
    blocking(move || roots.stat(&path).map(Json)).await
}

/// A file's bytes, streamed. `Range: bytes=a-b`, `a-` or `-n` answers 206 with that
/// part; a range past the end answers 416.
#[utoipa::path(get, path = "/v1/fs/file", tag = "files", params(FsPathQuery,
        ("Range" = Option<String>, Header, description = "One byte range: `bytes=a-b`, `bytes=a-` or `bytes=-n`")),
    responses((status = 200, content_type = "application/octet-stream", body = Vec<u8>, description = "The whole file"),
        (status = 206, content_type = "application/octet-stream", body = Vec<u8>, description = "The range asked for, with `Content-Range`"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "is_a_directory"),
        (status = 416, body = Problem, content_type = "application/problem+json", description = "invalid_range")))]
async fn read_file(
    State(state): State<AppState>,
    Query(query): Query<FsPathQuery>,
    headers: HeaderMap,
) -> Result<Response> {
    let roots = state.fs.clone();
    let path = roots.resolve(&query.path)?;
    let (file, metadata) = blocking(move || roots.open_file(&path)).await?;
    let size = metadata.len();
    let range = headers.get(header::RANGE).and_then(|value| value.to_str().ok()).and_then(|v| parse_range(v, size));
    let (status, first, length) = match range {
        None => (StatusCode::OK, 0, size),
        Some(Ok((first, last))) => (StatusCode::PARTIAL_CONTENT, first, last - first + 1),
        Some(Err(())) => {
            let error = Error::InvalidRange(format!("the file has {size} bytes; the range asked for is past them"));
            let mut response = error.into_response();
            if let Ok(value) = HeaderValue::from_str(&format!("bytes */{size}")) {
                response.headers_mut().insert(header::CONTENT_RANGE, value);
            }
            return Ok(response);
        }
    };
    let mut response = Response::new(read_body(file, first, length));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    let etag = format!("\"{:x}-{:x}-{:x}.{:x}\"", metadata.ino(), size, metadata.mtime(), metadata.mtime_nsec());
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    if let Some(value) = http_date(metadata.mtime()) {
        headers.insert(header::LAST_MODIFIED, value);
    }
    if status == StatusCode::PARTIAL_CONTENT {
        let value = format!("bytes {first}-{}/{size}", first + length - 1);
        headers.insert(header::CONTENT_RANGE, HeaderValue::from_str(&value).expect("digits are a valid header"));
    }
    Ok(response)
}

/// One `Range` header against a file of `size` bytes: `None` to answer the whole file
/// (no range, a syntax this does not serve, several ranges), `Some(Err)` when it
/// cannot be satisfied, else the first and last byte (inclusive).
fn parse_range(header: &str, size: u64) -> Option<std::result::Result<(u64, u64), ()>> {
    let spec = header.trim().strip_prefix("bytes=")?.trim();
    if spec.contains(',') {
        return None;
    }
    let (first, last) = spec.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        let suffix: u64 = last.parse().ok()?;
        if suffix == 0 || size == 0 {
            return Some(Err(()));
        }
        return Some(Ok((size.saturating_sub(suffix), size - 1)));
    }
    let first: u64 = first.parse().ok()?;
    let last: Option<u64> = if last.is_empty() { None } else { Some(last.parse().ok()?) };
    if last.is_some_and(|last| last < first) {
        return None;
    }
    if first >= size {
        return Some(Err(()));
    }
    Some(Ok((first, last.map_or(size - 1, |last| last.min(size - 1)))))
}

/// `Last-Modified`'s form: `Sun, 06 Nov 1994 08:49:37 GMT`.
fn http_date(seconds: i64) -> Option<HeaderValue> {
    let format = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    let text = time::OffsetDateTime::from_unix_timestamp(seconds).ok()?.format(&format).ok()?;
    HeaderValue::from_str(&text).ok()
}

/// `length` bytes of `file` from `first`, read on a blocking thread a few chunks ahead
/// of the client. The chunks' buffers go back to the thread when the server has sent
/// them ([`PooledChunk`]): a gigabyte reuses a few buffers, warm in the cache, instead
/// of allocating, faulting in and zeroing four thousand (a quarter of the server's CPU
/// time for a `GET`).
fn read_body(mut file: std::fs::File, first: u64, length: u64) -> Body {
    let (sender, receiver) = mpsc::channel::<io::Result<Bytes>>(READ_AHEAD);
    tokio::task::spawn_blocking(move || {
        use std::io::Seek;
        if let Err(error) = file.seek(io::SeekFrom::Start(first)) {
            let _ = sender.blocking_send(Err(error));
            return;
        }
        // Room for every buffer that can be out at once: in the channel, in the
        // server's hands, and the one being filled.
        let (returned, pool) = std::sync::mpsc::sync_channel::<Vec<u8>>(READ_AHEAD + 4);
        let mut file = file.take(length);
        let mut remaining = length;
        while remaining > 0 {
            let size = READ_CHUNK.min(usize::try_from(remaining).unwrap_or(READ_CHUNK));
            let mut buffer = pool.try_recv().unwrap_or_else(|_| vec![0u8; READ_CHUNK]);
            let read = match file.read(&mut buffer[..size]) {
                // Shorter than promised: the file shrank. The body ends short and the
                // client sees a broken transfer rather than wrong bytes.
                Ok(0) => {
                    let _ = sender.blocking_send(Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the file shrank")));
                    return;
                }
                Ok(read) => read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    let _ = sender.blocking_send(Err(error));
                    return;
                }
            };
            remaining -= read as u64;
            let chunk = PooledChunk { buffer: std::mem::take(&mut buffer), len: read, home: returned.clone() };
            if sender.blocking_send(Ok(Bytes::from_owner(chunk))).is_err() {
                return; // the client went
            }
        }
    });
    Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(receiver))
}

/// A buffer lent to the response body: its first `len` bytes are the chunk, and it
/// goes back to the reading thread's pool when the server drops it (or is freed when
/// the thread has gone or its pool is full).
struct PooledChunk {
    buffer: Vec<u8>,
    len: usize,
    home: std::sync::mpsc::SyncSender<Vec<u8>>,
}

impl AsRef<[u8]> for PooledChunk {
    fn as_ref(&self) -> &[u8] {
        &self.buffer[..self.len]
    }
}

impl Drop for PooledChunk {
    fn drop(&mut self) {
        let _ = self.home.try_send(std::mem::take(&mut self.buffer));
    }
}

/// What the request body's reader hands the writing thread.
enum Piece {
    Data(Bytes),
    /// The body is complete: commit. A channel closed without it is an aborted upload.
    End,
}

/// Writes a file from the raw request body: into a temporary file beside it, synced,
/// then renamed over it, so a reader sees the old file or the new one, never a mix.
/// An upload that fails or is cut off leaves nothing behind.
#[utoipa::path(put, path = "/v1/fs/file", tag = "files", params(FsWriteQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The file's new content"),
    responses((status = 200, body = FsEntry, description = "Replaced"), (status = 201, body = FsEntry, description = "Created"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "forbidden_path"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "not_found: the directory is missing (see `parents`)"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "is_a_directory")))]
async fn write_file(
    State(state): State<AppState>,
    Query(query): Query<FsWriteQuery>,
    body: Body,
) -> Result<(StatusCode, Json<FsEntry>)> {
    let roots = state.fs.clone();
    let path = roots.resolve(&query.path)?;
    let mode = query.mode.as_deref().map(parse_mode).transpose()?;
    let (sender, receiver) = mpsc::channel(WRITE_QUEUE);
    let (ready_sender, ready) = oneshot::channel();
    let parents = query.parents;
    let writer =
        tokio::task::spawn_blocking(move || write_blocking(&roots, &path, mode, parents, receiver, ready_sender));
    let join_error = |e: tokio::task::JoinError| Error::io("writing a file", io::Error::other(e));
    // Failures that need no body (a missing directory, a path outside the roots) are
    // told before a byte of it is read.
    if ready.await.is_err() {
        return writer.await.map_err(join_error)?.map(|(status, entry)| (status, Json(entry)));
    }
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Error::InvalidRequest(format!("reading the request body: {e}")))?;
        if sender.send(Piece::Data(chunk)).await.is_err() {
            break; // the writer failed; its error is below
        }
    }
    let _ = sender.send(Piece::End).await;
    drop(sender);
    let (status, entry) = writer.await.map_err(join_error)??;
    Ok((status, Json(entry)))
}

fn parse_mode(text: &str) -> Result<u32> {
    let digits = text.trim().trim_start_matches("0o");
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o7777 && !digits.is_empty() => Ok(mode),
        _ => Err(Error::InvalidRequest(format!("mode {text:?} is not octal permission bits such as 0644"))),
    }
}

/// The writing thread of [`write_file`]: tells `ready` once the temporary file exists
/// (dropping it unsent on failure), writes what arrives, commits on [`Piece::End`].
fn write_blocking(
    roots: &FsRoots,
    path: &FsPath,
    mode: Option<u32>,
    parents: bool,
    mut pieces: mpsc::Receiver<Piece>,
    ready: oneshot::Sender<()>,
) -> Result<(StatusCode, FsEntry)> {
    let (dir, name, path) = roots.write_target(path, parents)?;
    let existing = match dir.symlink_metadata(&name) {
        Ok(metadata) if metadata.is_dir() => {
            return Err(Error::IsADirectory(format!("{} is a directory", path.display())));
        }
        Ok(metadata) => Some(metadata),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(fs_error(e, path.display())),
    };
    // Without set-id bits, given or kept (see `SET_ID_BITS`): `mode=6755` writes 0755.
    let mode = mode.unwrap_or_else(|| match &existing {
        Some(metadata) if metadata.is_file() => metadata.mode() & 0o7777,
        _ => 0o644,
    }) & !SET_ID_BITS;
    let (mut file, temporary) = create_temporary(&dir, &name).map_err(|e| fs_error(e, path.display()))?;
    let _ = ready.send(());
    let committed = (|| {
        let mut behind = WriteBehind::start(&file);
        let mut written = 0u64;
        loop {
            match pieces.blocking_recv() {
                Some(Piece::Data(data)) => {
                    file.write_all(&data).map_err(|e| fs_error(e, path.display()))?;
                    written += data.len() as u64;
                    behind.written(written);
                }
                Some(Piece::End) => break,
                None => return Err(Error::InvalidRequest("the upload was cut off before its end".into())),
            }
        }
        behind.finish();
        // The mode is set on the file, not through its name: umask does not apply.
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
            .map_err(|e| fs_error(e, path.display()))?;
        file.sync_all().map_err(|e| fs_error(e, path.display()))?;
        let replaced = dir.symlink_metadata(&name).is_ok();
        dir.rename(&temporary, &dir, &name).map_err(|e| fs_error(e, path.display()))?;
        Ok(replaced)
    })();
    match committed {
        Ok(replaced) => {
            let entry = roots.stat(&path)?;
            Ok((if replaced { StatusCode::OK } else { StatusCode::CREATED }, entry))
        }
        Err(error) => {
            remove_temporary(&dir, &temporary);
            Err(error)
        }
    }
}

/// Writes an upload back to disk while it arrives, so that the `sync_all` a `PUT`
/// answers after has only the tail left: a thread of its own starts the write-back of
/// each [`SYNC_STEP`] more bytes written. Without it the kernel starts writing back
/// only when a tenth of memory is dirty, and a gigabyte waited for its whole write-back
/// at the end, after the transfer instead of during it. It only starts the write-back
/// ([`start_write_back`]): an `fdatasync` each step also waited for it and flushed the
/// disk's cache 32 times a gigabyte. A C program writing a gigabyte both ways on this
/// machine's disk, six alternated runs each: 679-1,129 MiB/s (median 770) with
/// `fdatasync`, 1,007-1,523 (median 1,120) starting the write-back. The final
/// `sync_all` waits for all of it and flushes once.
struct WriteBehind {
    /// Bytes written so far, each time another step was passed; closed when done.
    progress: Option<std::sync::mpsc::SyncSender<u64>>,
    thread: Option<std::thread::JoinHandle<()>>,
    next: u64,
}

/// Bytes written between two write-backs started behind an upload.
const SYNC_STEP: u64 = 32 << 20;

impl WriteBehind {
    fn start(file: &std::fs::File) -> WriteBehind {
        // Without a second handle or a thread, the upload is synced at its end only.
        let idle = WriteBehind { progress: None, thread: None, next: SYNC_STEP };
        let Ok(handle) = file.try_clone() else { return idle };
        let (progress, steps) = std::sync::mpsc::sync_channel::<u64>(1);
        let thread = std::thread::Builder::new().name("write-behind".into()).stack_size(64 * 1024).spawn(move || {
            // A failed write-back here is found again by the final sync, which answers for it.
            let mut started = 0;
            while let Ok(written) = steps.recv() {
                start_write_back(&handle, started, written);
                started = written;
            }
        });
        match thread {
            Ok(thread) => WriteBehind { progress: Some(progress), thread: Some(thread), next: SYNC_STEP },
            Err(_) => idle,
        }
    }

    fn written(&mut self, total: u64) {
        if total < self.next {
            return;
        }
        self.next = total + SYNC_STEP;
        // Full: a step is under way or asked for already. The next one starts where the
        // last ended, so it covers this too.
        if let Some(progress) = &self.progress {
            let _ = progress.try_send(total);
        }
    }

    /// Waits for the step under way, if any.
    fn finish(&mut self) {
        self.progress = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Starts writing bytes `from..to` of `file` back to disk, without waiting for them or
/// flushing the disk's cache. `POSIX_FADV_DONTNEED` starts the write-back of a range's
/// dirty pages and drops only its clean ones, and these were just written, so the file
/// stays cached (`fincore` shows all of a gigabyte resident after). `sync_file_range`
/// does the same but needs `unsafe`; PostgreSQL flushes with this fadvise where it has
/// no `sync_file_range`. It may block while the disk's queue is full, which is why it
/// runs on a thread of its own.
fn start_write_back(file: &std::fs::File, from: u64, to: u64) {
    use nix::fcntl::{PosixFadviseAdvice, posix_fadvise};
    let (Ok(offset), Ok(length)) = (i64::try_from(from), i64::try_from(to.saturating_sub(from))) else { return };
    let _ = posix_fadvise(file, offset, length, PosixFadviseAdvice::POSIX_FADV_DONTNEED);
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Creates a directory and its missing parents: 201, or 200 when it already was one.
#[utoipa::path(post, path = "/v1/fs/mkdir", tag = "files", params(FsPathQuery),
    responses((status = 201, body = FsEntry, description = "Created"), (status = 200, body = FsEntry, description = "Already a directory"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "conflict: something else is there")))]
async fn make_directory(
    State(state): State<AppState>,
    Query(query): Query<FsPathQuery>,
) -> Result<(StatusCode, Json<FsEntry>)> {
    let roots = state.fs.clone();
    let path = roots.resolve(&query.path)?;
    let (created, entry) = blocking(move || roots.mkdir(&path)).await?;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(entry)))
}

/// Renames `from` to `to` (across directories and roots of one filesystem).
#[utoipa::path(post, path = "/v1/fs/move", tag = "files", request_body = FsMoveRequest,
    responses((status = 200, body = FsEntry, description = "The entry at `to`"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "conflict: `to` exists and `overwrite` is false; directory_not_empty; is_a_directory; not_a_directory")))]
async fn move_entry(State(state): State<AppState>, Json(request): Json<FsMoveRequest>) -> Result<Json<FsEntry>> {
    let roots = state.fs.clone();
    let from = roots.resolve(&request.from)?;
    let to = roots.resolve(&request.to)?;
    blocking(move || roots.rename(&from, &to, request.overwrite).map(Json)).await
}

/// Deletes a file, a symlink (never what it points to) or a directory.
#[utoipa::path(delete, path = "/v1/fs/entry", tag = "files", params(FsDeleteQuery),
    responses((status = 204, description = "Deleted"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "forbidden_path (a root itself, or outside the roots)"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "directory_not_empty without `recursive`")))]
async fn delete_entry(State(state): State<AppState>, Query(query): Query<FsDeleteQuery>) -> Result<StatusCode> {
    let roots = state.fs.clone();
    let path = roots.resolve(&query.path)?;
    blocking(move || roots.delete(&path, query.recursive)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Extracts a tar stream into the directory `path` (made when missing): modes, times,
/// directories and symlinks kept. An entry that would land outside the root (an
/// absolute name, `..`, through a symlink, a symlink pointing out) fails the request.
#[utoipa::path(post, path = "/v1/fs/upload", tag = "files", params(FsPathQuery),
    request_body(content = Vec<u8>, content_type = "application/x-tar", description = "A tar stream"),
    responses((status = 200, body = FsUploadResult),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "forbidden_path, naming the entry")))]
async fn upload_tar(
    State(state): State<AppState>,
    Query(query): Query<FsPathQuery>,
    body: Body,
) -> Result<Json<FsUploadResult>> {
    let roots = state.fs.clone();
    let path = roots.resolve(&query.path)?;
    let (sender, receiver) = mpsc::channel::<io::Result<Bytes>>(WRITE_QUEUE);
    let extractor = tokio::task::spawn_blocking(move || {
        crate::fs::tar::extract(&roots, &path, ChannelReader { receiver, current: Bytes::new(), ended: false })
    });
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| io::Error::other(format!("reading the request body: {e}")));
        if chunk.as_ref().is_ok_and(Bytes::is_empty) {
            continue; // empty is the end marker below
        }
        let failed = chunk.is_err();
        if sender.send(chunk).await.is_err() || failed {
            break; // the extractor stopped (its answer is below), or the body broke
        }
    }
    // The end, said: a channel closed without it (this handler dropped when the client
    // went) is a cut-off stream, not an archive that ended where the cut fell.
    let _ = sender.send(Ok(Bytes::new())).await;
    drop(sender);
    let result = extractor.await.map_err(|e| Error::io("extracting a tar stream", io::Error::other(e)))??;
    Ok(Json(result))
}

/// The request body as a blocking reader for the tar crate; an empty chunk marks
/// its end.
struct ChannelReader {
    receiver: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
    ended: bool,
}

impl Read for ChannelReader {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            if self.ended {
                return Ok(0);
            }
            match self.receiver.blocking_recv() {
                Some(Ok(chunk)) if chunk.is_empty() => self.ended = true,
                Some(chunk) => self.current = chunk?,
                None => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the upload was cut off")),
            }
        }
        let size = buffer.len().min(self.current.len());
        buffer[..size].copy_from_slice(&self.current.split_to(size));
        Ok(size)
    }
}

/// A tar stream of a directory (entries relative to it) or of one file: symlinks as
/// symlinks, modes and times kept.
#[utoipa::path(get, path = "/v1/fs/download", tag = "files", params(FsPathQuery),
    responses((status = 200, content_type = "application/x-tar", body = Vec<u8>, description = "A tar stream"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "not_found")))]
async fn download_tar(State(state): State<AppState>, Query(query): Query<FsPathQuery>) -> Result<Response> {
    let roots = state.fs.clone();
    let path = roots.resolve(&query.path)?;
    // What fails at once (missing, outside) is a problem, not a broken stream.
    let checked = roots.clone();
    let probe = path.clone();
    blocking(move || checked.stat(&probe)).await?;
    let (sender, receiver) = mpsc::channel::<io::Result<Bytes>>(READ_AHEAD);
    tokio::task::spawn_blocking(move || {
        let mut writer = ChannelWriter { sender: sender.clone(), buffer: BytesMut::new() };
        if let Err(error) = crate::fs::tar::pack(&roots, &path, &mut writer)
            .and_then(|()| writer.flush().map_err(|e| fs_error(e, path.display())))
        {
            tracing::warn!(%error, path = path.display(), "a download stopped");
            let _ = sender.blocking_send(Err(io::Error::other(error.to_string())));
        }
    });
    let mut response = Response::new(Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(receiver)));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-tar"));
    Ok(response)
}

/// The tar builder's output, in chunks of [`READ_CHUNK`] to the response body.
struct ChannelWriter {
    sender: mpsc::Sender<io::Result<Bytes>>,
    buffer: BytesMut,
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(data);
        if self.buffer.len() >= READ_CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = self.buffer.split().freeze();
        self.sender
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
    }
}

/// Changes under `path` as server-sent events (`created`, `modified`, `removed`,
/// `renamed` with `from`; `gap` when events were lost), in order. The watch is in
/// place when the response starts.
#[utoipa::path(get, path = "/v1/fs/watch", tag = "files", params(FsWatchQuery),
    responses((status = 200, content_type = "text/event-stream", body = FsEvent),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "not_found")))]
async fn watch(
    State(state): State<AppState>,
    Query(query): Query<FsWatchQuery>,
    headers: axum::http::HeaderMap,
) -> Result<Sse<impl Stream<Item = std::result::Result<Event, Infallible>>>> {
    let roots: Arc<FsRoots> = state.fs.clone();
    let path = roots.resolve(&query.path)?;
    let recursive = query.recursive;
    let watch = blocking(move || crate::fs::watch::start(roots.watch_path(&path)?, recursive)).await?;
    struct Cursor {
        watch: crate::fs::watch::FsWatch,
        sequence: u64,
        shutdown: tokio_util::sync::CancellationToken,
        _following: crate::activity::Following,
    }
    let following = state.activity.follow(&headers);
    let cursor = Cursor { watch, sequence: 0, shutdown: state.shutdown.clone(), _following: following };
    let stream = futures_util::stream::unfold(cursor, |mut cursor| async move {
        let event = tokio::select! {
            event = cursor.watch.events.recv() => event?,
            () = cursor.shutdown.cancelled() => return None,
        };
        cursor.sequence += 1;
        let kind = serde_json::to_value(event.kind).ok().and_then(|v| v.as_str().map(str::to_string));
        let data = serde_json::to_string(&event).expect("events serialize");
        let sse = Event::default().id(cursor.sequence.to_string()).event(kind.unwrap_or_default()).data(data);
        Some((Ok(sse), cursor))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Some(Ok((0, 9))));
        assert_eq!(parse_range("bytes=90-", 100), Some(Ok((90, 99))));
        assert_eq!(parse_range("bytes=90-200", 100), Some(Ok((90, 99))));
        assert_eq!(parse_range("bytes=-10", 100), Some(Ok((90, 99))));
        assert_eq!(parse_range("bytes=-200", 100), Some(Ok((0, 99))));
        assert_eq!(parse_range("bytes=100-", 100), Some(Err(())));
        assert_eq!(parse_range("bytes=-0", 100), Some(Err(())));
        assert_eq!(parse_range("bytes=5-1", 100), None);
        assert_eq!(parse_range("bytes=0-1,5-6", 100), None);
        assert_eq!(parse_range("items=0-1", 100), None);
    }

    #[test]
    fn modes() {
        assert_eq!(parse_mode("0644").unwrap(), 0o644);
        assert_eq!(parse_mode("755").unwrap(), 0o755);
        assert!(parse_mode("0999").is_err());
        assert!(parse_mode("").is_err());
        assert!(parse_mode("17777").is_err());
    }
}
