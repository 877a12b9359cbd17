//! `agentplane logs` and `agentplane attach` for a Process resource, and `logs` for a
//! Session (its universal events): the store gives the uid, the uid the node-agent
//! id, and the store the node agent (a running `agentplane up`'s, or in a cluster the
//! one the resource's Sandbox names).

use agentplane_controller::process::node_process_id;
use agentplane_controller::session::node_session_id;
use agentplane_crds::{Key, Kind, Object, ResourceRef};
use agentplane_node_agent::ProblemCode;
use agentplane_node_agent::client::{Client, SessionStreamItem};
use agentplane_node_agent::model::{
    InterleavedOutputQuery, OutputEncoding, OutputQuery, OutputStream, ProcessInfo, ProcessStatus, SessionEventsQuery,
};
use agentplane_node_agent::universal::UniversalEvent;
use anyhow::bail;
use base64::Engine as _;
use clap::Args;
use futures_util::StreamExt;

use crate::agent_session::event_lines;
use crate::get::{namespace_flag, require, store_flags};
use crate::printing::shell_quote;
use crate::proc::StreamArg;
use crate::resources::kind_word;
use crate::store::{Store, StoreArgs};
use crate::workspace::{parse_duration, parse_one, ref_name};

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// process/NAME (or NAME): its output; session/NAME: its events.
    #[arg(add = clap_complete::ArgValueCandidates::new(crate::completion::resource_refs))]
    process: String,
    /// Keep following until the process exits (the session ends).
    #[arg(short, long)]
    follow: bool,
    /// For a session: `text` (one line an event, text deltas left out) or `json`
    /// (the universal events as they are, one a line).
    #[arg(short, long, value_enum, default_value = "text")]
    output: EventFormat,
    /// Only stdout or only stderr (processes without a terminal). Both by default.
    #[arg(long, value_enum)]
    stream: Option<StreamArg>,
    /// Only the last N lines printed so far (a session: its last N events), then, with
    /// -f, all that follows.
    #[arg(long, value_name = "N")]
    tail: Option<usize>,
    /// Only output printed in this last while (60s, 5m, 2h), by when the node agent
    /// received it (a session: events of that while). (On a terminal, which keeps no time for each line: output printed
    /// before now is shown whole when the process started within that while, left out
    /// when it ended before it, and shown with a note otherwise.)
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    since: Option<std::time::Duration>,
    /// Each line prefixed with when the node agent received it (RFC 3339, UTC; a
    /// session: each event with its time). (On a
    /// terminal, output printed before this command started has only a bound: `<=TIME`.)
    #[arg(long)]
    timestamps: bool,
    /// The namespace of the resource (default: the kubeconfig context's, else `default`).
    #[arg(short, long)]
    namespace: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Args, Debug)]
pub struct AttachArgs {
    /// process/NAME (or NAME) of a process with `tty` (or `stdin`) in its spec.
    #[arg(add = clap_complete::ArgValueCandidates::new(crate::completion::resource_refs))]
    process: String,
    /// The namespace of the resource (default: the kubeconfig context's, else `default`).
    #[arg(short, long)]
    namespace: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
}

/// A resource of the store with its node agent, and its uid there.
pub(crate) struct Located {
    pub key: Key,
    pub object: Object,
    pub client: Client,
    pub uid: String,
}

/// The resource `kind`/`name` of the store, and the node agent it runs on.
pub(crate) async fn locate(
    store: &Store,
    args: &StoreArgs,
    namespace: Option<&str>,
    kind: Kind,
    name: &str,
) -> anyhow::Result<Located> {
    let key = Key { kind, namespace: store.namespace(namespace), name: name.to_string() };
    let object = require(store, args, &key).await?;
    let Some(uid) = object.meta().uid.clone() else { bail!("{} has no uid in its record", ref_name(&key)) };
    let client = store.node_agent(&object).await?;
    Ok(Located { key, object, client, uid })
}

/// The node agent and the id of a Process resource's process there.
async fn locate_process(
    args: &StoreArgs,
    namespace: Option<&str>,
    word: &str,
) -> anyhow::Result<(Client, String, agentplane_crds::Process)> {
    let store = Store::open(args).await?;
    let Located { key, object, client, uid } =
        locate(&store, args, namespace, Kind::Process, &parse_one(&[word.to_string()], Kind::Process)?).await?;
    let Object::Process(process) = object else { bail!("{key} is not a Process") };
    let id = node_process_id(&uid);
    match client.get_process(&id).await {
        Ok(_) => Ok((client, id, process)),
        Err(e) if e.code() == Some(ProblemCode::ProcessNotFound) => {
            let phase = process.status.as_ref().and_then(|s| s.phase).map_or("Pending".into(), |p| format!("{p:?}"));
            bail!(
                "{} has not run on the node agent (phase {phase}): see `agentplane describe process {}{}`",
                ref_name(&key),
                shell_quote(&key.name),
                hint_flags(&store, args, &key)
            )
        }
        Err(e) => Err(e.into()),
    }
}

/// What a hint about `key` carries to be pasted: its namespace and the store's flags.
pub(crate) fn hint_flags(store: &Store, args: &StoreArgs, key: &Key) -> String {
    format!("{}{}", namespace_flag(store, &key.namespace), store_flags(args))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EventFormat {
    Text,
    Json,
}

pub async fn logs(args: LogsArgs) -> anyhow::Result<i32> {
    if let Ok(ResourceRef { kind: Kind::Session, name }) = args.process.parse::<ResourceRef>() {
        return session_logs(&args, &name).await;
    }
    // `parse_one` would say "acts on a process": true of `attach`, half the story here.
    if let Ok(ResourceRef { kind, .. }) = args.process.parse::<ResourceRef>()
        && kind != Kind::Process
    {
        bail!("logs acts on a process (its output) or a session (its events), not a {}", kind_word(kind));
    }
    let (client, id, _) = locate_process(&args.store, args.namespace.as_deref(), &args.process).await?;
    process_logs(&client, &id, &args).await
}

/// A Process's output as `kubectl logs` shows a pod's: both streams (or the terminal),
/// what was printed so far, then with `-f` the rest in the order it arrives.
async fn process_logs(client: &Client, id: &str, args: &LogsArgs) -> anyhow::Result<i32> {
    let info = client.get_process(id).await?;
    if !info.pty {
        return pipe_logs(client, id, args).await;
    }
    terminal_logs(client, id, args, &info).await
}

/// stdout and stderr interleaved as the node agent received them, a whole line at a
/// time, each line stamped with when the chunk that ended it arrived.
async fn pipe_logs(client: &Client, id: &str, args: &LogsArgs) -> anyhow::Result<i32> {
    let wanted = |stream: OutputStream| match args.stream {
        None => true,
        Some(StreamArg::Stdout) => stream == OutputStream::Stdout,
        Some(StreamArg::Stderr) => stream == OutputStream::Stderr,
    };
    let since = match args.since {
        Some(since) => {
            let ago = time::Duration::try_from(since).unwrap_or(time::Duration::MAX);
            let cutoff = time::OffsetDateTime::now_utc().checked_sub(ago).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
            Some(cutoff.format(&time::format_description::well_known::Rfc3339)?)
        }
        None => None,
    };
    let mut query =
        InterleavedOutputQuery { seq: Some(0), since, limit: None, encoding: Some(OutputEncoding::Base64), wait: None };
    let mut lines = MergedLines::default();
    // What was printed before now: read whole, so that `--tail` counts the lines of both streams.
    let mut backlog = Vec::new();
    // Up to what was there at the first read: a busy program does not keep it from ending.
    let mut end = None;
    let eof = loop {
        let page = client.interleaved_output(id, &query).await?;
        let end = *end.get_or_insert(page.next_seq);
        if let Some(gap) = page.gap {
            eprintln!("agentplane: the order of {} chunks of output is no longer kept", gap.to - gap.from);
        }
        let empty = page.frames.is_empty();
        for frame in page.frames.iter().filter(|f| wanted(f.stream)) {
            lost(frame.stream, frame.gap);
            let bytes = base64::engine::general_purpose::STANDARD.decode(&frame.data)?;
            lines.push(frame.stream, &bytes, frame.time, &mut backlog);
        }
        query.seq = Some(page.next_seq);
        // `since` applies to the backlog only: what follows is new anyway.
        query.since = None;
        if empty || page.eof || page.next_seq >= end {
            break page.eof;
        }
    };
    if !args.follow || eof {
        lines.flush(&mut backlog);
    }
    let skip = args.tail.map_or(0, |n| backlog.len().saturating_sub(n));
    let print = |batch: &[(time::OffsetDateTime, Vec<u8>)]| -> anyhow::Result<bool> {
        printed(write_stamped(batch, args.timestamps))
    };
    if !print(&backlog[skip..])? || !args.follow || eof {
        return Ok(0);
    }
    query.wait = Some(30.0);
    loop {
        let page = client.interleaved_output(id, &query).await?;
        if let Some(gap) = page.gap {
            eprintln!("agentplane: the order of {} chunks of output is no longer kept", gap.to - gap.from);
        }
        let mut batch = Vec::new();
        let empty = page.frames.is_empty();
        for frame in page.frames.iter().filter(|f| wanted(f.stream)) {
            lost(frame.stream, frame.gap);
            let bytes = base64::engine::general_purpose::STANDARD.decode(&frame.data)?;
            lines.push(frame.stream, &bytes, frame.time, &mut batch);
        }
        query.seq = Some(page.next_seq);
        // Output a background child keeps open ends with the process, as with the terminal.
        let done = page.eof || (empty && page.status == ProcessStatus::Exited);
        if done {
            lines.flush(&mut batch);
        }
        if !print(&batch)? || done {
            return Ok(0);
        }
    }
}

fn lost(stream: OutputStream, gap: Option<agentplane_node_agent::model::Gap>) {
    if let Some(gap) = gap {
        eprintln!("agentplane: {} bytes of {} were lost (no longer kept)", gap.to - gap.from, stream_word(stream));
    }
}

/// Lines of two streams as they complete, each with the time of the chunk that ended it.
#[derive(Default)]
struct MergedLines {
    /// Each stream's unfinished last line, and the time of its newest chunk.
    partial: std::collections::BTreeMap<&'static str, (Vec<u8>, time::OffsetDateTime)>,
}

impl MergedLines {
    fn push(
        &mut self,
        stream: OutputStream,
        bytes: &[u8],
        at: time::OffsetDateTime,
        out: &mut Vec<(time::OffsetDateTime, Vec<u8>)>,
    ) {
        let (pending, time) = self.partial.entry(stream_word(stream)).or_insert_with(|| (Vec::new(), at));
        *time = at;
        for piece in bytes.split_inclusive(|&b| b == b'\n') {
            pending.extend_from_slice(piece);
            if piece.ends_with(b"\n") {
                out.push((at, std::mem::take(pending)));
            }
        }
    }

    /// The unfinished last lines of streams that ended, with the newline they lack, in time order.
    fn flush(&mut self, out: &mut Vec<(time::OffsetDateTime, Vec<u8>)>) {
        let mut rest: Vec<_> = std::mem::take(&mut self.partial)
            .into_values()
            .filter(|(line, _)| !line.is_empty())
            .map(|(mut line, at)| {
                line.push(b'\n');
                (at, line)
            })
            .collect();
        rest.sort_by_key(|(at, _)| *at);
        out.extend(rest);
    }
}

/// Writes lines, each prefixed with its time when asked (RFC 3339 in UTC, as `kubectl logs --timestamps`).
fn write_stamped(lines: &[(time::OffsetDateTime, Vec<u8>)], timestamps: bool) -> anyhow::Result<()> {
    use std::io::Write;
    if lines.is_empty() {
        return Ok(());
    }
    let mut stdout = std::io::stdout().lock();
    for (at, line) in lines {
        if timestamps {
            let at = at.to_offset(time::UtcOffset::UTC).format(&time::format_description::well_known::Rfc3339)?;
            stdout.write_all(at.as_bytes())?;
            stdout.write_all(b" ")?;
        }
        stdout.write_all(line)?;
    }
    stdout.flush()?;
    Ok(())
}

/// A terminal's output: one stream, already in order, with no time for each line.
async fn terminal_logs(client: &Client, id: &str, args: &LogsArgs, info: &ProcessInfo) -> anyhow::Result<i32> {
    let streams = vec![OutputStream::Pty];
    let started = time::OffsetDateTime::now_utc();
    // What the backlog may hold, by when it was printed.
    let backlog_shown = match args.since {
        None => true,
        Some(since) => {
            let cutoff = started - since;
            match info.exited_at {
                Some(exited) if exited < cutoff => false,
                _ if info.created_at >= cutoff => true,
                _ => {
                    eprintln!(
                        "agentplane: the node agent keeps no time for each line: the output printed before now is shown whole (the process started {} ago, before the --since window)",
                        crate::printing::age(info.created_at)
                    );
                    true
                }
            }
        }
    };
    let mut out = Lines::new(args.timestamps);
    // Every stream read before any is printed: the backlog is what was printed before
    // now, and what comes after is followed as it comes.
    let mut backlogs = Vec::new();
    let mut offsets = Vec::new();
    for &stream in &streams {
        let (bytes, next) = read_all(client, id, stream).await?;
        offsets.push((stream, next));
        backlogs.push((stream, bytes));
    }
    // Printed before it was read: at most when it exited, or now.
    let backlog_bound = info.exited_at.unwrap_or_else(time::OffsetDateTime::now_utc);
    for (stream, bytes) in backlogs {
        if !backlog_shown {
            continue;
        }
        let mut bytes = &bytes[..];
        if let Some(n) = args.tail {
            bytes = last_lines(bytes, n);
        }
        out.push(stream, bytes, Some(backlog_bound))?;
        if !args.follow {
            out.flush(stream, Some(backlog_bound))?;
        }
    }
    if !args.follow {
        return Ok(0);
    }
    // One long poll per stream; whichever answers first is printed first.
    let poll = |stream: OutputStream, offset: u64| async move {
        let query = OutputQuery {
            offset: Some(offset),
            stream: Some(stream),
            limit: None,
            encoding: Some(OutputEncoding::Base64),
            wait: Some(30.0),
        };
        (stream, client.output(id, &query).await)
    };
    let mut polls: futures_util::stream::FuturesUnordered<_> =
        offsets.into_iter().map(|(stream, offset)| poll(stream, offset)).collect();
    while let Some((stream, chunk)) = polls.next().await {
        let chunk = chunk?;
        if let Some(gap) = chunk.gap {
            eprintln!("agentplane: {} bytes of {} were lost (no longer kept)", gap.to - gap.from, stream_word(stream));
        }
        let bytes = base64::engine::general_purpose::STANDARD.decode(&chunk.data)?;
        out.push(stream, &bytes, None)?;
        let done = chunk.eof || (bytes.is_empty() && chunk.status == ProcessStatus::Exited);
        if done {
            out.flush(stream, None)?;
        } else {
            polls.push(poll(stream, chunk.next_offset));
        }
    }
    Ok(0)
}

fn stream_word(stream: OutputStream) -> &'static str {
    match stream {
        OutputStream::Stdout => "stdout",
        OutputStream::Stderr => "stderr",
        OutputStream::Pty => "the terminal",
    }
}

/// Everything a stream holds now, and the offset after it.
async fn read_all(client: &Client, id: &str, stream: OutputStream) -> anyhow::Result<(Vec<u8>, u64)> {
    let mut all = Vec::new();
    let mut offset = 0;
    loop {
        let query = OutputQuery {
            offset: Some(offset),
            stream: Some(stream),
            limit: None,
            encoding: Some(OutputEncoding::Base64),
            wait: None,
        };
        let chunk = client.output(id, &query).await?;
        if let Some(gap) = chunk.gap {
            eprintln!("agentplane: bytes {}..{} of {} are no longer kept", gap.from, gap.to, stream_word(stream));
        }
        let bytes = base64::engine::general_purpose::STANDARD.decode(&chunk.data)?;
        all.extend_from_slice(&bytes);
        offset = chunk.next_offset;
        if bytes.is_empty() || chunk.eof {
            return Ok((all, offset));
        }
    }
}

/// The last `n` lines of `bytes` (a last line without its newline counts).
fn last_lines(bytes: &[u8], n: usize) -> &[u8] {
    if n == 0 {
        return &[];
    }
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let mut seen = 0;
    for (i, &b) in body.iter().enumerate().rev() {
        if b == b'\n' {
            seen += 1;
            if seen == n {
                return &bytes[i + 1..];
            }
        }
    }
    bytes
}

/// Output to stdout a whole line at a time, so that lines of two streams never mix;
/// each stream's unfinished last line waits for the rest.
struct Lines {
    timestamps: bool,
    partial: std::collections::BTreeMap<&'static str, Vec<u8>>,
}

impl Lines {
    fn new(timestamps: bool) -> Lines {
        Lines { timestamps, partial: Default::default() }
    }

    /// Prints the complete lines `bytes` ends (with what waited before them).
    /// `bound`: printed at or before this time (output read from before), else now.
    fn push(&mut self, stream: OutputStream, bytes: &[u8], bound: Option<time::OffsetDateTime>) -> anyhow::Result<()> {
        let pending = self.partial.entry(stream_word(stream)).or_default();
        pending.extend_from_slice(bytes);
        let Some(end) = pending.iter().rposition(|&b| b == b'\n') else { return Ok(()) };
        let rest = pending.split_off(end + 1);
        let complete = std::mem::replace(pending, rest);
        self.write(&complete, bound)
    }

    /// Prints what waits of a stream that has ended, with the newline it lacks.
    fn flush(&mut self, stream: OutputStream, bound: Option<time::OffsetDateTime>) -> anyhow::Result<()> {
        let mut rest = self.partial.remove(stream_word(stream)).unwrap_or_default();
        if rest.is_empty() {
            return Ok(());
        }
        rest.push(b'\n');
        self.write(&rest, bound)
    }

    fn write(&self, lines: &[u8], bound: Option<time::OffsetDateTime>) -> anyhow::Result<()> {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        if !self.timestamps {
            stdout.write_all(lines)?;
        } else {
            let at = bound.unwrap_or_else(time::OffsetDateTime::now_utc);
            let at = at.replace_nanosecond(0).unwrap_or(at).format(&time::format_description::well_known::Rfc3339)?;
            let prefix = if bound.is_some() { format!("<={at} ") } else { format!("{at} ") };
            for line in lines.split_inclusive(|&b| b == b'\n') {
                stdout.write_all(prefix.as_bytes())?;
                stdout.write_all(line)?;
            }
        }
        stdout.flush()?;
        Ok(())
    }
}

pub async fn attach(args: AttachArgs) -> anyhow::Result<i32> {
    let (client, id, process) = locate_process(&args.store, args.namespace.as_deref(), &args.process).await?;
    if process.spec.tty.is_none() && !process.spec.stdin {
        let name = process.metadata.name.unwrap_or_default();
        let namespace = match &args.namespace {
            Some(namespace) => format!(" -n {}", shell_quote(namespace)),
            None => String::new(),
        };
        bail!(
            "process/{name} has neither a terminal nor stdin (spec.tty, spec.stdin): follow its output with `agentplane logs -f {}{namespace}{}`",
            shell_quote(&format!("process/{name}")),
            store_flags(&args.store)
        );
    }
    let shown = format!(
        "process {}/{}",
        process.metadata.namespace.as_deref().unwrap_or("default"),
        process.metadata.name.as_deref().unwrap_or_default()
    );
    crate::attach::attach_as(&client, &id, None, Some(&shown)).await
}

/// A session's universal events: those so far, then (`-f`) the rest as they come.
async fn session_logs(args: &LogsArgs, name: &str) -> anyhow::Result<i32> {
    let store = Store::open(&args.store).await?;
    let Located { key, client, uid, .. } =
        locate(&store, &args.store, args.namespace.as_deref(), Kind::Session, name).await?;
    let flags = hint_flags(&store, &args.store, &key);
    let id = node_session_id(&uid);
    if args.stream.is_some() {
        bail!("--stream picks a process's stdout or stderr: a session has one stream of events");
    }
    // `--since` and `--tail` pick from what happened so far, as for a process: by the
    // events' own times, and counting the events this output shows (text leaves the
    // deltas out).
    let cutoff = args.since.map(|since| {
        let ago = time::Duration::try_from(since).unwrap_or(time::Duration::MAX);
        time::OffsetDateTime::now_utc().checked_sub(ago).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
    });
    let shown = |event: &UniversalEvent| {
        args.output == EventFormat::Json || event_lines(event, &|_, _| String::new()).is_some()
    };
    let mut backlog = Vec::new();
    let mut last = 0;
    loop {
        let page = match client.session_events(&id, &SessionEventsQuery { offset: Some(last), limit: Some(1000) }).await
        {
            Ok(page) => page,
            Err(e) if e.code() == Some(ProblemCode::SessionNotFound) => {
                bail!(
                    "{} has no session on the node agent yet: see `agentplane describe session {}{flags}`",
                    ref_name(&key),
                    shell_quote(name)
                )
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(gap) = &page.gap {
            eprintln!("(events {} to {} are lost)", gap.from, gap.to.saturating_sub(1));
        }
        for event in page.events {
            last = event.sequence;
            if cutoff.is_none_or(|cutoff| event.time >= cutoff) && shown(&event) {
                backlog.push(event);
            }
        }
        if !page.has_more {
            break;
        }
    }
    let skip = args.tail.map_or(0, |n| backlog.len().saturating_sub(n));
    for event in &backlog[skip..] {
        if !printed(print_event(event, args.output, name, &flags, args.timestamps))? {
            return Ok(0);
        }
    }
    if !args.follow {
        return Ok(0);
    }
    let mut events = client.session_events_sse(&id, None, Some(last)).await?;
    while let Some(item) = events.next().await {
        match item? {
            SessionStreamItem::Event(event) => {
                if !printed(print_event(&event, args.output, name, &flags, args.timestamps))? {
                    return Ok(0);
                }
            }
            SessionStreamItem::Gap(gap) => eprintln!("(events {} to {} are lost)", gap.from, gap.to.saturating_sub(1)),
        }
    }
    Ok(0)
}

/// Whether to go on: a reader that went away (`| head`) ends the listing quietly.
fn printed(result: anyhow::Result<()>) -> anyhow::Result<bool> {
    match result {
        Ok(()) => Ok(true),
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) => {
            Ok(false)
        }
        Err(e)
            if e.downcast_ref::<serde_json::Error>()
                .is_some_and(|e| e.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe)) =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

fn print_event(
    event: &UniversalEvent,
    format: EventFormat,
    session: &str,
    flags: &str,
    timestamps: bool,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if format == EventFormat::Json {
        serde_json::to_writer(&mut out, event)?;
        writeln!(out)?;
        return Ok(());
    }
    let session = shell_quote(&format!("session/{session}"));
    let answer = |id: &str, permission: bool| {
        // Pasted as it is, it runs: one decision, the others named after it.
        match permission {
            true => {
                format!("agentplane reply {session} {} --decision once{flags}, or always, or reject", shell_quote(id))
            }
            false => format!("agentplane reply {session} {} --answer ...{flags}", shell_quote(id)),
        }
    };
    if let Some(lines) = event_lines(event, &answer) {
        if timestamps {
            // The event's full time first, as kubectl's --timestamps does.
            let at =
                event.time.to_offset(time::UtcOffset::UTC).format(&time::format_description::well_known::Rfc3339)?;
            write!(out, "{at} ")?;
        }
        writeln!(out, "{lines}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::last_lines;

    #[test]
    fn the_last_lines_of_a_stream() {
        assert_eq!(last_lines(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(last_lines(b"a\nb\nc", 2), b"b\nc", "a last line without its newline counts");
        assert_eq!(last_lines(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(last_lines(b"a\nb\n", 0), b"");
        assert_eq!(last_lines(b"", 3), b"");
        assert_eq!(last_lines(b"\n\n", 1), b"\n");
    }
}
