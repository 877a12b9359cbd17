//! Property tests of what the directory store parses from outside input: resource YAML
//! (random, generated and mutated documents never panic, and every error says where)
//! and env files (random bytes never panic; a set of variables written out reads back).

use std::collections::BTreeMap;

use agentplane_controller::dir::env::parse_env;
use agentplane_controller::dir::parse::parse_file;
use proptest::prelude::*;

/// Files as people write them, to mutate.
const SEEDS: &[&str] = &[
    "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata:\n  name: web\n  labels: {app: web}\nspec:\n  command: sleep\n  args: ['1000']\n  env:\n    - name: A\n      value: '1'\n    - name: B\n      valueFrom: {fileKeyRef: {path: app.env, key: B}}\n  envFrom: [{file: app.env}]\n  tty: {rows: 30, cols: 100}\n  restartPolicy: OnFailure\n",
    "# two documents\n---\napiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: demo, namespace: team-a}\nspec:\n  agent: mock\n  messages:\n    - text: hello\n---\napiVersion: agentplane.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: remote}\nspec: {endpoint: 'http://127.0.0.1:1'}\n",
    "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec: {command: x, sessionRef: demo, stdin: true}\n...\n",
];

/// Bytes YAML gives meaning to, so mutations reach the parser's corners.
const YAML_BYTES: &[u8] = b":-[]{}#&*!|>'\"\n ,?%@`\t\\0a.~=";

#[derive(Debug, Clone)]
enum Mutation {
    Delete { at: usize, len: usize },
    Insert { at: usize, bytes: Vec<u8> },
    DuplicateLine { line: usize },
    Truncate { at: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1..20usize).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (any::<usize>(), prop::collection::vec(prop::sample::select(YAML_BYTES), 1..8))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        any::<usize>().prop_map(|line| Mutation::DuplicateLine { line }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
    ]
}

fn apply(seed: &str, mutations: &[Mutation]) -> String {
    let mut bytes = seed.as_bytes().to_vec();
    for m in mutations {
        let len = bytes.len().max(1);
        match m {
            Mutation::Delete { at, len: n } => {
                let at = at % len;
                let end = (at + n).min(bytes.len());
                if at < end {
                    bytes.drain(at..end);
                }
            }
            Mutation::Insert { at, bytes: new } => {
                let at = at % (bytes.len() + 1);
                bytes.splice(at..at, new.iter().copied());
            }
            Mutation::DuplicateLine { line } => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let mut lines: Vec<&str> = text.split('\n').collect();
                let i = line % lines.len();
                lines.insert(i, lines[i]);
                bytes = lines.join("\n").into_bytes();
            }
            Mutation::Truncate { at } => bytes.truncate(at % len),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Documents shaped like resources, with fields and values picked at random.
fn generated_document() -> impl Strategy<Value = String> {
    let keys = prop::sample::select(vec![
        "name",
        "command",
        "args",
        "env",
        "envFrom",
        "file",
        "value",
        "valueFrom",
        "fileKeyRef",
        "path",
        "key",
        "tty",
        "rows",
        "cols",
        "stdin",
        "agent",
        "messages",
        "text",
        "endpoint",
        "restartPolicy",
        "sandbox",
        "sessionRef",
        "cwd",
        "bogus",
    ]);
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        "[a-zA-Z0-9 ._/-]{0,12}".prop_map(serde_json::Value::from),
        prop::sample::select(vec!["mock", "claude", "Always", "OnFailure", "Never", "sleep", "app.env"])
            .prop_map(serde_json::Value::from),
    ];
    let value = leaf.prop_recursive(4, 32, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(keys.clone(), inner, 0..5)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    });
    let kind = prop_oneof![
        prop::sample::select(vec!["Process", "Session", "Sandbox"]).prop_map(str::to_string),
        "[A-Za-z]{0,9}",
    ];
    let name = prop_oneof![Just("a".to_string()), "[a-z0-9.-]{0,20}", "[ -~]{0,8}"];
    (kind, name, value.clone(), value).prop_map(|(kind, name, spec, metadata_extra)| {
        let mut metadata = serde_json::json!({ "name": name });
        if let serde_json::Value::Object(extra) = metadata_extra {
            metadata.as_object_mut().unwrap().extend(extra);
        }
        let doc = serde_json::json!({
            "apiVersion": "agentplane.dev/v1alpha1",
            "kind": kind,
            "metadata": metadata,
            "spec": spec,
        });
        serde_yaml_ng::to_string(&doc).unwrap()
    })
}

/// Parses `text` as a resource file: it must not panic, and an error must say where,
/// at a line the file has.
fn parses_or_says_where(text: &str) -> Result<(), TestCaseError> {
    if let Err(e) = parse_file("f.yaml", text) {
        let lines = text.lines().count().max(1);
        let line = e.line.ok_or_else(|| TestCaseError::fail(format!("no line in {e:?} for {text:?}")))?;
        prop_assert!(line >= 1 && line <= lines + 1, "line {line} of {lines}: {e} for {text:?}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn mutated_resource_files_never_panic_and_errors_say_where(
        seed in prop::sample::select(SEEDS),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        parses_or_says_where(&apply(seed, &mutations))?;
    }

    #[test]
    fn generated_resource_documents_never_panic_and_errors_say_where(
        docs in prop::collection::vec(generated_document(), 1..4),
    ) {
        parses_or_says_where(&docs.join("---\n"))?;
    }

    #[test]
    fn random_text_never_panics(text in "[ -~\n\t]{0,300}") {
        parses_or_says_where(&text)?;
    }
}

/// A variable's value, written in one of the ways the parser reads back exactly.
fn env_line(key: &str, value: &str, quote: u8, export: bool, spaced: bool) -> String {
    let bare = value.trim() == value
        && !['"', '\''].iter().any(|q| value.len() >= 2 && value.starts_with(*q) && value.ends_with(*q));
    let written = match quote {
        0 if bare => value.to_string(),
        1 => format!("'{value}'"),
        _ => format!("\"{value}\""),
    };
    let eq = if spaced { " = " } else { "=" };
    format!("{}{key}{eq}{written}", if export { "export " } else { "" })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    #[test]
    fn random_env_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        if let Err((line, _)) = parse_env(&text) {
            prop_assert!(line >= 1 && line <= text.lines().count(), "line {line}");
        }
    }

    #[test]
    fn env_files_round_trip(
        vars in prop::collection::btree_map("[A-Za-z_][A-Za-z0-9_]{0,15}", "[^\n\r]{0,40}", 0..12),
        styles in prop::collection::vec((0u8..3, any::<bool>(), any::<bool>(), any::<bool>()), 12),
    ) {
        let mut text = String::new();
        for ((key, value), (quote, export, spaced, comment)) in vars.iter().zip(&styles) {
            if *comment {
                text.push_str("# a comment\n\n");
            }
            text.push_str(&env_line(key, value, *quote, *export, *spaced));
            text.push('\n');
        }
        let read: BTreeMap<String, String> = parse_env(&text).map_err(|e| TestCaseError::fail(format!("{e:?}: {text:?}")))?;
        prop_assert_eq!(read, vars, "{}", text);
    }
}
