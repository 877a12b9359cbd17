//! `agentplane apply` and `agentplane delete`: changing what the watched directory
//! declares, the way `agentplane up` will read it. Nothing is written unless every
//! file checks out, each file is replaced at once (the watcher never sees half of
//! one), and a resource is removed from a file that declares others by taking out
//! only its own document.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentplane_controller::dir::parse::{Declared, FileError, parse_file};
use agentplane_controller::dir::store::yaml_files;
use agentplane_crds::{Key, Kind, Object};
use anyhow::{Context, bail};
use clap::Args;

use crate::edit::{self, EDIT_ATTEMPTS, Outcome, write_atomically};
use crate::resources::{kind_word, parse_refs, ref_name};
use crate::workspace::{Declaration, DirArgs, Workspace, parse_duration};
use crate::yaml_edit;

#[derive(Args, Debug)]
pub struct ApplyArgs {
    /// A YAML file (copied to DIR/<its name>) or a directory (its YAML files copied
    /// under DIR, keeping their layout); repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    files: Vec<PathBuf>,
    #[command(flatten)]
    dir: DirArgs,
}

#[derive(Args, Debug)]
pub struct DeleteArgs {
    /// KIND/NAME ..., or KIND NAME ...
    #[arg(add = clap_complete::ArgValueCandidates::new(crate::completion::resource_refs))]
    resources: Vec<String>,
    /// Delete what these files (or directories of files) declare.
    #[arg(short = 'f', long = "filename", conflicts_with = "resources")]
    files: Vec<PathBuf>,
    /// The namespace of the resource.
    #[arg(short, long, default_value = "default")]
    namespace: String,
    /// Wait until `agentplane up` has cleaned up (stopped the process) and forgotten it.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    wait: bool,
    /// How long to wait: 60s, 2m, 500ms.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    dir: DirArgs,
}

/// A file to write into the watched directory.
struct Planned {
    /// As the user named it, for messages.
    shown: String,
    /// Relative to the watched directory.
    relative: String,
    dest: PathBuf,
    text: String,
    declared: Vec<Declared>,
}

pub async fn apply(args: ApplyArgs) -> anyhow::Result<i32> {
    let workspace = Workspace::new(&args.dir);
    fs::create_dir_all(&workspace.dir).with_context(|| format!("creating {}", workspace.dir.display()))?;
    let dir = workspace.dir.canonicalize().with_context(|| format!("resolving {}", workspace.dir.display()))?;
    // From reading what the directory declares to writing it: no other edit in between.
    let _lock = workspace.lock_edits().await?;

    // Where each file goes.
    let mut sources: Vec<(String, PathBuf, String)> = Vec::new(); // (shown, source, relative)
    for arg in &args.files {
        let meta = fs::metadata(arg).with_context(|| format!("reading {}", arg.display()))?;
        if meta.is_dir() {
            let found = yaml_files(arg, &arg.join(agentplane_controller::dir::state::DEFAULT_STATE_DIR));
            if found.is_empty() {
                bail!("{} has no .yaml or .yml files", arg.display());
            }
            for (relative, path) in found {
                sources.push((path.display().to_string(), path, relative));
            }
        } else {
            let name = arg.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if !(name.ends_with(".yaml") || name.ends_with(".yml")) {
                bail!("{}: `agentplane up` reads only .yaml and .yml files", arg.display());
            }
            sources.push((arg.display().to_string(), arg.clone(), name));
        }
    }
    let mut planned = Vec::new();
    let mut errors: Vec<FileError> = Vec::new();
    let mut dests: BTreeMap<String, String> = BTreeMap::new();
    for (shown, source, relative) in sources {
        // A file already in the watched directory stays where it is.
        let canonical = source.canonicalize().with_context(|| format!("resolving {}", source.display()))?;
        let relative = match canonical.strip_prefix(&dir) {
            Ok(inside) => inside.to_string_lossy().into_owned(),
            Err(_) => relative,
        };
        if let Some(other) = dests.insert(relative.clone(), shown.clone()) {
            bail!("{shown} and {other} would both be written to {}", dir.join(&relative).display());
        }
        let text = fs::read_to_string(&source).with_context(|| format!("reading {shown}"))?;
        match parse_file(&shown, &text) {
            Ok(declared) => planned.push(Planned { shown, dest: dir.join(&relative), relative, text, declared }),
            Err(error) => errors.push(error),
        }
    }

    // What the other files of the directory declare: one resource in two files is an
    // error the store would report on both.
    let mut declared_in: BTreeMap<Key, String> = BTreeMap::new();
    for file in workspace.files() {
        if dests.contains_key(&file.relative) {
            continue;
        }
        for d in file.parsed.unwrap_or_default() {
            declared_in.insert(d.object.key(), file.relative.clone());
        }
    }
    for plan in &planned {
        for d in &plan.declared {
            let key = d.object.key();
            if let Some(other) = declared_in.insert(key.clone(), plan.relative.clone()) {
                let elsewhere = dests.get(&other).map_or(other.clone(), |shown| shown.clone());
                errors.push(FileError {
                    file: plan.shown.clone(),
                    line: Some(d.line),
                    column: None,
                    message: format!("{key} is also declared in {elsewhere}: keep it in one file"),
                });
            }
        }
    }
    if !errors.is_empty() {
        for error in &errors {
            eprintln!("error: {error}");
        }
        bail!("nothing was applied: {} error{} above", errors.len(), if errors.len() == 1 { "" } else { "s" });
    }

    for plan in &planned {
        let old_text = fs::read_to_string(&plan.dest).ok();
        let old: Vec<Declared> =
            old_text.as_deref().and_then(|t| parse_file(&plan.relative, t).ok()).unwrap_or_default();
        if old_text.as_deref() != Some(plan.text.as_str()) {
            write_atomically(&plan.dest, plan.text.as_bytes())?;
        }
        for d in &plan.declared {
            let key = d.object.key();
            let recorded = workspace.record(&key).ok().flatten().filter(|r| r.meta().deletion_timestamp.is_none());
            let before = recorded.or_else(|| old.iter().find(|o| o.object.key() == key).map(|o| o.object.clone()));
            let verb = match before {
                None => "created",
                Some(before) if same_declaration(&before, &d.object) => "unchanged",
                Some(_) => "configured",
            };
            println!("{} {verb}", ref_name(&key));
        }
        for gone in old.iter().filter(|o| !plan.declared.iter().any(|d| d.object.key() == o.object.key())) {
            println!("{} deleted (no longer in {})", ref_name(&gone.object.key()), plan.relative);
        }
    }
    Ok(0)
}

/// Same spec, labels and annotations (the store's own source annotation aside).
fn same_declaration(recorded: &Object, declared: &Object) -> bool {
    let annotations = |o: &Object| {
        let mut a = o.meta().annotations.clone().unwrap_or_default();
        a.remove(agentplane_controller::annotations::SOURCE);
        a
    };
    recorded.same_spec(declared)
        && recorded.meta().labels.clone().unwrap_or_default() == declared.meta().labels.clone().unwrap_or_default()
        && annotations(recorded) == annotations(declared)
}

pub async fn delete(args: DeleteArgs) -> anyhow::Result<i32> {
    let workspace = Workspace::new(&args.dir);
    let keys: Vec<Key> = if args.files.is_empty() {
        if args.resources.is_empty() {
            bail!("name what to delete: KIND/NAME, KIND NAME, or -f FILE");
        }
        parse_refs(&args.resources, None)?
            .into_iter()
            .map(|(kind, name)| Key { kind, namespace: args.namespace.clone(), name })
            .collect()
    } else {
        declared_by(&args.files)?
    };

    let mut failed = false;
    let mut waiting = Vec::new();
    let lock = workspace.lock_edits().await?;
    for key in keys {
        let record = workspace.record(&key)?;
        let made = record.as_ref().filter(|r| {
            key.kind == Kind::Sandbox
                && agentplane_controller::dir::pools::is_store_owned(r.meta())
                && r.meta().deletion_timestamp.is_none()
        });
        match remove(&workspace, &key)? {
            true => println!("{} deleted", ref_name(&key)),
            // Made by the store from a template: asked of the store, which deletes it;
            // what holds it claims another.
            false if made.is_some() => {
                let uid = made.and_then(|r| r.meta().uid.clone()).unwrap_or_default();
                let at = time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339)?;
                agentplane_controller::restart::Requests::deletes(workspace.state.root())
                    .request(&uid, &at)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                println!("{} deleted (made from a template: what holds it gets another)", ref_name(&key));
            }
            // No file declares it, but the store still has it: its cleanup is under way.
            false if record.is_some() => println!("{} is already being deleted", ref_name(&key)),
            false => {
                eprintln!("error: {}", workspace.not_found(&key));
                failed = true;
                continue;
            }
        }
        if let Some(record) = record {
            waiting.push((key, record.meta().uid.clone()));
        }
    }
    drop(lock);

    if args.wait && !waiting.is_empty() {
        if workspace.up().is_none() {
            eprintln!("agentplane up is not running on {}: the cleanup is done when it runs", workspace.dir.display());
        } else if !workspace.wait_forgotten(&waiting, args.timeout).await? {
            let names: Vec<String> = waiting.iter().map(|(k, _)| ref_name(k)).collect();
            bail!("timed out after {:?} waiting for the cleanup of {}", args.timeout, names.join(", "));
        }
    }
    Ok(if failed { 1 } else { 0 })
}

/// The resources that files (or directories of them) declare.
fn declared_by(paths: &[PathBuf]) -> anyhow::Result<Vec<Key>> {
    let mut keys = Vec::new();
    for path in paths {
        let files: Vec<PathBuf> = if path.is_dir() {
            yaml_files(path, &path.join(agentplane_controller::dir::state::DEFAULT_STATE_DIR)).into_values().collect()
        } else {
            vec![path.clone()]
        };
        for file in files {
            let shown = file.display().to_string();
            let text = fs::read_to_string(&file).with_context(|| format!("reading {shown}"))?;
            let declared = parse_file(&shown, &text).map_err(|e| anyhow::anyhow!("{e}"))?;
            keys.extend(declared.into_iter().map(|d| d.object.key()));
        }
    }
    Ok(keys)
}

/// Removes `key` from the file that declares it, starting over when the file changed
/// between reading and replacing it; false when no file declares it. Call with the
/// edit lock held.
fn remove(workspace: &Workspace, key: &Key) -> anyhow::Result<bool> {
    for _ in 0..EDIT_ATTEMPTS {
        let Some(declaration) = workspace.declaration(key)? else { return Ok(false) };
        match remove_declaration(&declaration)? {
            Outcome::Written => return Ok(true),
            Outcome::Changed => continue,
        }
    }
    bail!(
        "{} kept changing while it was edited ({EDIT_ATTEMPTS} attempts): something else keeps writing it; try again",
        ref_name(key)
    )
}

/// Removes a resource from its file: the whole file when it declares nothing else,
/// else only its document, checked by parsing the result.
fn remove_declaration(declaration: &Declaration) -> anyhow::Result<Outcome> {
    let path: &Path = &declaration.path;
    if declaration.declared.len() == 1 {
        return edit::remove(path, declaration.id, &declaration.text);
    }
    let refuse =
        |why: String| anyhow::anyhow!("{}: {why}; nothing was changed: remove the document by hand", declaration.file);
    let documents = yaml_edit::documents(&declaration.text).map_err(|e| refuse(e.0))?;
    let this = declaration.this();
    let document = documents
        .iter()
        .find(|d| d.line() == this.line)
        .ok_or_else(|| refuse(format!("its documents cannot be told apart at line {}", this.line)))?;
    let edited = yaml_edit::remove_document(&declaration.text, document).map_err(|e| refuse(e.0))?;
    // The rest must come out exactly as it was declared.
    let expected: Vec<&Object> =
        declaration.declared.iter().filter(|d| d.document != this.document).map(|d| &d.object).collect();
    let reparsed =
        parse_file(&declaration.file, &edited).map_err(|e| refuse(format!("the edit would not parse ({e})")))?;
    if reparsed.iter().map(|d| &d.object).collect::<Vec<_>>() != expected {
        return Err(refuse(format!(
            "the edit would change other documents than the {}'s",
            kind_word(this.object.kind())
        )));
    }
    edit::replace(path, declaration.id, &declaration.text, edited.as_bytes())
}
