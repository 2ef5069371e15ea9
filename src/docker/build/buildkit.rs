//! BuildKit through the Engine API: `/build` with `version=2` and a session,
//! and its vertex stream mapped onto the same [`BuildEvent`]s as the classic
//! builder's text.
//!
//! BuildKit reports progress as `moby.buildkit.trace` messages whose `aux` is
//! a protobuf `StatusResponse` (bollard decodes it): vertexes (a digest, a
//! name such as `[3/9] RUN pip install …`, started/completed times, `cached`,
//! an error), their logs (bytes, split into lines here), and byte-progress
//! statuses (ignored). The numbered vertexes are the Dockerfile's steps; the
//! others (`[internal] load build definition …`) are reported as output lines.
//! The image id arrives in an `aux` of its own (`moby.image.id`). A failed
//! `RUN` ends the stream with an error such as `executor failed running
//! [/bin/sh -c …]: exit code: 3` (Docker 20.10) or `process "…" did not
//! complete successfully: exit code: 3` (Docker 23+), and the failing vertex
//! carries the same text. [`Trace`] is the pure part, tested without an engine.
//!
//! The `/build` request and its session are imgctl's own ([`super::raw`],
//! [`super::session`]), not bollard's: the session serves the build secrets
//! of the request, and the build names it.
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use bollard::moby::buildkit::v1::StatusResponse;
use bollard::models::BuildInfoAux;
use bollard::query_parameters::{BuildImageOptions, BuilderVersion};
use rand::Rng as _;

use super::raw::{EngineHttp, StreamError};
use super::{
    exit_code_of, options, BuildError, BuildEvent, BuildOutcome, BuildRequest, StepRecord,
    FAILURE_TAIL_LINES,
};
use crate::docker::tail::LineSplitter;

/// `[3/9] RUN …` → (3, 9, `RUN …`); a stage name before the count
/// (`[builder 2/5] COPY …`) is allowed.
fn parse_step_name(name: &str) -> Option<(u32, u32, String)> {
    let rest = name.strip_prefix('[')?;
    let (inside, instruction) = rest.split_once(']')?;
    let counts = inside.split_whitespace().last()?;
    let (n, total) = counts.split_once('/')?;
    Some((
        n.parse().ok()?,
        total.parse().ok()?,
        instruction.trim().to_string(),
    ))
}

#[derive(Debug, Default)]
struct Vertex {
    name: String,
    step: Option<(u32, u32, String)>,
    announced: bool,
    cached_announced: bool,
    cached: bool,
    started: Option<f64>,
    completed: Option<f64>,
    error: String,
    /// The last lines of each stream (1 stdout, 2 stderr), with their order of arrival.
    tail: VecDeque<(u64, i64, String)>,
    /// Unfinished lines per stream (a line past
    /// [`OUTPUT_TAIL`](crate::docker::tail::OUTPUT_TAIL) comes in pieces).
    partial: HashMap<i64, LineSplitter>,
}

/// Of a failed step's stderr, the lines the report keeps even when more
/// stdout arrived after them (BuildKit does not keep the order between the
/// two streams, and the error is usually on stderr).
const STDERR_KEPT: usize = 5;

impl Vertex {
    /// A cache hit in imgctl's words: BuildKit marks a local base image's
    /// vertex cached too, but as with the classic builder a FROM never is one.
    fn cache_hit(&self) -> bool {
        self.cached
            && self
                .step
                .as_ref()
                .is_some_and(|(_, _, instruction)| !super::is_from(instruction))
    }

    /// Keeps the last lines of each stream (enough for [`Vertex::tail_lines`]).
    fn push_tail(&mut self, seq: u64, stream: i64, line: String) {
        self.tail.push_back((seq, stream, line));
        let of_stream = self.tail.iter().filter(|(_, s, _)| *s == stream).count();
        if of_stream > FAILURE_TAIL_LINES {
            if let Some(i) = self.tail.iter().position(|(_, s, _)| *s == stream) {
                self.tail.remove(i);
            }
        }
    }

    /// The last [`FAILURE_TAIL_LINES`] lines in arrival order, keeping the
    /// last [`STDERR_KEPT`] stderr lines among them.
    fn tail_lines(&self) -> Vec<String> {
        let mut all: Vec<&(u64, i64, String)> = self.tail.iter().collect();
        all.sort_by_key(|(seq, _, _)| *seq);
        let err: Vec<u64> = all
            .iter()
            .filter(|(_, s, _)| *s == 2)
            .map(|(seq, _, _)| *seq)
            .rev()
            .take(STDERR_KEPT)
            .collect();
        let mut keep: Vec<u64> = err.clone();
        for (seq, _, _) in all.iter().rev() {
            if keep.len() >= FAILURE_TAIL_LINES {
                break;
            }
            if !err.contains(seq) {
                keep.push(*seq);
            }
        }
        all.into_iter()
            .filter(|(seq, _, _)| keep.contains(seq))
            .map(|(_, _, line)| line.clone())
            .collect()
    }
}

/// BuildKit's vertex stream folded into steps, logs and a failure.
#[derive(Debug, Default)]
pub struct Trace {
    vertices: HashMap<String, Vertex>,
    /// Digests in the order first seen.
    order: Vec<String>,
    /// The vertex that reported an error, first one wins.
    failed: Option<String>,
    /// The last step that started (the failure's fallback).
    last_step: Option<String>,
    /// Arrival counter of log lines.
    seq: u64,
}

/// A protobuf timestamp in seconds (the type is prost's, not re-exported by bollard).
macro_rules! seconds {
    ($t:expr) => {
        $t.as_ref()
            .map(|t| t.seconds as f64 + f64::from(t.nanos) * 1e-9)
    };
}

impl Trace {
    /// Folds one status message in; returns the events it means, in order.
    pub fn update(&mut self, status: &StatusResponse) -> Vec<BuildEvent> {
        let mut events = Vec::new();
        for v in &status.vertexes {
            if !self.vertices.contains_key(&v.digest) {
                self.order.push(v.digest.clone());
            }
            let state = self.vertices.entry(v.digest.clone()).or_default();
            if !v.name.is_empty() {
                state.name = v.name.clone();
                state.step = parse_step_name(&v.name);
            }
            state.cached |= v.cached;
            if let Some(t) = seconds!(v.started) {
                state.started.get_or_insert(t);
            }
            if let Some(t) = seconds!(v.completed) {
                state.completed = Some(t);
            }
            if (state.started.is_some() || state.cached) && !state.announced {
                state.announced = true;
                match &state.step {
                    Some((n, total, instruction)) => {
                        events.push(BuildEvent::Step {
                            n: *n,
                            total: *total,
                            instruction: instruction.clone(),
                        });
                        self.last_step = Some(v.digest.clone());
                    }
                    None => events.push(BuildEvent::Output(state.name.clone())),
                }
            }
            if state.cache_hit() && !state.cached_announced {
                state.cached_announced = true;
                events.push(BuildEvent::Cached);
            }
            if !v.error.is_empty() {
                state.error = v.error.clone();
                self.failed.get_or_insert_with(|| v.digest.clone());
            }
        }
        for log in &status.logs {
            let Some(state) = self.vertices.get_mut(&log.vertex) else {
                continue;
            };
            let partial = state.partial.entry(log.stream).or_default();
            let lines: Vec<String> = partial
                .feed(&String::from_utf8_lossy(&log.msg))
                .iter()
                .map(|line| {
                    // A progress line rewritten with \r keeps its last version.
                    let line = line.trim_end_matches('\r');
                    line.rsplit('\r').next().unwrap_or(line).to_string()
                })
                .collect();
            for line in lines {
                self.seq += 1;
                state.push_tail(self.seq, log.stream, line.clone());
                events.push(BuildEvent::Output(line));
            }
        }
        events
    }

    /// The steps seen, in step order, with their durations.
    pub fn steps(&self) -> Vec<StepRecord> {
        let mut steps: Vec<StepRecord> = self
            .order
            .iter()
            .filter_map(|d| self.vertices.get(d))
            .filter_map(|v| {
                let cached = v.cache_hit();
                let (n, _, instruction) = v.step.clone()?;
                if !v.announced {
                    return None;
                }
                let seconds = match (v.started, v.completed) {
                    (Some(a), Some(b)) if b >= a => b - a,
                    _ => 0.0,
                };
                Some(StepRecord {
                    n,
                    cached,
                    instruction,
                    seconds: (seconds * 1000.0).round() / 1000.0,
                })
            })
            .collect();
        steps.sort_by_key(|s| s.n);
        steps.dedup_by_key(|s| s.n);
        steps
    }

    /// The error of a build that ended with `message`: the failing step (or
    /// the last one that started) with its last lines of output.
    pub fn failure(&mut self, message: String) -> BuildError {
        let digest = self.failed.clone().or_else(|| self.last_step.clone());
        let Some(v) = digest.and_then(|d| self.vertices.get_mut(&d)) else {
            return BuildError::Engine(message);
        };
        let rest: Vec<(i64, String)> = v
            .partial
            .iter_mut()
            .filter_map(|(stream, lines)| Some((*stream, lines.finish()?)))
            .collect();
        v.partial.clear();
        for (stream, line) in rest {
            if !line.trim().is_empty() {
                self.seq += 1;
                v.push_tail(self.seq, stream, line.trim_end().to_string());
            }
        }
        let Some((n, total, instruction)) = v.step.clone() else {
            // e.g. `[internal] load metadata for …`: no step of ours failed.
            let what = if v.name.is_empty() {
                message
            } else {
                format!("{}: {message}", v.name)
            };
            return BuildError::Engine(what);
        };
        BuildError::StepFailed {
            n,
            total,
            exit_code: exit_code_of(&message).or_else(|| exit_code_of(&v.error)),
            instruction,
            message,
            tail: v.tail_lines(),
        }
    }
}

/// How long the stream is read on after a build error for trailing logs.
const DRAIN_AFTER_ERROR: std::time::Duration = std::time::Duration::from_millis(500);

/// A BuildKit session id (the engine only needs it unique).
fn session_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::thread_rng();
    (0..25)
        .map(|_| char::from(ALPHABET[rng.gen_range(0..ALPHABET.len())]))
        .collect()
}

/// Runs a build with BuildKit on the engine at `address` (the one `docker`
/// is connected to, at its API version and timeout): opens a session serving
/// `request.secrets`, then sends the build naming it. Dropping the future
/// closes both connections (the engine cancels the build). Nothing else to
/// clean up after a cancellation: BuildKit runs its steps without containers
/// the engine lists.
pub(super) async fn run(
    docker: &bollard::Docker,
    address: &str,
    context: Vec<u8>,
    request: &BuildRequest,
    on_event: &mut (dyn FnMut(&BuildEvent) + Send),
) -> Result<BuildOutcome, BuildError> {
    let started = Instant::now();
    let engine = EngineHttp::new(
        address,
        docker.client_version().to_string(),
        docker.timeout(),
    )
    .map_err(BuildError::Engine)?;
    let id = session_id();
    // Held until the build's end, on every path.
    let _session = super::session::start(&engine, &id, request.secrets.clone())
        .await
        .map_err(|e| BuildError::Engine(format!("cannot open a BuildKit session: {e}")))?;
    let options = BuildImageOptions {
        version: BuilderVersion::BuilderBuildKit,
        session: Some(id),
        ..options(request)
    };
    let mut stream = engine
        .build(&options, context)
        .await
        .map_err(BuildError::Engine)?;
    let mut trace = Trace::default();
    let mut image_id: Option<String> = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => {
                match info.aux {
                    Some(BuildInfoAux::BuildKit(status)) => {
                        for ev in trace.update(&status) {
                            on_event(&ev);
                        }
                    }
                    Some(BuildInfoAux::Default(aux)) => {
                        if let Some(id) = aux.id {
                            image_id = Some(id);
                        }
                    }
                    None => {}
                }
                if let Some(text) = info.stream.as_deref() {
                    for line in text.lines().filter(|l| !l.trim().is_empty()) {
                        on_event(&BuildEvent::Output(line.to_string()));
                    }
                }
            }
            Err(StreamError::TooMuch(too_much)) => return Err(BuildError::TooMuch(too_much)),
            Err(StreamError::Engine(message)) => {
                // Logs can trail the error by a few messages: take what
                // follows within a moment, so the failure's tail is complete.
                let drain = async {
                    while let Some(Ok(info)) = stream.next().await {
                        if let Some(BuildInfoAux::BuildKit(status)) = info.aux {
                            for ev in trace.update(&status) {
                                on_event(&ev);
                            }
                        }
                    }
                };
                let _ = tokio::time::timeout(DRAIN_AFTER_ERROR, drain).await;
                return Err(trace.failure(message));
            }
        }
    }
    let image_id = image_id.ok_or_else(|| {
        BuildError::Engine("the build stream ended without an image id".to_string())
    })?;
    Ok(BuildOutcome {
        image_id,
        steps: trace.steps(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::moby::buildkit::v1::{Vertex as PbVertex, VertexLog};

    fn vertex(digest: &str, name: &str, started: Option<i64>, completed: Option<i64>) -> PbVertex {
        let mut v = PbVertex {
            digest: digest.into(),
            name: name.into(),
            ..Default::default()
        };
        if let Some(s) = started {
            v.started = Some(Default::default());
            v.started.as_mut().unwrap().seconds = s;
        }
        if let Some(s) = completed {
            v.completed = Some(Default::default());
            v.completed.as_mut().unwrap().seconds = s;
        }
        v
    }

    fn status(vertexes: Vec<PbVertex>, logs: Vec<(&str, &str)>) -> StatusResponse {
        StatusResponse {
            vertexes,
            logs: logs
                .into_iter()
                .map(|(v, msg)| VertexLog {
                    vertex: v.into(),
                    msg: msg.as_bytes().to_vec(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn step_names_parse_with_and_without_a_stage() {
        assert_eq!(
            parse_step_name("[3/9] RUN pip install x"),
            Some((3, 9, "RUN pip install x".into()))
        );
        assert_eq!(
            parse_step_name("[builder 2/5] COPY a /b"),
            Some((2, 5, "COPY a /b".into()))
        );
        assert_eq!(parse_step_name("[internal] load .dockerignore"), None);
        assert_eq!(parse_step_name("copy /context /"), None);
    }

    #[test]
    fn vertexes_become_steps_cache_hits_and_output() {
        let mut t = Trace::default();
        let mut evs = t.update(&status(
            vec![vertex(
                "d0",
                "[internal] load build definition from Dockerfile",
                Some(1),
                None,
            )],
            vec![],
        ));
        let mut cached = vertex(
            "d1",
            "[1/3] FROM imgctl-test/busybox:latest",
            Some(2),
            Some(2),
        );
        cached.cached = true;
        evs.extend(t.update(&status(vec![cached], vec![])));
        evs.extend(t.update(&status(
            vec![vertex(
                "d2",
                "[2/3] RUN echo hi && echo there",
                Some(3),
                None,
            )],
            vec![("d2", "hi\nthe"), ("d2", "re\n")],
        )));
        // The same vertex again, completed: no second Step event.
        evs.extend(t.update(&status(
            vec![vertex(
                "d2",
                "[2/3] RUN echo hi && echo there",
                Some(3),
                Some(5),
            )],
            vec![],
        )));
        // A cache hit.
        let mut hit = vertex("d3", "[3/3] WORKDIR /workspace", Some(6), Some(6));
        hit.cached = true;
        evs.extend(t.update(&status(vec![hit], vec![])));
        assert_eq!(
            evs,
            vec![
                BuildEvent::Output("[internal] load build definition from Dockerfile".into()),
                BuildEvent::Step {
                    n: 1,
                    total: 3,
                    instruction: "FROM imgctl-test/busybox:latest".into()
                },
                // The FROM's vertex is cached, but no "Using cache" line.
                BuildEvent::Step {
                    n: 2,
                    total: 3,
                    instruction: "RUN echo hi && echo there".into()
                },
                BuildEvent::Output("hi".into()),
                BuildEvent::Output("there".into()),
                BuildEvent::Step {
                    n: 3,
                    total: 3,
                    instruction: "WORKDIR /workspace".into()
                },
                BuildEvent::Cached,
            ]
        );
        let steps = t.steps();
        assert_eq!(steps.len(), 3);
        // The FROM's vertex is cached in BuildKit's words, not a cache hit in ours.
        assert!(!steps[0].cached && !steps[1].cached && steps[2].cached);
        assert_eq!(steps[1].seconds, 2.0);
    }

    #[test]
    fn a_step_printing_an_endless_line_keeps_a_bounded_tail() {
        use crate::docker::tail::OUTPUT_TAIL;
        let mut t = Trace::default();
        t.update(&status(
            vec![vertex("d2", "[2/3] RUN yes | tr -d '\\n'", Some(1), None)],
            vec![],
        ));
        // 8 MiB without a newline, in BuildKit's log messages of 1 MiB.
        let chunk = "y".repeat(1 << 20);
        let mut pieces = 0;
        for _ in 0..8 {
            for ev in t.update(&status(vec![], vec![("d2", &chunk)])) {
                let BuildEvent::Output(line) = ev else {
                    panic!("{ev:?}")
                };
                assert_eq!(line.len(), OUTPUT_TAIL);
                pieces += 1;
            }
        }
        // The last piece waits for more of its line.
        assert_eq!(pieces, 8 * (1 << 20) / OUTPUT_TAIL - 1);
        t.update(&status(vec![], vec![("d2", "the end")]));
        let BuildError::StepFailed { tail, .. } = t.failure("exit code: 1".into()) else {
            panic!("no step failed");
        };
        assert_eq!(tail.len(), FAILURE_TAIL_LINES);
        assert_eq!(tail.last().unwrap(), "the end");
        let kept: usize = tail.iter().map(String::len).sum();
        assert!(kept <= FAILURE_TAIL_LINES * OUTPUT_TAIL, "{kept}");
    }

    #[test]
    fn a_failed_run_names_its_step_exit_code_and_last_lines() {
        let mut t = Trace::default();
        let mut lines = String::new();
        for i in 0..30 {
            lines.push_str(&format!("line {i}\n"));
        }
        lines.push_str("no newline at the end");
        t.update(&status(
            vec![vertex("d2", "[2/3] RUN exit 3", Some(1), None)],
            vec![("d2", &lines)],
        ));
        let mut failed = vertex("d2", "[2/3] RUN exit 3", Some(1), Some(2));
        failed.error = "executor failed running [/bin/sh -c exit 3]: exit code: 3".into();
        t.update(&status(vec![failed], vec![]));
        match t.failure("executor failed running [/bin/sh -c exit 3]: exit code: 3".into()) {
            BuildError::StepFailed {
                n,
                total,
                instruction,
                exit_code,
                tail,
                ..
            } => {
                assert_eq!((n, total, instruction.as_str()), (2, 3, "RUN exit 3"));
                assert_eq!(exit_code, Some(3));
                assert_eq!(tail.len(), FAILURE_TAIL_LINES);
                assert_eq!(tail.last().unwrap(), "no newline at the end");
                assert_eq!(tail[0], "line 11");
            }
            other => panic!("{other:?}"),
        }
        let mut t = Trace::default();
        t.update(&status(
            vec![vertex(
                "m",
                "[internal] load metadata for docker.io/x/y:z",
                Some(1),
                None,
            )],
            vec![],
        ));
        let mut m = vertex(
            "m",
            "[internal] load metadata for docker.io/x/y:z",
            Some(1),
            None,
        );
        m.error = "pull access denied".into();
        t.update(&status(vec![m], vec![]));
        let err = t.failure("pull access denied".into()).to_string();
        assert!(
            err.contains("load metadata") && err.contains("denied"),
            "{err}"
        );
    }

    #[test]
    fn stderr_that_arrived_before_more_stdout_stays_in_the_tail() {
        let mut t = Trace::default();
        t.update(&status(
            vec![vertex("d", "[2/2] RUN x", Some(1), None)],
            vec![],
        ));
        let log = |stream: i64, msg: String| StatusResponse {
            logs: vec![VertexLog {
                vertex: "d".into(),
                stream,
                msg: msg.into_bytes(),
                ..Default::default()
            }],
            ..Default::default()
        };
        t.update(&log(1, "out 1\n".into()));
        t.update(&log(2, "the real error\n".into()));
        t.update(&log(1, (2..=40).map(|i| format!("out {i}\n")).collect()));
        let BuildError::StepFailed { tail, .. } = t.failure("exit code: 1".into()) else {
            panic!("not a step failure");
        };
        assert_eq!(tail.len(), FAILURE_TAIL_LINES);
        assert_eq!(tail[0], "the real error");
        assert_eq!(tail[1], "out 22");
        assert_eq!(tail.last().unwrap(), "out 40");
    }

    #[test]
    fn other_exit_code_wordings() {
        assert_eq!(
            exit_code_of(
                "process \"/bin/sh -c exit 4\" did not complete successfully: exit code: 4"
            ),
            Some(4)
        );
    }
}
