//! Bearer-token authentication, and single-use tickets for WebSocket clients that
//! cannot set headers (browsers). The long-lived token never appears in a URL.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq;
use time::OffsetDateTime;

/// How long a ticket may wait before it is used: long enough to open a socket.
pub const TICKET_TTL: Duration = Duration::from_secs(30);
/// Most unredeemed tickets kept; a client minting more than this loses the oldest.
const MAX_TICKETS: usize = 1024;

pub struct Auth {
    token: Option<Vec<u8>>,
    tickets: Mutex<HashMap<String, (String, Instant)>>,
}

impl Auth {
    /// `None` disables authentication (`--no-token`).
    pub fn new(token: Option<String>) -> Self {
        Auth { token: token.map(String::into_bytes), tickets: Mutex::new(HashMap::new()) }
    }

    pub fn enabled(&self) -> bool {
        self.token.is_some()
    }

    /// Checks an `Authorization` header value in constant time.
    pub fn check_bearer(&self, header: Option<&[u8]>) -> bool {
        let Some(token) = &self.token else { return true };
        let Some(value) = header else { return false };
        // The scheme is case-insensitive (RFC 9110 11.1): `bearer` is as good as `Bearer`.
        let Some((scheme, presented)) = value.split_at_checked(7) else { return false };
        if !scheme.eq_ignore_ascii_case(b"Bearer ") {
            return false;
        }
        presented.ct_eq(token).into()
    }

    /// Mints a ticket that opens one WebSocket to `process_id`.
    pub fn issue_ticket(&self, process_id: &str) -> (String, OffsetDateTime) {
        let ticket = crate::random::hex(24);
        let now = Instant::now();
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        tickets.retain(|_, (_, expires)| *expires > now);
        if tickets.len() >= MAX_TICKETS
            && let Some(oldest) = tickets.iter().min_by_key(|(_, (_, e))| *e).map(|(k, _)| k.clone())
        {
            tickets.remove(&oldest);
        }
        tickets.insert(ticket.clone(), (process_id.to_string(), now + TICKET_TTL));
        (ticket, OffsetDateTime::now_utc() + TICKET_TTL)
    }

    /// Uses up a ticket; true when it was valid for this process.
    pub fn redeem_ticket(&self, ticket: &str, process_id: &str) -> bool {
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        match tickets.remove(ticket) {
            Some((id, expires)) => id == process_id && expires > Instant::now(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        let auth = Auth::new(Some("s3cret".into()));
        assert!(auth.check_bearer(Some(b"Bearer s3cret")));
        assert!(auth.check_bearer(Some(b"bearer s3cret")));
        assert!(auth.check_bearer(Some(b"BEARER s3cret")));
        assert!(!auth.check_bearer(Some(b"Basic  s3cret")));
        assert!(!auth.check_bearer(Some(b"Bearer")));
        assert!(!auth.check_bearer(Some(b"Bearer s3cre")));
        assert!(!auth.check_bearer(Some(b"Bearer s3cretX")));
        assert!(!auth.check_bearer(Some(b"s3cret")));
        assert!(!auth.check_bearer(None));
        assert!(Auth::new(None).check_bearer(None));
    }

    #[test]
    fn tickets_are_single_use_and_bound_to_a_process() {
        let auth = Auth::new(Some("t".into()));
        let (ticket, _) = auth.issue_ticket("a");
        assert!(!auth.redeem_ticket(&ticket, "b"));
        let (ticket, _) = auth.issue_ticket("a");
        assert!(auth.redeem_ticket(&ticket, "a"));
        assert!(!auth.redeem_ticket(&ticket, "a"));
    }
}
