//! Running a build on the engine's classic builder and reading its stream.
//!
//! It owns the `/build` request (context tar, tags, labels, build args, cache
//! and pull flags), the parsing of the builder's text stream into steps
//! ([`StepParser`]), the failure report of a broken step, and the removal of
//! intermediate containers a cancelled build may leave behind. It does not
//! print: callers receive [`BuildEvent`]s and decide how to show them.
//!
//! The classic builder (BuilderV1, API 1.41 on Docker 20.10) streams JSON
//! messages whose `stream` text reads `Step 3/14 : RUN …`, ` ---> Using cache`,
//! ` ---> Running in <id>`, the step's output, ` ---> <layer id>`; the final
//! image id comes in `aux.ID`, and a failure as `errorDetail`.
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::query_parameters::{BuildImageOptions, BuilderVersion};
use futures_util::StreamExt;
use serde::Serialize;

/// How many output lines of a failing step the error shows (issue 2: "the last 20 lines").
pub const FAILURE_TAIL_LINES: usize = 20;

/// How to build (the context travels separately, by value).
#[derive(Debug, Clone, Default)]
pub struct BuildRequest {
    /// Tags to apply (`name:tag`); the first is given to the builder, the rest
    /// are added with the tag API after a successful build.
    pub tags: Vec<String>,
    /// Ignore the layer cache.
    pub no_cache: bool,
    /// Always try to pull the base image.
    pub pull: bool,
    /// `--build-arg` values.
    pub build_args: BTreeMap<String, String>,
    /// Image labels (applied by the builder after the last instruction).
    pub labels: BTreeMap<String, String>,
}

/// Something the builder reported, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildEvent {
    /// A new step began: `Step n/total : instruction`.
    Step {
        /// 1-based step number.
        n: u32,
        /// Number of steps the builder announced.
        total: u32,
        /// The instruction as the builder echoed it.
        instruction: String,
    },
    /// The current step was satisfied from the layer cache.
    Cached,
    /// The current step runs in this intermediate container.
    Running(String),
    /// A line of the current step's output (or another builder message).
    Output(String),
    /// The current step produced this layer/image id.
    Layer(String),
    /// The builder removed this intermediate container.
    Removed(String),
}

/// One step as it ended up.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StepRecord {
    /// 1-based step number.
    pub n: u32,
    /// The instruction.
    pub instruction: String,
    /// Whether the layer cache satisfied it.
    pub cached: bool,
    /// Wall time of the step in seconds.
    pub seconds: f64,
}

/// A finished build.
#[derive(Debug, Clone, Serialize)]
pub struct BuildOutcome {
    /// The image id (`sha256:…`).
    pub image_id: String,
    /// The steps in order.
    pub steps: Vec<StepRecord>,
    /// Wall time of the whole build in seconds.
    pub seconds: f64,
}

impl BuildOutcome {
    /// Steps taken from the cache.
    pub fn cached_steps(&self) -> usize {
        self.steps.iter().filter(|s| s.cached).count()
    }
    /// Steps that ran (neither cached nor a `FROM`).
    pub fn executed_steps(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| !s.cached && !is_from(&s.instruction))
            .count()
    }
}

fn is_from(instruction: &str) -> bool {
    instruction
        .split_whitespace()
        .next()
        .is_some_and(|w| w.eq_ignore_ascii_case("FROM"))
}

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A step (typically a RUN) failed.
    #[error("step {n}/{total} failed: {instruction}: {message}")]
    StepFailed {
        /// 1-based step number.
        n: u32,
        /// Steps announced.
        total: u32,
        /// The instruction that failed.
        instruction: String,
        /// The builder's error (`The command '…' returned a non-zero code: 1`).
        message: String,
        /// The command's exit code, when the builder reported one.
        exit_code: Option<i64>,
        /// The last [`FAILURE_TAIL_LINES`] lines of the step's output.
        tail: Vec<String>,
    },
    /// The engine refused or failed the build before or outside a step.
    #[error("the engine failed the build: {0}")]
    Engine(String),
}

/// Turns the builder's `stream` text (chunks not aligned on lines) into events.
#[derive(Debug, Default)]
pub struct StepParser {
    pending: String,
}

impl StepParser {
    /// Feeds a chunk of stream text; returns the events of its complete lines.
    pub fn feed(&mut self, chunk: &str) -> Vec<BuildEvent> {
        self.pending.push_str(chunk);
        let mut events = Vec::new();
        while let Some(pos) = self.pending.find('\n') {
            let line: String = self.pending.drain(..=pos).collect();
            if let Some(ev) = parse_line(line.trim_end_matches(['\n', '\r'])) {
                events.push(ev);
            }
        }
        events
    }
    /// Flushes a final line that had no newline.
    pub fn finish(&mut self) -> Vec<BuildEvent> {
        let rest = std::mem::take(&mut self.pending);
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
    if let Some(rest) = line.strip_prefix("Step ") {
        // "Step 3/14 : RUN apt-get update"
        if let Some((counts, instruction)) = rest.split_once(" : ") {
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
    }
    if let Some(rest) = line.strip_prefix(" ---> ") {
        let rest = rest.trim();
        if rest == "Using cache" {
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

/// Intermediate containers seen during a build, shared so that a cancelled
/// build (its future dropped) can still be cleaned up.
#[derive(Debug, Clone, Default)]
pub struct BuildTracker {
    containers: Arc<Mutex<Vec<String>>>,
}

impl BuildTracker {
    /// The intermediate container ids seen so far.
    pub fn containers(&self) -> Vec<String> {
        self.containers
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
    }
    fn record(&self, id: &str) {
        if let Ok(mut c) = self.containers.lock() {
            c.push(id.to_string());
        }
    }
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

/// Runs a build of `context` (a tar, see
/// [`super::context::BuildContext::to_tar`]) on the classic builder with `rm`
/// and `forcerm`, so that the engine removes intermediate containers on
/// success and on failure. Calls
/// `on_event` for each event in order. Dropping the returned future closes the
/// connection, which cancels the build on the engine; then call
/// [`remove_leftovers`] with the tracker.
pub async fn build_image(
    docker: &bollard::Docker,
    context: Vec<u8>,
    request: &BuildRequest,
    tracker: &BuildTracker,
    on_event: &mut (dyn FnMut(&BuildEvent) + Send),
) -> Result<BuildOutcome, BuildError> {
    let started = Instant::now();
    let options = BuildImageOptions {
        dockerfile: "Dockerfile".to_string(),
        t: request.tags.first().cloned(),
        nocache: request.no_cache,
        pull: request.pull.then(|| "1".to_string()),
        rm: true,
        forcerm: true,
        buildargs: (!request.build_args.is_empty()).then(|| to_hash(&request.build_args)),
        labels: (!request.labels.is_empty()).then(|| to_hash(&request.labels)),
        version: BuilderVersion::BuilderV1,
        ..Default::default()
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
                if let Some(id) = info.aux.and_then(|a| a.id) {
                    image_id = Some(id);
                }
            }
            Err(err) => {
                for ev in parser.finish() {
                    handle(ev, &mut current, &mut steps);
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

fn to_hash(map: &BTreeMap<String, String>) -> HashMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// The engine's own words for an error, without bollard's wrapping.
pub(crate) fn engine_message(err: &bollard::errors::Error) -> String {
    match err {
        bollard::errors::Error::DockerStreamError { error } => error.trim().to_string(),
        bollard::errors::Error::DockerResponseServerError { message, .. } => {
            message.trim().to_string()
        }
        other => other.to_string(),
    }
}

/// The exit code in "The command '…' returned a non-zero code: 2".
fn exit_code_of(message: &str) -> Option<i64> {
    let (_, code) = message.rsplit_once("returned a non-zero code:")?;
    code.trim().parse().ok()
}

/// After a cancelled build: waits for the engine to remove the intermediate
/// containers (it does so when the client goes away, with `forcerm`), and
/// force-removes any still there after `grace`. Returns the ids it had to
/// remove itself.
pub async fn remove_leftovers(
    docker: &bollard::Docker,
    tracker: &BuildTracker,
    grace: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + grace;
    let mut removed = Vec::new();
    for id in tracker.containers() {
        loop {
            match docker
                .inspect_container(
                    &id,
                    None::<bollard::query_parameters::InspectContainerOptions>,
                )
                .await
            {
                Err(_) => break, // gone (404) or unreachable: nothing we can do more
                Ok(_) if Instant::now() >= deadline => {
                    let opts = bollard::query_parameters::RemoveContainerOptions {
                        force: true,
                        v: true,
                        ..Default::default()
                    };
                    if docker.remove_container(&id, Some(opts)).await.is_ok() {
                        removed.push(id.clone());
                    }
                    break;
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    removed
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
    fn reads_the_exit_code_of_a_failed_run() {
        assert_eq!(
            exit_code_of("The command '/bin/sh -c exit 3' returned a non-zero code: 3"),
            Some(3)
        );
        assert_eq!(exit_code_of("no such image"), None);
    }
}
