//! The local engine's facts of an image, read once before a start (`up`,
//! `verify --image`): `--key`'s check and the fit check both use them.

/// What the local engine knows of `image` (`None`: no such image): the
/// one engine read `--key`'s check and the fit check make before a start.
pub fn local_image(image: &str) -> anyhow::Result<Option<crate::docker::image::ImageFacts>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let engine = crate::docker::connect().await?;
        crate::docker::image::inspect(&engine.docker, image).await
    })
}
