//! Podman's own container create (libpod's `POST /v4.0.0/libpod/containers/create`,
//! served on the same socket as its Docker-compatible API), for the one thing
//! the compatible create cannot carry: CDI device names. Podman 4.3's
//! compatible create drops `HostConfig.DeviceRequests` and takes a `Devices`
//! entry as a host path; libpod's takes `devices: [{"path":
//! "nvidia.com/gpu=all"}]`, as `podman run --device nvidia.com/gpu=all` sends.
//!
//! [`spec`] translates the compatible create body imgctl builds anyway into
//! libpod's SpecGenerator, field by field, and refuses ([`Untranslatable`])
//! any field it has no form for rather than drop it: image, entrypoint,
//! command, environment, labels, user, working folder, healthcheck, exposed
//! and published ports, bind mounts (`Mounts` and `Binds`), named volumes,
//! /dev/shm's size, sysctls, ulimits, user namespace, restart policy, and CDI device
//! requests (driver `cdi`). [`create`] sends it through the engine's bollard
//! client (its transport and its bounds), so the answer and its errors read
//! as a compatible create's; the container it makes is an ordinary one to the
//! compatible API (start, inspect, logs, remove). Measured on Podman 4.3.1:
//! a name the CDI specs do not know is refused at start (`unresolvable CDI
//! devices nvidia.com/gpu=all`), not at create.
//!
//! Part: the shared floor (`docs/architecture.md`).
use std::collections::BTreeMap;

use bollard::models::{
    ContainerCreateBody, ContainerCreateResponse, HostConfig, Mount, MountType,
    RestartPolicyNameEnum,
};
use bollard::query_parameters::CreateContainerOptions;
use serde::Serialize;
use serde_json::{json, Map, Value};

/// libpod's create, at the API version Podman 4.0 and later serve.
pub const LIBPOD_CREATE: &str = "/v4.0.0/libpod/containers/create";

/// A field of the compatible create body that libpod's create would not
/// carry the same way (imgctl refuses to drop it without a word).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("imgctl cannot carry {what} to Podman's libpod create (which GPUs by CDI need): {fields}")]
pub struct Untranslatable {
    /// What holds the fields (`the container's settings`, `a mount`).
    pub what: String,
    /// The fields, as the Engine API names them.
    pub fields: String,
}

/// Fails with the fields of `rest` that are set (in its JSON form, where
/// bollard leaves unset fields out).
fn nothing_left<T: Serialize>(rest: &T, what: &str) -> Result<(), Untranslatable> {
    let value = serde_json::to_value(rest).unwrap_or(Value::Null);
    let set: Vec<String> = value
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    if set.is_empty() {
        return Ok(());
    }
    Err(Untranslatable {
        what: what.to_string(),
        fields: set.join(", "),
    })
}

fn untranslatable(what: &str, fields: impl Into<String>) -> Untranslatable {
    Untranslatable {
        what: what.to_string(),
        fields: fields.into(),
    }
}

/// libpod's SpecGenerator for the compatible create `body` of a container
/// named `name` (None: the engine names it).
pub fn spec(name: Option<&str>, body: &ContainerCreateBody) -> Result<Value, Untranslatable> {
    let mut body = body.clone();
    let mut out = Map::new();
    let mut put = |key: &str, value: Value| {
        out.insert(key.to_string(), value);
    };
    if let Some(name) = name {
        put("name", json!(name));
    }
    if let Some(image) = body.image.take() {
        put("image", json!(image));
    }
    if let Some(entrypoint) = body.entrypoint.take() {
        put("entrypoint", json!(entrypoint));
    }
    // An empty command is the image's, as in the compatible create.
    if let Some(cmd) = body.cmd.take().filter(|c| !c.is_empty()) {
        put("command", json!(cmd));
    }
    if let Some(env) = body.env.take() {
        let mut map = BTreeMap::new();
        for entry in env {
            let Some((k, v)) = entry.split_once('=') else {
                return Err(untranslatable(
                    "an environment entry without a value",
                    entry,
                ));
            };
            map.insert(k.to_string(), v.to_string());
        }
        put("env", json!(map));
    }
    if let Some(labels) = body.labels.take() {
        put(
            "labels",
            json!(labels.into_iter().collect::<BTreeMap<_, _>>()),
        );
    }
    if let Some(user) = body.user.take() {
        put("user", json!(user));
    }
    if let Some(dir) = body.working_dir.take() {
        put("work_dir", json!(dir));
    }
    if let Some(health) = body.healthcheck.take() {
        // Docker's HealthConfig is the image schema's (durations in ns).
        let rest = bollard::models::HealthConfig {
            test: None,
            interval: None,
            timeout: None,
            retries: None,
            start_period: None,
            ..health.clone()
        };
        nothing_left(&rest, "the healthcheck")?;
        put(
            "healthconfig",
            json!({
                "Test": health.test.unwrap_or_default(),
                "Interval": health.interval.unwrap_or(0),
                "Timeout": health.timeout.unwrap_or(0),
                "StartPeriod": health.start_period.unwrap_or(0),
                "Retries": health.retries.unwrap_or(0),
            }),
        );
    }
    if let Some(exposed) = body.exposed_ports.take() {
        let mut expose = BTreeMap::new();
        for key in exposed {
            let (port, protocol) = port_key(&key)?;
            expose.insert(port.to_string(), protocol);
        }
        put("expose", json!(expose));
    }
    // What the compatible create takes and libpod's has no use for: who
    // reads the output is a later attach's (logs here) business.
    body.attach_stdout.take();
    body.attach_stderr.take();
    if let Some(tty) = body.tty.take() {
        put("terminal", json!(tty));
    }
    if let Some(host) = body.host_config.take() {
        host_config(host, &mut out)?;
    }
    nothing_left(&body, "the container's settings")?;
    Ok(Value::Object(out))
}

/// `8888/tcp` → (8888, `tcp`).
fn port_key(key: &str) -> Result<(u16, String), Untranslatable> {
    let (port, protocol) = key.split_once('/').unwrap_or((key, "tcp"));
    let port = port
        .parse::<u16>()
        .map_err(|_| untranslatable("a port", key))?;
    Ok((port, protocol.to_string()))
}

/// The HostConfig's fields into `out`.
fn host_config(mut host: HostConfig, out: &mut Map<String, Value>) -> Result<(), Untranslatable> {
    let mut put = |key: &str, value: Value| {
        out.insert(key.to_string(), value);
    };
    if let Some(requests) = host.device_requests.take() {
        let mut devices = Vec::new();
        for request in requests {
            if request.driver.as_deref() != Some("cdi") {
                return Err(untranslatable(
                    "a GPU request",
                    format!(
                        "driver {} (libpod takes CDI device names only)",
                        request.driver.as_deref().unwrap_or("(none)")
                    ),
                ));
            }
            for name in request.device_ids.unwrap_or_default() {
                devices.push(json!({ "path": name }));
            }
        }
        put("devices", Value::Array(devices));
    }
    let mut mounts = Vec::new();
    let mut volumes = Vec::new();
    for bind in host.binds.take().unwrap_or_default() {
        // SRC:DST[:OPTIONS], as the compatible create reads it.
        let mut parts = bind.splitn(3, ':');
        let (Some(source), Some(target)) = (parts.next(), parts.next()) else {
            return Err(untranslatable("a bind", bind));
        };
        let options: Vec<String> = parts
            .next()
            .map(|o| o.split(',').map(str::to_string).collect())
            .unwrap_or_default();
        if source.starts_with('/') {
            mounts.push(json!({"type": "bind", "source": source, "destination": target, "options": options}));
        } else {
            volumes.push(json!({"Name": source, "Dest": target, "Options": options}));
        }
    }
    for mount in host.mounts.take().unwrap_or_default() {
        let (kind, source, target, read_only) = mount_parts(mount)?;
        let options = vec![if read_only { "ro" } else { "rw" }.to_string()];
        match kind {
            MountType::BIND => mounts.push(
                json!({"type": "bind", "source": source, "destination": target, "options": options}),
            ),
            MountType::VOLUME => {
                volumes.push(json!({"Name": source, "Dest": target, "Options": options}))
            }
            other => return Err(untranslatable("a mount", format!("type {other}"))),
        }
    }
    if !mounts.is_empty() {
        put("mounts", Value::Array(mounts));
    }
    if !volumes.is_empty() {
        put("volumes", Value::Array(volumes));
    }
    if let Some(policy) = host.restart_policy.take() {
        let name = match policy.name {
            Some(RestartPolicyNameEnum::ALWAYS) => "always",
            Some(RestartPolicyNameEnum::UNLESS_STOPPED) => "unless-stopped",
            Some(RestartPolicyNameEnum::ON_FAILURE) => "on-failure",
            _ => "no",
        };
        put("restart_policy", json!(name));
        if let Some(tries) = policy.maximum_retry_count.filter(|n| *n > 0) {
            put("restart_tries", json!(tries));
        }
    }
    if let Some(ports) = host.port_bindings.take() {
        let mut mappings = Vec::new();
        let mut keys: Vec<_> = ports.into_iter().collect();
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, bindings) in keys {
            let (port, protocol) = port_key(&key)?;
            for b in bindings.unwrap_or_default() {
                let host_port = match b.host_port.as_deref().unwrap_or("") {
                    "" => 0,
                    p => p
                        .parse::<u16>()
                        .map_err(|_| untranslatable("a published port", p.to_string()))?,
                };
                mappings.push(json!({
                    "host_ip": b.host_ip.unwrap_or_default(),
                    "container_port": port,
                    "host_port": host_port,
                    "protocol": protocol,
                }));
            }
        }
        put("portmappings", Value::Array(mappings));
    }
    if let Some(shm) = host.shm_size.take() {
        put("shm_size", json!(shm));
    }
    if let Some(sysctls) = host.sysctls.take().filter(|s| !s.is_empty()) {
        let sysctls: BTreeMap<String, String> = sysctls.into_iter().collect();
        put("sysctl", json!(sysctls));
    }
    if let Some(mode) = host.userns_mode.take().filter(|m| !m.is_empty()) {
        let (nsmode, value) = mode.split_once(':').unwrap_or((mode.as_str(), ""));
        put("userns", json!({"nsmode": nsmode, "value": value}));
    }
    if let Some(ulimits) = host.ulimits.take() {
        let limits: Vec<Value> = ulimits
            .into_iter()
            .map(|u| {
                // The OCI rlimit is unsigned: −1 (unlimited) is its maximum,
                // as Podman's own `--ulimit memlock=-1` sends it.
                let at = |v: Option<i64>| v.map_or(u64::MAX, |v| v as u64);
                json!({"type": u.name.unwrap_or_default(), "soft": at(u.soft), "hard": at(u.hard)})
            })
            .collect();
        put("r_limits", Value::Array(limits));
    }
    nothing_left(&host, "the container's host settings")
}

/// A mount's type, source, target and whether it is read-only; any other
/// field set is refused.
fn mount_parts(mut mount: Mount) -> Result<(MountType, String, String, bool), Untranslatable> {
    let kind = mount.typ.take().unwrap_or(MountType::BIND);
    let source = mount.source.take().unwrap_or_default();
    let target = mount
        .target
        .take()
        .ok_or_else(|| untranslatable("a mount", "no target"))?;
    let read_only = mount.read_only.take().unwrap_or(false);
    nothing_left(&mount, "a mount")?;
    Ok((kind, source, target, read_only))
}

/// Creates the container of `spec` (from [`spec`]) through libpod's create,
/// over `docker`'s own connection: the answer (`{"Id", "Warnings"}`) and
/// an error (status and message) read as the compatible create's.
/// Creates the container of `body` (named `name`, or by the engine) with
/// the GPUs of `request` in it: through libpod's own create where the
/// request needs it (CDI names on Podman, [`super::cdi::GpuRequest::libpod`]),
/// else through the compatible create. The outer error is a field libpod's
/// create cannot carry (nothing was sent); the inner one the engine's answer.
pub async fn create_with_gpus(
    docker: &bollard::Docker,
    name: Option<&str>,
    mut body: ContainerCreateBody,
    request: Option<super::cdi::GpuRequest>,
) -> Result<Result<ContainerCreateResponse, bollard::errors::Error>, Untranslatable> {
    let libpod = request.as_ref().is_some_and(|r| r.libpod);
    body.host_config
        .get_or_insert_with(HostConfig::default)
        .device_requests = request.map(|r| vec![r.request]);
    if libpod {
        let spec = spec(name, &body)?;
        return Ok(create(docker, &spec).await);
    }
    let opts = CreateContainerOptions {
        name: name.map(str::to_string),
        ..Default::default()
    };
    Ok(docker.create_container(Some(opts), body).await)
}

/// Sends libpod's create of `spec` (from [`spec`]) through the engine's
/// bollard client.
pub async fn create(
    docker: &bollard::Docker,
    spec: &Value,
) -> Result<ContainerCreateResponse, bollard::errors::Error> {
    let bytes = hyper::body::Bytes::from(serde_json::to_vec(spec)?);
    // bollard has no request of an arbitrary path: its create request is
    // turned into libpod's (path and body) on its way out.
    let libpod = docker.clone().with_request_modifier(move |request| {
        let (mut parts, _) = request.into_parts();
        let mut uri = parts.uri.clone().into_parts();
        uri.path_and_query = Some(hyper::http::uri::PathAndQuery::from_static(LIBPOD_CREATE));
        if let Ok(new) = hyper::Uri::from_parts(uri) {
            parts.uri = new;
        }
        hyper::Request::from_parts(parts, bollard::body_full(bytes.clone()))
    });
    libpod
        .create_container(
            None::<CreateContainerOptions>,
            ContainerCreateBody::default(),
        )
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{DeviceRequest, PortBinding, ResourcesUlimits, RestartPolicy};
    use std::collections::HashMap;

    #[test]
    fn a_workstation_body_becomes_libpods_spec_with_cdi_devices() {
        let body = ContainerCreateBody {
            image: Some("img:1".into()),
            env: Some(vec!["A=1".into(), "TOKEN=x=y".into()]),
            labels: Some(HashMap::from([(
                "io.imgctl.workstation".into(),
                "true".into(),
            )])),
            exposed_ports: Some(vec!["8888/tcp".into()]),
            host_config: Some(HostConfig {
                device_requests: Some(vec![DeviceRequest {
                    driver: Some("cdi".into()),
                    device_ids: Some(vec!["imgctl.test/gpu=0".into()]),
                    ..Default::default()
                }]),
                mounts: Some(vec![
                    Mount {
                        typ: Some(MountType::BIND),
                        source: Some("/home/me/col:on".into()),
                        target: Some("/workspace".into()),
                        read_only: Some(false),
                        ..Default::default()
                    },
                    Mount {
                        typ: Some(MountType::VOLUME),
                        source: Some("ws-home".into()),
                        target: Some("/home/dev".into()),
                        read_only: Some(false),
                        ..Default::default()
                    },
                ]),
                restart_policy: Some(RestartPolicy {
                    name: Some(RestartPolicyNameEnum::UNLESS_STOPPED),
                    maximum_retry_count: None,
                }),
                port_bindings: Some(HashMap::from([(
                    "8888/tcp".into(),
                    Some(vec![PortBinding {
                        host_ip: Some("127.0.0.1".into()),
                        host_port: Some(String::new()),
                    }]),
                )])),
                shm_size: Some(16 << 30),
                sysctls: Some(HashMap::from([(
                    "net.ipv4.ip_unprivileged_port_start".into(),
                    "0".into(),
                )])),
                userns_mode: Some("keep-id".into()),
                ulimits: Some(vec![ResourcesUlimits {
                    name: Some("memlock".into()),
                    soft: Some(-1),
                    hard: Some(-1),
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let spec = spec(Some("ws"), &body).unwrap();
        assert_eq!(
            spec,
            json!({
                "name": "ws",
                "image": "img:1",
                "env": {"A": "1", "TOKEN": "x=y"},
                "labels": {"io.imgctl.workstation": "true"},
                "expose": {"8888": "tcp"},
                "devices": [{"path": "imgctl.test/gpu=0"}],
                "mounts": [{"type": "bind", "source": "/home/me/col:on", "destination": "/workspace", "options": ["rw"]}],
                "volumes": [{"Name": "ws-home", "Dest": "/home/dev", "Options": ["rw"]}],
                "restart_policy": "unless-stopped",
                "portmappings": [{"host_ip": "127.0.0.1", "container_port": 8888, "host_port": 0, "protocol": "tcp"}],
                "shm_size": 16_i64 << 30,
                "sysctl": {"net.ipv4.ip_unprivileged_port_start": "0"},
                "userns": {"nsmode": "keep-id", "value": ""},
                "r_limits": [{"type": "memlock", "soft": u64::MAX, "hard": u64::MAX}],
            })
        );
    }

    #[test]
    fn a_run_body_keeps_its_command_binds_and_output() {
        let body = ContainerCreateBody {
            image: Some("img:1".into()),
            entrypoint: Some(vec!["imgctl".into()]),
            cmd: Some(vec!["verify".into(), "--json".into()]),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            host_config: Some(HostConfig {
                binds: Some(vec![
                    "/usr/bin/imgctl:/usr/local/bin/imgctl:ro".into(),
                    "cache:/cache".into(),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let spec = spec(None, &body).unwrap();
        assert_eq!(
            spec,
            json!({
                "image": "img:1",
                "entrypoint": ["imgctl"],
                "command": ["verify", "--json"],
                "terminal": false,
                "mounts": [{"type": "bind", "source": "/usr/bin/imgctl", "destination": "/usr/local/bin/imgctl", "options": ["ro"]}],
                "volumes": [{"Name": "cache", "Dest": "/cache", "Options": []}],
            })
        );
        // An empty command is the image's.
        let image_cmd = ContainerCreateBody {
            image: Some("img:1".into()),
            cmd: Some(vec![]),
            ..Default::default()
        };
        assert_eq!(spec_of(&image_cmd), json!({"image": "img:1"}));
    }

    fn spec_of(body: &ContainerCreateBody) -> Value {
        spec(None, body).unwrap()
    }

    #[test]
    fn what_libpod_would_not_carry_is_refused_by_name() {
        let privileged = ContainerCreateBody {
            image: Some("img:1".into()),
            host_config: Some(HostConfig {
                privileged: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        };
        let err = spec(None, &privileged).unwrap_err();
        assert_eq!(err.fields, "Privileged", "{err}");
        let runtime = ContainerCreateBody {
            host_config: Some(HostConfig {
                device_requests: Some(vec![crate::docker::cdi::device_request(
                    &crate::gpus::GpuSelection::All,
                )]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let err = spec(None, &runtime).unwrap_err();
        assert!(err.to_string().contains("driver nvidia"), "{err}");
        let stop = ContainerCreateBody {
            stop_signal: Some("SIGINT".into()),
            ..Default::default()
        };
        assert_eq!(spec(None, &stop).unwrap_err().fields, "StopSignal");
        let tmpfs = ContainerCreateBody {
            host_config: Some(HostConfig {
                mounts: Some(vec![Mount {
                    typ: Some(MountType::TMPFS),
                    target: Some("/t".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(spec(None, &tmpfs).unwrap_err().fields.contains("tmpfs"));
    }
}
