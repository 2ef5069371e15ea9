//! Tests of the transport (`transport.rs`), kept in a file of their own.
use super::*;

fn inspector(method: Method, path: &str) -> Inspector {
    Inspector::new(
        TooMuch {
            address: "unix:///x.sock".into(),
            request: format!("{method} {path}"),
            limit: ANSWER_LIMIT,
            stream: false,
        },
        rule_for(&method, path),
        method == Method::HEAD,
    )
}

/// Feeds `bytes` in pieces of `step`; the first error, if any.
fn feed(i: &mut Inspector, bytes: &[u8], step: usize) -> Result<(), TooMuch> {
    for piece in bytes.chunks(step) {
        i.feed(piece)?;
    }
    Ok(())
}

fn chunked(body: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in body.chunks(chunk) {
        out.extend_from_slice(format!("{:x};ext=1\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
    out
}

const CHUNKED: &str =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

#[test]
fn requests_get_the_rule_of_how_bollard_reads_their_answer() {
    let rule = |m: Method, p: &str| rule_for(&m, p);
    assert_eq!(rule(Method::GET, "/v1.41/version"), Rule::Whole);
    assert_eq!(rule(Method::GET, "/_ping"), Rule::Whole);
    assert_eq!(rule(Method::GET, "/v1.41/images/a/b:c/json"), Rule::Whole);
    assert_eq!(rule(Method::POST, "/v1.41/build"), Rule::Lines);
    assert_eq!(
        rule(Method::POST, "/v1.41/images/localhost:5000/a/b/push"),
        Rule::Lines
    );
    assert_eq!(rule(Method::POST, "/containers/abc/wait"), Rule::Lines);
    assert_eq!(
        rule(Method::GET, "/v1.53/containers/abc/logs"),
        Rule::Frames
    );
    assert_eq!(rule(Method::GET, "/v1.41/containers/json"), Rule::Whole);
    // A wait is a POST; a GET of the same path is read whole.
    assert_eq!(rule(Method::GET, "/containers/abc/wait"), Rule::Whole);
}

#[test]
fn a_whole_answer_passes_up_to_its_limit_in_every_framing() {
    let body = vec![b'x'; ANSWER_LIMIT];
    for step in [1 << 16, 7919] {
        // Content-Length, exactly at the limit: nothing to say.
        let mut i = inspector(Method::GET, "/v1.41/version");
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
        feed(&mut i, &[head.as_bytes(), &body].concat(), step).unwrap();
        // Chunked, at the limit, then one byte past it.
        let mut i = inspector(Method::GET, "/v1.41/version");
        feed(
            &mut i,
            &[CHUNKED.as_bytes(), &chunked(&body, 40000)].concat(),
            step,
        )
        .unwrap();
        let mut i = inspector(Method::GET, "/v1.41/version");
        let over = [
            CHUNKED.as_bytes(),
            &chunked(&[&body[..], b"y"].concat(), 40000),
        ]
        .concat();
        let e = feed(&mut i, &over, step).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the Docker engine at unix:///x.sock sent more than imgctl reads: its answer to GET /v1.41/version passed 16 MiB"
        );
        // Until the connection closes.
        let mut i = inspector(Method::GET, "/v1.41/version");
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n";
        assert!(feed(&mut i, &[head.as_bytes(), &body, b"y"].concat(), step).is_err());
    }
}

#[test]
fn an_error_answer_is_read_whole_even_for_a_stream() {
    let mut i = inspector(Method::POST, "/v1.41/build");
    let head = "HTTP/1.1 500 Internal Server Error\r\n\r\n";
    let body = "line\n".repeat(ANSWER_LIMIT / 5 + 1);
    assert!(
        !feed(
            &mut i,
            &[head.as_bytes(), body.as_bytes()].concat(),
            1 << 16
        )
        .unwrap_err()
        .stream
    );
}

#[test]
fn a_stream_runs_on_while_each_message_stays_under_its_limit() {
    // 32 MiB of lines: more than any answer, and fine.
    let mut i = inspector(Method::POST, "/v1.41/images/a/push");
    let line = format!("{{\"status\":\"{}\"}}\n", "p".repeat(1000));
    let body = line.repeat(32 * 1024 * 1024 / line.len());
    feed(
        &mut i,
        &[CHUNKED.as_bytes(), &chunked(body.as_bytes(), 30000)].concat(),
        1 << 16,
    )
    .unwrap();
    // One line without an end: refused past 1 MiB, however it is chunked.
    let mut i = inspector(Method::POST, "/v1.41/build");
    let endless = vec![b'x'; STREAM_MESSAGE_LIMIT + 1];
    let e = feed(
        &mut i,
        &[CHUNKED.as_bytes(), &chunked(&endless, 100)].concat(),
        4096,
    )
    .unwrap_err();
    assert!(e.stream);
    assert!(
        e.to_string()
            .ends_with("a message of its stream for POST /v1.41/build passed 1 MiB"),
        "{e}"
    );
}

#[test]
fn log_frames_are_bounded_by_their_length_not_their_count() {
    let frame = |stream: u8, payload: &[u8]| {
        let mut f = vec![stream, 0, 0, 0];
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    };
    let mut body = Vec::new();
    for _ in 0..3000 {
        body.extend(frame(1, &[b'o'; 16 * 1024]));
        body.extend(frame(2, b"line with a newline\n"));
    }
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n\r\n";
    let mut i = inspector(Method::GET, "/v1.41/containers/abc/logs");
    feed(&mut i, &[head.as_bytes(), &body].concat(), 5000).unwrap();
    // A header announcing 4 GiB is refused at once.
    let mut i = inspector(Method::GET, "/v1.41/containers/abc/logs");
    let huge = [2, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
    assert!(
        feed(&mut i, &[head.as_bytes(), &huge].concat(), 3)
            .unwrap_err()
            .stream
    );
    // Text without headers: lines, each bounded.
    let mut i = inspector(Method::GET, "/v1.41/containers/abc/logs");
    let text = [head.as_bytes(), &vec![b'a'; STREAM_MESSAGE_LIMIT + 1]].concat();
    assert!(feed(&mut i, &text, 4096).is_err());
}

#[test]
fn upgrades_no_content_and_head_answers_are_not_watched() {
    let endless = vec![b'x'; ANSWER_LIMIT + 1];
    let mut i = inspector(Method::POST, "/session");
    let head = "HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";
    feed(&mut i, &[head.as_bytes(), &endless].concat(), 1 << 16).unwrap();
    let mut i = inspector(Method::HEAD, "/_ping");
    feed(
        &mut i,
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
        7,
    )
    .unwrap();
    // An interim answer, then the real one, which is watched.
    let mut i = inspector(Method::GET, "/v1.41/version");
    let head = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n";
    assert!(feed(&mut i, &[head.as_bytes(), &endless].concat(), 1 << 16).is_err());
    // After its Content-Length, a body is done.
    let mut i = inspector(Method::GET, "/v1.41/version");
    feed(
        &mut i,
        &[
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}".as_slice(),
            &endless,
        ]
        .concat(),
        1 << 16,
    )
    .unwrap();
}

#[test]
fn the_cause_survives_in_the_error_chain() {
    let t = TooMuch {
        address: "unix:///x.sock".into(),
        request: "GET /v1.41/version".into(),
        limit: ANSWER_LIMIT,
        stream: false,
    };
    let err = BollardError::from(io::Error::other(t.clone()));
    assert_eq!(too_much(&err), Some(t.clone()));
    assert!(words(&err).ends_with("passed 16 MiB"), "{}", words(&err));
    let other = BollardError::from(io::Error::other("nope"));
    assert_eq!(too_much(&other), None);
    assert_eq!(size_text(64 * 1024), "64 KiB");
    assert_eq!(size_text(1000), "1000 bytes");
}
