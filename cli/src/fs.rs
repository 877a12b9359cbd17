//! `agentplane fs ls|cat|put|rm|mkdir|mv`: the file API of a node agent, from a
//! terminal, reached as `proc` reaches it (`--url`, or the `agentplane up` on
//! `--dir`). Paths are the node agent's: absolute inside its roots, or relative to
//! its first root. Contents stream both ways; nothing is held whole in memory.

use agentplane_node_agent::ProblemCode;
use agentplane_node_agent::client::{Client, ClientError};
use agentplane_node_agent::model::{FsEntries, FsEntry, FsEntryType, FsMoveRequest, FsWriteOptions};
use anyhow::Context;
use clap::{Args, Subcommand};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::printing::{Format, print_structured, print_table};
use crate::tar_stream::CHUNK;
use crate::workspace::NodeAgentTarget;

#[derive(Args, Debug)]
pub struct FsArgs {
    #[command(flatten)]
    target: NodeAgentTarget,
    #[command(subcommand)]
    command: FsCommand,
}

#[derive(Subcommand, Debug)]
enum FsCommand {
    /// List a directory (or show one file): names, or with -l a table of type, mode,
    /// size, modification time and name (`-> TARGET` for a symlink).
    Ls {
        /// Default: the node agent's first root.
        #[arg(default_value = ".")]
        path: String,
        /// The long table.
        #[arg(short = 'l')]
        long: bool,
        /// Output format of the long listing (json and yaml print the entries as the
        /// API answers them).
        #[arg(short = 'o', long, value_enum, default_value_t = Format::Table)]
        output: Format,
    },
    /// Print a file's bytes on stdout, as they arrive.
    Cat { path: String },
    /// Write a remote file from a local one (`-`: stdin), streamed; atomic on the
    /// node agent (a reader sees the old file or the new one).
    Put {
        local: String,
        remote: String,
        /// Octal permission bits (0755); default: the replaced file's, else 0644.
        #[arg(long, value_parser = parse_mode)]
        mode: Option<u32>,
        /// Create missing parent directories.
        #[arg(short, long)]
        parents: bool,
    },
    /// Remove a file, a symlink (not what it leads to), or with -r a directory and
    /// everything in it.
    Rm {
        path: String,
        #[arg(short, long)]
        recursive: bool,
    },
    /// Create a directory, and its missing parents.
    Mkdir { path: String },
    /// Rename a file or directory.
    Mv {
        from: String,
        to: String,
        /// Replace what is at TO (a file, a symlink, or an empty directory).
        #[arg(short, long)]
        force: bool,
    },
}

pub async fn run(args: FsArgs) -> anyhow::Result<i32> {
    let client = args.target.client()?;
    match args.command {
        FsCommand::Ls { path, long, output } => ls(&client, &path, long, output).await?,
        FsCommand::Cat { path } => cat(&client, &path).await?,
        FsCommand::Put { local, remote, mode, parents } => {
            let body = if local == "-" {
                reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(tokio::io::stdin(), CHUNK))
            } else {
                let file = tokio::fs::File::open(&local).await.with_context(|| format!("opening {local}"))?;
                reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(file, CHUNK))
            };
            let written = client.fs_write(&remote, body, &FsWriteOptions { mode, parents }).await?;
            println!("{}: {} bytes, {}", written.path, written.size, rwx(written.mode));
        }
        FsCommand::Rm { path, recursive } => client.fs_delete(&path, recursive).await.map_err(|e| {
            hint(e, ProblemCode::DirectoryNotEmpty, "`agentplane fs rm -r` removes it with all it holds")
        })?,
        FsCommand::Mkdir { path } => {
            client.fs_mkdir(&path).await?;
        }
        FsCommand::Mv { from, to, force } => {
            // Into a directory that is there, as `mv` does.
            let to = match client.fs_stat(&to).await {
                Ok(entry) if entry.kind == FsEntryType::Directory => {
                    let name = from.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
                    format!("{}/{name}", to.trim_end_matches('/'))
                }
                _ => to,
            };
            client
                .fs_move(&FsMoveRequest { from, to, overwrite: force })
                .await
                .map_err(|e| hint(e, ProblemCode::Conflict, "`agentplane fs mv -f` replaces it"))?;
        }
    }
    Ok(0)
}

/// The node agent's error, with what to type instead when it is `code`.
fn hint(error: ClientError, code: ProblemCode, hint: &str) -> anyhow::Error {
    if error.code() == Some(code) { anyhow::anyhow!("{error}; {hint}") } else { error.into() }
}

async fn ls(client: &Client, path: &str, long: bool, output: Format) -> anyhow::Result<()> {
    let entry = client.fs_stat(path).await?;
    // A symlink is listed as itself unless it leads to a directory (as `ls` does for
    // a path given to it).
    let listing = match entry.kind {
        FsEntryType::Directory => client.fs_entries(path).await?,
        FsEntryType::Symlink => match client.fs_entries(path).await {
            Ok(listing) => listing,
            Err(_) => FsEntries { path: entry.path.clone(), entries: vec![entry] },
        },
        _ => FsEntries { path: entry.path.clone(), entries: vec![entry] },
    };
    if !matches!(output, Format::Table) {
        return print_structured(output, &listing);
    }
    if !long {
        for entry in &listing.entries {
            println!("{}", entry.name);
        }
        return Ok(());
    }
    let rows: Vec<Vec<String>> = listing.entries.iter().map(long_row).collect();
    print_table(&["TYPE", "MODE", "SIZE", "MODIFIED", "NAME"], &rows);
    Ok(())
}

fn long_row(entry: &FsEntry) -> Vec<String> {
    let kind = match entry.kind {
        FsEntryType::File => "file",
        FsEntryType::Directory => "directory",
        FsEntryType::Symlink => "symlink",
        FsEntryType::Other => "other",
    };
    let name = match &entry.target {
        Some(target) => format!("{} -> {target}", entry.name),
        None => entry.name.clone(),
    };
    vec![kind.into(), rwx(entry.mode), entry.size.to_string(), modified(&entry.mtime), name]
}

/// `2026-11-26 09:06:28 UTC`, from the RFC 3339 time the node agent gives.
fn modified(mtime: &str) -> String {
    time::OffsetDateTime::parse(mtime, &time::format_description::well_known::Rfc3339)
        .map(crate::printing::clock)
        .unwrap_or_else(|_| mtime.to_string())
}

/// Permission bits as `ls -l` shows them: `rwxr-xr-x`, with `s`/`t` for set-id and
/// sticky bits.
pub fn rwx(mode: u32) -> String {
    let bit = |mask: u32, c: char| if mode & mask != 0 { c } else { '-' };
    let special = |exec: char, set: bool, on: char| match (set, exec != '-') {
        (false, _) => exec,
        (true, true) => on,
        (true, false) => on.to_ascii_uppercase(),
    };
    let mut out = String::with_capacity(9);
    for (shift, set, on) in [(6, mode & 0o4000 != 0, 's'), (3, mode & 0o2000 != 0, 's'), (0, mode & 0o1000 != 0, 't')] {
        out.push(bit(0o4 << shift, 'r'));
        out.push(bit(0o2 << shift, 'w'));
        out.push(special(bit(0o1 << shift, 'x'), set, on));
    }
    out
}

/// `0755`, `755`, `0o755`: octal permission bits.
fn parse_mode(text: &str) -> Result<u32, String> {
    let digits = text.trim_start_matches("0o");
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o7777 => Ok(mode),
        _ => Err(format!("{text:?} is not an octal mode like 0644 or 755")),
    }
}

async fn cat(client: &Client, path: &str) -> anyhow::Result<()> {
    let mut stream = client.fs_read(path, None).await?;
    // tokio's stdout writes on a blocking thread of its own.
    let mut stdout = tokio::io::stdout();
    while let Some(chunk) = stream.next().await {
        stdout.write_all(&chunk?).await?;
    }
    stdout.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_as_ls_shows_them() {
        assert_eq!(rwx(0o755), "rwxr-xr-x");
        assert_eq!(rwx(0o640), "rw-r-----");
        assert_eq!(rwx(0o4755), "rwsr-xr-x");
        assert_eq!(rwx(0o1777), "rwxrwxrwt");
        assert_eq!(rwx(0o2644), "rw-r-Sr--");
        assert_eq!(parse_mode("0755"), Ok(0o755));
        assert_eq!(parse_mode("644"), Ok(0o644));
        assert!(parse_mode("999").is_err());
        assert!(parse_mode("77777").is_err());
    }
}
