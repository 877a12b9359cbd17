//! A Session whose workspace is a git repository, through `agentplane up` on a folder:
//! a local bare repository (real `git`) cloned at a tag, the real Claude Code (driven
//! by the scripted model server's `[[run:...]]`) editing a file in it, the status
//! listing the change and `agentplane diff` printing it; and a bad URL failing the
//! Session with git's message, leaving nothing behind.
//! Slow (the first run installs claude into target/tmp/agents).

use crate::common;
use crate::dir_up;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agentplane_crds::Kind;
use dir_up::{DirUp, phase, put, ready};

/// A turn of a real CLI on a loaded machine; the first one includes installing it.
const AGENT_PATIENCE: Duration = Duration::from_secs(300);

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn session_yaml(name: &str, workspace: &str, model_port: u16, messages: &str) -> String {
    format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: {name}\nspec:\n  agent: claude\n  \
         permissionMode: bypass\n  workspace:\n{workspace}  env:\n    - {{name: ANTHROPIC_BASE_URL, value: \"http://127.0.0.1:{model_port}\"}}\n    \
         - {{name: ANTHROPIC_API_KEY, value: test}}\n    - {{name: CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, value: \"1\"}}\n    \
         - {{name: DISABLE_AUTOUPDATER, value: \"1\"}}\n{messages}"
    )
}

#[test]
fn claude_edits_a_clone_at_a_tag_and_diff_shows_it() {
    // The repository: README.md at tag v1, then a commit after the tag.
    let scratch = tempfile::tempdir().unwrap();
    let src = scratch.path().join("src");
    std::fs::create_dir(&src).unwrap();
    git(&src, &["init", "-q", "-b", "main"]);
    std::fs::write(src.join("README.md"), "hello\n").unwrap();
    git(&src, &["add", "."]);
    git(&src, &["commit", "-q", "-m", "one"]);
    git(&src, &["tag", "v1"]);
    let tagged = git(&src, &["rev-parse", "HEAD"]);
    std::fs::write(src.join("README.md"), "hello\nafter the tag\n").unwrap();
    git(&src, &["commit", "-q", "-am", "two"]);
    let later = git(&src, &["rev-parse", "HEAD"]);
    git(scratch.path(), &["clone", "-q", "--bare", "src", "repo.git"]);
    let url = format!("file://{}", scratch.path().join("repo.git").display());

    let model = common::ModelServer::start();
    let dir = scratch.path().join("resources");
    std::fs::create_dir(&dir).unwrap();
    // Where a clone that fails would go: it must stay empty.
    let bad_target = scratch.path().join("bad-target");
    std::fs::create_dir(&bad_target).unwrap();
    put(
        &dir.join("edit.yaml"),
        &session_yaml(
            "edit",
            &format!("    git:\n      url: \"{url}\"\n      ref: v1\n"),
            model.port,
            "  messages:\n    - \"[[run:echo changed >> README.md]]\"\n",
        ),
    );
    put(
        &dir.join("bad.yaml"),
        &session_yaml(
            "bad",
            &format!("    git:\n      url: \"file:///nonexistent.git\"\n    path: \"{}/work\"\n", bad_target.display()),
            model.port,
            "",
        ),
    );
    let agents: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("agents");
    let up = DirUp::start(&dir, &["--agents-dir", agents.to_str().unwrap()]);

    // The bad URL: Failed with git's message, nothing half-cloned.
    let bad = up.wait_status(Kind::Session, "bad", "Failed", |r| phase(r) == "Failed");
    let (reason, message) = ready(&bad);
    assert_eq!(reason, "CloneFailed", "{bad:#}");
    assert!(message.contains("does not appear to be a git repository"), "{message}");
    assert_eq!(std::fs::read_dir(&bad_target).unwrap().count(), 0, "nothing left where the clone was to go");

    // The good one: cloned at the tag, then the turn edits README.md.
    let edited = up.wait_for(AGENT_PATIENCE, "the turn's change in status.workspace", || {
        let record = up.record(Kind::Session, "edit")?;
        let changed = &record["status"]["workspace"]["changedFiles"];
        (record["status"]["deliveredMessages"] == 1 && phase(&record) == "Idle" && changed.as_array()?.len() == 1)
            .then_some(record)
    });
    let workspace = &edited["status"]["workspace"];
    assert_eq!(workspace["commit"], tagged.as_str(), "the tag's commit, not the later {later}");
    assert_eq!(workspace["ref"], "v1");
    assert_eq!(workspace["changedFiles"][0], serde_json::json!({"path": "README.md", "status": "modified"}));
    let path = PathBuf::from(workspace["path"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(path.join("README.md")).unwrap(), "hello\nchanged\n");

    let out = up.cli(&["describe", "session", "edit"]);
    let described = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(described.contains("Commit:") && described.contains(tagged.as_str()), "{described}");
    assert!(described.contains("modified README.md"), "{described}");

    let out = up.cli(&["diff", "session/edit"]);
    let diff = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(diff.contains("--- a/README.md\n+++ b/README.md\n"), "{diff}");
    assert!(diff.contains(" hello\n+changed\n"), "{diff}");
    assert!(!diff.contains("\x1b["), "no colour off a terminal");
    // A session without a git workspace: a clear error, not an empty diff.
    let out = up.cli(&["diff", "session/bad"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not cloned"), "{}", String::from_utf8_lossy(&out.stderr));
}
