//! The rescan: the folder as it is now taken into the index. Each file is read again
//! only when its stamp changed; who declares what is decided (a name declared twice is
//! an error on both files, a broken file holds what it declared at its last good
//! spec); what no file declares any more is marked deleted after a grace; the file
//! errors are recorded where the CLI shows them.

use super::walk::{MAX_FILE_BYTES, Stamp, read_resource_file, walk};
use super::*;
use tracing::debug;

/// How long a resource must stay undeclared before it is cleaned up. A file rewritten
/// by replacing it (`git checkout`, many editors) or saved in place (truncated, then
/// written) is briefly absent or empty; a rescan that lands in between must not stop
/// what it declares. Updates and new resources are taken at once.
const DELETE_GRACE: Duration = Duration::from_secs(1);

impl Inner {
    /// Rescans the directory off the async runtime; returns what changed, and the
    /// directories to watch.
    pub(super) async fn scan(self: Arc<Self>) -> (Vec<Key>, BTreeMap<FileId, PathBuf>) {
        tokio::task::spawn_blocking(move || self.scan_now()).await.unwrap_or_default()
    }

    fn scan_now(&self) -> (Vec<Key>, BTreeMap<FileId, PathBuf>) {
        let started = std::time::Instant::now();
        let walked = walk(&self.dir, self.state.root(), &self.writes);
        self.report_skipped(&walked.skipped);
        self.report_sandbox_written(&walked.sandbox_written);
        self.writes.prune(&walked.writable_seen);
        let mut dirs: BTreeMap<FileId, PathBuf> = walked.dirs.into_iter().map(|(id, (_, real))| (id, real)).collect();
        // The folders of env files are watched too, walked or not (`.secrets/`).
        for folder in self.env_watch.lock().unwrap_or_else(|e| e.into_inner()).folders() {
            use std::os::unix::fs::MetadataExt;
            if let Ok(meta) = fs::metadata(&folder)
                && meta.is_dir()
            {
                dirs.entry((meta.dev(), meta.ino())).or_insert(folder);
            }
        }
        let changed = self.take(walked.files);
        debug!(changed = changed.len(), elapsed_ms = started.elapsed().as_secs_f64() * 1000.0, "scanned");
        (changed, dirs)
    }

    /// Says once (not at every rescan) what is not read because a sandbox can write it.
    fn report_sandbox_written(&self, written: &BTreeMap<PathBuf, Option<PathBuf>>) {
        let mut reported = self.sandbox_written.lock().unwrap_or_else(|e| e.into_inner());
        for (path, granted) in written {
            if !reported.contains_key(path) {
                match granted {
                    Some(folder) => info!(
                        path = %path.display(),
                        folder = %folder.display(),
                        "not read: a sandbox can write there (what a sandbox writes is never desired state)"
                    ),
                    None => warn!(
                        path = %path.display(),
                        "not read: a sandbox's user owns it (what a sandbox writes is never desired state)"
                    ),
                }
            }
        }
        *reported = written.clone();
    }

    /// Says once (not at every rescan) which symlinks lead to a folder already walked.
    fn report_skipped(&self, skipped: &BTreeMap<PathBuf, PathBuf>) {
        let mut reported = self.skipped.lock().unwrap_or_else(|e| e.into_inner());
        for (link, walked_as) in skipped {
            if !reported.contains(link) {
                warn!(
                    link = %link.display(),
                    folder = %walked_as.display(),
                    "a symlink leads to a folder already walked (a loop or an alias): skipped, its files are taken once"
                );
            }
        }
        *reported = skipped.keys().cloned().collect();
    }

    /// Takes the directory's files as they are now; returns the resources that changed.
    fn take(&self, found: BTreeMap<String, (PathBuf, Stamp)>) -> Vec<Key> {
        // Looked at again with what is granted now: a sandbox started while the walk
        // ran may have written there since.
        let writes = self.writes.snapshot();
        let found: BTreeMap<String, (PathBuf, Stamp)> = found
            .into_iter()
            .filter(|(_, (path, _))| {
                use std::os::unix::fs::MetadataExt;
                let Ok(meta) = fs::metadata(path) else { return true };
                if Writable::owned_by_sandbox(meta.uid()) {
                    return false;
                }
                // With no folder given to a sandbox, no path is covered: the path is
                // resolved (a syscall per component) only when one is.
                writes.is_empty() || fs::canonicalize(path).map_or(true, |real| writes.covering(&real, None).is_none())
            })
            .collect();
        // The files new or changed since they were read, read and parsed before the
        // index is locked (the workers need it meanwhile), on several threads when
        // there are many. Only a scan changes `index.files`, and scans take turns.
        let stale: Vec<(&String, &PathBuf, Stamp)> = {
            let index = self.lock();
            found
                .iter()
                .filter(|(relative, (_, stamp))| index.files.get(*relative).is_none_or(|f| f.stamp != *stamp))
                .map(|(relative, (path, stamp))| (relative, path, *stamp))
                .collect()
        };
        let read = read_files(&stale);
        let mut index = self.lock();
        let index = &mut *index;
        {
            // Resource files read before that a sandbox can write now: no longer read,
            // and said so on the Sandbox (its `Workspace` condition).
            let mut hidden = self.hidden_resources.lock().unwrap_or_else(|e| e.into_inner());
            hidden.retain(|relative, _| self.dir.join(relative).exists());
            for relative in index.files.keys().filter(|r| !found.contains_key(*r)) {
                if let Ok(real) = fs::canonicalize(self.dir.join(relative))
                    && let Some(granted) = writes.covering(&real, None)
                {
                    hidden.insert(relative.clone(), granted.path.clone());
                }
            }
        }
        index.files.retain(|path, _| found.contains_key(path));
        index.files.extend(read);

        // Who declares what.
        let mut claims: BTreeMap<Key, Vec<(&str, &Declared)>> = BTreeMap::new();
        let mut errors: BTreeMap<String, FileError> = BTreeMap::new();
        for (file, entry) in &index.files {
            match &entry.parsed {
                Ok(declared) => {
                    for d in declared {
                        claims.entry(d.object.key()).or_default().push((file.as_str(), d));
                    }
                }
                Err(e) => {
                    errors.insert(file.clone(), e.clone());
                }
            }
        }
        let mut problems: BTreeMap<Key, String> = BTreeMap::new();
        let mut taken: BTreeMap<Key, (&str, &Declared)> = BTreeMap::new();
        for (key, claimants) in claims {
            if claimants.len() == 1 {
                taken.insert(key, claimants[0]);
                continue;
            }
            let files: Vec<&str> = claimants.iter().map(|(f, _)| *f).collect();
            let message = format!("{key} is declared in {}: keep it in one file", files.join(" and "));
            for (file, declared) in &claimants {
                errors.entry(file.to_string()).or_insert_with(|| FileError {
                    file: file.to_string(),
                    line: Some(declared.line),
                    column: None,
                    message: message.clone(),
                });
            }
            problems.insert(key, message);
        }

        let mut changed = Vec::new();
        let now = conditions::now();
        for (key, (file, declared)) in &taken {
            let source = format!("{file}#{}", declared.document);
            match index.resources.get_mut(key) {
                // Being cleaned up: declared again, it comes back as a new resource
                // once the cleanup is done.
                Some(entry) if entry.object.meta().deletion_timestamp.is_some() => {}
                Some(entry) => {
                    entry.missing_since = None;
                    let mut dirty = false;
                    if !entry.object.same_spec(&declared.object) {
                        entry.object.take_spec(&declared.object);
                        let meta = entry.object.meta_mut();
                        meta.generation = Some(meta.generation.unwrap_or(0) + 1);
                        dirty = true;
                    }
                    let declared_meta = declared.object.meta();
                    let meta = entry.object.meta_mut();
                    let mut annotations = declared_meta.annotations.clone().unwrap_or_default();
                    annotations.insert(annotations::SOURCE.to_string(), source.clone());
                    if meta.labels != declared_meta.labels || meta.annotations.as_ref() != Some(&annotations) {
                        meta.labels = declared_meta.labels.clone();
                        meta.annotations = Some(annotations);
                        dirty = true;
                    }
                    let requeue = dirty || entry.problem.is_some();
                    entry.problem = None;
                    if dirty {
                        match self.state.write(&entry.object) {
                            Ok(()) => {
                                entry.recorded = true;
                                index.unrecorded.remove(key);
                            }
                            Err(e) => {
                                warn!(resource = %key, error = %e, "cannot record the resource");
                                let what = "its new spec cannot be recorded in the state directory";
                                index
                                    .unrecorded
                                    .insert(key.clone(), unrecorded(key, file, Some(declared.line), what, &e));
                            }
                        }
                    }
                    if requeue {
                        changed.push(key.clone());
                    }
                }
                None => {
                    let mut object = declared.object.clone();
                    let meta = object.meta_mut();
                    meta.uid = Some(uuid::Uuid::new_v4().to_string());
                    meta.generation = Some(1);
                    meta.creation_timestamp = Some(now.clone());
                    meta.annotations.get_or_insert_with(BTreeMap::new).insert(annotations::SOURCE.to_string(), source);
                    // Recorded by the worker that takes it, before it starts anything
                    // (`record_new`): a rescan that finds 1,000 new files hands them to
                    // the workers at once instead of writing 1,000 records first, and the
                    // writes overlap with the node agent's starts.
                    index
                        .resources
                        .insert(key.clone(), Entry { object, problem: None, missing_since: None, recorded: false });
                    changed.push(key.clone());
                }
            }
        }

        // What is no longer declared: held at its last good spec when its file is broken
        // or its name is claimed twice, cleaned up otherwise.
        let mut recheck = None;
        let held_files: BTreeSet<&str> =
            index.files.iter().filter(|(_, f)| f.parsed.is_err()).map(|(p, _)| p.as_str()).collect();
        for (key, entry) in index.resources.iter_mut() {
            // What the store made itself (from a template) no file declares: pools and
            // claims decide when it goes.
            if taken.contains_key(key) || crate::dir::pools::is_store_owned(entry.object.meta()) {
                continue;
            }
            let problem = match problems.get(key) {
                Some(problem) => Some(problem.clone()),
                None => entry
                    .source_file()
                    .filter(|f| held_files.contains(f))
                    .and_then(|f| errors.get(f))
                    .map(|e| e.to_string()),
            };
            if let Some(problem) = problem {
                if entry.problem.as_ref() != Some(&problem) {
                    entry.problem = Some(problem);
                    changed.push(key.clone());
                }
                continue;
            }
            if entry.object.meta().deletion_timestamp.is_none() {
                let since = *entry.missing_since.get_or_insert_with(std::time::Instant::now);
                let left = DELETE_GRACE.saturating_sub(since.elapsed());
                if !left.is_zero() {
                    recheck = Some(recheck.map_or(left, |r: Duration| r.min(left)));
                    continue;
                }
                entry.object.meta_mut().deletion_timestamp = Some(now.clone());
                if let Err(e) = self.state.write(&entry.object) {
                    warn!(resource = %key, error = %e, "cannot record the deletion");
                    let what = "its deletion cannot be recorded in the state directory";
                    let file = entry.source_file().unwrap_or_default();
                    index.unrecorded.insert(key.clone(), unrecorded(key, file, None, what, &e));
                }
                changed.push(key.clone());
            }
        }

        index.unrecorded.retain(|key, _| taken.contains_key(key) || index.resources.contains_key(key));
        for error in index.unrecorded.values() {
            errors.entry(error.file.clone()).or_insert_with(|| error.clone());
        }
        if errors != index.errors {
            for error in errors.values().filter(|e| !index.errors.contains_key(&e.file)) {
                warn!(error = %error, "file not taken");
            }
            if let Err(e) = self.state.write_errors(&errors) {
                warn!(error = %e, "cannot record the file errors");
            }
            index.errors = errors;
        }
        if let Some(after) = recheck
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            // Look again once the grace of what went missing is over.
            let wake = self.wake.clone();
            runtime.spawn(async move {
                tokio::time::sleep(after).await;
                let _ = wake.try_send(());
            });
        }
        changed
    }
}

/// Below this many files to read, one thread reads them all.
const FILES_PER_THREAD: usize = 64;
/// The most threads a rescan reads with.
const MAX_READ_THREADS: usize = 4;

/// `files` read and parsed, by relative path: on one thread for a few, spread over up
/// to [`MAX_READ_THREADS`] (as many as there are CPUs) for many (1,000 files dropped at
/// once are waited on before anything starts).
fn read_files(files: &[(&String, &PathBuf, Stamp)]) -> Vec<(String, FileEntry)> {
    let read_one = |(relative, path, stamp): &(&String, &PathBuf, Stamp)| {
        ((*relative).clone(), FileEntry { stamp: *stamp, parsed: read_file(relative, path, stamp) })
    };
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = (files.len() / FILES_PER_THREAD).clamp(1, cpus.min(MAX_READ_THREADS));
    if threads == 1 {
        return files.iter().map(read_one).collect();
    }
    let chunk = files.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let readers: Vec<_> = files
            .chunks(chunk)
            .map(|chunk| scope.spawn(move || chunk.iter().map(read_one).collect::<Vec<_>>()))
            .collect();
        // A reader's panic (parsing never should) is the rescan's, as on one thread.
        readers.into_iter().flat_map(|reader| reader.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    })
}

/// One resource file read and parsed: what it declares, or why it is not taken.
fn read_file(relative: &str, path: &Path, stamp: &Stamp) -> std::result::Result<Vec<Declared>, FileError> {
    let error = |message: String| FileError { file: relative.to_string(), line: None, column: None, message };
    if stamp.len > MAX_FILE_BYTES {
        return Err(error(format!("{} bytes is more than a resource file may hold ({MAX_FILE_BYTES})", stamp.len)));
    }
    match read_resource_file(path) {
        Ok(text) => parse_file(relative, &text),
        Err(e) => Err(error(e.to_string())),
    }
}
