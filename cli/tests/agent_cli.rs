//! `agentplane agent ...` against a real `agentplane node-agent`: an install with real
//! npm from the registry (amp, the smallest pinned agent), its progress lines and exit
//! code, `agent ls` showing it, and a failing install's exit code and npm's message.
//!
//! Needs network access to the npm registry (or the user's configured mirror).

mod common;

use std::process::{Command, Output, Stdio};

use agentplane_node_agent::agents::AgentId;
use common::{NodeAgent, TOKEN};

fn agent_cli(node: &NodeAgent, args: &[&str]) -> Output {
    // Not a terminal: progress comes as plain lines on stderr.
    Command::new(common::bin())
        .arg("agent")
        .args(args)
        .env("AGENTPLANE_URL", &node.url)
        .env("AGENTPLANE_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn install_shows_progress_then_ls_shows_it_and_a_missing_version_fails() {
    let node = NodeAgent::start();
    let pinned = AgentId::Amp.package().unwrap().default_version;
    let spec = format!("amp@{pinned}");

    let out = agent_cli(&node, &["install", &spec]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "agent install {spec}: {stderr}");
    for phase in ["resolving", "downloading", "verifying", "done"] {
        assert!(stderr.lines().any(|l| l.starts_with(&format!("{phase} {spec}:"))), "no {phase} line in {stderr}");
    }
    assert!(stdout.starts_with(&format!("installed amp {pinned}: ")) && stdout.contains("sha512-"), "{stdout}");

    let out = agent_cli(&node, &["ls"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ls = text(&out.stdout);
    assert!(ls.starts_with("AGENT"), "{ls}");
    let amp: Vec<&str> = ls.lines().find(|l| l.starts_with("amp ")).expect("amp is listed").split_whitespace().collect();
    assert_eq!(amp[1..3], ["yes", pinned], "{ls}");
    let claude: Vec<&str> = ls.lines().find(|l| l.starts_with("claude ")).unwrap().split_whitespace().collect();
    assert_eq!(claude[1], "no", "{ls}");

    // Again: a no-op that says so.
    let out = agent_cli(&node, &["install", &spec]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("already installed"), "{}", text(&out.stdout));

    let out = agent_cli(&node, &["install", "amp@0.0.0-does-not-exist"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("error: Install failed") && (stderr.contains("ETARGET") || stderr.contains("No matching version")), "{stderr}");

    // Not an agent at all: the node agent's answer, non-zero.
    let out = agent_cli(&node, &["install", "cursor"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("not supported"), "{}", text(&out.stderr));
}

#[test]
fn modes_and_models_are_tables() {
    let node = NodeAgent::start();
    let out = agent_cli(&node, &["modes", "mock"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let modes = text(&out.stdout);
    assert!(modes.lines().any(|l| l.starts_with("agentMode") && l.contains("plan")), "{modes}");
    assert!(modes.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["permissionMode", "default"]), "{modes}");

    let out = agent_cli(&node, &["models", "claude", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let models: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(models["source"], "catalog");
    assert!(models["models"].as_array().unwrap().iter().any(|m| m["id"] == "opus"), "{models}");
}
