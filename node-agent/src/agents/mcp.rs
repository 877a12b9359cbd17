//! MCP servers of a session (`mcpServers`): the checks every agent shares, and each
//! agent's own way of being given them, built here as data for its driver to write.
//!
//! Values (a stdio server's `env`, an HTTP server's `headers`) may be secrets: they go
//! only where the agent reads them (a file of mode 0600 in the session's directory,
//! the agent's environment, or its protocol), never into a command line, which every
//! user of the machine can read, nor into an error or a log line.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::agents::AgentId;
use crate::error::{Error, Result};
use crate::model::McpServer;

/// Longest server name: agents build tool names from it, and models limit those (64).
const MAX_NAME: usize = 64;

/// Whether `agent` can take `servers`, and whether they are well formed. Errors name
/// servers and fields, never values.
pub fn validate(agent: AgentId, servers: &[McpServer]) -> Result<()> {
    if servers.is_empty() {
        return Ok(());
    }
    if !agent.capabilities().mcp {
        return Err(Error::McpNotSupported(agent.as_str().to_string()));
    }
    let mut names = BTreeSet::new();
    for server in servers {
        let name = &server.name;
        let valid_name = !name.is_empty()
            && name.len() <= MAX_NAME
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_name {
            return Err(Error::InvalidRequest(format!(
                "MCP server name {name:?} is invalid: use 1 to {MAX_NAME} letters, digits, '_' or '-'"
            )));
        }
        if !names.insert(name.as_str()) {
            return Err(Error::InvalidRequest(format!("MCP server name {name:?} is used twice")));
        }
        match (&server.command, &server.url) {
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(Error::InvalidRequest(format!("MCP server {name:?}: command is empty")));
                }
                if !server.headers.is_empty() {
                    return Err(Error::InvalidRequest(format!(
                        "MCP server {name:?}: headers are for an HTTP server (url), not a command"
                    )));
                }
                for key in server.env.keys() {
                    if key.is_empty() || key.contains('=') || key.contains('\0') {
                        return Err(Error::InvalidRequest(format!(
                            "MCP server {name:?}: environment variable name {key:?} is invalid"
                        )));
                    }
                }
            }
            (None, Some(url)) => {
                let parsed = reqwest::Url::parse(url).ok().filter(|u| matches!(u.scheme(), "http" | "https"));
                if parsed.is_none() {
                    return Err(Error::InvalidRequest(format!(
                        "MCP server {name:?}: url must be an http:// or https:// URL"
                    )));
                }
                if !server.args.is_empty() || !server.env.is_empty() {
                    return Err(Error::InvalidRequest(format!(
                        "MCP server {name:?}: args and env are for a command, not an HTTP server (url)"
                    )));
                }
                for key in server.headers.keys() {
                    let valid = !key.is_empty()
                        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                    if !valid {
                        return Err(Error::InvalidRequest(format!(
                            "MCP server {name:?}: header name {key:?} is invalid"
                        )));
                    }
                }
                if server.headers.values().any(|v| v.contains(['\r', '\n', '\0'])) {
                    return Err(Error::InvalidRequest(format!(
                        "MCP server {name:?}: a header value holds a line break or NUL"
                    )));
                }
            }
            (Some(_), Some(_)) => {
                return Err(Error::InvalidRequest(format!(
                    "MCP server {name:?} has both command and url: give one (command for stdio, url for HTTP)"
                )));
            }
            (None, None) => {
                return Err(Error::InvalidRequest(format!(
                    "MCP server {name:?} has neither command nor url: give one (command for stdio, url for HTTP)"
                )));
            }
        }
    }
    Ok(())
}

/// Claude Code's `--mcp-config` document: `{"mcpServers": {name: {type, ...}}}`.
pub fn claude_config(servers: &[McpServer]) -> Value {
    let mut entries = Map::new();
    for server in servers {
        let entry = match &server.url {
            Some(url) => json!({"type": "http", "url": url, "headers": server.headers}),
            None => json!({"type": "stdio", "command": server.command, "args": server.args, "env": server.env}),
        };
        entries.insert(server.name.clone(), entry);
    }
    json!({"mcpServers": entries})
}

/// OpenCode's `mcp` section of `opencode.json`.
pub fn opencode_config(servers: &[McpServer]) -> Value {
    let mut entries = Map::new();
    for server in servers {
        let entry = match &server.url {
            Some(url) => json!({"type": "remote", "url": url, "headers": server.headers, "enabled": true}),
            None => {
                let mut command = vec![server.command.clone().unwrap_or_default()];
                command.extend(server.args.iter().cloned());
                json!({"type": "local", "command": command, "environment": server.env, "enabled": true})
            }
        };
        entries.insert(server.name.clone(), entry);
    }
    Value::Object(entries)
}

/// The Agent Client Protocol's `mcpServers` of `session/new` and `session/load`
/// (Gemini CLI): stdio `{name, command, args, env: [{name, value}]}`, HTTP
/// `{type: "http", name, url, headers: [{name, value}]}`.
pub fn acp_servers(servers: &[McpServer]) -> Value {
    let pairs = |map: &BTreeMap<String, String>| -> Vec<Value> {
        map.iter().map(|(name, value)| json!({"name": name, "value": value})).collect()
    };
    servers
        .iter()
        .map(|server| match &server.url {
            Some(url) => json!({"type": "http", "name": server.name, "url": url, "headers": pairs(&server.headers)}),
            None => json!({
                "name": server.name,
                "command": server.command,
                "args": server.args,
                "env": pairs(&server.env),
            }),
        })
        .collect()
}

/// Codex's `mcp_servers.<name>` tables as `-c` overrides, and the variables its
/// process must get for them. The overrides are on codex's command line, so they name
/// values by variable (`env_vars`, `env_http_headers`) and hold no value themselves:
/// a stdio server's env reaches it through codex's own environment, an HTTP server's
/// headers through variables named for the server and header.
pub fn codex_overrides(servers: &[McpServer]) -> (Vec<String>, BTreeMap<String, String>) {
    let mut overrides = Vec::new();
    let mut env = BTreeMap::new();
    for server in servers {
        let key = format!("mcp_servers.{}", server.name);
        match &server.url {
            Some(url) => {
                let mut headers = Vec::new();
                for (n, (header, value)) in server.headers.iter().enumerate() {
                    let variable = format!("AGENTPLANE_MCP_{}_HEADER_{n}", variable_part(&server.name));
                    headers.push(format!("{} = {}", toml_string(header), toml_string(&variable)));
                    env.insert(variable, value.clone());
                }
                overrides.push(format!(
                    "{key}={{ url = {}, env_http_headers = {{ {} }} }}",
                    toml_string(url),
                    headers.join(", ")
                ));
            }
            None => {
                let args: Vec<String> = server.args.iter().map(|a| toml_string(a)).collect();
                let names: Vec<String> = server.env.keys().map(|k| toml_string(k)).collect();
                overrides.push(format!(
                    "{key}={{ command = {}, args = [{}], env_vars = [{}] }}",
                    toml_string(server.command.as_deref().unwrap_or_default()),
                    args.join(", "),
                    names.join(", ")
                ));
                env.extend(server.env.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
    }
    (overrides, env)
}

/// Codex forwards a stdio server's variables from its own environment by name, so two
/// servers cannot give one name different values.
pub fn codex_validate(servers: &[McpServer]) -> Result<()> {
    let mut seen: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
    for server in servers {
        for (key, value) in &server.env {
            if let Some((other, earlier)) = seen.insert(key, (&server.name, value))
                && earlier != value
            {
                return Err(Error::InvalidRequest(format!(
                    "MCP servers {other:?} and {:?} give {key} different values; codex passes a server's env through its own environment, where a name has one value",
                    server.name
                )));
            }
        }
    }
    Ok(())
}

/// An environment variable name's part for a server name (`-` is not allowed there).
fn variable_part(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect()
}

/// A TOML basic string (JSON's escapes are TOML's for these characters).
fn toml_string(value: &str) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "\"\"".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(name: &str) -> McpServer {
        McpServer {
            name: name.into(),
            command: Some("node".into()),
            args: vec!["server.mjs".into()],
            env: [("TOKEN".to_string(), "s3cret".to_string())].into(),
            ..Default::default()
        }
    }

    fn http(name: &str) -> McpServer {
        McpServer {
            name: name.into(),
            url: Some("http://127.0.0.1:9/mcp".into()),
            headers: [("Authorization".to_string(), "Bearer s3cret".to_string())].into(),
            ..Default::default()
        }
    }

    #[test]
    fn well_formed_servers_pass_and_bad_ones_are_named_without_values() {
        assert!(validate(AgentId::Claude, &[stdio("fixture"), http("remote-1")]).is_ok());
        let cases = [
            (vec![stdio("a"), stdio("a")], "used twice"),
            (vec![stdio("bad name")], "is invalid"),
            (vec![stdio(&"x".repeat(65))], "is invalid"),
            (vec![McpServer { url: Some("http://x/".into()), ..stdio("both") }], "both command and url"),
            (vec![McpServer { name: "none".into(), ..Default::default() }], "neither"),
            (vec![McpServer { url: Some("file:///etc/passwd".into()), ..http("f") }], "http:// or https://"),
            (vec![McpServer { env: stdio("x").env, ..http("h") }], "args and env"),
            (vec![McpServer { headers: http("x").headers, ..stdio("s") }], "headers are for"),
            (vec![McpServer { headers: [("X".to_string(), "a\nb".to_string())].into(), ..http("h") }], "line break"),
        ];
        for (servers, expected) in cases {
            let error = validate(AgentId::Claude, &servers).unwrap_err();
            assert!(matches!(error, Error::InvalidRequest(_)), "{error:?}");
            let message = error.to_string();
            assert!(message.contains(expected), "{message:?} should say {expected:?}");
            assert!(!message.contains("s3cret"), "{message:?} holds a value");
        }
    }

    #[test]
    fn an_agent_without_mcp_refuses_and_says_which() {
        let error = validate(AgentId::Pi, &[stdio("fixture")]).unwrap_err();
        assert_eq!(error.code(), "mcp_not_supported");
        assert!(error.to_string().contains("\"pi\""), "{error}");
        assert!(validate(AgentId::Pi, &[]).is_ok());
    }

    #[test]
    fn each_agents_shape() {
        let servers = [stdio("fx"), http("web")];
        let claude = claude_config(&servers);
        assert_eq!(claude["mcpServers"]["fx"]["type"], "stdio");
        assert_eq!(claude["mcpServers"]["fx"]["env"]["TOKEN"], "s3cret");
        assert_eq!(claude["mcpServers"]["web"]["headers"]["Authorization"], "Bearer s3cret");
        let opencode = opencode_config(&servers);
        assert_eq!(opencode["fx"]["command"], json!(["node", "server.mjs"]));
        assert_eq!(opencode["web"]["type"], "remote");
        let acp = acp_servers(&servers);
        assert_eq!(acp[0]["env"], json!([{"name": "TOKEN", "value": "s3cret"}]));
        assert_eq!(acp[1]["headers"], json!([{"name": "Authorization", "value": "Bearer s3cret"}]));
    }

    #[test]
    fn codex_overrides_name_variables_and_hold_no_values() {
        let (overrides, env) = codex_overrides(&[stdio("fx"), http("web-1")]);
        assert_eq!(
            overrides,
            [
                r#"mcp_servers.fx={ command = "node", args = ["server.mjs"], env_vars = ["TOKEN"] }"#,
                r#"mcp_servers.web-1={ url = "http://127.0.0.1:9/mcp", env_http_headers = { "Authorization" = "AGENTPLANE_MCP_WEB_1_HEADER_0" } }"#,
            ]
        );
        assert!(overrides.iter().all(|o| !o.contains("s3cret")));
        assert_eq!(env.get("TOKEN").map(String::as_str), Some("s3cret"));
        assert_eq!(env.get("AGENTPLANE_MCP_WEB_1_HEADER_0").map(String::as_str), Some("Bearer s3cret"));
        let clash = McpServer { env: [("TOKEN".to_string(), "other".to_string())].into(), ..stdio("fy") };
        assert!(codex_validate(&[stdio("fx"), clash]).unwrap_err().to_string().contains("different values"));
        assert!(codex_validate(&[stdio("fx"), stdio("fy")]).is_ok());
    }
}
