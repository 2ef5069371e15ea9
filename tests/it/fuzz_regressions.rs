//! The fuzzers' kept inputs, replayed in the ordinary test suite: every file
//! of `fuzz/corpus/TARGET/` (the minimised corpus a run of `cargo fuzz run
//! TARGET` grew) and `fuzz/regressions/TARGET/` (inputs that once broke an
//! invariant) goes through the same check as the fuzz target
//! ([`imgctl::invariants`]), so a fixed bug stays fixed without cargo-fuzz.
use std::path::Path;

use crate::common::repo_root;

/// Runs `check` on every UTF-8 file of the target's corpus and regressions
/// folders; returns how many inputs ran.
fn replay(target: &str, check: fn(&str)) -> usize {
    replay_bytes(target, &|bytes| {
        if let Ok(text) = std::str::from_utf8(bytes) {
            check(text);
        }
    })
}

/// Runs `check` on every file of the target's corpus and regressions
/// folders, as bytes; returns how many inputs ran.
fn replay_bytes(target: &str, check: &(dyn Fn(&[u8]) + std::panic::RefUnwindSafe)) -> usize {
    let mut n = 0;
    for folder in ["corpus", "regressions"] {
        let dir = repo_root().join("fuzz").join(folder).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files {
            let Ok(bytes) = std::fs::read(&f) else {
                continue;
            };
            let name = f
                .strip_prefix(repo_root())
                .unwrap_or(Path::new(""))
                .display()
                .to_string();
            if std::panic::catch_unwind(|| check(&bytes)).is_err() {
                panic!("{name} breaks the {target} invariant");
            }
            n += 1;
        }
    }
    n
}

#[test]
fn the_spec_corpus_renders_only_the_templates_instructions() {
    assert!(replay("spec_render", imgctl::invariants::spec_text) >= 4);
}

#[test]
fn the_lock_corpus_parses_to_name_version_lines_only() {
    assert!(replay("lock_parse", imgctl::invariants::lock_text) >= 2);
}

#[test]
fn the_training_config_corpus_validates_or_is_refused() {
    assert!(replay("train_config", imgctl::invariants::train_config_text) >= 2);
}

#[test]
fn checkpoint_states_are_read_and_validated_or_refused() {
    assert!(replay("state_json", imgctl::invariants::state_json_text) >= 1);
}

#[test]
fn docker_configs_are_read_or_refused() {
    assert!(replay("docker_config", imgctl::invariants::docker_config_text) >= 3);
}

#[test]
fn registry_indexes_list_checked_descriptors_or_are_refused() {
    assert!(replay_bytes("oci_index", &imgctl::invariants::oci_index_bytes) >= 6);
}

#[test]
fn registry_manifests_have_checked_descriptors_or_are_refused() {
    assert!(replay_bytes("oci_manifest", &imgctl::invariants::oci_manifest_bytes) >= 5);
}

#[test]
fn docker_contexts_give_a_reachable_endpoint_or_are_refused() {
    assert!(replay("docker_context", imgctl::invariants::docker_context_text) >= 5);
}

#[cfg(feature = "torch")]
#[test]
fn weights_files_are_read_or_refused() {
    assert!(replay_bytes("weights_file", &imgctl::invariants::weights_bytes) >= 4);
}

#[cfg(feature = "torch")]
#[test]
fn wire_messages_are_decoded_within_bounds_or_refused() {
    assert!(replay_bytes("wire_messages", &imgctl::invariants::wire_messages) >= 8);
    // The seeds reach past the parsers' first checks: a real report decodes
    // for the rank that joined, and the same report is refused for another.
    let seed = std::fs::read(repo_root().join("fuzz/corpus/wire_messages/report-rank1")).unwrap();
    assert!(imgctl::verify::fleet::parse_report(&seed[2..], 1).is_ok());
    let e = imgctl::verify::fleet::parse_report(&seed[2..], 2).unwrap_err();
    assert!(
        e.contains("joined as rank 2, then sent a report for rank 1"),
        "{e}"
    );
    let hello = std::fs::read(repo_root().join("fuzz/corpus/wire_messages/hello-rank1")).unwrap();
    let head = imgctl::world::rendezvous::parse_hello(&hello[1..]).unwrap();
    assert_eq!((head.rank, head.world, head.proves_token), (1, 2, false));
}

#[test]
fn policies_are_read_or_refused() {
    assert!(replay("policy_yaml", imgctl::invariants::policy_text) >= 3);
}

#[test]
fn referrers_are_refused_without_a_key_in_one_clean_line() {
    // The seeds: a multi-byte keyid (#50 M1) and a predicate type with a
    // CR LF and a forged PASS line (#50 M3).
    assert!(replay_bytes("referrer_bundle", &imgctl::invariants::referrer_bytes) >= 2);
}
