//! Tar streams for `agentplane cp`: a local directory packed on a blocking thread into
//! the body of an upload, and a download unpacked on a blocking thread beneath a local
//! directory. Neither is ever whole in memory: chunks pass through a small bounded
//! channel between the thread and the socket.
//!
//! Unpacking takes the care the node agent takes with an upload, because the other
//! side is a remote party: an entry with an absolute name or a `..`, or one whose path
//! passes through a symlink (one the archive itself made a moment ago, or one that was
//! there), is refused and ends the copy; a file never replaces a directory, and
//! replaces a symlink rather than writing through it; set-id bits are dropped. A
//! malicious node agent cannot write outside the destination. Nor can it make this
//! side hold much: the download is read through the node agent's
//! [`TarGuard`](agentplane_node_agent::fs::tar_guard), which refuses a long-name or
//! PAX header declaring more than 64 KiB before the tar crate reads it whole, and
//! the names it sends are quoted and cut short in every message.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use agentplane_node_agent::fs::tar_guard::{TarGuard, clipped, quoted, refusal};
use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Bytes a chunk holds on its way between the thread and the socket.
pub const CHUNK: usize = 64 * 1024;
/// Chunks in flight between the thread and the socket: enough that neither waits on
/// the other for every chunk, and at most half a MiB of a copy in memory.
const IN_FLIGHT: usize = 8;
/// The permission bits kept from an archive: not set-uid, set-gid or sticky, which a
/// file from a sandbox has no business carrying onto this machine.
const KEPT_MODE: u32 = 0o777;

/// What a packed upload held.
#[derive(Debug, Default)]
pub struct Packed {
    /// Files, directories and symlinks.
    pub entries: u64,
    /// Sockets, FIFOs and devices: a tar of them would be of no use on the other side.
    pub skipped: Vec<PathBuf>,
}

/// `source`, a local directory, as a tar stream (the body of an upload), and the
/// thread writing it. Entries are named relative to `source`, beneath `prefix` when given
/// (then `prefix` itself is the first entry, with `source`'s mode). Symlinks are
/// archived as symlinks, never followed.
///
/// When packing fails, the stream fails too (instead of ending as a shorter archive
/// that would look complete), and the thread's error says why.
pub fn pack(
    source: PathBuf,
    prefix: Option<PathBuf>,
) -> (impl Stream<Item = io::Result<Bytes>> + Send + 'static, JoinHandle<anyhow::Result<Packed>>) {
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(IN_FLIGHT);
    let thread = tokio::task::spawn_blocking(move || {
        let mut builder = tar::Builder::new(ChannelWriter { tx, buffer: Vec::with_capacity(CHUNK), failed: false });
        builder.follow_symlinks(false);
        let packed = pack_into(&mut builder, &source, prefix.as_deref());
        if let Err(error) = &packed {
            builder.get_mut().fail(format!("{error:#}"));
        }
        packed
    });
    let chunks = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|chunk| (chunk, rx)) });
    (chunks, thread)
}

fn pack_into(
    builder: &mut tar::Builder<ChannelWriter>,
    source: &Path,
    prefix: Option<&Path>,
) -> anyhow::Result<Packed> {
    let mut packed = Packed::default();
    if let Some(prefix) = prefix {
        builder.append_dir(prefix, source).with_context(|| format!("reading {}", source.display()))?;
        packed.entries += 1;
    }
    walk(builder, source, prefix.unwrap_or(Path::new("")), &mut packed)?;
    builder.finish().context("finishing the archive")?;
    builder.get_mut().flush().context("sending the archive")?;
    Ok(packed)
}

/// Appends what `dir` holds, named beneath `name`, in name order (so that two copies
/// of the same tree are the same archive).
fn walk<W: Write>(builder: &mut tar::Builder<W>, dir: &Path, name: &Path, packed: &mut Packed) -> anyhow::Result<()> {
    let reading = || format!("reading {}", dir.display());
    let mut children =
        fs::read_dir(dir).with_context(reading)?.collect::<io::Result<Vec<_>>>().with_context(reading)?;
    children.sort_by_key(|child| child.file_name());
    for child in children {
        let path = child.path();
        let entry_name = name.join(child.file_name());
        let kind = child.file_type().with_context(|| format!("reading {}", path.display()))?;
        if kind.is_dir() {
            builder.append_dir(&entry_name, &path).with_context(|| format!("reading {}", path.display()))?;
            packed.entries += 1;
            walk(builder, &path, &entry_name, packed)?;
        } else if kind.is_file() || kind.is_symlink() {
            builder.append_path_with_name(&path, &entry_name).with_context(|| format!("reading {}", path.display()))?;
            packed.entries += 1;
        } else {
            packed.skipped.push(path);
        }
    }
    Ok(())
}

/// The archive's bytes into the channel, a chunk at a time.
struct ChannelWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buffer: Vec<u8>,
    /// Set once the stream was told of a failure: nothing may follow it (the builder
    /// writes the archive's end when it is dropped).
    failed: bool,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK)));
        self.tx.blocking_send(Ok(chunk)).map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the upload ended"))
    }

    /// Ends the stream with an error, so that the upload fails rather than delivering
    /// a short archive.
    fn fail(&mut self, message: String) {
        self.failed = true;
        self.buffer.clear();
        let _ = self.tx.blocking_send(Err(io::Error::other(message)));
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.failed {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the upload failed"));
        }
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= CHUNK {
            self.send()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the upload failed"));
        }
        self.send()
    }
}

/// What an unpacked download held.
#[derive(Debug, Default)]
pub struct Unpacked {
    /// Files, directories, symlinks and hard links written.
    pub entries: u64,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Entries left out, by name, with why: kinds this side does not make (FIFOs,
    /// devices), and symlinks that lead outside the destination.
    pub skipped: Vec<(String, &'static str)>,
}

/// A thread unpacking the tar stream fed to the sender into `root` (created when
/// missing; its parent must exist). Dropping the sender ends the stream. The
/// thread's error names the entry that was refused, and why.
pub fn unpack(root: PathBuf) -> (mpsc::Sender<Bytes>, JoinHandle<anyhow::Result<Unpacked>>) {
    let (tx, rx) = mpsc::channel::<Bytes>(IN_FLIGHT);
    let thread = tokio::task::spawn_blocking(move || {
        let reader = ChannelReader { rx, current: Bytes::new() };
        unpack_from(reader, &root)
    });
    (tx, thread)
}

/// Unpacks the archive `reader` holds into `root`; see [`unpack`].
pub fn unpack_from(reader: impl Read, root: &Path) -> anyhow::Result<Unpacked> {
    match fs::metadata(root) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => bail!("{} is not a directory", root.display()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir(root).with_context(|| format!("creating {}", root.display()))?
        }
        Err(e) => return Err(anyhow!(e).context(format!("reading {}", root.display()))),
    }
    let mut archive = tar::Archive::new(TarGuard::new(reader));
    let mut unpacked = Unpacked::default();
    // Directory modes are set last, deepest first: a directory without write
    // permission would refuse what the archive puts in it after it.
    let mut directories: Vec<(PathBuf, u32)> = Vec::new();
    for entry in archive.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(unreadable)?;
        // Up to 64 KiB long (the guard's limit), and anything at all: cut and escaped.
        let shown = quoted(&String::from_utf8_lossy(&entry.path_bytes()));
        let refuse = |why: Refused| anyhow!("the node agent sent the tar entry {shown}, {why}: refused");
        let relative = confined(&entry.path().map_err(|e| refuse(Refused::NameUnreadable(e)))?).map_err(refuse)?;
        let header = entry.header();
        let mode = header.mode().unwrap_or(0o644) & KEPT_MODE;
        let mtime = header.mtime().ok();
        match header.entry_type() {
            tar::EntryType::Directory => {
                let path = beneath(root, &relative).map_err(refuse)?;
                if relative.as_os_str().is_empty() {
                    directories.push((path, mode));
                    continue;
                }
                match fs::symlink_metadata(&path) {
                    Ok(meta) if meta.is_dir() => {}
                    Ok(meta) if meta.file_type().is_symlink() => {
                        return Err(refuse(Refused::SymlinkHere));
                    }
                    Ok(_) => bail!("{}: cannot replace a file with a directory", named(&path)),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        fs::create_dir(&path).with_context(|| format!("creating {}", named(&path)))?
                    }
                    Err(e) => return Err(anyhow!(e).context(format!("reading {}", named(&path)))),
                }
                directories.push((path, mode));
            }
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                let path = file_path(root, &relative).map_err(refuse)?;
                clear(&path)?;
                let mut file = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .with_context(|| format!("creating {}", named(&path)))?;
                let written = io::copy(&mut entry, &mut file).with_context(|| format!("writing {}", named(&path)))?;
                file.set_permissions(fs::Permissions::from_mode(mode))
                    .with_context(|| format!("setting the mode of {}", named(&path)))?;
                if let Some(mtime) = mtime {
                    let _ = file.set_modified(UNIX_EPOCH + Duration::from_secs(mtime));
                }
                unpacked.bytes += written;
            }
            tar::EntryType::Symlink => {
                let target =
                    entry.link_name().ok().flatten().ok_or_else(|| refuse(Refused::SymlinkWithoutTarget))?.into_owned();
                // As the node agent refuses an upload's link out of its root: a link
                // is harmless until followed, but a person following one from the
                // copy should land in the copy. Left out, not fatal: a tree with a
                // link to `/usr/bin/python3` is still worth having.
                let depth = relative.components().count().saturating_sub(1);
                if !stays_inside(&target, depth) {
                    let target = quoted(&target.to_string_lossy());
                    unpacked.skipped.push((format!("{shown} -> {target}"), "it leads outside the copy"));
                    continue;
                }
                let path = file_path(root, &relative).map_err(refuse)?;
                clear(&path)?;
                std::os::unix::fs::symlink(&target, &path).with_context(|| format!("creating {}", named(&path)))?;
            }
            tar::EntryType::Link => {
                let target =
                    entry.link_name().ok().flatten().ok_or_else(|| refuse(Refused::LinkWithoutTarget))?.into_owned();
                let link_to = |why| refuse(Refused::LinkTo(Box::new(why)));
                let target = confined(&target).map_err(link_to)?;
                let original = file_path(root, &target).map_err(link_to)?;
                if !fs::symlink_metadata(&original).is_ok_and(|m| m.is_file()) {
                    return Err(refuse(Refused::LinkToNonFile(named(&target))));
                }
                let path = file_path(root, &relative).map_err(refuse)?;
                clear(&path)?;
                fs::hard_link(&original, &path).with_context(|| format!("creating {}", named(&path)))?;
            }
            _ => {
                unpacked.skipped.push((shown, "not a file, directory or link"));
                continue;
            }
        }
        unpacked.entries += 1;
    }
    for (path, mode) in directories.iter().rev() {
        fs::set_permissions(path, fs::Permissions::from_mode(*mode))
            .with_context(|| format!("setting the mode of {}", named(path)))?;
    }
    Ok(unpacked)
}

/// A download that cannot be read as an archive: the guard's refusal as the one
/// line it is, anything else the tar crate says cut short.
fn unreadable(error: io::Error) -> anyhow::Error {
    match refusal(&error) {
        Some(refused) => anyhow!("the node agent's tar stream is refused: {refused}"),
        None => anyhow!("reading the archive: {}", clipped(&error.to_string())),
    }
}

/// A local path holding a name from the archive, for a message: quoted, cut short.
fn named(path: &Path) -> String {
    quoted(&path.to_string_lossy())
}

/// Why an entry of a download is refused, as said after its quoted name: `the node
/// agent sent the tar entry NAME, WHY: refused`. Names of local paths are quoted and
/// cut short ([`named`]).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("whose name cannot be read ({0})")]
    NameUnreadable(#[source] io::Error),
    #[error("whose name climbs out with `..`")]
    ClimbsOut,
    #[error("whose name is absolute")]
    Absolute,
    #[error("whose path passes through the symlink {0}")]
    ThroughSymlink(String),
    #[error("whose path passes through the file {0}")]
    ThroughFile(String),
    #[error("whose directory {dir} cannot be created: {source}")]
    DirectoryNotCreated {
        dir: String,
        #[source]
        source: io::Error,
    },
    #[error("whose directory {dir} cannot be read: {source}")]
    DirectoryUnreadable {
        dir: String,
        #[source]
        source: io::Error,
    },
    #[error("which names the destination itself as a file")]
    DestinationAsFile,
    #[error("which is a symlink here: nothing is written through one")]
    SymlinkHere,
    #[error("a symlink without a target")]
    SymlinkWithoutTarget,
    #[error("a hard link without a target")]
    LinkWithoutTarget,
    #[error("a hard link to a name {0}")]
    LinkTo(#[source] Box<Refused>),
    #[error("a hard link to {0}, which is not a file it sent")]
    LinkToNonFile(String),
}

/// An archive name as a path relative to the destination, or why it is refused.
/// `.` components are dropped; an empty result names the destination itself.
pub fn confined(name: &Path) -> Result<PathBuf, Refused> {
    let mut relative = PathBuf::new();
    for component in name.components() {
        match component {
            Component::Normal(part) => relative.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err(Refused::ClimbsOut),
            Component::RootDir | Component::Prefix(_) => return Err(Refused::Absolute),
        }
    }
    Ok(relative)
}

/// Whether a symlink `depth` directories below the destination, to `target`, leads
/// to a place inside the destination, as the node agent decides it for an upload:
/// relative, its `..`s only at the start (after a name, a `..` would climb out of
/// wherever that name leads, another symlink perhaps) and no more of them than
/// `depth`. The link's own directory is a real one (nothing is made through a
/// symlink), so its leading `..`s go exactly where they say.
fn stays_inside(target: &Path, depth: usize) -> bool {
    let mut climbs = 0;
    let mut named = false;
    for component in target.components() {
        match component {
            Component::Normal(_) => named = true,
            Component::CurDir => {}
            Component::ParentDir if named => return false,
            Component::ParentDir => climbs += 1,
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    climbs <= depth
}

/// `root/relative`, after making sure that every directory on the way is a real
/// directory below `root` (missing ones are created): never a symlink.
fn beneath(root: &Path, relative: &Path) -> Result<PathBuf, Refused> {
    let mut path = root.to_path_buf();
    let mut parts = relative.components().peekable();
    while let Some(part) = parts.next() {
        path.push(part);
        if parts.peek().is_none() {
            break;
        }
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => {}
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(Refused::ThroughSymlink(named(&path)));
            }
            Ok(_) => return Err(Refused::ThroughFile(named(&path))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir(&path).map_err(|source| Refused::DirectoryNotCreated { dir: named(&path), source })?
            }
            Err(source) => return Err(Refused::DirectoryUnreadable { dir: named(&path), source }),
        }
    }
    Ok(path)
}

/// Where a non-directory entry goes: [`beneath`], and never the destination itself.
fn file_path(root: &Path, relative: &Path) -> Result<PathBuf, Refused> {
    if relative.as_os_str().is_empty() {
        return Err(Refused::DestinationAsFile);
    }
    beneath(root, relative)
}

/// Makes room for a file, symlink or link at `path`: what is there goes, unless it is
/// a directory. A symlink there is removed, not followed.
fn clear(path: &Path) -> anyhow::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => bail!("{}: cannot replace a directory with a file", named(path)),
        Ok(_) => fs::remove_file(path).with_context(|| format!("replacing {}", named(path))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow!(e).context(format!("reading {}", named(path)))),
    }
}

/// The download's chunks as a `Read`, on the unpacking thread.
struct ChannelReader {
    rx: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.current.len());
        out[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use futures_util::StreamExt;

    use super::*;

    /// A header named exactly `name`, bytes as given: the builder refuses to write
    /// the names a malicious node agent would send.
    fn raw_header(name: &str, kind: tar::EntryType, size: u64, link: Option<&str>) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        let old = header.as_old_mut();
        old.name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(link) = link {
            old.linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        header.set_entry_type(kind);
        header.set_size(size);
        header.set_mode(0o644);
        header.set_cksum();
        header
    }

    fn archive(entries: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, kind, data, link) in entries {
            builder.append(&raw_header(name, *kind, data.len() as u64, *link), *data).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn refused(entries: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> (String, tempfile::TempDir) {
        refused_bytes(&archive(entries))
    }

    fn refused_bytes(archive: &[u8]) -> (String, tempfile::TempDir) {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("dst");
        let error = unpack_from(archive, &root).expect_err("refused");
        (format!("{error:#}"), scratch)
    }

    #[test]
    fn names_that_leave_the_destination_are_refused() {
        use tar::EntryType::{Directory, Regular, Symlink};
        for name in ["../x", "a/../../x", "/etc/x", "./../x"] {
            let (error, scratch) = refused(&[(name, Regular, b"evil", None)]);
            assert!(error.contains("refused"), "{name}: {error}");
            assert!(!scratch.path().join("x").exists(), "{name} was written");
        }
        // A symlink the archive makes, then a file written through it.
        let (error, scratch) = refused(&[
            ("sub/", Directory, b"", None),
            ("link", Symlink, b"", Some("sub")),
            ("link/x", Regular, b"evil", None),
        ]);
        assert!(error.contains("passes through the symlink"), "{error}");
        assert!(!scratch.path().join("dst/sub/x").exists());
        // One that leads out is not even made: what comes under its name stays inside.
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("dst");
        unpack_from(&archive(&[("link", Symlink, b"", Some("..")), ("link/x", Regular, b"evil", None)])[..], &root)
            .unwrap();
        assert!(!scratch.path().join("x").exists());
        assert!(fs::symlink_metadata(root.join("link")).unwrap().is_dir());
        // A symlink to a file outside, then a file of the same name: the link is
        // replaced, the file outside untouched.
        let scratch = tempfile::tempdir().unwrap();
        let outside = scratch.path().join("outside");
        fs::write(&outside, "mine").unwrap();
        let root = scratch.path().join("dst");
        let target = outside.to_str().unwrap();
        unpack_from(&archive(&[("f", Symlink, b"", Some(target)), ("f", Regular, b"theirs", None)])[..], &root)
            .unwrap();
        assert_eq!(fs::read_to_string(&outside).unwrap(), "mine");
        assert_eq!(fs::read_to_string(root.join("f")).unwrap(), "theirs");
        assert!(!fs::symlink_metadata(root.join("f")).unwrap().file_type().is_symlink());
    }

    /// A node agent's archive whose GNU long-name header declares a GiB: refused at
    /// that header, in one short line, having read the header and no more of it.
    #[test]
    fn a_gib_long_name_is_refused_at_its_header() {
        struct Counted<R>(R, std::rc::Rc<std::cell::Cell<u64>>);
        impl<R: Read> Read for Counted<R> {
            fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
                let read = self.0.read(buffer)?;
                self.1.set(self.1.get() + read as u64);
                Ok(read)
            }
        }
        let mut header = tar::Header::new_gnu();
        header.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
        header.set_entry_type(tar::EntryType::GNULongName);
        header.set_size(1 << 30);
        header.set_cksum();
        // The GiB made as it is read; never held.
        let stream = header.as_bytes().chain(io::repeat(b'a').take(1 << 30));
        let read = std::rc::Rc::new(std::cell::Cell::new(0));
        let scratch = tempfile::tempdir().unwrap();
        let error = unpack_from(Counted(stream, read.clone()), &scratch.path().join("dst")).expect_err("refused");
        assert_eq!(read.get(), 512, "read past the header");
        let message = format!("{error:#}");
        assert_eq!(
            message,
            "the node agent's tar stream is refused: a GNU long-name header at byte 0 of the tar stream declares \
             1073741824 bytes, more than the 65536 taken"
        );
    }

    /// Names from the archive in messages are quoted and cut short, however long.
    #[test]
    fn a_long_name_is_cut_short_in_the_refusal() {
        let name = format!("../{}\0", "x".repeat(60_000));
        let mut long_name = tar::Header::new_gnu();
        long_name.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
        long_name.set_entry_type(tar::EntryType::GNULongName);
        long_name.set_size(name.len() as u64);
        long_name.set_cksum();
        let mut builder = tar::Builder::new(Vec::new());
        builder.append(&long_name, name.as_bytes()).unwrap();
        builder.append(&raw_header("x", tar::EntryType::Regular, 1, None), &b"x"[..]).unwrap();
        let (error, _scratch) = refused_bytes(&builder.into_inner().unwrap());
        assert!(error.len() < 512, "{} bytes: {error}", error.len());
        assert!(error.contains("…\" (60003 bytes), whose name climbs out with `..`: refused"), "{error}");
    }

    #[test]
    fn symlinks_out_of_the_copy_are_left_out() {
        use tar::EntryType::{Directory, Symlink};
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("dst");
        let entries = [
            ("sub/", Directory, &b""[..], None),
            ("etc", Symlink, b"", Some("/etc")),
            ("sub/up", Symlink, b"", Some("../..")),
            ("sub/sneaky", Symlink, b"", Some("a/../../../x")),
            // Inside on paper, but `..` after a name climbs from wherever that leads.
            ("sub/bent", Symlink, b"", Some("sibling/../y")),
            ("sub/sibling", Symlink, b"", Some("../etc")),
            ("sub/self", Symlink, b"", Some(".")),
        ];
        let unpacked = unpack_from(&archive(&entries)[..], &root).unwrap();
        let skipped: Vec<&str> = unpacked.skipped.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            skipped,
            [
                r#""etc" -> "/etc""#,
                r#""sub/up" -> "../..""#,
                r#""sub/sneaky" -> "a/../../../x""#,
                r#""sub/bent" -> "sibling/../y""#
            ]
        );
        for gone in ["etc", "sub/up", "sub/sneaky", "sub/bent"] {
            assert!(fs::symlink_metadata(root.join(gone)).is_err(), "{gone}");
        }
        assert_eq!(fs::read_link(root.join("sub/sibling")).unwrap(), Path::new("../etc"));
        assert_eq!(fs::read_link(root.join("sub/self")).unwrap(), Path::new("."));
    }

    #[test]
    fn a_symlink_already_in_the_destination_is_not_written_through() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("dst");
        let away = scratch.path().join("away");
        fs::create_dir_all(&root).unwrap();
        fs::create_dir(&away).unwrap();
        symlink(&away, root.join("sub")).unwrap();
        let error = unpack_from(&archive(&[("sub/x", tar::EntryType::Regular, b"evil", None)])[..], &root)
            .expect_err("refused");
        assert!(format!("{error:#}").contains("symlink"), "{error:#}");
        assert!(!away.join("x").exists());
        let error =
            unpack_from(&archive(&[("sub/", tar::EntryType::Directory, b"", None)])[..], &root).expect_err("refused");
        assert!(format!("{error:#}").contains("symlink"), "{error:#}");
    }

    #[test]
    fn set_id_bits_are_dropped_and_hard_links_stay_inside() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().join("dst");
        let mut header = raw_header("tool", tar::EntryType::Regular, 2, None);
        header.set_mode(0o4755);
        header.set_cksum();
        let mut builder = tar::Builder::new(Vec::new());
        builder.append(&header, &b"hi"[..]).unwrap();
        builder.append(&raw_header("again", tar::EntryType::Link, 0, Some("tool")), &b""[..]).unwrap();
        unpack_from(&builder.into_inner().unwrap()[..], &root).unwrap();
        assert_eq!(fs::metadata(root.join("tool")).unwrap().permissions().mode() & 0o7777, 0o755);
        assert_eq!(fs::read(root.join("again")).unwrap(), b"hi");
        let (error, _scratch) = refused(&[("l", tar::EntryType::Link, b"", Some("/etc/passwd"))]);
        assert!(error.contains("absolute"), "{error}");
    }

    /// A tree with a subdirectory, an executable, a symlink and a read-only directory
    /// packed and unpacked again: the same bytes, modes and link.
    #[test]
    fn a_tree_packs_and_unpacks_to_the_same() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let source = scratch.path().join("tree");
        fs::create_dir_all(source.join("sub/deeper")).unwrap();
        fs::write(source.join("a.txt"), "alpha").unwrap();
        fs::write(source.join("sub/run.sh"), "#!/bin/sh\necho hi\n").unwrap();
        fs::set_permissions(source.join("sub/run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
        let big: Vec<u8> = (0..3 * CHUNK + 17).map(|i| (i % 251) as u8).collect();
        fs::write(source.join("sub/deeper/big.bin"), &big).unwrap();
        symlink("../a.txt", source.join("sub/link")).unwrap();
        fs::set_permissions(source.join("sub/deeper"), fs::Permissions::from_mode(0o555)).unwrap();

        let packed = runtime.block_on(async {
            let (stream, thread) = pack(source.clone(), Some("tree".into()));
            let mut bytes = Vec::new();
            let mut stream = Box::pin(stream);
            while let Some(chunk) = stream.next().await {
                bytes.extend_from_slice(&chunk.unwrap());
            }
            let packed = thread.await.unwrap().unwrap();
            let target = scratch.path().join("out");
            let (tx, unpacking) = unpack(target.clone());
            for chunk in bytes.chunks(1000) {
                tx.send(Bytes::copy_from_slice(chunk)).await.unwrap();
            }
            drop(tx);
            let unpacked = unpacking.await.unwrap().unwrap();
            assert_eq!(unpacked.bytes, (5 + 18 + big.len()) as u64);
            packed
        });
        assert_eq!(packed.entries, 7, "tree, a.txt, sub, deeper, big.bin, link, run.sh");
        let out = scratch.path().join("out/tree");
        assert_eq!(fs::read(out.join("sub/deeper/big.bin")).unwrap(), big);
        assert_eq!(fs::read_to_string(out.join("a.txt")).unwrap(), "alpha");
        assert_eq!(fs::metadata(out.join("sub/run.sh")).unwrap().permissions().mode() & 0o777, 0o755);
        assert_eq!(fs::metadata(out.join("sub/deeper")).unwrap().permissions().mode() & 0o777, 0o555);
        assert_eq!(fs::read_link(out.join("sub/link")).unwrap(), Path::new("../a.txt"));
        // So that the scratch directory can be removed.
        fs::set_permissions(source.join("sub/deeper"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(out.join("sub/deeper"), fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_failed_pack_fails_the_body_instead_of_ending_it() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let (stream, thread) = pack("/nonexistent/agentplane-test".into(), None);
            let mut stream = Box::pin(stream);
            let mut failed = false;
            while let Some(chunk) = stream.next().await {
                failed |= chunk.is_err();
            }
            assert!(failed, "the body ended as if complete");
            let error = thread.await.unwrap().expect_err("reading a missing directory fails");
            assert!(format!("{error:#}").contains("/nonexistent/agentplane-test"), "{error:#}");
        });
    }
}
