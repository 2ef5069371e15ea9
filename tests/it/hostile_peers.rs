//! The rendezvous and fleet protocol against peers that lie or stall: a real
//! `imgctl verify --fleet` rank 0 on loopback, and fake ranks written here
//! that speak the wire format (a real hello, then an edited report or a
//! message dripped a byte at a time). Rank 0 must name such a node and go
//! on, within its bound, never crash or wait past it.
#![cfg(feature = "torch")]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use imgctl::verify::fleet::NodeReport;
use imgctl::verify::{Level, Report, Summary};

use crate::common::imgctl_bin;

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A real rank 0 of a world of `world`, on 127.0.0.1:`port`, bound `secs`.
pub fn rank0(port: u16, world: usize, secs: &str) -> Child {
    rank0_with(port, world, secs, &["--json"])
}

/// `imgctl verify --fleet` as rank `rank` of `world` with rank 0 on
/// 127.0.0.1:`port`, bound `secs`, its output piped.
fn fleet_command(rank: usize, world: usize, port: u16, secs: &str) -> Command {
    let mut c = Command::new(imgctl_bin());
    c.args(["verify", "--fleet", "--expect-gpus", "0"])
        .args(["--fleet-timeout", secs, "--link-mib", "1"])
        .env("NO_COLOR", "1")
        .env("RANK", rank.to_string())
        .env("LOCAL_RANK", "0")
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_WORLD_SIZE", "1")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// [`rank0`] with `extra` arguments instead of `--json`.
fn rank0_with(port: u16, world: usize, secs: &str, extra: &[&str]) -> Child {
    fleet_command(0, world, port, secs)
        .args(extra)
        .spawn()
        .unwrap()
}

/// Connects to rank 0 (retrying while it starts).
pub fn connect(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return s,
            Err(e) if Instant::now() > deadline => panic!("rank 0 never listened: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The 20 bytes of a hello: magic, protocol 1, rank, world size.
pub fn hello(rank: u32, world: u32) -> Vec<u8> {
    let mut b = b"IMGCTLRV".to_vec();
    for v in [1u32, rank, world] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b
}

/// Reads rank 0's answer to a hello: (status, body).
fn read_reply(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut head = [0u8; 5];
    s.read_exact(&mut head).unwrap();
    let mut body = vec![0u8; u32::from_le_bytes(head[1..5].try_into().unwrap()) as usize];
    s.read_exact(&mut body).unwrap();
    (head[0], body)
}

/// A framed node report claiming `rank`.
fn report_frame(rank: usize) -> Vec<u8> {
    report_frame_from(rank, "forged")
}

/// A framed node report claiming `rank`, from host `host`.
fn report_frame_from(rank: usize, host: &str) -> Vec<u8> {
    let report = NodeReport {
        rank,
        host: host.into(),
        node: None,
        software: BTreeMap::new(),
        topology: None,
        probe_port: None,
        report: Report {
            schema_version: 1,
            imgctl_version: env!("CARGO_PKG_VERSION").into(),
            context: "host".into(),
            image: None,
            level: Level::Quick,
            expect_gpus: "0".into(),
            gpu_api: None,
            results: Vec::new(),
            summary: Summary::default(),
            passed: true,
        },
    };
    let body = serde_json::to_vec(&report).unwrap();
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// Waits for rank 0; (exit code, stdout JSON, stderr).
pub fn finish(child: Child, within: Duration) -> (Option<i32>, serde_json::Value, String) {
    let start = Instant::now();
    let out = child.wait_with_output().unwrap();
    let took = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        took < within,
        "rank 0 took {took:?} (bound {within:?}): {stderr}"
    );
    let json = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code(), json, stderr)
}

/// P6: a peer that joined as rank 1 and then reports as another rank (7,
/// or 0) is a failed node with the reason; rank 0 does not crash (it
/// panicked with exit 101).
#[test]
fn a_report_for_another_rank_fails_that_node_without_a_crash() {
    for claimed in [7usize, 0] {
        let port = free_port();
        let child = rank0(port, 2, "10");
        let mut s = connect(port);
        s.write_all(&hello(1, 2)).unwrap();
        let (status, _) = read_reply(&mut s);
        assert_eq!(status, 0, "rank 0 refused the hello");
        s.write_all(&report_frame(claimed)).unwrap();
        let (code, json, stderr) = finish(child, Duration::from_secs(60));
        assert_eq!(code, Some(1), "claimed rank {claimed}: {stderr}");
        let node = &json["nodes"][1];
        assert_eq!(node["rank"], 1, "{json}");
        assert_eq!(node["state"], "lost", "{json}");
        let reason = node["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(&format!(
                "joined as rank 1, then sent a report for rank {claimed}"
            )),
            "{reason}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// P7: a report dripped a byte at a time holds rank 0 no longer than its
/// bound (the bound was on each read, so 1 byte every 0.5 s of a report of
/// hundreds of bytes held rank 0 for minutes).
#[test]
fn a_dripped_report_ends_at_the_fleet_timeout() {
    let port = free_port();
    let child = rank0(port, 2, "3");
    let mut s = connect(port);
    s.write_all(&hello(1, 2)).unwrap();
    let (status, _) = read_reply(&mut s);
    assert_eq!(status, 0);
    let frame = report_frame(1);
    let drip = std::thread::spawn(move || {
        // Bounded: at most 60 s of dripping, and it stops when rank 0 hangs up.
        for b in frame.iter().take(120) {
            if s.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    let (code, json, stderr) = finish(child, Duration::from_secs(30));
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(json["nodes"][1]["state"], "lost", "{json}");
    let reason = json["nodes"][1]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("sent no report in time"), "{reason}");
    drip.join().unwrap();
}

/// P8: 64 connections that each drip a byte every 7 s filled every slot
/// for hellos, and the real rank 1 was turned away ("rank 0 closed the
/// connection"). Now the oldest waiting connection makes room, and a
/// hello must be whole within 10 s: the real rank joins and the fleet
/// passes.
#[test]
fn drippers_filling_the_hello_slots_do_not_keep_the_real_rank_out() {
    let port = free_port();
    let root = rank0(port, 2, "30");
    let mut drippers: Vec<TcpStream> = (0..64).map(|_| connect(port)).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let drip = std::thread::spawn(move || {
        let start = Instant::now();
        let magic = b"IMGCTLRV";
        let mut i = 0;
        // Bounded: 90 s at most, or until the test is done.
        while !flag.load(std::sync::atomic::Ordering::SeqCst)
            && start.elapsed() < Duration::from_secs(90)
        {
            for d in drippers.iter_mut() {
                let _ = d.write_all(&magic[i % 8..i % 8 + 1]);
            }
            i += 1;
            for _ in 0..70 {
                if flag.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    });
    // Rank 0 has accepted them all (a real rank arriving now finds the slots full).
    std::thread::sleep(Duration::from_secs(1));
    let leaf = fleet_command(1, 2, port, "30").spawn().unwrap();
    let (code, json, stderr) = finish(root, Duration::from_secs(120));
    let leaf = leaf.wait_with_output().unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    drip.join().unwrap();
    let leaf_err = String::from_utf8_lossy(&leaf.stderr);
    assert_eq!(leaf.status.code(), Some(0), "rank 1: {leaf_err}");
    assert_eq!(code, Some(0), "rank 0: {stderr}");
    assert_eq!(json["nodes"][1]["state"], "reported", "{json}");
}

/// The fleet verdict's tag on the wire (`verify/fleet/mod.rs`).
const VERDICT: u8 = 2;

/// A fake rank 0 of 20 lines: takes rank 1's hello and report, then tells
/// it "the fleet passed". Returns rank 1's (exit code, stderr).
fn fake_rank0_says_passed(token: Option<&str>) -> (Option<i32>, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut leaf = fleet_command(1, 2, port, "20");
    if let Some(t) = token {
        leaf.env("IMGCTL_RENDEZVOUS_TOKEN", t);
    }
    let leaf = leaf.spawn().unwrap();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut head = [0u8; 20];
        s.read_exact(&mut head).unwrap();
        if head[8] == 2 {
            let mut proof = [0u8; 48];
            s.read_exact(&mut proof).unwrap();
        }
        s.write_all(&[0, 0, 0, 0, 0]).unwrap(); // a session, no payload
        let mut len = [0u8; 4];
        if s.read_exact(&mut len).is_ok() {
            let mut report = vec![0u8; u32::from_le_bytes(len) as usize];
            let _ = s.read_exact(&mut report);
            let _ = s.write_all(&[VERDICT, 1]);
        }
        // Hold the connection until rank 1 has read what it was told.
        let _ = s.read(&mut [0u8; 1]);
    });
    let (code, _, stderr) = finish(leaf, Duration::from_secs(90));
    fake.join().unwrap();
    (code, stderr)
}

/// The doubt of #40: without a token, a fake rank 0 tells a real rank 1
/// "the fleet passed" and is believed; with IMGCTL_RENDEZVOUS_TOKEN set on
/// rank 1, the fake cannot prove the token and rank 1 says so (exit 2).
#[test]
fn a_fake_rank_0_is_believed_without_a_token_and_refused_with_one() {
    let (code, stderr) = fake_rank0_says_passed(None);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("the fleet passed"), "{stderr}");
    let (code, stderr) = fake_rank0_says_passed(Some("fleet-s3cret"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("could not prove the rendezvous token"),
        "{stderr}"
    );
    assert!(stderr.contains("IMGCTL_RENDEZVOUS_TOKEN"), "{stderr}");
    assert!(!stderr.contains("fleet-s3cret"), "{stderr}");
}

/// A fleet whose ranks share a token passes as without one.
#[test]
fn a_fleet_sharing_a_token_passes() {
    let port = free_port();
    let spawn_rank = |rank: usize| {
        fleet_command(rank, 2, port, "30")
            .arg("--json")
            .env("IMGCTL_RENDEZVOUS_TOKEN", "shared")
            .spawn()
            .unwrap()
    };
    let root = spawn_rank(0);
    let leaf = spawn_rank(1);
    let (code, json, stderr) = finish(root, Duration::from_secs(120));
    let leaf = leaf.wait_with_output().unwrap();
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(json["nodes"][1]["state"], "reported", "{json}");
    assert_eq!(
        leaf.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&leaf.stderr)
    );
}

/// A peer's host name is its own words: terminal escapes and a line break
/// that would forge a row of rank 0's table are shown escaped.
#[test]
fn a_peers_escapes_are_shown_escaped_in_the_fleet_table() {
    let port = free_port();
    let child = rank0_with(port, 2, "10", &[]);
    let mut s = connect(port);
    s.write_all(&hello(1, 2)).unwrap();
    let (status, _) = read_reply(&mut s);
    assert_eq!(status, 0);
    let host = "\x1b]0;pwned\x07evil\x1b[2J\r\n|    9 | forged | ok |";
    s.write_all(&report_frame_from(1, host)).unwrap();
    let (_, _, stderr) = finish(child, Duration::from_secs(60));
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
    assert!(!stderr.contains("\n|    9 |"), "a forged row:\n{stderr}");
    assert!(stderr.contains("evil"), "{stderr}");
}
