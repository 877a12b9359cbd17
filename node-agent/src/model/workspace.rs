//! Wire types of a session's workspace: the git repository cloned for it and the files
//! its agent changed since (see `crate::workspace`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `workspace` of a session: `git` is cloned (by this node agent, inside its sandbox)
/// into `path`, or the session's `workingDir`, or else `<data dir>/workspaces/<id>`;
/// without `git`, `path` is the directory the session runs in, as `workingDir` is
/// (giving both, they must name the same directory).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkspaceRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,
    /// An absolute directory. With `git`: where the clone goes (it must not exist, or
    /// be empty; its parent must exist). Without: an existing directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// A git repository to clone with the `git` CLI.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitSource {
    /// What `git clone` takes: `https://...`, `ssh://...`, `git@host:path`, `file://...`
    /// (not `ext::`). Put no credentials in it (a password in it is shown as `***`, but
    /// git keeps the URL in the clone's config): use `credentials`.
    #[schema(min_length = 1)]
    pub url: String,
    /// A branch, a tag or a commit sha (with `depth`: a branch, a tag or a full sha);
    /// the repository's default branch when absent.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// A shallow clone of this many commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub depth: Option<u32>,
    /// Kept in the node agent's data directory (readable by its user only) until the
    /// clone is done, then forgotten; never shown, never logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<GitCredentials>,
}

/// How to authenticate a clone. Neither secret is ever put in a command line or a URL.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitCredentials {
    /// An HTTPS token, sent as HTTP basic authentication (`username`:`token`) through
    /// git's `http.extraHeader`, set in git's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The user name sent with `token` (default `x-access-token`, which GitHub takes;
    /// GitLab takes `oauth2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// An SSH private key (OpenSSH or PEM text), written to a private file for the
    /// clone's `ssh -i` and removed after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_private_key: Option<String>,
}

/// Never the secrets themselves: a credential must not reach a log line through `{:?}`.
impl std::fmt::Debug for GitCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitCredentials")
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("username", &self.username)
            .field("ssh_private_key", &self.ssh_private_key.as_ref().map(|_| "***"))
            .finish()
    }
}

/// A session's workspace as it is now (`SessionInfo.workspace`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceInfo {
    /// The directory the session runs in.
    pub path: String,
    /// The repository cloned (a password in it shown as `***`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The ref asked for.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// The commit checked out, once cloned: what `changedFiles` and the diff compare with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Files that differ from `commit` (untracked ones too, ignored ones not), as of
    /// the end of the last turn; at most 1,000.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_files: Vec<ChangedFile>,
    /// More files changed than `changedFiles` lists.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changed_files_truncated: bool,
}

/// A file that differs from the workspace's commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangedFile {
    /// Relative to the workspace.
    pub path: String,
    pub status: FileChangeStatus,
    /// For a renamed file: where it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileChangeStatus {
    Added,
    Modified,
    Deleted,
    Renamed,
}
