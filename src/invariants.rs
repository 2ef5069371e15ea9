//! The invariants of imgctl's input parsers, as functions that panic when one
//! is broken: the fuzz targets under `fuzz/` call them on generated inputs,
//! and `tests/it/fuzz_regressions.rs` replays the kept corpus through them in
//! the ordinary test suite. Each takes any text; an input the parser refuses
//! is fine, a panic inside the parser or a broken invariant is the bug.
//! This module holds no parsing of its own.
use crate::image::render::{self, RenderOptions};
use crate::image::specs::{self, LoadedSpec};

/// The Dockerfile instructions the bundled template uses.
const TEMPLATE_INSTRUCTIONS: &[&str] = &[
    "FROM",
    "ENV",
    "COPY",
    "RUN",
    "USER",
    "WORKDIR",
    "EXPOSE",
    "HEALTHCHECK",
    "STOPSIGNAL",
    "ENTRYPOINT",
    "CMD",
    "LABEL",
];

/// The most RUN steps the bundled template renders (apt, venv, torch, with a
/// lock what the pins need, the pins, user, the imgctl smoke run).
const MAX_RUN_STEPS: usize = 7;

/// Spec text → validation → rendering: refused, or a Dockerfile with one
/// FROM, only the template's instructions and at most its RUN steps (an
/// injected instruction breaks one of these).
pub fn spec_text(text: &str) {
    let Ok(s) = specs::validate::validate(text, None) else {
        return;
    };
    let loaded = LoadedSpec {
        name: s.name.clone(),
        sha256: specs::sha256_hex(text.as_bytes()),
        spec: s,
        dir: None,
        origin: "fuzz.yaml".into(),
        file: None,
    };
    let Ok(rendered) = render::render(&loaded, &RenderOptions::default()) else {
        return;
    };
    let words = instruction_words(&rendered.dockerfile);
    assert_eq!(
        words.iter().filter(|w| *w == "FROM").count(),
        1,
        "{words:?}\n{}",
        rendered.dockerfile
    );
    assert!(
        words.iter().filter(|w| *w == "RUN").count() <= MAX_RUN_STEPS,
        "{words:?}"
    );
    for w in &words {
        assert!(
            TEMPLATE_INSTRUCTIONS.contains(&w.as_str()),
            "instruction {w:?}: {words:?}"
        );
    }
}

/// The first word of every instruction of `dockerfile`, upper-cased
/// (continuation lines joined, comments and blank lines skipped).
pub fn instruction_words(dockerfile: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut continued = false;
    for line in dockerfile.lines() {
        let t = line.trim();
        if !continued && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if !continued {
            out.push(t.split_whitespace().next().unwrap_or("").to_uppercase());
        }
        continued = t.ends_with('\\');
    }
    out
}

/// Lock text → parse: refused, or only `name==version` packages without
/// space or control characters, each hash 64 lowercase hex digits, and
/// writing it out (and each step as requirements) and reading it back gives
/// the same lock.
pub fn lock_text(text: &str) {
    let Ok(lock) = crate::image::lock::LockFile::parse(text) else {
        return;
    };
    for (name, locked) in &lock.packages {
        let version = &locked.version;
        for part in [name, version] {
            assert!(
                !part.is_empty() && !part.chars().any(|c| c.is_whitespace() || c.is_control()),
                "package {name:?}=={version:?}"
            );
        }
        assert!(
            !name.contains("==") && !version.contains("=="),
            "{name}=={version}"
        );
        for h in &locked.hashes {
            assert!(
                h.len() == 64
                    && h.bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
                "{name}: hash {h:?}"
            );
        }
    }
    if lock
        .inputs
        .iter()
        .all(|(k, v)| !k.contains(['\n', '\r']) && !v.contains(['\n', '\r']))
    {
        let again =
            crate::image::lock::LockFile::parse(&lock.to_text("fuzz.yaml", "regenerate-the-lock"));
        // Written out, a lock records the digest of its package list.
        let mut written = lock.clone();
        written.packages_sha256 = Some(lock.packages_digest());
        assert_eq!(again.as_ref(), Ok(&written), "round trip");
    }
    // Each step's requirements hold exactly that step's entries, nothing else.
    for step in crate::image::lock::Step::ALL {
        let req = lock.step_text(step, "fuzz.lock");
        let body: Vec<&str> = req.lines().filter(|l| !l.starts_with('#')).collect();
        let entries = body.iter().filter(|l| !l.starts_with(' ')).count();
        assert_eq!(entries, lock.step(step).count(), "{req}");
        assert!(
            body.iter()
                .all(|l| !l.starts_with(' ') || l.trim_start().starts_with("--hash=sha256:")),
            "{req}"
        );
    }
    // A step split in two parts (the image's dependencies and named pins
    // layers) loses and repeats no entry.
    let entries = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with(' '))
            .map(str::to_string)
            .collect()
    };
    let even = |name: &str| name.len() % 2 == 0;
    let mut parts = entries(&lock.part_text(crate::image::lock::Step::Pins, "even", "f", even));
    parts.extend(entries(&lock.part_text(
        crate::image::lock::Step::Pins,
        "odd",
        "f",
        |n| !even(n),
    )));
    parts.sort();
    let mut whole = entries(&lock.step_text(crate::image::lock::Step::Pins, "f"));
    whole.sort();
    assert_eq!(parts, whole);
}

/// Training config text over the tiny preset → validation, the CPU memory
/// budget and, for a config both accept that is small enough to build in a
/// moment (at most [`FUZZ_MODEL_PARAMS`] parameters), the model itself:
/// refused or built, never a panic or an abort (a two-line config once
/// passed validation and divided by zero while the model was built).
#[cfg(feature = "torch")]
pub fn train_config_text(text: &str) {
    let mut cfg = crate::train::config::TrainConfig::preset(crate::choices::Preset::Tiny);
    if cfg.apply_yaml(text, "fuzz.yaml", false).is_err() || cfg.validate().is_err() {
        return;
    }
    let _ = cfg.image_size();
    if crate::train::budget::check_training(&cfg, true).is_err() {
        return;
    }
    builds_when_small(&cfg.model);
}

/// A model that validated is built, if it has at most
/// [`FUZZ_MODEL_PARAMS`] parameters: building must succeed (a validated
/// config that libtorch refuses, or that panics, is the bug).
#[cfg(feature = "torch")]
fn builds_when_small(model: &crate::train::model::UNetConfig) {
    if model.census().params <= FUZZ_MODEL_PARAMS {
        let vs = tch::nn::VarStore::new(tch::Device::Cpu);
        let built = tch::no_grad(|| crate::train::model::UNet2DModel::try_new(&vs.root(), model));
        assert!(
            built.is_ok(),
            "a valid config did not build: {:?}",
            built.err()
        );
    }
}

/// The largest model [`train_config_text`] builds (the tiny preset has
/// 702,499 parameters): bigger ones are checked analytically only, to keep a
/// fuzz iteration and the corpus replay fast.
#[cfg(feature = "torch")]
pub const FUZZ_MODEL_PARAMS: u64 = 1_000_000;

/// A rendezvous or fleet message as a peer may send it: the first byte picks
/// the decoder (a hello, rank 0's answer head, or a node's report for the
/// rank in the next byte), the rest is the message. Refused, or decoded
/// within its bounds: a hello of exactly its length, an answer no longer
/// than the cap, a report only for the rank that joined.
#[cfg(feature = "torch")]
pub fn wire_messages(data: &[u8]) {
    use crate::world::rendezvous;
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    match kind % 3 {
        0 => {
            if let Ok(head) = rendezvous::parse_hello(rest) {
                assert_eq!(rest.len(), rendezvous::HELLO_BYTES);
                assert!(head.rank <= u32::MAX as usize && head.world <= u32::MAX as usize);
            }
        }
        1 => {
            if let Ok((_, len)) = rendezvous::parse_reply_head(rest) {
                assert!(rest.len() == 5 && len <= rendezvous::MAX_REPLY_BYTES);
            }
        }
        _ => {
            let Some((&rank, body)) = rest.split_first() else {
                return;
            };
            if let Ok(r) = crate::verify::fleet::parse_report(body, rank.into()) {
                assert_eq!(r.rank, usize::from(rank));
            }
        }
    }
}

/// A checkpoint's `state.json` text → read as `sample` and `--resume` read
/// it: refused, or a state whose model validates before anything is built,
/// and then builds (a `state.json` with `attention_head_dim: 0` once
/// reached the model and divided by zero).
#[cfg(feature = "torch")]
pub fn state_json_text(text: &str) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    std::fs::write(dir.path().join(crate::train::checkpoint::STATE_FILE), text)
        .expect("write state.json");
    if let Ok(state) = crate::train::checkpoint::read_state(dir.path()) {
        let _ = state.config.validate();
        // `sample` validates the model alone, then builds it.
        if state.config.model.validate().is_ok() {
            builds_when_small(&state.config.model);
        }
    }
}

/// A weights file's bytes (safetensors: an 8-byte header length, a JSON
/// header, the data) → read as `sample`, `--resume` and `--init-from` read
/// it, against the tiny model: refused with an error, or tensors that hold
/// no more bytes than the file; it never panics, and a file that passes the
/// strict check loads.
#[cfg(feature = "torch")]
pub fn weights_bytes(bytes: &[u8]) {
    use crate::train::model::{weights, UNet2DModel, UNetConfig};
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("weights.safetensors");
    std::fs::write(&path, bytes).expect("write the weights file");
    let _ = weights::read_metadata(&path);
    let Ok(tensors) = weights::read_tensors(&path) else {
        // The strict check reads the file the same way: refused there too.
        return;
    };
    // Every tensor's data came from the file: none holds more bytes.
    for (name, t) in &tensors {
        let held = t.numel() * t.kind().elt_size_in_bytes();
        assert!(
            held <= bytes.len(),
            "{name}: {held} bytes from a file of {}",
            bytes.len()
        );
    }
    let cfg = UNetConfig::preset(crate::choices::Preset::Tiny);
    if weights::check_diffusers_state_dict(&cfg, &path).is_ok() {
        let vs = tch::nn::VarStore::new(tch::Device::Cpu);
        tch::no_grad(|| UNet2DModel::try_new(&vs.root(), &cfg)).expect("the tiny model builds");
        let loaded = weights::load_diffusers_state_dict(&vs, &path);
        assert!(
            loaded.is_ok(),
            "a checked state dict did not load: {:?}",
            loaded.err()
        );
    }
}

/// A docker context's `meta.json` text, as the current context of a config
/// folder → the engine imgctl would connect to: refused with an error (an
/// invalid file, no endpoint, TLS, an address imgctl cannot reach), or an
/// endpoint named by that context whose address is one imgctl connects to;
/// never a panic.
pub fn docker_context_text(text: &str) {
    use crate::docker::{config, endpoint};
    let dir = tempfile::tempdir().expect("a temporary folder");
    let name = "fuzz";
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"currentContext": "fuzz"}"#,
    )
    .expect("write config.json");
    let meta = config::context_meta_path(dir.path(), name);
    std::fs::create_dir_all(meta.parent().expect("a folder")).expect("make the context folder");
    std::fs::write(&meta, text).expect("write meta.json");
    let settings = endpoint::Settings {
        config_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    if let Ok(e) = endpoint::resolve(None, &settings) {
        assert_eq!(e.context.as_deref(), Some(name), "{e:?}");
        assert!(!e.address.is_empty(), "{e:?}");
        assert!(
            crate::docker::transport::Target::parse(&e.address).is_ok(),
            "an endpoint imgctl cannot connect to was accepted: {e:?}"
        );
    }
}

/// A docker `config.json` text → the engine and credential settings imgctl
/// reads from it: refused with an error, never a panic.
pub fn docker_config_text(text: &str) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("config.json");
    std::fs::write(&path, text).expect("write config.json");
    let _ = crate::docker::config::load_config(&path);
}

/// A referrers list or referrers tag as a registry sends it (an OCI image
/// index) → the descriptors `inspect` lists: refused with an error, or
/// descriptors whose digest is `sha256:<64 hex>` (inspect slices it, and
/// puts it in URLs and file names) and whose text shows without a control
/// character once escaped for a table ([`crate::output::outside`]); the
/// referrers tag's update (merging one more descriptor in) keeps the index
/// readable, with that descriptor listed once. Never a panic.
pub fn oci_index_bytes(bytes: &[u8]) {
    use crate::image::oci::manifest;
    let Ok(index) = manifest::parse_index(bytes) else {
        return;
    };
    let Ok(entries) = manifest::index_entries(&index) else {
        return;
    };
    for d in &entries {
        let hex = manifest::check_digest(&d.digest).expect("a listed digest is checked");
        assert!(hex.len() == 64 && hex.is_char_boundary(12), "{d:?}");
        let texts = d
            .artifact_type
            .iter()
            .chain(d.annotations.keys())
            .chain(d.annotations.values())
            .chain([&d.media_type]);
        for text in texts {
            let shown = crate::output::outside(text);
            assert!(!shown.chars().any(char::is_control), "{text:?} → {shown:?}");
        }
    }
    let mut updated = index;
    let new = manifest::Descriptor::of(manifest::OCI_MANIFEST, bytes);
    manifest::merge_into_index(&mut updated, &new);
    let again = serde_json::to_vec(&updated).expect("an index serializes");
    let listed = manifest::parse_index(&again)
        .and_then(|i| manifest::index_entries(&i))
        .expect("an updated index reads back");
    assert_eq!(listed.iter().filter(|d| **d == new).count(), 1);
    assert_eq!(listed.len(), entries.len() + 1);
}

/// An image manifest as a registry sends it (an artifact's, read by
/// `inspect --save`) → refused with an error, or a manifest whose every
/// descriptor (config, layers, subject) has a `sha256:<64 hex>` digest; the
/// artifact manifest imgctl would push for its first layer and its subject
/// reads back to that layer, subject and annotations. Never a panic.
pub fn oci_manifest_bytes(bytes: &[u8]) {
    use crate::image::oci::manifest;
    let Ok(m) = manifest::parse_manifest(bytes) else {
        return;
    };
    for d in std::iter::once(&m.config)
        .chain(&m.layers)
        .chain(&m.subject)
    {
        assert!(manifest::check_digest(&d.digest).is_ok(), "{d:?}");
    }
    let (Some(layer), Some(subject)) = (m.layers.first(), &m.subject) else {
        return;
    };
    let artifact_type = m
        .artifact_type
        .as_deref()
        .unwrap_or("application/octet-stream");
    let pushed = manifest::artifact_manifest(artifact_type, layer, subject, &m.annotations);
    let back = manifest::parse_manifest(&pushed).expect("imgctl's own manifest reads back");
    assert_eq!(back.layers, std::slice::from_ref(layer));
    assert_eq!(back.subject.as_ref(), Some(subject));
    assert_eq!(back.annotations, m.annotations);
    assert_eq!(back.artifact_type.as_deref(), Some(artifact_type));
}

/// A deploy gate's policy file as its text (#50): read as YAML into the
/// policy and judged against no statement, or refused; never a panic. Text
/// with YAML anchors or aliases is not read (the gate refuses it before
/// parsing, so an alias bomb never expands), nor text over 1 MiB.
pub fn policy_text(text: &str) {
    use crate::image::sign::rules::{judge, Policy};
    if text.len() > 1 << 20 || text.contains('&') || text.contains('*') {
        return;
    }
    let Ok(policy) = serde_yaml::from_str::<Policy>(text) else {
        return;
    };
    let outcomes = judge(&[], &policy);
    // With nothing accepted, no rule holds.
    assert!(outcomes.iter().all(|r| !r.held), "{outcomes:?}");
    let _ = policy.has_rules();
}

/// A referrer's bytes as the gate reads them (#50): as a Sigstore bundle
/// and as a plain in-toto statement, its DSSE envelope decoded, its
/// signature checked against no key, its statement judged; every one is
/// refused (there is no key to trust it) with a reason that is one line of
/// text. Never a panic.
pub fn referrer_bytes(bytes: &[u8]) {
    use crate::image::sign::policy::{evaluate, Candidate};
    use crate::image::sign::rules::Policy;
    let policy = Policy {
        version: 1,
        require_verify: true,
        max_age: Some(std::time::Duration::from_secs(86_400)),
        ..Policy::default()
    };
    let candidates: Vec<Candidate> = [
        crate::image::sign::bundle::BUNDLE_MEDIA_TYPE,
        crate::image::attest::IN_TOTO_MEDIA_TYPE,
    ]
    .iter()
    .map(|t| Candidate {
        manifest: format!("sha256:{}", "1".repeat(64)),
        artifact_type: t.to_string(),
        bytes: bytes.to_vec(),
    })
    .collect();
    let subject = format!("sha256:{}", "2".repeat(64));
    let e = evaluate(
        &subject,
        &candidates,
        &[],
        &policy,
        std::time::SystemTime::now(),
    );
    assert!(e.accepted.is_empty() && !e.passed, "trusted with no key");
    assert_eq!(e.refused.len(), 2);
    for r in &e.refused {
        let line = crate::output::outside(&r.refusal.to_string()).into_owned();
        assert!(!line.contains('\n') && !line.contains('\u{1b}'), "{line:?}");
    }
    if let Ok(envelope) = crate::image::sign::bundle::envelope_of(bytes) {
        let _ = envelope.payload_bytes();
    }
}
