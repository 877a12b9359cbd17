//! Installing the agents' CLIs from the npm registry into the data directory.
//!
//! Layout: `<agents dir>/<agent>/<version>/` holds one pinned install (its own
//! `node_modules` and a marker file with the verified integrity), and
//! `<agents dir>/<agent>/current` names the version a session gets when it asks for
//! none. An install goes into a scratch directory first and is renamed into place only
//! once it is complete and verified, so a failed install leaves what was there before
//! working. Node agents (and test binaries) may share an agents dir: a file lock per
//! agent and version makes one of them install while the others wait and then find it
//! done. Nothing about what is installed is cached: every question reads the disk.
//!
//! npm runs with the node agent's environment, so the user's npm configuration
//! (`~/.npmrc`, `npm_config_*`, a private registry) applies; no registry is passed.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use crate::agents::{AgentId, Package};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::model::{InstallPhase, InstallProgress};

/// The longest an `npm install` may take: the biggest agent is a few hundred MB, and a
/// slow registry or mirror should still make it; a hung npm becomes `timeout`.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// The longest `npm view` (one metadata request) may take.
const VIEW_TIMEOUT: Duration = Duration::from_secs(2 * 60);
/// npm's error lines kept for `install_failed`'s detail.
const ERROR_LINES: usize = 20;
/// The file in an install's directory recording what was installed.
pub const MARKER: &str = ".agentplane-install.json";

/// One installed version of an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub version: String,
    /// The executable to run.
    pub bin: PathBuf,
}

/// What to install.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstallOptions {
    /// An exact version; `None` for the pinned default.
    pub version: Option<String>,
    /// Install again even when the version is there.
    pub reinstall: bool,
}

/// What an install did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallOutcome {
    pub installed: Installed,
    /// The version was there already (nothing was fetched).
    pub already_installed: bool,
    /// The verified integrity of the agent's package, from the marker file.
    pub integrity: Option<String>,
}

/// What an install recorded beside what it installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstallMarker {
    pub version: String,
    pub integrity: String,
    /// RFC 3339.
    pub installed_at: String,
}

type InstallLock = std::sync::Arc<tokio::sync::Mutex<()>>;

pub struct Installer {
    root: PathBuf,
    /// One install at a time per agent and version in this node agent (the file lock
    /// does it across processes; this keeps waiting installs off the blocking pool).
    locks: std::sync::Mutex<std::collections::HashMap<(AgentId, String), InstallLock>>,
    metrics: Metrics,
}

impl Installer {
    pub fn new(root: PathBuf) -> Installer {
        Self::metered(root, Metrics::new())
    }

    /// An installer counting its installs into `metrics`.
    pub fn metered(root: PathBuf, metrics: Metrics) -> Installer {
        Installer { root, locks: Default::default(), metrics }
    }

    fn lock(&self, agent: AgentId, version: &str) -> InstallLock {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        std::sync::Arc::clone(locks.entry((agent, version.to_string())).or_default())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn agent_dir(&self, agent: AgentId) -> PathBuf {
        self.root.join(agent.as_str())
    }

    /// The version a session gets when it names none, if one is installed.
    pub async fn installed(&self, agent: AgentId) -> Option<Installed> {
        let current = tokio::fs::read_to_string(self.agent_dir(agent).join("current")).await.ok()?;
        let current = current.trim();
        check_version(current).ok()?;
        self.installed_version(agent, current).await
    }

    /// A given version, if it is installed.
    pub async fn installed_version(&self, agent: AgentId, version: &str) -> Option<Installed> {
        let package = agent.package()?;
        check_version(version).ok()?;
        let bin = bin_in(&self.agent_dir(agent).join(version), &package);
        tokio::fs::metadata(&bin).await.ok()?;
        Some(Installed { version: version.to_string(), bin })
    }

    /// What the install of a version recorded (absent for an install made by an older
    /// node agent, or by hand).
    pub async fn marker(&self, agent: AgentId, version: &str) -> Option<InstallMarker> {
        check_version(version).ok()?;
        let text = tokio::fs::read(self.agent_dir(agent).join(version).join(MARKER)).await.ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// The version asked for (else the pinned default), installed first if missing.
    pub async fn ensure(&self, agent: AgentId, version: Option<&str>) -> Result<Installed> {
        let options = InstallOptions { version: version.map(str::to_string), reinstall: false };
        Ok(self.install(agent, &options, None).await?.installed)
    }

    /// Installs a version (the pinned default when none is named) unless it is there
    /// already and no reinstall is asked, reporting progress to `progress` when given.
    /// Phase changes wait for room in the channel; the counts in between are dropped
    /// when it is full, the next one carrying the totals.
    pub async fn install(
        &self,
        agent: AgentId,
        options: &InstallOptions,
        progress: Option<&mpsc::Sender<InstallProgress>>,
    ) -> Result<InstallOutcome> {
        let started = std::time::Instant::now();
        let outcome = self.install_unmetered(agent, options, progress).await;
        match &outcome {
            // Found there: no install happened, so no duration to count.
            Ok(o) if o.already_installed => self.metrics.install_ended(agent.as_str(), "already_installed", None),
            Ok(_) => self.metrics.install_ended(agent.as_str(), "installed", Some(started.elapsed())),
            Err(_) => self.metrics.install_ended(agent.as_str(), "failed", Some(started.elapsed())),
        }
        outcome
    }

    async fn install_unmetered(
        &self,
        agent: AgentId,
        options: &InstallOptions,
        progress: Option<&mpsc::Sender<InstallProgress>>,
    ) -> Result<InstallOutcome> {
        let (package, version) = check(agent, options)?;
        if !options.reinstall
            && let Some(outcome) = self.already(agent, version).await
        {
            return Ok(outcome);
        }
        let lock = self.lock(agent, version);
        let _held = lock.lock().await;
        let dir = self.agent_dir(agent);
        tokio::fs::create_dir_all(&dir).await.map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let lock_path = dir.join(format!(".{version}.lock"));
        let file_lock = lock_file(lock_path.clone()).await?;
        let outcome = self.install_locked(agent, &package, version, options, progress, &dir).await;
        if outcome.is_err() {
            // A version npm refuses would leave one lock file each, forever.
            release_removing(file_lock, &lock_path).await;
        }
        outcome
    }

    /// The install itself, under both locks.
    async fn install_locked(
        &self,
        agent: AgentId,
        package: &Package,
        version: &str,
        options: &InstallOptions,
        progress: Option<&mpsc::Sender<InstallProgress>>,
        dir: &Path,
    ) -> Result<InstallOutcome> {
        // Another node agent sharing the directory may have installed it while this one waited.
        if !options.reinstall
            && let Some(outcome) = self.already(agent, version).await
        {
            return Ok(outcome);
        }
        let mut report = Reporter::new(progress, agent, version);
        // Under both locks nobody else installs this version: anything in the scratch
        // directory is a leftover of an install that died.
        let scratch = dir.join(format!(".{version}.installing"));
        remove_if_present(&scratch).await?;
        tokio::fs::create_dir_all(&scratch)
            .await
            .map_err(|e| Error::io(format!("creating {}", scratch.display()), e))?;
        let result = self.install_into(&scratch, package, version, &mut report).await;
        let integrity = match result {
            Ok(integrity) => integrity,
            Err(e) => {
                let _ = tokio::fs::remove_dir_all(&scratch).await;
                return Err(e);
            }
        };
        let target = dir.join(version);
        if let Err(e) = swap_into_place(&scratch, &target).await {
            let _ = tokio::fs::remove_dir_all(&scratch).await;
            return Err(e);
        }
        write_atomically(&dir.join("current"), version.as_bytes()).await?;
        report.phase(InstallPhase::Done).await;
        tracing::info!(agent = agent.as_str(), version, %integrity, "agent installed");
        Ok(InstallOutcome {
            installed: Installed { version: version.to_string(), bin: bin_in(&target, package) },
            already_installed: false,
            integrity: Some(integrity),
        })
    }

    async fn already(&self, agent: AgentId, version: &str) -> Option<InstallOutcome> {
        let installed = self.installed_version(agent, version).await?;
        let integrity = self.marker(agent, version).await.map(|m| m.integrity);
        Some(InstallOutcome { installed, already_installed: true, integrity })
    }

    /// npm install into `scratch`, then the checks; answers the verified integrity.
    async fn install_into(
        &self,
        scratch: &Path,
        package: &Package,
        version: &str,
        report: &mut Reporter<'_>,
    ) -> Result<String> {
        let spec = format!("{}@{version}", package.name);
        report.phase(InstallPhase::Resolving).await;
        let mut command = tokio::process::Command::new("npm");
        command.env_remove(crate::TOKEN_VARIABLE);
        command
            .args(["install", "--no-save", "--no-audit", "--no-fund", "--loglevel=http", "--prefix"])
            .arg(scratch)
            .arg(&spec)
            .current_dir(scratch)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| Error::InstallFailed(format!("could not run npm: {e}")))?;
        crate::reaper::ours(child.id());
        let stderr = child.stderr.take().expect("stderr is piped");
        let run = async {
            let mut lines = tokio::io::BufReader::new(stderr).split(b'\n');
            // npm's error lines, else (an npm that died without saying why) its last words.
            let (mut errors, mut tail) = (VecDeque::new(), VecDeque::new());
            let keep = |lines: &mut VecDeque<String>, line: &str| {
                if lines.len() == ERROR_LINES {
                    lines.pop_front();
                }
                lines.push_back(line.to_string());
            };
            while let Ok(Some(line)) = lines.next_segment().await {
                let line = String::from_utf8_lossy(&line);
                let line = line.trim_end();
                match parse_npm_line(line) {
                    Some(NpmLine::Packument(name)) => report.resolved(name),
                    Some(NpmLine::Tarball(name)) => report.fetched(name).await,
                    None if line.starts_with("npm error") || line.starts_with("npm ERR!") => keep(&mut errors, line),
                    None if !line.is_empty() && !line.starts_with("npm http") => keep(&mut tail, line),
                    None => {}
                }
            }
            (child.wait().await, if errors.is_empty() { tail } else { errors })
        };
        let (status, errors) = tokio::time::timeout(INSTALL_TIMEOUT, run).await.map_err(|_| {
            Error::Timeout(format!("npm install {spec} took longer than {} s", INSTALL_TIMEOUT.as_secs()))
        })?;
        let status = status.map_err(|e| Error::InstallFailed(format!("waiting for npm: {e}")))?;
        if !status.success() {
            let said = if errors.is_empty() { "no error output".to_string() } else { Vec::from(errors).join("\n") };
            return Err(Error::InstallFailed(format!("npm install {spec} failed ({status}): {said}")));
        }

        report.phase(InstallPhase::Verifying).await;
        let installed = locked_integrity(scratch, package.name).await.ok_or_else(|| {
            Error::InstallFailed(format!("npm installed {spec} but its lockfile records no integrity to verify"))
        })?;
        let expected = registry_integrity(scratch, &spec).await?;
        if installed != expected {
            return Err(Error::InstallFailed(format!(
                "integrity mismatch for {spec}: installed {installed}, the registry says {expected}"
            )));
        }
        let bin = bin_in(scratch, package);
        if tokio::fs::metadata(&bin).await.is_err() {
            return Err(Error::InstallFailed(format!("{spec} installed no {:?} executable", package.bin)));
        }
        let marker = InstallMarker {
            version: version.to_string(),
            integrity: installed.clone(),
            installed_at: time::OffsetDateTime::now_utc()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
        };
        let marker = serde_json::to_vec_pretty(&marker).expect("the marker serializes");
        tokio::fs::write(scratch.join(MARKER), marker).await.map_err(|e| Error::io("writing the install marker", e))?;
        Ok(installed)
    }
}

fn bin_in(dir: &Path, package: &Package) -> PathBuf {
    dir.join("node_modules").join(".bin").join(package.bin)
}

/// Whether an install can be asked of `agent` (a built-in agent has nothing to
/// install; a version must be exact): its package and the version to install.
pub fn check(agent: AgentId, options: &InstallOptions) -> Result<(Package, &str)> {
    let package = agent
        .package()
        .ok_or_else(|| Error::InvalidRequest(format!("{} is built in: there is nothing to install", agent.as_str())))?;
    let version = options.version.as_deref().unwrap_or(package.default_version);
    check_version(version)?;
    Ok((package, version))
}

/// An exact version is a directory name: digits first, then letters, digits and
/// `.-+_` (so `../x` or a dist-tag like `latest` is refused before npm sees it).
pub fn check_version(version: &str) -> Result<()> {
    let valid = !version.is_empty()
        && version.len() <= 128
        && version.starts_with(|c: char| c.is_ascii_digit())
        && version.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_'));
    if valid {
        Ok(())
    } else {
        Err(Error::InvalidRequest(format!(
            "{version:?} is not an exact version such as 2.1.330 (pin one: dist-tags like latest are not installed)"
        )))
    }
}

/// What a line of `npm --loglevel=http` says about progress.
#[derive(Debug, PartialEq, Eq)]
enum NpmLine {
    /// A package's metadata was fetched: its name.
    Packument(String),
    /// A tarball was fetched or found in the cache: its file name or spec.
    Tarball(String),
}

fn parse_npm_line(line: &str) -> Option<NpmLine> {
    let rest = line.strip_prefix("npm http ")?;
    let mut words = rest.split_whitespace();
    match words.next()? {
        // `fetch GET 200 https://registry.npmjs.org/@scope%2fname 648ms (cache updated)`
        "fetch" => {
            let url = words.nth(2)?;
            let path = url.split(['?', '#']).next()?;
            if path.ends_with(".tgz") {
                Some(NpmLine::Tarball(path.rsplit('/').next()?.to_string()))
            } else {
                let name = path.rsplit('/').next()?.replace("%2f", "/").replace("%2F", "/");
                // A scoped name's `%2f` is in the last segment; `@scope/name` otherwise.
                let name = if !name.contains('/') && path.contains("/@") {
                    let mut segments = path.rsplit('/');
                    let last = segments.next()?;
                    format!("{}/{last}", segments.next()?)
                } else {
                    name
                };
                Some(NpmLine::Packument(name))
            }
        }
        // `cache @napi-rs/keyring@https://registry.npmjs.org/.../keyring-1.1.9.tgz 0ms (cache hit)`
        "cache" => {
            let spec = words.next()?;
            spec.ends_with(".tgz").then(|| NpmLine::Tarball(spec.rsplit('/').next().unwrap_or(spec).to_string()))
        }
        _ => None,
    }
}

/// Sends progress: phase changes wait for room, counts are dropped when the channel
/// is full (the next carries the totals); nothing is sent once the receiver is gone.
struct Reporter<'a> {
    tx: Option<&'a mpsc::Sender<InstallProgress>>,
    current: InstallProgress,
}

impl<'a> Reporter<'a> {
    fn new(tx: Option<&'a mpsc::Sender<InstallProgress>>, agent: AgentId, version: &str) -> Self {
        let current = InstallProgress {
            agent: agent.as_str().to_string(),
            version: version.to_string(),
            phase: InstallPhase::Resolving,
            packages_resolved: 0,
            tarballs_fetched: 0,
            message: None,
        };
        Reporter { tx, current }
    }

    async fn phase(&mut self, phase: InstallPhase) {
        self.current.phase = phase;
        self.current.message = None;
        if let Some(tx) = self.tx {
            let _ = tx.send(self.current.clone()).await;
        }
    }

    fn resolved(&mut self, name: String) {
        self.current.packages_resolved += 1;
        self.current.message = Some(name);
        self.count();
    }

    async fn fetched(&mut self, name: String) {
        self.current.tarballs_fetched += 1;
        self.current.message = Some(name);
        if self.current.phase == InstallPhase::Resolving {
            // A phase change: waits for room rather than being dropped.
            self.current.phase = InstallPhase::Downloading;
            if let Some(tx) = self.tx {
                let _ = tx.send(self.current.clone()).await;
            }
            return;
        }
        self.count();
    }

    fn count(&mut self) {
        if let Some(tx) = self.tx {
            let _ = tx.try_send(self.current.clone());
        }
    }
}

/// Holds an exclusive `flock` on `path` (created if missing) until dropped. Waiting
/// for it blocks a thread, so it is done on the blocking pool.
async fn lock_file(path: PathBuf) -> Result<nix::fcntl::Flock<std::fs::File>> {
    use std::os::unix::fs::MetadataExt;
    tokio::task::spawn_blocking(move || {
        loop {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
            let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
                .map_err(|(_, errno)| Error::io(format!("locking {}", path.display()), std::io::Error::from(errno)))?;
            // The holder before may have removed the file (see `release_removing`): a
            // lock on a file the path no longer names excludes nobody who opens the
            // path now, so it counts only if the path still names this very file.
            let held = lock.metadata().map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
            match std::fs::metadata(&path) {
                Ok(now) if (now.dev(), now.ino()) == (held.dev(), held.ino()) => return Ok(lock),
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
            }
        }
    })
    .await
    .map_err(|e| Error::io("locking the install", std::io::Error::other(e)))?
}

/// Gives up a lock and removes its file, in that order reversed: the file goes while
/// still held, so that whoever waited on it finds, once it gets it, that the path no
/// longer names it and starts over (see [`lock_file`]).
async fn release_removing(lock: nix::fcntl::Flock<std::fs::File>, path: &Path) {
    if let Err(error) = tokio::fs::remove_file(path).await
        && error.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), %error, "could not remove an install lock");
    }
    drop(lock);
}

async fn remove_if_present(path: &Path) -> Result<()> {
    match tokio::fs::remove_dir_all(path).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(format!("removing {}", path.display()), e)),
        _ => Ok(()),
    }
}

/// Moves a complete install to `target`; one already there (a reinstall, or a
/// broken leftover) is exchanged with it in one step, then removed, so that the
/// version is never missing in between.
async fn swap_into_place(scratch: &Path, target: &Path) -> Result<()> {
    let (from, to) = (scratch.to_path_buf(), target.to_path_buf());
    let exchanged = tokio::task::spawn_blocking(move || -> std::io::Result<bool> {
        match std::fs::symlink_metadata(&to) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::rename(&from, &to).map(|()| false),
            Err(e) => Err(e),
            Ok(_) => exchange(&from, &to).map(|()| true),
        }
    })
    .await
    .map_err(|e| Error::io("moving the install into place", std::io::Error::other(e)))?
    .map_err(|e| Error::io(format!("moving the install to {}", target.display()), e))?;
    if exchanged {
        // The scratch path now holds the previous install.
        remove_if_present(scratch).await?;
    }
    Ok(())
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    renameat2(AT_FDCWD, a, AT_FDCWD, b, RenameFlags::RENAME_EXCHANGE).map_err(std::io::Error::from)
}

/// Without an atomic exchange: the old install steps aside first (a session starting
/// in between waits on the install's lock and then finds the new one).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    let aside = b.with_extension("previous");
    let _ = std::fs::remove_dir_all(&aside);
    std::fs::rename(b, &aside)?;
    std::fs::rename(a, b)?;
    std::fs::rename(&aside, a)
}

async fn write_atomically(path: &Path, contents: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    tokio::fs::write(&tmp, contents).await.map_err(|e| Error::io(format!("writing {}", tmp.display()), e))?;
    tokio::fs::rename(&tmp, path).await.map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// The integrity npm recorded for the top package in the install's lockfile.
async fn locked_integrity(scratch: &Path, name: &str) -> Option<String> {
    let key = format!("node_modules/{name}");
    for lockfile in [scratch.join("node_modules").join(".package-lock.json"), scratch.join("package-lock.json")] {
        let Ok(text) = tokio::fs::read(&lockfile).await else { continue };
        let Ok(lock) = serde_json::from_slice::<serde_json::Value>(&text) else { continue };
        if let Some(integrity) = lock["packages"][&key]["integrity"].as_str() {
            return Some(integrity.to_string());
        }
    }
    None
}

/// `npm view <spec> dist.integrity`: what the (user's) registry publishes.
async fn registry_integrity(scratch: &Path, spec: &str) -> Result<String> {
    let output = tokio::process::Command::new("npm")
        .env_remove(crate::TOKEN_VARIABLE)
        .args(["view", "--json", spec, "dist.integrity"])
        .current_dir(scratch)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(VIEW_TIMEOUT, output)
        .await
        .map_err(|_| Error::Timeout(format!("npm view {spec} took longer than {} s", VIEW_TIMEOUT.as_secs())))?
        .map_err(|e| Error::InstallFailed(format!("could not run npm view: {e}")))?;
    let text = String::from_utf8_lossy(&output.stdout);
    match serde_json::from_str::<serde_json::Value>(text.trim()) {
        Ok(serde_json::Value::String(integrity)) if output.status.success() => Ok(integrity),
        _ => Err(Error::InstallFailed(format!(
            "could not read the registry's integrity of {spec} to verify the install: {}{}",
            text.trim(),
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .filter(|l| l.starts_with("npm error"))
                .collect::<Vec<_>>()
                .join("\n")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npm_http_lines_become_progress() {
        assert_eq!(
            parse_npm_line(
                "npm http fetch GET 200 https://registry.npmjs.org/@sourcegraph%2famp 648ms (cache updated)"
            ),
            Some(NpmLine::Packument("@sourcegraph/amp".into()))
        );
        assert_eq!(
            parse_npm_line("npm http fetch GET 200 https://registry.npmjs.org/chalk 47ms"),
            Some(NpmLine::Packument("chalk".into()))
        );
        assert_eq!(
            parse_npm_line(
                "npm http fetch GET 200 https://registry.npmjs.org/chalk/-/chalk-5.5.0.tgz 12ms (cache miss)"
            ),
            Some(NpmLine::Tarball("chalk-5.5.0.tgz".into()))
        );
        assert_eq!(
            parse_npm_line(
                "npm http cache @napi-rs/keyring@https://registry.npmjs.org/@napi-rs/keyring/-/keyring-1.1.9.tgz 0ms (cache hit)"
            ),
            Some(NpmLine::Tarball("keyring-1.1.9.tgz".into()))
        );
        assert_eq!(parse_npm_line("npm warn Unknown user config \"nodedir\"."), None);
        assert_eq!(parse_npm_line("npm http fetch"), None);
        assert_eq!(parse_npm_line(""), None);
    }

    #[test]
    fn versions_are_directory_names() {
        for good in ["2.1.330", "0.0.1767830505-ga62310", "1.0.0-beta.1+build_7"] {
            assert!(check_version(good).is_ok(), "{good}");
        }
        for bad in ["", "latest", "../1.0.0", "1.0.0/../../x", "1 0", ".1", &"1".repeat(200)] {
            assert!(matches!(check_version(bad), Err(Error::InvalidRequest(_))), "{bad}");
        }
    }

    /// Whether another open file description could take the lock right now.
    fn lock_is_free(path: &Path) -> bool {
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).is_ok()
    }

    #[tokio::test]
    async fn the_install_lock_excludes_others_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".1.0.0.lock");
        let held = lock_file(path.clone()).await.unwrap();
        // As another node agent (another open of the file) would find it.
        assert!(!lock_is_free(&path));
        drop(held);
        assert!(lock_is_free(&path));
    }

    #[tokio::test]
    async fn a_reinstall_exchanges_the_directories() {
        let dir = tempfile::tempdir().unwrap();
        let (scratch, target) = (dir.path().join(".1.installing"), dir.path().join("1"));
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(target.join("old"), "").unwrap();
        std::fs::create_dir_all(&scratch).unwrap();
        std::fs::write(scratch.join("new"), "").unwrap();
        swap_into_place(&scratch, &target).await.unwrap();
        assert!(target.join("new").exists());
        assert!(!target.join("old").exists());
        assert!(!scratch.exists());
    }

    /// Whether some open file description holds a lock on `path`'s current file:
    /// opens the path (creating it, as an installer does) and tries to lock it.
    fn lockable_now(path: &std::path::Path) -> bool {
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).unwrap();
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).is_ok()
    }

    /// Lines of /proc/locks for a waiter blocked on a lock.
    fn blocked_waiters() -> usize {
        std::fs::read_to_string("/proc/locks").unwrap_or_default().lines().filter(|l| l.contains("->")).count()
    }

    #[tokio::test]
    async fn a_lock_file_removed_by_its_holder_never_admits_two_holders() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".1.0.0.lock");
        let first = lock_file(path.clone()).await.unwrap();
        let waiters_before = blocked_waiters();
        let waiter = tokio::spawn(lock_file(path.clone()));
        // The waiter is blocked on the first holder's file before that file goes.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while blocked_waiters() <= waiters_before {
            assert!(std::time::Instant::now() < deadline, "the second installer never waited");
            tokio::task::yield_now().await;
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(!lockable_now(&path), "held by the first");
        release_removing(first, &path).await;
        let second = waiter.await.unwrap().unwrap();
        // A newcomer opens the path as it is now: it must find it held by the waiter,
        // not a fresh file beside a lock on one that no longer has a name.
        assert!(!lockable_now(&path), "the waiter holds the file the path names");
        release_removing(second, &path).await;
        assert!(!path.exists());
        assert!(lockable_now(&path), "free once released");
    }
}
