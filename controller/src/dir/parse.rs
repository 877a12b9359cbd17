//! Reading resources from YAML files: several documents per file, each checked the way
//! the API server would check it (types, unknown fields, the CRD's OpenAPI schema) and
//! every failure located by file, line and column.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::OnceLock;

use agentplane_crds::{
    API_VERSION, Kind, Object, Process, ProcessSpec, Sandbox, SandboxSpec, SandboxTemplate, SandboxTemplateSpec,
    SandboxWarmPool, SandboxWarmPoolSpec, Session, SessionSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResourceExt;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};

/// A resource declared in a file.
#[derive(Debug, Clone)]
pub struct Declared {
    pub object: Object,
    /// 1-based index of the document within its file.
    pub document: usize,
    /// The line the document starts on.
    pub line: usize,
}

/// Why a file was not taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileError {
    pub file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    pub message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        write!(f, ": {}", self.message)
    }
}

/// A document as the API server takes it: metadata fields the server fills in are
/// accepted and ignored (so `kubectl get -o yaml` output can be saved as it is), and
/// `status` is ignored; anything else unknown is an error, typos included.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Document<S> {
    #[allow(dead_code)]
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    metadata: Metadata,
    spec: S,
    #[serde(default)]
    #[allow(dead_code)]
    status: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Metadata {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    // Filled in by a server: ignored here.
    #[serde(default)]
    uid: Option<IgnoredAny>,
    #[serde(default)]
    resource_version: Option<IgnoredAny>,
    #[serde(default)]
    generation: Option<IgnoredAny>,
    #[serde(default)]
    creation_timestamp: Option<IgnoredAny>,
    #[serde(default)]
    managed_fields: Option<IgnoredAny>,
    #[serde(default)]
    self_link: Option<IgnoredAny>,
}

impl Metadata {
    fn into_meta(self) -> ObjectMeta {
        let _ = (
            self.uid,
            self.resource_version,
            self.generation,
            self.creation_timestamp,
            self.managed_fields,
            self.self_link,
        );
        ObjectMeta {
            name: Some(self.name),
            namespace: Some(self.namespace.unwrap_or_else(|| "default".to_string())),
            labels: (!self.labels.is_empty()).then_some(self.labels),
            annotations: (!self.annotations.is_empty()).then_some(self.annotations),
            ..ObjectMeta::default()
        }
    }
}

/// The lines each document of `text` starts on (1-based), in order.
fn document_lines(text: &str) -> Vec<usize> {
    let mut starts = vec![1];
    // Comments and blank lines before the first `---` belong to the first document.
    let mut content_before = false;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("---") && (line.len() == 3 || line[3..].starts_with([' ', '\t'])) {
            if starts.len() == 1 && !content_before {
                starts[0] = i + 2;
                content_before = true;
            } else {
                starts.push(i + 2);
            }
        } else if !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            content_before = true;
        }
    }
    starts
}

pub fn parse_file(file: &str, text: &str) -> Result<Vec<Declared>, FileError> {
    let error = |line: Option<usize>, column: Option<usize>, message: String| FileError {
        file: file.to_string(),
        line,
        column,
        message: with_field_hint(message),
    };
    let located = |e: &serde_yaml_ng::Error| {
        let location = e.location();
        let message = strip_location(&e.to_string());
        error(location.as_ref().map(|l| l.line()), location.as_ref().map(|l| l.column()), message)
    };
    let starts = document_lines(text);
    let mut declared = Vec::new();
    let mut seen = HashSet::new();
    let typed_docs = serde_yaml_ng::Deserializer::from_str(text);
    // Read again only to locate a wrong kind: the parser knows where each value is.
    let kind_docs = serde_yaml_ng::Deserializer::from_str(text);
    for (index, ((doc, typed), kind_doc)) in
        serde_yaml_ng::Deserializer::from_str(text).zip(typed_docs).zip(kind_docs).enumerate()
    {
        let number = index + 1;
        let line = starts.get(index).copied().unwrap_or(1);
        let value = serde_yaml_ng::Value::deserialize(doc).map_err(|e| located(&e))?;
        if value.is_null() {
            continue; // an empty document, or only comments
        }
        let Some(map) = value.as_mapping() else {
            return Err(error(Some(line), None, format!("document {number} is not a mapping of fields")));
        };
        let field = |name: &str| map.get(name).and_then(|v| v.as_str()).map(str::to_string);
        let api_version = field("apiVersion")
            .ok_or_else(|| error(Some(line), None, format!("document {number} has no apiVersion")))?;
        if api_version != API_VERSION {
            return Err(error(
                Some(line),
                None,
                format!("apiVersion {api_version:?} is not served here: use {API_VERSION:?}"),
            ));
        }
        let kind = field("kind").ok_or_else(|| error(Some(line), None, format!("document {number} has no kind")))?;
        let object = match kind.as_str() {
            "Process" => typed_object::<ProcessSpec>(typed)
                .map(|(m, s)| Object::Process(Process { metadata: m, spec: s, status: None })),
            "Session" => typed_object::<SessionSpec>(typed)
                .map(|(m, s)| Object::Session(Session { metadata: m, spec: s, status: None })),
            "Sandbox" => typed_object::<SandboxSpec>(typed)
                .map(|(m, s)| Object::Sandbox(Sandbox { metadata: m, spec: s, status: None })),
            "SandboxTemplate" => typed_object::<SandboxTemplateSpec>(typed)
                .map(|(m, s)| Object::SandboxTemplate(SandboxTemplate { metadata: m, spec: s })),
            "SandboxWarmPool" => typed_object::<SandboxWarmPoolSpec>(typed)
                .map(|(m, s)| Object::SandboxWarmPool(SandboxWarmPool { metadata: m, spec: s, status: None })),
            other => {
                let location = KindOf::deserialize(kind_doc).err().and_then(|e| e.location());
                let (at_line, column) = location.map_or((line, None), |l| (l.line(), Some(l.column())));
                let hint = suggest_kind(other).map(|k| format!(" (did you mean {k}?)")).unwrap_or_default();
                return Err(error(
                    Some(at_line),
                    column,
                    format!("kind {other:?} is not one of {}{hint}", KINDS_IN_WORDS),
                ));
            }
        }
        .map_err(|e| located(&e))?;
        let key = object.key();
        check_name("metadata.name", &key.name, 253, true).map_err(|m| error(Some(line), None, m))?;
        check_name("metadata.namespace", &key.namespace, 63, false).map_err(|m| error(Some(line), None, m))?;
        if let Some(spec) = map.get("spec") {
            if let Err((path, message)) = check_schema(object.kind(), spec) {
                let (at_line, column) = locate(text, line, &path);
                return Err(error(Some(at_line), column, format!("spec{}: {message}", path_suffix(&path))));
            }
        }
        // What the schema cannot say (one transport each, unique names): a file error
        // too, so that the last good spec stays in force.
        if let Object::Session(session) = &object
            && let Err(message) = crate::mcp::check(&session.spec.mcp_servers)
        {
            let (at_line, column) = locate(text, line, "/mcpServers");
            return Err(error(Some(at_line), column, format!("spec.{message}")));
        }
        if !seen.insert(key.clone()) {
            return Err(error(Some(line), None, format!("{key} is declared twice in this file")));
        }
        declared.push(Declared { object, document: number, line });
    }
    Ok(declared)
}

/// The kinds a folder may hold, as errors list them.
const KINDS_IN_WORDS: &str = "Session, Process, Sandbox, SandboxTemplate, SandboxWarmPool";

/// Only a document's `kind`, to have the parser say where a wrong one is written.
#[derive(Deserialize)]
struct KindOf {
    #[allow(dead_code)]
    kind: KnownKind,
}

#[derive(Deserialize)]
enum KnownKind {
    Session,
    Process,
    Sandbox,
    SandboxTemplate,
    SandboxWarmPool,
}

/// A message about an unknown field (serde's "unknown field `comand`, expected one of
/// `command`, `args`, ..."), with the field it most likely meant, as a mistyped kind
/// gets: the same but for case, or within two letters' edit. Any other message as it is.
fn with_field_hint(message: String) -> String {
    let Some((_, rest)) = message.split_once("unknown field `") else { return message };
    let Some((written, expected)) = rest.split_once('`') else { return message };
    if written.chars().count() > 40 {
        return message;
    }
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let best = known
        .iter()
        .map(|k| {
            let d = if k.eq_ignore_ascii_case(written) { 0 } else { edit_distance(written, k) };
            (d, *k)
        })
        .filter(|(d, _)| *d <= 2)
        .min();
    match best {
        Some((_, field)) => format!("{message} (did you mean `{field}`?)"),
        None => message,
    }
}

/// The kind a misspelt one most likely meant: the same but for case, or within two
/// letters' edit.
fn suggest_kind(written: &str) -> Option<&'static str> {
    let kinds = Kind::ALL.map(Kind::as_str);
    if let Some(kind) = kinds.iter().find(|k| k.eq_ignore_ascii_case(written)) {
        return Some(kind);
    }
    // Longer than any kind by more than two letters: not a typo of one (and not worth
    // comparing letter by letter).
    if written.chars().count() > 17 {
        return None;
    }
    kinds
        .into_iter()
        .map(|k| (edit_distance(&written.to_ascii_lowercase(), &k.to_ascii_lowercase()), k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k)
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

fn typed_object<S: DeserializeOwned>(
    doc: serde_yaml_ng::Deserializer<'_>,
) -> Result<(ObjectMeta, S), serde_yaml_ng::Error> {
    let document = Document::<S>::deserialize(doc)?;
    Ok((document.metadata.into_meta(), document.spec))
}

/// serde_yaml appends " at line L column C"; the location is reported on its own.
fn strip_location(message: &str) -> String {
    let Some(start) = message.find(" at line ") else { return message.to_string() };
    let rest = &message[start + " at line ".len()..];
    let mut words = rest.splitn(4, ' ');
    let located = words.next().is_some_and(|w| w.bytes().all(|b| b.is_ascii_digit()))
        && words.next() == Some("column")
        && words.next().is_some_and(|w| w.trim_end_matches(',').bytes().all(|b| b.is_ascii_digit()));
    if !located {
        return message.to_string();
    }
    let end = rest.find(',').map_or(message.len(), |i| start + " at line ".len() + i);
    format!("{}{}", &message[..start], &message[end..])
}

/// A DNS-1123 name, as Kubernetes requires of names (subdomain) and namespaces (label).
fn check_name(what: &str, name: &str, max: usize, dots: bool) -> Result<(), String> {
    let part_ok = |part: &str| {
        !part.is_empty()
            && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !part.starts_with('-')
            && !part.ends_with('-')
    };
    let ok = !name.is_empty() && name.len() <= max && if dots { name.split('.').all(part_ok) } else { part_ok(name) };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} {name:?} is invalid: use at most {max} lowercase letters, digits and '-'{}, starting and ending with a letter or digit",
            if dots { " (and '.')" } else { "" }
        ))
    }
}

/// Compiles the CRDs' schemas that every file is checked against, if not done yet: a
/// store calls it as it starts, off the runtime, so that the first file saved after
/// `up` starts does not wait on it (some 15 ms).
pub fn compile_schemas() {
    validators();
}

fn validators() -> &'static BTreeMap<Kind, jsonschema::Validator> {
    static VALIDATORS: OnceLock<BTreeMap<Kind, jsonschema::Validator>> = OnceLock::new();
    VALIDATORS.get_or_init(|| {
        let crds = [
            (Kind::Process, Process::crd()),
            (Kind::Session, Session::crd()),
            (Kind::Sandbox, Sandbox::crd()),
            (Kind::SandboxTemplate, SandboxTemplate::crd()),
            (Kind::SandboxWarmPool, SandboxWarmPool::crd()),
        ];
        crds.into_iter()
            .map(|(kind, crd)| {
                let schema = crd.spec.versions[0]
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                    .and_then(|s| s.properties.as_ref())
                    .and_then(|p| p.get("spec"))
                    .expect("every CRD has a spec schema");
                let schema = serde_json::to_value(schema).expect("a schema serializes");
                let validator = jsonschema::options()
                    .should_validate_formats(false)
                    .build(&schema)
                    .expect("the CRD's spec schema is a valid JSON schema");
                (kind, validator)
            })
            .collect()
    })
}

/// Checks a spec against its CRD's schema: `(JSON pointer, what is wrong)` on failure.
fn check_schema(kind: Kind, spec: &serde_yaml_ng::Value) -> Result<(), (String, String)> {
    let mut json = serde_json::to_value(spec).map_err(|e| (String::new(), e.to_string()))?;
    drop_nulls(&mut json);
    let validator = &validators()[&kind];
    match validator.iter_errors(&json).next() {
        None => Ok(()),
        Some(e) => Err((e.instance_path().to_string(), e.to_string())),
    }
}

/// The API server treats a `null` field as absent; so does this check.
fn drop_nulls(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

fn path_suffix(pointer: &str) -> String {
    pointer
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| if s.bytes().all(|b| b.is_ascii_digit()) { format!("[{s}]") } else { format!(".{s}") })
        .collect()
}

/// Where a field of a document's spec is written: best effort, following the keys of
/// the pointer down from the document's start; the document's line if not found.
fn locate(text: &str, document_line: usize, pointer: &str) -> (usize, Option<usize>) {
    let lines: Vec<&str> = text.lines().collect();
    let mut at = document_line.saturating_sub(1);
    let mut found = None;
    for key in std::iter::once("spec").chain(pointer.split('/').filter(|s| !s.is_empty())) {
        if key.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let pattern = format!("{key}:");
        let hit = lines.iter().enumerate().skip(at).take_while(|(i, l)| *i == at || !l.starts_with("---")).find_map(
            |(i, l)| {
                let trimmed = l.trim_start().trim_start_matches("- ");
                trimmed.starts_with(&pattern).then(|| (i, l.len() - trimmed.len() + 1))
            },
        );
        match hit {
            Some((i, column)) => {
                at = i;
                found = Some((i + 1, Some(column)));
            }
            None => break,
        }
    }
    found.unwrap_or((document_line, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> FileError {
        parse_file("f.yaml", text).expect_err("should not parse")
    }

    #[test]
    fn several_documents_with_defaults() {
        let text = "# a comment\n---\napiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec: {command: sleep}\n---\n---\napiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: b, namespace: team}\nspec:\n  command: bash\n  tty: {}\n";
        let declared = parse_file("f.yaml", text).unwrap();
        assert_eq!(declared.len(), 2);
        assert_eq!(declared[0].object.key().to_string(), "Process/default/a");
        assert_eq!(declared[1].object.key().to_string(), "Process/team/b");
        assert_eq!(declared[1].document, 3);
        assert_eq!(declared[1].line, 9);
        let Object::Process(b) = &declared[1].object else { panic!() };
        assert_eq!(b.spec.tty.map(|t| (t.rows, t.cols)), Some((24, 80)));
    }

    #[test]
    fn errors_say_where_and_what() {
        let syntax = err("apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a\nspec: {}\n");
        assert_eq!(syntax.line, Some(4), "{syntax}");
        // Where it was noticed is the location; where the unclosed mapping began stays in the message.
        assert_eq!(
            syntax.message, "did not find expected ',' or '}', while parsing a flow mapping at line 3 column 11",
            "{syntax}"
        );
        let typo = err(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec:\n  command: sleep\n  comand: x\n",
        );
        assert_eq!((typo.line, typo.column), (Some(6), Some(3)), "{typo}");
        assert!(typo.message.contains("unknown field `comand`"), "{typo}");
        assert!(typo.message.ends_with("(did you mean `command`?)"), "{typo}");
        let far = err(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec:\n  command: sleep\n  xyzzy: x\n",
        );
        assert!(!far.message.contains("did you mean"), "nothing close: {far}");
        let missing =
            err("apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec:\n  args: [x]\n");
        assert!(missing.message.contains("missing field `command`"), "{missing}");
        let range = err(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec:\n  command: bash\n  tty:\n    rows: 0\n",
        );
        assert_eq!((range.line, range.column), (Some(7), Some(5)), "{range}");
        assert!(range.message.starts_with("spec.tty.rows: "), "{range}");
        let enum_value = err(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec: {command: x, restartPolicy: Sometimes}\n",
        );
        assert!(enum_value.message.contains("Sometimes"), "{enum_value}");
        let name =
            err("apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: Web_1}\nspec: {command: x}\n");
        assert!(name.message.contains("metadata.name"), "{name}");
        let version = err("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n");
        assert!(version.message.contains("not served"), "{version}");
        let twice = err(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec: {command: x}\n---\napiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec: {command: y}\n",
        );
        assert_eq!(twice.line, Some(6), "{twice}");
    }

    #[test]
    fn a_wrong_kind_is_located_at_its_value() {
        let text = "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec: {command: x}\n---\n# the second\napiVersion: agentplane.dev/v1alpha1\nmetadata: {name: b}\nkind:   Proces\nspec: {command: x}\n";
        let typo = err(text);
        assert_eq!((typo.line, typo.column), (Some(9), Some(9)), "{typo}");
        assert_eq!(
            typo.message,
            "kind \"Proces\" is not one of Session, Process, Sandbox, SandboxTemplate, SandboxWarmPool (did you mean Process?)"
        );
        assert_eq!(typo.to_string(), format!("f.yaml:9:9: {}", typo.message));
        let flow = err("{apiVersion: agentplane.dev/v1alpha1, kind: session, metadata: {name: a}}");
        assert_eq!((flow.line, flow.column), (Some(1), Some(45)), "{flow}");
        assert!(flow.message.ends_with("(did you mean Session?)"), "{flow}");
        let far = err("apiVersion: agentplane.dev/v1alpha1\nkind: Deployment\n");
        assert_eq!((far.line, far.column), (Some(2), Some(7)), "{far}");
        assert_eq!(
            far.message,
            "kind \"Deployment\" is not one of Session, Process, Sandbox, SandboxTemplate, SandboxWarmPool"
        );
    }

    #[test]
    fn no_input_makes_it_panic() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let laughs = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n";
        let inputs = [
            "",
            "---",
            "---\n---\n",
            "...",
            "- a\n- b",
            ":",
            "[",
            "{a: *x}",
            "\u{0}\u{1}\u{2}",
            "apiVersion: 7",
            "kind: [Process]",
            "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: []\nspec: {}",
            "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec: {command: x, tty: {rows: -1}}",
            "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec: {command: x, env: [{name: ''}]}",
            "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: a}\nspec: {agent: nobody}",
            "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec: {command: x, stopTimeoutSeconds: 99999999999999999999}",
            "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: a}\nspec: {command: x, args: [1, 2.5, true, null]}",
            deep.as_str(),
            laughs,
        ];
        for input in inputs {
            if let Ok(declared) = parse_file("f.yaml", input) {
                assert!(declared.is_empty(), "{input:?} declared something");
            }
        }
    }

    #[test]
    fn server_filled_metadata_and_status_are_ignored() {
        let text = "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata:\n  name: a\n  uid: 123\n  resourceVersion: \"9\"\n  generation: 3\nspec: {command: x, cwd: null}\nstatus: {phase: Running}\n";
        let declared = parse_file("f.yaml", text).unwrap();
        assert_eq!(declared[0].object.meta().uid, None);
    }
}
