//! Server-sent events: the node agent's lifecycle stream, and the parser that cuts
//! every SSE body (lifecycle, session events, installs, file watches, resources) into
//! events of bounded size.

use futures_util::{Stream, StreamExt};
use reqwest::{Method, RequestBuilder};

use super::error::transport;
use super::{Client, ClientError, ClientResult, MAX_SSE_EVENT_BYTES};

impl Client {
    /// Lifecycle events over SSE, resuming after `last_event_id` when given.
    pub async fn lifecycle_events(
        &self,
        last_event_id: Option<u64>,
    ) -> ClientResult<futures_util::stream::BoxStream<'static, ClientResult<SseMessage>>> {
        let mut builder = self.stream_request(Method::GET, &["events", "sse"]);
        if let Some(id) = last_event_id {
            builder = builder.header("last-event-id", id.to_string());
        }
        self.open_sse(builder, &["events", "sse"]).await
    }

    pub(super) async fn open_sse(
        &self,
        builder: RequestBuilder,
        segments: &[&str],
    ) -> ClientResult<futures_util::stream::BoxStream<'static, ClientResult<SseMessage>>> {
        let url = self.url(segments).to_string();
        let (timeouts, idle) = (self.timeouts, self.timeouts.idle);
        let response = builder.send().await.map_err(|e| transport(&url, e, &timeouts, idle))?;
        if !response.status().is_success() {
            return Err(self.refusal(url, response, idle).await);
        }
        let read_url = url.clone();
        let bytes =
            response.bytes_stream().map(move |chunk| chunk.map_err(|e| transport(&read_url, e, &timeouts, idle)));
        Ok(sse_messages(bytes, url).boxed())
    }
}

/// One server-sent event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseMessage {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

/// The events of an SSE body. An event is held until its blank line comes, so one is
/// at most [`MAX_SSE_EVENT_BYTES`]: past that the stream ends with
/// [`ClientError::TooLarge`], reading no further. It ends after any error.
pub(super) fn sse_messages(
    bytes: impl Stream<Item = ClientResult<bytes::Bytes>> + Send + 'static,
    url: String,
) -> impl Stream<Item = ClientResult<SseMessage>> + Send + 'static {
    struct State<S> {
        bytes: std::pin::Pin<Box<S>>,
        buffer: Vec<u8>,
        /// Where the search for the next blank line goes on: the bytes before it were
        /// searched (a large event arrives in many chunks; each is searched once).
        searched: usize,
        url: String,
        ended: bool,
    }
    let state = State { bytes: Box::pin(bytes), buffer: Vec::new(), searched: 0, url, ended: false };
    futures_util::stream::unfold(state, |mut state| async move {
        if state.ended {
            return None;
        }
        loop {
            if let Some(end) = find_event_end(&state.buffer, state.searched) {
                let block: Vec<u8> = state.buffer.drain(..end.1).collect();
                state.searched = 0;
                let message = parse_sse_block(&String::from_utf8_lossy(&block[..end.0]));
                match message {
                    Some(message) => return Some((Ok(message), state)),
                    None => continue, // a comment (keep-alive)
                }
            }
            // A blank line may begin in the last bytes and end in the next chunk.
            state.searched = state.buffer.len().saturating_sub(3);
            if state.buffer.len() > MAX_SSE_EVENT_BYTES {
                state.ended = true;
                state.buffer = Vec::new();
                let error = ClientError::TooLarge { url: state.url.clone(), limit: MAX_SSE_EVENT_BYTES };
                return Some((Err(error), state));
            }
            match state.bytes.next().await {
                Some(Ok(chunk)) => state.buffer.extend_from_slice(&chunk),
                Some(Err(error)) => {
                    state.ended = true;
                    return Some((Err(error), state));
                }
                None => return None,
            }
        }
    })
}

/// (end of the block, end including the blank line), searching from `from` on.
fn find_event_end(buffer: &[u8], from: usize) -> Option<(usize, usize)> {
    let from = from.min(buffer.len());
    let rest = &buffer[from..];
    let lf = rest.windows(2).position(|w| w == b"\n\n").map(|i| (from + i, from + i + 2));
    let crlf = rest.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (from + i, from + i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

fn parse_sse_block(block: &str) -> Option<SseMessage> {
    let mut message = SseMessage::default();
    let mut data_lines = Vec::new();
    for line in block.lines() {
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').map_or((line, ""), |(f, v)| (f, v.strip_prefix(' ').unwrap_or(v)));
        match field {
            "id" => message.id = Some(value.to_string()),
            "event" => message.event = Some(value.to_string()),
            "data" => data_lines.push(value),
            _ => {}
        }
    }
    if message.id.is_none() && message.event.is_none() && data_lines.is_empty() {
        return None;
    }
    message.data = data_lines.join("\n");
    Some(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_blocks() {
        assert_eq!(
            parse_sse_block("id: 3\nevent: process.created\ndata: {\"a\":1}"),
            Some(SseMessage { id: Some("3".into()), event: Some("process.created".into()), data: "{\"a\":1}".into() })
        );
        assert_eq!(parse_sse_block(":keep-alive"), None);
    }
}
