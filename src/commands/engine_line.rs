//! The `engine:` line that `imgctl build` starts with: which engine and API
//! version answered, at which address, chosen by which context or setting
//! (the facts are [`crate::docker::EngineInfo`]'s; this only words them).
use crate::docker::endpoint::Origin;
use crate::docker::engine::Product;
use crate::docker::EngineInfo;
use crate::error::printable;

/// `engine: Docker 20.10.24 (API 1.41) at unix:///var/run/docker.sock
/// (context NAME)`, then `, builder NAME` when a builder is named. The
/// parenthesis after the address says what chose it: a context (by name),
/// `DOCKER_HOST`, or a Podman socket found where there is no Docker socket;
/// none for the Docker socket by default. Podman says `API compat 1.41` (its
/// Docker-compatible API) and whether it is rootful or rootless; a rootless
/// Docker says `rootless`.
pub fn engine_line(info: &EngineInfo, builder: Option<&str>) -> String {
    let compat = match info.product {
        Product::Podman => "API compat",
        Product::Docker => "API",
    };
    let api = if info.engine_api == info.api_version || info.engine_api == "unknown" {
        format!("{compat} {}", info.api_version)
    } else {
        format!(
            "{compat} {}, the engine's {}",
            info.api_version, info.engine_api
        )
    };
    let mode = match (info.product, info.rootless) {
        (_, true) => ", rootless",
        (Product::Podman, false) => ", rootful",
        (Product::Docker, false) => "",
    };
    let chosen_by = match (&info.context, &info.origin) {
        (Some(context), _) => format!(" (context {})", printable(context)),
        (None, Origin::HostEnv) => " (DOCKER_HOST)".to_string(),
        (None, origin @ Origin::Podman(_)) => format!(" ({origin})"),
        (None, _) => String::new(),
    };
    let mut line = format!(
        "engine: {} {} ({api}){mode} at {}{chosen_by}",
        info.product,
        printable(&info.version),
        printable(&info.address)
    );
    if let Some(builder) = builder {
        line.push_str(&format!(", builder {}", printable(builder)));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(context: Option<&str>, origin: Origin) -> EngineInfo {
        EngineInfo {
            version: "20.10.24+dfsg1".into(),
            engine_api: "1.41".into(),
            api_version: "1.41".into(),
            os: "linux".into(),
            address: "unix:///var/run/docker.sock".into(),
            context: context.map(str::to_string),
            origin,
            product: Product::Docker,
            rootless: false,
        }
    }

    #[test]
    fn says_engine_api_address_and_what_chose_it() {
        assert_eq!(
            engine_line(&info(Some("gpu-box"), Origin::Chosen), None),
            "engine: Docker 20.10.24+dfsg1 (API 1.41) at unix:///var/run/docker.sock (context gpu-box)"
        );
        assert_eq!(
            engine_line(&info(None, Origin::HostEnv), Some("buildkit")),
            "engine: Docker 20.10.24+dfsg1 (API 1.41) at unix:///var/run/docker.sock (DOCKER_HOST), builder buildkit"
        );
        let mut newer = info(None, Origin::Default);
        newer.engine_api = "1.54".into();
        newer.api_version = "1.53".into();
        assert_eq!(
            engine_line(&newer, None),
            "engine: Docker 20.10.24+dfsg1 (API 1.53, the engine's 1.54) at unix:///var/run/docker.sock"
        );
    }

    #[test]
    fn podman_says_compat_api_rootful_or_rootless_and_which_socket() {
        use crate::docker::endpoint::PodmanSocket;
        let mut podman = info(None, Origin::Podman(PodmanSocket::Rootless));
        podman.product = Product::Podman;
        podman.version = "4.3.1".into();
        podman.rootless = true;
        podman.address = "unix:///run/user/1000/podman/podman.sock".into();
        assert_eq!(
            engine_line(&podman, None),
            "engine: Podman 4.3.1 (API compat 1.41), rootless at unix:///run/user/1000/podman/podman.sock (no Docker socket; Podman's rootless socket)"
        );
        podman.rootless = false;
        podman.origin = Origin::HostEnv;
        assert!(engine_line(&podman, None)
            .starts_with("engine: Podman 4.3.1 (API compat 1.41), rootful at "));
        let mut docker = info(None, Origin::Default);
        docker.rootless = true;
        assert!(engine_line(&docker, None)
            .starts_with("engine: Docker 20.10.24+dfsg1 (API 1.41), rootless at "));
    }
}
