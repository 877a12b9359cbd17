//! What went wrong in a call to a node agent, and how a node agent's texts (a body, a
//! problem's detail) are cut to size before an error quotes them.

use std::time::Duration;

use crate::error::Problem;

use super::{MAX_QUOTED_BYTES, MAX_TITLE_BYTES, Timeouts};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The node agent answered with a problem document (its texts cut to size).
    #[error("{}: {}", .0.title, .0.detail)]
    Problem(Problem),
    #[error("request to {url} failed: {source}")]
    Http {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// An answer that is neither what was asked for nor a problem; `body` quotes it (see
    /// [`MAX_QUOTED_BYTES`]).
    #[error("unexpected answer {status} from {url}: {body}")]
    Unexpected { url: String, status: u16, body: String },
    /// An answer (or one event of a stream) larger than the client reads; the rest of it
    /// was left unread.
    #[error("{url}: answer larger than {limit} bytes")]
    TooLarge { url: String, limit: usize },
    /// Nothing came in time: no connection, no answer, or on a stream no next bytes.
    #[error("{url}: {what} within {after:?}")]
    TimedOut { url: String, what: &'static str, after: Duration },
    #[error("WebSocket to {url}: {source}")]
    WebSocket {
        url: String,
        #[source]
        source: Box<tokio_tungstenite::tungstenite::Error>,
    },
    #[error("invalid node agent URL {0:?}")]
    InvalidUrl(String),
}

impl ClientError {
    /// A node agent's problem document as an error, its texts cut to size (see
    /// [`bounded`]): what every call answers when the node agent refused, whether the
    /// problem came over HTTP or from a node agent in the same process.
    pub fn from_problem(problem: Problem) -> ClientError {
        ClientError::Problem(bounded(problem))
    }

    /// The problem's code (`process_not_found`, ...), when the server sent one.
    pub fn problem_code(&self) -> Option<&str> {
        match self {
            ClientError::Problem(p) => Some(p.code()),
            _ => None,
        }
    }

    /// The problem's code, when the server sent one this client knows: what callers
    /// compare (never the text).
    pub fn code(&self) -> Option<crate::error::ProblemCode> {
        match self {
            ClientError::Problem(p) => p.problem_code(),
            _ => None,
        }
    }
}

pub type ClientResult<T> = std::result::Result<T, ClientError>;

/// How long a text that was cut was, as far as the client knows.
#[derive(Debug, Clone, Copy)]
pub(super) enum Length {
    Exactly(u64),
    /// Not read past this.
    MoreThan(usize),
}

/// `text` cut to `max` bytes on a character boundary; when cut, it says how long it was.
pub(super) fn cut(text: &str, max: usize, length: Length) -> String {
    let whole = matches!(length, Length::Exactly(n) if n == text.len() as u64);
    if whole && text.len() <= max {
        return text.to_string();
    }
    let end = (0..=max.min(text.len())).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
    let length = match length {
        Length::Exactly(n) => format!("{n} bytes in all"),
        Length::MoreThan(n) => format!("more than {n} bytes"),
    };
    format!("{}… ({length})", &text[..end])
}

/// What an error quotes of a text a node agent sent, read whole.
pub(super) fn quote(text: &str) -> String {
    cut(text, MAX_QUOTED_BYTES, Length::Exactly(text.len() as u64))
}

/// A problem document with its texts cut to size: it ends up in errors, logs and
/// status messages.
fn bounded(problem: Problem) -> Problem {
    let whole = |text: &str| Length::Exactly(text.len() as u64);
    Problem {
        kind: cut(&problem.kind, MAX_TITLE_BYTES, whole(&problem.kind)),
        title: cut(&problem.title, MAX_TITLE_BYTES, whole(&problem.title)),
        status: problem.status,
        detail: quote(&problem.detail),
    }
}

/// A failed exchange with the node agent: a deadline passed (a connection within
/// `timeouts.connect`, anything else within `after`), or the transport failed.
pub(super) fn transport(url: &str, source: reqwest::Error, timeouts: &Timeouts, after: Duration) -> ClientError {
    match (source.is_timeout(), source.is_connect()) {
        (true, true) => ClientError::TimedOut { url: url.to_string(), what: "no connection", after: timeouts.connect },
        (true, false) => ClientError::TimedOut { url: url.to_string(), what: "no answer", after },
        _ => ClientError::Http { url: url.to_string(), source },
    }
}
