//! `agentplane up` fed hostile or careless input in its watched folder: env files that
//! block, never end or lead out of the folder, symlink loops and aliases, names at the
//! length limit. Each was once a hang, a blow-up or a silent failure.

mod common;
#[path = "common/dir_up.rs"]
mod dir_up;

use std::fs;
use std::os::unix::fs::symlink;

use agentplane_controller::dir::parse::Kind;
use dir_up::{DirUp, phase, process_yaml, put, ready};

/// A Process that writes `$VAR` into `out` and stays up.
fn print_env_yaml(name: &str, var: &str, out: &std::path::Path, env: &str) -> String {
    process_yaml(
        name,
        &format!(
            "  command: sh\n  args: ['-c', 'printf %s \"${var}\" > \"$0\"; exec sleep 1000', '{}']\n{env}",
            out.display()
        ),
    )
}

/// Waits until `path` holds something, and returns it.
fn wait_file(up: &DirUp, path: &std::path::Path) -> String {
    up.wait(&format!("{} to be written", path.display()), || fs::read_to_string(path).ok().filter(|t| !t.is_empty()))
}

#[test]
fn a_fifo_env_file_is_refused_and_holds_up_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    fs::create_dir_all(&dir).unwrap();
    nix::unistd::mkfifo(&dir.join("fifo.env"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let up = DirUp::start(&dir, &[]);
    put(
        &dir.join("fifo.yaml"),
        &process_yaml("fifo", "  command: sleep\n  args: ['1000']\n  envFrom: [{file: fifo.env}]\n"),
    );
    // Written once the FIFO's resource is being reconciled: it must not wait behind it.
    fs::write(dir.join("ok.env"), "GREETING=hello from a file\n").unwrap();
    let out = tmp.path().join("ok.out");
    put(&dir.join("ok.yaml"), &print_env_yaml("ok", "GREETING", &out, "  envFrom: [{file: ok.env}]\n"));
    up.wait_status(Kind::Process, "ok", "running", |r| phase(r) == "Running");
    assert_eq!(wait_file(&up, &out), "hello from a file");
    let fifo = up.wait_status(Kind::Process, "fifo", "refused", |r| !ready(r).0.is_empty());
    let (reason, message) = ready(&fifo);
    assert_eq!((reason.as_str(), phase(&fifo)), ("EnvNotResolved", "Pending"), "{message}");
    assert!(message.contains("fifo.env is a FIFO, not a regular file"), "{message}");
}

#[test]
fn env_files_that_never_end_are_too_large_or_lead_out_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("big.env"), "A=1\n".repeat(512 * 1024)).unwrap();
    symlink("/etc/hostname", dir.join("host.env")).unwrap();
    fs::write(tmp.path().join("beside.env"), "SECRET=not yours\n").unwrap();
    let mut up = DirUp::start(&dir, &[]);
    let cases = [
        ("zero", "  envFrom: [{file: /dev/zero}]\n", "/dev/zero is outside the watched folder"),
        ("big", "  envFrom: [{file: big.env}]\n", "big.env holds more than 1048576 bytes"),
        (
            "escape",
            "  env: [{name: OS, valueFrom: {fileKeyRef: {path: ../../../../../../etc/os-release, key: ID}}}]\n",
            // /etc/os-release is itself a link, to /usr/lib/os-release on most systems.
            "which is outside the watched folder",
        ),
        (
            "host",
            "  envFrom: [{file: host.env}]\n",
            "host.env leads to /etc/hostname, which is outside the watched folder",
        ),
        ("beside", "  envFrom: [{file: ../beside.env}]\n", "is outside the watched folder"),
    ];
    for (name, env, _) in &cases {
        put(
            &dir.join(format!("{name}.yaml")),
            &process_yaml(name, &format!("  command: sleep\n  args: ['1000']\n{env}")),
        );
    }
    for (name, _, expected) in &cases {
        let record = up.wait_status(Kind::Process, name, "refused", |r| !ready(r).0.is_empty());
        let (reason, message) = ready(&record);
        assert_eq!((reason.as_str(), phase(&record)), ("EnvNotResolved", "Pending"), "{name}: {message}");
        assert!(message.contains(expected), "{name}: {message}");
    }
    // Refused without being read: nothing grew.
    up.assert_alive();
    let rss = up.rss_mib();
    assert!(rss < 300, "up holds {rss} MiB after refusing them");
}
