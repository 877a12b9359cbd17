//! What the node agent knows of each agent without running it: the modes and models
//! of its pinned version, and where it keeps credentials (to say whether a session
//! would find some). The drivers stay the judges of what a session may ask: the
//! modes listed are those their `validate` accepts.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::agents::AgentId;
use crate::error::Error;
use crate::model::{AgentModeInfo, AgentModels, AgentModes, CreateSessionRequest, ModelInfo, PermissionMode};

/// A file that may hold credentials, and whether its text does.
type CredentialFile = (PathBuf, fn(&str) -> bool);

/// Credential files are small; a bigger one is not read (and not taken for credentials).
const MAX_CREDENTIAL_FILE: u64 = 1024 * 1024;

/// The agent's own modes (`agentMode`) in its pinned version, and the default one.
fn agent_mode_candidates(agent: AgentId) -> (&'static [(&'static str, &'static str)], Option<&'static str>) {
    match agent {
        AgentId::Opencode | AgentId::Mock => (
            &[
                ("build", "The default agent: edits files and runs commands"),
                ("plan", "Plans without changing anything: edits and commands are denied"),
            ],
            Some("build"),
        ),
        // `amp --mode`; `free` and `dojo` need Amp's own servers.
        AgentId::Amp => (
            &[
                ("smart", "The most capable model and set of tools"),
                ("rush", "Faster and cheaper for small, well-defined tasks"),
                ("large", "The biggest context window possible"),
            ],
            Some("smart"),
        ),
        AgentId::Claude | AgentId::Codex | AgentId::Pi | AgentId::Gemini => (&[], None),
    }
}

/// `GET /v1/agents/{agent}/modes`: the catalog's modes, kept to those the driver accepts.
pub fn modes(agent: AgentId) -> AgentModes {
    let accepts = |request: CreateSessionRequest| !matches!(agent.validate(&request), Err(Error::ModeNotSupported(_)));
    let base = || CreateSessionRequest { agent: agent.as_str().to_string(), ..Default::default() };
    let (candidates, default) = agent_mode_candidates(agent);
    let agent_modes: Vec<AgentModeInfo> = candidates
        .iter()
        .filter(|(id, _)| accepts(CreateSessionRequest { agent_mode: Some(id.to_string()), ..base() }))
        .map(|(id, description)| AgentModeInfo { id: id.to_string(), description: description.to_string() })
        .collect();
    let default_agent_mode = default.filter(|d| agent_modes.iter().any(|m| m.id == *d)).map(str::to_string);
    let permission_modes = [PermissionMode::Default, PermissionMode::Plan, PermissionMode::Bypass]
        .into_iter()
        .filter(|mode| accepts(CreateSessionRequest { permission_mode: Some(*mode), ..base() }))
        .collect();
    AgentModes { agent: agent.as_str().to_string(), agent_modes, default_agent_mode, permission_modes }
}

/// `GET /v1/agents/{agent}/models`: what this node agent knows of the pinned versions.
pub fn models(agent: AgentId) -> AgentModels {
    let (models, default, note): (&[(&str, &str)], Option<&str>, &str) = match agent {
        AgentId::Claude => (
            &[
                ("sonnet", "Claude Code's alias for the latest Sonnet"),
                ("opus", "Claude Code's alias for the latest Opus"),
                ("haiku", "Claude Code's alias for the latest Haiku"),
                ("opusplan", "Opus while planning, Sonnet otherwise"),
            ],
            None,
            "or a full model name (claude-sonnet-4-5, ...), passed as --model",
        ),
        AgentId::Codex => (
            &[("gpt-5.5", "A model of codex's built-in catalog")],
            None,
            "or another name of codex's built-in catalog; an unknown one fails the turn",
        ),
        AgentId::Opencode => (
            &[],
            None,
            "a provider/model id configured for opencode (`opencode models` lists them), e.g. anthropic/claude-sonnet-4-5",
        ),
        AgentId::Pi => (
            &[],
            None,
            "a model id of a provider pi knows or of ~/.pi/agent/models.json (`pi --list-models` lists them)",
        ),
        AgentId::Gemini => (
            &[
                ("gemini-2.5-pro", "The most capable Gemini 2.5 model"),
                ("gemini-2.5-flash", "Faster and cheaper"),
                ("gemini-2.5-flash-lite", "The fastest and cheapest"),
            ],
            Some("gemini-2.5-pro"),
            "or another Gemini model name, passed as -m",
        ),
        AgentId::Amp => (&[], None, "amp picks its model from the agent mode (see the modes); it takes no model"),
        AgentId::Mock => {
            (&[("mock", "The scripted mock: no model at all")], Some("mock"), "the mock ignores the model")
        }
    };
    AgentModels {
        agent: agent.as_str().to_string(),
        models: models
            .iter()
            .map(|(id, description)| ModelInfo { id: id.to_string(), description: description.to_string() })
            .collect(),
        default_model: default.map(str::to_string),
        source: "catalog".to_string(),
        note: note.to_string(),
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
    let set = |name: &str| env(name).is_some_and(|v| !v.trim().is_empty());
    let env_names: &[&str] = match agent {
        AgentId::Claude => &["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"],
        AgentId::Codex => &["OPENAI_API_KEY", "CODEX_API_KEY"],
        AgentId::Opencode => &[
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "GEMINI_API_KEY",
            "GOOGLE_GENERATIVE_AI_API_KEY",
            "OPENROUTER_API_KEY",
            "OPENCODE_API_KEY",
        ],
        AgentId::Pi => &[
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "GEMINI_API_KEY",
            "OPENROUTER_API_KEY",
            "MISTRAL_API_KEY",
            "GROQ_API_KEY",
            "XAI_API_KEY",
        ],
        AgentId::Gemini => &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
        AgentId::Amp => &["AMP_API_KEY"],
        AgentId::Mock => return Some("built in".into()),
    };
    if let Some(name) = env_names.iter().find(|n| set(n)) {
        return Some(format!("${name}"));
    }
    // A directory an env variable names, else one under HOME.
    let dir = |var: &str, under_home: &str| -> Option<PathBuf> {
        match env(var).filter(|v| !v.is_empty()) {
            Some(dir) => Some(PathBuf::from(dir)),
            None => home.map(|h| h.join(under_home)),
        }
    };
    let data_home = || dir("XDG_DATA_HOME", ".local/share");
    let files: Vec<CredentialFile> = match agent {
        AgentId::Claude => {
            let config = dir("CLAUDE_CONFIG_DIR", ".claude");
            let mut files: Vec<CredentialFile> = Vec::new();
            if let Some(config) = config {
                files.push((config.join(".credentials.json"), |t| {
                    json_strings(t, &[&["claudeAiOauth", "accessToken"], &["claudeAiOauth", "refreshToken"]])
                }));
            }
            if let Some(home) = home {
                files.push((home.join(".claude.json"), |t| json_strings(t, &[&["primaryApiKey"]])));
            }
            files
        }
        AgentId::Codex => dir("CODEX_HOME", ".codex")
            .map(|d| {
                (
                    d.join("auth.json"),
                    (|t| {
                        json_strings(
                            t,
                            &[&["OPENAI_API_KEY"], &["tokens", "access_token"], &["tokens", "refresh_token"]],
                        )
                    }) as fn(&str) -> bool,
                )
            })
            .into_iter()
            .collect(),
        AgentId::Opencode => data_home()
            .map(|d| (d.join("opencode/auth.json"), provider_entries as fn(&str) -> bool))
            .into_iter()
            .collect(),
        AgentId::Pi => dir("PI_CODING_AGENT_DIR", ".pi/agent")
            .map(|d| {
                vec![
                    (d.join("auth.json"), provider_entries as fn(&str) -> bool),
                    (d.join("models.json"), models_api_key),
                ]
            })
            .unwrap_or_default(),
        AgentId::Gemini => home
            .map(|h| {
                vec![
                    (
                        h.join(".gemini/oauth_creds.json"),
                        (|t| json_strings(t, &[&["access_token"], &["refresh_token"]])) as fn(&str) -> bool,
                    ),
                    (h.join(".gemini/.env"), |t| dotenv_sets(t, &["GEMINI_API_KEY", "GOOGLE_API_KEY"])),
                ]
            })
            .unwrap_or_default(),
        AgentId::Amp => {
            data_home().map(|d| (d.join("amp/secrets.json"), amp_secrets as fn(&str) -> bool)).into_iter().collect()
        }
        AgentId::Mock => Vec::new(),
    };
    files
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

fn non_empty_string(value: &Value) -> bool {
    value.as_str().is_some_and(|s| !s.trim().is_empty())
}

/// Whether the JSON has a non-empty string at any of these paths.
fn json_strings(text: &str, paths: &[&[&str]]) -> bool {
    let Ok(json) = serde_json::from_str::<Value>(text) else { return false };
    paths.iter().any(|path| non_empty_string(path.iter().fold(&json, |v, key| &v[*key])))
}

/// `{provider: {type, key | access | refresh}}` (opencode's and pi's auth.json).
fn provider_entries(text: &str) -> bool {
    let Ok(Value::Object(providers)) = serde_json::from_str::<Value>(text) else { return false };
    providers.values().any(|entry| ["key", "access", "refresh", "token"].iter().any(|k| non_empty_string(&entry[*k])))
}

/// pi's models.json: a provider with an `apiKey`.
fn models_api_key(text: &str) -> bool {
    let Ok(json) = serde_json::from_str::<Value>(text) else { return false };
    json["providers"].as_object().is_some_and(|providers| providers.values().any(|p| non_empty_string(&p["apiKey"])))
}

/// amp's secrets.json: `{"apiKey@https://ampcode.com/": "..."}`.
fn amp_secrets(text: &str) -> bool {
    let Ok(Value::Object(secrets)) = serde_json::from_str::<Value>(text) else { return false };
    secrets.iter().any(|(key, value)| key.starts_with("apiKey") && non_empty_string(value))
}

/// A `.env` file setting one of these names to something.
fn dotenv_sets(text: &str, names: &[&str]) -> bool {
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
