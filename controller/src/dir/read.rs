//! Reading a file a user put in the watched folder without trusting what it is: opened
//! without blocking (a FIFO's open and read would block for ever), refused unless
//! `fstat` says it is a regular file, and read up to a limit only (it may grow, or be
//! `/dev/zero`). Resource files and env files both go through here.

use std::fs;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Why a file was not read.
#[derive(Debug)]
pub enum Refused {
    Io(std::io::Error),
    /// Not a regular file: what it is instead.
    NotRegular(fs::FileType),
    /// More bytes than the limit.
    TooLarge,
}

/// Opens `path` for reading without blocking; with `follow_last` false, a final
/// symlink is refused (ELOOP) rather than followed.
pub fn open(path: &Path, follow_last: bool) -> std::io::Result<fs::File> {
    let mut flags = nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOCTTY;
    if !follow_last {
        flags |= nix::fcntl::OFlag::O_NOFOLLOW;
    }
    fs::OpenOptions::new().read(true).custom_flags(flags.bits()).open(path)
}

/// The bytes of an opened regular file of at most `limit` bytes.
pub fn regular_bytes(file: &fs::File, limit: u64) -> Result<Vec<u8>, Refused> {
    let meta = file.metadata().map_err(Refused::Io)?;
    if !meta.is_file() {
        return Err(Refused::NotRegular(meta.file_type()));
    }
    if meta.len() > limit {
        return Err(Refused::TooLarge);
    }
    // The size can grow between fstat and read: never read more than the limit allows.
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).map_err(Refused::Io)?;
    if bytes.len() as u64 > limit {
        return Err(Refused::TooLarge);
    }
    Ok(bytes)
}
