//! A resource's environment in the directory store: `env` values, and the `KEY=VALUE`
//! files `envFrom.file` and `valueFrom.fileKeyRef` name beside the resource's YAML.
//!
//! Those files are outside input read on behalf of whoever can write into the watched
//! folder, so they are read with care: only regular files (a FIFO would block the read
//! for ever, `/dev/zero` would never end), at most `MAX_ENV_FILE_BYTES`, and only inside
//! the watched folder once every symlink and `..` is resolved (a process's environment
//! must not carry `/etc/...` or another user's files because a YAML said so).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use agentplane_crds::{EnvFromSource, EnvVar};

/// Far more than any sensible set of variables; small enough that a wrong file named by
/// mistake (a log, a dump) costs nothing to refuse.
pub const MAX_ENV_FILE_BYTES: u64 = 1024 * 1024;

/// Why an env file was not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvFileError {
    #[error("cannot read {}: {reason}", path.display())]
    Unreadable { path: PathBuf, reason: String },
    #[error("{}", outside(path, real, root))]
    OutsideFolder { path: PathBuf, real: PathBuf, root: PathBuf },
    #[error("{} is {what}, not a regular file: only regular files are read", path.display())]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("{} holds more than {MAX_ENV_FILE_BYTES} bytes, more than an env file may hold", path.display())]
    TooLarge { path: PathBuf },
    #[error("{}:{line}: {message}", path.display())]
    Syntax { path: PathBuf, line: usize, message: &'static str },
    #[error(
        "{} {}: what a sandbox can write is never read as desired state",
        path.display(),
        folder.as_ref().map_or_else(|| "belongs to a sandbox's user".to_string(), |f| format!("lies in {}, which a sandbox can write", f.display()))
    )]
    SandboxWritable { path: PathBuf, folder: Option<PathBuf> },
}

/// Why a resource's environment (or its git credentials) cannot be resolved from the
/// files beside it: a problem said in its status as written here.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// `field` names what read the file (`envFrom.file`, `env X: fileKeyRef`, ...).
    #[error("{field} {reference:?}: {source}")]
    File {
        field: String,
        reference: String,
        #[source]
        source: EnvFileError,
    },
    #[error("{var}: {file} has no key {key:?}")]
    NoKey { var: String, file: String, key: String },
    #[error("credentials {0}: set twice (in credentials, or in env as well)")]
    Twice(String),
    #[error("credentials {0}: the value is empty")]
    EmptyCredential(String),
    #[error("workspace.git.credentials.file {0:?} has no key \"token\"")]
    NoToken(String),
    /// A Secret named where only files can be read; `instead` is what to write.
    #[error("{field} {secret:?} needs the cluster store; in a directory use {instead}")]
    ClusterOnly { field: String, secret: String, instead: &'static str },
}

fn outside(path: &Path, real: &Path, root: &Path) -> String {
    let leads = if path == real { String::new() } else { format!(" leads to {}, which", real.display()) };
    format!(
        "{}{leads} is outside the watched folder {}: env files are read only inside it",
        path.display(),
        root.display()
    )
}

/// Where env files may be read from, and what they are relative to.
#[derive(Debug, Clone)]
pub struct EnvFiles<'a> {
    /// The watched folder, canonical (no symlink, no `..`).
    pub root: &'a Path,
    /// The folder of the resource's own file: relative paths start there.
    pub base: &'a Path,
    /// What sandboxes can write: never read (see `sandbox_writes`).
    pub sandbox_writable: Option<&'a super::sandbox_writes::Writable>,
}

impl EnvFiles<'_> {
    /// The path a reference names, as written (joined to `base`, not resolved).
    pub fn path_of(&self, reference: &str) -> PathBuf {
        self.base.join(reference)
    }

    /// Reads and parses the env file `reference` names.
    pub fn read(&self, reference: &str) -> Result<BTreeMap<String, String>, EnvFileError> {
        let path = self.path_of(reference);
        let text = read_confined(self.root, self.sandbox_writable, &path)?;
        parse_env(&text).map_err(|(line, message)| EnvFileError::Syntax { path, line, message })
    }

    /// The paths whose creation or change may change what `reference` reads: the path as
    /// named, with its folders resolved (the file, and folders on the way to it, may not
    /// exist yet), and, when it is a symlink, the file it leads to. File events name paths
    /// under canonical folders (the watched ones), so these are what events are compared
    /// with.
    pub fn watched_paths(&self, reference: &str) -> Vec<PathBuf> {
        let path = self.path_of(reference);
        let mut out = Vec::new();
        // The nearest folder that exists, resolved, and the names below it.
        let mut missing = Vec::new();
        let mut at = path.as_path();
        while let (Some(name), Some(parent)) = (at.file_name(), at.parent()) {
            missing.push(name);
            if let Ok(real) = fs::canonicalize(parent) {
                out.push(missing.iter().rev().fold(real, |p, name| p.join(name)));
                break;
            }
            at = parent;
        }
        if let Ok(target) = fs::canonicalize(&path)
            && !out.contains(&target)
        {
            out.push(target);
        }
        out
    }
}

/// Resolves `env` and `envFrom` against files beside the resource's own: `envFrom`
/// first, `env` over it, as Kubernetes does.
pub fn resolve_env(
    files: &EnvFiles<'_>,
    env: &[EnvVar],
    env_from: &[EnvFromSource],
) -> std::result::Result<BTreeMap<String, String>, ResolveError> {
    let mut out = BTreeMap::new();
    for source in env_from {
        if let Some(file) = &source.file {
            out.extend(files.read(file).map_err(|source| ResolveError::File {
                field: "envFrom.file".into(),
                reference: file.clone(),
                source,
            })?);
        } else if let Some(secret) = &source.secret_ref {
            return Err(ResolveError::ClusterOnly {
                field: "envFrom.secretRef".into(),
                secret: secret.name.clone(),
                instead: "envFrom.file",
            });
        }
    }
    for var in env {
        let value = match (&var.value, &var.value_from) {
            (Some(value), _) => value.clone(),
            (None, Some(from)) => value_from(files, "env", &var.name, from)?,
            (None, None) => String::new(),
        };
        out.insert(var.name.clone(), value);
    }
    Ok(out)
}

/// The value a `valueFrom` names, for the variable `name` of `field` (`env`,
/// `credentials`).
fn value_from(
    files: &EnvFiles<'_>,
    field: &str,
    name: &str,
    from: &agentplane_crds::EnvVarSource,
) -> std::result::Result<String, ResolveError> {
    if let Some(file_ref) = &from.file_key_ref {
        let values = files.read(&file_ref.path).map_err(|source| ResolveError::File {
            field: format!("{field} {name}: fileKeyRef"),
            reference: file_ref.path.clone(),
            source,
        })?;
        values.get(&file_ref.key).cloned().ok_or_else(|| ResolveError::NoKey {
            var: format!("{field} {name}"),
            file: file_ref.path.clone(),
            key: file_ref.key.clone(),
        })
    } else if let Some(secret) = &from.secret_key_ref {
        Err(ResolveError::ClusterOnly {
            field: format!("{field} {name}: secretKeyRef"),
            secret: secret.name.clone(),
            instead: "fileKeyRef",
        })
    } else {
        Ok(String::new())
    }
}

/// Resolves a resource's `credentials` against files beside its own. A variable set
/// in `env` too, or twice, is an error: which value it holds would be a guess.
pub fn resolve_credentials(
    files: &EnvFiles<'_>,
    credentials: &[agentplane_crds::Credential],
    env: &[EnvVar],
) -> std::result::Result<Vec<crate::dir::managed::credentials::Resolved>, ResolveError> {
    let mut out: Vec<crate::dir::managed::credentials::Resolved> = Vec::with_capacity(credentials.len());
    for credential in credentials {
        if env.iter().any(|v| v.name == credential.name) || out.iter().any(|r| r.name == credential.name) {
            return Err(ResolveError::Twice(credential.name.clone()));
        }
        let value = value_from(files, "credentials", &credential.name, &credential.value_from)?;
        if value.is_empty() {
            return Err(ResolveError::EmptyCredential(credential.name.clone()));
        }
        out.push(crate::dir::managed::credentials::Resolved {
            name: credential.name.clone(),
            value,
            hosts: credential.hosts.clone(),
        });
    }
    Ok(out)
}

/// Every file a resource's `credentials` read, as named.
pub fn credential_files(credentials: &[agentplane_crds::Credential]) -> impl Iterator<Item = &str> {
    credentials.iter().filter_map(|c| c.value_from.file_key_ref.as_ref().map(|r| r.path.as_str()))
}

/// A git workspace's credentials from files beside the resource: `file` a `KEY=VALUE`
/// file with `token` (and `username`), `sshPrivateKeyFile` a key read whole, both
/// read with the care env files are. A Secret needs the cluster store.
pub fn resolve_git_credentials(
    files: &EnvFiles<'_>,
    source: &agentplane_crds::GitCredentialsSource,
) -> std::result::Result<agentplane_node_agent::model::GitCredentials, ResolveError> {
    if let Some(secret) = &source.secret_ref {
        return Err(ResolveError::ClusterOnly {
            field: "workspace.git.credentials.secretRef".into(),
            secret: secret.name.clone(),
            instead: "file or sshPrivateKeyFile",
        });
    }
    let mut credentials = agentplane_node_agent::model::GitCredentials::default();
    if let Some(file) = &source.file {
        let values = files.read(file).map_err(|source| ResolveError::File {
            field: "workspace.git.credentials.file".into(),
            reference: file.clone(),
            source,
        })?;
        credentials.token = values.get("token").cloned();
        credentials.username = values.get("username").cloned();
        if credentials.token.is_none() {
            return Err(ResolveError::NoToken(file.clone()));
        }
    }
    if let Some(key_file) = &source.ssh_private_key_file {
        let path = files.path_of(key_file);
        let key = read_confined(files.root, files.sandbox_writable, &path).map_err(|source| ResolveError::File {
            field: "workspace.git.credentials.sshPrivateKeyFile".into(),
            reference: key_file.clone(),
            source,
        })?;
        credentials.ssh_private_key = Some(key);
    }
    Ok(credentials)
}

/// Every file `env` and `envFrom` of a resource read, as named.
pub fn referenced_files<'a>(env: &'a [EnvVar], env_from: &'a [EnvFromSource]) -> impl Iterator<Item = &'a str> {
    let from = env_from.iter().filter_map(|s| s.file.as_deref());
    let keys = env.iter().filter_map(|v| v.value_from.as_ref()?.file_key_ref.as_ref().map(|r| r.path.as_str()));
    from.chain(keys)
}

/// The text of a regular file under `root` (canonical), refusing anything else without
/// ever blocking: FIFOs and devices are opened non-blocking and refused by what `fstat`
/// says, before any read.
fn read_confined(
    root: &Path,
    sandbox_writable: Option<&super::sandbox_writes::Writable>,
    path: &Path,
) -> Result<String, EnvFileError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};

    use super::read::{self, Refused};
    let unreadable = |e: std::io::Error| EnvFileError::Unreadable { path: path.to_path_buf(), reason: e.to_string() };
    // Every symlink and `..` resolved: what is actually read must be under the folder.
    let real = fs::canonicalize(path).map_err(unreadable)?;
    if !real.starts_with(root) {
        return Err(EnvFileError::OutsideFolder { path: path.to_path_buf(), real, root: root.to_path_buf() });
    }
    if let Some(granted) = sandbox_writable.and_then(|w| w.covering(&real, None)) {
        return Err(EnvFileError::SandboxWritable { path: path.to_path_buf(), folder: Some(granted.path.clone()) });
    }
    // Not following a final symlink: one swapped in since the check is refused (ELOOP).
    let file = read::open(&real, false).map_err(unreadable)?;
    if file.metadata().is_ok_and(|m| super::sandbox_writes::Writable::owned_by_sandbox(m.uid())) {
        return Err(EnvFileError::SandboxWritable { path: path.to_path_buf(), folder: None });
    }
    // A folder on the way swapped for a symlink since the check: what was opened is
    // what the kernel says it is.
    if let Ok(opened) = fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file)))
        && !opened.starts_with(root)
    {
        return Err(EnvFileError::OutsideFolder { path: path.to_path_buf(), real: opened, root: root.to_path_buf() });
    }
    let bytes = read::regular_bytes(&file, MAX_ENV_FILE_BYTES).map_err(|refused| match refused {
        Refused::Io(e) => unreadable(e),
        Refused::TooLarge => EnvFileError::TooLarge { path: path.to_path_buf() },
        Refused::NotRegular(kind) => {
            let what = if kind.is_fifo() {
                "a FIFO"
            } else if kind.is_char_device() || kind.is_block_device() {
                "a device"
            } else if kind.is_socket() {
                "a socket"
            } else if kind.is_dir() {
                "a directory"
            } else {
                "not a file"
            };
            EnvFileError::NotRegular { path: path.to_path_buf(), what }
        }
    })?;
    String::from_utf8(bytes)
        .map_err(|_| EnvFileError::Unreadable { path: path.to_path_buf(), reason: "it is not UTF-8 text".to_string() })
}

/// `KEY=VALUE` lines; blank lines and `#` comments skipped, `export ` and matching
/// quotes around the value allowed. An error is `(line, what)`, the line 1-based.
pub fn parse_env(text: &str) -> Result<BTreeMap<String, String>, (usize, &'static str)> {
    let mut out = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            return Err((number + 1, "expected KEY=VALUE"));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err((number + 1, "a variable needs a name before '='"));
        }
        let value = value.trim();
        let value =
            ['"', '\''].iter().find_map(|q| value.strip_prefix(*q).and_then(|v| v.strip_suffix(*q))).unwrap_or(value);
        out.insert(key.to_string(), value.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_env_file_a_sandbox_can_write_is_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        fs::create_dir_all(root.join("proj")).unwrap();
        fs::write(root.join("proj/keys.env"), "KEY=from-the-sandbox\n").unwrap();
        fs::write(root.join("keys.env"), "KEY=mine\n").unwrap();
        let state = root.join(".agentplane");
        fs::create_dir_all(&state).unwrap();
        let writes = super::super::sandbox_writes::SandboxWrites::load(&state);
        writes.grant("box", &root.join("proj")).unwrap();
        let writable = writes.snapshot();
        let files = EnvFiles { root: &root, base: &root, sandbox_writable: Some(&writable) };
        let refused = files.read("proj/keys.env").unwrap_err();
        assert!(matches!(refused, EnvFileError::SandboxWritable { .. }), "{refused}");
        assert!(refused.to_string().contains("never read as desired state"), "{refused}");
        assert_eq!(files.read("keys.env").unwrap().get("KEY").map(String::as_str), Some("mine"));
    }

    fn files(root: &Path) -> EnvFiles<'_> {
        EnvFiles { root, base: root, sandbox_writable: None }
    }

    fn from_file(file: &str) -> Vec<EnvFromSource> {
        serde_json::from_value(serde_json::json!([{ "file": file }])).unwrap()
    }

    #[test]
    fn env_files_resolve_with_env_over_env_from() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        fs::write(root.join("app.env"), "# keys\nexport A=1\nB=\"two words\"\n\nC='3'\n").unwrap();
        let env: Vec<EnvVar> = serde_json::from_str(
            r#"[{"name":"A","value":"override"},{"name":"D","valueFrom":{"fileKeyRef":{"path":"app.env","key":"C"}}}]"#,
        )
        .unwrap();
        let resolved = resolve_env(&files(&root), &env, &from_file("app.env")).unwrap();
        let expected: BTreeMap<String, String> = [("A", "override"), ("B", "two words"), ("C", "3"), ("D", "3")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        assert_eq!(resolved, expected);
        let missing: Vec<EnvVar> =
            serde_json::from_str(r#"[{"name":"X","valueFrom":{"fileKeyRef":{"path":"app.env","key":"NOPE"}}}]"#)
                .unwrap();
        assert!(resolve_env(&files(&root), &missing, &[]).unwrap_err().to_string().contains("no key \"NOPE\""));
        assert!(resolve_env(&files(&root), &[], &from_file("gone.env")).is_err());
    }

    #[test]
    fn git_credentials_come_from_files_beside_the_resource_and_never_from_a_secret() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        fs::write(root.join("git.env"), "token=t0k\nusername=oauth2\n").unwrap();
        fs::write(
            root.join("id_test"),
            "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
        )
        .unwrap();
        fs::write(root.join("empty.env"), "OTHER=1\n").unwrap();
        let source = |json: serde_json::Value| -> agentplane_crds::GitCredentialsSource {
            serde_json::from_value(json).unwrap()
        };
        let both = resolve_git_credentials(
            &files(&root),
            &source(serde_json::json!({"file": "git.env", "sshPrivateKeyFile": "id_test"})),
        )
        .unwrap();
        assert_eq!(both.token.as_deref(), Some("t0k"));
        assert_eq!(both.username.as_deref(), Some("oauth2"));
        assert!(both.ssh_private_key.unwrap().contains("\nAAAA\n"), "the key is read whole, lines and all");
        let no_token = resolve_git_credentials(&files(&root), &source(serde_json::json!({"file": "empty.env"})));
        assert!(no_token.unwrap_err().to_string().contains("no key \"token\""));
        let outside =
            resolve_git_credentials(&files(&root), &source(serde_json::json!({"sshPrivateKeyFile": "/etc/hostname"})));
        assert!(outside.unwrap_err().to_string().contains("outside the watched folder"));
        let secret = resolve_git_credentials(&files(&root), &source(serde_json::json!({"secretRef": {"name": "git"}})));
        assert!(secret.unwrap_err().to_string().contains("needs the cluster store"));
    }

    /// A FIFO with no writer: a plain read would block for ever. Run on a thread, so a
    /// regression fails the test instead of hanging it.
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        nix::unistd::mkfifo(&root.join("fifo.env"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let root2 = root.clone();
        std::thread::spawn(move || {
            let _ = tx.send(files(&root2).read("fifo.env"));
        });
        let result = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("reading a FIFO must not block");
        let error = result.unwrap_err();
        assert!(matches!(error, EnvFileError::NotRegular { what: "a FIFO", .. }), "{error}");
    }

    #[test]
    fn only_regular_files_inside_the_folder_up_to_the_limit_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("d");
        fs::create_dir_all(root.join("sub")).unwrap();
        let root = root.canonicalize().unwrap();
        fs::write(root.join("big.env"), vec![b'#'; 2 * 1024 * 1024]).unwrap();
        fs::write(root.join("exact.env"), vec![b'#'; MAX_ENV_FILE_BYTES as usize]).unwrap();
        fs::write(dir.path().join("outside.env"), "SECRET=1\n").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", root.join("host.env")).unwrap();
        std::os::unix::fs::symlink("../outside.env", root.join("out.env")).unwrap();
        fs::write(root.join("sub/in.env"), "A=1\n").unwrap();
        std::os::unix::fs::symlink("sub/in.env", root.join("alias.env")).unwrap();
        let env = files(&root);
        assert!(matches!(env.read("big.env"), Err(EnvFileError::TooLarge { .. })));
        assert_eq!(env.read("exact.env"), Ok(BTreeMap::new()));
        for outside in ["/dev/zero", "../outside.env", "../../../../../../etc/os-release", "host.env", "out.env"] {
            let error = env.read(outside).unwrap_err();
            assert!(matches!(error, EnvFileError::OutsideFolder { .. }), "{outside}: {error}");
        }
        // A symlink that stays inside is followed.
        assert_eq!(env.read("alias.env").unwrap()["A"], "1");
        let sub = root.join("sub");
        let from_sub = EnvFiles { root: &root, base: &sub, sandbox_writable: None };
        assert_eq!(from_sub.read("../sub/in.env").unwrap()["A"], "1");
        assert!(matches!(from_sub.read("sub"), Err(EnvFileError::Unreadable { .. })));
        assert!(matches!(env.read("sub"), Err(EnvFileError::NotRegular { what: "a directory", .. })));
        let message = resolve_env(&env, &[], &from_file("/dev/zero")).unwrap_err().to_string();
        assert!(
            message.starts_with("envFrom.file \"/dev/zero\": /dev/zero is outside the watched folder"),
            "{message}"
        );
    }

    #[test]
    fn env_watch_finds_the_readers_of_a_path_and_forgets() {
        let mut watch = EnvWatch::default();
        let (a, b) = (PathBuf::from("/d/a.env"), PathBuf::from("/d/.secrets/b.env"));
        assert!(watch.set(&"one", vec![a.clone()]));
        assert!(watch.set(&"two", vec![a.clone(), b.clone()]), "a new folder");
        assert!(!watch.set(&"two", vec![a.clone(), b.clone()]));
        assert_eq!(watch.readers([&a]), BTreeSet::from(["one", "two"]));
        assert_eq!(watch.readers([&b, &PathBuf::from("/d/x")]), BTreeSet::from(["two"]));
        assert!(!watch.set(&"two", vec![]));
        assert_eq!(watch.readers([&a, &b]), BTreeSet::from(["one"]));
        assert_eq!(watch.folders(), BTreeSet::from([PathBuf::from("/d")]));
        assert_eq!(watch.readers_in(&[PathBuf::from("/d")]), BTreeSet::from(["one"]));
        assert_eq!(watch.readers_in(&[PathBuf::from("/d/.secrets")]), BTreeSet::new());
    }

    #[test]
    fn watched_paths_name_the_file_and_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        fs::create_dir(root.join("real")).unwrap();
        fs::write(root.join("real/a.env"), "A=1\n").unwrap();
        std::os::unix::fs::symlink("real/a.env", root.join("a.env")).unwrap();
        let env = files(&root);
        assert_eq!(env.watched_paths("a.env"), vec![root.join("a.env"), root.join("real/a.env")]);
        assert_eq!(env.watched_paths("real/../later.env"), vec![root.join("later.env")]);
        assert_eq!(env.watched_paths("not/yet/b.env"), vec![root.join("not/yet/b.env")]);
        assert_eq!(env.watched_paths("not/../b.env"), Vec::<PathBuf>::new(), "`..` under a folder that is not there");
    }
}

/// Which resources read which env files, so that a file appearing or changing brings
/// them in at once rather than at their next retry. Paths are as `EnvFiles::watched_paths`
/// gives them, the way file events name them.
#[derive(Debug)]
pub struct EnvWatch<K> {
    by_path: HashMap<PathBuf, BTreeSet<K>>,
    by_key: HashMap<K, Vec<PathBuf>>,
}

impl<K> Default for EnvWatch<K> {
    fn default() -> Self {
        EnvWatch { by_path: HashMap::new(), by_key: HashMap::new() }
    }
}

impl<K: Clone + Ord + std::hash::Hash> EnvWatch<K> {
    /// What `key` reads from now on (nothing: forgotten). Returns whether a folder not
    /// watched for another resource's files is among them.
    pub fn set(&mut self, key: &K, paths: Vec<PathBuf>) -> bool {
        let old =
            if paths.is_empty() { self.by_key.remove(key) } else { self.by_key.insert(key.clone(), paths.clone()) };
        if old.as_ref() == Some(&paths) {
            return false;
        }
        for path in old.iter().flatten() {
            if let Some(keys) = self.by_path.get_mut(path) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_path.remove(path);
                }
            }
        }
        let folders_before = self.folders();
        for path in paths {
            self.by_path.entry(path).or_default().insert(key.clone());
        }
        !self.folders().is_subset(&folders_before)
    }

    /// The resources that read one of `paths`.
    pub fn readers<'a>(&self, paths: impl IntoIterator<Item = &'a PathBuf>) -> BTreeSet<K> {
        paths.into_iter().filter_map(|p| self.by_path.get(p)).flatten().cloned().collect()
    }

    /// The resources that read a file in one of `folders`.
    pub fn readers_in(&self, folders: &[PathBuf]) -> BTreeSet<K> {
        let inside = |path: &PathBuf| path.parent().is_some_and(|p| folders.iter().any(|f| f == p));
        self.by_path.iter().filter(|(path, _)| inside(path)).flat_map(|(_, keys)| keys.iter().cloned()).collect()
    }

    /// The folders the files read are in.
    pub fn folders(&self) -> BTreeSet<PathBuf> {
        self.by_path.keys().filter_map(|p| p.parent().map(Path::to_path_buf)).collect()
    }
}
