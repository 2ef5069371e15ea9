//! `build --push`: each tag pushed through the engine, and the manifest
//! digest each repository got (the subject the attestations refer to): the
//! image's repo digest on Docker; on Podman the registry's, asked by tag,
//! since Podman's repo digest is its local manifest's, not the pushed one's.
use crate::docker::image;
use crate::output::printer;

/// Pushes every tag; returns them and each repository's pushed digest
/// (`podman`: read from the registry).
pub(super) async fn push_tags(
    docker: &bollard::Docker,
    tags: &[String],
    image_id: &str,
    podman: bool,
) -> anyhow::Result<(Vec<String>, Vec<(String, String)>)> {
    let p = printer();
    let mut pushed = Vec::new();
    let mut digests: Vec<(String, String)> = Vec::new();
    for tag in tags {
        p.info(format!("pushing {tag}"));
        let spinner = p.spinner(format!("pushing {tag}"));
        let started = std::time::Instant::now();
        let mut said = std::time::Instant::now();
        image::push(docker, tag, &mut |status, tally, finished| {
            let words = tally_words(tally).unwrap_or_else(|| status.to_string());
            spinner.set_message(format!("pushing {tag}: {words}"));
            printer().verbose(status);
            // Off a terminal a line at each layer done, and every 30 s
            // while bytes move, so a long push is never silent (#53 F7).
            let due = finished || said.elapsed() >= PUSH_LINE_EVERY;
            if !printer().interactive && tally.layers > 0 && due {
                said = std::time::Instant::now();
                printer().info(format!(
                    "pushing {tag}: {words} ({:.0} s)",
                    started.elapsed().as_secs_f64()
                ));
            }
        })
        .await?;
        spinner.finish_and_clear();
        pushed.push(tag.clone());
        let repo = image::split_tag(tag).0.to_string();
        let digest = if podman {
            let registry = crate::image::oci::Repository::new(
                tag,
                crate::image::oci::docker_credentials(tag)?,
            )?;
            let name = registry.tag_or_digest().unwrap_or("latest").to_string();
            Some(registry.resolve(&name).await?.digest)
        } else {
            image::inspect(docker, image_id)
                .await?
                .and_then(|f| pushed_digest(&f.repo_digests, &repo))
        };
        if let Some(digest) = digest {
            if !digests.iter().any(|(r, _)| *r == repo) {
                digests.push((repo, digest));
            }
        }
    }
    Ok((pushed, digests))
}

/// How often a push says where it is off a terminal, while no layer ends.
const PUSH_LINE_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// `3/7 layers done, 1.2 GB of 6.6 GB sent` (the bytes of the layers that
/// have sent any); None before the engine named its layers (Podman's
/// messages have no such counts: its own status is said then).
fn tally_words(t: &image::PushTally) -> Option<String> {
    if t.layers == 0 {
        return None;
    }
    let (sent, of) = t.bytes();
    let bytes = if of > 0 {
        format!(
            ", {} of {} sent",
            super::human_bytes(sent),
            super::human_bytes(of)
        )
    } else {
        String::new()
    };
    Some(format!("{}/{} layers done{bytes}", t.done, t.layers))
}

/// The digest a push gave `repo`, from the image's repo digests (`repo@sha256:…`).
fn pushed_digest(repo_digests: &[String], repo: &str) -> Option<String> {
    repo_digests.iter().find_map(|d| {
        d.split_once('@')
            .filter(|(r, _)| *r == repo)
            .map(|(_, h)| h.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_is_said_in_layers_and_bytes() {
        let mut t = image::PushTally::default();
        assert_eq!(tally_words(&t), None);
        t.note("Preparing", None, None);
        t.note("Preparing", None, None);
        assert_eq!(tally_words(&t).as_deref(), Some("0/2 layers done"));
        t.note("Pushing", Some(1_200_000_000), Some(6_600_000_000));
        t.note("Layer already exists", None, None);
        assert_eq!(
            tally_words(&t).as_deref(),
            Some("1/2 layers done, 1.2 GB of 6.6 GB sent")
        );
    }
}
