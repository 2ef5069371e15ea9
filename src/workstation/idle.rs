//! **Idle stop** (`up --idle-stop`): the clock that decides when a
//! workstation has been idle long enough ([`IdleClock`]), and the probes it
//! looks through ([`look`]): JupyterLab's REST API (busy kernels and the
//! server's own `last_activity`), the SSH port's established connections in
//! `/proc/net/tcp{,6}`, and GPU utilisation through the NVML seam.
//!
//! It runs inside the workstation, started by the image's entrypoint
//! (`imgctl idle-watch`), and never stops anything itself: the command says
//! why and exits, and the entrypoint stops the services, so the container
//! stops and stays (never removed) for `up` to start again.
//!
//! A probe that cannot tell (Jupyter not answering yet, NVML refusing) counts
//! as in use: blindness never stops a workstation.
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, SystemTime};

use crate::nvml::NvmlBackend;

/// What one look at JupyterLab saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JupyterSeen {
    /// Kernels running.
    pub kernels: usize,
    /// Kernels whose `execution_state` is `busy` (a cell running).
    pub busy_kernels: usize,
    /// The server's `last_activity` (`/api/status`): the last API request,
    /// kernel message or terminal output.
    pub last_activity: Option<SystemTime>,
}

/// What one look at the workstation saw; each part is Err(why) when its
/// probe could not tell, None when it was not asked (no Jupyter, no sshd,
/// no GPU library).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// JupyterLab.
    pub jupyter: Option<Result<JupyterSeen, String>>,
    /// Established connections to sshd's port.
    pub ssh_sessions: Option<Result<usize, String>>,
    /// Each GPU's utilisation, in percent (empty: no GPU).
    pub gpus: Option<Result<Vec<u32>, String>>,
}

/// One reason the workstation is in use at a look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InUse {
    /// Kernels running a cell.
    BusyKernels(usize),
    /// SSH sessions open.
    SshSessions(usize),
    /// A GPU at or above the threshold: its index and utilisation.
    Gpu(u32, u32),
    /// A probe that could not tell (which, and why).
    Unknown(&'static str, String),
}

impl std::fmt::Display for InUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InUse::BusyKernels(1) => f.write_str("a notebook kernel is busy"),
            InUse::BusyKernels(n) => write!(f, "{n} notebook kernels are busy"),
            InUse::SshSessions(1) => f.write_str("an SSH session is open"),
            InUse::SshSessions(n) => write!(f, "{n} SSH sessions are open"),
            InUse::Gpu(i, p) => write!(f, "GPU {i} is {p} % busy"),
            InUse::Unknown(what, why) => write!(f, "{what} cannot be read ({why})"),
        }
    }
}

/// What the clock made of a look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Look {
    /// In use now, for these reasons.
    InUse(Vec<InUse>),
    /// Nothing in use now; idle since `since`, `left` to go before the stop.
    Idle {
        /// The last moment anything was in use (or Jupyter saw activity).
        since: SystemTime,
        /// Time left until the stop.
        left: Duration,
    },
    /// Idle for at least the limit: stop.
    Stop {
        /// The last moment anything was in use.
        since: SystemTime,
        /// How long it has been idle.
        idle_for: Duration,
    },
}

/// The idle clock: idle is measured from the last moment anything was in
/// use, or from Jupyter's own last activity when that is later.
#[derive(Debug, Clone)]
pub struct IdleClock {
    after: Duration,
    gpu_below: u32,
    last_active: SystemTime,
}

impl IdleClock {
    /// A clock that stops after `after` idle; a GPU counts as busy at or
    /// above `gpu_below` percent; `start` counts as activity (the
    /// workstation's start).
    pub fn new(after: Duration, gpu_below: u32, start: SystemTime) -> Self {
        IdleClock {
            after,
            gpu_below,
            last_active: start,
        }
    }

    /// The idle limit.
    pub fn after(&self) -> Duration {
        self.after
    }

    /// Takes one look, made at `now`.
    pub fn observe(&mut self, now: SystemTime, seen: &Seen) -> Look {
        let mut in_use = Vec::new();
        if let Some(j) = &seen.jupyter {
            match j {
                Ok(j) => {
                    if j.busy_kernels > 0 {
                        in_use.push(InUse::BusyKernels(j.busy_kernels));
                    }
                    if let Some(t) = j.last_activity {
                        self.last_active = self.last_active.max(t.min(now));
                    }
                }
                Err(why) => in_use.push(InUse::Unknown("JupyterLab", why.clone())),
            }
        }
        match &seen.ssh_sessions {
            Some(Ok(0)) | None => {}
            Some(Ok(n)) => in_use.push(InUse::SshSessions(*n)),
            Some(Err(why)) => in_use.push(InUse::Unknown("SSH sessions", why.clone())),
        }
        match &seen.gpus {
            Some(Ok(utils)) => in_use.extend(
                utils
                    .iter()
                    .enumerate()
                    .filter(|(_, &u)| u >= self.gpu_below)
                    .map(|(i, &u)| InUse::Gpu(i as u32, u)),
            ),
            Some(Err(why)) => in_use.push(InUse::Unknown("GPU utilisation", why.clone())),
            None => {}
        }
        if !in_use.is_empty() {
            self.last_active = now;
            return Look::InUse(in_use);
        }
        let idle_for = now.duration_since(self.last_active).unwrap_or_default();
        if idle_for >= self.after {
            Look::Stop {
                since: self.last_active,
                idle_for,
            }
        } else {
            Look::Idle {
                since: self.last_active,
                left: self.after - idle_for,
            }
        }
    }
}

/// Where the probes look: JupyterLab's port and token (None: no Jupyter),
/// sshd's port (None: no sshd), and NVML (None: no GPU library).
pub struct Probes<'a> {
    /// JupyterLab's port on 127.0.0.1 and its token.
    pub jupyter: Option<(u16, String)>,
    /// sshd's port.
    pub ssh_port: Option<u16>,
    /// The GPUs.
    pub nvml: Option<&'a dyn NvmlBackend>,
}

/// Looks once through every probe.
pub fn look(probes: &Probes<'_>) -> Seen {
    Seen {
        jupyter: probes
            .jupyter
            .as_ref()
            .map(|(port, token)| jupyter(*port, token)),
        ssh_sessions: probes.ssh_port.map(ssh_sessions),
        gpus: probes.nvml.map(gpu_utilisation),
    }
}

/// JupyterLab's kernels and last activity. Neither request counts as
/// activity itself: `/api/status` is not tracked, and `/api/kernels` is
/// asked with `no_track_activity`.
pub fn jupyter(port: u16, token: &str) -> Result<JupyterSeen, String> {
    let status = http_get(port, "/api/status", token)?;
    let kernels = http_get(port, "/api/kernels?no_track_activity=1", token)?;
    let (n, busy) = parse_kernels(&kernels)?;
    Ok(JupyterSeen {
        kernels: n,
        busy_kernels: busy,
        last_activity: parse_last_activity(&status)?,
    })
}

/// The number of kernels and of busy ones in `/api/kernels`' answer.
pub fn parse_kernels(body: &str) -> Result<(usize, usize), String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("/api/kernels is not JSON: {e}"))?;
    let list = v
        .as_array()
        .ok_or("/api/kernels is not a list of kernels")?;
    let busy = list
        .iter()
        .filter(|k| k["execution_state"].as_str() == Some("busy"))
        .count();
    Ok((list.len(), busy))
}

/// `last_activity` in `/api/status`' answer (RFC 3339, UTC).
pub fn parse_last_activity(body: &str) -> Result<Option<SystemTime>, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("/api/status is not JSON: {e}"))?;
    match v["last_activity"].as_str() {
        None => Ok(None),
        Some(s) => humantime::parse_rfc3339_weak(s)
            .map(Some)
            .map_err(|e| format!("/api/status' last_activity {s:?} is no time: {e}")),
    }
}

/// One GET to 127.0.0.1:`port` with the token, in HTTP/1.0 (one body, no
/// chunks); the body of a 200 answer.
fn http_get(port: u16, path: &str, token: &str) -> Result<String, String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let timeout = Duration::from_secs(5);
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("port {port} does not answer: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    // One write: a server that answers after the head's first packet must
    // not see the rest arrive on a closed socket.
    let request = format!(
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAuthorization: token {token}\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("port {port}: {e}"))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .map_err(|e| format!("port {port}: {e}"))?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.split_whitespace().nth(1).unwrap_or("?");
    if status != "200" {
        return Err(format!("GET {path} answered HTTP {status}"));
    }
    Ok(body.to_string())
}

/// Established TCP connections to local `port` (sshd's), from
/// `/proc/net/tcp` and `/proc/net/tcp6` of this network namespace.
pub fn ssh_sessions(port: u16) -> Result<usize, String> {
    let mut n = 0;
    let mut read_any = false;
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(file) {
            read_any = true;
            n += established_to(&text, port);
        }
    }
    if read_any {
        Ok(n)
    } else {
        Err("/proc/net/tcp cannot be read".into())
    }
}

/// Lines of a `/proc/net/tcp{,6}` table in state 01 (ESTABLISHED) whose
/// local port is `port`.
pub fn established_to(table: &str, port: u16) -> usize {
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let mut cols = line.split_whitespace();
            let local = cols.nth(1);
            let state = cols.nth(1);
            let local_port = local
                .and_then(|l| l.rsplit_once(':'))
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            local_port == Some(port) && state == Some("01")
        })
        .count()
}

/// Each GPU's utilisation in percent (empty when there is none).
pub fn gpu_utilisation(nvml: &dyn NvmlBackend) -> Result<Vec<u32>, String> {
    let n = nvml.device_count().map_err(|e| e.to_string())?;
    (0..n)
        .map(|i| nvml.utilization_pct(i).map_err(|e| format!("GPU {i}: {e}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvml::{fake, FakeGpu, FakeNvml};

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn jupyter_idle(last: u64) -> Option<Result<JupyterSeen, String>> {
        Some(Ok(JupyterSeen {
            kernels: 1,
            busy_kernels: 0,
            last_activity: Some(at(last)),
        }))
    }

    fn quiet(last: u64) -> Seen {
        Seen {
            jupyter: jupyter_idle(last),
            ssh_sessions: Some(Ok(0)),
            gpus: Some(Ok(vec![0, 3])),
        }
    }

    #[test]
    fn idle_counts_from_the_start_and_stops_at_the_limit() {
        let mut clock = IdleClock::new(Duration::from_secs(60), 5, at(0));
        assert_eq!(
            clock.observe(at(20), &quiet(0)),
            Look::Idle {
                since: at(0),
                left: Duration::from_secs(40)
            }
        );
        assert_eq!(
            clock.observe(at(61), &quiet(0)),
            Look::Stop {
                since: at(0),
                idle_for: Duration::from_secs(61)
            }
        );
    }

    #[test]
    fn jupyter_activity_restarts_the_clock_and_a_future_stamp_is_now() {
        let mut clock = IdleClock::new(Duration::from_secs(60), 5, at(0));
        assert!(matches!(
            clock.observe(at(50), &quiet(40)),
            Look::Idle { since, .. } if since == at(40)
        ));
        assert!(matches!(
            clock.observe(at(90), &quiet(40)),
            Look::Idle { .. }
        ));
        assert!(matches!(
            clock.observe(at(101), &quiet(40)),
            Look::Stop { .. }
        ));
        // A clock skewed into the future never keeps it up beyond now.
        let mut clock = IdleClock::new(Duration::from_secs(60), 5, at(0));
        assert!(matches!(
            clock.observe(at(10), &quiet(10_000)),
            Look::Idle { since, .. } if since == at(10)
        ));
    }

    #[test]
    fn a_busy_kernel_an_ssh_session_or_a_busy_gpu_keeps_it_in_use() {
        let mut clock = IdleClock::new(Duration::from_secs(60), 5, at(0));
        let mut busy = quiet(0);
        busy.jupyter = Some(Ok(JupyterSeen {
            kernels: 2,
            busy_kernels: 2,
            last_activity: Some(at(0)),
        }));
        assert_eq!(
            clock.observe(at(100), &busy),
            Look::InUse(vec![InUse::BusyKernels(2)])
        );
        let mut ssh = quiet(0);
        ssh.ssh_sessions = Some(Ok(1));
        assert_eq!(
            clock.observe(at(200), &ssh),
            Look::InUse(vec![InUse::SshSessions(1)])
        );
        let mut gpu = quiet(0);
        gpu.gpus = Some(Ok(vec![4, 5]));
        assert_eq!(
            clock.observe(at(300), &gpu),
            Look::InUse(vec![InUse::Gpu(1, 5)])
        );
        // Each look in use moved the clock: idle counts from the last one.
        assert!(matches!(
            clock.observe(at(359), &quiet(0)),
            Look::Idle { since, .. } if since == at(300)
        ));
        assert!(matches!(
            clock.observe(at(360), &quiet(0)),
            Look::Stop { .. }
        ));
        assert_eq!(
            InUse::Gpu(1, 5).to_string() + "; " + &InUse::BusyKernels(2).to_string(),
            "GPU 1 is 5 % busy; 2 notebook kernels are busy"
        );
    }

    #[test]
    fn a_probe_that_cannot_tell_counts_as_in_use() {
        let mut clock = IdleClock::new(Duration::from_secs(1), 5, at(0));
        let mut blind = quiet(0);
        blind.jupyter = Some(Err("port 8888 does not answer".into()));
        blind.gpus = Some(Err("no permission".into()));
        let Look::InUse(why) = clock.observe(at(100), &blind) else {
            panic!("a blind look stopped the workstation")
        };
        assert_eq!(
            why.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "JupyterLab cannot be read (port 8888 does not answer)",
                "GPU utilisation cannot be read (no permission)"
            ]
        );
        // Not asked (no Jupyter, no sshd, no GPU library) is not blind.
        let mut clock = IdleClock::new(Duration::from_secs(1), 5, at(0));
        assert!(matches!(
            clock.observe(at(2), &Seen::default()),
            Look::Stop { .. }
        ));
    }

    #[test]
    fn the_gpu_probe_reads_utilisation_through_the_nvml_seam() {
        let mut f = FakeNvml::healthy(2);
        f.gpus[1].utilization = Ok(87);
        let nvml = fake(f);
        assert_eq!(gpu_utilisation(nvml.as_ref()), Ok(vec![0, 87]));
        let mut clock = IdleClock::new(Duration::from_secs(10), 10, at(0));
        let seen = look(&Probes {
            jupyter: None,
            ssh_port: None,
            nvml: Some(nvml.as_ref()),
        });
        assert_eq!(
            clock.observe(at(50), &seen),
            Look::InUse(vec![InUse::Gpu(1, 87)])
        );
        let mut f = FakeNvml::healthy(1);
        f.gpus[0] = FakeGpu {
            utilization: Err(crate::nvml::NvmlErr::GpuLost),
            ..f.gpus[0].clone()
        };
        assert_eq!(
            gpu_utilisation(fake(f).as_ref()),
            Err("GPU 0: the GPU has fallen off the bus or is inaccessible".into())
        );
        assert_eq!(
            gpu_utilisation(fake(FakeNvml::healthy(0)).as_ref()),
            Ok(vec![])
        );
    }

    #[test]
    fn jupyter_s_answers_are_read() {
        let kernels = r#"[{"id":"a","execution_state":"busy","last_activity":"2026-12-04T20:31:02.123456Z"},
            {"id":"b","execution_state":"idle"},{"id":"c","execution_state":"starting"}]"#;
        assert_eq!(parse_kernels(kernels), Ok((3, 1)));
        assert_eq!(parse_kernels("[]"), Ok((0, 0)));
        assert!(parse_kernels("{}").unwrap_err().contains("not a list"));
        let status = r#"{"started":"2026-12-04T20:00:00Z","last_activity":"2026-12-04T20:31:02.123456Z","connections":0,"kernels":1}"#;
        assert_eq!(
            parse_last_activity(status)
                .map(|t| humantime::format_rfc3339_seconds(t.unwrap()).to_string()),
            Ok("2026-12-04T20:31:02Z".to_string())
        );
        assert_eq!(parse_last_activity("{}"), Ok(None));
        assert!(parse_last_activity(r#"{"last_activity":"yesterday"}"#)
            .unwrap_err()
            .contains("is no time"));
    }

    #[test]
    fn sshd_s_established_connections_are_counted_in_proc_net_tcp() {
        // Port 22 = 0x0016: one listening (0A), two established (01), one
        // established elsewhere (8888 = 0x22B8), one closing (06).
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1
   1: 0200A8C0:0016 0100A8C0:D1F2 01 00000000:00000000 02:000A7F6B 00000000  1000        0 2 4
   2: 0200A8C0:0016 0100A8C0:D1F4 01 00000000:00000000 02:000A7F6B 00000000  1000        0 3 4
   3: 0200A8C0:22B8 0100A8C0:D1F6 01 00000000:00000000 02:000A7F6B 00000000  1000        0 4 4
   4: 0200A8C0:0016 0100A8C0:D1F8 06 00000000:00000000 02:000A7F6B 00000000  1000        0 5 4
";
        assert_eq!(established_to(tcp, 22), 2);
        assert_eq!(established_to(tcp, 8888), 1);
        assert_eq!(established_to(tcp, 2222), 0);
        let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF00000200A8C0:0016 0000000000000000FFFF00000100A8C0:C350 01 00000000:00000000 00:00000000 00000000  1000        0 9 1
";
        assert_eq!(established_to(tcp6, 22), 1);
        // This machine's own table parses (whatever it holds).
        assert!(ssh_sessions(1).is_ok());
    }

    #[test]
    fn the_jupyter_probe_asks_with_the_token_and_names_a_refusal() {
        use std::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let mut asked = Vec::new();
            for answer in [
                r#"{"last_activity":"2026-12-04T20:31:02Z"}"#,
                r#"[{"execution_state":"busy"}]"#,
            ] {
                let (mut s, _) = listener.accept().unwrap();
                let mut buf = [0u8; 2048];
                let n = s.read(&mut buf).unwrap();
                asked.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                write!(
                    s,
                    "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{answer}"
                )
                .unwrap();
            }
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 2048];
            let _ = s.read(&mut buf).unwrap();
            write!(s, "HTTP/1.0 403 Forbidden\r\n\r\n").unwrap();
            asked
        });
        let seen = jupyter(port, "t0ken").unwrap();
        assert_eq!((seen.kernels, seen.busy_kernels), (1, 1));
        assert!(seen.last_activity.is_some());
        assert_eq!(
            jupyter(port, "wrong"),
            Err("GET /api/status answered HTTP 403".into())
        );
        let asked = server.join().unwrap();
        assert!(asked[0].starts_with("GET /api/status HTTP/1.0\r\n"));
        assert!(asked[1].starts_with("GET /api/kernels?no_track_activity=1 HTTP/1.0\r\n"));
        assert!(asked
            .iter()
            .all(|a| a.contains("Authorization: token t0ken\r\n")));
    }
}
