//! `agentplane diff session/NAME`: the changes in a Session's git workspace since the
//! commit it was cloned at, as a unified diff, from the node agent it runs on (found
//! the way `logs` finds it). Streamed to stdout as it arrives; coloured on a terminal.

use agentplane_node_agent::ProblemCode;
use std::io::{IsTerminal, Write};

use agentplane_controller::session::node_session_id;
use agentplane_crds::{Kind, ResourceRef};
use anyhow::bail;
use clap::Args;
use futures_util::StreamExt;

use crate::logs::{Located, hint_flags, locate};
use crate::printing::shell_quote;
use crate::store::{Store, StoreArgs};
use crate::workspace::ref_name;

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// session/NAME (or NAME) of a Session with `spec.workspace.git`.
    #[arg(add = clap_complete::ArgValueCandidates::new(crate::completion::resource_refs))]
    session: String,
    /// Colour the diff: `auto` (on a terminal), `always` or `never`.
    #[arg(long, value_enum, default_value = "auto")]
    color: ColorWhen,
    /// The namespace of the resource (default: the kubeconfig context's, else `default`).
    #[arg(short, long)]
    namespace: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

pub async fn diff(args: DiffArgs) -> anyhow::Result<i32> {
    let name = match ResourceRef::parse_or(&args.session, Some(Kind::Session))? {
        ResourceRef { kind: Kind::Session, name } => name,
        other => bail!("diff shows a Session's workspace: name session/NAME, not {other}"),
    };
    let store = Store::open(&args.store).await?;
    let Located { key, client, uid, .. } =
        locate(&store, &args.store, args.namespace.as_deref(), Kind::Session, &name).await?;
    let id = node_session_id(&uid);
    let mut chunks = match client.session_diff(&id).await {
        Ok(chunks) => chunks,
        Err(e) if e.code() == Some(ProblemCode::SessionNotFound) => bail!(
            "{} has no session on the node agent yet: see `agentplane describe session {}{}`",
            ref_name(&key),
            shell_quote(&name),
            hint_flags(&store, &args.store, &key)
        ),
        Err(e) => return Err(e.into()),
    };
    let color = match args.color {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => std::io::stdout().is_terminal(),
    };
    let mut out = std::io::stdout().lock();
    let mut painter = Painter::default();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        let written = if color { painter.write(&mut out, &chunk) } else { out.write_all(&chunk) };
        match written {
            Ok(()) => {}
            // The reader went away (`| head`): what it read is what it wanted.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
            Err(e) => return Err(e.into()),
        }
    }
    if color {
        painter.finish(&mut out)?;
    }
    match out.flush() {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(0),
    }
}

/// Colours a diff line by line as git does (headers bold, hunks cyan, removed red,
/// added green); a line split between chunks waits for its end.
#[derive(Default)]
struct Painter {
    partial: Vec<u8>,
}

impl Painter {
    fn write(&mut self, out: &mut impl Write, chunk: &[u8]) -> std::io::Result<()> {
        self.partial.extend_from_slice(chunk);
        let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') else { return Ok(()) };
        let rest = self.partial.split_off(end + 1);
        let whole = std::mem::replace(&mut self.partial, rest);
        for line in whole.split_inclusive(|b| *b == b'\n') {
            paint(out, line)?;
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        let rest = std::mem::take(&mut self.partial);
        if rest.is_empty() { Ok(()) } else { paint(out, &rest) }
    }
}

fn paint(out: &mut impl Write, line: &[u8]) -> std::io::Result<()> {
    let colour: &[u8] = if line.starts_with(b"diff --git")
        || line.starts_with(b"index ")
        || line.starts_with(b"--- ")
        || line.starts_with(b"+++ ")
    {
        b"\x1b[1m"
    } else if line.starts_with(b"@@") {
        b"\x1b[36m"
    } else if line.starts_with(b"-") {
        b"\x1b[31m"
    } else if line.starts_with(b"+") {
        b"\x1b[32m"
    } else {
        return out.write_all(line);
    };
    let (text, newline) = match line.strip_suffix(b"\n") {
        Some(text) => (text, &b"\n"[..]),
        None => (line, &b""[..]),
    };
    out.write_all(colour)?;
    out.write_all(text)?;
    out.write_all(b"\x1b[0m")?;
    out.write_all(newline)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_coloured_whole_across_chunks() {
        let mut painter = Painter::default();
        let mut out = Vec::new();
        painter.write(&mut out, b"--- a/x\n+++ b/x\n@@ -1 +1,2 @@\n hel").unwrap();
        painter.write(&mut out, b"lo\n+chan").unwrap();
        painter.write(&mut out, b"ged\n-gone").unwrap();
        painter.finish(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "\x1b[1m--- a/x\x1b[0m\n\x1b[1m+++ b/x\x1b[0m\n\x1b[36m@@ -1 +1,2 @@\x1b[0m\n hello\n\x1b[32m+changed\x1b[0m\n\x1b[31m-gone\x1b[0m"
        );
    }
}
