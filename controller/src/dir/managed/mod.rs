//! Managed sandboxes in the directory store: one node agent process per Sandbox that
//! names no `endpoint`, started under bubblewrap (see `bwrap`) by a launcher of its own
//! (see `launch`), as an unprivileged user (see `identity`), behind a seccomp filter
//! (see `seccomp`) and with its limits (see `cgroup`); watched, started again when it
//! dies, and removed with everything it made when the Sandbox goes.
//!
//! The node agent inside serves on a Unix socket the launcher binds in the sandbox's
//! folder on the host, which is never bound in: the node agent gets the socket itself,
//! so nothing in the sandbox can put another in its place. A TCP forwarder on the
//! host's loopback makes it an ordinary `http://127.0.0.1:PORT` endpoint for the
//! controller, the CLI and browsers. With `network: allowlist` the only way out is the
//! allowlisting proxy served outside (see `egress`), on a socket in a folder bound in
//! read-only, which swaps in the sandbox's credentials (see `credentials`).
//!
//! The token is generated per start of `up`, handed to the node agent on its standard
//! input (in no environment and no command line inside), and kept for the CLI in the
//! sandbox's folder (mode 0700, never bound in) under the state directory, which every
//! sandbox has masked.

pub mod bwrap;
pub mod cgroup;
pub mod credentials;
mod egress;
pub mod identity;
pub mod launch;
mod power;
pub mod seccomp;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentplane_crds::{Isolation, NetworkMode, SandboxLimits, SandboxPhase};
use agentplane_egress as netproxy;
use agentplane_node_agent::client::Client;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::dir::sandbox_writes::SandboxWrites;
use crate::sandboxes::Sandboxes;
use egress::{SYSTEM_BUNDLE, TRUST_BUNDLE, TRUST_CA};
pub use power::Power;
use power::Why;

/// Where HTTP(S)_PROXY points inside a sandbox with `network: allowlist`: the node
/// agent serves the proxy's socket there (`--proxy-socket`).
pub use agentplane_egress::SANDBOX_PROXY_ADDR;
/// A node agent that has not said `ready` by then is killed and started again.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the node agent gets to stop its processes before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Restarts back off from this, doubling, to `RESTART_MAX`; a node agent that ran
/// for `RESTART_RESET` starts from the bottom again.
const RESTART_MIN: Duration = Duration::from_millis(100);
const RESTART_MAX: Duration = Duration::from_secs(10);
const RESTART_RESET: Duration = Duration::from_secs(60);
/// The environment variables the proxy variables are set under (curl reads the
/// lowercase ones, most other tools either).
const PROXY_VARIABLES: &[&str] = &["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"];

/// What every managed sandbox of one `up` shares.
#[derive(Debug, Clone)]
pub struct LaunchConfig {
    /// The `agentplane` binary: runs `sandbox-exec`, and the node agent inside when
    /// `node_agent` is not there.
    pub binary: PathBuf,
    /// `agentplane-node-agent`, the node agent alone, which each sandbox runs when it
    /// is installed beside `binary`: an idle one then maps a few MiB less.
    pub node_agent: Option<PathBuf>,
    /// The shared agent CLIs (installed outside by the embedded node agent), bound
    /// read-only.
    pub agents_dir: PathBuf,
    /// Where each sandbox's own folders are made (`STATE/sandboxes`).
    pub root: PathBuf,
    /// Host paths hidden inside every sandbox: the watched folder, the state directory.
    pub masked: Vec<PathBuf>,
}

/// What the store asks for, from the Sandbox's spec (paths resolved and confined).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub isolation: Isolation,
    pub network: NetworkMode,
    pub allow: Vec<String>,
    pub limits: Option<SandboxLimits>,
    /// A host workspace the spec names; `None`: a folder of the sandbox's own.
    pub workspace: Option<PathBuf>,
    pub binds: Vec<(PathBuf, PathBuf, bool)>,
    pub env: BTreeMap<String, String>,
    /// The Sandbox's own credentials (placeholders inside, values in the proxy).
    pub credentials: Vec<credentials::Resolved>,
}

impl Desired {
    /// Whether the sandbox's network goes through the proxy, which can swap credentials.
    pub fn holds_credentials(&self) -> bool {
        self.isolation == Isolation::Bubblewrap && self.network == NetworkMode::Allowlist
    }
}

/// What is known of a managed sandbox now, for its status.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub phase: SandboxPhase,
    /// Why it is in that phase (for the `Ready` condition).
    pub reason: &'static str,
    pub message: String,
    pub endpoint: Option<String>,
    pub pid: Option<u32>,
    pub started_at: Option<Time>,
    pub restarts: u32,
    pub applied_limits: Vec<String>,
    /// The host uid its processes run as, when isolated.
    pub host_uid: Option<u32>,
    /// The seccomp filter in force, when isolated.
    pub seccomp: Option<&'static str>,
    pub denied: u64,
    pub last_denied: Vec<String>,
    pub isolation: &'static str,
    /// What the proxy counted of each credential.
    pub credentials: Vec<agentplane_egress::CredentialCount>,
    /// Since when it is suspended (phase `Suspended`).
    pub suspended_at: Option<Time>,
    /// Suspended by its spec: only the spec wakes it.
    pub held: bool,
}

impl Observed {
    fn new(isolation: Isolation) -> Observed {
        Observed {
            phase: SandboxPhase::Starting,
            reason: "Starting",
            message: "the node agent is starting".into(),
            endpoint: None,
            pid: None,
            started_at: None,
            restarts: 0,
            applied_limits: Vec::new(),
            host_uid: None,
            seccomp: None,
            denied: 0,
            last_denied: Vec::new(),
            credentials: Vec::new(),
            suspended_at: None,
            held: false,
            isolation: match isolation {
                Isolation::Bubblewrap => "bubblewrap",
                Isolation::None => "none",
            },
        }
    }
}

struct Running {
    uid: String,
    desired: Desired,
    power: watch::Sender<Power>,
    observed: watch::Receiver<Observed>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    dir: PathBuf,
}

/// The managed sandboxes of one directory store.
pub struct Managed {
    config: LaunchConfig,
    sandboxes: Arc<Sandboxes>,
    /// Where the folders a sandbox can write are recorded before it starts.
    writes: Arc<SandboxWrites>,
    running: Mutex<HashMap<String, Running>>,
    /// Each sandbox's credentials, its own and those of what runs on it.
    books: credentials::Books,
    /// Told the sandbox's name whenever what is observed changes (the store requeues it
    /// and what runs on it).
    changed: Arc<dyn Fn(&str) + Send + Sync>,
}

impl Managed {
    pub fn new(
        config: LaunchConfig,
        sandboxes: Arc<Sandboxes>,
        writes: Arc<SandboxWrites>,
        changed: Arc<dyn Fn(&str) + Send + Sync>,
    ) -> Managed {
        Managed { config, sandboxes, writes, running: Mutex::new(HashMap::new()), books: Default::default(), changed }
    }

    /// Lends the Session or Process `owner` placeholders for its credentials on sandbox
    /// `name` (see `credentials`), or says why that sandbox cannot hold them. An owner
    /// with no credentials has what it was lent anywhere released.
    pub fn lend(
        &self,
        name: &str,
        owner: &str,
        credentials: Vec<credentials::Resolved>,
    ) -> Result<BTreeMap<String, String>, String> {
        // The status follows by the proxy's counts, which a change of the table moves.
        if credentials.is_empty() {
            self.books.release(owner);
            return Ok(BTreeMap::new());
        }
        let holds = self.lock().get(name).map(|r| r.desired.holds_credentials());
        match holds {
            Some(true) => self.books.lend(name, owner, credentials),
            Some(false) => Err(format!(
                "credentials need a sandbox whose network goes through its proxy (isolation: bubblewrap, network: \
                 allowlist); sandbox {name} is not one, so its programs would hold the values"
            )),
            None => Err(format!(
                "credentials need a managed sandbox whose network goes through its proxy; sandbox {name} is not \
                 running here (yet)"
            )),
        }
    }

    pub fn dir_of(&self, name: &str, uid: &str) -> PathBuf {
        sandbox_dir(&self.config.root, name, uid)
    }

    /// Keeps sandbox `name` running as `desired`, awake or suspended as `power` says:
    /// started when new, started anew when its spec changed (or it was replaced by
    /// another of the same name). Answers what is observed now.
    pub async fn ensure(&self, name: &str, uid: &str, desired: Desired, power: Power) -> Observed {
        let replaced = {
            let mut running = self.lock();
            match running.get(name) {
                Some(r) if r.uid == uid && r.desired == desired && !r.task.is_finished() => {
                    r.power.send_if_modified(|p| std::mem::replace(p, power) != power);
                    return r.observed.borrow().clone();
                }
                Some(_) => running.remove(name),
                None => None,
            }
        };
        if let Some(old) = replaced {
            let same = old.uid == uid;
            info!(sandbox = name, "the sandbox's spec changed: starting it anew");
            stop(old, !same).await;
        }
        let dir = self.dir_of(name, uid);
        let (tx, rx) = watch::channel(Observed::new(desired.isolation));
        let stop = CancellationToken::new();
        let (power_tx, power_rx) = watch::channel(power);
        let supervisor = Supervisor {
            power: power_rx,
            wake: Arc::new(tokio::sync::Notify::new()),
            name: name.to_string(),
            dir: dir.clone(),
            desired: desired.clone(),
            config: self.config.clone(),
            sandboxes: Arc::clone(&self.sandboxes),
            writes: Arc::clone(&self.writes),
            changed: Arc::clone(&self.changed),
            observed: tx,
            stop: stop.clone(),
            book: self.books.of(name),
        };
        let task = tokio::spawn(supervisor.run());
        let observed = rx.borrow().clone();
        self.lock().insert(
            name.to_string(),
            Running { uid: uid.to_string(), desired, power: power_tx, observed: rx, stop, task, dir },
        );
        observed
    }

    /// Stops sandbox `name` and removes what it made (its own folders, its groups).
    pub async fn remove(&self, name: &str) {
        let running = self.lock().remove(name);
        self.sandboxes.remove(name);
        self.books.remove(name);
        if let Some(running) = running {
            stop(running, true).await;
        }
    }

    /// Removes the folder of a sandbox no longer running here (deleted while `up` was
    /// not running).
    pub fn remove_leftover(&self, name: &str, uid: &str) {
        let dir = self.dir_of(name, uid);
        if dir.exists() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    /// Stops every sandbox, keeping their folders (the next `up` starts them again).
    pub async fn shutdown(&self) {
        let all: Vec<Running> = self.lock().drain().map(|(_, r)| r).collect();
        for running in all {
            stop(running, false).await;
        }
    }

    /// What is observed of sandbox `name`, if it is managed here.
    pub fn observed(&self, name: &str) -> Option<Observed> {
        self.lock().get(name).map(|r| r.observed.borrow().clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn stop(running: Running, remove_dir: bool) {
    running.stop.cancel();
    let _ = running.task.await;
    if remove_dir {
        let dir = running.dir.clone();
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
    }
}

/// The folder of sandbox `name` (with uid `uid`) under `root` (`STATE/sandboxes`): its
/// workspace, HOME, data, sockets and token.
pub fn sandbox_dir(root: &Path, name: &str, uid: &str) -> PathBuf {
    root.join(format!("{name}-{}", uid.get(..8).unwrap_or(uid)))
}

/// The path of the token file of a managed sandbox's folder (read by the CLI).
pub fn token_path(dir: &Path) -> PathBuf {
    dir.join("token")
}

struct Supervisor {
    name: String,
    /// Whether it should be awake, from its spec.
    power: watch::Receiver<Power>,
    /// Wakes it when it is suspended for being idle.
    wake: Arc<tokio::sync::Notify>,
    dir: PathBuf,
    desired: Desired,
    config: LaunchConfig,
    sandboxes: Arc<Sandboxes>,
    writes: Arc<SandboxWrites>,
    changed: Arc<dyn Fn(&str) + Send + Sync>,
    observed: watch::Sender<Observed>,
    stop: CancellationToken,
    /// The sandbox's credentials, which its proxy swaps.
    book: Arc<credentials::Book>,
}

/// The sandbox's own folders on the host.
struct Dirs {
    workspace: PathBuf,
    home: PathBuf,
    data: PathBuf,
    /// Holds the proxy's socket; bound in read-only.
    proxy: PathBuf,
}

/// What a start needs that stays the same from one start to the next.
struct Prepared {
    dirs: Dirs,
    identity: Option<identity::Identity>,
    groups: cgroup::Groups,
    tmp_bytes: u64,
    /// The allowlist proxy's socket, and the loopback services tunnelled through it.
    proxy: Option<Vec<(String, u16)>>,
    /// The placeholders of the Sandbox's own credentials, by variable.
    placeholders: BTreeMap<String, String>,
    /// Whether the proxy's CA is in the run folder for the sandbox to trust.
    trusted: bool,
}

impl Supervisor {
    fn update(&self, change: impl FnOnce(&mut Observed)) {
        let mut changed = false;
        self.observed.send_if_modified(|o| {
            let before = o.clone();
            change(o);
            changed = *o != before;
            changed
        });
        if changed {
            (self.changed)(&self.name);
        }
    }

    fn fail(&self, reason: &'static str, message: String) {
        warn!(sandbox = %self.name, reason, "{message}");
        self.sandboxes.set_not_ready(&self.name, message.clone());
        self.update(|o| {
            o.phase = SandboxPhase::Failed;
            o.reason = reason;
            o.message = message;
            o.pid = None;
        });
    }

    async fn run(mut self) {
        let bwrap = match self.desired.isolation {
            Isolation::Bubblewrap => match bwrap::find_bwrap() {
                Some(bwrap) => Some(bwrap),
                None => {
                    self.sandboxes.set_not_ready(&self.name, "bubblewrap is not installed");
                    self.update(|o| {
                        o.phase = SandboxPhase::Pending;
                        o.reason = "BubblewrapMissing";
                        o.message = "isolation: bubblewrap needs `bwrap` on PATH (Debian and Ubuntu: apt-get install \
                                     bubblewrap); write `isolation: none` to run it unisolated"
                            .into();
                    });
                    return self.stop.cancelled().await;
                }
            },
            Isolation::None => None,
        };
        let group_name =
            self.dir.file_name().map(|n| format!("agentplane-{}", n.to_string_lossy())).unwrap_or_default();
        let prepared = match self.prepare(bwrap.is_some(), &group_name).await {
            Ok(prepared) => prepared,
            Err((reason, message)) => return self.fail(reason, message),
        };
        let token = agentplane_node_agent::random::hex(24);
        if let Err(e) = write_private(&token_path(&self.dir), &token) {
            return self.fail("CannotPrepare", format!("cannot keep the token: {e}"));
        }

        // The host's end of the node agent's socket: in the sandbox's folder, which
        // is never bound in. Two ways to it on the host's loopback: the controller's
        // own, and the endpoint everyone else is given, where a connection to a
        // sandbox suspended for being idle wakes it and waits until it serves.
        let api_socket = self.dir.join("api.sock");
        let (own, endpoint) = match (loopback().await, loopback().await) {
            (Ok(own), Ok(endpoint)) => (own, endpoint),
            (Err(e), _) | (_, Err(e)) => {
                return self.fail("CannotPrepare", format!("cannot listen on the loopback: {e}"));
            }
        };
        tokio::spawn(netproxy::bridge_to_unix(own.0, api_socket.clone(), self.stop.clone()));
        let waking = self.waking();
        tokio::spawn(netproxy::bridge_to_unix_when(endpoint.0, api_socket.clone(), self.stop.clone(), move || {
            waking.clone().awake()
        }));
        // Its streams last as long as the sandbox: they never keep it awake.
        let client = match Client::new(&own.1, Some(token.clone())) {
            Ok(client) => client.observing(),
            Err(e) => return self.fail("CannotPrepare", e.to_string()),
        };
        let endpoint = endpoint.1;
        self.update(|o| o.endpoint = Some(endpoint.clone()));

        let mut delay = RESTART_MIN;
        let mut suspended: Option<Why> = None;
        loop {
            if self.stop.is_cancelled() {
                break;
            }
            if self.power.borrow().suspend {
                suspended = Some(Why::Held);
            }
            if let Some(why) = suspended.take() {
                if !self.sleep(why).await {
                    break;
                }
                delay = RESTART_MIN;
                self.update(|o| {
                    o.phase = SandboxPhase::Starting;
                    o.reason = "Waking";
                    o.message = "woken: the node agent is starting".into();
                    o.suspended_at = None;
                    o.held = false;
                });
            }
            let started = std::time::Instant::now();
            let launched = match self.launch_plan(bwrap.as_deref(), &prepared, &api_socket) {
                Ok(plan) => self.start(plan, &token).await,
                Err(e) => Err(e),
            };
            match launched {
                Ok(mut child) => {
                    let pid = child.id();
                    let installer = self.sandboxes.local_node();
                    self.sandboxes.insert_with_installer(&self.name, client.clone(), installer);
                    info!(sandbox = %self.name, pid, endpoint = %endpoint, "sandbox ready");
                    self.update(|o| {
                        o.phase = SandboxPhase::Ready;
                        o.reason = "NodeAgentReady";
                        o.message = "the node agent answers".into();
                        o.pid = pid;
                        o.started_at = Some(crate::conditions::now());
                    });
                    let started = k8s_openapi::jiff::Timestamp::now();
                    let status = tokio::select! {
                        status = child.wait() => Some(status),
                        _ = self.stop.cancelled() => None,
                        why = self.until_suspended(&client, started) => {
                            info!(sandbox = %self.name, why = ?why, "suspending the sandbox");
                            terminate(&mut child).await;
                            suspended = Some(why);
                            continue;
                        }
                    };
                    let Some(status) = status else {
                        terminate(&mut child).await;
                        break;
                    };
                    // Gone as `up` stops (a signal that reached it too): no restart, and
                    // nothing to warn about.
                    if self.stop.is_cancelled() {
                        break;
                    }
                    let how = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                    warn!(sandbox = %self.name, %how, "the sandbox's node agent exited; starting it again");
                    self.sandboxes
                        .set_not_ready(&self.name, format!("its node agent exited ({how}); starting it again"));
                    self.update(|o| {
                        o.phase = SandboxPhase::Restarting;
                        o.reason = "NodeAgentExited";
                        o.message = format!("the node agent exited ({how}); starting it again");
                        o.pid = None;
                        o.restarts += 1;
                    });
                }
                Err(e) => {
                    warn!(sandbox = %self.name, error = %e, "the sandbox did not start");
                    self.sandboxes.set_not_ready(&self.name, e.clone());
                    self.update(|o| {
                        o.phase = SandboxPhase::Restarting;
                        o.reason = "StartFailed";
                        o.message = e;
                        o.pid = None;
                        o.restarts += 1;
                    });
                }
            }
            if started.elapsed() >= RESTART_RESET {
                delay = RESTART_MIN;
            }
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = self.stop.cancelled() => break,
            }
            delay = (delay * 2).min(RESTART_MAX);
        }
        let groups_left = prepared.groups.clone();
        let _ = tokio::task::spawn_blocking(move || cgroup::remove(&groups_left)).await;
        let _ = std::fs::remove_file(&api_socket);
    }

    /// Everything made once per supervisor: the folders (given to the sandbox's
    /// user), its cgroups with their limits, the allowlist proxy. An error is a
    /// reason and a message, and leaves no group behind.
    async fn prepare(&self, isolated: bool, group_name: &str) -> Result<Prepared, (&'static str, String)> {
        let wanted =
            cgroup::Wanted::from_spec(self.desired.limits.as_ref()).map_err(|e| ("InvalidLimits", e.to_string()))?;
        let tmp_bytes =
            cgroup::tmp_bytes(self.desired.limits.as_ref()).map_err(|e| ("InvalidLimits", e.to_string()))?;
        let (dir, root, seed) = (self.dir.clone(), self.config.root.clone(), self.dir_seed());
        let (agents_dir, workspace) = (self.config.agents_dir.clone(), self.desired.workspace.clone());
        let writable: Vec<PathBuf> = self.desired.binds.iter().filter(|b| b.2).map(|b| b.0.clone()).collect();
        let (writes, name) = (Arc::clone(&self.writes), self.name.clone());
        let made = tokio::task::spawn_blocking(move || {
            // Recorded before the sandbox can write there: never read as desired state.
            for folder in workspace.iter().chain(&writable) {
                writes
                    .grant(&name, folder)
                    .map_err(|e| format!("recording {} as the sandbox's: {e}", folder.display()))?;
            }
            make_dirs(&dir, &agents_dir, workspace, isolated, &root, &seed, &writable)
        })
        .await
        .unwrap_or_else(|e| Err(format!("preparing the sandbox's folders: {e}")));
        let (dirs, identity) = made.map_err(|e| ("CannotPrepare", e))?;
        if let Some(identity) = identity {
            self.update(|o| {
                o.host_uid = Some(identity.uid);
                o.seccomp = Some(seccomp::DESCRIPTION);
            });
        }

        let limits = self.desired.limits.clone();
        let name = group_name.to_string();
        let groups = match tokio::task::spawn_blocking(move || cgroup::create(&name, &wanted, limits.as_ref())).await {
            Ok(Ok(groups)) => groups,
            Ok(Err(why)) => {
                return Err(("LimitsNotApplied", format!("the sandbox's limits cannot be enforced: {why}")));
            }
            Err(panicked) => {
                let name = group_name.to_string();
                let _ = tokio::task::spawn_blocking(move || cgroup::remove_named(&name)).await;
                return Err(("LimitsNotApplied", format!("setting the sandbox's limits failed: {panicked}")));
            }
        };
        self.update(|o| o.applied_limits = groups.applied.clone());

        // The proxy, outside, for the whole life of the supervisor.
        let mut proxy = None;
        let mut trusted = false;
        if self.desired.network == NetworkMode::Allowlist {
            let interception = self.interception(&dirs.proxy).await;
            trusted = interception.is_some();
            let served = self.serve_proxy(&dirs.proxy, interception);
            match served {
                Ok(tunnels) => proxy = Some(tunnels),
                Err(e) => {
                    cgroup::remove(&groups);
                    return Err(e);
                }
            }
        }
        let placeholders = match self.book.lend(credentials::SANDBOX_OWNER, self.desired.credentials.clone()) {
            Ok(placeholders) => placeholders,
            Err(e) => {
                cgroup::remove(&groups);
                return Err(("InvalidCredentials", e));
            }
        };
        Ok(Prepared { dirs, identity, groups, tmp_bytes, proxy, placeholders, trusted })
    }

    /// A stable seed for the sandbox's host uid: its folder's name holds its uid.
    fn dir_seed(&self) -> String {
        self.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// The environment inside: the spec's, over the few variables every sandbox has.
    fn environment(&self, home: &Path, tmp: &Path, proxied: bool, prepared: &Prepared) -> BTreeMap<String, String> {
        let mut env = BTreeMap::from([
            ("PATH".to_string(), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string()),
            ("HOME".to_string(), home.display().to_string()),
            ("TMPDIR".to_string(), tmp.display().to_string()),
            ("LANG".to_string(), "C.UTF-8".to_string()),
            ("USER".to_string(), "agent".to_string()),
        ]);
        if self.desired.isolation == Isolation::Bubblewrap {
            // What Claude Code asks for before it skips permissions: this is the
            // sandbox it means. Codex's driver turns its own sandbox off for it too.
            env.insert("IS_SANDBOX".into(), "1".into());
            env.insert(agentplane_node_agent::ISOLATION_VARIABLE.into(), "bubblewrap".into());
        }
        if let Ok(filter) = std::env::var("RUST_LOG") {
            env.insert("RUST_LOG".into(), filter);
        }
        if proxied {
            let proxy = format!("http://{}", SANDBOX_PROXY_ADDR);
            for name in PROXY_VARIABLES {
                env.insert((*name).to_string(), proxy.clone());
            }
            // Loopback services on the allowlist are tunnelled at their own address.
            for name in ["NO_PROXY", "no_proxy"] {
                env.insert(name.into(), "localhost,127.0.0.1,::1".into());
            }
            if prepared.trusted {
                let run = Path::new(bwrap::RUN);
                let (ca, bundle) = (run.join(TRUST_CA), run.join(TRUST_BUNDLE));
                env.insert("NODE_EXTRA_CA_CERTS".into(), ca.display().to_string());
                for name in ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"] {
                    env.insert(name.into(), bundle.display().to_string());
                }
            }
        }
        env.extend(self.desired.env.clone());
        env.extend(prepared.placeholders.iter().map(|(k, v)| (k.clone(), v.clone())));
        env
    }

    /// What the launcher is to do for one start.
    fn launch_plan(
        &self,
        bwrap: Option<&Path>,
        prepared: &Prepared,
        api_socket: &Path,
    ) -> Result<launch::Launch, String> {
        let dirs = &prepared.dirs;
        // The node agent alone, else `agentplane node-agent`.
        let (host_binary, subcommand) = match &self.config.node_agent {
            Some(alone) => (alone.clone(), None),
            None => (self.config.binary.clone(), Some("node-agent".to_string())),
        };
        let (binary, data, run): (PathBuf, PathBuf, PathBuf) = match bwrap {
            Some(_) => (bwrap::BINARY.into(), bwrap::DATA.into(), bwrap::RUN.into()),
            None => (host_binary.clone(), dirs.data.clone(), dirs.proxy.clone()),
        };
        let text = |p: &Path| p.to_str().map(str::to_string).ok_or_else(|| format!("{} is not UTF-8", p.display()));
        let mut command: Vec<String> = std::iter::once(text(&binary)?).chain(subcommand).collect();
        command.extend([
            "--listen-inherited".into(),
            "--token-stdin".into(),
            "--announce-ready".into(),
            "--data-dir".into(),
            text(&data)?,
            "--agents-dir".into(),
            text(&self.config.agents_dir)?,
        ]);
        if let Some(tunnels) = &prepared.proxy {
            command.push("--proxy-socket".into());
            command.push(text(&run.join("proxy.sock"))?);
            for (host, port) in tunnels {
                command.push("--tunnel".into());
                command.push(if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") });
            }
        }
        let isolated = bwrap.map(|bwrap| {
            let mut binds: Vec<(PathBuf, PathBuf, bool)> =
                vec![(self.config.agents_dir.clone(), self.config.agents_dir.clone(), false)];
            binds.extend(self.desired.binds.iter().cloned());
            binds.push((host_binary.clone(), PathBuf::from(bwrap::BINARY), false));
            binds.push((dirs.workspace.clone(), PathBuf::from(bwrap::WORKSPACE), true));
            binds.push((dirs.home.clone(), PathBuf::from(bwrap::HOME), true));
            binds.push((dirs.data.clone(), PathBuf::from(bwrap::DATA), true));
            binds.push((dirs.proxy.clone(), PathBuf::from(bwrap::RUN), false));
            // Programs that read only the system bundle trust the sandbox's CA too.
            if prepared.trusted && Path::new(SYSTEM_BUNDLE).is_file() {
                binds.push((dirs.proxy.join(TRUST_BUNDLE), PathBuf::from(SYSTEM_BUNDLE), false));
            }
            launch::Isolated {
                bwrap: bwrap.to_path_buf(),
                hostname: self.name.clone(),
                network: self.desired.network,
                masked: self.masked(),
                binds,
                tmp_bytes: prepared.tmp_bytes,
            }
        });
        let env = match bwrap {
            Some(_) => self.environment(Path::new(bwrap::HOME), Path::new("/tmp"), prepared.proxy.is_some(), prepared),
            None => self.environment(&dirs.home, &std::env::temp_dir(), false, prepared),
        };
        Ok(launch::Launch {
            api_socket: api_socket.to_path_buf(),
            cgroups: prepared.groups.dirs.clone(),
            switch_to: prepared.identity.filter(|i| i.switch).map(|i| (i.uid, i.gid)),
            command,
            env,
            workdir: dirs.workspace.clone(),
            isolated,
        })
    }

    /// Every HOME of the host besides `/home` and `/root` (which are never bound), and
    /// the folders that hold the user's resources and the controller's state.
    fn masked(&self) -> Vec<PathBuf> {
        let mut masked = self.config.masked.clone();
        if let Some(home) = std::env::var_os("HOME").map(PathBuf::from)
            && home.is_absolute()
            && !home.starts_with("/home")
            && !home.starts_with("/root")
            && home != Path::new("/")
        {
            masked.push(home);
        }
        masked
    }

    /// Starts the node agent through the launcher and waits until it says it serves.
    async fn start(&self, plan: launch::Launch, token: &str) -> Result<tokio::process::Child, String> {
        let plan_path = self.dir.join("launch.json");
        launch::write(&plan_path, &plan).map_err(|e| format!("cannot write {}: {e}", plan_path.display()))?;
        let log_path = self.dir.join("node-agent.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
        let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);
        let mut command = tokio::process::Command::new(&self.config.binary);
        command.arg("sandbox-exec").arg("--launch").arg(&plan_path).env_clear();
        command.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(log).kill_on_drop(true);
        // A process group of its own: Ctrl-C at `up`'s terminal reaches `up`, which stops
        // the sandbox in order, rather than the sandbox at the same instant (its
        // processes stopped under it, then restarted, as if it had crashed).
        command.process_group(0);
        let mut child = command.spawn().map_err(|e| format!("cannot start {}: {e}", self.config.binary.display()))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(format!("{token}\n").as_bytes()).await;
            let _ = stdin.shutdown().await;
        }
        let stdout = child.stdout.take().ok_or("the node agent's stdout is not piped")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let ready = tokio::select! {
            line = tokio::time::timeout(READY_TIMEOUT, lines.next_line()) => line,
            _ = self.stop.cancelled() => {
                terminate(&mut child).await;
                return Err("stopped while starting".into());
            }
        };
        match ready {
            // `ready URL`; the URL is known here (the socket is ours).
            Ok(Ok(Some(line))) if line.split_whitespace().next() == Some("ready") => {
                // Nothing more is printed there; drained so that a stray write never blocks.
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                Ok(child)
            }
            Ok(_) => {
                let status = child.wait().await.map(|s| s.to_string()).unwrap_or_default();
                let said = last_lines(&log_path, log_start);
                Err(format!("the node agent exited before serving ({status}){said}: see {}", log_path.display()))
            }
            Err(_) => {
                terminate(&mut child).await;
                Err(format!("the node agent did not serve within {READY_TIMEOUT:?}: see {}", log_path.display()))
            }
        }
    }
}

/// Makes the sandbox's folders and gives them (with what the spec grants writable) to
/// its host user; answers them and that user (none when not isolated).
fn make_dirs(
    dir: &Path,
    agents_dir: &Path,
    workspace: Option<PathBuf>,
    isolated: bool,
    root: &Path,
    seed: &str,
    writable: &[PathBuf],
) -> Result<(Dirs, Option<identity::Identity>), String> {
    let make = |path: &Path| {
        std::fs::create_dir_all(path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))
            .map(|()| path.to_path_buf())
    };
    make(dir)?;
    // Bound in read-only: it must exist before the embedded node agent installs anything.
    make(agents_dir)?;
    {
        use std::os::unix::fs::PermissionsExt;
        // Its token, its socket and its launch plan are in there: the folder is the
        // controller's user's alone.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot restrict {}: {e}", dir.display()))?;
    }
    let workspace = match workspace {
        Some(path) => path,
        None => make(&dir.join("workspace"))?,
    };
    let dirs = Dirs {
        workspace,
        home: make(&dir.join("home"))?,
        data: make(&dir.join("data"))?,
        proxy: make(&dir.join("run"))?,
    };
    if !isolated {
        return Ok((dirs, None));
    }
    let identity = identity::for_sandbox(root, dir, seed).map_err(|e| format!("choosing the sandbox's user: {e}"))?;
    for folder in [&dirs.workspace, &dirs.home, &dirs.data].into_iter().chain(writable) {
        identity::give(folder, identity)
            .map_err(|e| format!("giving {} to the sandbox's user {}: {e}", folder.display(), identity.uid))?;
    }
    Ok((dirs, Some(identity)))
}

/// The last lines the log got since `from` (bounded), to say why a start failed.
fn last_lines(log: &Path, from: u64) -> String {
    use std::io::{Read, Seek};
    const MOST: u64 = 2048;
    let Ok(mut file) = std::fs::File::open(log) else { return String::new() };
    let end = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = from.max(end.saturating_sub(MOST));
    let mut bytes = Vec::new();
    if file.seek(std::io::SeekFrom::Start(start)).is_err() || file.take(MOST).read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let said: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    match said.last() {
        Some(last) => format!(": {}", last.trim()),
        None => String::new(),
    }
}

/// A listener on the host's loopback, and its URL.
async fn loopback() -> std::io::Result<(tokio::net::TcpListener, String)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    Ok((listener, url))
}

/// SIGTERM, then SIGKILL after a grace: under bubblewrap the sandbox's whole PID
/// namespace goes with it.
async fn terminate(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
        if tokio::time::timeout(STOP_GRACE, child.wait()).await.is_ok() {
            return;
        }
    }
    let _ = child.kill().await;
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(contents.as_bytes())
}
