//! What the tests of the `agentplane` binary share.

use std::time::{Duration, Instant};

/// Polls a condition that has no event to wait on (a screen, /proc), failing after
/// `patience`; looks often at first, then every 50 ms.
pub fn wait_until(patience: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + patience;
    let mut delay = Duration::from_millis(2);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(50));
    }
}
