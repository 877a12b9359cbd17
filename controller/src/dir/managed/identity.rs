//! Who a sandbox's processes are on the host. Inside they are uid 1000 in a user
//! namespace of their own; on the host they are:
//! - when the controller runs as root: an unprivileged uid of the sandbox's own, from
//!   a range no login user has (`BASE`..`BASE + SPAN`), kept in the sandbox's folder so
//!   that it stays the same across restarts. Its own folders (workspace, HOME, data,
//!   and what the spec grants writable) are given to that uid before it starts, and
//!   set-id bits found there are cleared;
//! - otherwise: the controller's own user (a user namespace cannot map another).
//!
//! Either way no sandboxed process is host uid 0: it cannot write a sysctl, read a
//! file only root may read, or use root's ownership of anything.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The uid and gid sandboxed processes have inside their user namespace.
pub const INSIDE_UID: u32 = 1000;

/// The first host uid given to sandboxes, and how many there are: inside systemd's
/// range for containers (524288-1879048191), far above login users and the subuid
/// ranges `useradd` hands out from 100000.
pub const BASE: u32 = 0x6000_0000;
pub const SPAN: u32 = 1 << 20;

/// The host identity of one sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    /// The launcher drops to `uid`/`gid` (the controller is root).
    pub switch: bool,
}

/// The identity of the sandbox whose folder is `dir`: the one recorded there, else a
/// new uid from the range, not used by any other sandbox folder under `root` nor by any
/// process or account on this machine. `seed` (the resource's uid) makes the first
/// choice stable.
pub fn for_sandbox(root: &Path, dir: &Path, seed: &str) -> std::io::Result<Identity> {
    let own = nix::unistd::geteuid().as_raw();
    if own != 0 {
        return Ok(Identity { uid: own, gid: nix::unistd::getegid().as_raw(), switch: false });
    }
    let record = dir.join("hostuid");
    if let Some(uid) = read_uid(&record) {
        return Ok(Identity { uid, gid: uid, switch: true });
    }
    let taken = taken_uids(root);
    let start = stable_hash(seed) % SPAN;
    let uid = (0..SPAN)
        .map(|i| BASE + (start + i) % SPAN)
        .find(|uid| !taken.contains(uid) && !in_use(*uid))
        .ok_or_else(|| std::io::Error::other("every sandbox uid is in use"))?;
    fs::write(&record, format!("{uid}\n"))?;
    Ok(Identity { uid, gid: uid, switch: true })
}

fn read_uid(record: &Path) -> Option<u32> {
    let text = fs::read_to_string(record).ok()?;
    let uid: u32 = text.trim().parse().ok()?;
    (BASE..BASE + SPAN).contains(&uid).then_some(uid)
}

/// The uids recorded by the other sandbox folders under `root`.
fn taken_uids(root: &Path) -> Vec<u32> {
    let Ok(entries) = fs::read_dir(root) else { return Vec::new() };
    entries.flatten().filter_map(|e| read_uid(&e.path().join("hostuid"))).collect()
}

/// Whether an account or a running process has `uid` (another controller's sandbox).
fn in_use(uid: u32) -> bool {
    if nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().is_some() {
        return true;
    }
    let Ok(entries) = fs::read_dir("/proc") else { return false };
    entries.flatten().any(|e| e.metadata().is_ok_and(|m| m.is_dir() && m.uid() == uid))
}

/// FNV-1a: stable across builds and runs (std's hasher is seeded per process).
fn stable_hash(text: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in text.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// Whether `uid` is one this module gives to sandboxes: a file it owns was written by a
/// sandbox.
pub fn is_sandbox_uid(uid: u32) -> bool {
    (BASE..BASE + SPAN).contains(&uid)
}

/// Gives `dir` and everything under it to `identity` (when it switches), and clears
/// set-user-ID and set-group-ID bits there whoever owns it. Runs before the sandbox
/// starts, so nothing inside can swap a folder for a symlink meanwhile; symlinks are
/// never followed (`lchown`, and a folder is entered only when it is one itself).
pub fn give(dir: &Path, identity: Identity) -> std::io::Result<()> {
    let mut pending: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = fs::symlink_metadata(&path)?;
        if identity.switch && (meta.uid() != identity.uid || meta.gid() != identity.gid) {
            std::os::unix::fs::lchown(&path, Some(identity.uid), Some(identity.gid))?;
        }
        let kind = meta.file_type();
        if !kind.is_symlink() && meta.mode() & 0o6000 != 0 {
            // A folder's set-group-ID bit only passes its group on; a file's would run
            // with the sandbox's ids.
            fs::set_permissions(&path, fs::Permissions::from_mode(meta.mode() & 0o1777))?;
        }
        if kind.is_dir() {
            for entry in fs::read_dir(&path)? {
                pending.push(entry?.path());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_choice_is_stable_and_in_the_range() {
        assert_eq!(stable_hash("abc"), stable_hash("abc"));
        assert_ne!(stable_hash("abc"), stable_hash("abd"));
        assert!(is_sandbox_uid(BASE) && is_sandbox_uid(BASE + SPAN - 1));
        assert!(!is_sandbox_uid(0) && !is_sandbox_uid(1000) && !is_sandbox_uid(BASE + SPAN));
    }

    #[test]
    fn a_recorded_uid_outside_the_range_is_not_taken() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("hostuid"), "0\n").unwrap();
        assert_eq!(read_uid(&tmp.path().join("hostuid")), None);
        fs::write(tmp.path().join("hostuid"), format!("{}\n", BASE + 7)).unwrap();
        assert_eq!(read_uid(&tmp.path().join("hostuid")), Some(BASE + 7));
    }

    #[test]
    fn giving_a_folder_clears_set_id_bits_and_never_follows_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ws");
        fs::create_dir_all(dir.join("sub")).unwrap();
        let outside = tmp.path().join("outside");
        fs::write(&outside, "x").unwrap();
        fs::set_permissions(&outside, fs::Permissions::from_mode(0o4755)).unwrap();
        fs::write(dir.join("sub/tool"), "x").unwrap();
        fs::set_permissions(dir.join("sub/tool"), fs::Permissions::from_mode(0o6755)).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();
        let me = Identity { uid: nix::unistd::geteuid().as_raw(), gid: nix::unistd::getegid().as_raw(), switch: false };
        give(&dir, me).unwrap();
        assert_eq!(fs::metadata(dir.join("sub/tool")).unwrap().mode() & 0o7777, 0o755);
        // The link's target is not the sandbox's: left as it was.
        assert_eq!(fs::metadata(&outside).unwrap().mode() & 0o7777, 0o4755);
    }
}
