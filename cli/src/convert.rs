//! `agentplane node-agent convert --agent AGENT`: an agent's native transcript on
//! stdin, its universal events on stdout, one JSON envelope a line: what a session of
//! that agent would record, for checking a converter against a transcript without
//! running the agent.

use std::io::{BufRead, Write};

use agentplane_node_agent::agents::AgentId;
use agentplane_node_agent::agents::convert::{Converter, unparsed};
use agentplane_node_agent::universal::{EventData, EventSource, UniversalEvent};
use anyhow::Context;
use clap::Args;
use time::OffsetDateTime;

/// The `sessionId` of every converted event.
const SESSION_ID: &str = "convert";

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// Whose transcript stdin holds: claude, codex, opencode, pi, gemini, amp.
    #[arg(long)]
    agent: String,
}

/// What one input line is to the converter.
#[derive(Debug, PartialEq, Eq)]
enum Line<'a> {
    /// A native line (a JSON line, or an SSE `data:` payload).
    Native(&'a str),
    /// Blank lines and the rest of SSE framing (`event:`, `id:`, `retry:`, comments).
    Framing,
}

fn classify(line: &str) -> Line<'_> {
    if let Some(data) = line.strip_prefix("data:") {
        return Line::Native(data.strip_prefix(' ').unwrap_or(data));
    }
    let framing = line.trim().is_empty()
        || line.starts_with(':')
        || ["event:", "id:", "retry:"].iter().any(|field| line.starts_with(field));
    if framing { Line::Framing } else { Line::Native(line) }
}

/// Converts one native line, never to nothing and never with a panic: a converter
/// that returns no events or panics yields `agent.unparsed`, as a line it did not know.
fn convert_line(converter: &mut dyn Converter, line: &str) -> Vec<EventData> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| converter.convert(line))) {
        Ok(events) if events.is_empty() => vec![unparsed("the converter returned no event for this line")],
        Ok(events) => events,
        Err(_) => vec![unparsed("the converter failed on this line")],
    }
}

/// Exit 0 once stdin is converted, 2 for an agent that is not known (or the mock); errors reading
/// stdin or writing stdout are errors (exit 1), except a reader that went away.
pub async fn run(args: ConvertArgs) -> anyhow::Result<i32> {
    let Some(agent) = AgentId::parse(&args.agent).filter(|a| a.package().is_some()) else {
        let known: Vec<&str> = AgentId::ALL.iter().filter(|a| a.package().is_some()).map(|a| a.as_str()).collect();
        let why = if AgentId::parse(&args.agent).is_some() {
            "is built in and has no native transcript"
        } else {
            "is unknown"
        };
        eprintln!("error: agent {:?} {why}: give --agent one of {}", args.agent, known.join(", "));
        return Ok(2);
    };
    // Reading stdin blocks: on a thread of its own, not the async runtime's.
    tokio::task::spawn_blocking(move || convert(agent, std::io::stdin().lock(), std::io::stdout().lock()))
        .await
        .context("the converter thread failed")??;
    Ok(0)
}

fn convert(agent: AgentId, input: impl BufRead, output: impl Write) -> anyhow::Result<()> {
    let mut converter = agent.converter();
    let mut output = std::io::BufWriter::new(output);
    let mut sequence = 0u64;
    for line in input.split(b'\n') {
        let line = line.context("reading stdin")?;
        // A transcript is text; a stray invalid byte must not stop the conversion.
        let line = String::from_utf8_lossy(&line);
        let line = line.strip_suffix('\r').unwrap_or(&line);
        let Line::Native(native) = classify(line) else { continue };
        for data in convert_line(converter.as_mut(), native) {
            sequence += 1;
            let event = UniversalEvent {
                sequence,
                time: OffsetDateTime::now_utc(),
                session_id: SESSION_ID.into(),
                agent_session_id: None,
                source: EventSource::Agent,
                data,
                raw: Some(native.to_string()),
            };
            let written = serde_json::to_writer(&mut output, &event)
                .map_err(std::io::Error::from)
                .and_then(|()| output.write_all(b"\n"));
            if let Err(error) = written {
                return gone_or(error);
            }
        }
    }
    output.flush().or_else(gone_or)
}

/// A reader that stopped reading (`| head`) is no failure of the conversion.
fn gone_or(error: std::io::Error) -> anyhow::Result<()> {
    if error.kind() == std::io::ErrorKind::BrokenPipe { Ok(()) } else { Err(error).context("writing stdout") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_framing_is_skipped_and_data_payloads_kept() {
        assert_eq!(classify(r#"{"type":"x"}"#), Line::Native(r#"{"type":"x"}"#));
        assert_eq!(classify(r#"data: {"type":"x"}"#), Line::Native(r#"{"type":"x"}"#));
        assert_eq!(classify(r#"data:{"type":"x"}"#), Line::Native(r#"{"type":"x"}"#));
        for framing in ["", "  ", "event: message", "id: 7", "retry: 100", ": keep-alive"] {
            assert_eq!(classify(framing), Line::Framing, "{framing:?}");
        }
    }

    struct Silent;
    impl Converter for Silent {
        fn convert(&mut self, line: &str) -> Vec<EventData> {
            assert!(line != "boom", "a converter bug");
            Vec::new()
        }
    }

    #[test]
    fn a_converter_that_says_nothing_or_panics_still_yields_an_event() {
        for line in ["quiet", "boom"] {
            let events = convert_line(&mut Silent, line);
            assert!(matches!(events.as_slice(), [EventData::AgentUnparsed { reason: Some(_) }]), "{line}: {events:?}");
        }
    }
}
