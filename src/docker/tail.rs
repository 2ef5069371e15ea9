//! Output kept for an error or a report, bounded whatever a process prints:
//! a credential helper's stdout and stderr ([`super::auth`]), a container's
//! logs ([`super::run`]), a build step's lines ([`super::build`], split by
//! [`LineSplitter`]). A 100 MB reply or stderr stays [`OUTPUT_TAIL`] in
//! memory, and an error line quotes at most [`EXCERPT_CHARS`] of it.

/// The most of one output kept in memory for an error or a report: its last
/// 64 KiB (a helper's reply, a container's stderr, one line of a build
/// step). Far more than an error needs (the last lines are what says why),
/// and little enough that a process printing 100 MB costs nothing.
pub const OUTPUT_TAIL: usize = 64 * 1024;

/// The most of a process's words that one error line quotes: its last 500
/// characters, after `…` (the end of an output says why it failed).
pub const EXCERPT_CHARS: usize = 500;

/// The last bytes of a stream, at most a limit, and how many came before.
#[derive(Debug, Clone)]
pub struct Tail {
    /// The bytes kept: at most twice the limit, trimmed to it when read.
    bytes: Vec<u8>,
    limit: usize,
    /// Bytes dropped from the front so far.
    cut: u64,
}

impl Tail {
    /// An empty tail that keeps the last `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            bytes: Vec::new(),
            limit,
            cut: 0,
        }
    }

    /// Appends `more`, dropping from the front what passes the limit (in
    /// amortized constant time per byte).
    pub fn push(&mut self, more: &[u8]) {
        if more.len() >= self.limit {
            self.cut += (self.bytes.len() + more.len() - self.limit) as u64;
            self.bytes.clear();
            self.bytes
                .extend_from_slice(&more[more.len() - self.limit..]);
            return;
        }
        self.bytes.extend_from_slice(more);
        if self.bytes.len() > 2 * self.limit {
            self.trim();
        }
    }

    fn trim(&mut self) {
        let excess = self.bytes.len().saturating_sub(self.limit);
        if excess > 0 {
            self.bytes.drain(..excess);
            self.cut += excess as u64;
        }
    }

    /// How many bytes came in all.
    pub fn total(&self) -> u64 {
        self.cut + self.bytes.len() as u64
    }

    /// How many bytes were dropped from the front (0: all of it is kept).
    pub fn cut(&self) -> u64 {
        self.cut + self.bytes.len().saturating_sub(self.limit) as u64
    }

    /// The bytes kept: the last `limit` of the stream.
    pub fn into_bytes(mut self) -> Vec<u8> {
        self.trim();
        self.bytes
    }

    /// The bytes kept as text (invalid UTF-8 replaced); a character cut in
    /// two at the front is left out.
    pub fn into_text(self) -> String {
        let cut = self.cut() > 0;
        let bytes = self.into_bytes();
        let start = if cut {
            bytes
                .iter()
                .position(|b| (b & 0xC0) != 0x80)
                .unwrap_or(bytes.len())
        } else {
            0
        };
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }
}

/// Splits text that arrives in chunks into lines (without their `\n`), a
/// line longer than a limit into pieces of at most that many bytes: an
/// endless line costs no more memory than the limit, and each byte is looked
/// at once.
#[derive(Debug, Clone)]
pub struct LineSplitter {
    /// The unfinished line: shorter than `limit`.
    pending: String,
    limit: usize,
}

impl Default for LineSplitter {
    /// Lines of at most [`OUTPUT_TAIL`] bytes.
    fn default() -> Self {
        Self::new(OUTPUT_TAIL)
    }
}

impl LineSplitter {
    /// Lines of at most `limit` bytes (at least 4: one character).
    pub fn new(limit: usize) -> Self {
        Self {
            pending: String::new(),
            limit: limit.max(4),
        }
    }

    /// Feeds `text`; returns the lines it completed (and the pieces of a
    /// line that passed the limit).
    pub fn feed(&mut self, text: &str) -> Vec<String> {
        let mut lines = Vec::new();
        for piece in text.split_inclusive('\n') {
            let (mut piece, ends) = match piece.strip_suffix('\n') {
                Some(line) => (line, true),
                None => (piece, false),
            };
            while self.pending.len() + piece.len() > self.limit {
                let mut cut = self.limit - self.pending.len();
                while !piece.is_char_boundary(cut) {
                    cut -= 1;
                }
                self.pending.push_str(&piece[..cut]);
                lines.push(std::mem::take(&mut self.pending));
                piece = &piece[cut..];
            }
            self.pending.push_str(piece);
            if ends {
                lines.push(std::mem::take(&mut self.pending));
            }
        }
        lines
    }

    /// The unfinished line, once the text has ended (`None`: there is none).
    pub fn finish(&mut self) -> Option<String> {
        (!self.pending.is_empty()).then(|| std::mem::take(&mut self.pending))
    }
}

/// `text` on one line (runs of whitespace become one space), at most
/// [`EXCERPT_CHARS`] characters of its end, after `…` when cut.
pub fn excerpt(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    let line = words.join(" ");
    let count = line.chars().count();
    if count <= EXCERPT_CHARS {
        return line;
    }
    let end: String = line.chars().skip(count - EXCERPT_CHARS).collect();
    format!("…{end}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_keeps_the_last_bytes_and_counts_the_rest() {
        let mut tail = Tail::new(10);
        tail.push(b"0123");
        assert_eq!((tail.total(), tail.cut()), (4, 0));
        for _ in 0..100 {
            tail.push(b"abcdefg");
        }
        tail.push(b"XYZ");
        assert_eq!(tail.total(), 4 + 700 + 3);
        assert_eq!(tail.cut(), 4 + 700 + 3 - 10);
        assert_eq!(tail.clone().into_bytes(), b"abcdefgXYZ");
        // One push past the limit keeps its end.
        tail.push(&[b'y'; 25]);
        assert_eq!(tail.clone().into_text(), "y".repeat(10));
        assert_eq!(tail.total(), 707 + 25);
        // A character cut in two at the front is left out.
        let mut text = Tail::new(4);
        text.push("aé€".as_bytes());
        assert_eq!(text.into_text(), "€");
    }

    #[test]
    fn lines_are_split_across_chunks_and_an_endless_one_into_pieces() {
        let mut lines = LineSplitter::new(8);
        assert_eq!(lines.feed("ab\ncd"), ["ab"]);
        assert_eq!(lines.feed("ef\n\n"), ["cdef", ""]);
        assert_eq!(lines.feed("0123456789abcdefghij"), ["01234567", "89abcdef"]);
        assert_eq!(lines.feed("k\r\nrest"), ["ghijk\r"]);
        assert_eq!(lines.finish().as_deref(), Some("rest"));
        assert_eq!(lines.finish(), None);
        // A piece never splits a character.
        let mut wide = LineSplitter::new(5);
        assert_eq!(wide.feed("€€€"), ["€", "€"]);
        assert_eq!(wide.finish().as_deref(), Some("€"));
        // 100 MB without a newline: pieces of the limit, nothing more kept.
        let mut big = LineSplitter::default();
        let chunk = "x".repeat(1 << 20);
        let mut n = 0;
        for _ in 0..100 {
            for line in big.feed(&chunk) {
                assert_eq!(line.len(), OUTPUT_TAIL);
                n += 1;
            }
        }
        // The last piece waits for more of its line.
        assert_eq!(n, 100 * (1 << 20) / OUTPUT_TAIL - 1);
        assert_eq!(big.finish().map(|l| l.len()), Some(OUTPUT_TAIL));
    }

    #[test]
    fn an_excerpt_is_one_line_of_the_end() {
        assert_eq!(excerpt("  keychain\n locked\t "), "keychain locked");
        let long = format!("{} the end", "x".repeat(10_000));
        let short = excerpt(&long);
        assert_eq!(short.chars().count(), EXCERPT_CHARS + 1);
        assert!(short.starts_with('…') && short.ends_with("x the end"));
    }
}
