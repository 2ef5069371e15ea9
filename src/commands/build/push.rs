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
        image::push(docker, tag, &mut |status| {
            spinner.set_message(format!("pushing {tag}: {status}"));
            printer().verbose(status);
        })
        .await?;
        spinner.finish_and_clear();
        pushed.push(tag.clone());
        let repo = image::split_tag(tag).0.to_string();
        let digest = if podman {
            let registry = crate::image::oci::Repository::new(tag, crate::image::oci::docker_credentials(tag)?)?;
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

/// The digest a push gave `repo`, from the image's repo digests (`repo@sha256:…`).
fn pushed_digest(repo_digests: &[String], repo: &str) -> Option<String> {
    repo_digests.iter().find_map(|d| {
        d.split_once('@')
            .filter(|(r, _)| *r == repo)
            .map(|(_, h)| h.to_string())
    })
}
