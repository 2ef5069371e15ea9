//! The image flags shared by `build` and `render` ([`ImageArgs`]) → the spec
//! source and the [`RenderOptions`].
//!
//! Each flag is checked here, before any work (clap has read `--uid`/`--gid`
//! as integers in 1000-60000): the `--ca-cert` file PEM certificates only, the
//! `--pip-index-url` and `--base-image` sane. Bad input is a usage error
//! (exit 2) naming the flag. The args are destructured exhaustively, so a new
//! flag that nobody handles fails to compile. Rendering itself is
//! [`crate::image::render`]'s.
use crate::cli::ImageArgs;
use crate::commands::error::CliError;
use crate::docker::build::BuilderChoice;
use crate::image::render::{self, ca, RenderOptions, DEFAULT_ID};
use crate::image::specs::SpecSource;
use crate::image_ref::{self, Role};

/// Where the spec comes from: `--spec` wins; else `--cuda`, defaulting to
/// the default profile.
pub fn spec_source(args: &ImageArgs) -> SpecSource {
    SpecSource::from_args(args.cuda.as_deref(), args.spec.as_deref())
}

impl RenderOptions {
    /// Reads and validates the image flags: the `--ca-cert` file must hold
    /// PEM certificates and nothing else ([`ca::read_ca_cert`]), URLs and
    /// image names sane; `--uid`/`--gid` default to [`DEFAULT_ID`]. Bad input is a usage
    /// error (exit 2). (Defined in `commands/`, where flags are known.)
    pub fn from_args(args: &ImageArgs) -> anyhow::Result<RenderOptions> {
        let ImageArgs {
            cuda: _,
            spec: _,
            base_image,
            ca_cert,
            ca_cert_secret,
            builder,
            pip_index_url,
            uid,
            gid,
            sudo,
        } = args;
        let uid = uid.unwrap_or(DEFAULT_ID);
        let gid = gid.unwrap_or(DEFAULT_ID);
        let ca_cert = match ca_cert {
            None => None,
            Some(path) => Some(ca::read_ca_cert(path)?),
        };
        let ca_cert_build_only = match ca_cert_secret {
            None => None,
            Some(path) => Some(ca::read_ca_cert(path)?),
        };
        // `auto` renders the classic variant; `build` sets `buildkit` again
        // once the engine has decided.
        let buildkit = *builder == BuilderChoice::BuildKit;
        if ca_cert_build_only.is_some() && *builder == BuilderChoice::Classic {
            return Err(CliError::usage(
                "--ca-cert-secret needs BuildKit, and --builder classic was asked for",
            )
            .with_hint("use --ca-cert to install the CA in the image, or --builder buildkit")
            .into());
        }
        if let Some(url) = pip_index_url {
            render::check_pip_index_url(url)?;
        }
        if let Some(image) = base_image {
            image_ref::check(Role::BaseImage, image)?;
        }
        Ok(RenderOptions {
            base_image: base_image.clone(),
            base_image_source: "--base-image".to_string(),
            ca_cert,
            pip_index_url: pip_index_url
                .as_ref()
                .map(|u| u.trim_end_matches('/').to_string()),
            uid,
            gid,
            sudo: *sudo,
            buildkit,
            ca_cert_build_only,
        })
    }
}
