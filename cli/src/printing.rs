//! Output formats: a table for people, JSON and YAML for programs.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::ValueEnum;
use serde::Serialize;

/// Set by the long-running commands (`up`, `controller`, `node-agent`): for them a
/// closed stdout is no reason to stop, since stopping early would skip the shutdown
/// that stops what they run.
static DAEMON: AtomicBool = AtomicBool::new(false);

pub fn running_a_daemon() {
    DAEMON.store(true, Ordering::Relaxed);
}

/// What `println!` and `print!` do in this crate. A command whose reader went away
/// (`| head`) ends at once with status 0, silently, as when `head` has what it wanted;
/// any other failure to write is an error on stderr and status 1. Never a panic.
pub fn write_stdout(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(error) = out.write_fmt(args).and_then(|()| out.flush()) {
        if DAEMON.load(Ordering::Relaxed) {
            return;
        }
        if error.kind() != std::io::ErrorKind::BrokenPipe {
            write_stderr(format_args!("error: writing to stdout: {error}\n"));
            std::process::exit(1);
        }
        std::process::exit(0);
    }
}

/// What `eprintln!` does in this crate: a closed stderr leaves nowhere to report
/// anything, so the text is dropped rather than panicking.
pub fn write_stderr(args: std::fmt::Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// True when `error` comes from writing to our stdout after its reader went away.
/// A broken pipe elsewhere (a socket to a node agent) is a real error, so stdout
/// itself is asked: the write end of a pipe whose reader closed polls as `POLLERR`.
pub fn is_closed_pipe(error: &anyhow::Error) -> bool {
    let broken_pipe = error.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    });
    broken_pipe && stdout_is_closed()
}

fn stdout_is_closed() -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::empty())];
    poll(&mut fds, PollTimeout::ZERO).is_ok()
        && fds[0].revents().is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP))
}

#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum Format {
    #[default]
    Table,
    Json,
    Yaml,
}

pub fn print_structured<T: Serialize>(format: Format, value: &T) -> anyhow::Result<()> {
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(value)?),
        Format::Yaml => print!("{}", serde_yaml_ng::to_string(value)?),
        Format::Table => unreachable!("tables are printed by the caller"),
    }
    Ok(())
}

/// Left-aligned columns, two spaces apart, like kubectl.
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let widths = column_widths(headers, rows);
    println!("{}", format_row(&widths, headers));
    for row in rows {
        println!("{}", format_row(&widths, row));
    }
}

/// The width of each column: its widest cell.
pub fn column_widths(headers: &[&str], rows: &[Vec<String>]) -> Vec<usize> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(visible(cell).chars().count());
        }
    }
    widths
}

/// `text` with every control character but tab shown as an escape (`\u{1b}`): a status
/// quotes what node agents answered, and a node agent is hostile input, which must not
/// move the cursor, retitle the terminal or hide a line from whoever reads `get`.
pub fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\t') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() && c != '\t' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// One line of a table; a cell wider than its column pushes the rest right.
pub fn format_row(widths: &[usize], cells: &[impl AsRef<str>]) -> String {
    let last = cells.len().saturating_sub(1);
    let mut out = String::new();
    for (i, cell) in cells.iter().enumerate() {
        let cell = visible(cell.as_ref());
        if i == last {
            out.push_str(&cell);
        } else {
            out.push_str(&format!("{cell:<width$}  ", width = widths.get(i).copied().unwrap_or(0)));
        }
    }
    out.trim_end().to_string()
}

/// "5s", "3m", "2h", "4d": how long ago, as kubectl shows age.
pub fn age(since: time::OffsetDateTime) -> String {
    age_seconds((time::OffsetDateTime::now_utc() - since).whole_seconds())
}

/// The age of a Kubernetes timestamp (`creationTimestamp`, `lastTransitionTime`).
pub fn age_of(since: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> String {
    age_seconds(k8s_openapi::jiff::Timestamp::now().as_second() - since.0.as_second())
}

fn age_seconds(seconds: i64) -> String {
    match seconds.max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// A word as a POSIX shell reads it back: as it is when that is safe, else in single
/// quotes. Hints the CLI prints are meant to be pasted.
pub fn shell_quote(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_-./:=@%+,".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// ` --flag VALUE` for each flag given, quoted for a shell: what a hint must carry to
/// find the same store when pasted.
pub fn flags(given: &[(&str, Option<&std::ffi::OsStr>)]) -> String {
    given
        .iter()
        .filter_map(|(flag, value)| value.map(|v| format!(" {flag} {}", shell_quote(&v.to_string_lossy()))))
        .collect()
}

/// A time as people read it in a header: `2026-11-25 01:02:03 UTC`.
pub fn clock(at: time::OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    let format = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    at.format(&format).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_from_a_status_are_shown_not_obeyed() {
        assert_eq!(visible("plain\ttext"), "plain\ttext");
        assert_eq!(visible("\u{1b}]0;owned\u{7}x\ny"), "\\u{1b}]0;owned\\u{7}x\\ny");
        assert_eq!(format_row(&[3], &["a\u{1b}[2J", "b"]), "a\\u{1b}[2J  b");
    }

    #[test]
    fn a_quoted_word_reads_back_the_same_in_a_real_shell() {
        for word in
            ["d", "my d", "it's", "a\"b", "$(id)", "`id`", "x;y", "*", "", "tab\there", "ünï", "--dir=x", "a\nb"]
        {
            let out = std::process::Command::new("sh")
                .args(["-c", &format!("printf %s {}", shell_quote(word))])
                .output()
                .unwrap();
            assert_eq!(String::from_utf8(out.stdout).unwrap(), word, "{}", shell_quote(word));
        }
        assert_eq!(shell_quote("/tmp/d"), "/tmp/d", "a plain path stays as it is");
    }

    #[test]
    fn flags_carry_only_what_was_given() {
        let dir = std::ffi::OsStr::new("my d");
        assert_eq!(flags(&[("--dir", Some(dir)), ("--state-dir", None)]), " --dir 'my d'");
        assert_eq!(flags(&[("--context", None)]), "");
    }
}
