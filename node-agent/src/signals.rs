//! Signal names as people write them: `SIGINT`, `INT`, `int`, or `2`.

use std::str::FromStr;

use nix::sys::signal::Signal;

pub fn parse_signal(name: &str) -> Result<Signal, String> {
    let trimmed = name.trim();
    if let Ok(number) = trimmed.parse::<i32>() {
        return Signal::try_from(number).map_err(|_| format!("unknown signal number {number}"));
    }
    let upper = trimmed.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
    Signal::from_str(&full).map_err(|_| format!("unknown signal {name:?} (try SIGTERM, SIGINT, SIGKILL, SIGHUP, ...)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        assert_eq!(parse_signal("SIGINT"), Ok(Signal::SIGINT));
        assert_eq!(parse_signal("int"), Ok(Signal::SIGINT));
        assert_eq!(parse_signal("9"), Ok(Signal::SIGKILL));
        assert_eq!(parse_signal(" winch "), Ok(Signal::SIGWINCH));
        assert!(parse_signal("SIGNOPE").is_err());
        assert!(parse_signal("999").is_err());
    }
}
