//! Installing agents with real npm from the real registry (the user's npm
//! configuration applies), each test into an agents directory of its own: a pinned
//! install that runs, the no-op second install, a version that does not exist
//! leaving the previous one working, progress over SSE, a reinstall swapped in, and
//! two node agents sharing a directory installing once. amp is the agent installed:
//! its pinned package is the smallest (3 packages, about 11 MB).
//!
//! Needs network access to the npm registry (or the user's configured mirror).

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use agentplane_node_agent::SessionOptions;
use agentplane_node_agent::agents::AgentId;
use agentplane_node_agent::model::*;
use common::*;

/// An install fetches from the registry on a loaded 2-core machine: minutes, not seconds.
const INSTALL_PATIENCE: Duration = Duration::from_secs(300);

fn pinned() -> &'static str {
    AgentId::Amp.package().unwrap().default_version
}

async fn server_with_agents_in(dir: &std::path::Path) -> TestServer {
    TestServer::start_with_sessions(SessionOptions { agents_dir: Some(dir.to_path_buf()), ..SessionOptions::default() })
        .await
}

async fn install(
    server: &TestServer,
    version: Option<&str>,
    reinstall: bool,
) -> agentplane_node_agent::client::ClientResult<InstallResult> {
    let request = InstallRequest { version: version.map(str::to_string), reinstall };
    match tokio::time::timeout(INSTALL_PATIENCE, server.client.install_agent("amp", &request)).await {
        Ok(result) => result,
        Err(_) => panic!("timed out installing amp {version:?}"),
    }
}

/// `<path> --version` with a HOME of its own, as a session would run it.
async fn version_of(path: &str) -> String {
    let home = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(path)
        .arg("--version")
        .env("HOME", home.path())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), output).await.expect("amp --version answers").unwrap();
    assert!(output.status.success(), "{path} --version: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn a_pinned_install_runs_a_second_is_a_no_op_and_a_missing_version_leaves_it_working() {
    let agents = tempfile::tempdir().unwrap();
    let server = server_with_agents_in(agents.path()).await;
    let before = server.client.get_agent("amp").await.unwrap();
    assert!(!before.installed && before.version.is_none() && before.path.is_none(), "{before:?}");

    let first = install(&server, None, false).await.unwrap();
    assert_eq!((first.agent.as_str(), first.version.as_str(), first.already_installed), ("amp", pinned(), false));
    let integrity = first.integrity.clone().expect("a verified integrity");
    assert!(integrity.starts_with("sha512-"), "{integrity}");
    let listed = server.client.list_agents().await.unwrap().into_iter().find(|a| a.id == "amp").unwrap();
    assert!(listed.installed, "{listed:?}");
    assert_eq!(listed.version.as_deref(), Some(pinned()));
    assert_eq!(listed.path.as_deref(), Some(first.path.as_str()));
    assert!(version_of(&first.path).await.contains(pinned()));
    let dir = agents.path().join("amp").join(pinned());
    let marker: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(".agentplane-install.json")).unwrap()).unwrap();
    assert_eq!(marker["integrity"], integrity.as_str());
    assert_eq!(marker["version"], pinned());

    // The same version again: nothing fetched, the directory untouched.
    let inode = std::fs::metadata(&dir).unwrap().ino();
    let started = std::time::Instant::now();
    let again = install(&server, Some(pinned()), false).await.unwrap();
    assert!(again.already_installed, "{again:?}");
    assert_eq!((again.path.as_str(), again.integrity.as_deref()), (first.path.as_str(), Some(integrity.as_str())));
    assert!(started.elapsed() < Duration::from_secs(5), "a no-op took {:?}", started.elapsed());
    assert_eq!(std::fs::metadata(&dir).unwrap().ino(), inode);

    // A version the registry does not have: npm's error, and the pinned one still current and working.
    let missing = install(&server, Some("0.0.0-does-not-exist"), false).await.unwrap_err();
    assert_eq!(missing.problem_code(), Some("install_failed"), "{missing}");
    let detail = missing.to_string();
    assert!(detail.contains("ETARGET") || detail.contains("No matching version"), "npm's error is in {detail}");
    let after = server.client.get_agent("amp").await.unwrap();
    assert_eq!(
        (after.installed, after.version.as_deref(), after.path.as_deref()),
        (true, Some(pinned()), Some(first.path.as_str()))
    );
    assert!(!agents.path().join("amp").join("0.0.0-does-not-exist").exists());
    assert!(version_of(&first.path).await.contains(pinned()));
    server.stop().await;
}

#[tokio::test]
async fn progress_arrives_over_sse_and_a_reinstall_is_swapped_in() {
    let agents = tempfile::tempdir().unwrap();
    let server = server_with_agents_in(agents.path()).await;
    let mut seen = Vec::new();
    let request = InstallRequest::default();
    let result = tokio::time::timeout(
        INSTALL_PATIENCE,
        server.client.install_agent_with_progress("amp", &request, |p| seen.push(p.clone())),
    )
    .await
    .expect("the install ends")
    .unwrap();
    assert!(!result.already_installed);
    let phases: Vec<InstallPhase> = seen.iter().map(|p| p.phase).fold(Vec::new(), |mut phases, phase| {
        if phases.last() != Some(&phase) {
            phases.push(phase);
        }
        phases
    });
    assert_eq!(
        phases,
        [InstallPhase::Resolving, InstallPhase::Downloading, InstallPhase::Verifying, InstallPhase::Done],
        "{seen:#?}"
    );
    let last = seen.last().unwrap();
    assert!(last.packages_resolved >= 1 && last.tarballs_fetched >= 1, "{last:?}");
    assert!(seen.iter().all(|p| p.agent == "amp" && p.version == pinned()));

    // A reinstall fetches again and exchanges the directory; it still runs.
    let dir = agents.path().join("amp").join(pinned());
    let inode = std::fs::metadata(&dir).unwrap().ino();
    let mut phases = Vec::new();
    let request = InstallRequest { version: None, reinstall: true };
    let again = tokio::time::timeout(
        INSTALL_PATIENCE,
        server.client.install_agent_with_progress("amp", &request, |p| phases.push(p.phase)),
    )
    .await
    .expect("the reinstall ends")
    .unwrap();
    assert!(!again.already_installed);
    assert_eq!(again.integrity, result.integrity);
    assert_eq!(phases.last(), Some(&InstallPhase::Done));
    assert_ne!(std::fs::metadata(&dir).unwrap().ino(), inode, "a new directory");
    assert!(version_of(&again.path).await.contains(pinned()));
    let leftovers: Vec<_> = std::fs::read_dir(agents.path().join("amp"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".installing"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A failure over SSE is `install.failed` with the problem.
    let request = InstallRequest { version: Some("0.0.0-does-not-exist".into()), reinstall: false };
    let failed =
        tokio::time::timeout(INSTALL_PATIENCE, server.client.install_agent_with_progress("amp", &request, |_| {}))
            .await
            .expect("the install ends")
            .unwrap_err();
    assert_eq!(failed.problem_code(), Some("install_failed"), "{failed}");
    server.stop().await;
}

#[tokio::test]
async fn two_node_agents_sharing_a_directory_install_once() {
    let agents = tempfile::tempdir().unwrap();
    let (one, two) = (server_with_agents_in(agents.path()).await, server_with_agents_in(agents.path()).await);
    // Two node agents (the file lock between them), and twice the same one.
    let (a, b, c) =
        tokio::join!(install(&one, None, false), install(&two, Some(pinned()), false), install(&one, None, false));
    let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
    // One ran npm; the others waited on the lock and found it done.
    let mut already = [a.already_installed, b.already_installed, c.already_installed];
    already.sort();
    assert_eq!(already, [false, true, true], "{a:?} {b:?} {c:?}");
    for other in [&b, &c] {
        assert_eq!((a.path.as_str(), a.integrity.as_deref()), (other.path.as_str(), other.integrity.as_deref()));
    }
    // Each reads the disk: both list it.
    for server in [&one, &two] {
        let amp = server.client.get_agent("amp").await.unwrap();
        assert_eq!(amp.version.as_deref(), Some(pinned()));
    }
    one.stop().await;
    two.stop().await;
}

#[tokio::test]
async fn refused_requests_never_reach_npm() {
    let agents = tempfile::tempdir().unwrap();
    let server = server_with_agents_in(agents.path()).await;
    let mock = server.client.install_agent("mock", &InstallRequest::default()).await.unwrap_err();
    assert_eq!(mock.problem_code(), Some("invalid_request"), "{mock}");
    let unknown = server.client.install_agent("cursor", &InstallRequest::default()).await.unwrap_err();
    assert_eq!(unknown.problem_code(), Some("unsupported_agent"), "{unknown}");
    for version in ["latest", "../../etc", "1.0.0/x"] {
        let request = InstallRequest { version: Some(version.into()), reinstall: false };
        let refused = server.client.install_agent("amp", &request).await.unwrap_err();
        assert_eq!(refused.problem_code(), Some("invalid_request"), "{version}: {refused}");
    }
    // A body that is not JSON.
    let response = reqwest::Client::new()
        .post(format!("{}/v1/agents/amp/install", server.url))
        .bearer_auth(TOKEN)
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(response.headers()["content-type"], "application/problem+json");
    assert!(std::fs::read_dir(agents.path()).unwrap().next().is_none(), "nothing was installed");

    let modes = server.client.agent_modes("mock").await.unwrap();
    assert_eq!(modes.agent_modes.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["build", "plan"]);
    assert!(modes.permission_modes.contains(&PermissionMode::Default));
    let models = server.client.agent_models("claude").await.unwrap();
    assert_eq!(models.source, "catalog");
    assert!(models.models.iter().any(|m| m.id == "sonnet"), "{models:?}");
    let missing = server.client.agent_modes("cursor").await.unwrap_err();
    assert_eq!(missing.problem_code(), Some("unsupported_agent"));
    // The document describes what the routes take and answer.
    let doc: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/v1/openapi.json", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for schema in ["InstallRequest", "InstallResult", "InstallProgress", "AgentModes", "AgentModels"] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema} is described");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_version_npm_refuses_leaves_no_lock_file_behind() {
    let agents = tempfile::tempdir().unwrap();
    let server = server_with_agents_in(agents.path()).await;
    for version in ["0.0.0-doesnotexist", "0.0.0-doesnotexist.2"] {
        let refused = install(&server, Some(version), false).await.unwrap_err();
        assert_eq!(refused.problem_code(), Some("install_failed"), "{refused}");
    }
    let left: Vec<String> = std::fs::read_dir(agents.path().join("amp"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "a failed install leaves nothing in the agent's directory: {left:?}");
    let metrics = reqwest::get(&server.metrics_url).await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("agentplane_node_agent_installs_total{agent=\"amp\",outcome=\"failed\"} 2\n"),
        "{metrics}"
    );
    server.stop().await;
}
