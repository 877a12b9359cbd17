//! The bubblewrap command line of a managed sandbox, computed from its plan alone (no
//! I/O but listing `/`), so that what the sandbox can reach is readable in one place
//! and checked by unit tests.
//!
//! The shape follows Anthropic's sandbox-runtime and Codex's Linux sandbox: the host's
//! top-level folders bound read-only on a fresh tmpfs root, the places that hold the
//! host user's secrets masked (every HOME, the watched folder, the state directory),
//! a writable workspace and HOME of the sandbox's own, a private `/tmp`, `/proc` and
//! `/dev` of its own, new PID, IPC and UTS namespaces (and network, unless `host`),
//! every capability dropped, no new privileges (bubblewrap always sets it), and an
//! environment holding only what the plan declares.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use agentplane_crds::NetworkMode;

/// Where the sandbox's own directories appear inside.
pub const WORKSPACE: &str = "/workspace";
pub const HOME: &str = "/home/agent";
/// The node agent's data (sessions, its lock), and the sockets shared with the host.
pub const DATA: &str = "/.agentplane/data";
pub const RUN: &str = "/run/agentplane";

/// Top-level host entries never bound in: the sandbox gets its own (`proc`, `dev`,
/// `tmp`, `run`), they hold the host users' files (`home`, `root`), or they are noise.
const NOT_BOUND: &[&str] = &["proc", "dev", "tmp", "run", "home", "root", "lost+found"];

/// Everything the command line depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The sandbox's hostname.
    pub hostname: String,
    pub network: NetworkMode,
    /// Host directories of the sandbox's own, bound writable.
    pub workspace: PathBuf,
    pub home: PathBuf,
    pub data: PathBuf,
    /// Holds the node agent's socket (and the proxy's, with an allowlist).
    pub run: PathBuf,
    /// The shared agent CLIs, bound read-only at the same path.
    pub agents_dir: PathBuf,
    /// Host paths hidden behind an empty tmpfs (the watched folder, the state directory,
    /// the host user's HOME when it is not under `/home` or `/root`).
    pub masked: Vec<PathBuf>,
    /// Host paths the spec binds: (host, inside, writable).
    pub binds: Vec<(PathBuf, PathBuf, bool)>,
    /// The whole environment inside.
    pub env: BTreeMap<String, String>,
}

/// `bwrap` arguments running `command` inside, for a host whose `/` holds `top`
/// (name, and the target of each top-level symlink).
pub fn args(plan: &Plan, top: &[(String, Option<PathBuf>)], command: &[OsString]) -> Vec<OsString> {
    let mut a = Args::default();
    // Killed with its parent (the controller): nothing of a sandbox outlives `up`.
    a.push(["--die-with-parent", "--new-session"]);
    a.push(["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]);
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
    a.push(["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/run"]);
    a.push(["--dir", "/root", "--dir", "/home"]);
    for masked in &plan.masked {
        a.push(["--tmpfs"]).path(masked);
    }
    a.push(["--ro-bind"]).path(&plan.agents_dir).path(&plan.agents_dir);
    for (host, inside, writable) in &plan.binds {
        a.push([if *writable { "--bind" } else { "--ro-bind" }]).path(host).path(inside);
    }
    a.push(["--bind"]).path(&plan.workspace).path(WORKSPACE);
    a.push(["--bind"]).path(&plan.home).path(HOME);
    a.push(["--bind"]).path(&plan.data).path(DATA);
    a.push(["--bind"]).path(&plan.run).path(RUN);
    // Nothing outside the sandbox's own folders, /tmp and /run is writable: not the
    // tmpfs root (where /root and /home are empty folders), not the masks.
    for masked in &plan.masked {
        a.push(["--remount-ro"]).path(masked);
    }
    a.push(["--remount-ro", "/"]);
    a.push(["--chdir", WORKSPACE, "--clearenv"]);
    for (name, value) in &plan.env {
        a.push(["--setenv"]).path(name).path(value);
    }
    a.push(["--"]);
    a.0.extend(command.iter().cloned());
    a.0
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
            workspace: "/state/s/workspace".into(),
            home: "/state/s/home".into(),
            data: "/state/s/data".into(),
            run: "/state/s/run".into(),
            agents_dir: "/state/node-agent/agents".into(),
            masked: vec!["/work/dir".into(), "/work/dir/.agentplane".into()],
            binds: vec![("/srv/data".into(), "/data".into(), false)],
            env: BTreeMap::from([("PATH".into(), "/usr/bin:/bin".into())]),
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
            !t.contains("--ro-bind /home") && !t.contains("--ro-bind /root") && !t.contains("--ro-bind /proc"),
            "{t}"
        );
        assert!(t.contains("--tmpfs /work/dir --tmpfs /work/dir/.agentplane"), "{t}");
        assert!(t.contains("--cap-drop ALL") && t.contains("--die-with-parent") && t.contains("--clearenv"), "{t}");
        assert!(t.contains("--ro-bind /srv/data /data"), "{t}");
        assert!(t.contains("--bind /state/s/workspace /workspace --bind /state/s/home /home/agent"), "{t}");
        assert!(t.ends_with("--setenv PATH /usr/bin:/bin -- sh"), "{t}");
        // Masks come after the read-only binds they hide parts of, and the sandbox's own
        // directories after the masks (a workspace under the state directory stays visible).
        assert!(t.find("--tmpfs /work/dir").unwrap() > t.find("--ro-bind /work /work").unwrap());
        assert!(t.find("/state/s/workspace").unwrap() > t.find("--tmpfs /work/dir/.agentplane").unwrap());
    }

    #[test]
    fn only_host_network_shares_the_hosts_network() {
        assert!(!text(&args(&plan(NetworkMode::Host), &top(), &[])).contains("--unshare-net"));
        assert!(text(&args(&plan(NetworkMode::None), &top(), &[])).contains("--unshare-net"));
        assert!(text(&args(&plan(NetworkMode::Allowlist), &top(), &[])).contains("--unshare-net"));
    }
}
