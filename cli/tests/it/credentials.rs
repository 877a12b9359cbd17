//! Credentials under `agentplane up`, with the real bubblewrap and the real proxy: what
//! runs in the sandbox holds a placeholder (in its environment, every process's, the
//! files written for it); the hosts a credential lists get the value, over plain HTTP
//! and over HTTPS opened with the sandbox's CA; other hosts get the placeholder, and the
//! status counts each, never showing a value.

use crate::common;
use crate::sandboxes::{PATIENCE, Up, process_yaml, ready, sandbox_yaml};
use common::{HeadServer, read_head};

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use agentplane_crds::{CredentialStatus, Kind, Object};
use common::wait_until;

/// Every file under `dir` whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file()
                && let Ok(bytes) = fs::read(entry.path())
                && bytes.windows(needle.len()).any(|w| w == needle)
            {
                found.push(entry.path().display().to_string());
            }
        }
    }
    found
}

fn credentials_of(up: &Up, sandbox: &str) -> Vec<CredentialStatus> {
    match up.record(Kind::Sandbox, sandbox) {
        Some(Object::Sandbox(s)) => s.status.map(|s| s.credentials).unwrap_or_default(),
        _ => Vec::new(),
    }
}

#[test]
fn a_sandbox_holds_placeholders_and_only_the_listed_host_gets_the_value() {
    let api = HeadServer::start("api-answer");
    let other = HeadServer::start("other-answer");
    let value = format!("sk-test-{}", agentplane_node_agent::random::hex(12));
    let sandbox = sandbox_yaml(
        "iso",
        &format!(
            "  network: allowlist\n  allow: [\"127.0.0.1:{other}\"]\n  credentials:\n  - name: API_KEY\n    \
             valueFrom: {{fileKeyRef: {{path: keys.env, key: API_KEY}}}}\n    hosts: [\"127.0.0.1:{api}\"]\n",
            other = other.port,
            api = api.port,
        ),
    );
    // bash's /dev/tcp: no curl needed. A bearer to the listed host, a Basic credential
    // and a header to one that is allowed but not listed.
    let get = |port: u16, header: &str| {
        format!(
            "(exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'GET / HTTP/1.1\\r\\nHost: x\\r\\n%s\\r\\n\\r\\n' \"{header}\" >&3 && cat <&3)"
        )
    };
    let script = format!(
        "echo env:; env; echo environ:; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; echo cmdlines:; \
         cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '; echo; {listed}; echo; {other}",
        listed = get(api.port, "Authorization: Bearer $API_KEY"),
        other = get(other.port, "x-api-key: $API_KEY"),
    );
    let up = Up::start(
        &[
            ("keys.env", &format!("API_KEY={value}\n")),
            ("iso.yaml", &sandbox),
            ("probe.yaml", &process_yaml("probe", "iso", &script)),
        ],
        &[],
    );
    up.wait_sandbox("iso", "ready", ready);
    let (code, out) = up.finished("probe");
    assert_eq!(code, 0, "{out}");
    let placeholder = out
        .lines()
        .find_map(|l| l.strip_prefix("API_KEY="))
        .unwrap_or_else(|| panic!("no API_KEY in the environment:\n{out}"))
        .to_string();
    assert!(placeholder.starts_with("agentplane-credential-"), "{placeholder}");
    assert!(!out.contains(&value), "the value reached the sandbox:\n{out}");
    assert!(out.contains("api-answer") && out.contains("other-answer"), "{out}");

    // The listed host got the value; the other the placeholder.
    assert_eq!(api.heads().len(), 1);
    assert!(api.heads()[0].contains(&format!("Authorization: Bearer {value}\r\n")), "{:?}", api.heads());
    assert!(other.heads()[0].contains(&format!("x-api-key: {placeholder}\r\n")), "{:?}", other.heads());
    let expected = vec![CredentialStatus {
        name: "API_KEY".into(),
        hosts: vec![format!("127.0.0.1:{}", api.port)],
        sent: 1,
        blocked: 1,
    }];
    wait_until(PATIENCE, "the counts in the status", || credentials_of(&up, "iso") == expected);

    // Nowhere on disk but the file it came from: not the state (the status, the
    // sandbox's folders, what the node agent wrote), not the log.
    let leaked = files_holding(&up.dir.join(".agentplane"), value.as_bytes());
    assert!(leaked.is_empty(), "the value is in {leaked:?}");
    assert!(!up.log().contains(&value), "the value is in up's log");
    let described = std::process::Command::new(common::bin())
        .args(["describe", "sandbox/iso", "--dir"])
        .arg(&up.dir)
        .output()
        .unwrap();
    let described = String::from_utf8_lossy(&described.stdout);
    assert!(described.contains("API_KEY") && !described.contains(&value), "{described}");
}

/// An HTTPS server on the loopback with a certificate for `localhost` from a CA of its
/// own, keeping the heads it got. Answers the CA's PEM.
fn https_server(heads: Arc<Mutex<Vec<String>>>) -> (u16, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()]).unwrap().signed_by(&leaf_key, &ca).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone()], key)
            .unwrap(),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let Ok(connection) = rustls::ServerConnection::new(Arc::clone(&config)) else { continue };
            let mut tls = rustls::StreamOwned::new(connection, stream);
            if let Some(head) = read_head(&mut tls) {
                heads.lock().unwrap().push(head);
                let _ =
                    tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nConnection: close\r\n\r\nhttps-answer");
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        }
    });
    (port, ca.pem())
}

#[test]
fn https_to_a_listed_host_is_opened_with_the_sandbox_ca_and_carries_the_value() {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let (port, upstream_ca) = https_server(Arc::clone(&heads));
    let value = format!("sk-test-{}", agentplane_node_agent::random::hex(12));
    let sandbox = sandbox_yaml(
        "tls",
        &format!(
            "  network: allowlist\n  credentials:\n  - name: API_KEY\n    valueFrom: {{fileKeyRef: {{path: keys.env, key: \
             API_KEY}}}}\n    hosts: [\"localhost:{port}\"]\n"
        ),
    );
    // Once through HTTPS_PROXY (CONNECT), once at the host's own address (the tunnel);
    // curl trusts only what the sandbox's variables name.
    let script = format!(
        "NO_PROXY= no_proxy= curl -sS --max-time 20 -H \"x-api-key: $API_KEY\" https://localhost:{port}/; echo; \
         curl -sS --max-time 20 -H \"x-api-key: $API_KEY\" https://localhost:{port}/; echo; echo bundle=$SSL_CERT_FILE"
    );
    // The upstream's CA is the host's trust store, as far as `up` knows.
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("upstream-ca.pem");
    fs::write(&store, &upstream_ca).unwrap();
    let up = Up::start_in(
        &[
            ("keys.env", &format!("API_KEY={value}\n")),
            ("tls.yaml", &sandbox),
            ("curl.yaml", &process_yaml("curl", "tls", &script)),
        ],
        &[],
        &[("SSL_CERT_FILE", store.to_str().unwrap())],
    );
    up.wait_sandbox("tls", "ready", ready);
    let (code, out) = up.finished("curl");
    assert_eq!(code, 0, "{out}\n{}", up.log());
    assert_eq!(out.matches("https-answer").count(), 2, "{out}");
    assert!(out.contains("bundle=/run/agentplane/"), "{out}");
    assert!(!out.contains(&value), "{out}");
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 2, "{heads:?}");
    for head in &heads {
        assert!(head.contains(&format!("x-api-key: {value}\r\n")), "{head:?}");
    }
    wait_until(PATIENCE, "two sent in the status", || credentials_of(&up, "tls").first().is_some_and(|c| c.sent == 2));
}

#[test]
fn credentials_where_nothing_swaps_them_are_refused_with_the_reason() {
    let spec = "  credentials:\n  - name: API_KEY\n    valueFrom: {fileKeyRef: {path: keys.env, key: API_KEY}}\n    \
                hosts: [api.example.com]\n";
    let up = Up::start(&[("keys.env", "API_KEY=sk-never\n"), ("open.yaml", &sandbox_yaml("open", spec))], &[]);
    up.wait_sandbox("open", "refused", |s| {
        s.conditions.iter().any(|c| c.reason == "InvalidSpec" && c.message.contains("network: allowlist"))
    });
    // A Session's credentials on the embedded node agent: it does not start, and says why.
    let session = "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: s\nspec:\n  agent: mock\n  \
                   credentials:\n  - name: API_KEY\n    valueFrom: {fileKeyRef: {path: keys.env, key: API_KEY}}\n    \
                   hosts: [api.example.com]\n  messages: [hello]\n";
    fs::write(up.dir.join("s.yaml"), session).unwrap();
    wait_until(PATIENCE, "the session to say why", || match up.record(Kind::Session, "s") {
        Some(Object::Session(s)) => s.status.is_some_and(|st| {
            st.delivered_messages == 0 && st.conditions.iter().any(|c| c.message.contains("credentials need"))
        }),
        _ => false,
    });
}

/// A Session of `agent` in sandbox `sandbox` whose model key is a credential for the
/// model server, with the rest of its setup as `env` values.
fn agent_session(
    agent: &str,
    sandbox: &str,
    port: u16,
    key_var: &str,
    env: &[(&str, String)],
    messages: &[&str],
) -> String {
    let env: String = env
        .iter()
        .map(|(name, value)| format!("    - {{name: {name}, value: {}}}\n", serde_json::to_string(value).unwrap()))
        .collect();
    let messages: String = messages.iter().map(|m| format!("    - {}\n", serde_json::to_string(m).unwrap())).collect();
    format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: {agent}\nspec:\n  sandbox: {sandbox}\n  \
         agent: {agent}\n  permissionMode: bypass\n  env:\n{env}  credentials:\n  - name: {key_var}\n    valueFrom: \
         {{fileKeyRef: {{path: keys.env, key: MODEL_KEY}}}}\n    hosts: [\"127.0.0.1:{port}\"]\n  messages:\n{messages}"
    )
}

fn session_events(up: &Up, name: &str) -> String {
    let out = std::process::Command::new(common::bin())
        .args(["logs", &format!("session/{name}"), "-o", "json", "--dir"])
        .arg(&up.dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_agent_gets_its_key_as_a_credential_and_never_holds_it() {
    let model = common::ModelServer::start();
    let port = model.port;
    let url = format!("http://127.0.0.1:{port}");
    let value = format!("sk-test-{}", agentplane_node_agent::random::hex(12));
    // Claude is told to look for its key everywhere it could be.
    let probe = "[[run:env; cat /proc/*/environ | tr '\\0' '\\n'; cat /proc/*/cmdline | tr '\\0' ' '; \
                 cat ~/.claude.json ~/.claude/settings.json 2>/dev/null; echo probe-done]]";
    let sessions = [
        agent_session(
            "claude",
            "agents",
            port,
            "ANTHROPIC_API_KEY",
            // Its background calls (to api.anthropic.com, not listed) would carry the
            // placeholder there, counted blocked as they should be, but at a moment of
            // its own: a slow run saw one.
            &[
                ("ANTHROPIC_BASE_URL", url.clone()),
                ("DISABLE_AUTOUPDATER", "1".into()),
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
            ],
            &[probe],
        ),
        agent_session(
            "codex",
            "agents",
            port,
            "OPENAI_API_KEY",
            &[("OPENAI_BASE_URL", format!("{url}/v1"))],
            &["hello"],
        ),
        agent_session(
            "opencode",
            "agents",
            port,
            "OPENAI_API_KEY",
            &[("OPENAI_BASE_URL", format!("{url}/v1"))],
            &["hello"],
        ),
        agent_session(
            "gemini",
            "agents",
            port,
            "GEMINI_API_KEY",
            &[("GOOGLE_GEMINI_BASE_URL", url.clone())],
            &["hello"],
        ),
        agent_session("amp", "agents", port, "AMP_API_KEY", &[("AMP_URL", url.clone())], &["hello"]),
        agent_session("pi", "agents", port, "ANTHROPIC_API_KEY", &[("ANTHROPIC_BASE_URL", url.clone())], &["hello"]),
    ];
    let agents = crate::sandboxes::agents_dir();
    let sandbox = sandbox_yaml("agents", &format!("  network: allowlist\n  allow: [\"127.0.0.1:{port}\"]\n"));
    let up = Up::start(
        &[
            ("keys.env", &format!("MODEL_KEY={value}\n")),
            ("agents.yaml", &sandbox),
            ("sessions.yaml", &sessions.join("---\n")),
        ],
        &["--agents-dir", agents.to_str().unwrap()],
    );
    up.wait_sandbox("agents", "ready", ready);
    let names = ["claude", "codex", "opencode", "gemini", "amp", "pi"];
    let answered = |name: &&str| {
        crate::sandboxes::session_record(&up, name)
            .and_then(|s| s.status)
            .is_some_and(|st| st.delivered_messages == 1 && st.phase == Some(agentplane_crds::SessionPhase::Idle))
    };
    let deadline = std::time::Instant::now() + crate::sandboxes::AGENT_PATIENCE;
    while !names.iter().all(answered) {
        if std::time::Instant::now() > deadline {
            let waiting: Vec<String> = names
                .iter()
                .filter(|n| !answered(n))
                .map(|n| format!("{n}: {:?}", crate::sandboxes::session_record(&up, n).and_then(|s| s.status)))
                .collect();
            panic!("timed out waiting for every agent to answer:\n{}\n{}", waiting.join("\n"), up.log());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    // The model server got the value on every request, from every agent, and never a
    // placeholder.
    let requests = model.requests();
    for (agent, path) in [
        ("claude or pi", "/v1/messages"),
        ("codex", "/v1/responses"),
        ("opencode", "/chat/completions"),
        ("gemini", "/v1beta/"),
        ("amp", "/api/"),
    ] {
        let of_agent: Vec<_> = requests.iter().filter(|r| r.uri.contains(path)).collect();
        assert!(!of_agent.is_empty(), "no request of {agent} ({path})");
        for request in of_agent {
            // The header each agent's API puts its key in (docs/agents.md says the same).
            let header = if request.uri.contains("/messages") {
                "x-api-key"
            } else if request.uri.contains("/v1beta/") {
                "x-goog-api-key"
            } else {
                "authorization"
            };
            assert!(
                request.headers.get(header).is_some_and(|v| v.contains(&value)),
                "{agent}: {} {} carried no key in {header}: {:?}",
                request.method,
                request.uri,
                request.headers.keys().collect::<Vec<_>>()
            );
            assert!(
                !request.headers.values().any(|v| v.contains("agentplane-credential-")),
                "{agent}: a placeholder reached the model server"
            );
        }
    }
    // The status follows the proxy's counts within a second or so.
    let counted = |counts: &[CredentialStatus]| counts.len() == 6 && counts.iter().all(|c| c.sent >= 1);
    let deadline = std::time::Instant::now() + PATIENCE;
    while !counted(&credentials_of(&up, "agents")) {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for each credential counted as sent: {:#?}\n{}",
            credentials_of(&up, "agents"),
            up.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let counts = credentials_of(&up, "agents");
    assert!(counts.iter().all(|c| c.blocked == 0), "a placeholder went to a host not listed: {counts:#?}");

    // What Claude found, inside: placeholders only.
    let events = session_events(&up, "claude");
    assert!(events.contains("probe-done"), "the probe did not run:\n{events}");
    assert!(events.contains("ANTHROPIC_API_KEY=agentplane-credential-"), "{events}");
    assert!(!events.contains(&value), "the value reached the sandbox:\n{events}");
    let leaked = files_holding(&up.dir.join(".agentplane"), value.as_bytes());
    assert!(leaked.is_empty(), "the value is in {leaked:?}");
}
