//! What the resource verbs share: the watched directory and its state directory, how a
//! person names resources on the command line, finding the file that declares one,
//! reaching the node agent of a running `agentplane up`, and appending to a Session's
//! file (under the edit lock, see `edit`).

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use agentplane_controller::dir::parse::{Declared, FileError, parse_file};
use agentplane_controller::dir::state::{DEFAULT_STATE_DIR, StateDir, UpInfo};
use agentplane_controller::dir::store::yaml_files;
use agentplane_crds::{Key, Kind, Object};
use agentplane_node_agent::client::Client;
use anyhow::{Context, bail};
use clap::Args;

use crate::edit::{self, EDIT_ATTEMPTS, FileId, Outcome};
use crate::resources::SpecItem;
use crate::yaml_edit;

// Where `get` and `logs` name these from, since before they moved to `resources`.
pub use crate::resources::{not_found, parse_kind, parse_one, ref_name};

/// `--dir` and `--state-dir`, as `agentplane up` takes them.
#[derive(Args, Debug, Clone)]
pub struct DirArgs {
    /// The watched directory of resources (the one `agentplane up --dir` watches).
    #[arg(long, env = "AGENTPLANE_DIR", default_value = "agentplane.d")]
    pub dir: PathBuf,
    /// Where `agentplane up` keeps status (default DIR/.agentplane).
    #[arg(long, env = "AGENTPLANE_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
}

/// The node agent that `proc`, `session` and `agent` drive: the one at `--url`, else
/// the one a running `agentplane up` embeds on `--dir`, else the default address.
#[derive(Args, Debug, Clone)]
pub struct NodeAgentTarget {
    /// The node agent's URL (default: the node agent of the `agentplane up` running on
    /// --dir, else http://127.0.0.1:2468).
    #[arg(long, global = true, env = "AGENTPLANE_URL")]
    pub url: Option<String>,
    /// The node agent's bearer token (not needed with --dir: `up` says it).
    #[arg(long, global = true, env = "AGENTPLANE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Reach the node agent of the `agentplane up` watching this directory.
    #[arg(long, global = true, env = "AGENTPLANE_DIR")]
    pub dir: Option<PathBuf>,
    /// Where that `agentplane up` keeps status (default DIR/.agentplane).
    #[arg(long, global = true, env = "AGENTPLANE_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
}

/// Where a node agent listens when nothing says otherwise.
const DEFAULT_NODE_AGENT_URL: &str = "http://127.0.0.1:2468";

impl NodeAgentTarget {
    pub fn client(&self) -> anyhow::Result<Client> {
        match (&self.url, &self.dir) {
            (Some(url), _) => Ok(Client::new(url, self.token.clone())?),
            (None, Some(dir)) => {
                Workspace::new(&DirArgs { dir: dir.clone(), state_dir: self.state_dir.clone() }).node_agent()
            }
            (None, None) => Ok(Client::new(DEFAULT_NODE_AGENT_URL, self.token.clone())?),
        }
    }
}

pub struct Workspace {
    pub dir: PathBuf,
    pub state: StateDir,
}

/// A file of the watched directory, as the store would read it now.
pub struct DirFile {
    /// Relative to the watched directory.
    pub relative: String,
    pub path: PathBuf,
    /// The file `path` led to when `text` was read from it.
    pub id: FileId,
    pub text: String,
    pub parsed: Result<Vec<Declared>, FileError>,
}

/// The file and document that declare a resource, as the store would read them now.
pub struct Declaration {
    /// Relative to the watched directory.
    pub file: String,
    pub path: PathBuf,
    /// The file `path` led to when `text` was read from it: an edit replaces only that.
    pub id: FileId,
    pub text: String,
    /// Everything the file declares, this resource at `index`.
    pub declared: Vec<Declared>,
    pub index: usize,
}

impl Declaration {
    pub fn this(&self) -> &Declared {
        &self.declared[self.index]
    }
}

impl Workspace {
    pub fn new(args: &DirArgs) -> Workspace {
        let state = args.state_dir.clone().unwrap_or_else(|| args.dir.join(DEFAULT_STATE_DIR));
        Workspace { dir: args.dir.clone(), state: StateDir::new(state) }
    }

    /// "Not found", saying in which folder it was looked for.
    pub fn not_found(&self, key: &Key) -> anyhow::Error {
        let dir = std::path::absolute(&self.dir).unwrap_or_else(|_| self.dir.clone());
        anyhow::anyhow!("{}, in the folder {}", not_found(key), dir.display())
    }

    /// A stored resource; an unreadable record is an error.
    pub fn record(&self, key: &Key) -> anyhow::Result<Option<Object>> {
        let record =
            self.state.read(key).transpose().map_err(|e| anyhow::anyhow!("a state record cannot be read: {e}"))?;
        if record.is_none() && key.kind == Kind::Sandbox && key.name == agentplane_crds::LOCAL_SANDBOX {
            return Ok(self.local_sandbox(&key.namespace));
        }
        Ok(record)
    }

    pub fn require(&self, key: &Key) -> anyhow::Result<Object> {
        self.record(key)?.ok_or_else(|| self.not_found(key))
    }

    /// Every stored resource of `kind` (in `namespace`, or all), sorted; records that
    /// cannot be read are reported and skipped.
    pub fn records(&self, kind: Kind, namespace: Option<&str>) -> Vec<Object> {
        let mut out: Vec<Object> = self
            .state
            .load_all()
            .into_iter()
            .filter_map(|record| record.map_err(|e| eprintln!("warning: a state record cannot be read: {e}")).ok())
            .filter(|o| o.kind() == kind && namespace.is_none_or(|n| o.key().namespace == n))
            .collect();
        if kind == Kind::Sandbox
            && let Some(local) = self.local_sandbox(namespace.unwrap_or("default"))
        {
            out.push(local);
        }
        out.sort_by_key(|o| o.key());
        out
    }

    /// The implicit sandbox `local`, the node agent a running `up` embeds: no file
    /// declares it and the store keeps no record of it, so it is shown from `up.json`.
    fn local_sandbox(&self, namespace: &str) -> Option<Object> {
        let info = self.up()?;
        let mut sandbox = agentplane_crds::Sandbox::new(
            agentplane_crds::LOCAL_SANDBOX,
            agentplane_crds::SandboxSpec { endpoint: Some(info.url.clone()), ..Default::default() },
        );
        sandbox.metadata.namespace = Some(namespace.to_string());
        sandbox.metadata.creation_timestamp =
            fs::metadata(self.state.up_path()).and_then(|m| m.modified()).ok().map(|t| {
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::try_from(t).unwrap_or_default(),
                )
            });
        let mut status = agentplane_crds::SandboxStatus {
            node_agent_version: Some(env!("CARGO_PKG_VERSION").to_string()),
            ..Default::default()
        };
        let message = format!("embedded in `agentplane up` (pid {}) on {}", info.pid, info.dir.display());
        agentplane_controller::conditions::set(&mut status.conditions, "Ready", true, "Embedded", message, None);
        sandbox.status = Some(status);
        Some(Object::Sandbox(sandbox))
    }

    /// The running `agentplane up` on this directory, if there is one.
    pub fn up(&self) -> Option<UpInfo> {
        let info = self.state.read_up()?;
        // A killed `up` leaves its file behind: the pid tells.
        let pid = nix::unistd::Pid::from_raw(i32::try_from(info.pid).ok()?);
        match nix::sys::signal::kill(pid, None) {
            Ok(()) | Err(nix::errno::Errno::EPERM) => Some(info),
            Err(_) => None,
        }
    }

    /// The running `agentplane up`; none is an error saying how to start one.
    pub fn running_up(&self) -> anyhow::Result<UpInfo> {
        let Some(info) = self.up() else {
            bail!(
                "no `agentplane up` is running on {}: start one with `agentplane up --dir {}`",
                self.dir.display(),
                crate::printing::shell_quote(&self.dir.to_string_lossy())
            )
        };
        Ok(info)
    }

    /// The node agent of the running `agentplane up`.
    pub fn node_agent(&self) -> anyhow::Result<Client> {
        let info = self.running_up()?;
        Ok(Client::new(&info.url, info.token)?)
    }

    /// The node agent a Process or Session runs on: the embedded one (`local`), an
    /// external Sandbox's, or a managed Sandbox's (its endpoint from its status, its
    /// token from its folder in the state directory).
    pub fn node_agent_for(&self, object: &Object) -> anyhow::Result<Client> {
        let sandbox = match object {
            Object::Process(p) => p.placed_sandbox().to_string(),
            Object::Session(s) => s.placed_sandbox().to_string(),
            Object::Sandbox(s) => s.metadata.name.clone().unwrap_or_default(),
            Object::SandboxTemplate(_) | Object::SandboxWarmPool(_) => {
                bail!("{} runs nothing of its own", crate::resources::ref_name(&object.key()))
            }
        };
        if sandbox == agentplane_crds::LOCAL_SANDBOX {
            return self.node_agent();
        }
        let namespace = object.key().namespace;
        let key = Key { kind: Kind::Sandbox, namespace, name: sandbox.clone() };
        let Some(Object::Sandbox(record)) = self.record(&key)? else {
            bail!(
                "{} runs on sandbox {sandbox:?}, which this folder does not declare",
                crate::resources::ref_name(&object.key())
            )
        };
        if self.up().is_none() {
            bail!(
                "no `agentplane up` is running on {}, so sandbox {sandbox:?} is not either: start one with `agentplane up --dir {}`",
                self.dir.display(),
                crate::printing::shell_quote(&self.dir.to_string_lossy())
            )
        }
        let Some(endpoint) = record.endpoint() else {
            bail!("sandbox {sandbox:?} has not started yet: see `agentplane describe sandbox {sandbox}`")
        };
        let token = match (&record.spec.endpoint, &record.metadata.uid) {
            (None, Some(uid)) => {
                let dir = agentplane_controller::dir::managed::sandbox_dir(&self.state.sandboxes_dir(), &sandbox, uid);
                let path = agentplane_controller::dir::managed::token_path(&dir);
                Some(
                    fs::read_to_string(&path)
                        .with_context(|| format!("reading sandbox {sandbox:?}'s token from {}", path.display()))?,
                )
            }
            _ => None,
        };
        Ok(Client::new(endpoint, token)?)
    }

    /// Every file the store reads, parsed.
    pub fn files(&self) -> Vec<DirFile> {
        yaml_files(&self.dir, self.state.root())
            .into_iter()
            .filter_map(|(relative, path)| {
                let (id, text) = edit::read(&path).ok()?;
                let parsed = parse_file(&relative, &text);
                Some(DirFile { relative, path, id, text, parsed })
            })
            .collect()
    }

    /// The file that declares `key` now; `Ok(None)` when none does. A broken file that
    /// the record says declared it is an error: what it declares cannot be known.
    pub fn declaration(&self, key: &Key) -> anyhow::Result<Option<Declaration>> {
        let mut broken = Vec::new();
        for DirFile { relative, path, id, text, parsed } in self.files() {
            match parsed {
                Ok(declared) => {
                    if let Some(index) = declared.iter().position(|d| d.object.key() == *key) {
                        return Ok(Some(Declaration { file: relative, path, id, text, declared, index }));
                    }
                }
                Err(error) => broken.push(error),
            }
        }
        let source = self
            .record(key)?
            .and_then(|o| agentplane_controller::dir::store::source_file(o.meta()).map(str::to_string));
        if let Some(source) = source
            && let Some(error) = broken.iter().find(|e| e.file == source)
        {
            bail!("{} is declared in {source}, which does not parse ({error}): fix the file first", ref_name(key));
        }
        Ok(None)
    }

    /// Holds the edit lock of this directory (see `edit`) while it is kept.
    pub async fn lock_edits(&self) -> anyhow::Result<edit::EditLock> {
        edit::lock(&self.state).await
    }

    /// Declares a new resource in a file of its own, `DIR/NAME.yaml`; refused when
    /// the directory declares it already, or that file exists.
    pub async fn declare(&self, object: &Object) -> anyhow::Result<()> {
        let key = object.key();
        let _lock = self.lock_edits().await?;
        for file in self.files() {
            if file.parsed.unwrap_or_default().iter().any(|d| d.object.key() == key) {
                bail!("{} is declared already, in {}", ref_name(&key), file.relative);
            }
        }
        let path = self.dir.join(format!("{}.yaml", key.name));
        if path.symlink_metadata().is_ok() {
            bail!("{} exists already", path.display());
        }
        let text = serde_yaml_ng::to_string(&object.to_json())?;
        // What the store will read: checked before it is written.
        parse_file(&path.display().to_string(), &text).map_err(|e| anyhow::anyhow!("{e}"))?;
        edit::write_atomically(&path, text.as_bytes())
    }

    /// Appends `item` to `spec.<list>` of the Session `key` in the file that declares
    /// it, checking that the edited file declares that Session with exactly that item
    /// more and everything else unchanged; returns the list's length and the file.
    /// Holds the edit lock throughout, and starts over when the file changed between
    /// reading and replacing it, so that concurrent appends each land once.
    pub async fn append_to_session(&self, key: &Key, item: &SpecItem) -> anyhow::Result<(usize, String)> {
        let _lock = self.lock_edits().await?;
        for _ in 0..EDIT_ATTEMPTS {
            let declaration = self.declaration(key)?.ok_or_else(|| self.not_found(key))?;
            if let SpecItem::Reply(_) = item {
                self.check_answers(&declaration, item)?;
            }
            let (count, edited) = appended(&declaration, item)?;
            match edit::replace(&declaration.path, declaration.id, &declaration.text, edited.as_bytes())? {
                Outcome::Written => return Ok((count, declaration.file)),
                Outcome::Changed => continue,
            }
        }
        bail!(
            "{} kept changing while it was edited ({EDIT_ATTEMPTS} attempts): something else keeps writing it; try again",
            ref_name(key)
        )
    }

    /// A reply must name what the Session asks now, as `agentplane up` last recorded
    /// it: a reply saved for a request that does not exist yet would approve that
    /// request, whatever it turns out to ask, the moment it is made.
    fn check_answers(&self, declaration: &Declaration, item: &SpecItem) -> anyhow::Result<()> {
        let this = &declaration.this().object;
        let Object::Session(declared) = this else { bail!("{} is not a Session", ref_name(&this.key())) };
        let mut session = declared.clone();
        session.status = match self.record(&this.key())? {
            Some(Object::Session(recorded)) => recorded.status,
            _ => None,
        };
        item.check_answers(&session)
    }

    /// The record of a resource `agentplane up` has taken; for one only declared so
    /// far, an error that says so.
    pub fn taken(&self, key: &Key) -> anyhow::Result<Object> {
        if let Some(object) = self.record(key)? {
            return Ok(object);
        }
        if self.declaration(key)?.is_some() {
            bail!(
                "{} has not been taken by `agentplane up` yet: it starts when `agentplane up --dir {}` runs",
                ref_name(key),
                self.dir.display()
            );
        }
        Err(self.not_found(key))
    }

    /// Asks `agentplane up` to restart the resource, without touching the file that
    /// declares it: a request beside its status, by uid, which the store overlays as the
    /// `restartedAt` annotation (see `agentplane_controller::restart`).
    pub fn request_restart(&self, key: &Key, at: &str) -> anyhow::Result<Object> {
        let object = self.taken(key)?;
        let uid = object.meta().uid.clone().with_context(|| format!("{} has no uid in its record", ref_name(key)))?;
        agentplane_controller::restart::Requests::new(self.state.root())
            .request(&uid, at)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(object)
    }

    /// Waits until the store has forgotten `key` (its cleanup done), watching the state
    /// directory; false if `timeout` passed first.
    pub async fn wait_forgotten(&self, keys: &[(Key, Option<String>)], timeout: Duration) -> anyhow::Result<bool> {
        let gone = |(key, uid): &(Key, Option<String>)| match self.state.read(key) {
            None => true,
            Some(Ok(object)) => object.meta().uid != *uid,
            Some(Err(_)) => false,
        };
        let (_watcher, mut changes) = watch_state(&self.state)?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if keys.iter().all(gone) {
                return Ok(true);
            }
            // A lost event only delays the answer by the fallback poll.
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return Ok(keys.iter().all(gone)),
                _ = changes.recv() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }
}

/// Wakes on every change of the records and the file errors. One slot: a pending
/// wake-up already means "look again".
pub fn watch_state(state: &StateDir) -> anyhow::Result<(notify::RecommendedWatcher, tokio::sync::mpsc::Receiver<()>)> {
    use notify::Watcher;
    state.create()?;
    // Events name absolute paths.
    let root = state.root().canonicalize().with_context(|| format!("resolving {}", state.root().display()))?;
    let resources = root.join("resources");
    let errors = root.join("errors.json");
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let relevant = match &event {
            Ok(event) => {
                !event.kind.is_access()
                    && (event.paths.is_empty() || event.paths.iter().any(|p| p.starts_with(&resources) || *p == errors))
            }
            Err(_) => true,
        };
        if relevant {
            let _ = tx.try_send(());
        }
    })
    .context("watching the state directory")?;
    watcher
        .watch(&root, notify::RecursiveMode::Recursive)
        .with_context(|| format!("watching {}", state.root().display()))?;
    Ok((watcher, rx))
}

/// The declaring file's text with `item` appended to the Session's `spec.<list>`, and
/// the list's new length; refused unless the result declares exactly that.
fn appended(declaration: &Declaration, item: &SpecItem) -> anyhow::Result<(usize, String)> {
    let list = item.list();
    let refuse = |why: String| {
        anyhow::anyhow!("{}: {why}; nothing was changed: add the item to spec.{list} by hand", declaration.file)
    };
    let this = declaration.this();
    let documents = yaml_edit::documents(&declaration.text).map_err(|e| refuse(e.0))?;
    let document = documents
        .iter()
        .find(|d| d.line() == this.line)
        .ok_or_else(|| refuse(format!("its documents cannot be told apart at line {}", this.line)))?;
    let edited = yaml_edit::append_to_spec_list(&declaration.text, document, list, item).map_err(|e| refuse(e.0))?;

    let mut expected: Vec<Object> = declaration.declared.iter().map(|d| d.object.clone()).collect();
    let Object::Session(session) = &mut expected[declaration.index] else {
        bail!("{} is not a Session", this.object.key())
    };
    let count = item.push(&mut session.spec);
    let reparsed =
        parse_file(&declaration.file, &edited).map_err(|e| refuse(format!("the edit would not parse ({e})")))?;
    if reparsed.into_iter().map(|d| d.object).collect::<Vec<_>>() != expected {
        return Err(refuse("the edit would not read back as intended".into()));
    }
    Ok((count, edited))
}

/// `60s`, `2m`, `1h`, `500ms`, or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| format!("{text:?} is not a duration like 60s, 2m or 500ms"))?;
    let seconds = match unit {
        "" | "s" => number,
        "ms" => number / 1000.0,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return Err(format!("{text:?}: the unit is one of ms, s, m, h")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert!(parse_duration("soon").is_err());
    }
}
