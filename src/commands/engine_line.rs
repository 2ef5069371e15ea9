//! The `engine:` line that `imgctl build` starts with: which engine and API
//! version answered, at which address, chosen by which context or setting
//! (the facts are [`crate::docker::EngineInfo`]'s; this only words them).
use crate::docker::endpoint::Origin;
use crate::docker::EngineInfo;
use crate::error::printable;

/// `engine: Docker 20.10.24 (API 1.41) at unix:///var/run/docker.sock
/// (context NAME)`, then `, builder NAME` when a builder is named. The
/// parenthesis after the address says what chose it: a context (by name) or
/// `DOCKER_HOST`; none for the local socket by default.
pub fn engine_line(info: &EngineInfo, builder: Option<&str>) -> String {
    let api = if info.engine_api == info.api_version || info.engine_api == "unknown" {
        format!("API {}", info.api_version)
    } else {
        format!("API {}, the engine's {}", info.api_version, info.engine_api)
    };
    let chosen_by = match (&info.context, &info.origin) {
        (Some(context), _) => format!(" (context {})", printable(context)),
        (None, Origin::HostEnv) => " (DOCKER_HOST)".to_string(),
        (None, _) => String::new(),
    };
    let mut line = format!(
        "engine: Docker {} ({api}) at {}{chosen_by}",
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
}
