//! The bubblewrap command line of a managed sandbox, computed from its plan alone (no
//! I/O), so that what the sandbox can reach is readable in one place and checked by
//! unit tests. The launcher (`launch`) opens what the plan names and runs it.
//!
//! The shape follows Anthropic's sandbox-runtime and Codex's Linux sandbox, and closes
//! what a hostile review found open with the controller running as root:
//! - a user namespace of its own: inside, every process is uid 1000 with no
//!   capability; outside, an unprivileged uid (never 0), so no sysctl is writable and
//!   no root-only file readable; no further user namespace can be made inside;
//! - the host's top-level folders bound read-only on a fresh tmpfs root; the places
//!   that hold the host user's secrets masked (every HOME, the watched folder, the
//!   state directory); `/proc/sys` read-only, and the `/proc` and `/sys` entries that
//!   describe the host (or other sandboxes' cgroups) hidden, as Docker does;
//! - the sandbox's own folders bound from where the launcher staged them (see
//!   `launch`: a host path the sandbox's user could not reach still binds); the folder
//!   with the proxy's socket read-only, so the sandbox cannot replace the socket the
//!   host serves;
//! - a private `/tmp` of a fixed size; new PID, IPC, UTS and cgroup namespaces (and
//!   network, unless `host`); the seccomp programs of `seccomp`; no new privileges
//!   (bubblewrap always sets it); the environment is the launcher's, which holds only
//!   what the plan declares (never on this command line, which any host user can read).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use agentplane_crds::NetworkMode;

use super::identity::INSIDE_UID;

/// Where the sandbox's own directories appear inside.
pub const WORKSPACE: &str = "/workspace";
pub const HOME: &str = "/home/agent";
/// The node agent's data (sessions, its lock).
pub const DATA: &str = "/.agentplane/data";
/// The controller's proxy socket (with `network: allowlist`), read-only.
pub const RUN: &str = "/run/agentplane";
/// Where the node agent's binary appears (the root is a tmpfs, so the mount point can
/// be made there).
pub const BINARY: &str = "/.agentplane/bin/agentplane";

/// Top-level host entries never bound in: the sandbox gets its own (`proc`, `dev`,
/// `tmp`, `run`), they hold the host users' files (`home`, `root`), or they are noise.
const NOT_BOUND: &[&str] = &["proc", "dev", "tmp", "run", "home", "root", "lost+found"];

/// `/proc` files that describe the host, hidden behind `/dev/null` (Docker's list).
pub const PROC_FILES_MASKED: &[&str] = &[
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/sysrq-trigger",
];
/// `/proc` and `/sys` folders hidden behind an empty tmpfs: Docker's, and the host's
/// cgroup tree, which names every other sandbox's group.
pub const FOLDERS_MASKED: &[&str] =
    &["/proc/acpi", "/proc/asound", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap", "/sys/fs/cgroup"];

/// A host folder or file bound in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// Where bubblewrap finds it (the launcher's staging folder, or the host path).
    pub source: PathBuf,
    pub inside: PathBuf,
    pub writable: bool,
}

/// Everything the command line depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The sandbox's hostname.
    pub hostname: String,
    pub network: NetworkMode,
    /// Host paths hidden behind an empty tmpfs (the watched folder, the state directory,
    /// the host user's HOME when it is not under `/home` or `/root`): only those the
    /// sandbox's user could reach at all (the others are hidden already).
    pub masked: Vec<PathBuf>,
    /// Of `PROC_FILES_MASKED` and `FOLDERS_MASKED`, those this kernel has.
    pub proc_files: Vec<PathBuf>,
    pub folders: Vec<PathBuf>,
    /// Bound in, in this order (later ones over earlier ones).
    pub binds: Vec<Bind>,
    /// The size of the private `/tmp`.
    pub tmp_bytes: u64,
    /// Seccomp programs (descriptors), installed in this order.
    pub seccomp: Vec<i32>,
}

/// `bwrap` arguments running `command` inside, for a host whose `/` holds `top`
/// (name, and the target of each top-level symlink).
pub fn args(plan: &Plan, top: &[(String, Option<PathBuf>)], command: &[OsString]) -> Vec<OsString> {
    let mut a = Args::default();
    // Killed with its parent (the controller): nothing of a sandbox outlives `up`.
    a.push(["--die-with-parent", "--new-session"]);
    let inside = INSIDE_UID.to_string();
    a.push(["--unshare-user", "--disable-userns", "--uid", &inside, "--gid", &inside]);
    a.push(["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]);
    // The node agent is PID 1 and reaps orphans itself (`reaper`): no second bubblewrap
    // process waits inside as init.
    a.push(["--as-pid-1"]);
    if plan.network != NetworkMode::Host {
        a.push(["--unshare-net"]);
    }
    a.push(["--hostname"]).path(&plan.hostname);
    a.push(["--cap-drop", "ALL"]);
    for (name, link) in top {
        if NOT_BOUND.contains(&name.as_str()) {
            continue;
        }
        let at = Path::new("/").join(name);
        match link {
            Some(target) => a.push(["--symlink"]).path(target).path(&at),
            None => a.push(["--ro-bind"]).path(&at).path(&at),
        };
    }
    a.push(["--dev", "/dev", "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]);
    for file in &plan.proc_files {
        a.push(["--ro-bind", "/dev/null"]).path(file);
    }
    let tmp = plan.tmp_bytes.to_string();
    a.push(["--size", &tmp, "--perms", "1777", "--tmpfs", "/tmp", "--tmpfs", "/run"]);
    a.push(["--dir", "/root", "--dir", "/home"]);
    let masked = effective_masks(&plan.masked);
    for masked in masked.iter().chain(&plan.folders) {
        a.push(["--tmpfs"]).path(masked);
    }
    for bind in &plan.binds {
        a.push([if bind.writable { "--bind" } else { "--ro-bind" }]).path(&bind.source).path(&bind.inside);
    }
    // Nothing outside the sandbox's own folders and /tmp is writable: not the tmpfs
    // root (where /root and /home are empty folders), not the masks, not /run.
    for masked in masked.iter().chain(&plan.folders) {
        a.push(["--remount-ro"]).path(masked);
    }
    a.push(["--remount-ro", "/run", "--remount-ro", "/"]);
    a.push(["--chdir", WORKSPACE]);
    for fd in &plan.seccomp {
        a.push(["--add-seccomp-fd", &fd.to_string()]);
    }
    a.push(["--"]);
    a.0.extend(command.iter().cloned());
    a.0
}

/// The masks that hide something: not those under a top-level folder that is never
/// bound (the sandbox has its own `/tmp`, empty `/home` and `/root`), and not those
/// under another mask (it hides them already; mounted after it, a mask under it would
/// not exist to be made read-only, and one mounted before would be covered). Parents
/// first.
fn effective_masks(masks: &[PathBuf]) -> Vec<PathBuf> {
    let mut sorted: Vec<&PathBuf> = masks
        .iter()
        .filter(|m| {
            let first = m.components().nth(1).map(|c| c.as_os_str().to_string_lossy().into_owned());
            m.is_absolute() && first.is_some_and(|f| !NOT_BOUND.contains(&f.as_str()))
        })
        .collect();
    sorted.sort();
    let mut kept: Vec<PathBuf> = Vec::new();
    for mask in sorted {
        if !kept.iter().any(|k| mask.starts_with(k)) {
            kept.push(mask.clone());
        }
    }
    kept
}

/// The host's top-level entries, each with its target when it is a symlink.
pub fn host_top() -> std::io::Result<Vec<(String, Option<PathBuf>)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/")? {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
        let link = if entry.file_type()?.is_symlink() { Some(std::fs::read_link(entry.path())?) } else { None };
        out.push((name, link));
    }
    out.sort();
    Ok(out)
}

/// Whether `bwrap` can be run, and which one.
pub fn find_bwrap() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("bwrap")).find(|candidate| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn push<const N: usize>(&mut self, words: [&str; N]) -> &mut Self {
        self.0.extend(words.iter().map(OsString::from));
        self
    }

    fn path(&mut self, p: impl AsRef<std::ffi::OsStr>) -> &mut Self {
        self.0.push(p.as_ref().to_os_string());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(network: NetworkMode) -> Plan {
        Plan {
            hostname: "sbx".into(),
            network,
            masked: vec!["/work/dir".into(), "/work/dir/.agentplane".into()],
            proc_files: vec!["/proc/kcore".into()],
            folders: vec!["/sys/fs/cgroup".into()],
            binds: vec![
                Bind { source: "/stage/0".into(), inside: "/data".into(), writable: false },
                Bind { source: "/stage/1".into(), inside: WORKSPACE.into(), writable: true },
                Bind { source: "/stage/2".into(), inside: HOME.into(), writable: true },
            ],
            tmp_bytes: 256 << 20,
            seccomp: vec![8, 9],
        }
    }

    fn text(args: &[OsString]) -> String {
        args.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
    }

    fn top() -> Vec<(String, Option<PathBuf>)> {
        vec![
            ("bin".into(), Some("usr/bin".into())),
            ("etc".into(), None),
            ("home".into(), None),
            ("proc".into(), None),
            ("root".into(), None),
            ("usr".into(), None),
            ("work".into(), None),
        ]
    }

    #[test]
    fn the_host_is_read_only_and_its_homes_are_not_there() {
        let t = text(&args(&plan(NetworkMode::Host), &top(), &["sh".into()]));
        assert!(t.contains("--ro-bind /etc /etc --ro-bind /usr /usr --ro-bind /work /work"), "{t}");
        assert!(t.contains("--symlink usr/bin /bin"), "{t}");
        assert!(
            !t.contains("--ro-bind /home") && !t.contains("--ro-bind /root") && !t.contains("--ro-bind /proc /proc"),
            "{t}"
        );
        // The state directory lies in the watched folder: hidden with it.
        assert!(t.contains("--tmpfs /work/dir --tmpfs /sys/fs/cgroup") && !t.contains(".agentplane"), "{t}");
        assert!(t.contains("--cap-drop ALL") && t.contains("--die-with-parent"), "{t}");
        assert!(t.contains("--ro-bind /stage/0 /data"), "{t}");
        assert!(t.contains("--bind /stage/1 /workspace --bind /stage/2 /home/agent"), "{t}");
        assert!(t.ends_with("--add-seccomp-fd 8 --add-seccomp-fd 9 -- sh"), "{t}");
        // Masks come after the read-only binds they hide parts of, and the sandbox's own
        // directories after the masks (a workspace under the state directory stays visible).
        assert!(t.find("--tmpfs /work/dir").unwrap() > t.find("--ro-bind /work /work").unwrap());
        assert!(t.find("--bind /stage/1").unwrap() > t.find("--tmpfs /work/dir").unwrap());
    }

    #[test]
    fn nothing_inside_is_root_or_can_become_it() {
        let t = text(&args(&plan(NetworkMode::None), &top(), &["sh".into()]));
        assert!(t.contains("--unshare-user --disable-userns --uid 1000 --gid 1000"), "{t}");
        // No value of the environment ever on the command line.
        assert!(!t.contains("--setenv") && !t.contains("--clearenv"), "{t}");
        assert!(t.contains("--proc /proc --ro-bind /proc/sys /proc/sys --ro-bind /dev/null /proc/kcore"), "{t}");
        assert!(t.contains("--tmpfs /sys/fs/cgroup"), "{t}");
        assert!(t.contains(&format!("--size {} --perms 1777 --tmpfs /tmp", 256 << 20)), "{t}");
    }

    #[test]
    fn a_mask_under_another_or_under_a_folder_never_bound_is_left_out() {
        let masks: Vec<PathBuf> =
            ["/work/me/d", "/work/me/d/.agentplane", "/work/me", "/tmp/x/d", "/root/d", "/srv/other", "relative"]
                .iter()
                .map(PathBuf::from)
                .collect();
        assert_eq!(effective_masks(&masks), [PathBuf::from("/srv/other"), PathBuf::from("/work/me")]);
    }

    #[test]
    fn only_host_network_shares_the_hosts_network() {
        assert!(!text(&args(&plan(NetworkMode::Host), &top(), &[])).contains("--unshare-net"));
        assert!(text(&args(&plan(NetworkMode::None), &top(), &[])).contains("--unshare-net"));
        assert!(text(&args(&plan(NetworkMode::Allowlist), &top(), &[])).contains("--unshare-net"));
    }
}
