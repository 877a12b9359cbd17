//! The committed CRD YAML matches the types, and the same YAML reads the same way in
//! both stores.

use agentplane_crds::*;
use kube::CustomResourceExt;

#[test]
fn committed_crd_yaml_matches_the_types() {
    for dir in crd_dirs() {
        for crd in crds() {
            let path = dir.join(crd_file_name(&crd));
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                committed == crd_yaml(&crd),
                "{} differs from the Rust types: run `cargo run -p agentplane-crds --bin crdgen` and commit the result",
                path.display()
            );
        }
    }
}

#[test]
fn names_columns_and_subresources() {
    let all = crds();
    let names: Vec<(String, Vec<String>)> =
        all.iter().map(|c| (c.spec.names.kind.clone(), c.spec.names.short_names.clone().unwrap_or_default())).collect();
    assert_eq!(
        names,
        vec![
            ("Session".into(), vec!["sess".into()]),
            ("Process".into(), vec!["proc".into()]),
            ("Sandbox".into(), vec!["sbx".into()]),
            ("SandboxTemplate".into(), vec!["sbxt".into()]),
            ("SandboxWarmPool".into(), vec!["sbxpool".into()])
        ]
    );
    for crd in &all {
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.scope, "Namespaced");
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, VERSION);
        // A template is only a spec: nothing to report on it.
        assert_eq!(
            version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some(),
            crd.spec.names.kind != "SandboxTemplate",
            "{} has a status subresource",
            crd.spec.names.kind
        );
        let columns: Vec<&str> = version.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
        assert!(columns.contains(&"Age"), "{columns:?}");
        // Every field of a spec explains itself (`kubectl explain`).
        let schema = version.schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap();
        let spec = &schema.properties.as_ref().unwrap()["spec"];
        for (field, property) in spec.properties.as_ref().unwrap() {
            assert!(property.description.is_some(), "{}.spec.{field} has no description", crd.spec.names.kind);
        }
    }
    let process = Process::crd();
    let columns: Vec<&str> =
        process.spec.versions[0].additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
    assert_eq!(&columns[..5], ["Phase", "Command", "Restarts", "Exit", "Age"]);
}

#[test]
fn a_process_reads_with_its_defaults() {
    let process: Process = serde_yaml_ng::from_str(
        r#"
apiVersion: agentplane.dev/v1alpha1
kind: Process
metadata:
  name: shell
spec:
  command: bash
  tty: {}
"#,
    )
    .unwrap();
    assert_eq!(process.metadata.name.as_deref(), Some("shell"));
    let spec = &process.spec;
    assert_eq!(spec.sandbox, LOCAL_SANDBOX);
    assert_eq!(spec.tty, Some(TtySize { rows: 24, cols: 80 }));
    assert_eq!((spec.desired_state, spec.restart_policy), (DesiredState::Running, RestartPolicy::Never));
    assert!(process.status.is_none());
}

#[test]
fn a_session_reads_messages_replies_and_env() {
    let session: Session = serde_yaml_ng::from_str(
        r#"
apiVersion: agentplane.dev/v1alpha1
kind: Session
metadata: {name: fix-bug, namespace: team-a}
spec:
  agent: claude
  agentVersion: 2.1.330
  permissionMode: plan
  model: claude-sonnet
  env:
    - name: ANTHROPIC_API_KEY
      valueFrom: {fileKeyRef: {path: claude.env, key: ANTHROPIC_API_KEY}}
  envFrom:
    - secretRef: {name: claude-credentials}
  messages:
    - Find the failing test.
    - Now fix it.
  replies:
    - {id: perm-1, decision: once}
    - {id: q-1, answers: [[yes]]}
"#,
    )
    .unwrap();
    let spec = &session.spec;
    assert_eq!((spec.agent, spec.permission_mode), (AgentKind::Claude, PermissionMode::Plan));
    assert_eq!(spec.messages.len(), 2);
    assert_eq!(spec.replies[0].decision, Some(PermissionDecision::Once));
    assert_eq!(spec.replies[1].answers, vec![vec!["yes".to_string()]]);
    assert_eq!(spec.env[0].value_from.as_ref().unwrap().file_key_ref.as_ref().unwrap().path, "claude.env");
    assert_eq!(spec.env_from[0].secret_ref.as_ref().unwrap().name, "claude-credentials");
    // What it writes back reads the same.
    let again: Session = serde_yaml_ng::from_str(&serde_yaml_ng::to_string(&session).unwrap()).unwrap();
    assert_eq!(again, session);
}

#[test]
fn typos_and_unknown_values_are_errors_not_silence() {
    let typo = serde_yaml_ng::from_str::<Process>(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: p}\nspec: {comand: bash}\n",
    )
    .unwrap_err();
    assert!(typo.to_string().contains("comand"), "{typo}");
    let agent = serde_yaml_ng::from_str::<Session>(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: s}\nspec: {agent: clippy}\n",
    )
    .unwrap_err();
    assert!(agent.to_string().contains("clippy"), "{agent}");
    let policy = serde_yaml_ng::from_str::<Process>(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: p}\nspec: {command: x, restartPolicy: Sometimes}\n",
    )
    .unwrap_err();
    assert!(policy.to_string().contains("Sometimes"), "{policy}");
}
