//! The launcher of a managed sandbox, `agentplane sandbox-exec --launch FILE`: a
//! process of its own between the controller and bubblewrap, single-threaded, that
//! does in order what must happen before anything of the sandbox runs:
//! 1. every descriptor it inherited is marked close-on-exec (nothing the controller's
//!    parent leaked reaches a sandbox);
//! 2. it joins the sandbox's cgroups (so nothing of the sandbox runs outside them);
//! 3. it binds the node agent's listening socket at a path in the sandbox's folder on
//!    the host, which is never bound in: the node agent gets the socket itself
//!    (systemd's `LISTEN_FDS`), so nothing inside can replace what the controller
//!    connects to, and the token goes only to the process it started;
//! 4. when it is to drop root: in a mount namespace of its own (nothing of it is seen
//!    on the host), it binds every host path the sandbox gets onto a staging folder
//!    any user can reach: bubblewrap, run as the sandbox's user, must find each path
//!    it binds, and the state directory or the binary may lie under a folder only
//!    root may enter (`/root`);
//! 5. it drops to the sandbox's host uid (when the controller is root), then hides
//!    only what that uid could reach;
//! 6. it execs bubblewrap with those descriptors, and the environment of the plan
//!    (never on a command line).
//!
//! The plan is a file the controller writes in the sandbox's folder (its user's
//! alone), read once here.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Seek, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use agentplane_crds::NetworkMode;
use nix::fcntl::{FcntlArg, FdFlag};
use serde::{Deserialize, Serialize};

use super::bwrap;

/// What the launcher does, as the controller wrote it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Launch {
    /// Where the node agent's socket is bound on the host (a folder the sandbox never sees).
    pub api_socket: PathBuf,
    /// Cgroup directories to join.
    pub cgroups: Vec<PathBuf>,
    /// The host uid and gid to drop to (the controller is root).
    pub switch_to: Option<(u32, u32)>,
    /// The node agent's command line (inside the sandbox's view of the file system).
    pub command: Vec<String>,
    /// The whole environment of the node agent.
    pub env: BTreeMap<String, String>,
    /// Where it runs when not isolated.
    pub workdir: PathBuf,
    /// Under bubblewrap; `None`: run the node agent as it is (`isolation: none`).
    pub isolated: Option<Isolated>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Isolated {
    pub bwrap: PathBuf,
    pub hostname: String,
    pub network: NetworkMode,
    /// Host paths to hide.
    pub masked: Vec<PathBuf>,
    /// (host path, inside, writable), bound in this order.
    pub binds: Vec<(PathBuf, PathBuf, bool)>,
    pub tmp_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading the launch plan {path}: {source}")]
    Plan {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the launch plan {path} is not valid: {source}")]
    PlanFormat {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("joining the sandbox's cgroups: {0}")]
    Cgroups(#[source] std::io::Error),
    #[error("listening on {path}: {source}")]
    Listen {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} cannot be bound in: {source}")]
    Stage {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("binding {path} in: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error(transparent)]
    Seccomp(#[from] super::seccomp::Error),
    #[error("{what}: {source}")]
    Sys {
        what: &'static str,
        #[source]
        source: nix::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

fn sys(what: &'static str) -> impl FnOnce(nix::Error) -> Error {
    move |source| Error::Sys { what, source }
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { what, source }
}

/// Writes the plan where the launcher reads it (mode 0600: it holds the environment).
pub fn write(path: &Path, launch: &Launch) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let text = serde_json::to_vec(launch).map_err(std::io::Error::other)?;
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(&text)
}

/// `agentplane sandbox-exec`: returns only on failure, with the exit code to use.
pub fn exec(plan: &Path) -> i32 {
    // First of all: whatever this process inherited stays here.
    close_fds::set_fds_cloexec(3, &[]);
    let error = match prepare(plan) {
        Ok(mut command) => {
            use std::os::unix::process::CommandExt;
            let program = command.get_program().to_string_lossy().into_owned();
            let error = command.exec();
            eprintln!("agentplane sandbox-exec: cannot run {program}: {error}");
            return 127;
        }
        Err(error) => error,
    };
    eprintln!("agentplane sandbox-exec: {error}");
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        eprintln!("  caused by: {cause}");
        source = cause.source();
    }
    1
}

fn prepare(plan: &Path) -> Result<std::process::Command, Error> {
    let text = std::fs::read(plan).map_err(|source| Error::Plan { path: plan.to_path_buf(), source })?;
    let launch: Launch =
        serde_json::from_slice(&text).map_err(|source| Error::PlanFormat { path: plan.to_path_buf(), source })?;
    super::cgroup::join(&launch.cgroups).map_err(Error::Cgroups)?;

    // The folder holding it is the controller's user's alone: a socket left by a node
    // agent that died is the only thing that can be in the way.
    match std::fs::remove_file(&launch.api_socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(Error::Listen { path: launch.api_socket.clone(), source }),
    }
    let listener = std::os::unix::net::UnixListener::bind(&launch.api_socket)
        .map_err(|source| Error::Listen { path: launch.api_socket.clone(), source })?;
    let listener = OwnedFd::from(listener);

    let mut handed: Vec<OwnedFd> = Vec::new();
    let mut command;
    match &launch.isolated {
        Some(isolated) => {
            let binds = match launch.switch_to {
                Some(_) => stage(&isolated.binds)?,
                None => isolated
                    .binds
                    .iter()
                    .map(|(host, inside, writable)| bwrap::Bind {
                        source: host.clone(),
                        inside: inside.clone(),
                        writable: *writable,
                    })
                    .collect(),
            };
            let mut seccomp = Vec::new();
            for program in super::seccomp::programs()? {
                let fd = memfd("agentplane-seccomp", &program)?;
                seccomp.push(fd.as_raw_fd());
                handed.push(fd);
            }
            let top = bwrap::host_top().map_err(io("listing /"))?;
            drop_privileges(launch.switch_to)?;
            // After the switch: what the sandbox's user cannot reach is hidden already,
            // and bubblewrap (as that user) could not mount over it.
            let reachable = |p: &PathBuf| nix::unistd::access(p.as_path(), nix::unistd::AccessFlags::F_OK).is_ok();
            let existing =
                |list: &[&str]| -> Vec<PathBuf> { list.iter().map(PathBuf::from).filter(|p| p.exists()).collect() };
            let plan = bwrap::Plan {
                hostname: isolated.hostname.clone(),
                network: isolated.network,
                masked: isolated.masked.iter().filter(|p| reachable(p)).cloned().collect(),
                proc_files: existing(bwrap::PROC_FILES_MASKED),
                folders: existing(bwrap::FOLDERS_MASKED),
                binds,
                tmp_bytes: isolated.tmp_bytes,
                seccomp,
            };
            let inner: Vec<OsString> = launch.command.iter().map(OsString::from).collect();
            command = std::process::Command::new(&isolated.bwrap);
            command.args(bwrap::args(&plan, &top, &inner));
        }
        None => {
            drop_privileges(launch.switch_to)?;
            let (program, rest) = launch
                .command
                .split_first()
                .ok_or(Error::Io { what: "the launch plan", source: std::io::Error::other("it names no command") })?;
            command = std::process::Command::new(program);
            command.args(rest).current_dir(&launch.workdir);
        }
    }
    // systemd's socket activation protocol, without LISTEN_PID (the node agent's pid
    // inside a PID namespace is not known here): the node agent takes the socket and
    // removes the variables before it runs anything.
    command.env_clear().envs(&launch.env);
    command.env("LISTEN_FDS", "1");
    if listener.as_raw_fd() != 3 {
        // Only when something this process inherited holds 3: the variable stays in the
        // node agent's environment (its children's too), so it is set only when needed.
        command.env("LISTEN_FDS_FIRST_FD", listener.as_raw_fd().to_string());
    }
    handed.push(listener);
    for fd in &handed {
        nix::fcntl::fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty())).map_err(sys("handing a descriptor over"))?;
    }
    // Kept open until the exec: the numbers on the command line are theirs.
    std::mem::forget(handed);
    Ok(command)
}

/// Where the launcher stages what it binds: an empty folder on the host, over which
/// each launcher mounts a tmpfs of its own, in its own mount namespace. Under `/run`,
/// where no other user can make it first; under `/tmp` on a host without `/run`.
const STAGES: &[&str] = &["/run/agentplane-stage", "/tmp/.agentplane-stage"];

/// Binds each host path onto `STAGE/N` in a mount namespace of this process's own,
/// and answers the binds bubblewrap is to make from there. As root: the paths are
/// the controller's, resolved before; the staging folder is checked to be root's own
/// and not a link.
fn stage(binds: &[(PathBuf, PathBuf, bool)]) -> Result<Vec<bwrap::Bind>, Error> {
    use nix::mount::{MsFlags, mount};
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let stage = STAGES
        .iter()
        .map(Path::new)
        .find(|stage| stage.parent().is_some_and(Path::is_dir))
        .unwrap_or(Path::new(STAGES[STAGES.len() - 1]));
    match std::fs::DirBuilder::new().mode(0o755).create(stage) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => return Err(Error::Io { what: "making the staging folder", source }),
    }
    let meta = std::fs::symlink_metadata(stage).map_err(io("checking the staging folder"))?;
    if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err(Error::Io {
            what: "checking the staging folder",
            source: std::io::Error::other(format!("{} is not a folder only root may write", stage.display())),
        });
    }
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).map_err(sys("making a mount namespace"))?;
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .map_err(sys("making the mount namespace private"))?;
    mount(Some("tmpfs"), stage, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some("mode=0755"))
        .map_err(sys("mounting the staging folder"))?;
    let mut staged = Vec::new();
    for (i, (host, inside, writable)) in binds.iter().enumerate() {
        let at = stage.join(i.to_string());
        let is_dir = std::fs::metadata(host).map_err(|source| Error::Stage { path: host.clone(), source })?.is_dir();
        let made = if is_dir { std::fs::create_dir(&at) } else { std::fs::File::create(&at).map(drop) };
        made.map_err(io("staging a bind"))?;
        mount(Some(host.as_path()), &at, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>)
            .map_err(|e| Error::Open { path: host.clone(), source: e })?;
        staged.push(bwrap::Bind { source: at, inside: inside.clone(), writable: *writable });
    }
    Ok(staged)
}

/// An anonymous file holding `bytes`, read from its start.
fn memfd(name: &str, bytes: &[u8]) -> Result<OwnedFd, Error> {
    let fd = nix::sys::memfd::memfd_create(name, nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
        .map_err(sys("making the seccomp program's file"))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes).map_err(io("writing the seccomp program"))?;
    file.rewind().map_err(io("writing the seccomp program"))?;
    Ok(OwnedFd::from(file))
}

/// Becomes `uid`/`gid` for good (real, effective and saved), with no other group.
fn drop_privileges(switch_to: Option<(u32, u32)>) -> Result<(), Error> {
    let Some((uid, gid)) = switch_to else { return Ok(()) };
    if uid == 0 {
        return Err(Error::Io { what: "switching user", source: std::io::Error::other("refusing uid 0") });
    }
    let (uid, gid) = (nix::unistd::Uid::from_raw(uid), nix::unistd::Gid::from_raw(gid));
    nix::unistd::setgroups(&[gid]).map_err(sys("setting the sandbox's groups"))?;
    nix::unistd::setresgid(gid, gid, gid).map_err(sys("switching to the sandbox's group"))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(sys("switching to the sandbox's user"))?;
    // Paranoia: root must be gone for good.
    if nix::unistd::setuid(nix::unistd::Uid::from_raw(0)).is_ok() {
        return Err(Error::Io { what: "switching user", source: std::io::Error::other("root could be taken back") });
    }
    Ok(())
}
