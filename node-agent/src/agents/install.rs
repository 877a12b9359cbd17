//! Installing the agents' CLIs from the npm registry into the data directory.
//!
//! Layout: `<agents dir>/<agent>/<version>/` holds one pinned install (its own
//! `node_modules`), and `<agents dir>/<agent>/current` names the version a session
//! gets when it asks for none. An install goes into a scratch directory first and is
//! renamed into place only once it is complete, so a failed install leaves what was
//! there before working.

use std::path::{Path, PathBuf};

use crate::agents::AgentId;
use crate::error::{Error, Result};

/// One installed version of an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub version: String,
    /// The executable to run.
    pub bin: PathBuf,
}

pub struct Installer {
    root: PathBuf,
    /// One install at a time per agent and version in this node agent.
    locks: std::sync::Mutex<std::collections::HashMap<(AgentId, String), std::sync::Arc<tokio::sync::Mutex<()>>>>,
}

impl Installer {
    pub fn new(root: PathBuf) -> Installer {
        Installer { root, locks: Default::default() }
    }

    fn lock(&self, agent: AgentId, version: &str) -> std::sync::Arc<tokio::sync::Mutex<()>> {
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
        self.installed_version(agent, current.trim()).await
    }

    /// A given version, if it is installed.
    pub async fn installed_version(&self, agent: AgentId, version: &str) -> Option<Installed> {
        let package = agent.package()?;
        let bin = self.agent_dir(agent).join(version).join("node_modules").join(".bin").join(package.bin);
        tokio::fs::metadata(&bin).await.ok()?;
        Some(Installed { version: version.to_string(), bin })
    }

    /// The version asked for (else the pinned default), installed first if missing.
    pub async fn ensure(&self, agent: AgentId, version: Option<&str>) -> Result<Installed> {
        let package = agent.package().ok_or_else(|| Error::InvalidRequest(format!("{} is built in", agent.as_str())))?;
        let version = version.unwrap_or(package.default_version);
        if let Some(installed) = self.installed_version(agent, version).await {
            return Ok(installed);
        }
        let lock = self.lock(agent, version);
        let _held = lock.lock().await;
        if let Some(installed) = self.installed_version(agent, version).await {
            return Ok(installed);
        }
        let dir = self.agent_dir(agent);
        tokio::fs::create_dir_all(&dir).await.map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let scratch = dir.join(format!(".{version}.{}", std::process::id()));
        let _ = tokio::fs::remove_dir_all(&scratch).await;
        tokio::fs::create_dir_all(&scratch).await.map_err(|e| Error::io(format!("creating {}", scratch.display()), e))?;
        let output = tokio::process::Command::new("npm")
            .args(["install", "--no-save", "--no-audit", "--no-fund", "--prefix"])
            .arg(&scratch)
            .arg(format!("{}@{version}", package.name))
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|e| Error::InstallFailed(format!("could not run npm: {e}")))?;
        if !output.status.success() {
            let _ = tokio::fs::remove_dir_all(&scratch).await;
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(Error::InstallFailed(format!("npm install {}@{version} failed: {}", package.name, stderr.trim())));
        }
        let target = dir.join(version);
        if let Err(e) = tokio::fs::rename(&scratch, &target).await {
            let _ = tokio::fs::remove_dir_all(&scratch).await;
            // Another node agent sharing the directory got there first.
            if self.installed_version(agent, version).await.is_none() {
                return Err(Error::io(format!("moving the install to {}", target.display()), e));
            }
        }
        tokio::fs::write(dir.join("current"), version).await.map_err(|e| Error::io("recording the current version", e))?;
        self.installed_version(agent, version)
            .await
            .ok_or_else(|| Error::InstallFailed(format!("{}@{version} installed no {:?} executable", package.name, package.bin)))
    }
}

/// Whether the node agent finds credentials for the agent in its environment or in
/// the agent's own config files. A missing or malformed file is not an error: the
/// next source is tried.
pub fn credentials_available(agent: AgentId) -> bool {
    let env = |names: &[&str]| names.iter().any(|n| std::env::var_os(n).is_some_and(|v| !v.is_empty()));
    match agent {
        AgentId::Claude => env(&["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"]),
        AgentId::Codex => env(&["OPENAI_API_KEY", "CODEX_API_KEY"]),
        AgentId::Opencode => env(&["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]),
        AgentId::Pi => env(&["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]),
        AgentId::Gemini => env(&["GEMINI_API_KEY", "GOOGLE_API_KEY"]),
        AgentId::Amp => env(&["AMP_API_KEY"]),
        AgentId::Mock => true,
    }
}
