//! The documentation's examples, checked, so that a doc that has drifted from the code
//! fails a test instead of a newcomer: `README.md`, `docs/*.md`, `manifests/README.md`,
//! `sdks/typescript/README.md` and every `*.md` under `examples/`.
//!
//! - Every fenced `yaml` block is read. One whose documents are agentplane resources
//!   (`apiVersion: agentplane.dev/v1alpha1`) goes through the folder store's parser,
//!   `parse_file`, which is what `agentplane up` and `apply` take a file with (types,
//!   unknown fields, the CRDs' schemas, names). A fragment shown alone whose keys are
//!   all fields of one spec (a Session's `mcpServers:`, say) is wrapped in a resource
//!   of that kind, with the spec's other required fields filled in, and checked the
//!   same way. Any other YAML (kustomize, a fragment that is no spec's) is only parsed
//!   as YAML: its meaning belongs to another program.
//! - Every `sh`/`bash`/`shell`/`console` block is searched for `agentplane VERB
//!   [SUBVERB]` commands, and `agentplane VERB [SUBVERB] --help` must exit 0 on the
//!   built binary: a verb the docs name that does not exist fails. The commands
//!   themselves are not run: they install things (`cargo install`, npm), need a
//!   network, a cluster (`kubectl`), a real agent's credentials or a running
//!   `agentplane up` that earlier lines of the same block started; `up`'s own tests
//!   run the README's tour on the examples instead. `kubectl`, `cargo` and other
//!   programs' lines are not checked.
//!
//! A failure names the file, the line in it, the block's opening line and the error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use agentplane_controller::dir::parse::parse_file;
use agentplane_crds::{API_VERSION, Process, Sandbox, Session};
use kube::CustomResourceExt;

use crate::common::BIN;

/// A fenced block of a Markdown file.
struct Block {
    /// The file, relative to the repository.
    file: String,
    /// The word after the opening fence (`yaml`, `sh`), lowercased.
    lang: String,
    /// The line of the opening fence (1-based).
    fence: usize,
    /// The block's lines, without the fence's indentation.
    text: String,
}

impl Block {
    /// The line of the file that line `line` (1-based) of the block is.
    fn file_line(&self, line: usize) -> usize {
        self.fence + line
    }

    fn at(&self, line: Option<usize>) -> String {
        let line = line.map_or(self.fence, |l| self.file_line(l));
        format!("{}:{line} (the ```{} block opened at line {})", self.file, self.lang, self.fence)
    }
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("cli/ lies in the repository").to_path_buf()
}

/// The Markdown files whose examples a reader copies.
fn documents() -> Vec<PathBuf> {
    let root = repository();
    let mut files =
        vec![root.join("README.md"), root.join("manifests/README.md"), root.join("sdks/typescript/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is there")
        .map(|e| e.expect("docs/ lists").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    markdown_under(&root.join("examples"), &mut files);
    files
}

fn markdown_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("examples/ lists").map(|e| e.expect("an entry").path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            markdown_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// Every fenced block of `text` (a ``` fence, at any indentation, as in a list item).
fn blocks(file: &str, text: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<(usize, usize, String, Vec<&str>)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let lang = info.split_whitespace().next().unwrap_or("").to_ascii_lowercase();
                    open = Some((i + 1, indent, lang, Vec::new()));
                }
            }
            Some((fence, fence_indent, lang, lines)) => {
                if trimmed.starts_with("```") && trimmed.trim_start_matches('`').trim().is_empty() {
                    found.push(Block {
                        file: file.to_string(),
                        lang: std::mem::take(lang),
                        fence: *fence,
                        text: lines.join("\n") + "\n",
                    });
                    open = None;
                } else {
                    // The fence's indentation is the block's margin.
                    let margin = line.len() - line.trim_start_matches(' ').len();
                    lines.push(&line[margin.min(*fence_indent)..]);
                }
            }
        }
    }
    assert!(open.is_none(), "{file}: a ``` block is never closed");
    found
}

fn all_blocks() -> Vec<Block> {
    let root = repository();
    let mut all = Vec::new();
    for path in documents() {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let relative = path.strip_prefix(&root).expect("under the repository").display().to_string();
        all.extend(blocks(&relative, &text));
    }
    all
}

// ---------------------------------------------------------------------------------
// YAML

/// How a YAML block was checked.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Checked {
    /// As `agentplane up` takes a file.
    Resources,
    /// Wrapped in a resource of this kind, then as `agentplane up` takes a file.
    Fragment(&'static str),
    /// Only as YAML.
    Parsed,
}

/// A spec a fragment may belong to: its fields, and a filler for each required one (a
/// fragment shows one part; the rest must not make it fail).
struct Spec {
    kind: &'static str,
    fields: Vec<String>,
    fillers: Vec<(String, &'static str)>,
}

fn specs() -> Vec<Spec> {
    let spec_schema =
        |crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition| {
            let schema = crd.spec.versions[0]
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .and_then(|s| s.properties.as_ref())
                .and_then(|p| p.get("spec"))
                .cloned()
                .expect("every CRD has a spec schema");
            let fields = schema.properties.unwrap_or_default().into_keys().collect::<Vec<_>>();
            (fields, schema.required.unwrap_or_default())
        };
    let filler = |field: &str| match field {
        "agent" => "claude",
        "command" => "\"true\"",
        other => panic!("no filler for the required spec field {other}: add one here"),
    };
    [("Session", Session::crd()), ("Process", Process::crd()), ("Sandbox", Sandbox::crd())]
        .into_iter()
        .map(|(kind, crd)| {
            let (fields, required) = spec_schema(crd);
            let fillers = required.into_iter().map(|r| (r.clone(), filler(&r))).collect();
            Spec { kind, fields, fillers }
        })
        .collect()
}

/// Checks one YAML block: how, or what is wrong and where.
fn check_yaml(block: &Block) -> Result<Checked, String> {
    let mut documents = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(&block.text) {
        let value = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(document)
            .map_err(|e| format!("{}: not YAML: {e}", block.at(e.location().map(|l| l.line()))))?;
        documents.push(value);
    }
    let ours = documents.iter().any(|d| d.get("apiVersion").and_then(|v| v.as_str()) == Some(API_VERSION));
    if ours {
        return match parse_file(&block.file, &block.text) {
            Ok(_) => Ok(Checked::Resources),
            Err(e) => Err(format!("{}: {}", block.at(e.line), e.message)),
        };
    }
    // A fragment of one spec, shown alone.
    let [serde_yaml_ng::Value::Mapping(fragment)] = documents.as_slice() else { return Ok(Checked::Parsed) };
    let keys: Vec<&str> = fragment.keys().filter_map(|k| k.as_str()).collect();
    if keys.is_empty() || keys.len() != fragment.len() {
        return Ok(Checked::Parsed);
    }
    let Some(Spec { kind, fillers, .. }) =
        specs().into_iter().find(|spec| keys.iter().all(|k| spec.fields.iter().any(|f| f == k)))
    else {
        return Ok(Checked::Parsed);
    };
    let lines: Vec<&str> = block.text.lines().collect();
    let margin =
        lines.iter().filter(|l| !l.trim().is_empty()).map(|l| l.len() - l.trim_start().len()).min().unwrap_or(0);
    const HEADER: usize = 4;
    let mut wrapped = format!("apiVersion: {API_VERSION}\nkind: {kind}\nmetadata: {{name: fragment}}\nspec:\n");
    for line in &lines {
        wrapped.push_str("  ");
        wrapped.push_str(line.get(margin..).unwrap_or(""));
        wrapped.push('\n');
    }
    for (field, value) in fillers.iter().filter(|(f, _)| !keys.contains(&f.as_str())) {
        wrapped.push_str(&format!("  {field}: {value}\n"));
    }
    match parse_file(&block.file, &wrapped) {
        Ok(_) => Ok(Checked::Fragment(kind)),
        Err(e) => {
            // Back from the wrapped text to the block's own lines.
            let line = e.line.filter(|l| *l > HEADER && *l <= HEADER + lines.len()).map(|l| l - HEADER);
            Err(format!("{}: as part of a {kind}'s spec: {}", block.at(line), e.message))
        }
    }
}

#[test]
fn every_yaml_block_is_taken_as_agentplane_up_takes_a_file() {
    let mut failures = Vec::new();
    let mut checked: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for block in all_blocks().iter().filter(|b| b.lang == "yaml" || b.lang == "yml") {
        match check_yaml(block) {
            Ok(how) => checked.entry(format!("{how:?}")).or_default().push(block.at(None)),
            Err(failure) => failures.push(failure),
        }
    }
    // What was checked how, for whoever wonders why a block passed.
    for (how, blocks) in &checked {
        println!("{how}: {}", blocks.join(", "));
    }
    assert!(failures.is_empty(), "documented YAML that agentplane refuses:\n{}", failures.join("\n"));
    let resources = checked.get("Resources").map_or(0, Vec::len);
    assert!(resources >= 4, "the docs' resource examples were found ({resources}): {checked:?}");
}

#[test]
fn a_wrong_block_is_caught_and_located() {
    let block = |text: &str| Block { file: "docs/x.md".into(), lang: "yaml".into(), fence: 10, text: text.into() };
    let refused = check_yaml(&block(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: a}\nspec: {agent: claude-code}\n",
    ))
    .expect_err("claude-code is no agent");
    assert!(refused.starts_with("docs/x.md:14 (the ```yaml block opened at line 10): "), "{refused}");
    assert!(refused.contains("claude-code"), "{refused}");
    let fragment = check_yaml(&block("  mcpServers:\n    - {name: a, command: x, transport: carrier-pigeon}\n"))
        .expect_err("an unknown field of an MCP server");
    assert!(fragment.contains("as part of a Session's spec"), "{fragment}");
    assert_eq!(check_yaml(&block("  mcpServers:\n    - {name: a, command: x}\n")), Ok(Checked::Fragment("Session")));
    assert_eq!(check_yaml(&block("resources: [crds, controller.yaml]\n")), Ok(Checked::Parsed));
    let broken = check_yaml(&block("a: [b\n")).expect_err("not YAML");
    assert!(broken.contains("not YAML"), "{broken}");
}

// ---------------------------------------------------------------------------------
// Shell

/// The `agentplane` commands of a shell block: (line in the block, verb, the word after
/// it when that is a plain word).
fn agentplane_commands(text: &str) -> Vec<(usize, String, Option<String>)> {
    let plain = |w: &str| {
        w.starts_with(|c: char| c.is_ascii_lowercase())
            && w.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    let mut found = Vec::new();
    let mut continued = String::new();
    let mut start = 0;
    for (i, line) in text.lines().enumerate() {
        if continued.is_empty() {
            start = i + 1;
        }
        let line = line.trim_start();
        let line = line.strip_prefix("$ ").unwrap_or(line);
        // A comment: `#` starting a word.
        let code = match line.find(" #") {
            Some(at) => &line[..at],
            None if line.starts_with('#') => "",
            None => line,
        };
        if let Some(joined) = code.trim_end().strip_suffix('\\') {
            continued.push_str(joined);
            continued.push(' ');
            continue;
        }
        continued.push_str(code);
        let command = std::mem::take(&mut continued);
        for segment in command.split(['&', '|', ';', '(', ')', '`']) {
            let mut words = segment.split_whitespace().skip_while(|w| {
                w.contains('=') && !w.starts_with('-') || matches!(*w, "sudo" | "exec" | "time" | "env")
            });
            let Some(program) = words.next() else { continue };
            if program != "agentplane" && !program.ends_with("/agentplane") {
                continue;
            }
            let Some(verb) = words.next().filter(|w| plain(w)) else { continue };
            let next = words.next().filter(|w| plain(w)).map(str::to_string);
            found.push((start, verb.to_string(), next));
        }
    }
    found
}

/// `agentplane WORDS --help`: its output, or why it failed.
fn help(words: &[&str]) -> Result<String, String> {
    let out = Command::new(BIN).args(words).arg("--help").output().expect("the agentplane binary runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`agentplane {} --help` exits {}: {}",
            words.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or("")
        ))
    }
}

#[test]
fn every_verb_the_shell_blocks_name_exists() {
    let mut helps: BTreeMap<Vec<String>, Result<String, String>> = BTreeMap::new();
    let mut help_of = |words: Vec<String>| {
        helps
            .entry(words.clone())
            .or_insert_with(|| help(&words.iter().map(String::as_str).collect::<Vec<_>>()))
            .clone()
    };
    let mut failures = Vec::new();
    let mut checked = 0;
    for block in all_blocks().iter().filter(|b| matches!(b.lang.as_str(), "sh" | "bash" | "shell" | "console")) {
        for (line, verb, next) in agentplane_commands(&block.text) {
            checked += 1;
            let text = match help_of(vec![verb.clone()]) {
                Ok(text) => text,
                Err(e) => {
                    failures.push(format!("{}: {e}", block.at(Some(line))));
                    continue;
                }
            };
            // A verb with subverbs and no arguments of its own: the next word is one.
            let subverbs = text.lines().any(|l| l == "Commands:") && !text.lines().any(|l| l == "Arguments:");
            if let Some(sub) = next.filter(|_| subverbs)
                && let Err(e) = help_of(vec![verb.clone(), sub])
            {
                failures.push(format!("{}: {e}", block.at(Some(line))));
            }
        }
    }
    assert!(failures.is_empty(), "documented commands that do not exist:\n{}", failures.join("\n"));
    assert!(checked >= 30, "the docs' agentplane commands were found ({checked})");
}

#[test]
fn commands_are_found_where_a_shell_would_run_them() {
    let found = agentplane_commands(
        "cargo install --path cli && agentplane up --dir demo\n\
         # agentplane commented out\n\
         agentplane node-agent --token \"$(kubectl get secret x | base64 -d)\" \\\n  --listen 0:1 &\n\
         X=1 ./target/release/agentplane session ls; agentplane fs rm -r a   # agentplane not this\n\
         kubectl create namespace agentplane\n\
         agentplane <verb> x\n",
    );
    let found: Vec<(usize, &str, Option<&str>)> =
        found.iter().map(|(l, v, n)| (*l, v.as_str(), n.as_deref())).collect();
    assert_eq!(
        found,
        vec![(1, "up", None), (3, "node-agent", None), (5, "session", Some("ls")), (5, "fs", Some("rm"))]
    );
    assert!(help(&["no-such-verb"]).is_err());
    assert!(help(&["session", "no-such-subverb"]).is_err());
}

// ---------------------------------------------------------------------------------
// What the binary itself tells a newcomer

#[test]
fn get_help_names_every_kind_with_its_short_name() {
    let text = help(&["get"]).unwrap();
    for name in [
        "processes (proc)",
        "sessions (sess)",
        "sandboxes (sbx)",
        "sandboxtemplates (sbxt)",
        "sandboxwarmpools (sbxpool)",
    ] {
        assert!(text.contains(name), "`agentplane get --help` names {name}:\n{text}");
    }
}

#[test]
fn logs_of_another_kind_says_what_logs_acts_on() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN).args(["logs", "sandbox/x", "--dir"]).arg(dir.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("a process") && stderr.contains("a session") && stderr.contains("not a sandbox"),
        "{stderr}"
    );
}
