//! What `describe` shows that others report of a resource: the events its reporters
//! recorded (cluster store), and the last lines a Process printed (its node agent).

use agentplane_controller::process::node_process_id;
use agentplane_node_agent::ProblemCode;
use agentplane_node_agent::client::Client;
use agentplane_node_agent::model::{OutputEncoding, OutputQuery, OutputStream};
use base64::Engine as _;

use super::columns::enum_word;
use super::layout::{one_line, print_indented_table};
use crate::cluster::event_time;
use crate::printing::age_of;
use crate::store::Events;

/// What happened to the resource, as its reporters recorded it (cluster store).
pub(super) fn print_events(events: Events) {
    let events = match events {
        Events::NotKept => return,
        Events::Unavailable(why) => {
            println!("Events: ({why})");
            return;
        }
        Events::Listed(events) => events,
    };
    println!("Events:");
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            let from = e
                .reporting_component
                .clone()
                .filter(|c| !c.is_empty())
                .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()));
            vec![
                e.type_.clone().unwrap_or_default(),
                e.reason.clone().unwrap_or_default(),
                event_time(e).as_ref().map(age_of).unwrap_or_default(),
                from.unwrap_or_default(),
                one_line(&e.message.clone().unwrap_or_default(), 100),
            ]
        })
        .collect();
    print_indented_table(&["TYPE", "REASON", "AGE", "FROM", "MESSAGE"], &rows);
}

/// The last lines a Process printed, when its node agent can tell.
pub(super) async fn print_output_tail(
    source: Result<Client, String>,
    process: &agentplane_crds::Process,
    lines: usize,
) {
    let (client, uid) = match (source, process.metadata.uid.as_deref()) {
        (Ok(client), Some(uid)) => (client, uid),
        (Err(why), _) => return println!("Output: ({why})"),
        (Ok(_), None) => return println!("Output: (no uid: not started)"),
    };
    let id = node_process_id(uid);
    // A terminal has one stream; pipes have two, each worth seeing.
    let streams = if process.spec.tty.is_some() {
        vec![None]
    } else {
        vec![Some(OutputStream::Stdout), Some(OutputStream::Stderr)]
    };
    let mut printed = false;
    for stream in streams {
        let query =
            OutputQuery { offset: None, stream, limit: None, encoding: Some(OutputEncoding::Base64), wait: None };
        let chunk = match client.output(&id, &query).await {
            Ok(chunk) => chunk,
            Err(e) if e.code() == Some(ProblemCode::ProcessNotFound) => {
                println!("Output: (not started on the node agent)");
                return;
            }
            Err(e) => {
                println!("Output: (the node agent cannot be asked: {e})");
                return;
            }
        };
        let bytes = base64::engine::general_purpose::STANDARD.decode(chunk.data).unwrap_or_default();
        let all = match &process.spec.tty {
            Some(size) => screen_lines(&bytes, size.rows, size.cols),
            None => plain_lines(&bytes),
        };
        if all.is_empty() {
            continue;
        }
        let shown = &all[all.len().saturating_sub(lines)..];
        println!("Output ({}, last {} lines):", enum_word(&chunk.stream), shown.len());
        for line in shown {
            println!("  {line}");
        }
        printed = true;
    }
    if !printed {
        println!("Output: <none>");
    }
}

/// What a terminal shows after `bytes`: the screen as a terminal of that size renders
/// it (cursor moves, clears, prompts redrawn, colours: what a person saw), its rows
/// down to the last one with text. Never a control sequence, which would act on the
/// terminal `describe` prints to.
fn screen_lines(bytes: &[u8], rows: u16, cols: u16) -> Vec<String> {
    let mut parser = vt100::Parser::new(rows.max(1), cols.max(1), 0);
    parser.process(bytes);
    let mut lines: Vec<String> = parser.screen().rows(0, cols.max(1)).map(|row| row.trim_end().to_string()).collect();
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    lines.iter().map(|line| defused(line)).collect()
}

/// A pipe's lines with escape sequences (colours, cursor moves) taken out, and any
/// other control character shown as `.`.
fn plain_lines(bytes: &[u8]) -> Vec<String> {
    let stripped = strip_ansi_escapes::strip(bytes);
    String::from_utf8_lossy(&stripped).lines().map(defused).collect()
}

fn defused(line: &str) -> String {
    line.chars().map(|c| if c.is_control() && c != '\t' { '.' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::{plain_lines, screen_lines};

    /// bash's prompt as a terminal gets it: bracketed paste on and off, a title, a
    /// line erased and redrawn. What is shown is what a person saw, no escape left.
    #[test]
    fn a_terminal_tail_is_the_screen_it_drew_and_a_pipe_tail_has_no_escapes() {
        let bytes = b"\x1b]0;user@host: ~\x07\x1b[?2004huser@host:~$ echo hi\r\n\x1b[?2004l\rhi\r\n\
                      \x1b[?2004huser@host:~$ typo\x1b[K\r\x1b[Kuser@host:~$ ";
        let lines = screen_lines(bytes, 24, 80);
        assert_eq!(lines, ["user@host:~$ echo hi", "hi", "user@host:~$"]);
        assert!(lines.iter().all(|l| !l.contains('\x1b') && !l.contains("[?2004")), "{lines:?}");
        assert_eq!(plain_lines(b"\x1b[1;31mred\x1b[0m\nplain\x07\n"), ["red", "plain"]);
    }
}
