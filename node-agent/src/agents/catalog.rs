//! What the node agent knows of each agent without running it: the modes and models
//! of its pinned version, and where it keeps credentials (to say whether a session
//! would find some). Each agent declares its own ([`crate::agents::Agent::catalog`],
//! [`crate::agents::Agent::credentials`]); this module answers from them. The drivers stay the
//! judges of what a session may ask: the modes listed are those their `validate`
//! accepts.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::agents::AgentId;
use crate::error::Error;
use crate::model::{AgentModeInfo, AgentModels, AgentModes, CreateSessionRequest, ModelInfo, PermissionMode};

/// What an agent declares of its modes and models, in its pinned version.
#[derive(Debug, Clone, Copy)]
pub struct Catalog {
    /// Its own modes (`agentMode`), id and description; any its driver refuses are
    /// left out of the answer.
    pub modes: &'static [(&'static str, &'static str)],
    pub default_mode: Option<&'static str>,
    /// Models a session's `model` may name, id and description.
    pub models: &'static [(&'static str, &'static str)],
    pub default_model: Option<&'static str>,
    /// What else `model` takes.
    pub models_note: &'static str,
}

/// A file that may hold credentials, and whether its text does.
pub type CredentialFile = (PathBuf, fn(&str) -> bool);

/// Where an agent may find credentials: environment variables first (any one set to
/// something), then files (the first that holds some).
pub struct CredentialSources {
    pub env: &'static [&'static str],
    pub files: Vec<CredentialFile>,
}

/// Where credential files are looked for: the node agent's environment and HOME.
pub struct CredentialPlaces<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    home: Option<&'a Path>,
}

impl<'a> CredentialPlaces<'a> {
    /// The places of an environment (`env`) whose HOME is `home`.
    pub fn new(env: &'a dyn Fn(&str) -> Option<String>, home: Option<&'a Path>) -> CredentialPlaces<'a> {
        CredentialPlaces { env, home }
    }

    /// A directory an environment variable names, else `under_home` in HOME.
    pub fn dir(&self, var: &str, under_home: &str) -> Option<PathBuf> {
        match (self.env)(var).filter(|v| !v.is_empty()) {
            Some(dir) => Some(PathBuf::from(dir)),
            None => self.home.map(|h| h.join(under_home)),
        }
    }

    /// `$XDG_DATA_HOME`, else `~/.local/share`.
    pub fn data_home(&self) -> Option<PathBuf> {
        self.dir("XDG_DATA_HOME", ".local/share")
    }

    pub fn home(&self) -> Option<&Path> {
        self.home
    }
}

/// Credential files are small; a bigger one is not read (and not taken for credentials).
const MAX_CREDENTIAL_FILE: u64 = 1024 * 1024;

/// `GET /v1/agents/{agent}/modes`: the catalog's modes, kept to those the driver accepts.
pub fn modes(agent: AgentId) -> AgentModes {
    let accepts = |request: CreateSessionRequest| !matches!(agent.validate(&request), Err(Error::ModeNotSupported(_)));
    let base = || CreateSessionRequest { agent: agent.as_str().to_string(), ..Default::default() };
    let catalog = agent.agent().catalog();
    let agent_modes: Vec<AgentModeInfo> = catalog
        .modes
        .iter()
        .filter(|(id, _)| accepts(CreateSessionRequest { agent_mode: Some(id.to_string()), ..base() }))
        .map(|(id, description)| AgentModeInfo { id: id.to_string(), description: description.to_string() })
        .collect();
    let default_agent_mode =
        catalog.default_mode.filter(|d| agent_modes.iter().any(|m| m.id == *d)).map(str::to_string);
    let permission_modes = [PermissionMode::Default, PermissionMode::Plan, PermissionMode::Bypass]
        .into_iter()
        .filter(|mode| accepts(CreateSessionRequest { permission_mode: Some(*mode), ..base() }))
        .collect();
    AgentModes { agent: agent.as_str().to_string(), agent_modes, default_agent_mode, permission_modes }
}

/// `GET /v1/agents/{agent}/models`: what this node agent knows of the pinned versions.
pub fn models(agent: AgentId) -> AgentModels {
    let catalog = agent.agent().catalog();
    AgentModels {
        agent: agent.as_str().to_string(),
        models: catalog
            .models
            .iter()
            .map(|(id, description)| ModelInfo { id: id.to_string(), description: description.to_string() })
            .collect(),
        default_model: catalog.default_model.map(str::to_string),
        source: "catalog".to_string(),
        note: catalog.models_note.to_string(),
    }
}

/// Whether the node agent finds credentials for the agent in its environment or in
/// the agent's own files under its HOME. Reads files: off the async runtime.
pub async fn credentials_available(agent: AgentId) -> bool {
    tokio::task::spawn_blocking(move || {
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
        credentials_source(agent, &|name| std::env::var(name).ok(), home.as_deref()).is_some()
    })
    .await
    .unwrap_or(false)
}

/// Where the agent's credentials are found (an environment variable or a file),
/// first source first. A missing, unreadable or malformed file is not an error: the
/// next source is tried.
pub fn credentials_source(agent: AgentId, env: &dyn Fn(&str) -> Option<String>, home: Option<&Path>) -> Option<String> {
    let places = CredentialPlaces { env, home };
    let Some(sources) = agent.agent().credentials(&places) else {
        return Some("built in".into());
    };
    let set = |name: &str| env(name).is_some_and(|v| !v.trim().is_empty());
    if let Some(name) = sources.env.iter().find(|n| set(n)) {
        return Some(format!("${name}"));
    }
    sources
        .files
        .into_iter()
        .find(|(path, holds)| read_small(path).is_some_and(|text| holds(&text)))
        .map(|(path, _)| path.display().to_string())
}

fn read_small(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    if file.metadata().ok()?.len() > MAX_CREDENTIAL_FILE {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_CREDENTIAL_FILE).read_to_string(&mut text).ok()?;
    Some(text)
}

pub fn non_empty_string(value: &Value) -> bool {
    value.as_str().is_some_and(|s| !s.trim().is_empty())
}

/// Whether the JSON has a non-empty string at any of these paths.
pub fn json_strings(text: &str, paths: &[&[&str]]) -> bool {
    let Ok(json) = serde_json::from_str::<Value>(text) else { return false };
    paths.iter().any(|path| non_empty_string(path.iter().fold(&json, |v, key| &v[*key])))
}

/// `{provider: {type, key | access | refresh}}` (opencode's and pi's auth.json).
pub fn provider_entries(text: &str) -> bool {
    let Ok(Value::Object(providers)) = serde_json::from_str::<Value>(text) else { return false };
    providers.values().any(|entry| ["key", "access", "refresh", "token"].iter().any(|k| non_empty_string(&entry[*k])))
}

/// A `.env` file setting one of these names to something.
pub fn dotenv_sets(text: &str, names: &[&str]) -> bool {
    text.lines().any(|line| {
        let line = line.trim();
        let line = line.strip_prefix("export ").unwrap_or(line);
        line.split_once('=').is_some_and(|(name, value)| {
            names.contains(&name.trim()) && !value.trim().trim_matches(|c| c == '"' || c == '\'').is_empty()
        })
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn source(agent: AgentId, env: &[(&str, &str)], home: &Path) -> Option<String> {
        let env: HashMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        credentials_source(agent, &|name| env.get(name).cloned(), Some(home))
    }

    fn write(home: &Path, path: &str, text: &str) {
        let path = home.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn nothing_anywhere_is_no_credentials() {
        let home = tempfile::tempdir().unwrap();
        for agent in AgentId::ALL.into_iter().filter(|a| *a != AgentId::Mock) {
            assert_eq!(source(agent, &[], home.path()), None, "{agent:?}");
        }
        assert!(source(AgentId::Mock, &[], home.path()).is_some());
        // An empty variable is not a key.
        assert_eq!(source(AgentId::Claude, &[("ANTHROPIC_API_KEY", " ")], home.path()), None);
    }

    #[test]
    fn environment_comes_first() {
        let home = tempfile::tempdir().unwrap();
        write(home.path(), ".codex/auth.json", r#"{"OPENAI_API_KEY":"sk-file"}"#);
        assert_eq!(source(AgentId::Codex, &[("CODEX_API_KEY", "sk")], home.path()).as_deref(), Some("$CODEX_API_KEY"));
        assert_eq!(source(AgentId::Amp, &[("AMP_API_KEY", "x")], home.path()).as_deref(), Some("$AMP_API_KEY"));
    }

    #[test]
    fn each_agents_own_files() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        let cases: [(AgentId, &str, &str); 8] = [
            (
                AgentId::Claude,
                ".claude/.credentials.json",
                r#"{"claudeAiOauth":{"accessToken":"a","refreshToken":"r"}}"#,
            ),
            (AgentId::Codex, ".codex/auth.json", r#"{"OPENAI_API_KEY":null,"tokens":{"access_token":"t"}}"#),
            (AgentId::Opencode, ".local/share/opencode/auth.json", r#"{"anthropic":{"type":"api","key":"sk"}}"#),
            (
                AgentId::Pi,
                ".pi/agent/models.json",
                r#"{"providers":{"fake":{"baseUrl":"http://x","apiKey":"k","models":[]}}}"#,
            ),
            (AgentId::Gemini, ".gemini/.env", "# mine\nexport GEMINI_API_KEY=\"abc\"\n"),
            (AgentId::Amp, ".local/share/amp/secrets.json", r#"{"apiKey@https://ampcode.com/":"sgamp_x"}"#),
            (AgentId::Pi, ".pi/agent/auth.json", r#"{"anthropic":{"type":"oauth","access":"a","refresh":"r"}}"#),
            (AgentId::Gemini, ".gemini/oauth_creds.json", r#"{"access_token":"a","refresh_token":"r"}"#),
        ];
        for (agent, path, text) in cases {
            write(h, path, text);
            assert_eq!(source(agent, &[], h), Some(h.join(path).display().to_string()), "{agent:?} {path}");
        }
    }

    #[test]
    fn a_malformed_or_empty_file_is_skipped_for_the_next_source() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        write(h, ".claude/.credentials.json", "{not json");
        assert_eq!(source(AgentId::Claude, &[], h), None);
        write(h, ".claude.json", r#"{"primaryApiKey":"sk-ant"}"#);
        assert_eq!(source(AgentId::Claude, &[], h), Some(h.join(".claude.json").display().to_string()));

        write(h, ".gemini/oauth_creds.json", r#"["not", "an", "object"]"#);
        write(h, ".gemini/.env", "GEMINI_API_KEY=\nOTHER=1\n");
        assert_eq!(source(AgentId::Gemini, &[], h), None);
        write(h, ".gemini/.env", "GOOGLE_API_KEY='g'\n");
        assert_eq!(source(AgentId::Gemini, &[], h), Some(h.join(".gemini/.env").display().to_string()));

        write(h, ".pi/agent/auth.json", r#"{"anthropic":{"type":"api_key","key":""}}"#);
        write(h, ".pi/agent/models.json", r#"{"providers":{"fake":{"apiKey":"k"}}}"#);
        assert_eq!(source(AgentId::Pi, &[], h), Some(h.join(".pi/agent/models.json").display().to_string()));

        write(h, ".local/share/amp/secrets.json", r#"{"other":"x","apiKey@https://ampcode.com/":""}"#);
        assert_eq!(source(AgentId::Amp, &[], h), None);
        // A directory where a file should be.
        std::fs::create_dir_all(h.join(".codex/auth.json")).unwrap();
        assert_eq!(source(AgentId::Codex, &[], h), None);
    }

    #[test]
    fn directories_named_by_the_environment_win_over_home() {
        let home = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        write(home.path(), ".codex/auth.json", r#"{"OPENAI_API_KEY":"sk"}"#);
        let codex_home = elsewhere.path().display().to_string();
        assert_eq!(source(AgentId::Codex, &[("CODEX_HOME", &codex_home)], home.path()), None);
        write(elsewhere.path(), "auth.json", r#"{"OPENAI_API_KEY":"sk"}"#);
        assert!(source(AgentId::Codex, &[("CODEX_HOME", &codex_home)], home.path()).is_some());
    }

    #[test]
    fn modes_are_those_the_driver_accepts() {
        let mock = modes(AgentId::Mock);
        assert_eq!(mock.agent_modes.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["build", "plan"]);
        assert_eq!(mock.default_agent_mode.as_deref(), Some("build"));
        for agent in AgentId::ALL {
            for mode in modes(agent).agent_modes {
                let request = CreateSessionRequest {
                    agent: agent.as_str().into(),
                    agent_mode: Some(mode.id.clone()),
                    ..Default::default()
                };
                assert!(agent.validate(&request).is_ok(), "{agent:?} lists {} but refuses it", mode.id);
            }
        }
        assert!(models(AgentId::Claude).models.iter().any(|m| m.id == "sonnet"));
    }
}
