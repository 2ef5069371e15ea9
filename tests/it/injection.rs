//! Dockerfile injection (the reliability issue, items 1 and 2): no value from a
//! spec, its path or its lock setting can add an instruction to the rendered
//! Dockerfile. The reproducers from the issue, then thousands of generated
//! specs (proptest) whose rendered Dockerfile must hold exactly the template's
//! instructions, or be refused as a usage error.
use std::path::Path;

use imgctl::commands::error::status_of;
use imgctl::error::ExitStatus;
use imgctl::image::render::{self, RenderOptions};
use imgctl::image::specs::{self, SpecSource};
use proptest::prelude::*;

use crate::common::{imgctl, texts};

/// A valid user spec, as a YAML mapping the tests change one field at a time.
fn base_spec() -> serde_yaml::Mapping {
    serde_yaml::from_str(
        r#"
schema_version: 1
name: probe
description: injection probe
base_image: nvidia/cuda:12.4.1-base-ubuntu22.04
cuda: "12.4.1"
python: "3.10"
torch: {version: "2.7.0", variant: cu126, index: "https://pypi.org/simple"}
pip: [diffusers==0.33.1]
apt: [ca-certificates, tini, openssh-server, python3, python3-venv]
user: {name: dev}
ports: [8888, 22]
labels: {org.example.team: vision}
lock: false
"#,
    )
    .unwrap()
}

/// Writes `spec` to `dir/file_name` and renders it: Ok(Dockerfile) or the error.
fn render_file(dir: &Path, file_name: &str, spec: &serde_yaml::Mapping) -> anyhow::Result<String> {
    let path = dir.join(file_name);
    std::fs::write(&path, serde_yaml::to_string(spec).unwrap()).unwrap();
    let loaded = specs::load(&SpecSource::File(path.clone()));
    let _ = std::fs::remove_file(&path);
    Ok(render::render(&loaded?, &RenderOptions::default())?.dockerfile)
}

fn usage_error(e: &anyhow::Error) -> bool {
    status_of(e) == ExitStatus::Usage
}

#[test]
fn a_lock_value_with_a_newline_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let lock = "x\nRUN echo INJECTED && exit 42\n#.lock";
    std::fs::write(dir.path().join(lock), "torch==2.7.0\n").unwrap();
    let mut s = base_spec();
    s.insert("lock".into(), lock.into());
    let path = dir.path().join("spec.yaml");
    std::fs::write(&path, serde_yaml::to_string(&s).unwrap()).unwrap();
    let out = imgctl(&["render", "--spec", path.to_str().unwrap()]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(!stdout.contains("INJECTED"), "{stdout}");
    assert!(
        stderr.contains("lock") && stderr.contains("control character"),
        "{stderr}"
    );
    assert!(
        stderr.contains(r"\n"),
        "the value is shown escaped: {stderr}"
    );
}

#[test]
fn a_spec_path_with_a_newline_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("dir");
    std::fs::create_dir(&sub).unwrap();
    let path = sub.join("x\nFROM base AS pre\nRUN echo INJECTED\n#.yaml");
    std::fs::write(&path, serde_yaml::to_string(&base_spec()).unwrap()).unwrap();
    let out = imgctl(&["render", "--spec", path.to_str().unwrap()]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(!stdout.contains("INJECTED"), "{stdout}");
    assert!(
        stderr.contains("the spec's path contains the control character U+000A (line feed)"),
        "{stderr}"
    );
    assert!(stderr.contains("hint:"), "{stderr}");
}

/// Text that tries to break out of every place a value lands in the Dockerfile:
/// line breaks and other control characters, quotes, escapes, `$`, instruction
/// words, comment marks, and non-ASCII (U+2028 is a line break to some parsers,
/// not to Docker's).
fn hostile() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("\n".to_string()),
        Just("\r".to_string()),
        Just("\r\n".to_string()),
        Just("\t".to_string()),
        Just("\0".to_string()),
        Just("\u{1b}[2J".to_string()),
        Just("\u{85}".to_string()),
        Just("\u{2028}".to_string()),
        Just("\\".to_string()),
        Just("\"".to_string()),
        Just("'".to_string()),
        Just("$".to_string()),
        Just("${HOME}".to_string()),
        Just("`id`".to_string()),
        Just(" ".to_string()),
        Just("#".to_string()),
        Just("RUN echo INJECTED".to_string()),
        Just("FROM scratch AS x".to_string()),
        Just("é".to_string()),
        "[a-z0-9._-]{1,6}",
    ];
    proptest::collection::vec(piece, 0..8).prop_map(|v| v.concat())
}

/// Which field of the spec a generated value goes into.
#[derive(Debug, Clone, Copy)]
enum Field {
    Description,
    LabelKey,
    LabelValue,
    FileName,
    Lock,
    Template,
    UserName,
    Pip,
    Apt,
    BaseImage,
}

fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        Just(Field::Description),
        Just(Field::LabelKey),
        Just(Field::LabelValue),
        Just(Field::FileName),
        Just(Field::Lock),
        Just(Field::Template),
        Just(Field::UserName),
        Just(Field::Pip),
        Just(Field::Apt),
        Just(Field::BaseImage),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every generated spec renders to exactly the template's instructions, or
    /// is refused with a usage error (exit 2); nothing else.
    #[test]
    fn generated_specs_render_exactly_the_templates_instructions(field in field(), value in hostile()) {
        static BASELINE: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        let baseline = BASELINE.get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            imgctl::invariants::instruction_words(&render_file(dir.path(), "spec.yaml", &base_spec()).unwrap())
        });
        let dir = tempfile::tempdir().unwrap();
        let mut s = base_spec();
        let mut file_name = "spec.yaml".to_string();
        match field {
            Field::Description => { s.insert("description".into(), value.clone().into()); }
            Field::LabelKey | Field::LabelValue => {
                let mut labels = serde_yaml::Mapping::new();
                if matches!(field, Field::LabelKey) {
                    labels.insert(value.clone().into(), "v".into());
                } else {
                    labels.insert("org.example.probe".into(), value.clone().into());
                }
                s.insert("labels".into(), labels.into());
            }
            Field::FileName => {
                // A file name holds anything but '/' and NUL.
                file_name = format!("{}.yaml", value.replace(['/', '\0'], "_"));
            }
            Field::Lock => {
                let lock = format!("{value}.lock");
                if !lock.contains('/') && !lock.contains('\0') {
                    std::fs::write(dir.path().join(&lock), "torch==2.7.0\n").unwrap();
                }
                s.insert("lock".into(), lock.into());
            }
            Field::Template => {
                let t = format!("{value}.j2");
                if !t.contains('/') && !t.contains('\0') {
                    std::fs::write(dir.path().join(&t), imgctl::image::render::WORKSTATION_TEMPLATE).unwrap();
                }
                s.insert("template".into(), t.into());
            }
            Field::UserName => {
                let mut user = serde_yaml::Mapping::new();
                user.insert("name".into(), value.clone().into());
                s.insert("user".into(), user.into());
            }
            Field::Pip => { s.insert("pip".into(), vec![format!("diffusers{value}==0.33.1")].into()); }
            Field::Apt => {
                let mut apt: Vec<String> = ["ca-certificates", "tini", "openssh-server", "python3", "python3-venv"].map(String::from).to_vec();
                apt.push(value.clone());
                s.insert("apt".into(), apt.into());
            }
            Field::BaseImage => { s.insert("base_image".into(), format!("nvidia/cuda:12.4.1-base{value}").into()); }
        }
        match render_file(dir.path(), &file_name, &s) {
            Ok(dockerfile) => prop_assert_eq!(&imgctl::invariants::instruction_words(&dockerfile), baseline, "{:?} = {:?}:\n{}", field, value, dockerfile),
            Err(e) => prop_assert!(usage_error(&e), "{:?} = {:?} failed without a usage error: {:#}", field, value, e),
        }
    }
}
