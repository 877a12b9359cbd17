//! Bearer-token authentication, single-use tickets for WebSocket clients that cannot
//! set headers (browsers), and one-time login codes that a browser page exchanges for
//! a token of its own. The long-lived token never appears in a URL.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq;
use time::OffsetDateTime;

/// How long a ticket may wait before it is used: long enough to open a socket.
pub const TICKET_TTL: Duration = Duration::from_secs(30);
/// Most unredeemed tickets kept; a client minting more than this loses the oldest.
const MAX_TICKETS: usize = 1024;

/// How long a login code may wait before it is exchanged: time to open a printed link.
pub const LOGIN_CODE_TTL: Duration = Duration::from_secs(10 * 60);
/// Most unexchanged login codes kept; minting more drops the oldest.
pub const MAX_LOGIN_CODES: usize = 32;
/// Most browser tokens kept (one per page that logged in); past it the oldest stops working.
pub const MAX_BROWSER_TOKENS: usize = 64;

pub struct Auth {
    token: Option<Vec<u8>>,
    tickets: Mutex<HashMap<String, (String, Instant)>>,
    /// Login codes not yet exchanged, with when each expires.
    codes: Mutex<Vec<(Vec<u8>, Instant)>>,
    /// Tokens given for login codes, oldest first: accepted like `token` until the
    /// node agent stops.
    browser_tokens: Mutex<VecDeque<Vec<u8>>>,
}

impl Auth {
    /// `None` disables authentication (`--no-token`).
    pub fn new(token: Option<String>) -> Self {
        Auth {
            token: token.map(String::into_bytes),
            tickets: Mutex::new(HashMap::new()),
            codes: Mutex::new(Vec::new()),
            browser_tokens: Mutex::new(VecDeque::new()),
        }
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
        let mut accepted = presented.ct_eq(token);
        // Every browser token is compared, whichever matches: the time taken says
        // nothing about which, or whether, one did.
        let browser_tokens = self.browser_tokens.lock().unwrap_or_else(|e| e.into_inner());
        for known in browser_tokens.iter() {
            accepted |= presented.ct_eq(known);
        }
        accepted.into()
    }

    /// Mints a one-time login code (128 random bits, hex), valid for [`LOGIN_CODE_TTL`];
    /// past [`MAX_LOGIN_CODES`] unexchanged ones, the oldest is dropped.
    pub fn issue_login_code(&self) -> (String, OffsetDateTime) {
        let code = crate::random::hex(16);
        let now = Instant::now();
        let mut codes = self.codes.lock().unwrap_or_else(|e| e.into_inner());
        codes.retain(|(_, expires)| *expires > now);
        while codes.len() >= MAX_LOGIN_CODES {
            // Kept in the order they were minted: the first is the oldest.
            codes.remove(0);
        }
        codes.push((code.clone().into_bytes(), now + LOGIN_CODE_TTL));
        (code, OffsetDateTime::now_utc() + LOGIN_CODE_TTL)
    }

    /// Uses up a login code: a new browser token when it was valid (never the node
    /// agent's own token), `None` when it is unknown, used or expired. Codes are
    /// compared in constant time, each against every one kept.
    pub fn exchange_login_code(&self, code: &str) -> Option<String> {
        let presented = code.as_bytes();
        let now = Instant::now();
        let valid = {
            let mut codes = self.codes.lock().unwrap_or_else(|e| e.into_inner());
            let mut found = None;
            for (index, (known, _)) in codes.iter().enumerate() {
                if bool::from(presented.ct_eq(known)) {
                    found = Some(index);
                }
            }
            // Used once, whether or not it had expired.
            found.map(|index| codes.remove(index)).is_some_and(|(_, expires)| expires > now)
        };
        if !valid {
            return None;
        }
        let token = crate::random::hex(32);
        let mut tokens = self.browser_tokens.lock().unwrap_or_else(|e| e.into_inner());
        while tokens.len() >= MAX_BROWSER_TOKENS {
            tokens.pop_front();
        }
        tokens.push_back(token.clone().into_bytes());
        Some(token)
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
    fn login_codes_are_single_use_and_give_a_token_of_their_own() {
        let auth = Auth::new(Some("the-main-token".into()));
        let (code, expires) = auth.issue_login_code();
        assert_eq!(code.len(), 32);
        assert!(expires > OffsetDateTime::now_utc() + Duration::from_secs(9 * 60));
        assert_eq!(auth.exchange_login_code("0123456789abcdef0123456789abcdef"), None);
        assert_eq!(auth.exchange_login_code(""), None);
        let token = auth.exchange_login_code(&code).expect("a fresh code is exchanged");
        assert_ne!(token, "the-main-token");
        assert_eq!(token.len(), 64);
        assert!(auth.check_bearer(Some(format!("Bearer {token}").as_bytes())));
        assert!(auth.check_bearer(Some(b"Bearer the-main-token")));
        assert_eq!(auth.exchange_login_code(&code), None, "a code is used once");
        assert!(!auth.check_bearer(Some(format!("Bearer {code}").as_bytes())), "a code is no token");
    }

    #[test]
    fn login_codes_and_browser_tokens_are_bounded() {
        let auth = Auth::new(Some("the-main-token".into()));
        let codes: Vec<String> = (0..MAX_LOGIN_CODES + 1).map(|_| auth.issue_login_code().0).collect();
        assert_eq!(auth.exchange_login_code(&codes[0]), None, "the oldest code was dropped");
        assert!(auth.exchange_login_code(&codes[1]).is_some());
        let first = auth.exchange_login_code(&codes[2]).unwrap();
        for _ in 0..MAX_BROWSER_TOKENS {
            let code = auth.issue_login_code().0;
            auth.exchange_login_code(&code).unwrap();
        }
        assert!(!auth.check_bearer(Some(format!("Bearer {first}").as_bytes())), "the oldest token was dropped");
        assert_eq!(auth.browser_tokens.lock().unwrap().len(), MAX_BROWSER_TOKENS);
    }

    #[test]
    fn an_expired_login_code_is_refused() {
        let auth = Auth::new(Some("the-main-token".into()));
        let (code, _) = auth.issue_login_code();
        auth.codes.lock().unwrap()[0].1 = Instant::now();
        assert_eq!(auth.exchange_login_code(&code), None);
        assert!(auth.codes.lock().unwrap().is_empty(), "and forgotten");
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
