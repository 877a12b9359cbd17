//! `agentplane cp SRC DST`: files and directories between this machine and a sandbox,
//! as `kubectl cp` moves them in and out of a pod. One side is a local path, the other
//! `process/NAME:PATH`, `session/NAME:PATH` or `sandbox/NAME:PATH`, found the way
//! `logs` and `attach` find a resource's node agent (in the folder of a running
//! `agentplane up`, or in a cluster with `--kubeconfig`). A relative PATH is taken in
//! the resource's working directory when it has one, else in the node agent's first
//! file root. A file travels as its bytes, a directory as a tar stream (see
//! `tar_stream`); neither is ever whole in memory.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use agentplane_crds::{Key, Kind, Object, ResourceRef};
use agentplane_node_agent::ProblemCode;
use agentplane_node_agent::client::{Client, ClientError};
use agentplane_node_agent::fs::tar_guard::{clipped, quoted};
use agentplane_node_agent::model::{FsEntry, FsEntryType, FsWriteOptions};
use anyhow::{Context, anyhow, bail};
use clap::Args;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::get::{namespace_flag, require, store_flags};
use crate::printing::shell_quote;
use crate::resources::{kind_word, ref_name};
use crate::store::{Store, StoreArgs};
use crate::tar_stream::{self, CHUNK};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  agentplane cp ./notes.md session/review:notes.md      # into the session's working directory
  agentplane cp ./src process/build:/work/src            # a directory: /work/src/src if /work/src exists
  agentplane cp sandbox/box:/work/out ./out              # a directory back, modes and symlinks kept")]
pub struct CpArgs {
    /// What to copy: a local path, or KIND/NAME:PATH on a sandbox (KIND is process,
    /// session or sandbox).
    source: String,
    /// Where to: a local path, or KIND/NAME:PATH. Into it when it is a directory.
    destination: String,
    /// The namespace of the resource (default: the kubeconfig context's, else `default`).
    #[arg(short, long)]
    namespace: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
}

/// One side of a copy, as given.
#[derive(Debug, PartialEq, Eq)]
enum Side {
    Local(PathBuf),
    Remote { kind: Kind, name: String, path: String },
}

impl Side {
    /// `KIND/NAME:PATH` is remote when KIND is a kind that runs something; anything
    /// else is a local path (`./process/x:y` names a local file).
    fn parse(word: &str) -> anyhow::Result<Side> {
        let local = || Ok(Side::Local(PathBuf::from(word)));
        let Some((resource, path)) = word.split_once(':') else { return local() };
        let Ok(ResourceRef { kind, name }) = resource.parse::<ResourceRef>() else { return local() };
        match kind {
            Kind::Process | Kind::Session | Kind::Sandbox => Ok(Side::Remote { kind, name, path: path.to_string() }),
            other => bail!(
                "{word:?}: a {} runs nothing to copy to or from: name a process/, session/ or sandbox/",
                kind_word(other)
            ),
        }
    }
}

/// A path on a node agent, and how to name it in messages (`process/web:/work/x`).
struct Remote {
    client: Client,
    /// The path as the node agent takes it: absolute, or relative to its first root.
    path: String,
    /// `process/web`, with ` -n NS` and the store's flags for a hint to paste.
    resource: String,
}

impl Remote {
    fn shown(&self) -> String {
        format!("{}:{}", self.resource, self.path)
    }

    /// The node agent's error about this path, saying which path of which resource.
    /// Its words are cut short: the node agent may be the sandbox's, and say anything.
    fn error(&self, error: ClientError) -> anyhow::Error {
        match error {
            // The node agent's words name the path already, most of the time.
            ClientError::Problem(problem) if problem.detail.contains(&self.path) => {
                anyhow!("{}: {}", self.resource, clipped(&problem.detail))
            }
            ClientError::Problem(problem) => anyhow!("{}: {}", self.shown(), clipped(&problem.detail)),
            other => anyhow!("{}", clipped(&other.to_string())).context(format!("{} (its node agent)", self.resource)),
        }
    }

    /// What is at the path: `None` when nothing is; a symlink to a directory is a
    /// directory, as `cp` sees it.
    async fn stat(&self) -> anyhow::Result<Option<FsEntry>> {
        match self.client.fs_stat(&self.path).await {
            Ok(mut entry) => {
                if entry.kind == FsEntryType::Symlink && self.client.fs_entries(&self.path).await.is_ok() {
                    entry.kind = FsEntryType::Directory;
                }
                Ok(Some(entry))
            }
            Err(e) if e.code() == Some(ProblemCode::NotFound) => Ok(None),
            Err(e) => Err(self.error(e)),
        }
    }
}

pub async fn cp(args: CpArgs) -> anyhow::Result<i32> {
    let source = Side::parse(&args.source)?;
    let destination = Side::parse(&args.destination)?;
    match (source, destination) {
        (Side::Local(local), Side::Remote { kind, name, path }) => {
            let remote = locate(&args, kind, &name, &path).await?;
            upload(&local, &remote).await?;
        }
        (Side::Remote { kind, name, path }, Side::Local(local)) => {
            let remote = locate(&args, kind, &name, &path).await?;
            download(&remote, &local).await?;
        }
        (Side::Local(_), Side::Local(_)) => bail!(
            "neither {:?} nor {:?} is on a sandbox: write one of them as process/NAME:PATH, session/NAME:PATH or sandbox/NAME:PATH",
            args.source,
            args.destination
        ),
        (Side::Remote { .. }, Side::Remote { .. }) => bail!(
            "both {:?} and {:?} are on sandboxes: agentplane cp copies between this machine and a sandbox; copy to a local path first",
            args.source,
            args.destination
        ),
    }
    Ok(0)
}

/// The node agent of the resource, and PATH as it takes it.
async fn locate(args: &CpArgs, kind: Kind, name: &str, path: &str) -> anyhow::Result<Remote> {
    let store = Store::open(&args.store).await?;
    let key = Key { kind, namespace: store.namespace(args.namespace.as_deref()), name: name.to_string() };
    let object = require(&store, &args.store, &key).await?;
    if let Some(template) = waiting_for_sandbox(&object) {
        let flags = format!("{}{}", namespace_flag(&store, &key.namespace), store_flags(&args.store));
        bail!(
            "{} has no sandbox yet (it waits for one from template {template:?}): see `agentplane describe {} {}{flags}`",
            ref_name(&key),
            kind_word(kind),
            shell_quote(&key.name),
        );
    }
    let client = store.node_agent(&object).await?;
    let path = remote_path(path, working_dir(&object));
    Ok(Remote { client, path, resource: ref_name(&key) })
}

/// The template a Process or Session still waits to be given a sandbox from.
fn waiting_for_sandbox(object: &Object) -> Option<&str> {
    let (template, placed) = match object {
        Object::Process(p) => (p.spec.sandbox_template.as_deref(), p.status.as_ref().and_then(|s| s.sandbox.as_ref())),
        Object::Session(s) => (s.spec.sandbox_template.as_deref(), s.status.as_ref().and_then(|s| s.sandbox.as_ref())),
        _ => return None,
    };
    template.filter(|_| placed.is_none())
}

/// Where a relative PATH is taken: a Process's `cwd`; a Session's `workingDir` (or
/// `workspace.path`, the same setting), else where its workspace was cloned.
fn working_dir(object: &Object) -> Option<&str> {
    fn nonempty(dir: &Option<String>) -> Option<&str> {
        dir.as_deref().filter(|d| !d.is_empty())
    }
    match object {
        Object::Process(p) => nonempty(&p.spec.cwd),
        Object::Session(s) => nonempty(&s.spec.working_dir)
            .or_else(|| s.spec.workspace.as_ref().and_then(|w| nonempty(&w.path)))
            .or_else(|| s.status.as_ref()?.workspace.as_ref().and_then(|w| nonempty(&w.path))),
        _ => None,
    }
}

/// PATH as the node agent takes it: absolute as it is; relative, in the working
/// directory (or, without one, left for the node agent to take in its first root).
fn remote_path(path: &str, working_dir: Option<&str>) -> String {
    match (path, working_dir) {
        (path, _) if path.starts_with('/') => path.to_string(),
        ("" | ".", Some(dir)) => dir.to_string(),
        ("", None) => ".".to_string(),
        (path, Some(dir)) => format!("{}/{path}", dir.trim_end_matches('/')),
        (path, None) => path.to_string(),
    }
}

/// `dir/name`, on the node agent.
fn remote_join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') { format!("{dir}{name}") } else { format!("{dir}/{name}") }
}

/// The name a local directory or file keeps inside a destination directory: its last
/// component; `None` for `DIR/.`, which copies what DIR holds (as `cp -r DIR/. DST`).
fn local_name(local: &Path) -> anyhow::Result<Option<String>> {
    let text = local.to_string_lossy();
    if text == "." || text.ends_with("/.") {
        return Ok(None);
    }
    let absolute = std::path::absolute(local).with_context(|| format!("resolving {}", local.display()))?;
    let name = absolute
        .file_name()
        .with_context(|| format!("{} has no name to copy it under: name the destination in full", local.display()))?;
    Ok(Some(name.to_str().with_context(|| format!("{} is not UTF-8", local.display()))?.to_string()))
}

async fn upload(local: &Path, remote: &Remote) -> anyhow::Result<()> {
    let meta = tokio::fs::metadata(local).await.map_err(|e| local_error(local, e))?;
    let destination = remote.stat().await?;
    if meta.is_dir() {
        let prefix = match &destination {
            Some(entry) if entry.kind == FsEntryType::Directory => local_name(local)?,
            Some(_) => {
                bail!("{}: not a directory: cannot copy the directory {} onto it", remote.shown(), local.display())
            }
            None => None,
        };
        let (tar, packing) = tar_stream::pack(local.to_path_buf(), prefix.map(PathBuf::from));
        let uploaded = remote.client.fs_upload(&remote.path, reqwest::Body::wrap_stream(tar)).await;
        let packed = packing.await.context("packing the directory")?;
        // A failed read here is why the upload failed: say that first.
        let packed = packed?;
        uploaded.map_err(|e| remote.error(e))?;
        for skipped in packed.skipped {
            eprintln!("agentplane cp: {} skipped: not a file, directory or symlink", skipped.display());
        }
        return Ok(());
    }
    if !meta.is_file() {
        bail!("{}: not a file or a directory", local.display());
    }
    let target = match &destination {
        Some(entry) if entry.kind == FsEntryType::Directory => {
            let name = local_name(local)?.with_context(|| format!("{} names no file", local.display()))?;
            remote_join(&remote.path, &name)
        }
        None if remote.path.ends_with('/') => bail!("{}: no such directory", remote.shown()),
        _ => remote.path.clone(),
    };
    let file = tokio::fs::File::open(local).await.map_err(|e| local_error(local, e))?;
    let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(file, CHUNK));
    let options = FsWriteOptions { mode: Some(meta.permissions().mode() & 0o777), parents: false };
    let target = Remote { client: remote.client.clone(), path: target, resource: remote.resource.clone() };
    target.client.fs_write(&target.path, body, &options).await.map_err(|e| target.error(e))?;
    Ok(())
}

async fn download(remote: &Remote, local: &Path) -> anyhow::Result<()> {
    let Some(entry) = remote.stat().await? else { bail!("{}: no such file or directory", remote.shown()) };
    let here = match tokio::fs::metadata(local).await {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(local_error(local, e)),
    };
    let into_dir = here.as_ref().is_some_and(|m| m.is_dir());
    if entry.kind == FsEntryType::Directory {
        let root = match &here {
            Some(_) if into_dir => local.join(entry_name(&entry)?),
            Some(_) => {
                bail!("{}: not a directory: cannot copy the directory {} onto it", local.display(), remote.shown())
            }
            None => local.to_path_buf(),
        };
        let mut stream = remote.client.fs_download(&remote.path).await.map_err(|e| remote.error(e))?;
        let (chunks, unpacking) = tar_stream::unpack(root);
        let mut failed = None;
        while let Some(chunk) = stream.next().await {
            match chunk {
                // Refused: the unpacking thread's error says why.
                Ok(chunk) => {
                    if chunks.send(chunk).await.is_err() {
                        break;
                    }
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        drop(chunks);
        let unpacked = unpacking.await.context("unpacking the directory")?;
        // A download cut short leaves the archive short too: the cut is the cause.
        if let Some(error) = failed {
            return Err(remote.error(error));
        }
        let unpacked = unpacked?;
        for (skipped, why) in unpacked.skipped {
            eprintln!("agentplane cp: {skipped} skipped: {why}");
        }
        return Ok(());
    }
    if entry.kind == FsEntryType::Other {
        bail!("{}: not a file or a directory", remote.shown());
    }
    let target = match &here {
        _ if into_dir => local.join(entry_name(&entry)?),
        None if local.to_string_lossy().ends_with('/') => bail!("{}: no such directory", local.display()),
        _ => local.to_path_buf(),
    };
    // A symlink's own mode says nothing of the file it leads to.
    let mode = (entry.kind == FsEntryType::File).then_some(entry.mode & 0o777);
    let stream = remote.client.fs_read(&remote.path, None).await.map_err(|e| remote.error(e))?;
    write_atomically(&target, stream, mode).await.map_err(|e| match e.downcast::<ClientError>() {
        Ok(e) => remote.error(e),
        Err(e) => e,
    })
}

/// The remote entry's name as a local file name: one plain component, whatever the
/// node agent says (a name with a `/` or a `..` would put the file elsewhere), and no
/// longer than a file name can be here.
fn entry_name(entry: &FsEntry) -> anyhow::Result<&str> {
    /// NAME_MAX of Linux filesystems.
    const LONGEST: usize = 255;
    let name = if entry.name.is_empty() { entry.path.rsplit('/').next().unwrap_or_default() } else { &entry.name };
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) || name.len() > LONGEST {
        bail!(
            "the node agent named {} {}: not a name to write here; name the destination in full",
            quoted(&entry.path),
            quoted(name)
        );
    }
    Ok(name)
}

/// Writes the stream to a file beside `target`, then renames it over `target`: a
/// failed copy leaves what was there, and a reader never sees half a file.
async fn write_atomically(
    target: &Path,
    mut stream: agentplane_node_agent::client::ByteStream,
    mode: Option<u32>,
) -> anyhow::Result<()> {
    let name = target.file_name().with_context(|| format!("{} names no file", target.display()))?;
    let aside = target.with_file_name(format!(".{}.agentplane-cp-{}", name.to_string_lossy(), std::process::id()));
    let written = async {
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&aside)
            .await
            .map_err(|e| local_error(&aside, e))?;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            file.write_all(&chunk).await.with_context(|| format!("writing {}", aside.display()))?;
        }
        file.flush().await?;
        let mode = mode.unwrap_or(0o644);
        file.set_permissions(std::fs::Permissions::from_mode(mode)).await?;
        drop(file);
        tokio::fs::rename(&aside, target).await.map_err(|e| local_error(target, e))
    }
    .await;
    if written.is_err() {
        let _ = tokio::fs::remove_file(&aside).await;
    }
    written
}

fn local_error(path: &Path, error: io::Error) -> anyhow::Error {
    match error.kind() {
        io::ErrorKind::NotFound => anyhow!("{}: no such file or directory", path.display()),
        _ => anyhow!(error).context(path.display().to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_are_remote_only_as_kind_name_path() {
        let remote = |kind, name: &str, path: &str| Side::Remote { kind, name: name.into(), path: path.into() };
        assert_eq!(Side::parse("process/web:/work/x").unwrap(), remote(Kind::Process, "web", "/work/x"));
        assert_eq!(Side::parse("sess/review:notes.md").unwrap(), remote(Kind::Session, "review", "notes.md"));
        assert_eq!(Side::parse("sandbox/box:").unwrap(), remote(Kind::Sandbox, "box", ""));
        assert_eq!(Side::parse("sbx/box:a:b").unwrap(), remote(Kind::Sandbox, "box", "a:b"));
        for local in ["./process/web:/x", "/tmp/a:b", "notes.md", "dir/file:x", "web:/x", "process/:x", "a/b/c:d"] {
            assert_eq!(Side::parse(local).unwrap(), Side::Local(local.into()), "{local}");
        }
        assert!(Side::parse("sandboxtemplate/t:/x").is_err());
    }

    #[test]
    fn relative_paths_are_taken_in_the_working_directory() {
        assert_eq!(remote_path("/abs/x", Some("/work")), "/abs/x");
        assert_eq!(remote_path("x/y", Some("/work/")), "/work/x/y");
        assert_eq!(remote_path("", Some("/work")), "/work");
        assert_eq!(remote_path(".", Some("/work")), "/work");
        assert_eq!(remote_path("x", None), "x");
        assert_eq!(remote_path("", None), ".");
        assert_eq!(remote_join("/", "a"), "/a");
        assert_eq!(remote_join("/w", "a"), "/w/a");
    }

    #[test]
    fn a_local_name_is_its_last_component() {
        assert_eq!(local_name(Path::new("dir/sub")).unwrap().as_deref(), Some("sub"));
        assert_eq!(local_name(Path::new("dir/sub/")).unwrap().as_deref(), Some("sub"));
        assert_eq!(local_name(Path::new("dir/.")).unwrap(), None);
        assert_eq!(local_name(Path::new(".")).unwrap(), None);
    }

    #[test]
    fn a_remote_name_that_is_not_one_component_is_refused() {
        let entry = |name: &str, path: &str| FsEntry {
            name: name.into(),
            path: path.into(),
            kind: FsEntryType::File,
            size: 0,
            mode: 0o644,
            mtime: String::new(),
            target: None,
        };
        assert_eq!(entry_name(&entry("f", "/w/f")).unwrap(), "f");
        assert_eq!(entry_name(&entry("", "/w")).unwrap(), "w");
        for (name, path) in [("..", "/w/.."), ("../x", "/x"), ("a/b", "/a/b"), ("", "/")] {
            assert!(entry_name(&entry(name, path)).is_err(), "{name:?}");
        }
        let long = "n".repeat(100_000);
        let error = entry_name(&entry(&long, &format!("/w/{long}"))).unwrap_err().to_string();
        assert!(error.len() < 700 && error.contains("(100000 bytes)"), "{error}");
    }
}
