//! The wire types of the file API (`/v1/fs/...`): entries, write options, moves,
//! tar uploads and watch events.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// What a directory entry is, as `lstat` sees it: a symlink is never followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FsEntryType {
    File,
    Directory,
    Symlink,
    /// A socket, FIFO or device.
    Other,
}

/// One file, directory or symlink.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FsEntry {
    /// The last component of `path` (empty for a root).
    pub name: String,
    /// Absolute and inside a root: how a client addresses it.
    pub path: String,
    #[serde(rename = "type")]
    pub kind: FsEntryType,
    /// In bytes (a symlink's: the length of its target).
    pub size: u64,
    /// The permission bits (`0o644` is 420).
    pub mode: u32,
    /// Last modification, RFC 3339.
    pub mtime: String,
    /// The symlink's target as stored, for symlinks only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// Answer of `GET /v1/fs/entries`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FsEntries {
    /// The directory listed, absolute.
    pub path: String,
    /// By name.
    pub entries: Vec<FsEntry>,
}

/// The `path` of a file route. Relative paths are taken against the first root;
/// absolute ones must lie inside a root.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FsPathQuery {
    pub path: String,
}

/// Query of `PUT /v1/fs/file`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FsWriteQuery {
    pub path: String,
    /// Octal permission bits (`0644`, `755`); default: the replaced file's, else 0644.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Create missing parent directories.
    #[serde(default)]
    pub parents: bool,
}

/// How [`crate::client::Client::fs_write`] writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsWriteOptions {
    /// Permission bits; `None` keeps the replaced file's (0644 for a new file).
    pub mode: Option<u32>,
    /// Create missing parent directories.
    pub parents: bool,
}

/// Query of `DELETE /v1/fs/entry`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FsDeleteQuery {
    pub path: String,
    /// Delete a directory with everything in it.
    #[serde(default)]
    pub recursive: bool,
}

/// Query of `GET /v1/fs/watch`.
#[derive(Debug, Clone, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FsWatchQuery {
    pub path: String,
    /// Watch the whole tree below `path` (the default), not just its entries.
    #[serde(default = "default_true")]
    pub recursive: bool,
}

fn default_true() -> bool {
    true
}

/// Body of `POST /v1/fs/move`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FsMoveRequest {
    pub from: String,
    pub to: String,
    /// Replace what is at `to` (a file, a symlink or an empty directory).
    #[serde(default)]
    pub overwrite: bool,
}

/// Answer of `POST /v1/fs/upload`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FsUploadResult {
    /// Tar entries extracted (files, directories, symlinks, hard links).
    pub entries: u64,
    /// Bytes of file content written.
    pub bytes: u64,
}

/// What happened to a watched path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FsEventType {
    Created,
    Modified,
    Removed,
    /// `from` was renamed to `path`.
    Renamed,
    /// Events were lost (the client read too slowly, or the kernel's queue
    /// overflowed): `missed` says how many, when known. Re-list to catch up.
    Gap,
}

/// One event of `GET /v1/fs/watch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FsEvent {
    #[serde(rename = "type")]
    pub kind: FsEventType,
    /// Absolute (for a gap: the watched path).
    pub path: String,
    /// The old path of a rename.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// For a gap: how many events were dropped (0 when the kernel's count is unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<u64>,
}
