//! The file API against a real node agent on a loopback port: large files in and out
//! with ranges, atomic rewrites under a concurrent reader, tar trees both ways, every
//! way out of the roots refused with nothing written outside, directory semantics,
//! the watch, and errors as problem documents.

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use agentplane_node_agent::client::{ByteStream, ClientError, ClientResult};
use agentplane_node_agent::model::*;
use bytes::Bytes;
use common::*;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

/// A node agent serving one fresh root, and a directory outside it that must stay empty.
struct Fixture {
    server: TestServer,
    root: PathBuf,
    outside: PathBuf,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

async fn fixture() -> Fixture {
    let root_dir = tempfile::tempdir().unwrap();
    let outside_dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(root_dir.path()).unwrap();
    let outside = std::fs::canonicalize(outside_dir.path()).unwrap();
    let server = TestServer::start_with_fs_roots(vec![root.clone()]).await;
    Fixture { server, root, outside, _dirs: (root_dir, outside_dir) }
}

impl Fixture {
    fn abs(&self, relative: &str) -> String {
        self.root.join(relative).to_string_lossy().into_owned()
    }

    fn outside_is_empty(&self) {
        let left: Vec<_> = std::fs::read_dir(&self.outside).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "written outside the root: {left:?}");
    }
}

/// Reproducible bytes that do not compress or repeat (xorshift).
fn noise(size: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(size + 8);
    while out.len() < size {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(size);
    out
}

async fn collect(stream: ClientResult<ByteStream>) -> Vec<u8> {
    let mut stream = stream.unwrap();
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    out
}

/// The body in chunks, as a client streaming a file sends it.
fn chunked(data: Vec<u8>) -> reqwest::Body {
    let data = Bytes::from(data);
    let chunks: Vec<Result<Bytes, std::io::Error>> =
        (0..data.len()).step_by(1 << 20).map(|at| Ok(data.slice(at..(at + (1 << 20)).min(data.len())))).collect();
    reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
}

fn code<T>(result: ClientResult<T>) -> String {
    match result {
        Err(ClientError::Problem(problem)) => problem.code().to_string(),
        Err(other) => panic!("expected a problem, got {other}"),
        Ok(_) => panic!("expected a problem, got a success"),
    }
}

fn options(mode: Option<u32>, parents: bool) -> FsWriteOptions {
    FsWriteOptions { mode, parents }
}

#[tokio::test]
async fn a_large_file_goes_in_and_out_whole_and_by_ranges() {
    let fx = fixture().await;
    let client = &fx.server.client;
    let size = 64 << 20;
    let data = noise(size, 7);
    let written = client.fs_write("big.bin", chunked(data.clone()), &options(None, false)).await.unwrap();
    assert_eq!((written.kind, written.size, written.mode), (FsEntryType::File, size as u64, 0o644));
    assert_eq!(written.path, fx.abs("big.bin"));
    let read = collect(client.fs_read("big.bin", None).await).await;
    assert_eq!(read.len(), size);
    assert_eq!(Sha256::digest(&read), Sha256::digest(&data), "the file came back changed");
    drop(read);

    // Ranges: `a-b`, `a-`, and `-n` (raw, the client does not send suffixes).
    assert_eq!(collect(client.fs_read("big.bin", Some((10, Some(19)))).await).await, &data[10..20]);
    assert_eq!(
        collect(client.fs_read(&fx.abs("big.bin"), Some((size as u64 - 5, None))).await).await,
        &data[size - 5..]
    );
    let url = format!("{}/v1/fs/file?path=big.bin", fx.server.url);
    let http = reqwest::Client::new();
    let response = http.get(&url).bearer_auth(TOKEN).header("range", "bytes=-100").send().await.unwrap();
    assert_eq!(response.status(), 206);
    assert_eq!(response.headers()["content-range"], format!("bytes {}-{}/{size}", size - 100, size - 1).as_str());
    assert_eq!(response.headers()["accept-ranges"], "bytes");
    assert!(response.headers().contains_key("etag"));
    assert_eq!(response.bytes().await.unwrap(), &data[size - 100..]);
    let response = http.get(&url).bearer_auth(TOKEN).header("range", format!("bytes={size}-")).send().await.unwrap();
    assert_eq!(response.status(), 416);
    assert_eq!(response.headers()["content-range"], format!("bytes */{size}").as_str());
    assert_eq!(response.headers()["content-type"], "application/problem+json");
    assert_eq!(code(client.fs_read("big.bin", Some((size as u64 + 1, None))).await), "invalid_range");

    // Replacing answers 200 and keeps the mode unless one is given.
    let entry = client.fs_write("big.bin", "short".into(), &options(Some(0o600), false)).await.unwrap();
    assert_eq!((entry.size, entry.mode), (5, 0o600));
    let entry = client.fs_write("big.bin", "shorter".into(), &options(None, false)).await.unwrap();
    assert_eq!(entry.mode, 0o600);
    let raw = http
        .put(format!("{}/v1/fs/file?path=new.txt&mode=0755", fx.server.url))
        .bearer_auth(TOKEN)
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 201);
    let raw = http.put(format!("{}/v1/fs/file?path=new.txt", fx.server.url)).bearer_auth(TOKEN).body("y").send().await;
    assert_eq!(raw.unwrap().status(), 200);
    assert_eq!(std::fs::metadata(fx.root.join("new.txt")).unwrap().permissions().mode() & 0o777, 0o755);
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(&fx.root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[tokio::test]
async fn a_reader_never_sees_a_half_written_file() {
    let fx = fixture().await;
    let size = 2 << 20;
    let client = fx.server.client.clone();
    client.fs_write("v.bin", vec![b'a'; size].into(), &options(None, false)).await.unwrap();
    let writer = {
        let client = client.clone();
        tokio::spawn(async move {
            for version in 0..16u8 {
                let body = vec![b'b' + version; size];
                client.fs_write("v.bin", chunked(body), &options(None, false)).await.unwrap();
            }
        })
    };
    let mut reads = 0;
    let mut versions = std::collections::BTreeSet::new();
    while !writer.is_finished() || reads == 0 {
        let data = collect(client.fs_read("v.bin", None).await).await;
        assert_eq!(data.len(), size, "a read saw a file of another length");
        assert!(data.iter().all(|b| *b == data[0]), "a read saw two versions mixed");
        versions.insert(data[0]);
        reads += 1;
    }
    writer.await.unwrap();
    assert_eq!(collect(client.fs_read("v.bin", None).await).await, vec![b'b' + 15; size]);
    eprintln!("{reads} reads saw {} versions", versions.len());
}

/// The tree both ways: (name, type, mode, content or link target).
fn tar_listing(bytes: &[u8]) -> Vec<(String, char, u32, String)> {
    let mut archive = tar::Archive::new(bytes);
    let mut listing = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().trim_end_matches('/').to_string();
        let header = entry.header().clone();
        let (kind, detail) = match header.entry_type() {
            tar::EntryType::Directory => ('d', String::new()),
            tar::EntryType::Symlink => ('l', entry.link_name().unwrap().unwrap().to_string_lossy().into_owned()),
            _ => {
                let mut content = String::new();
                std::io::Read::read_to_string(&mut entry, &mut content).unwrap();
                ('f', content)
            }
        };
        listing.push((name, kind, header.mode().unwrap() & 0o7777, detail));
    }
    listing.sort();
    listing
}

#[tokio::test]
async fn a_tree_goes_up_and_down_as_tar_with_modes_dirs_and_symlinks() {
    let fx = fixture().await;
    let source = tempfile::tempdir().unwrap();
    let s = source.path();
    std::fs::write(s.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(s.join("run.sh"), PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(s.join("secret"), "key").unwrap();
    std::fs::set_permissions(s.join("secret"), PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::create_dir(s.join("empty")).unwrap();
    std::fs::create_dir(s.join("sub")).unwrap();
    std::fs::write(s.join("sub/notes.txt"), "notes").unwrap();
    symlink("sub/notes.txt", s.join("link")).unwrap();
    symlink("../run.sh", s.join("sub/up")).unwrap();
    let mtime = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
    std::fs::File::options()
        .write(true)
        .open(s.join("secret"))
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_modified(mtime))
        .unwrap();
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    builder.append_dir_all(".", s).unwrap();
    let archive = builder.into_inner().unwrap();

    let result = fx.server.client.fs_upload("proj", archive.clone().into()).await.unwrap();
    assert_eq!(result.bytes, (18 + 3 + 5) as u64);
    let p = fx.root.join("proj");
    assert_eq!(std::fs::metadata(p.join("run.sh")).unwrap().mode() & 0o7777, 0o755);
    assert_eq!(std::fs::metadata(p.join("secret")).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(std::fs::metadata(p.join("secret")).unwrap().modified().unwrap(), mtime);
    assert!(std::fs::metadata(p.join("empty")).unwrap().is_dir());
    assert_eq!(std::fs::read_link(p.join("link")).unwrap(), Path::new("sub/notes.txt"));
    assert_eq!(std::fs::read_link(p.join("sub/up")).unwrap(), Path::new("../run.sh"));
    assert_eq!(std::fs::read_to_string(p.join("link")).unwrap(), "notes");

    let stat = fx.server.client.fs_stat("proj/link").await.unwrap();
    assert_eq!((stat.kind, stat.target.as_deref()), (FsEntryType::Symlink, Some("sub/notes.txt")));

    let downloaded = collect(fx.server.client.fs_download("proj").await).await;
    let expected: Vec<(String, char, u32, String)> = tar_listing(&archive)
        .into_iter()
        .filter(|(name, ..)| name != "." && !name.is_empty())
        .map(|(name, kind, mode, detail)| (name.trim_start_matches("./").to_string(), kind, mode, detail))
        .collect();
    assert_eq!(tar_listing(&downloaded), expected);
    let mut archive = tar::Archive::new(&downloaded[..]);
    let secret = archive.entries().unwrap().map(Result::unwrap).find(|e| e.path().unwrap() == Path::new("secret"));
    assert_eq!(secret.unwrap().header().mtime().unwrap(), 1_600_000_000);

    // A single file comes as itself.
    let one = collect(fx.server.client.fs_download("proj/run.sh").await).await;
    assert_eq!(tar_listing(&one), vec![("run.sh".into(), 'f', 0o755, "#!/bin/sh\necho hi\n".into())]);
    fx.outside_is_empty();
}

/// A tar stream of raw headers, names written as given (the tar crate's builder
/// refuses `..`, as it should; an attacker's archive need not).
fn raw_tar(entries: &[(&str, tar::EntryType, &str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, kind, link, data) in entries {
        let mut header = tar::Header::new_old();
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
        header.set_entry_type(*kind);
        header.set_mode(0o644);
        header.set_size(data.len() as u64);
        header.set_cksum();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

#[tokio::test]
async fn every_way_out_of_the_root_is_refused() {
    let fx = fixture().await;
    let client = &fx.server.client;
    let outside = fx.outside.to_string_lossy().into_owned();
    std::fs::write(fx.outside.join("keep"), "keep").unwrap();
    symlink("/etc", fx.root.join("etc")).unwrap();
    symlink(&fx.outside, fx.root.join("out")).unwrap();
    symlink(fx.outside.join("keep"), fx.root.join("keep-link")).unwrap();
    symlink("../", fx.root.join("up")).unwrap();

    // `..`, and absolute paths elsewhere.
    assert_eq!(code(client.fs_stat("../x").await), "forbidden_path");
    assert_eq!(code(client.fs_write("../x", "x".into(), &options(None, false)).await), "forbidden_path");
    assert_eq!(code(client.fs_write("a/../../x", "x".into(), &options(None, true)).await), "forbidden_path");
    assert_eq!(code(client.fs_read("/etc/passwd", None).await), "forbidden_path");
    assert_eq!(
        code(client.fs_write(&format!("{outside}/x"), "x".into(), &options(None, false)).await),
        "forbidden_path"
    );
    assert_eq!(code(client.fs_entries(&outside).await), "forbidden_path");
    assert_eq!(code(client.fs_mkdir(&format!("{outside}/d")).await), "forbidden_path");

    // Through a symlink to /etc: read, list, write, delete.
    assert_eq!(code(client.fs_read("etc/passwd", None).await), "forbidden_path");
    assert_eq!(code(client.fs_entries("etc").await), "forbidden_path");
    assert_eq!(code(client.fs_write("etc/agentplane-test", "x".into(), &options(None, false)).await), "forbidden_path");
    assert_eq!(code(client.fs_delete("etc/hostname", false).await), "forbidden_path");
    assert_eq!(code(client.fs_stat("etc/passwd").await), "forbidden_path");
    let link = client.fs_stat("etc").await.unwrap();
    assert_eq!((link.kind, link.target.as_deref()), (FsEntryType::Symlink, Some("/etc")));
    // Through symlinks to the outside directory, and through one that climbs.
    assert_eq!(code(client.fs_write("out/x", "x".into(), &options(None, true)).await), "forbidden_path");
    assert_eq!(code(client.fs_mkdir("out/d").await), "forbidden_path");
    assert_eq!(code(client.fs_read("keep-link", None).await), "forbidden_path");
    assert_eq!(code(client.fs_write("keep-link", "x".into(), &options(None, false)).await), "forbidden_path");
    assert_eq!(code(client.fs_delete("out/keep", false).await), "forbidden_path");
    assert_eq!(code(client.fs_entries("up").await), "forbidden_path");
    let request = FsMoveRequest { from: "out/keep".into(), to: "stolen".into(), overwrite: false };
    assert_eq!(code(client.fs_move(&request).await), "forbidden_path");
    client.fs_write("mine", "m".into(), &options(None, false)).await.unwrap();
    let request = FsMoveRequest { from: "mine".into(), to: "out/mine".into(), overwrite: false };
    assert_eq!(code(client.fs_move(&request).await), "forbidden_path");
    let request = FsMoveRequest { from: "mine".into(), to: "../mine".into(), overwrite: false };
    assert_eq!(code(client.fs_move(&request).await), "forbidden_path");
    // A root itself cannot go.
    assert_eq!(code(client.fs_delete(".", true).await), "forbidden_path");
    assert_eq!(code(client.fs_delete(&fx.root.to_string_lossy(), true).await), "forbidden_path");

    // Tar entries: `..`, absolute, a symlink out, a file through a symlink it made or
    // that was there, a hard link out.
    let cases: Vec<Vec<u8>> = vec![
        raw_tar(&[("../../x", tar::EntryType::Regular, "", b"x")]),
        raw_tar(&[(&format!("{outside}/x"), tar::EntryType::Regular, "", b"x")]),
        raw_tar(&[("l", tar::EntryType::Symlink, &outside, b"")]),
        raw_tar(&[("l", tar::EntryType::Symlink, "../..", b"")]),
        raw_tar(&[("l", tar::EntryType::Symlink, ".", b""), ("l/x", tar::EntryType::Regular, "", b"x")]),
        raw_tar(&[("h", tar::EntryType::Link, "../../keep", b"")]),
        raw_tar(&[("h", tar::EntryType::Link, &format!("{outside}/keep"), b"")]),
    ];
    for (index, archive) in cases.into_iter().enumerate() {
        let result = client.fs_upload("t", archive.into()).await;
        assert_eq!(code(result), "forbidden_path", "case {index}");
    }
    // Into the root itself, a symlink to outside there first.
    let archive = raw_tar(&[("out/y", tar::EntryType::Regular, "", b"y")]);
    assert_eq!(code(client.fs_upload(".", archive.into()).await), "forbidden_path");

    // Deleting the link deletes the link, not what it points to.
    client.fs_delete("out", true).await.unwrap();
    assert_eq!(std::fs::read_to_string(fx.outside.join("keep")).unwrap(), "keep");
    std::fs::remove_file(fx.outside.join("keep")).unwrap();
    fx.outside_is_empty();
    assert!(!Path::new("/etc/agentplane-test").exists());
}

#[tokio::test]
async fn a_directory_swapped_for_a_symlink_during_a_write_leads_nowhere_outside() {
    let fx = fixture().await;
    std::fs::create_dir(fx.root.join("dir")).unwrap();
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
    let body = reqwest::Body::wrap_stream(tokio_stream::wrappers::ReceiverStream::new(receiver));
    let client = fx.server.client.clone();
    let upload = tokio::spawn(async move { client.fs_write("dir/file", body, &options(None, false)).await });
    sender.send(Ok(Bytes::from_static(b"first half, "))).await.unwrap();
    // The node agent has resolved the path and opened the directory once its
    // temporary file is there.
    within("the temporary file", async {
        loop {
            let started = std::fs::read_dir(fx.root.join("dir"))
                .unwrap()
                .any(|e| e.unwrap().file_name().to_string_lossy().starts_with(".file."));
            if started {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    std::fs::rename(fx.root.join("dir"), fx.root.join("dir.old")).unwrap();
    symlink(&fx.outside, fx.root.join("dir")).unwrap();
    sender.send(Ok(Bytes::from_static(b"second half"))).await.unwrap();
    drop(sender);
    let written = within("the write", upload).await.unwrap();
    // It lands in the directory that was opened, wherever that now is; never outside.
    fx.outside_is_empty();
    if written.is_ok() {
        assert_eq!(std::fs::read_to_string(fx.root.join("dir.old/file")).unwrap(), "first half, second half");
    }
    // And from now on the path is refused.
    let again = fx.server.client.fs_write("dir/file", "x".into(), &options(None, false)).await;
    assert_eq!(code(again), "forbidden_path");
    fx.outside_is_empty();
}

#[tokio::test]
async fn an_aborted_upload_leaves_no_temporary_file() {
    let fx = fixture().await;
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
    let body = reqwest::Body::wrap_stream(tokio_stream::wrappers::ReceiverStream::new(receiver));
    let client = fx.server.client.clone();
    let upload = tokio::spawn(async move { client.fs_write("cut.bin", body, &options(None, false)).await });
    sender.send(Ok(Bytes::from(vec![1u8; 1 << 16]))).await.unwrap();
    let root = fx.root.clone();
    let temporary_exists = move || {
        std::fs::read_dir(&root).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().contains(".cut.bin."))
    };
    within("the temporary file", async {
        while !temporary_exists() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    // The client breaks off mid-body.
    sender.send(Err(std::io::Error::other("the client gives up"))).await.unwrap();
    assert!(within("the write to fail", upload).await.unwrap().is_err());
    within("the temporary file to go", async {
        while temporary_exists() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(!fx.root.join("cut.bin").exists());
}

#[tokio::test]
async fn directories_moves_and_deletes() {
    let fx = fixture().await;
    let client = &fx.server.client;
    let http = reqwest::Client::new();
    let mkdir = |path: &str| http.post(format!("{}/v1/fs/mkdir?path={path}", fx.server.url)).bearer_auth(TOKEN).send();
    assert_eq!(mkdir("a/b/c").await.unwrap().status(), 201);
    assert_eq!(mkdir("a/b/c").await.unwrap().status(), 200);
    assert_eq!(client.fs_mkdir("a/b").await.unwrap().kind, FsEntryType::Directory);
    client.fs_write("f", "f".into(), &options(None, false)).await.unwrap();
    assert_eq!(code(client.fs_mkdir("f").await), "conflict");
    assert_eq!(code(client.fs_mkdir("f/g").await), "not_a_directory");
    assert_eq!(code(client.fs_entries("f").await), "not_a_directory");
    assert_eq!(code(client.fs_read("a", None).await), "is_a_directory");
    assert_eq!(code(client.fs_write("a", "x".into(), &options(None, false)).await), "is_a_directory");
    assert_eq!(code(client.fs_write("p/q/r.txt", "x".into(), &options(None, false)).await), "not_found");
    assert_eq!(client.fs_write("p/q/r.txt", "x".into(), &options(None, true)).await.unwrap().path, fx.abs("p/q/r.txt"));

    // Listing: sorted, typed, with paths to use.
    client.fs_write("a/z.txt", "z".into(), &options(None, false)).await.unwrap();
    symlink("z.txt", fx.root.join("a/y")).unwrap();
    let list = client.fs_entries("a").await.unwrap();
    assert_eq!(list.path, fx.abs("a"));
    let names: Vec<_> = list.entries.iter().map(|e| (e.name.as_str(), e.kind, e.path.clone())).collect();
    assert_eq!(
        names,
        vec![
            ("b", FsEntryType::Directory, fx.abs("a/b")),
            ("y", FsEntryType::Symlink, fx.abs("a/y")),
            ("z.txt", FsEntryType::File, fx.abs("a/z.txt")),
        ]
    );
    let root_list = client.fs_entries(&fx.root.to_string_lossy()).await.unwrap();
    assert_eq!(root_list.entries.len(), 3);

    // Delete: not empty without recursive; a symlink is removed, not followed.
    assert_eq!(code(client.fs_delete("a", false).await), "directory_not_empty");
    client.fs_delete("a/y", false).await.unwrap();
    assert!(fx.root.join("a/z.txt").exists());
    assert_eq!(code(client.fs_delete("a/nothing", false).await), "not_found");

    // Move: into place, conflict unless overwrite, not over a non-empty directory.
    let mv = |from: &str, to: &str, overwrite: bool| FsMoveRequest { from: from.into(), to: to.into(), overwrite };
    let moved = client.fs_move(&mv("f", "a/b/c/g", false)).await.unwrap();
    assert_eq!((moved.path, moved.size), (fx.abs("a/b/c/g"), 1));
    client.fs_write("h", "hh".into(), &options(None, false)).await.unwrap();
    assert_eq!(code(client.fs_move(&mv("h", "a/b/c/g", false)).await), "conflict");
    assert_eq!(client.fs_move(&mv("h", "a/b/c/g", true)).await.unwrap().size, 2);
    assert_eq!(code(client.fs_move(&mv("nothing", "x", false)).await), "not_found");
    client.fs_mkdir("d").await.unwrap();
    assert_eq!(code(client.fs_move(&mv("d", "a", true)).await), "directory_not_empty");
    assert_eq!(code(client.fs_move(&mv("a", "a/b/inside", false)).await), "invalid_request");

    let deleted = http.delete(format!("{}/v1/fs/entry?path=a&recursive=true", fx.server.url)).bearer_auth(TOKEN);
    assert_eq!(deleted.send().await.unwrap().status(), 204);
    assert_eq!(code(client.fs_stat("a").await), "not_found");
}

#[tokio::test]
async fn the_watch_reports_changes_in_order() {
    let fx = fixture().await;
    std::fs::create_dir(fx.root.join("w")).unwrap();
    let mut events = Box::pin(fx.server.client.fs_watch("w", true).await.unwrap());
    let a = fx.root.join("w/a.txt");
    let b = fx.root.join("w/b.txt");
    std::fs::write(&a, "one").unwrap();
    std::fs::write(&a, "two").unwrap();
    std::fs::rename(&a, &b).unwrap();
    std::fs::remove_file(&b).unwrap();
    let (a, b) = (a.to_string_lossy().into_owned(), b.to_string_lossy().into_owned());
    let mut seen = Vec::new();
    within("the watch events", async {
        while let Some(event) = events.next().await {
            let event = event.unwrap();
            let last = event.kind == FsEventType::Removed && event.path == b;
            seen.push(event);
            if last {
                break;
            }
        }
    })
    .await;
    let position = |kind: FsEventType, path: &str| {
        seen.iter()
            .position(|e| e.kind == kind && e.path == path)
            .unwrap_or_else(|| panic!("no {kind:?} {path} in {seen:?}"))
    };
    let created = position(FsEventType::Created, &a);
    let modified = position(FsEventType::Modified, &a);
    let renamed = position(FsEventType::Renamed, &b);
    let removed = position(FsEventType::Removed, &b);
    assert!(created < modified && modified < renamed && renamed < removed, "{seen:?}");
    assert_eq!(seen[renamed].from.as_deref(), Some(a.as_str()));
    assert!(seen.iter().all(|e| e.kind != FsEventType::Gap), "{seen:?}");
    assert_eq!(code(fx.server.client.fs_watch("nothing", true).await.map(|_| ())), "not_found");
}

#[tokio::test]
async fn errors_are_problems_and_the_token_is_required() {
    let fx = fixture().await;
    assert_eq!(code(fx.server.anonymous().fs_stat(".").await), "unauthorized");
    assert_eq!(code(fx.server.anonymous().fs_read("x", None).await), "unauthorized");
    let http = reqwest::Client::new();
    let anonymous = http.put(format!("{}/v1/fs/file?path=x", fx.server.url)).body("x").send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    assert!(!fx.root.join("x").exists());
    for (method, path, status) in [
        (reqwest::Method::GET, "/v1/fs/stat?path=nothing", 404),
        (reqwest::Method::GET, "/v1/fs/stat", 400),
        (reqwest::Method::GET, "/v1/fs/entries?path=../x", 403),
        (reqwest::Method::PUT, "/v1/fs/file?path=x&mode=999", 400),
        (reqwest::Method::GET, "/v1/fs/download?path=nothing", 404),
    ] {
        let response = http.request(method, format!("{}{path}", fx.server.url)).bearer_auth(TOKEN).send().await;
        let response = response.unwrap();
        assert_eq!(response.status(), status, "{path}");
        assert_eq!(response.headers()["content-type"], "application/problem+json", "{path}");
        let problem: serde_json::Value = response.json().await.unwrap();
        assert!(problem["type"].as_str().unwrap().starts_with("urn:agentplane:error:"), "{problem}");
    }
}

/// The header block of a tar extension entry (`L`, `K`: GNU long name and long link;
/// `x`, `g`: PAX) that declares `size` bytes of data, as a hostile client writes it.
fn extension_header(kind: u8, size: u64) -> Bytes {
    let (mut header, name) = match kind {
        b'L' | b'K' => (tar::Header::new_gnu(), "././@LongLink"),
        _ => (tar::Header::new_ustar(), "PaxHeaders.0/x"),
    };
    header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    header.set_entry_type(tar::EntryType::new(kind));
    header.set_mode(0o644);
    header.set_size(size);
    header.set_cksum();
    Bytes::copy_from_slice(header.as_bytes())
}

/// A body that is that header and then its `size` bytes, made as they are pulled (a
/// GiB is never held), counting in `pulled` what the client was asked for. Past
/// `cut_off` bytes it ends early: a test that got there has failed already, and the
/// rest would only fill this machine's memory.
fn extension_body(
    kind: u8,
    size: u64,
    pulled: std::sync::Arc<std::sync::atomic::AtomicU64>,
    cut_off: u64,
) -> reqwest::Body {
    use std::sync::atomic::Ordering;
    let filler = Bytes::from(vec![b'a'; 64 << 10]);
    let chunks = (size as usize).div_ceil(filler.len());
    let stream = std::iter::once(extension_header(kind, size))
        .chain(std::iter::repeat_n(filler, chunks))
        .take_while(move |chunk| pulled.fetch_add(chunk.len() as u64, Ordering::SeqCst) < cut_off)
        .map(Ok::<_, std::io::Error>);
    reqwest::Body::wrap_stream(futures_util::stream::iter(stream))
}

/// An upload whose GNU long-name, long-link or PAX header declares a GiB is refused
/// from that header: 400 with a short problem, before the node agent reads (and
/// holds) the GiB. What the client was asked for is at most what the connection's
/// buffers hold; the tar reader itself stops at the header (see `fs::tar_guard`).
#[tokio::test]
async fn an_upload_with_a_gib_extension_header_is_refused_from_its_header() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let fx = fixture().await;
    let http = reqwest::Client::new();
    const GIB: u64 = 1 << 30;
    // Loopback socket buffers and the body queue hold a few MiB that the node agent
    // may be sent but never reads; a GiB is what it would read without the limit.
    const PULLED_AT_MOST: u64 = 32 << 20;
    for kind in [b'L', b'K', b'x', b'g'] {
        let pulled = std::sync::Arc::new(AtomicU64::new(0));
        let body = extension_body(kind, GIB, pulled.clone(), 4 * PULLED_AT_MOST);
        let url = format!("{}/v1/fs/upload?path=hostile", fx.server.url);
        let response = within("the upload's answer", http.post(url).bearer_auth(TOKEN).body(body).send()).await;
        let pulled = pulled.load(Ordering::SeqCst);
        eprintln!("{}: {pulled} bytes of the body pulled", kind as char);
        assert!(pulled < PULLED_AT_MOST, "{}: the node agent took {pulled} bytes of the body", kind as char);
        let response = response.unwrap();
        assert_eq!(response.status(), 400, "{}", kind as char);
        assert_eq!(response.headers()["content-type"], "application/problem+json");
        let body = response.bytes().await.unwrap();
        assert!(body.len() < 1024, "{}: a problem of {} bytes", kind as char, body.len());
        let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains("65536"), "{}: {detail}", kind as char);
    }
    assert!(!fx.root.join("hostile").read_dir().is_ok_and(|mut d| d.next().is_some()), "something was extracted");
    fx.outside_is_empty();
    // For the record only: other tests share this process when run together.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    eprintln!("{}", status.lines().find(|l| l.starts_with("VmHWM")).unwrap_or_default());
}

/// A recursive watch stays in its root: `link -> outside` is not followed, so what is
/// made outside is not reported, and what is made inside still is. The file outside
/// is made first: inotify keeps one queue, so had its event come, it would come first.
#[tokio::test]
async fn a_recursive_watch_does_not_follow_a_symlink_out_of_its_root() {
    let fx = fixture().await;
    std::fs::create_dir(fx.outside.join("deeper")).unwrap();
    symlink(&fx.outside, fx.root.join("link")).unwrap();
    let mut events = Box::pin(fx.server.client.fs_watch(".", true).await.unwrap());
    std::fs::write(fx.outside.join("secret.txt"), "outside").unwrap();
    std::fs::write(fx.outside.join("deeper/secret.txt"), "outside").unwrap();
    let inside = fx.abs("inside.txt");
    std::fs::write(&inside, "inside").unwrap();
    let mut seen = Vec::new();
    within("the event of the file inside", async {
        while let Some(event) = events.next().await {
            let event = event.unwrap();
            // As paths: the string is checked below.
            let done = event.kind == FsEventType::Created && Path::new(&event.path) == Path::new(&inside);
            seen.push(event);
            if done {
                break;
            }
        }
    })
    .await;
    let outside = fx.outside.to_string_lossy().into_owned();
    let through_link = fx.abs("link/");
    let leaked: Vec<_> = seen
        .iter()
        .filter(|e| e.path.contains("secret") || e.path.starts_with(&outside) || e.path.starts_with(&through_link))
        .collect();
    assert!(leaked.is_empty(), "events from outside the root: {leaked:?}");
    // Named as every other answer names it (the root watched as `.`, too).
    assert_eq!(seen.last().unwrap().path, inside);
    std::fs::remove_file(fx.outside.join("secret.txt")).unwrap();
    std::fs::remove_dir_all(fx.outside.join("deeper")).unwrap();
}

/// No set-user-id or set-group-id bit is made through the API: a mode that asks for
/// them is written without them, and a rewrite that keeps the old file's mode keeps
/// it without them.
#[tokio::test]
async fn set_id_bits_are_never_set_through_the_file_api() {
    let fx = fixture().await;
    let http = reqwest::Client::new();
    let put = |path: &str, query: &str| {
        http.put(format!("{}/v1/fs/file?path={path}{query}", fx.server.url)).bearer_auth(TOKEN).body("#!/bin/sh\n")
    };
    let mode_of = |name: &str| std::fs::metadata(fx.root.join(name)).unwrap().permissions().mode() & 0o7777;
    let response = put("tool", "&mode=6755").send().await.unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(mode_of("tool"), 0o755, "PUT mode=6755");
    let entry: FsEntry = response.json().await.unwrap();
    assert_eq!(entry.mode, 0o755);
    // A set-id file that is there already (made by a program in the sandbox), rewritten
    // without a mode.
    std::fs::write(fx.root.join("old"), "old").unwrap();
    std::fs::set_permissions(fx.root.join("old"), PermissionsExt::from_mode(0o6750)).unwrap();
    assert_eq!(mode_of("old"), 0o6750, "this filesystem keeps set-id bits");
    assert_eq!(put("old", "").send().await.unwrap().status(), 200);
    assert_eq!(mode_of("old"), 0o750, "a rewrite kept the old file's set-id bits");
    let written = fx.server.client.fs_write("old", "again".into(), &options(Some(0o4700), false)).await.unwrap();
    assert_eq!((written.mode, mode_of("old")), (0o700, 0o700));
}
