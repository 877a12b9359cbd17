//! The calls on files (`/v1/fs/...`): entries, stat, a file's bytes read and written,
//! mkdir, move, delete, a tar uploaded or downloaded, and watches.

use futures_util::{Stream, StreamExt};
use reqwest::Method;

use super::error::{quote, transport};
use super::{ByteStream, Client, ClientError, ClientResult};
use crate::model::*;

impl Client {
    /// A directory's entries, by name.
    pub async fn fs_entries(&self, path: &str) -> ClientResult<FsEntries> {
        self.send(self.request(Method::GET, &["fs", "entries"]).query(&[("path", path)])).await
    }

    /// One entry, as `lstat` sees it (a symlink is reported, not followed).
    pub async fn fs_stat(&self, path: &str) -> ClientResult<FsEntry> {
        self.send(self.request(Method::GET, &["fs", "stat"]).query(&[("path", path)])).await
    }

    /// A file's bytes as they arrive; `range` is `(first, last)`, both inclusive
    /// (`last` `None`: to the end), as in an HTTP `Range`.
    pub async fn fs_read(&self, path: &str, range: Option<(u64, Option<u64>)>) -> ClientResult<ByteStream> {
        let mut builder = self.stream_request(Method::GET, &["fs", "file"]).query(&[("path", path)]);
        if let Some((first, last)) = range {
            let last = last.map(|l| l.to_string()).unwrap_or_default();
            builder = builder.header(reqwest::header::RANGE, format!("bytes={first}-{last}"));
        }
        self.open_bytes(builder).await
    }

    /// Writes a file from `body`, atomically (readers see the old or the new file).
    pub async fn fs_write(&self, path: &str, body: reqwest::Body, options: &FsWriteOptions) -> ClientResult<FsEntry> {
        let query = FsWriteQuery {
            path: path.to_string(),
            mode: options.mode.map(|mode| format!("{mode:o}")),
            parents: options.parents,
        };
        let builder = self
            .upload_request(Method::PUT, &["fs", "file"])
            .query(&query)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream");
        self.upload(builder, body).await
    }

    /// Creates a directory and its missing parents; an existing directory is fine.
    pub async fn fs_mkdir(&self, path: &str) -> ClientResult<FsEntry> {
        self.send(self.request(Method::POST, &["fs", "mkdir"]).query(&[("path", path)])).await
    }

    /// Renames `from` to `to`; `conflict` when `to` exists and `overwrite` is false.
    pub async fn fs_move(&self, request: &FsMoveRequest) -> ClientResult<FsEntry> {
        self.send(self.request(Method::POST, &["fs", "move"]).json(request)).await
    }

    /// Deletes a file, a symlink (never what it points to) or a directory
    /// (`directory_not_empty` unless `recursive`).
    pub async fn fs_delete(&self, path: &str, recursive: bool) -> ClientResult<()> {
        let query = FsDeleteQuery { path: path.to_string(), recursive };
        let builder = self.request(Method::DELETE, &["fs", "entry"]).query(&query);
        let after = self.timeouts.answer;
        let (client, request) = builder.build_split();
        let request = request.map_err(|source| ClientError::Http { url: String::new(), source })?;
        let url = request.url().to_string();
        let response = client.execute(request).await.map_err(|e| transport(&url, e, &self.timeouts, after))?;
        if !response.status().is_success() {
            return Err(self.refusal(url, response, after).await);
        }
        Ok(())
    }

    /// Extracts a tar stream into the directory `dir` (created when missing).
    pub async fn fs_upload(&self, dir: &str, tar: reqwest::Body) -> ClientResult<FsUploadResult> {
        let builder = self
            .upload_request(Method::POST, &["fs", "upload"])
            .query(&[("path", dir)])
            .header(reqwest::header::CONTENT_TYPE, "application/x-tar");
        self.upload(builder, tar).await
    }

    /// A tar stream of a directory (entries relative to it) or of one file.
    pub async fn fs_download(&self, path: &str) -> ClientResult<ByteStream> {
        self.open_bytes(self.stream_request(Method::GET, &["fs", "download"]).query(&[("path", path)])).await
    }

    /// Changes under `path` as they happen. The watch is in place when this returns.
    pub async fn fs_watch(
        &self,
        path: &str,
        recursive: bool,
    ) -> ClientResult<impl Stream<Item = ClientResult<FsEvent>> + Send + 'static> {
        let segments = ["fs", "watch"];
        let url = self.url(&segments).to_string();
        let query = FsWatchQuery { path: path.to_string(), recursive };
        let messages = self.open_sse(self.stream_request(Method::GET, &segments).query(&query), &segments).await?;
        Ok(messages.map(move |message| {
            let message = message?;
            serde_json::from_str(&message.data).map_err(|e| ClientError::Unexpected {
                url: url.clone(),
                status: 200,
                body: format!("{e}: {}", quote(&message.data)),
            })
        }))
    }
}
