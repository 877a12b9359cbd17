//! A Session's `mcpServers`: the checks the schema cannot make (exactly one of
//! `command` and `url`, unique names), and the servers as the node agent takes them
//! once each store has resolved their `env` and `headers` values (Secrets in a
//! cluster, files beside the resource in a directory) the way it resolves `env`.
//! Errors name servers and fields, never values.

use std::collections::{BTreeMap, BTreeSet};

use agentplane_crds::{EnvVar, HttpHeader, McpServerSpec};
use agentplane_node_agent::model::McpServer;

/// What is wrong with the servers as written, if anything.
pub fn check(servers: &[McpServerSpec]) -> Result<(), String> {
    let mut names = BTreeSet::new();
    for (index, server) in servers.iter().enumerate() {
        let at = format!("mcpServers[{index}] ({:?})", server.name);
        if !names.insert(server.name.as_str()) {
            return Err(format!("{at}: the name is used by another server: names must be unique"));
        }
        match (&server.command, &server.url) {
            (Some(_), Some(_)) => return Err(format!("{at}: give command (stdio) or url (HTTP), not both")),
            (None, None) => return Err(format!("{at}: give command (a stdio server) or url (an HTTP server)")),
            (Some(_), None) if !server.headers.is_empty() => {
                return Err(format!("{at}: headers are for an HTTP server (url), not a command"));
            }
            (None, Some(url)) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                return Err(format!("{at}: url must start with http:// or https://"));
            }
            (None, Some(_)) if !server.args.is_empty() || !server.env.is_empty() => {
                return Err(format!("{at}: args and env are for a command, not an HTTP server (url)"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A server's headers as variables, to be resolved the way `env` is.
pub fn header_vars(headers: &[HttpHeader]) -> Vec<EnvVar> {
    headers
        .iter()
        .map(|h| EnvVar { name: h.name.clone(), value: h.value.clone(), value_from: h.value_from.clone() })
        .collect()
}

/// Says which server and field a resolution problem is about.
pub fn context(server: &McpServerSpec, field: &str, problem: String) -> String {
    format!("mcpServers {:?} {field}: {problem}", server.name)
}

/// The server for the node agent, its values resolved.
pub fn resolved(server: &McpServerSpec, env: BTreeMap<String, String>, headers: BTreeMap<String, String>) -> McpServer {
    McpServer {
        name: server.name.clone(),
        command: server.command.clone(),
        args: server.args.clone(),
        env,
        url: server.url.clone(),
        headers,
    }
}

/// Every file the servers' `env` and `headers` read (directory store), as named.
pub fn referenced_files(servers: &[McpServerSpec]) -> impl Iterator<Item = &str> {
    servers.iter().flat_map(|s| {
        let env = s.env.iter().filter_map(|v| v.value_from.as_ref()?.file_key_ref.as_ref().map(|r| r.path.as_str()));
        let headers =
            s.headers.iter().filter_map(|h| h.value_from.as_ref()?.file_key_ref.as_ref().map(|r| r.path.as_str()));
        env.chain(headers)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(name: &str) -> McpServerSpec {
        McpServerSpec { name: name.into(), command: Some("node".into()), ..Default::default() }
    }

    #[test]
    fn exactly_one_transport_and_unique_names() {
        assert!(check(&[stdio("a"), stdio("b")]).is_ok());
        let twice = check(&[stdio("a"), stdio("a")]).unwrap_err();
        assert!(twice.contains("unique"), "{twice}");
        let both = check(&[McpServerSpec { url: Some("http://x/".into()), ..stdio("a") }]).unwrap_err();
        assert!(both.contains("not both"), "{both}");
        let neither = check(&[McpServerSpec { name: "a".into(), ..Default::default() }]).unwrap_err();
        assert!(neither.contains("give command"), "{neither}");
        let header = HttpHeader { name: "Authorization".into(), value: Some("secret-x".into()), value_from: None };
        let misplaced = check(&[McpServerSpec { headers: vec![header], ..stdio("a") }]).unwrap_err();
        assert!(misplaced.contains("headers are for") && !misplaced.contains("secret-x"), "{misplaced}");
    }
}
