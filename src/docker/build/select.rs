//! Which builder runs a build: BuildKit where the engine makes it the
//! default, the classic builder on older engines, either on request.
//!
//! The rule for [`BuilderChoice::Auto`], in order:
//! 1. `DOCKER_BUILDKIT=1` / `=0` in the environment: the docker CLI's own switch.
//! 2. A Linux engine whose API (as negotiated with this client) is 1.42 or
//!    later, i.e. Docker 22.06/23.0 on, where BuildKit is the default builder
//!    of `docker build`: BuildKit.
//! 3. Otherwise (Docker 20.10 at API 1.41, a client pinned to an older API,
//!    a Windows engine): the classic builder.
//!
//! BuildKit asked for by name needs a Linux engine at API 1.39 or later
//! (Docker 18.09, where the engine's `/build` learnt `version=2`).
//!
//! Podman's Docker-compatible `/build` is buildah's: it reports API 1.41 but
//! has no BuildKit session API (no secret or cache mounts), so on Podman
//! `auto` is the classic builder and BuildKit asked for (by name, by
//! `DOCKER_BUILDKIT=1`, or by a build-only CA) is refused at once, before a
//! build that would wait for a session nobody opens.
use serde::{Deserialize, Serialize};

use super::BuildError;
use crate::env_vars::DOCKER_BUILDKIT;

/// The builder the user asks for (`auto` decides per engine).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BuilderChoice {
    /// BuildKit where the engine defaults to it, else classic.
    #[default]
    Auto,
    /// BuildKit (the engine's `/build` with `version=2`).
    #[value(name = "buildkit")]
    #[serde(rename = "buildkit")]
    BuildKit,
    /// The classic builder (BuilderV1), for engines without BuildKit.
    Classic,
}

/// The builder that runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Builder {
    /// The classic builder (BuilderV1).
    #[default]
    Classic,
    /// BuildKit.
    #[serde(rename = "buildkit")]
    BuildKit,
}

impl std::fmt::Display for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Builder::Classic => "classic",
            Builder::BuildKit => "buildkit",
        })
    }
}

/// Why that builder runs (for the line at the start of a build).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuilderReason {
    /// Asked for by name.
    Requested,
    /// `DOCKER_BUILDKIT` said so.
    Environment(String),
    /// The engine's API version decided (auto).
    EngineApi(String),
    /// The engine is not Linux (auto).
    EngineOs(String),
    /// The engine is Podman, whose compatible build is buildah's (auto).
    Podman,
}

impl std::fmt::Display for BuilderReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuilderReason::Requested => f.write_str("requested"),
            BuilderReason::Environment(v) => write!(f, "{DOCKER_BUILDKIT}={v}"),
            BuilderReason::EngineApi(v) => write!(f, "auto: engine API {v}"),
            BuilderReason::EngineOs(os) => write!(f, "auto: {os} engine"),
            BuilderReason::Podman => f.write_str("auto: Podman builds with buildah"),
        }
    }
}

/// What the engine told about itself, as far as the choice needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineFacts {
    /// The API version in use: the lower of the engine's and the client's.
    pub api: (u32, u32),
    /// The engine's OS (`linux`, `windows`).
    pub os: String,
    /// Whether the engine is Podman (its build is buildah's: no BuildKit).
    pub podman: bool,
}

/// The first API version whose engines make BuildKit `docker build`'s default.
const BUILDKIT_DEFAULT_API: (u32, u32) = (1, 42);
/// The first API version whose `/build` accepts `version=2`.
const BUILDKIT_MIN_API: (u32, u32) = (1, 39);

/// Decides from the facts and the `DOCKER_BUILDKIT` value (pure; see the
/// module's rule).
pub fn decide(
    choice: BuilderChoice,
    facts: &EngineFacts,
    docker_buildkit: Option<&str>,
) -> Result<(Builder, BuilderReason), BuildError> {
    let api = format!("{}.{}", facts.api.0, facts.api.1);
    let linux = facts.os.eq_ignore_ascii_case("linux");
    let can_buildkit = linux && facts.api >= BUILDKIT_MIN_API;
    let unsupported = || match facts.podman {
        true => BuildError::BuildKitOnPodman,
        false => BuildError::BuildKitUnsupported {
            api: api.clone(),
            os: facts.os.clone(),
        },
    };
    let can_buildkit = can_buildkit && !facts.podman;
    // Checked whatever the choice, as the docker CLI checks it for every
    // build: a value that is no boolean is a mistake to name, not to skip.
    let env_on = docker_buildkit
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|v| parse_bool(v).map(|on| (on, v)))
        .transpose()?;
    match choice {
        BuilderChoice::Classic => Ok((Builder::Classic, BuilderReason::Requested)),
        BuilderChoice::BuildKit if can_buildkit => {
            Ok((Builder::BuildKit, BuilderReason::Requested))
        }
        BuilderChoice::BuildKit => Err(unsupported()),
        BuilderChoice::Auto => {
            if let Some((on, value)) = env_on {
                let reason = BuilderReason::Environment(value.to_string());
                return match on {
                    true if can_buildkit => Ok((Builder::BuildKit, reason)),
                    true => Err(unsupported()),
                    false => Ok((Builder::Classic, reason)),
                };
            }
            if facts.podman {
                Ok((Builder::Classic, BuilderReason::Podman))
            } else if !linux {
                Ok((Builder::Classic, BuilderReason::EngineOs(facts.os.clone())))
            } else if facts.api >= BUILDKIT_DEFAULT_API {
                Ok((Builder::BuildKit, BuilderReason::EngineApi(api)))
            } else {
                Ok((Builder::Classic, BuilderReason::EngineApi(api)))
            }
        }
    }
}

/// [`decide`]s from what the connection learnt (`info`, no request) and
/// `DOCKER_BUILDKIT`.
pub fn choose_builder(
    info: &crate::docker::EngineInfo,
    choice: BuilderChoice,
) -> Result<(Builder, BuilderReason), BuildError> {
    // The client's version is the lower of the two already (negotiated or pinned).
    let facts = EngineFacts {
        api: parse_api(&info.api_version).unwrap_or((1, 0)),
        os: info.os.clone(),
        podman: info.product == crate::docker::engine::Product::Podman,
    };
    let env = std::env::var(DOCKER_BUILDKIT).ok();
    decide(choice, &facts, env.as_deref())
}

/// `DOCKER_BUILDKIT`'s value as Go's `strconv.ParseBool` reads it (the
/// docker CLI's own parser): 1, t, true, 0, f, false in their usual cases.
fn parse_bool(value: &str) -> Result<bool, BuildError> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(BuildError::BadDockerBuildkit {
            value: value.to_string(),
        }),
    }
}

/// `1.41` → (1, 41).
fn parse_api(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.trim().split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(api: (u32, u32), os: &str) -> EngineFacts {
        EngineFacts {
            api,
            os: os.to_string(),
            podman: false,
        }
    }

    #[test]
    fn podman_builds_classic_and_refuses_buildkit_at_once() {
        let podman = EngineFacts {
            podman: true,
            ..facts((1, 41), "linux")
        };
        assert_eq!(
            decide(BuilderChoice::Auto, &podman, None).unwrap(),
            (Builder::Classic, BuilderReason::Podman)
        );
        for (choice, env) in [
            (BuilderChoice::BuildKit, None),
            (BuilderChoice::Auto, Some("1")),
        ] {
            let err = decide(choice, &podman, env).unwrap_err();
            assert!(matches!(err, BuildError::BuildKitOnPodman), "{err}");
        }
        assert_eq!(
            decide(BuilderChoice::Classic, &podman, Some("1")).unwrap(),
            (Builder::Classic, BuilderReason::Requested)
        );
    }

    #[test]
    fn a_docker_buildkit_that_is_no_boolean_is_refused_whatever_the_choice() {
        let f = facts((1, 41), "linux");
        for bad in ["garbage", "2", "yes", "on", "-1"] {
            for choice in [
                BuilderChoice::Auto,
                BuilderChoice::Classic,
                BuilderChoice::BuildKit,
            ] {
                let e = decide(choice, &f, Some(bad)).unwrap_err();
                assert!(
                    matches!(e, BuildError::BadDockerBuildkit { .. }),
                    "{bad}: {e}"
                );
            }
        }
        for (good, builder) in [("T", Builder::BuildKit), ("False", Builder::Classic)] {
            assert_eq!(
                decide(BuilderChoice::Auto, &f, Some(good)).unwrap().0,
                builder
            );
        }
    }

    #[test]
    fn auto_follows_the_engine_and_the_docker_switch() {
        let old = facts((1, 41), "linux");
        let new = facts((1, 50), "linux");
        let auto = BuilderChoice::Auto;
        assert_eq!(decide(auto, &old, None).unwrap().0, Builder::Classic);
        assert_eq!(decide(auto, &new, None).unwrap().0, Builder::BuildKit);
        assert_eq!(decide(auto, &new, Some("0")).unwrap().0, Builder::Classic);
        assert_eq!(decide(auto, &old, Some("1")).unwrap().0, Builder::BuildKit);
        assert_eq!(decide(auto, &old, Some(" ")).unwrap().0, Builder::Classic);
        assert_eq!(
            decide(auto, &facts((1, 50), "windows"), None).unwrap().0,
            Builder::Classic
        );
        let err = decide(auto, &old, Some("yes please")).unwrap_err();
        assert!(err.to_string().contains("yes please"), "{err}");
    }

    #[test]
    fn named_builders_are_honoured_or_refused() {
        let old = facts((1, 41), "linux");
        assert_eq!(
            decide(BuilderChoice::BuildKit, &old, Some("0")).unwrap(),
            (Builder::BuildKit, BuilderReason::Requested)
        );
        assert_eq!(
            decide(BuilderChoice::Classic, &facts((1, 50), "linux"), Some("1"))
                .unwrap()
                .0,
            Builder::Classic
        );
        let err = decide(BuilderChoice::BuildKit, &facts((1, 38), "linux"), None).unwrap_err();
        assert!(err.to_string().contains("1.38"), "{err}");
        assert!(decide(BuilderChoice::BuildKit, &facts((1, 50), "windows"), None).is_err());
        assert_eq!(parse_api("1.41"), Some((1, 41)));
        assert_eq!(parse_api("x"), None);
    }
}
