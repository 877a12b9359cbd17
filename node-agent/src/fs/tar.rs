//! Tar streams in and out of a root: `POST /v1/fs/upload` extracts one into a
//! directory, `GET /v1/fs/download` packs a directory or a file into one.
//!
//! Extraction does not trust the tar crate's own path checks (`unpack_in`): every
//! entry is placed by walking its directories one name at a time from the upload
//! directory's handle with `O_NOFOLLOW`, so it can never be written through a symlink,
//! whether an earlier entry made it or it was there before. Names with `..` or a
//! leading `/` are refused, and so is a symlink whose target would leave the root.
//! Directories get their modes and times last, deepest first, so a read-only
//! directory can still be filled; set-id bits are dropped. The stream is read through
//! [`super::tar_guard`], so a header declaring a GiB-long name is refused, not held,
//! and names are cut short in messages. Both directions run on a blocking thread.

use std::io::{self, Read, Write};
use std::path::{Component, Path};
use std::time::{Duration, SystemTime};

use cap_fs_ext::{DirExt, SystemTimeSpec};
use cap_std::fs::{Dir, MetadataExt, OpenOptionsExt};

use super::tar_guard::{TarGuard, clipped, quoted, refusal};
use super::{FsPath, FsRoots, SET_ID_BITS, create_temporary, fs_error, open_dir_nofollow, remove_temporary};
use crate::error::{Error, Result};
use crate::model::FsUploadResult;

/// Extracts the tar stream `input` into the directory `path` (created when missing).
/// The first refused entry fails the whole request; what came before it stays.
pub fn extract(roots: &FsRoots, path: &FsPath, input: impl Read) -> Result<FsUploadResult> {
    let root = roots.root_dir(path);
    if !path.is_root() {
        root.create_dir_all(path.relative()).map_err(|e| fs_error(e, path.display()))?;
    }
    let target = roots.open_dir(path)?;
    // How deep the upload directory really is in its root: how many `..` a symlink
    // made at its top may climb and still point inside the root.
    let depth = root
        .canonicalize(path.relative())
        .map_err(|e| fs_error(e, path.display()))?
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count();
    // Through the guard: a long name or PAX header of a GiB is refused at its header,
    // not read whole into memory by the tar crate.
    let mut archive = tar::Archive::new(TarGuard::new(input));
    let mut result = FsUploadResult { entries: 0, bytes: 0 };
    let mut directories: Vec<(Vec<String>, u32, u64)> = Vec::new();
    for entry in archive.entries().map_err(invalid)? {
        let mut entry = entry.map_err(invalid)?;
        let raw_name = entry.path().map_err(invalid)?.into_owned();
        // Up to 64 KiB long (the guard's limit): cut short for messages.
        let shown = quoted(&raw_name.to_string_lossy());
        let kind = entry.header().entry_type();
        if matches!(kind, tar::EntryType::XGlobalHeader | tar::EntryType::XHeader) {
            continue;
        }
        let components = entry_components(&raw_name)
            .ok_or_else(|| Error::ForbiddenPath(format!("tar entry {shown} leaves the upload directory")))?;
        let mode = entry.header().mode().unwrap_or(0o644) & 0o7777 & !SET_ID_BITS;
        let mtime = entry.header().mtime().unwrap_or(0);
        let Some((name, parents)) = components.split_last() else {
            // `./`: the upload directory itself.
            if kind.is_dir() {
                result.entries += 1;
            }
            continue;
        };
        let dir = walk(&target, parents, true, &shown)?;
        match kind {
            tar::EntryType::Directory => {
                match dir.symlink_metadata(name) {
                    Ok(metadata) if metadata.is_dir() => {}
                    Ok(metadata) if metadata.file_type().is_symlink() => {
                        return Err(Error::ForbiddenPath(format!(
                            "tar entry {shown} is a directory where a symlink is"
                        )));
                    }
                    Ok(_) => return Err(Error::Conflict(format!("tar entry {shown}: a file is in the way"))),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        dir.create_dir(name).map_err(|e| entry_error(e, &shown))?
                    }
                    Err(e) => return Err(entry_error(e, &shown)),
                }
                directories.push((components.clone(), mode, mtime));
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                make_room(&dir, name, &shown)?;
                let (mut file, temporary) = create_temporary(&dir, name).map_err(|e| entry_error(e, &shown))?;
                let written = (|| {
                    let bytes = io::copy(&mut entry, &mut file)?;
                    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
                    file.set_times(std::fs::FileTimes::new().set_modified(time_of(mtime)))?;
                    dir.rename(&temporary, &dir, name)?;
                    Ok::<_, io::Error>(bytes)
                })();
                match written {
                    Ok(bytes) => result.bytes += bytes,
                    Err(error) => {
                        remove_temporary(&dir, &temporary);
                        return Err(entry_error(error, &shown));
                    }
                }
            }
            tar::EntryType::Symlink => {
                let link = entry
                    .link_name()
                    .map_err(invalid)?
                    .ok_or_else(|| Error::InvalidRequest(format!("tar entry {shown} is a symlink without a target")))?;
                if !target_stays_inside(&link, depth + parents.len()) {
                    return Err(Error::ForbiddenPath(format!(
                        "tar entry {shown} is a symlink to {}, outside the file root",
                        quoted(&link.to_string_lossy())
                    )));
                }
                make_room(&dir, name, &shown)?;
                // `symlink_contents`: the target is checked above, lexically, against
                // the real depth; cap-std's own `symlink` refuses any absolute target.
                dir.symlink_contents(&link, name).map_err(|e| entry_error(e, &shown))?;
                let mtime = SystemTimeSpec::from(cap_std::time::SystemTime::from_std(time_of(mtime)));
                // Times of a symlink are cosmetic; a filesystem without them is no failure.
                let _ = dir.set_symlink_times(name, None, Some(mtime));
            }
            tar::EntryType::Link => {
                let link = entry.link_name().map_err(invalid)?.ok_or_else(|| {
                    Error::InvalidRequest(format!("tar entry {shown} is a hard link without a target"))
                })?;
                // Confined like any entry: a name in this upload, reached without symlinks.
                let source = entry_components(&link).filter(|c| !c.is_empty()).ok_or_else(|| {
                    let link = quoted(&link.to_string_lossy());
                    Error::ForbiddenPath(format!("tar entry {shown} links to {link}, outside the upload"))
                })?;
                let (source_name, source_parents) = source.split_last().expect("not empty");
                let source_dir = walk(&target, source_parents, false, &shown)?;
                let metadata = source_dir.symlink_metadata(source_name).map_err(|e| entry_error(e, &shown))?;
                if !metadata.is_file() {
                    return Err(Error::InvalidRequest(format!(
                        "tar entry {shown} is a hard link to something that is not a file"
                    )));
                }
                make_room(&dir, name, &shown)?;
                source_dir.hard_link(source_name, &dir, name).map_err(|e| entry_error(e, &shown))?;
            }
            other => {
                return Err(Error::InvalidRequest(format!(
                    "tar entry {shown} is of a type the node agent does not create ({other:?})"
                )));
            }
        }
        result.entries += 1;
    }
    // Deepest first: a parent made read-only before its children are done would
    // refuse them, and setting a child's times changes its parent's.
    directories.sort_by_key(|(components, _, _)| std::cmp::Reverse(components.len()));
    for (components, mode, mtime) in directories {
        // The upload directory itself keeps its own mode and times.
        let Some((name, parents)) = components.split_last() else { continue };
        let shown = quoted(&components.join("/"));
        let dir = walk(&target, parents, false, &shown)?;
        let mut options = cap_std::fs::OpenOptions::new();
        options.read(true).custom_flags(nix::libc::O_DIRECTORY);
        // A real descriptor (not `O_PATH`, which fchmod refuses), never through a symlink.
        let handle = dir.open_with(name, &super::nofollow(options)).map_err(|e| entry_error(e, &shown))?.into_std();
        handle
            .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
            .map_err(|e| entry_error(e, &shown))?;
        handle.set_times(std::fs::FileTimes::new().set_modified(time_of(mtime))).map_err(|e| entry_error(e, &shown))?;
    }
    Ok(result)
}

/// An entry's name as components below the upload directory; `None` for an absolute
/// name or one with `..`.
fn entry_components(name: &Path) -> Option<Vec<String>> {
    let mut components = Vec::new();
    for component in name.components() {
        match component {
            Component::Normal(part) => components.push(part.to_str()?.to_string()),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(components)
}

/// The directory `components` below `dir`, each opened without following a symlink,
/// made when missing if `create`.
fn walk(dir: &Dir, components: &[String], create: bool, shown: &str) -> Result<Dir> {
    let mut current = dir.try_clone().map_err(|e| entry_error(e, shown))?;
    for component in components {
        current = match open_dir_nofollow(&current, component) {
            Ok(next) => next,
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                current.create_dir(component).map_err(|e| entry_error(e, shown))?;
                open_dir_nofollow(&current, component).map_err(|e| entry_error(e, shown))?
            }
            Err(e) => {
                if let Ok(metadata) = current.symlink_metadata(component)
                    && metadata.file_type().is_symlink()
                {
                    return Err(Error::ForbiddenPath(format!(
                        "tar entry {shown} would be written through the symlink {}",
                        quoted(component)
                    )));
                }
                return Err(entry_error(e, shown));
            }
        };
    }
    Ok(current)
}

/// Clears `name` in `dir` for a new file, symlink or hard link: a file or symlink
/// there goes (a symlink is removed, never followed), a directory stays and refuses.
fn make_room(dir: &Dir, name: &str, shown: &str) -> Result<()> {
    match dir.symlink_metadata(name) {
        Ok(metadata) if metadata.is_dir() => {
            Err(Error::IsADirectory(format!("tar entry {shown}: a directory is in the way")))
        }
        Ok(_) => dir.remove_file_or_symlink(name).map_err(|e| entry_error(e, shown)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(entry_error(e, shown)),
    }
}

/// Whether a symlink target, from a directory `depth` levels below its root, stays
/// inside the root. Leading `..` climb real directories (the entry's parents were
/// walked without symlinks); a `..` after a name could climb out of wherever that
/// name leads, so it is refused rather than guessed.
fn target_stays_inside(target: &Path, depth: usize) -> bool {
    let mut climbs = 0usize;
    let mut named = false;
    for component in target.components() {
        match component {
            Component::ParentDir if named => return false,
            Component::ParentDir => climbs += 1,
            Component::Normal(_) => named = true,
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    climbs <= depth
}

fn time_of(seconds: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
}

/// `shown`: the entry's name, [`quoted`] already.
fn entry_error(error: io::Error, shown: &str) -> Error {
    fs_error(error, &format!("tar entry {shown}"))
}

/// A tar stream that cannot be read: the guard's refusal as it is (it names no
/// entry), anything else from the tar crate cut short.
fn invalid(error: io::Error) -> Error {
    match refusal(&error) {
        Some(refused) => Error::InvalidRequest(refused.to_string()),
        None => Error::InvalidRequest(format!("the tar stream is not valid: {}", clipped(&error.to_string()))),
    }
}

/// Writes a tar stream of `path` into `out`: a directory's entries relative to it
/// (sorted, symlinks stored as symlinks), or the single file or symlink.
pub fn pack(roots: &FsRoots, path: &FsPath, out: impl Write) -> Result<()> {
    let mut builder = tar::Builder::new(out);
    let kind = roots.stat(path)?.kind;
    if kind == crate::model::FsEntryType::Directory {
        let dir = roots.open_dir(path)?;
        pack_dir(&mut builder, &dir, "", path.display())?;
    } else {
        let (dir, name) = roots.parent(path)?;
        pack_entry(&mut builder, &dir, &name, &name, path.display())?;
    }
    builder.into_inner().and_then(|mut out| out.flush()).map_err(|e| fs_error(e, path.display()))?;
    Ok(())
}

fn pack_dir<W: Write>(builder: &mut tar::Builder<W>, dir: &Dir, prefix: &str, shown: &str) -> Result<()> {
    let mut names = Vec::new();
    for item in dir.entries().map_err(|e| fs_error(e, shown))? {
        let item = item.map_err(|e| fs_error(e, shown))?;
        match item.file_name().into_string() {
            Ok(name) => names.push(name),
            Err(name) => tracing::warn!(?name, "not packed: the name is not UTF-8"),
        }
    }
    names.sort();
    for name in names {
        let entry_name = format!("{prefix}{name}");
        pack_entry(builder, dir, &name, &entry_name, shown)?;
    }
    Ok(())
}

fn pack_entry<W: Write>(
    builder: &mut tar::Builder<W>,
    dir: &Dir,
    name: &str,
    entry_name: &str,
    shown: &str,
) -> Result<()> {
    let metadata = match dir.symlink_metadata(name) {
        Ok(metadata) => metadata,
        // Gone since the listing: not part of the tree any more.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(fs_error(e, shown)),
    };
    let write_error = |e: io::Error| fs_error(e, shown);
    let mut header = tar::Header::new_gnu();
    header.set_mode(metadata.mode() & 0o7777);
    header.set_mtime(u64::try_from(metadata.mtime()).unwrap_or(0));
    let file_type = metadata.file_type();
    if file_type.is_symlink() {
        let target = dir.read_link_contents(name).map_err(|e| fs_error(e, shown))?;
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        builder.append_link(&mut header, entry_name, &target).map_err(write_error)?;
    } else if file_type.is_dir() {
        header.set_entry_type(tar::EntryType::Directory);
        header.set_size(0);
        builder.append_data(&mut header, format!("{entry_name}/"), io::empty()).map_err(write_error)?;
        let child = match open_dir_nofollow(dir, name) {
            Ok(child) => child,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(fs_error(e, shown)),
        };
        pack_dir(builder, &child, &format!("{entry_name}/"), shown)?;
    } else if file_type.is_file() {
        let options = super::nofollow({
            let mut options = cap_std::fs::OpenOptions::new();
            // Non-blocking: a FIFO swapped in since the look would block the open.
            options.read(true).custom_flags(nix::libc::O_NONBLOCK);
            options
        });
        let file = match dir.open_with(name, &options) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(fs_error(e, shown)),
        };
        let opened = file.metadata().map_err(|e| fs_error(e, shown))?;
        if !opened.is_file() {
            return Ok(()); // swapped for something else since the look: not a file to copy
        }
        // The size the header promises is the size at opening; a file that grows or
        // shrinks meanwhile is cut or padded to it, so the archive stays whole.
        let size = opened.len();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(size);
        let reader = ExactSize { inner: file.into_std().take(size), remaining: size };
        builder.append_data(&mut header, entry_name, reader).map_err(write_error)?;
    }
    // Sockets, FIFOs and devices are not files to copy.
    Ok(())
}

/// Reads exactly `remaining` bytes: the inner reader's, then zeros.
struct ExactSize<R> {
    inner: R,
    remaining: u64,
}

impl<R: Read> Read for ExactSize<R> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 {
            return Ok(0);
        }
        let limit = buffer.len().min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        let mut read = self.inner.read(&mut buffer[..limit])?;
        if read == 0 {
            buffer[..limit].fill(0);
            read = limit;
        }
        self.remaining -= read as u64;
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlink_targets_stay_inside() {
        assert!(target_stays_inside(Path::new("b/c"), 0));
        assert!(target_stays_inside(Path::new("../x"), 1));
        assert!(!target_stays_inside(Path::new("../x"), 0));
        assert!(!target_stays_inside(Path::new("../../.."), 2));
        assert!(!target_stays_inside(Path::new("/etc"), 5));
        assert!(!target_stays_inside(Path::new("a/../../x"), 5));
    }

    #[test]
    fn entry_names_are_confined() {
        assert_eq!(entry_components(Path::new("./a/b/")), Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(entry_components(Path::new("../../x")), None);
        assert_eq!(entry_components(Path::new("/etc/passwd")), None);
        assert_eq!(entry_components(Path::new("a/../b")), None);
    }
}
