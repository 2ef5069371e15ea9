//! The byte-level follower under [`super`]'s watched reads: one HTTP/1.1
//! response's head, then its body as framed by `Content-Length`, chunks or
//! the connection's end, counted by the request's [`Rule`] (whole answers,
//! JSON lines, a container's log frames). It owns no I/O: the watched
//! connection feeds it the bytes hyper reads.
use super::{Rule, TooMuch, ANSWER_LIMIT, STREAM_MESSAGE_LIMIT};

/// The most of a response's head the inspector gathers; hyper refuses a
/// longer one itself (its buffer is about 400 KiB).
const HEAD_LIMIT: usize = 1024 * 1024;

/// Follows the bytes of one HTTP/1.1 response (its head, then its body as
/// framed by `Content-Length`, chunks or the connection's end) and counts
/// its body by the request's [`Rule`]. What it does not understand it stops
/// watching: hyper, reading the same bytes, refuses it then.
pub(super) struct Inspector {
    /// The error to give, with the request (its limit and kind set later).
    report: TooMuch,
    rule: Rule,
    head_request: bool,
    phase: Phase,
}

enum Phase {
    /// The head so far.
    Head(Vec<u8>),
    /// The body: how it is framed, and its count.
    Body(Framing, Counter),
    /// Not watched any more: no body, its end, an upgrade, or framing
    /// hyper will refuse.
    Pass,
}

enum Framing {
    /// `Content-Length`: the bytes left.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked(Chunk),
    /// Until the connection closes.
    UntilClose,
}

/// Where a chunked body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// In a size line: the size so far, whether a digit came, whether an
    /// extension (`;…`) started, and the line's length.
    Size {
        size: u64,
        digit: bool,
        extension: bool,
        length: usize,
    },
    /// In a chunk's data: the bytes left.
    Data(u64),
    /// After a chunk's data, before its line end.
    DataEnd,
    /// In the trailers: the current line's length.
    Trailer(usize),
}

const NEW_SIZE: Chunk = Chunk::Size {
    size: 0,
    digit: false,
    extension: false,
    length: 0,
};

/// The longest chunk-size or trailer line followed.
const CHUNK_LINE_LIMIT: usize = 64 * 1024;

/// A body's count, by its rule.
enum Counter {
    /// Bytes in all.
    Whole(u64),
    /// Bytes since the last newline.
    Lines(u64),
    /// Where the frames are.
    Frames(Frame),
}

/// Where a multiplexed log stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// At a message's start.
    Start,
    /// In an 8-byte header: the bytes seen, and the length's 4 bytes.
    Header(u8, [u8; 4]),
    /// In a frame's payload: the bytes left.
    Payload(u64),
    /// In a line without a header (its first byte is not a stream number):
    /// its bytes so far.
    Console(u64),
}

impl Inspector {
    pub(super) fn new(report: TooMuch, rule: Rule, head_request: bool) -> Self {
        Self {
            report,
            rule,
            head_request,
            phase: Phase::Head(Vec::new()),
        }
    }

    /// Follows `bytes`, the next ones read from the connection.
    pub(super) fn feed(&mut self, mut bytes: &[u8]) -> Result<(), TooMuch> {
        while !bytes.is_empty() {
            match &mut self.phase {
                Phase::Pass => return Ok(()),
                Phase::Head(head) => {
                    let from = head.len().saturating_sub(3);
                    head.extend_from_slice(bytes);
                    bytes = &[];
                    let Some(end) = head[from..]
                        .windows(4)
                        .position(|w| w == b"\r\n\r\n")
                        .map(|i| from + i + 4)
                    else {
                        if head.len() > HEAD_LIMIT {
                            self.phase = Phase::Pass;
                        }
                        continue;
                    };
                    let head = std::mem::take(head);
                    self.phase = self.after_head(&head[..end]);
                    // What followed the head is the body (or the next head).
                    self.feed(&head[end..])?;
                }
                Phase::Body(framing, counter) => {
                    let stream = !matches!(counter, Counter::Whole(_));
                    let limit = if stream {
                        STREAM_MESSAGE_LIMIT
                    } else {
                        ANSWER_LIMIT
                    };
                    let over = |report: &TooMuch| TooMuch {
                        limit,
                        stream,
                        ..report.clone()
                    };
                    match framing {
                        Framing::UntilClose => {
                            counter
                                .count(bytes, limit as u64)
                                .map_err(|()| over(&self.report))?;
                            bytes = &[];
                        }
                        Framing::Length(left) => {
                            let take = (*left).min(bytes.len() as u64) as usize;
                            counter
                                .count(&bytes[..take], limit as u64)
                                .map_err(|()| over(&self.report))?;
                            *left -= take as u64;
                            bytes = &bytes[take..];
                            if *left == 0 {
                                self.phase = Phase::Pass;
                            }
                        }
                        Framing::Chunked(chunk) => match *chunk {
                            Chunk::Data(left) => {
                                let take = left.min(bytes.len() as u64) as usize;
                                counter
                                    .count(&bytes[..take], limit as u64)
                                    .map_err(|()| over(&self.report))?;
                                bytes = &bytes[take..];
                                *chunk = if left == take as u64 {
                                    Chunk::DataEnd
                                } else {
                                    Chunk::Data(left - take as u64)
                                };
                            }
                            _ => {
                                let next = step_chunk(*chunk, bytes[0]);
                                bytes = &bytes[1..];
                                match next {
                                    Some(next) => *chunk = next,
                                    // The body's end, or framing hyper refuses.
                                    None => self.phase = Phase::Pass,
                                }
                            }
                        },
                    }
                }
            }
        }
        Ok(())
    }

    /// The phase after a response's `head` (its status line and headers,
    /// blank line included).
    fn after_head(&self, head: &[u8]) -> Phase {
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut response = httparse::Response::new(&mut headers);
        let Ok(httparse::Status::Complete(_)) = response.parse(head) else {
            return Phase::Pass;
        };
        let Some(code) = response.code else {
            return Phase::Pass;
        };
        match code {
            // An upgrade: the connection is no longer HTTP.
            101 => return Phase::Pass,
            // An interim answer (100 Continue): the real head follows.
            100..=199 => return Phase::Head(Vec::new()),
            204 | 304 => return Phase::Pass,
            _ if self.head_request => return Phase::Pass,
            _ => {}
        }
        let header = |name: &str| {
            response
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        };
        let chunked = header("transfer-encoding")
            .iter()
            .flat_map(|v| {
                v.split(',')
                    .map(str::trim)
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .last()
            .is_some_and(|coding| coding == "chunked");
        let framing = if chunked {
            Framing::Chunked(NEW_SIZE)
        } else if let Some(length) = header("content-length").first() {
            match length.parse::<u64>() {
                Ok(0) => return Phase::Pass,
                Ok(n) => Framing::Length(n),
                Err(_) => return Phase::Pass,
            }
        } else {
            Framing::UntilClose
        };
        // An error's body is read whole, whatever the request.
        let rule = if (200..300).contains(&code) {
            self.rule
        } else {
            Rule::Whole
        };
        let counter = match rule {
            Rule::Whole => Counter::Whole(0),
            Rule::Lines => Counter::Lines(0),
            Rule::Frames => Counter::Frames(Frame::Start),
        };
        Phase::Body(framing, counter)
    }
}

/// The chunked body's state after `byte` (outside chunk data); `None` at
/// the body's end or on framing hyper refuses.
fn step_chunk(chunk: Chunk, byte: u8) -> Option<Chunk> {
    match chunk {
        Chunk::Size {
            size,
            digit,
            extension,
            length,
        } => {
            if length > CHUNK_LINE_LIMIT {
                return None;
            }
            let length = length + 1;
            match byte {
                b'\n' if !digit => None,
                b'\n' if size == 0 => Some(Chunk::Trailer(0)),
                b'\n' => Some(Chunk::Data(size)),
                b'\r' => Some(Chunk::Size {
                    size,
                    digit,
                    extension,
                    length,
                }),
                _ if extension => Some(Chunk::Size {
                    size,
                    digit,
                    extension,
                    length,
                }),
                b';' | b' ' | b'\t' if digit => Some(Chunk::Size {
                    size,
                    digit,
                    extension: true,
                    length,
                }),
                _ => {
                    let value = (byte as char).to_digit(16)?;
                    let size = size.checked_mul(16)?.checked_add(u64::from(value))?;
                    Some(Chunk::Size {
                        size,
                        digit: true,
                        extension,
                        length,
                    })
                }
            }
        }
        Chunk::DataEnd => match byte {
            b'\r' => Some(Chunk::DataEnd),
            b'\n' => Some(NEW_SIZE),
            _ => None,
        },
        Chunk::Trailer(length) => match byte {
            // An empty line ends the trailers, and the body.
            b'\n' if length == 0 => None,
            b'\n' => Some(Chunk::Trailer(0)),
            b'\r' => Some(Chunk::Trailer(length)),
            _ if length > CHUNK_LINE_LIMIT => None,
            _ => Some(Chunk::Trailer(length + 1)),
        },
        // Data is counted by the caller.
        Chunk::Data(_) => Some(chunk),
    }
}

impl Counter {
    /// Counts `bytes` of the body; `Err` past `limit`.
    fn count(&mut self, bytes: &[u8], limit: u64) -> Result<(), ()> {
        match self {
            Counter::Whole(seen) => {
                *seen += bytes.len() as u64;
                if *seen > limit {
                    return Err(());
                }
            }
            Counter::Lines(since) => {
                *since = match bytes.iter().rposition(|b| *b == b'\n') {
                    Some(i) => (bytes.len() - i - 1) as u64,
                    None => *since + bytes.len() as u64,
                };
                if *since > limit {
                    return Err(());
                }
            }
            Counter::Frames(frame) => {
                let mut bytes = bytes;
                while !bytes.is_empty() {
                    match *frame {
                        // bollard reads a first byte past 2 (no stream
                        // number) as the start of a line without a header.
                        Frame::Start if bytes[0] > 2 => *frame = Frame::Console(0),
                        Frame::Start => *frame = Frame::Header(0, [0; 4]),
                        Frame::Header(seen, mut length) => {
                            if seen >= 4 {
                                length[usize::from(seen) - 4] = bytes[0];
                            }
                            bytes = &bytes[1..];
                            *frame = if seen + 1 < 8 {
                                Frame::Header(seen + 1, length)
                            } else {
                                match u64::from(u32::from_be_bytes(length)) {
                                    n if n > limit => return Err(()),
                                    0 => Frame::Start,
                                    n => Frame::Payload(n),
                                }
                            };
                        }
                        Frame::Payload(left) => {
                            let take = left.min(bytes.len() as u64);
                            bytes = &bytes[take as usize..];
                            *frame = if take == left {
                                Frame::Start
                            } else {
                                Frame::Payload(left - take)
                            };
                        }
                        Frame::Console(seen) => match bytes.iter().position(|b| *b == b'\n') {
                            Some(i) => {
                                if seen + i as u64 + 1 > limit {
                                    return Err(());
                                }
                                bytes = &bytes[i + 1..];
                                *frame = Frame::Start;
                            }
                            None => {
                                let seen = seen + bytes.len() as u64;
                                if seen > limit {
                                    return Err(());
                                }
                                bytes = &[];
                                *frame = Frame::Console(seen);
                            }
                        },
                    }
                }
            }
        }
        Ok(())
    }
}
