//! Small textual edits of the user's YAML files: removing one document, appending an
//! item to a list under `spec:`. The file is a person's: everything the edit does not
//! have to touch (comments, quoting, key order, blank lines) stays byte for byte, which
//! a parse-and-reserialize would lose. Only shapes read with certainty are edited;
//! anything else is refused with a reason, and the callers re-parse the result before
//! writing it, so a misread edit is caught rather than saved.

use std::fmt;

use serde::Serialize;

/// Why a file was left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported(pub String);

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unsupported {}

fn unsupported<T>(message: impl Into<String>) -> Result<T, Unsupported> {
    Err(Unsupported(message.into()))
}

/// One YAML document of a file, by line index (0-based, end exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Document {
    /// The `---` line that opens it, if one does.
    pub separator: Option<usize>,
    /// Its first line after the separator.
    pub start: usize,
    pub end: usize,
}

impl Document {
    /// The 1-based line a parser reports the document at (`Declared::line`).
    pub fn line(&self) -> usize {
        self.start + 1
    }
}

/// The lines of `text`, each with its line ending.
fn lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

fn content(line: &str) -> &str {
    line.trim_end_matches(['\n', '\r'])
}

fn is_separator(line: &str) -> bool {
    let line = content(line);
    line.starts_with("---") && (line.len() == 3 || line[3..].starts_with([' ', '\t']))
}

/// Neither blank nor only a comment.
fn is_content(line: &str) -> bool {
    let trimmed = content(line).trim();
    !trimmed.is_empty() && !trimmed.starts_with('#')
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn eol(text: &str) -> &'static str {
    if text.contains("\r\n") { "\r\n" } else { "\n" }
}

/// The documents of `text` as a YAML parser counts them: what precedes the first `---`
/// is a document only if it has content (comments before a leading `---` are not one).
pub fn documents(text: &str) -> Result<Vec<Document>, Unsupported> {
    let lines = lines(text);
    let mut separators = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let line = content(line);
        if line.starts_with('%') {
            return unsupported(format!("line {}: YAML directives are not edited by this tool", i + 1));
        }
        if line == "..." || line.starts_with("... ") {
            return unsupported(format!("line {}: document end markers (`...`) are not edited by this tool", i + 1));
        }
        if is_separator(line) {
            separators.push(i);
        }
    }
    let mut documents = Vec::new();
    let first_end = separators.first().copied().unwrap_or(lines.len());
    if separators.is_empty() || lines[..first_end].iter().any(|l| is_content(l)) {
        documents.push(Document { separator: None, start: 0, end: first_end });
    }
    for (n, &separator) in separators.iter().enumerate() {
        let end = separators.get(n + 1).copied().unwrap_or(lines.len());
        documents.push(Document { separator: Some(separator), start: separator + 1, end });
    }
    Ok(documents)
}

/// `text` without `document`: its lines and the `---` that opens it (or, for a first
/// document without one, the `---` that ends it) are removed; the rest is kept as is.
pub fn remove_document(text: &str, document: &Document) -> Result<String, Unsupported> {
    let lines = lines(text);
    let (from, to) = match document.separator {
        Some(separator) => (separator, document.end),
        None if document.end < lines.len() => {
            if content(lines[document.end]).trim_end() != "---" && is_content(&content(lines[document.end])[3..]) {
                return unsupported(format!("line {}: the next document starts on its `---` line", document.end + 1));
            }
            (0, document.end + 1)
        }
        None => (0, document.end),
    };
    Ok(lines[..from].concat() + &lines[to..].concat())
}

/// Where a top-level key's value starts, after `key:`; `None` if the line is not that key.
fn key_rest<'a>(line: &'a str, key: &str, at: usize) -> Option<&'a str> {
    let line = content(line);
    if indent(line) != at {
        return None;
    }
    let rest = line[at..].strip_prefix(key)?.trim_start_matches([' ', '\t']).strip_prefix(':')?;
    (rest.is_empty() || rest.starts_with([' ', '\t'])).then_some(rest)
}

/// Blank, or only a comment.
fn is_empty_value(rest: &str) -> bool {
    let rest = rest.trim();
    rest.is_empty() || rest.starts_with('#')
}

/// A value as one block-sequence item at `dash` columns: `- ` then the value as YAML,
/// its following lines indented under the first.
fn block_item<T: Serialize>(value: &T, dash: usize, eol: &str) -> Result<String, Unsupported> {
    let yaml =
        serde_yaml_ng::to_string(value).map_err(|e| Unsupported(format!("cannot write the item as YAML: {e}")))?;
    if yaml.lines().any(placement_sensitive) {
        // Re-indented or followed by blank lines, such text would change: JSON is YAML
        // too, and says the same on one line wherever it goes.
        return Ok(format!("{:dash$}- {}{eol}", "", flow_item(value)?));
    }
    let mut out = String::new();
    for (i, line) in yaml.lines().enumerate() {
        if i == 0 {
            out.push_str(&format!("{:dash$}- {line}{eol}", ""));
        } else if line.is_empty() {
            out.push_str(eol);
        } else {
            out.push_str(&format!("{:dash$}  {line}{eol}", ""));
        }
    }
    Ok(out)
}

/// Where a new entry goes after the entries at `indent` columns in `lines[from..to]`:
/// after the last line that is content or indented deeper (inside a block scalar, a
/// line starting with `#` is text, not a comment), and after the blank lines that
/// follow when the last entry's block scalar keeps them (`|+`). `None` without entries.
fn entry_end(lines: &[&str], from: usize, to: usize, indent: usize) -> Option<usize> {
    let last = (from..to).rev().find(|&i| {
        let line = content(lines[i]);
        is_content(line) || (!line.trim().is_empty() && self::indent(line) > indent)
    })?;
    let header = (from..=last).rev().find(|&i| is_content(lines[i]) && self::indent(content(lines[i])) == indent);
    let keeps = header.is_some_and(|h| {
        (h..=last).any(|i| {
            let token = content(lines[i]).trim_end().rsplit(' ').next().unwrap_or_default();
            token.len() <= 3 && token.starts_with(['|', '>']) && token.contains('+')
        })
    });
    if !keeps {
        return Some(last + 1);
    }
    Some((last + 1..to).find(|&i| !content(lines[i]).trim().is_empty()).unwrap_or(to))
}

/// Whether a line of YAML ends in a block scalar header whose text depends on where
/// it is placed: an explicit indentation indicator (`|2-`) counts from where the YAML
/// was written, and keep chomping (`|+`) takes the blank lines that follow it in the
/// file. Text starting with a space or ending in blank lines gets one of them.
fn placement_sensitive(line: &str) -> bool {
    let token = line.trim_end().rsplit(' ').next().unwrap_or_default();
    token.len() <= 3
        && token.starts_with(['|', '>'])
        && token[1..].bytes().all(|b| b.is_ascii_digit() || b == b'-' || b == b'+')
        && token[1..].bytes().any(|b| b.is_ascii_digit() || b == b'+')
}

/// A value as a flow item: JSON is YAML's flow style.
fn flow_item<T: Serialize>(value: &T) -> Result<String, Unsupported> {
    serde_json::to_string(value).map_err(|e| Unsupported(format!("cannot write the item: {e}")))
}

/// The offset of the `]` closing a flow list whose content starts at `from`, skipping
/// nested lists and mappings and quoted strings.
fn matching_bracket(line: &str, from: usize) -> Option<usize> {
    matching_close(line, from, b']')
}

/// The offset of `close` (`]` or `}`) ending the flow collection whose content starts
/// at `from`; `None` when the line ends first, or a comment starts (a bracket in the
/// comment is not the end).
fn matching_close(line: &str, from: usize, close: u8) -> Option<usize> {
    let bytes = line.as_bytes();
    let mut depth = 0usize;
    let mut i = from;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' => {
                i += 1;
                while i < bytes.len() {
                    if bytes[i] == b'\'' {
                        if bytes.get(i + 1) == Some(&b'\'') {
                            i += 1;
                        } else {
                            break;
                        }
                    }
                    i += 1;
                }
            }
            b'[' | b'{' => depth += 1,
            b if b == close && depth == 0 => return Some(i),
            b']' | b'}' => depth = depth.checked_sub(1)?,
            b'#' if bytes[i - 1] == b' ' => return None,
            _ => {}
        }
        i += 1;
    }
    None
}

/// Appends `item` to the list `spec.<key>` of `document`, creating the key at the end
/// of `spec:` when it is absent. Block lists (`- item`) and one-line flow lists
/// (`[]`, `[a, b]`) are edited, under a block `spec:` or a one-line flow `spec: {...}`.
pub fn append_to_spec_list<T: Serialize>(
    text: &str,
    document: &Document,
    key: &str,
    item: &T,
) -> Result<String, Unsupported> {
    let lines = lines(text);
    let eol = eol(text);
    let in_document = document.start..document.end;
    let specs: Vec<usize> = in_document.clone().filter(|&i| key_rest(lines[i], "spec", 0).is_some()).collect();
    let spec_line = match specs.as_slice() {
        [one] => *one,
        [] => return unsupported("the document has no `spec:` at the start of a line"),
        _ => return unsupported("the document has `spec:` more than once"),
    };
    if lines[in_document.clone()].iter().any(|l| content(l).starts_with('\t') || content(l).starts_with(" \t")) {
        return unsupported("the document is indented with tabs");
    }
    let spec_rest = key_rest(lines[spec_line], "spec", 0).expect("found above");
    let insert = |at: usize, new: &str| {
        let mut out = lines[..at].concat();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push_str(eol);
        }
        out.push_str(new);
        out.push_str(&lines[at..].concat());
        out
    };

    if !is_empty_value(spec_rest) {
        // `spec: {...}` on one line: the key is added before its closing brace.
        let line = content(lines[spec_line]);
        if !spec_rest.trim().starts_with('{') {
            return unsupported(format!("line {}: `spec:` is neither a block nor a one-line `{{...}}`", spec_line + 1));
        }
        // `spec_rest` is a slice of `line`: the brace's offset follows from its.
        let open_at = line.len() - spec_rest.trim_start().len();
        let Some(close_at) = matching_close(line, open_at + 1, b'}') else {
            return unsupported(format!("line {}: `spec: {{` does not end on its line", spec_line + 1));
        };
        if !is_empty_value(&line[close_at + 1..]) {
            return unsupported(format!("line {}: something follows `spec: {{...}}`", spec_line + 1));
        }
        let inside = &line[open_at + 1..close_at];
        if inside.contains(key) {
            // `spec: {..., messages: [...]}`: the item goes before that list's bracket.
            let opening = format!("{key}: [");
            let starts: Vec<usize> = line.match_indices(&opening).map(|(i, _)| i).collect();
            let [start] = starts.as_slice() else {
                return unsupported(format!(
                    "line {}: `{key}` inside `spec: {{...}}` is not a one-line `{key}: [...]`",
                    spec_line + 1
                ));
            };
            if !line[..*start].trim_end().ends_with([',', '{']) {
                return unsupported(format!(
                    "line {}: `{key}` inside `spec: {{...}}` is not a one-line `{key}: [...]`",
                    spec_line + 1
                ));
            }
            let open_at = start + opening.len();
            let Some(close_at) = matching_bracket(line, open_at) else {
                return unsupported(format!("line {}: the list `{key}: [` does not end on its line", spec_line + 1));
            };
            let before = line[..close_at].trim_end();
            let separator = if before.ends_with('[') { "" } else { ", " };
            let edited = format!("{before}{separator}{}{}", flow_item(item)?, &line[close_at..]);
            let mut out = lines[..spec_line].concat();
            out.push_str(&edited);
            out.push_str(&lines[spec_line][line.len()..]);
            out.push_str(&lines[spec_line + 1..].concat());
            return Ok(out);
        }
        let before = line[..close_at].trim_end();
        let separator = if before.ends_with('{') { "" } else { ", " };
        let edited = format!("{before}{separator}{key}: [{}]{}", flow_item(item)?, &line[close_at..]);
        let ending = &lines[spec_line][line.len()..];
        let mut out = lines[..spec_line].concat();
        out.push_str(&edited);
        out.push_str(ending);
        out.push_str(&lines[spec_line + 1..].concat());
        return Ok(out);
    }

    // A block `spec:`: its lines run until the next content line at column 0.
    let block_end =
        (spec_line + 1..document.end).find(|&i| is_content(lines[i]) && indent(lines[i]) == 0).unwrap_or(document.end);
    let child = (spec_line + 1..block_end).find(|&i| is_content(lines[i])).map(|i| indent(lines[i])).unwrap_or(2);
    let keys: Vec<usize> = (spec_line + 1..block_end).filter(|&i| key_rest(lines[i], key, child).is_some()).collect();
    let key_line = match keys.as_slice() {
        [] => {
            // Absent: a new key after the last line of the block.
            let at = entry_end(&lines, spec_line + 1, block_end, child).unwrap_or(spec_line + 1);
            let new = format!("{:child$}{key}:{eol}{}", "", block_item(item, child + 2, eol)?);
            return Ok(insert(at, &new));
        }
        [one] => *one,
        _ => return unsupported(format!("`spec.{key}` appears more than once")),
    };
    let rest = key_rest(lines[key_line], key, child).expect("found above");
    let value = rest.trim();
    if value.starts_with('[') {
        // A one-line flow list: the item goes before its closing bracket.
        let line = content(lines[key_line]);
        // `rest` is a slice of `line`: the bracket's offset follows from its.
        let open_at = line.len() - rest.trim_start().len();
        let Some(close_at) = matching_bracket(line, open_at + 1) else {
            return unsupported(format!("line {}: `{key}: [` does not end on its line", key_line + 1));
        };
        if !is_empty_value(&line[close_at + 1..]) {
            return unsupported(format!("line {}: something follows `{key}: [...]`", key_line + 1));
        }
        let before = line[..close_at].trim_end();
        let separator = if before.ends_with('[') { "" } else { ", " };
        let edited = format!("{before}{separator}{}{}", flow_item(item)?, &line[close_at..]);
        let mut out = lines[..key_line].concat();
        out.push_str(&edited);
        out.push_str(&lines[key_line][line.len()..]);
        out.push_str(&lines[key_line + 1..].concat());
        return Ok(out);
    }
    if !is_empty_value(rest) {
        return unsupported(format!(
            "line {}: `{key}:` holds something other than a list of `- item` lines or `[...]`",
            key_line + 1
        ));
    }
    // A block list (or nothing yet): its items are `- ` lines at one indent (the key's
    // own or deeper), their continuation lines deeper still.
    let list_end = (key_line + 1..block_end)
        .find(|&i| {
            let line = content(lines[i]);
            is_content(line) && !(indent(line) > child || (indent(line) == child && line[child..].starts_with('-')))
        })
        .unwrap_or(block_end);
    let Some(first) = (key_line + 1..list_end).find(|&i| is_content(lines[i])) else {
        return Ok(insert(key_line + 1, &block_item(item, child + 2, eol)?));
    };
    let dash = indent(lines[first]);
    let items_ok = (first..list_end).filter(|&i| is_content(lines[i])).all(|i| {
        let line = content(lines[i]);
        indent(line) > dash || (indent(line) == dash && (line[dash..] == *"-" || line[dash..].starts_with("- ")))
    });
    if !content(lines[first])[dash..].starts_with('-') || !items_ok {
        return unsupported(format!("line {}: `{key}:` is not followed by a list of `- item` lines", key_line + 1));
    }
    let at = entry_end(&lines, first, list_end, dash).unwrap_or(first);
    Ok(insert(at, &block_item(item, dash, eol)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREE: &str = "# processes of the web app\n---\n# the server\napiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: web}\nspec: {command: web}\n---\n# the worker\napiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: worker}\nspec: {command: worker}\n---\napiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: cron}  # every hour\nspec: {command: cron}\n";

    fn document_named(text: &str, name: &str) -> Document {
        let docs = documents(text).unwrap();
        *docs
            .iter()
            .find(|d| text.lines().skip(d.start).take(d.end - d.start).any(|l| l.contains(&format!("name: {name}"))))
            .unwrap()
    }

    #[test]
    fn documents_are_counted_as_the_parser_counts_them() {
        let docs = documents(THREE).unwrap();
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[0], Document { separator: Some(1), start: 2, end: 7 });
        // The same lines the parser reports.
        let declared = agentplane_controller::dir::parse::parse_file("f.yaml", THREE).unwrap();
        assert_eq!(
            declared.iter().map(|d| d.line).collect::<Vec<_>>(),
            docs.iter().map(Document::line).collect::<Vec<_>>()
        );
        let bare = "apiVersion: v1\n---\nb: 1\n";
        assert_eq!(
            documents(bare).unwrap(),
            vec![Document { separator: None, start: 0, end: 1 }, Document { separator: Some(1), start: 2, end: 3 }]
        );
        assert!(documents("a: 1\n...\n").is_err());
    }

    #[test]
    fn removing_a_document_keeps_the_others_byte_for_byte() {
        let middle = remove_document(THREE, &document_named(THREE, "worker")).unwrap();
        assert_eq!(middle, THREE.replace("---\n# the worker\napiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: worker}\nspec: {command: worker}\n", ""));
        let last = remove_document(THREE, &document_named(THREE, "cron")).unwrap();
        assert!(last.ends_with("spec: {command: worker}\n"), "{last}");
        assert!(last.starts_with("# processes of the web app\n---\n# the server\n"), "{last}");
        let first = remove_document(THREE, &document_named(THREE, "web")).unwrap();
        assert!(first.starts_with("# processes of the web app\n---\n# the worker\n"), "{first}");

        // A first document without `---`: the next one's `---` goes with it.
        let bare = "a: 1  # one\n---\n# two\nb: 2\n";
        let docs = documents(bare).unwrap();
        assert_eq!(remove_document(bare, &docs[0]).unwrap(), "# two\nb: 2\n");
        assert_eq!(remove_document(bare, &docs[1]).unwrap(), "a: 1  # one\n");
        // No trailing newline at the end of the file.
        let unterminated = "a: 1\n---\nb: 2";
        assert_eq!(remove_document(unterminated, &documents(unterminated).unwrap()[1]).unwrap(), "a: 1\n");
    }

    const SESSION: &str = "# the reviewer\napiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata:\n  name: review\nspec:\n  agent: mock   # scripted\n  messages:\n    - first\n    # a note between items\n    - |\n      second,\n      on two lines\n  model: m1\n# trailing comment\n";

    #[test]
    fn appending_to_a_block_list() {
        let doc = documents(SESSION).unwrap()[0];
        let out = append_to_spec_list(SESSION, &doc, "messages", &"third one").unwrap();
        assert_eq!(out, SESSION.replace("      on two lines\n", "      on two lines\n    - third one\n"));
        // Items at the key's own indent, as kubectl writes them.
        let flush = "spec:\n  messages:\n  - a\n  - b\n  agent: mock\n";
        let out = append_to_spec_list(flush, &documents(flush).unwrap()[0], "messages", &"c: d").unwrap();
        assert_eq!(out, "spec:\n  messages:\n  - a\n  - b\n  - 'c: d'\n  agent: mock\n");
        // A key with nothing under it yet.
        let empty = "spec:\n  messages:\n  agent: mock\n";
        let out = append_to_spec_list(empty, &documents(empty).unwrap()[0], "messages", &"x").unwrap();
        assert_eq!(out, "spec:\n  messages:\n    - x\n  agent: mock\n");
    }

    #[test]
    fn appending_to_a_flow_list_or_creating_the_key() {
        let flow = "spec:\n  agent: mock\n  messages: []  # none yet\n";
        let out = append_to_spec_list(flow, &documents(flow).unwrap()[0], "messages", &"hi, there").unwrap();
        assert_eq!(out, "spec:\n  agent: mock\n  messages: [\"hi, there\"]  # none yet\n");
        let out = append_to_spec_list(&out, &documents(&out).unwrap()[0], "messages", &"again").unwrap();
        assert_eq!(out, "spec:\n  agent: mock\n  messages: [\"hi, there\", \"again\"]  # none yet\n");

        let absent = "kind: Session\nspec:\n  agent: mock\n\n  # comment at the end of spec\nstatus: {}\n";
        let out = append_to_spec_list(absent, &documents(absent).unwrap()[0], "messages", &"hello").unwrap();
        assert_eq!(
            out,
            "kind: Session\nspec:\n  agent: mock\n  messages:\n    - hello\n\n  # comment at the end of spec\nstatus: {}\n"
        );

        let flow_spec = "spec: {agent: mock}   # inline\n";
        let out = append_to_spec_list(flow_spec, &documents(flow_spec).unwrap()[0], "messages", &"hello").unwrap();
        assert_eq!(out, "spec: {agent: mock, messages: [\"hello\"]}   # inline\n");
        let out = append_to_spec_list(&out, &documents(&out).unwrap()[0], "messages", &"a ] b").unwrap();
        assert_eq!(out, "spec: {agent: mock, messages: [\"hello\", \"a ] b\"]}   # inline\n");
        let nested = "spec: {replies: [{id: a, answers: [[x]]}], agent: mock}\n";
        let out =
            append_to_spec_list(nested, &documents(nested).unwrap()[0], "replies", &serde_json::json!({"id": "b"}))
                .unwrap();
        assert_eq!(out, "spec: {replies: [{id: a, answers: [[x]]}, {\"id\":\"b\"}], agent: mock}\n");
    }

    #[test]
    fn mappings_become_block_items() {
        #[derive(Serialize)]
        struct Reply {
            id: &'static str,
            answers: Vec<Vec<&'static str>>,
        }
        let text = "spec:\n  agent: mock\n  replies:\n  - id: q1\n    reject: true\n";
        let out = append_to_spec_list(
            text,
            &documents(text).unwrap()[0],
            "replies",
            &Reply { id: "q2", answers: vec![vec!["yes"]] },
        )
        .unwrap();
        assert_eq!(
            out,
            "spec:\n  agent: mock\n  replies:\n  - id: q1\n    reject: true\n  - id: q2\n    answers:\n    - - yes\n"
        );
    }

    /// Found by the property test below: each gave a file that parsed to something else.
    #[test]
    fn brackets_in_comments_and_text_that_depends_on_its_place() {
        let one = |text: &str, key: &str, item: &str| {
            append_to_spec_list(text, &documents(text).unwrap()[0], key, &item).unwrap()
        };
        // A bracket in the comment is not the end of the list (the item went into the comment).
        assert_eq!(one("spec:\n  messages: []  # ]\n", "messages", "a"), "spec:\n  messages: [\"a\"]  # ]\n");
        assert_eq!(one("spec: {agent: mock}  # }\n", "messages", "a"), "spec: {agent: mock, messages: [\"a\"]}  # }\n");
        // `|2-` re-indented gained two spaces: such text is written as JSON.
        assert_eq!(one("spec:\n  messages:\n  - a\n", "messages", "\nA"), "spec:\n  messages:\n  - a\n  - \"\\nA\"\n");
        // `|+` keeps the blank lines after it: the next item goes after them, and a new
        // item ending in blank lines is JSON, so it takes none that follow it.
        let kept = "spec:\n  messages:\n    - |+\n      a\n\n\n  model: m\n";
        assert_eq!(one(kept, "messages", "b"), "spec:\n  messages:\n    - |+\n      a\n\n\n    - b\n  model: m\n");
        assert_eq!(
            one("spec:\n  agent: mock\n\n", "messages", "A\n\n"),
            "spec:\n  agent: mock\n  messages:\n    - \"A\\n\\n\"\n\n"
        );
        // Inside a block scalar a line starting with `#` is text: the item goes after it.
        let hashed = "spec:\n  messages:\n    - |-\n      a\n      # b\n";
        assert_eq!(one(hashed, "messages", "c"), format!("{hashed}    - c\n"));
    }

    #[test]
    fn unusual_shapes_are_refused() {
        let refuse =
            |text: &str| append_to_spec_list(text, &documents(text).unwrap()[0], "messages", &"x").unwrap_err();
        refuse("spec:\n  messages: &m [a]\n  other: *m\n");
        refuse("spec:\n  messages: [a,\n    b]\n");
        refuse("spec:\n  messages: [a]\n  messages: [b]\n");
        refuse("spec: {agent: mock,\n  model: m}\n");
        refuse("spec: {messages: [a,\n  b]}\n");
        refuse("spec: {messages: &m [a]}\n");
        refuse("metadata: {name: a}\n");
        refuse("spec:\n  messages:\n    key: value\n");
    }
}

/// Property tests: resource files of many shapes (comments, quoting, flow and block
/// styles, indentation, line endings, other documents around), items appended one
/// after another. Each edit must parse to the same resources with exactly the new item
/// last, and change at most one line of what was there.
#[cfg(test)]
mod properties {
    use super::*;
    use agentplane_controller::dir::parse::parse_file;
    use agentplane_crds::Object;
    use agentplane_crds::{PermissionDecision, Reply};
    use proptest::prelude::*;

    fn word() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9]{0,6}"
    }

    /// A comment, at the end of a line or on its own; brackets, colons and quotes too.
    fn comment() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), "[a-z ,.:'\\]\\[{}\"-]{0,12}".prop_map(|c| format!("  # {c}"))]
    }

    /// An item already in a list, as a person might have written it.
    fn scalar() -> impl Strategy<Value = String> {
        prop_oneof![
            word(),
            word().prop_map(|w| format!("'{w} it'")),
            word().prop_map(|w| format!("\"{w}: yes\"")),
            word().prop_map(|w| format!("'{w}, ]'")),
        ]
    }

    /// What `send` and `reply` append: any text, and replies of every kind.
    #[derive(Debug, Clone)]
    enum Item {
        Message(String),
        Reply(Reply),
    }

    fn item() -> impl Strategy<Value = Item> {
        let reply = (
            word(),
            prop::option::of(prop_oneof![Just(PermissionDecision::Once), Just(PermissionDecision::Reject)]),
            prop::collection::vec(prop::collection::vec("\\PC{0,8}", 1..3), 0..3),
            any::<bool>(),
        )
            .prop_map(|(id, decision, answers, reject)| Item::Reply(Reply { id, decision, answers, reject }));
        prop_oneof![
            "\\PC{0,24}".prop_map(Item::Message),
            "[ -~]{0,16}(\n[ -~]{0,16}){0,3}\n?".prop_map(Item::Message),
            reply,
        ]
    }

    /// How `spec.<list>` looks before the edit.
    #[derive(Debug, Clone)]
    enum List {
        Absent,
        /// `key:` with nothing under it.
        Empty(String),
        /// `key: [a, b]` on one line.
        Flow(Vec<String>, String),
        /// `- a` lines, `dash` columns deeper than the key, with comment and blank lines between.
        Block {
            dash: usize,
            items: Vec<(String, String)>,
            between: Vec<String>,
        },
    }

    fn list() -> impl Strategy<Value = List> {
        prop_oneof![
            Just(List::Absent),
            comment().prop_map(List::Empty),
            (prop::collection::vec(scalar(), 0..4), comment()).prop_map(|(items, c)| List::Flow(items, c)),
            (
                prop_oneof![Just(0usize), Just(2usize)],
                prop::collection::vec((scalar(), comment()), 1..4),
                prop::collection::vec(
                    prop_oneof![Just(String::new()), comment().prop_map(|c| c.trim().to_string())],
                    0..3
                ),
            )
                .prop_map(|(dash, items, between)| List::Block { dash, items, between }),
        ]
    }

    #[derive(Debug, Clone)]
    struct Shape {
        lead: Vec<String>,
        process_before: bool,
        process_after: bool,
        flow_metadata: bool,
        quote_name: u8,
        flow_spec: bool,
        indent: usize,
        spec_comment: String,
        model_before: bool,
        model_after: bool,
        messages: List,
        replies: List,
        trailing: Vec<String>,
        crlf: bool,
    }

    fn shape() -> impl Strategy<Value = Shape> {
        (
            (
                prop::collection::vec(comment().prop_map(|c| c.trim().to_string()), 0..3),
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                0u8..3,
                prop::bool::weighted(0.2),
                prop_oneof![Just(2usize), Just(4usize)],
            ),
            (
                comment(),
                any::<bool>(),
                any::<bool>(),
                list(),
                list(),
                prop::collection::vec(comment().prop_map(|c| c.trim().to_string()), 0..2),
                prop::bool::weighted(0.2),
            ),
        )
            .prop_map(
                |(
                    (lead, process_before, process_after, flow_metadata, quote_name, flow_spec, indent),
                    (spec_comment, model_before, model_after, messages, replies, trailing, crlf),
                )| Shape {
                    lead,
                    process_before,
                    process_after,
                    flow_metadata,
                    quote_name,
                    flow_spec,
                    indent,
                    spec_comment,
                    model_before,
                    model_after,
                    messages,
                    replies,
                    trailing,
                    crlf,
                },
            )
    }

    const PROCESS: &str = "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: web}  # the server\nspec: {command: web}\n";

    impl Shape {
        fn text(&self) -> String {
            let mut out = String::new();
            for line in &self.lead {
                out.push_str(&format!("{line}\n"));
            }
            if self.process_before {
                out.push_str(PROCESS);
                out.push_str("---\n");
            }
            let name = match self.quote_name {
                0 => "chat".to_string(),
                1 => "'chat'".to_string(),
                _ => "\"chat\"".to_string(),
            };
            out.push_str("apiVersion: agentplane.dev/v1alpha1\nkind: Session\n");
            if self.flow_metadata {
                out.push_str(&format!("metadata: {{name: {name}}}\n"));
            } else {
                out.push_str(&format!("metadata:\n  name: {name}\n"));
            }
            if self.flow_spec {
                // One line: only flow lists fit in it.
                let mut keys = vec!["agent: mock".to_string()];
                for (key, list) in [("messages", &self.messages), ("replies", &self.replies)] {
                    if let List::Flow(items, _) = list
                        && key == "messages"
                    {
                        keys.push(format!("{key}: [{}]", items.join(", ")));
                    }
                }
                out.push_str(&format!("spec: {{{}}}{}\n", keys.join(", "), self.spec_comment));
            } else {
                let ci = " ".repeat(self.indent);
                out.push_str(&format!("spec:{}\n", self.spec_comment));
                out.push_str(&format!("{ci}agent: mock   # scripted\n"));
                if self.model_before {
                    out.push_str(&format!("{ci}model: m1\n"));
                }
                for (key, list) in [("messages", &self.messages), ("replies", &self.replies)] {
                    match list {
                        List::Absent => {}
                        List::Empty(c) => out.push_str(&format!("{ci}{key}:{c}\n")),
                        List::Flow(items, c) if key == "messages" => {
                            out.push_str(&format!("{ci}{key}: [{}]{c}\n", items.join(", ")))
                        }
                        List::Flow(items, c) => {
                            let items: Vec<String> =
                                items.iter().map(|id| format!("{{id: {id}, reject: true}}")).collect();
                            out.push_str(&format!("{ci}{key}: [{}]{c}\n", items.join(", ")))
                        }
                        List::Block { dash, items, between } => {
                            out.push_str(&format!("{ci}{key}:\n"));
                            let pad = " ".repeat(self.indent + dash);
                            for (i, (item, c)) in items.iter().enumerate() {
                                if key == "messages" {
                                    out.push_str(&format!("{pad}- {item}{c}\n"));
                                } else {
                                    out.push_str(&format!("{pad}- id: {item}{c}\n{pad}  reject: true\n"));
                                }
                                if let Some(line) = between.get(i) {
                                    out.push_str(&format!("{line}\n"));
                                }
                            }
                        }
                    }
                }
                if self.model_after {
                    out.push_str(&format!("{ci}variant: v1\n"));
                }
            }
            for line in &self.trailing {
                out.push_str(&format!("{line}\n"));
            }
            if self.process_after {
                out.push_str("---\n");
                out.push_str(&PROCESS.replace("web", "worker"));
            }
            if self.crlf { out.replace('\n', "\r\n") } else { out }
        }
    }

    fn objects(text: &str) -> Vec<Object> {
        match parse_file("chat.yaml", text) {
            Ok(declared) => declared.into_iter().map(|d| d.object).collect(),
            Err(e) => panic!("{e}\n{text}"),
        }
    }

    /// The Session's `spec.<key>` with `item` appended, and the rest as it was.
    fn expected(before: &[Object], item: &Item) -> Vec<Object> {
        let mut after = before.to_vec();
        for object in &mut after {
            if let Object::Session(session) = object {
                match item {
                    Item::Message(text) => session.spec.messages.push(text.clone()),
                    Item::Reply(reply) => session.spec.replies.push(reply.clone()),
                }
            }
        }
        after
    }

    /// Appends `item` to the Session of `text`; the edit must be taken.
    fn append(text: &str, item: &Item) -> String {
        let docs = documents(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let declared = parse_file("chat.yaml", text).unwrap();
        let session = declared.iter().find(|d| matches!(d.object, Object::Session(_))).unwrap();
        let doc = docs.iter().find(|d| d.line() == session.line).expect("the session's document");
        let edited = match item {
            Item::Message(m) => append_to_spec_list(text, doc, "messages", m),
            Item::Reply(r) => append_to_spec_list(text, doc, "replies", r),
        };
        edited.unwrap_or_else(|e| panic!("refused: {e}\n{text}"))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, max_shrink_iters: 2000, ..ProptestConfig::default() })]

        #[test]
        fn an_appended_item_parses_lands_last_and_keeps_every_other_byte(
            shape in shape(),
            items in prop::collection::vec(item(), 1..4),
        ) {
            let mut text = shape.text();
            let mut before = objects(&text);
            for item in &items {
                let edited = append(&text, item);
                let after = objects(&edited);
                prop_assert_eq!(&after, &expected(&before, item), "{:?} appended to\n{}\ngave\n{}", item, text, edited);
                // What changed is one place: an insertion of whole lines, or part of one line.
                let prefix = text.bytes().zip(edited.bytes()).take_while(|(a, b)| a == b).count();
                let room = text.len().min(edited.len()) - prefix;
                let suffix = text.bytes().rev().zip(edited.bytes().rev()).take(room).take_while(|(a, b)| a == b).count();
                let replaced = &text[prefix..text.len() - suffix];
                prop_assert!(!replaced.contains('\n'), "more than one line changed: {:?}\n{}\n{}", replaced, text, edited);
                text = edited;
                before = after;
            }
        }
    }
}
