//! A reader between a tar byte stream from someone untrusted and the `tar` crate, so
//! that an archive cannot make its reader hold what it declares. The `tar` crate
//! reads a GNU long name (`L`), a long link name (`K`) and a PAX header (`x`) whole
//! into memory, however long the header says it is: a header declaring 1.5 GiB took
//! a node agent to 9.4 GiB, and `agentplane cp` to 5.3 GB.
//!
//! [`TarGuard`] parses the 512-byte headers as they pass and tracks each entry's data
//! and padding, so it always knows where the next header starts. It gathers each
//! header block whole before handing any of it on, and refuses an extension header
//! (GNU `L`/`K`, PAX `x`/`g`) that declares more than [`EXTENSION_LIMIT`] bytes before
//! the `tar` crate has seen a byte of it: the stream's reader gets an
//! [`io::ErrorKind::InvalidData`] error holding a [`TarGuardError`] (see [`refusal`]).
//!
//! Tracking follows the `tar` crate's own reading exactly, since a guard that lost
//! count would let a header it took for data through: a PAX `size` record sets the
//! size of the next entry that is not an extension, and a GNU sparse entry may be
//! followed by extension blocks before its data. Everything else passes unchanged.
//!
//! [`quoted`] is how a name from a stream appears in an error message: cut short, so
//! that neither the node agent's answer nor the CLI's error repeats 64 KiB of it.

use std::io::{self, Read};

/// The most data an extension header may declare. Paths are at most 4 KiB on Linux;
/// a PAX header holding them and a few attributes is far smaller than this. It is
/// the most the `tar` crate then holds in memory for one entry's names.
pub const EXTENSION_LIMIT: u64 = 64 * 1024;

/// The most of a name from a tar stream that an error message repeats, in bytes.
pub const SHOWN_NAME: usize = 256;

const BLOCK: usize = 512;

/// The extension headers the `tar` crate reads whole (or, for `g`, may be asked to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtensionKind {
    /// `L`: the next entry's name.
    GnuLongName,
    /// `K`: the next entry's link target.
    GnuLongLink,
    /// `x`: records for the next entry.
    Pax,
    /// `g`: records for every entry after it.
    PaxGlobal,
}

impl ExtensionKind {
    fn of(entry_type: tar::EntryType) -> Option<ExtensionKind> {
        match entry_type {
            tar::EntryType::GNULongName => Some(ExtensionKind::GnuLongName),
            tar::EntryType::GNULongLink => Some(ExtensionKind::GnuLongLink),
            tar::EntryType::XHeader => Some(ExtensionKind::Pax),
            tar::EntryType::XGlobalHeader => Some(ExtensionKind::PaxGlobal),
            _ => None,
        }
    }
}

impl std::fmt::Display for ExtensionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ExtensionKind::GnuLongName => "GNU long-name",
            ExtensionKind::GnuLongLink => "GNU long-link",
            ExtensionKind::Pax => "PAX",
            ExtensionKind::PaxGlobal => "PAX global",
        })
    }
}

/// Why a tar stream was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TarGuardError {
    #[error(
        "a {kind} header at byte {offset} of the tar stream declares {declared} bytes, more than the {EXTENSION_LIMIT} taken"
    )]
    ExtensionTooLarge { kind: ExtensionKind, offset: u64, declared: u64 },
    /// Without an entry's size, where the next header starts is not known.
    #[error("the header at byte {offset} of the tar stream has no size that can be read")]
    UnreadableSize { offset: u64 },
}

/// The guard's refusal inside an error that came out of a tar stream, if it is one.
pub fn refusal(error: &io::Error) -> Option<&TarGuardError> {
    error.get_ref().and_then(|inner| inner.downcast_ref::<TarGuardError>())
}

/// `name` quoted and escaped (control characters as `\u{..}`, so a name cannot move a
/// terminal's cursor), and cut to [`SHOWN_NAME`] bytes with "…" and its full length
/// when it is longer: how a name from a tar stream appears in an error message.
pub fn quoted(name: &str) -> String {
    let mut shown = String::from("\"");
    for c in name.escape_debug() {
        if shown.len() + c.len_utf8() > SHOWN_NAME {
            return format!("{shown}…\" ({} bytes)", name.len());
        }
        shown.push(c);
    }
    shown.push('"');
    shown
}

/// `text` (an error that may carry something from a stream) cut to [`SHOWN_NAME`]
/// bytes, on a character boundary, with "…" and its full length when it is longer.
pub fn clipped(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= SHOWN_NAME {
        return text.into();
    }
    let mut end = SHOWN_NAME;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len()).into()
}

/// A tar stream read through the guard; see the module's documentation.
pub struct TarGuard<R> {
    inner: R,
    /// Bytes read from `inner` so far: where in the stream the guard is.
    consumed: u64,
    /// The current block: a header, or a GNU sparse extension block.
    block: [u8; BLOCK],
    state: State,
    /// The size a PAX `x` header gave the next entry that is not an extension (what
    /// the `tar` crate uses in place of that entry's header field).
    pax_size: Option<u64>,
    /// The data of the PAX `x` header passing now.
    pax: Vec<u8>,
    /// Once refused, every later read answers the same: the stream is not resumed.
    refused: Option<TarGuardError>,
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Gathering a block from `inner`: `filled` bytes of it so far.
    Gather { filled: usize, kind: BlockKind },
    /// Handing on a block that was parsed: `at` of its `len` bytes given, then `next`.
    Hand { at: usize, len: usize, next: Next },
    /// Passing `remaining` bytes of data and padding on, unparsed.
    Pass { remaining: u64 },
    /// Passing a PAX `x` header's data on and keeping it (it is at most
    /// [`EXTENSION_LIMIT`]) to read its `size` record; then its padding.
    Pax { remaining: u64, padding: u64 },
    /// `inner` ended inside a block, which was handed on as it was: the `tar` crate
    /// says what is wrong with that.
    Ended,
}

#[derive(Debug, Clone, Copy)]
enum BlockKind {
    Header,
    /// Another block of a GNU sparse entry's map; `padded`: its data, after the map.
    SparseExtension {
        padded: u64,
    },
}

#[derive(Debug, Clone, Copy)]
enum Next {
    Block(BlockKind),
    Data { padded: u64 },
    Pax { size: u64, padded: u64 },
    Ended,
}

impl<R: Read> TarGuard<R> {
    pub fn new(inner: R) -> Self {
        TarGuard {
            inner,
            consumed: 0,
            block: [0; BLOCK],
            state: State::Gather { filled: 0, kind: BlockKind::Header },
            pax_size: None,
            pax: Vec::new(),
            refused: None,
        }
    }

    /// Bytes read from the underlying stream so far.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    fn read_inner(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buffer)?;
        self.consumed += read as u64;
        Ok(read)
    }

    fn refuse(&mut self, error: TarGuardError) -> io::Error {
        self.refused = Some(error.clone());
        io::Error::new(io::ErrorKind::InvalidData, error)
    }

    /// What follows the header now in `block`, which starts at `offset`.
    fn parse_header(&mut self, offset: u64) -> Result<Next, TarGuardError> {
        // An all-zero block ends the archive, or is skipped (`ignore_zeros`): either
        // way the next block is read as a header, if it is read at all.
        if self.block.iter().all(|b| *b == 0) {
            return Ok(Next::Block(BlockKind::Header));
        }
        let header = tar::Header::from_byte_slice(&self.block);
        let entry_type = header.entry_type();
        let extension = ExtensionKind::of(entry_type);
        let mut size = header.entry_size().map_err(|_| TarGuardError::UnreadableSize { offset })?;
        if extension.is_none()
            && let Some(pax_size) = self.pax_size
        {
            size = pax_size;
        }
        if let Some(kind) = extension
            && size > EXTENSION_LIMIT
        {
            return Err(TarGuardError::ExtensionTooLarge { kind, offset, declared: size });
        }
        let padded =
            size.checked_add(BLOCK as u64 - 1).ok_or(TarGuardError::UnreadableSize { offset })? & !(BLOCK as u64 - 1);
        // The `tar` crate takes `L`, `K` and `x` as extensions of the next entry only
        // in a ustar or GNU header; anything else it hands out as an entry, which
        // uses up a pending PAX header.
        let recognized = header.as_gnu().is_some() || header.as_ustar().is_some();
        Ok(match extension {
            Some(ExtensionKind::Pax) if recognized => Next::Pax { size, padded },
            Some(ExtensionKind::GnuLongName | ExtensionKind::GnuLongLink) if recognized => Next::Data { padded },
            _ => {
                self.pax_size = None;
                let sparse_map_goes_on = entry_type.is_gnu_sparse() && header.as_gnu().is_some_and(|h| h.is_extended());
                if sparse_map_goes_on {
                    Next::Block(BlockKind::SparseExtension { padded })
                } else {
                    Next::Data { padded }
                }
            }
        })
    }

    /// What follows the GNU sparse extension block now in `block`.
    fn parse_sparse_extension(&self, padded: u64) -> Next {
        // `GnuExtSparseHeader`: 21 map entries of 24 bytes, then `isextended`.
        if self.block[21 * 24] == 1 {
            Next::Block(BlockKind::SparseExtension { padded })
        } else {
            Next::Data { padded }
        }
    }

    fn enter(&mut self, next: Next) {
        self.state = match next {
            Next::Block(kind) => State::Gather { filled: 0, kind },
            Next::Data { padded } => State::Pass { remaining: padded },
            Next::Pax { size, padded } => {
                self.pax.clear();
                State::Pax { remaining: size, padding: padded - size }
            }
            Next::Ended => State::Ended,
        };
    }
}

impl<R: Read> Read for TarGuard<R> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        if let Some(refused) = &self.refused {
            return Err(io::Error::new(io::ErrorKind::InvalidData, refused.clone()));
        }
        if buffer.is_empty() {
            return Ok(0);
        }
        loop {
            match self.state {
                State::Gather { filled, kind } => {
                    let read = self.inner.read(&mut self.block[filled..])?;
                    self.consumed += read as u64;
                    if read == 0 {
                        if filled == 0 {
                            return Ok(0);
                        }
                        self.state = State::Hand { at: 0, len: filled, next: Next::Ended };
                        continue;
                    }
                    let filled = filled + read;
                    if filled < BLOCK {
                        self.state = State::Gather { filled, kind };
                        continue;
                    }
                    let next = match kind {
                        BlockKind::Header => {
                            let offset = self.consumed - BLOCK as u64;
                            self.parse_header(offset).map_err(|e| self.refuse(e))?
                        }
                        BlockKind::SparseExtension { padded } => self.parse_sparse_extension(padded),
                    };
                    self.state = State::Hand { at: 0, len: BLOCK, next };
                }
                State::Hand { at, len, next } => {
                    let size = buffer.len().min(len - at);
                    buffer[..size].copy_from_slice(&self.block[at..at + size]);
                    if at + size == len {
                        self.enter(next);
                    } else {
                        self.state = State::Hand { at: at + size, len, next };
                    }
                    return Ok(size);
                }
                State::Pass { remaining: 0 } => self.state = State::Gather { filled: 0, kind: BlockKind::Header },
                State::Pass { remaining } => {
                    let limit = buffer.len().min(usize::try_from(remaining).unwrap_or(usize::MAX));
                    let read = self.read_inner(&mut buffer[..limit])?;
                    // Ended early (read 0): passed on as it is, for the `tar` crate to say.
                    self.state = State::Pass { remaining: remaining - read as u64 };
                    return Ok(read);
                }
                State::Pax { remaining: 0, padding } => {
                    self.pax_size = pax_size(&self.pax);
                    self.pax = Vec::new();
                    self.state = State::Pass { remaining: padding };
                }
                State::Pax { remaining, padding } => {
                    let limit = buffer.len().min(usize::try_from(remaining).unwrap_or(usize::MAX));
                    let read = self.read_inner(&mut buffer[..limit])?;
                    self.pax.extend_from_slice(&buffer[..read]);
                    self.state = if read == 0 {
                        State::Ended
                    } else {
                        State::Pax { remaining: remaining - read as u64, padding }
                    };
                    return Ok(read);
                }
                State::Ended => return Ok(0),
            }
        }
    }
}

/// The `size` record of a PAX header, read as the `tar` crate reads it (the first
/// `size` record; nothing when a record before it, or its value, is malformed).
fn pax_size(data: &[u8]) -> Option<u64> {
    for record in tar::PaxExtensions::new(data) {
        let record = record.ok()?;
        if record.key() != Ok("size") {
            continue;
        }
        return record.value().ok()?.parse().ok();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads of at most the next of `sizes` bytes each, round and round: a header
    /// split across reads the way a socket splits it.
    struct Trickle<R> {
        inner: R,
        sizes: Vec<usize>,
        turn: usize,
    }

    impl<R: Read> Read for Trickle<R> {
        fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
            let size = buffer.len().min(self.sizes[self.turn % self.sizes.len()]);
            self.turn += 1;
            self.inner.read(&mut buffer[..size])
        }
    }

    fn trickle<'a>(bytes: &'a [u8], sizes: &[usize]) -> Trickle<&'a [u8]> {
        Trickle { inner: bytes, sizes: sizes.to_vec(), turn: 0 }
    }

    /// Everything `reader` gives through the guard, asked for `reads` bytes at a time,
    /// and how much the guard took from `reader`.
    fn through(reader: impl Read, reads: &[usize]) -> (io::Result<Vec<u8>>, u64) {
        let mut guard = TarGuard::new(reader);
        let mut out = Vec::new();
        let mut reads = reads.iter().cycle();
        let result = loop {
            let mut buffer = vec![0; *reads.next().unwrap()];
            match guard.read(&mut buffer) {
                Ok(0) => break Ok(out),
                Ok(read) => out.extend_from_slice(&buffer[..read]),
                Err(error) => break Err(error),
            }
        };
        (result, guard.consumed())
    }

    /// The header of an extension entry (`L`, `K`: GNU; `x`, `g`: PAX) declaring `size`.
    fn extension(kind: u8, size: u64) -> [u8; BLOCK] {
        let mut header = if matches!(kind, b'L' | b'K') { tar::Header::new_gnu() } else { tar::Header::new_ustar() };
        header.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
        header.set_entry_type(tar::EntryType::new(kind));
        header.set_mode(0o644);
        header.set_size(size);
        header.set_cksum();
        *header.as_bytes()
    }

    /// `data` after its header, padded to whole blocks.
    fn entry(header: &[u8; BLOCK], data: &[u8]) -> Vec<u8> {
        let mut out = header.to_vec();
        out.extend_from_slice(data);
        out.resize(out.len().next_multiple_of(BLOCK), 0);
        out
    }

    /// A PAX `x` entry holding `records`.
    fn pax(records: &[(&str, &str)]) -> Vec<u8> {
        let mut data = String::new();
        for (key, value) in records {
            let rest = format!(" {key}={value}\n");
            // The length counts its own digits.
            let mut length = rest.len() + 1;
            while (rest.len() + length.to_string().len()) != length {
                length = rest.len() + length.to_string().len();
            }
            data.push_str(&format!("{length}{rest}"));
        }
        entry(&extension(b'x', data.len() as u64), data.as_bytes())
    }

    /// A file `f` holding "hi", and the archive's end.
    fn file_and_end() -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(2);
        header.set_mode(0o644);
        builder.append_data(&mut header, "f", &b"hi"[..]).unwrap();
        builder.into_inner().unwrap()
    }

    /// An extension entry declaring `size` bytes and holding them, then `f`.
    fn archive_with_extension(kind: u8, size: u64) -> Vec<u8> {
        let size = size as usize;
        let data = match kind {
            // One record filling it all: "65536 comment=aaa…\n".
            b'x' | b'g' => format!("{size} comment={}\n", "a".repeat(size - size.to_string().len() - 10)).into_bytes(),
            _ => [vec![b'n'; size - 1], vec![0]].concat(),
        };
        assert_eq!(data.len(), size);
        [entry(&extension(kind, size as u64), &data), file_and_end()].concat()
    }

    fn refused_as(result: io::Result<Vec<u8>>) -> TarGuardError {
        let error = result.expect_err("refused");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        refusal(&error).cloned().unwrap_or_else(|| panic!("not the guard's refusal: {error}"))
    }

    fn too_large(kind: ExtensionKind, offset: usize, declared: u64) -> TarGuardError {
        TarGuardError::ExtensionTooLarge { kind, offset: offset as u64, declared }
    }

    #[test]
    fn an_extension_of_exactly_the_limit_passes_and_one_byte_more_is_refused() {
        for (kind, byte) in [
            (ExtensionKind::GnuLongName, b'L'),
            (ExtensionKind::GnuLongLink, b'K'),
            (ExtensionKind::Pax, b'x'),
            (ExtensionKind::PaxGlobal, b'g'),
        ] {
            let archive = archive_with_extension(byte, EXTENSION_LIMIT);
            let (passed, consumed) = through(&archive[..], &[8192]);
            assert!(passed.unwrap() == archive, "{kind}: changed on the way");
            assert_eq!(consumed, archive.len() as u64);
            // And the tar crate reads it through the guard.
            let mut read = tar::Archive::new(TarGuard::new(&archive[..]));
            let names: Vec<String> = read
                .entries()
                .unwrap()
                .map(|e| e.unwrap().path().unwrap().to_string_lossy().chars().take(13).collect())
                .collect();
            let expected = match byte {
                b'L' => vec!["n".repeat(13)],
                b'K' | b'x' => vec!["f".to_string()],
                _ => vec!["././@LongLink".to_string(), "f".to_string()],
            };
            assert_eq!(names, expected, "{kind}");

            let archive = archive_with_extension(byte, EXTENSION_LIMIT + 1);
            let (refused, consumed) = through(&archive[..], &[8192]);
            assert_eq!(refused_as(refused), too_large(kind, 0, EXTENSION_LIMIT + 1));
            // Its header block and not a byte of its data.
            assert_eq!(consumed, BLOCK as u64, "{kind}");
        }
    }

    /// A GiB declared after a first entry: refused at its header, having read that
    /// header and nothing more, wherever the reads split it; and so every read after.
    #[test]
    fn a_gib_long_name_is_refused_at_its_header_however_the_reads_split_it() {
        let first = entry(&extension(b'L', 100), &[b'n'; 100]);
        let stream = [first.clone(), extension(b'L', 1 << 30).to_vec(), vec![b'a'; 1 << 20]].concat();
        for sizes in [&[1][..], &[511], &[513], &[1, 511, 513, 7]] {
            for reads in [&[1][..], &[511], &[513], &[100_000]] {
                let mut guard = TarGuard::new(trickle(&stream, sizes));
                let mut out = Vec::new();
                let error = loop {
                    let mut buffer = vec![0; reads[0]];
                    match guard.read(&mut buffer) {
                        Ok(0) => panic!("{sizes:?}/{reads:?}: the stream ended unrefused"),
                        Ok(read) => out.extend_from_slice(&buffer[..read]),
                        Err(error) => break error,
                    }
                };
                let expected = too_large(ExtensionKind::GnuLongName, first.len(), 1 << 30);
                assert_eq!(refusal(&error), Some(&expected), "{sizes:?}/{reads:?}");
                assert!(out == first, "{sizes:?}/{reads:?}: a byte of the refused header was handed on");
                assert_eq!(guard.consumed(), (first.len() + BLOCK) as u64, "{sizes:?}/{reads:?}");
                assert!(refusal(&guard.read(&mut [0; 10]).unwrap_err()).is_some(), "a later read went on");
            }
        }
        // Through the tar crate: its entries end in the refusal.
        let mut archive = tar::Archive::new(TarGuard::new(&stream[..]));
        let error = archive.entries().unwrap().find_map(Result::err).expect("refused");
        assert!(refusal(&error).is_some(), "{error}");
        let message = error.to_string();
        let expected = "a GNU long-name header at byte 1024 of the tar stream declares 1073741824 bytes, more than the 65536 taken";
        assert_eq!(message, expected);
    }

    /// A real archive with names and link targets past 100 bytes (GNU `L` and `K`),
    /// PAX records, a directory, a symlink, a hard link and files of odd sizes passes
    /// unchanged, however the reads split it.
    #[test]
    fn a_normal_archive_passes_byte_for_byte() {
        let mut builder = tar::Builder::new(Vec::new());
        let long_dir = format!("{}/{}", "d".repeat(120), "é".repeat(70));
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_size(0);
        builder.append_data(&mut header, format!("{long_dir}/"), io::empty()).unwrap();
        for (index, size) in [0usize, 1, 511, 512, 513, 70_000].into_iter().enumerate() {
            let mut header = tar::Header::new_gnu();
            header.set_mode(0o644);
            header.set_size(size as u64);
            let data: Vec<u8> = (0..size).map(|i| (i * 31 + index) as u8).collect();
            builder.append_data(&mut header, format!("{long_dir}/file-{index}"), &data[..]).unwrap();
        }
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        builder.append_link(&mut header, "link", format!("{long_dir}/file-1")).unwrap();
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Link);
        header.set_size(0);
        builder.append_link(&mut header, "hard", format!("{long_dir}/file-2")).unwrap();
        let mut archive = builder.into_inner().unwrap();
        archive.truncate(archive.len() - 2 * BLOCK); // its end, for more entries
        archive.extend_from_slice(&pax(&[("comment", "a PAX record"), ("path", &format!("{long_dir}/from-pax"))]));
        archive.extend_from_slice(&file_and_end());
        assert!(archive.len() > 80_000);

        for sizes in [&[1][..], &[511], &[513], &[1, 511, 513, 4096, 3]] {
            for reads in [&[1][..], &[511], &[513], &[65_536, 7]] {
                let (passed, consumed) = through(trickle(&archive, sizes), reads);
                assert!(passed.unwrap() == archive, "{sizes:?}/{reads:?}: changed on the way");
                assert_eq!(consumed, archive.len() as u64);
            }
        }
        let mut read = tar::Archive::new(TarGuard::new(trickle(&archive, &[513, 1, 511])));
        let names: Vec<String> =
            read.entries().unwrap().map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names.len(), 10, "{names:?}");
        assert_eq!(names[6], format!("{long_dir}/file-5"));
        assert_eq!(names[9], format!("{long_dir}/from-pax"));
    }

    /// A PAX `size` record makes the next entry longer than its header says: the guard
    /// counts as the tar crate does, so a header where the tar crate looks next is
    /// refused, and one inside the data is not taken for a header.
    #[test]
    fn a_pax_size_moves_the_next_header_as_the_tar_crate_moves_it() {
        let hidden = extension(b'L', 1 << 30);
        let mut file = tar::Header::new_ustar();
        file.as_old_mut().name[..4].copy_from_slice(b"file");
        file.set_mode(0o644);
        file.set_size(0); // the PAX record says 1024
        file.set_cksum();
        let start = [pax(&[("size", "1024")]), file.as_bytes().to_vec()].concat();
        // 1024 bytes of data holding what looks like a header, then the real next one.
        let stream = [start.clone(), hidden.to_vec(), vec![0; BLOCK], hidden.to_vec()].concat();
        let (refused, consumed) = through(&stream[..], &[4096]);
        let next = start.len() + 1024;
        assert_eq!(refused_as(refused), too_large(ExtensionKind::GnuLongName, next, 1 << 30));
        assert_eq!(consumed, (next + BLOCK) as u64);
        // The tar crate agrees: the file holds the lookalike; the next header is refused.
        let mut archive = tar::Archive::new(TarGuard::new(&stream[..]));
        let mut entries = archive.entries().unwrap();
        let mut first = entries.next().unwrap().unwrap();
        assert_eq!(first.size(), 1024);
        let mut data = Vec::new();
        first.read_to_end(&mut data).unwrap();
        assert_eq!(&data[..BLOCK], &hidden[..]);
        drop(first);
        assert!(entries.next().unwrap().err().is_some_and(|e| refusal(&e).is_some()));

        // A `size` record the tar crate cannot read is ignored by both: the header
        // right after the file's is the next.
        let start = [pax(&[("size", "x024")]), file.as_bytes().to_vec()].concat();
        let stream = [start.clone(), hidden.to_vec()].concat();
        let (refused, _) = through(&stream[..], &[4096]);
        assert_eq!(refused_as(refused), too_large(ExtensionKind::GnuLongName, start.len(), 1 << 30));
    }

    /// A GNU sparse entry's map may go on in extension blocks before its data: the
    /// guard passes them as the tar crate reads them, and still finds the next header.
    #[test]
    fn a_sparse_entry_with_extension_blocks_is_tracked() {
        let mut header = tar::Header::new_gnu();
        header.as_old_mut().name[..6].copy_from_slice(b"sparse");
        header.set_entry_type(tar::EntryType::GNUSparse);
        header.set_mode(0o644);
        header.set_size(1024); // the data stored: two blocks of 512
        let gnu = header.as_gnu_mut().unwrap();
        gnu.sparse[0].set_offset(0);
        gnu.sparse[0].set_length(512);
        gnu.set_is_extended(true);
        gnu.set_real_size(1536);
        header.set_cksum();
        let mut map = tar::GnuExtSparseHeader::new();
        map.sparse[0].set_offset(1024);
        map.sparse[0].set_length(512);
        let sparse = [header.as_bytes().to_vec(), map.as_bytes().to_vec(), vec![b'x'; 512], vec![b'y'; 512]].concat();
        let stream = [sparse.clone(), archive_with_extension(b'L', 100)].concat();
        let mut archive = tar::Archive::new(TarGuard::new(trickle(&stream, &[511, 513])));
        let mut contents = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            contents.push((entry.path().unwrap().to_string_lossy().into_owned(), data.len()));
        }
        assert_eq!(contents, [("sparse".to_string(), 1536), ("n".repeat(99), 2)]);
        // And a GiB header in that place is refused there.
        let stream = [sparse.clone(), extension(b'K', 1 << 30).to_vec()].concat();
        let (refused, consumed) = through(&stream[..], &[700]);
        assert_eq!(refused_as(refused), too_large(ExtensionKind::GnuLongLink, sparse.len(), 1 << 30));
        assert_eq!(consumed, (sparse.len() + BLOCK) as u64);
    }

    #[test]
    fn names_in_messages_are_cut_and_escaped() {
        assert_eq!(quoted("a/b c"), "\"a/b c\"");
        assert_eq!(quoted("tab\there\u{1b}[2J"), "\"tab\\there\\u{1b}[2J\"");
        let long = "é".repeat(40_000);
        let shown = quoted(&long);
        assert!(shown.len() < SHOWN_NAME + 32, "{}", shown.len());
        assert!(shown.ends_with("…\" (80000 bytes)"), "{shown}");
        assert!(shown.starts_with("\"éé"));
        assert_eq!(clipped("short"), "short");
        let clipped = clipped(&long);
        assert!(clipped.len() < SHOWN_NAME + 32 && clipped.ends_with("… (80000 bytes)"), "{clipped}");
    }
}
