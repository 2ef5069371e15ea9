//! The classic builder (BuilderV1): its text stream and its steps.
//!
//! The classic builder (API 1.41 on Docker 20.10, deprecated but still served
//! by current engines) streams JSON messages whose `stream` text reads
//! `Step 3/14 : RUN …`, ` ---> Using cache`, ` ---> Running in <id>`, the
//! step's output, ` ---> <layer id>`; the final image id comes in `aux.ID`,
//! and a failure as `errorDetail`. [`StepParser`] turns that text into
//! [`BuildEvent`]s.
use std::collections::VecDeque;
use std::time::Instant;

use bollard::models::BuildInfoAux;
use bollard::query_parameters::{BuildImageOptions, BuilderVersion};
use futures_util::StreamExt;

use crate::docker::tail::LineSplitter;

use super::{
    engine_message, exit_code_of, options, BuildError, BuildEvent, BuildOutcome, BuildRequest,
    BuildTracker, StepRecord, FAILURE_TAIL_LINES,
};

/// Turns the builder's `stream` text (chunks not aligned on lines) into events.
/// A line longer than [`OUTPUT_TAIL`](crate::docker::tail::OUTPUT_TAIL)
/// comes out in pieces of that size.
#[derive(Debug, Default)]
pub struct StepParser {
    lines: LineSplitter,
}

impl StepParser {
    /// Feeds a chunk of stream text; returns the events of its complete lines.
    pub fn feed(&mut self, chunk: &str) -> Vec<BuildEvent> {
        self.lines
            .feed(chunk)
            .iter()
            .filter_map(|line| parse_line(line.trim_end_matches('\r')))
            .collect()
    }
    /// Flushes a final line that had no newline.
    pub fn finish(&mut self) -> Vec<BuildEvent> {
        let rest = self.lines.finish().unwrap_or_default();
        parse_line(rest.trim_end()).into_iter().collect()
    }
}

/// Removes ANSI CSI sequences: the classic builder wraps a step's stderr in
/// `ESC[91m` … `ESC[0m` (moby builder/dockerfile/internals.go).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates, then one final byte in @..~.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn parse_line(line: &str) -> Option<BuildEvent> {
    let line = strip_ansi(line);
    let line = line.as_str();
    if line.is_empty() {
        return None;
    }
    if let Some(id) = line.strip_prefix("Removing intermediate container ") {
        return Some(BuildEvent::Removed(id.trim().to_string()));
    }
    // "Step 3/14 : RUN apt-get update"; buildah's (Podman) "STEP 3/14: RUN …".
    let step = (line.strip_prefix("Step ").and_then(|r| r.split_once(" : ")))
        .or_else(|| line.strip_prefix("STEP ").and_then(|r| r.split_once(": ")));
    if let Some((counts, instruction)) = step {
        if let Some((n, total)) = counts.split_once('/') {
            if let (Ok(n), Ok(total)) = (n.trim().parse(), total.trim().parse()) {
                return Some(BuildEvent::Step {
                    n,
                    total,
                    instruction: instruction.trim().to_string(),
                });
            }
        }
    }
    // buildah's: "--> Using cache ID", "--> ID".
    if let Some(rest) = line
        .strip_prefix(" ---> ")
        .or_else(|| line.strip_prefix("--> "))
    {
        let rest = rest.trim();
        if rest == "Using cache" || rest.starts_with("Using cache ") {
            return Some(BuildEvent::Cached);
        }
        if let Some(id) = rest.strip_prefix("Running in ") {
            return Some(BuildEvent::Running(id.trim().to_string()));
        }
        if !rest.is_empty() && rest.chars().all(|c| c.is_ascii_hexdigit()) {
            return Some(BuildEvent::Layer(rest.to_string()));
        }
    }
    Some(BuildEvent::Output(line.to_string()))
}

/// The step being run, for the failure report.
struct Current {
    n: u32,
    total: u32,
    instruction: String,
    started: Instant,
    cached: bool,
    tail: VecDeque<String>,
}

/// Runs a build on the classic builder with `rm` and `forcerm`, so that the
/// engine removes intermediate containers on success and on failure.
pub(super) async fn run(
    docker: &bollard::Docker,
    context: Vec<u8>,
    request: &BuildRequest,
    tracker: &BuildTracker,
    on_event: &mut (dyn FnMut(&BuildEvent) + Send),
) -> Result<BuildOutcome, BuildError> {
    let started = Instant::now();
    let options = BuildImageOptions {
        rm: true,
        forcerm: true,
        version: BuilderVersion::BuilderV1,
        ..options(request)
    };
    let body = bollard::body_full(context.into());
    let mut stream = docker.build_image(options, None, Some(body));

    let mut parser = StepParser::default();
    let mut steps: Vec<StepRecord> = Vec::new();
    let mut current: Option<Current> = None;
    let mut image_id: Option<String> = None;
    let mut last_layer: Option<String> = None;

    let mut handle =
        |ev: BuildEvent, current: &mut Option<Current>, steps: &mut Vec<StepRecord>| {
            match &ev {
                BuildEvent::Step {
                    n,
                    total,
                    instruction,
                } => {
                    if let Some(done) = current.take() {
                        steps.push(done.record());
                    }
                    *current = Some(Current {
                        n: *n,
                        total: *total,
                        instruction: instruction.clone(),
                        started: Instant::now(),
                        cached: false,
                        tail: VecDeque::new(),
                    });
                }
                BuildEvent::Cached => {
                    if let Some(c) = current.as_mut() {
                        c.cached = true;
                    }
                }
                BuildEvent::Running(id) => tracker.record(id),
                BuildEvent::Output(line) => {
                    if let Some(c) = current.as_mut() {
                        if c.tail.len() == FAILURE_TAIL_LINES {
                            c.tail.pop_front();
                        }
                        c.tail.push_back(line.clone());
                    }
                }
                BuildEvent::Layer(id) => last_layer = Some(id.clone()),
                BuildEvent::Removed(_) => {}
            }
            on_event(&ev);
        };

    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => {
                if let Some(text) = info.stream.as_deref() {
                    for ev in parser.feed(text) {
                        handle(ev, &mut current, &mut steps);
                    }
                }
                if let Some(status) = info.status.as_deref() {
                    // Pull progress of a base image (`--pull`).
                    handle(
                        BuildEvent::Output(status.trim().to_string()),
                        &mut current,
                        &mut steps,
                    );
                }
                if let Some(BuildInfoAux::Default(aux)) = info.aux {
                    if let Some(id) = aux.id {
                        image_id = Some(id);
                    }
                }
            }
            Err(err) => {
                for ev in parser.finish() {
                    handle(ev, &mut current, &mut steps);
                }
                if let Some(too_much) = crate::docker::transport::too_much(&err) {
                    return Err(BuildError::TooMuch(too_much));
                }
                let message = engine_message(&err);
                return Err(match current {
                    Some(c) => BuildError::StepFailed {
                        n: c.n,
                        total: c.total,
                        exit_code: exit_code_of(&message),
                        instruction: c.instruction,
                        message,
                        tail: c.tail.into_iter().collect(),
                    },
                    None => BuildError::Engine(message),
                });
            }
        }
    }
    for ev in parser.finish() {
        handle(ev, &mut current, &mut steps);
    }
    if let Some(done) = current.take() {
        steps.push(done.record());
    }
    // Engines that omit `aux` still print "Successfully built <id>".
    let image_id = image_id.or(last_layer).ok_or_else(|| {
        BuildError::Engine("the build stream ended without an image id".to_string())
    })?;
    Ok(BuildOutcome {
        image_id,
        steps,
        seconds: started.elapsed().as_secs_f64(),
    })
}

impl Current {
    fn record(self) -> StepRecord {
        StepRecord {
            n: self.n,
            instruction: self.instruction,
            cached: self.cached,
            seconds: self.started.elapsed().as_secs_f64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_classic_builder_stream_across_chunk_boundaries() {
        let mut p = StepParser::default();
        let mut evs = p.feed("Step 1/3 : FROM imgctl-test/busybox:latest\n ---> b5e0801ca50d\nSte");
        evs.extend(p.feed("p 2/3 : RUN echo hi && false\n ---> Running in 2c9a0f\nhi\n"));
        evs.extend(p.feed("\u{1b}[91moops\n\u{1b}[0mRemoving intermediate container 2c9a0f\n"));
        evs.extend(p.feed("Step 3/3 : LABEL a=b\n ---> Using cache\n ---> 8f7e11aa\n"));
        evs.extend(p.feed("Successfully built 8f7e11aa"));
        evs.extend(p.finish());
        assert_eq!(
            evs,
            vec![
                BuildEvent::Step {
                    n: 1,
                    total: 3,
                    instruction: "FROM imgctl-test/busybox:latest".into()
                },
                BuildEvent::Layer("b5e0801ca50d".into()),
                BuildEvent::Step {
                    n: 2,
                    total: 3,
                    instruction: "RUN echo hi && false".into()
                },
                BuildEvent::Running("2c9a0f".into()),
                BuildEvent::Output("hi".into()),
                BuildEvent::Output("oops".into()),
                BuildEvent::Removed("2c9a0f".into()),
                BuildEvent::Step {
                    n: 3,
                    total: 3,
                    instruction: "LABEL a=b".into()
                },
                BuildEvent::Cached,
                BuildEvent::Layer("8f7e11aa".into()),
                BuildEvent::Output("Successfully built 8f7e11aa".into()),
            ]
        );
    }

    #[test]
    fn an_endless_output_line_comes_out_in_bounded_pieces() {
        use crate::docker::tail::OUTPUT_TAIL;
        let mut p = StepParser::default();
        let chunk = "z".repeat(100_000);
        let mut longest = 0;
        for _ in 0..100 {
            for ev in p.feed(&chunk) {
                let BuildEvent::Output(line) = ev else {
                    panic!("{ev:?}")
                };
                longest = longest.max(line.len());
            }
        }
        assert_eq!(longest, OUTPUT_TAIL);
        assert_eq!(p.feed("z\r\nStep 2/2 : RUN true\n").len(), 2);
    }

    #[test]
    fn reads_the_exit_code_of_a_failed_run() {
        assert_eq!(
            exit_code_of("The command '/bin/sh -c exit 3' returned a non-zero code: 3"),
            Some(3)
        );
        assert_eq!(
            exit_code_of("building at STEP \"RUN exit 3\": while running runtime: exit status 3"),
            Some(3)
        );
        assert_eq!(exit_code_of("no such image"), None);
    }
}
