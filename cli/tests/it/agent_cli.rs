//! `agentplane agent ...` against a real `agentplane node-agent`: an install with real
//! npm from the registry (amp, the smallest pinned agent), its progress lines and exit
//! code, `agent ls` showing it, and a failing install's exit code and npm's message.
//!
//! Needs network access to the npm registry (or the user's configured mirror).

use crate::common;

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
    let amp: Vec<&str> =
        ls.lines().find(|l| l.starts_with("amp ")).expect("amp is listed").split_whitespace().collect();
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
    assert!(
        stderr.contains("error: Install failed")
            && (stderr.contains("ETARGET") || stderr.contains("No matching version")),
        "{stderr}"
    );

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
    assert!(
        modes.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["permissionMode", "default"]),
        "{modes}"
    );

    let out = agent_cli(&node, &["models", "claude", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let models: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(models["source"], "catalog");
    assert!(models["models"].as_array().unwrap().iter().any(|m| m["id"] == "opus"), "{models}");
}

/// A scripted npm registry on 127.0.0.1 serving one package: what a private mirror
/// named in the user's npm configuration would be. It can answer `npm view` (npm
/// says which command asks, in `npm-command`) with an integrity other than the
/// tarball's, as a tampered mirror would.
struct Registry {
    url: String,
    requests: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    lie_to_view: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Registry {
    fn start(name: &str, version: &str, tarball: Vec<u8>, integrity: String) -> Registry {
        use std::io::{BufRead, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let lie_to_view = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (log, lie, base, name, version) =
            (requests.clone(), lie_to_view.clone(), url.clone(), name.to_string(), version.to_string());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                let mut command = String::new();
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
                        break;
                    }
                    if let Some((key, value)) = header.split_once(':')
                        && key.eq_ignore_ascii_case("npm-command")
                    {
                        command = value.trim().to_string();
                    }
                }
                let path = request_line.split_whitespace().nth(1).unwrap_or("/").to_string();
                log.lock().unwrap().push(format!("{command} {path}"));
                let (status, body) = if path.ends_with(".tgz") {
                    ("200 OK", tarball.clone())
                } else if path.to_lowercase().trim_start_matches('/') == name.replace('/', "%2f") {
                    let integrity = if command == "view" && lie.load(std::sync::atomic::Ordering::SeqCst) {
                        "sha512-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==".to_string()
                    } else {
                        integrity.clone()
                    };
                    let packument = serde_json::json!({
                        "name": name,
                        "dist-tags": {"latest": version},
                        "versions": {version.clone(): {
                            "name": name, "version": version, "bin": {"amp": "cli.js"},
                            "dist": {"tarball": format!("{base}{name}/-/amp-{version}.tgz"), "integrity": integrity},
                        }},
                    });
                    ("200 OK", serde_json::to_vec(&packument).unwrap())
                } else {
                    ("404 Not Found", b"{}".to_vec())
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncache-control: no-store\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(&body));
            }
        });
        Registry { url, requests, lie_to_view }
    }
}

#[test]
fn the_users_npm_registry_is_used_and_an_integrity_mismatch_is_refused() {
    // A package as npm publishes it, packed by npm itself.
    let work = tempfile::tempdir().unwrap();
    let package = work.path().join("package");
    std::fs::create_dir_all(&package).unwrap();
    let version = "0.0.1-scripted";
    std::fs::write(
        package.join("package.json"),
        format!(r#"{{"name":"@sourcegraph/amp","version":"{version}","bin":{{"amp":"cli.js"}}}}"#),
    )
    .unwrap();
    std::fs::write(
        package.join("cli.js"),
        format!("#!/usr/bin/env node\nconsole.log('{version} from the scripted registry')\n"),
    )
    .unwrap();
    let packed = Command::new("npm")
        .args(["pack", "--json", "--pack-destination"])
        .arg(work.path())
        .current_dir(&package)
        .output()
        .unwrap();
    assert!(packed.status.success(), "npm pack: {}", text(&packed.stderr));
    let packed: serde_json::Value = serde_json::from_slice(&packed.stdout).unwrap();
    let integrity = packed[0]["integrity"].as_str().unwrap().to_string();
    let tarball = std::fs::read(work.path().join(packed[0]["filename"].as_str().unwrap())).unwrap();
    let registry = Registry::start("@sourcegraph/amp", version, tarball, integrity.clone());

    // The node agent's environment carries the user's npm configuration: a registry and a cache of its own.
    let cache = work.path().join("npm-cache");
    let prelude = [format!("npm_config_registry={}", registry.url), format!("npm_config_cache={}", cache.display())];
    let node = NodeAgent::start_with(&prelude.iter().map(String::as_str).collect::<Vec<_>>());
    let spec = format!("amp@{version}");
    let out = agent_cli(&node, &["install", &spec]);
    assert!(out.status.success(), "agent install {spec}: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&integrity), "{}", text(&out.stdout));
    let seen = registry.requests.lock().unwrap().clone();
    assert!(
        seen.iter().any(|r| r.starts_with("install ") && r.ends_with(".tgz")),
        "npm fetched from the configured registry: {seen:?}"
    );
    assert!(seen.iter().any(|r| r.starts_with("view ")), "the integrity was checked with the registry: {seen:?}");

    // The registry now contradicts what was downloaded: the reinstall is refused and
    // the version installed before stays.
    registry.lie_to_view.store(true, std::sync::atomic::Ordering::SeqCst);
    let out = agent_cli(&node, &["install", &spec, "--reinstall"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("integrity mismatch") && stderr.contains(&integrity), "{stderr}");
    let out = agent_cli(&node, &["ls", "-o", "json"]);
    let agents: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let amp = agents["agents"].as_array().unwrap().iter().find(|a| a["id"] == "amp").unwrap().clone();
    assert_eq!((amp["installed"].as_bool(), amp["version"].as_str()), (Some(true), Some(version)), "{amp}");
    let ran = Command::new(amp["path"].as_str().unwrap()).output().unwrap();
    assert_eq!(text(&ran.stdout).trim(), format!("{version} from the scripted registry"));
}
