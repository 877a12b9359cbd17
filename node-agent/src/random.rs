//! Random identifiers: ids, tickets and request ids no client can guess.

/// `bytes` random bytes from the OS, as lowercase hex (two characters a byte).
pub fn hex(bytes: usize) -> String {
    let mut raw = vec![0u8; bytes];
    getrandom::fill(&mut raw).expect("the OS random source works");
    let mut out = String::with_capacity(bytes * 2);
    for byte in raw {
        out.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_is_two_lowercase_digits_a_byte_and_differs_each_time() {
        let (a, b) = (super::hex(16), super::hex(16));
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()), "{a}");
        assert_ne!(a, b);
        assert_eq!(super::hex(0), "");
    }
}
