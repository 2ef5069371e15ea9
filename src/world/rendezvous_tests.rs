//! Tests of the rendezvous (`rendezvous.rs`), kept in a file of their own.
use super::*;

#[test]
fn three_ranks_meet_and_get_the_payload() {
    let port = free_port().unwrap();
    let t = Duration::from_secs(20);
    let leaves: Vec<_> = (1..3)
        .map(|r| {
            std::thread::spawn(move || {
                rendezvous(&LaunchInfo::loopback(r, 3, port), || Ok(vec![]), t)
            })
        })
        .collect();
    let root = rendezvous(
        &LaunchInfo::loopback(0, 3, port),
        || Ok(b"session".to_vec()),
        t,
    )
    .unwrap();
    assert!(matches!(root.links, Links::Root(ref v) if v.len() == 2));
    for l in leaves {
        let s = l.join().unwrap().unwrap();
        assert_eq!(s.payload, b"session");
    }
}

#[test]
fn missing_rank_times_out_with_names() {
    let port = free_port().unwrap();
    let e = rendezvous(
        &LaunchInfo::loopback(0, 2, port),
        || Ok(vec![]),
        Duration::from_millis(300),
    )
    .unwrap_err();
    let m = e.to_string();
    assert!(m.contains("1 of 2 ranks arrived"), "{m}");
    assert!(m.contains("missing ranks: 1"), "{m}");
}

#[test]
fn leaf_without_root_times_out() {
    let port = free_port().unwrap();
    let e = rendezvous(
        &LaunchInfo::loopback(1, 2, port),
        || Ok(vec![]),
        Duration::from_millis(500),
    )
    .unwrap_err();
    assert!(e.to_string().contains("could not reach rank 0"), "{e}");
}

#[test]
fn world_size_mismatch_is_reported() {
    let port = free_port().unwrap();
    let t = Duration::from_secs(3);
    let leaf =
        std::thread::spawn(move || rendezvous(&LaunchInfo::loopback(1, 3, port), || Ok(vec![]), t));
    // The leaf is refused at once and says why; rank 0 waits on for the
    // real rank 1, and its timeout names the refused hello.
    let e = rendezvous(&LaunchInfo::loopback(0, 2, port), || Ok(vec![]), t).unwrap_err();
    assert!(
        e.to_string().contains("refused: rank 1 (from 127.0.0.1:"),
        "{e}"
    );
    assert!(e.to_string().contains("WORLD_SIZE=3"), "{e}");
    let e = leaf.join().unwrap().unwrap_err();
    assert!(e.to_string().contains("WORLD_SIZE=3"), "{e}");
}

/// A forged hello (a well-formed one for a rank out of range, another
/// for rank 0) and a dozen idle connections neither end the job nor keep
/// the real rank 1 out (reliability and security III: one forged 20-byte
/// hello aborted the job; 12 idle connections cost 120 s).
#[test]
fn forged_hellos_and_idle_connections_do_not_stop_the_real_rank() {
    let port = free_port().unwrap();
    let t = Duration::from_secs(30);
    let root = std::thread::spawn(move || {
        rendezvous(&LaunchInfo::loopback(0, 2, port), || Ok(b"ok".to_vec()), t)
    });
    let connect = || loop {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let idle: Vec<TcpStream> = (0..12).map(|_| connect()).collect();
    for (rank, world) in [(5, 2), (0, 2), (1, 7)] {
        let mut forged = connect();
        write_hello(&mut forged, rank, world, None).unwrap();
        let reply = read_reply(&mut forged, Instant::now() + t).unwrap();
        assert!(
            matches!(reply, Err((_, ref m)) if !m.is_empty()),
            "{reply:?}"
        );
    }
    let started = Instant::now();
    let leaf = rendezvous(&LaunchInfo::loopback(1, 2, port), || Ok(vec![]), t).unwrap();
    assert_eq!(leaf.payload, b"ok");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let root = root.join().unwrap().unwrap();
    assert!(matches!(root.links, Links::Root(ref v) if v.len() == 1));
    drop(idle);
}

/// A MASTER_ADDR name that resolves to a loopback address binds there,
/// not on every interface (it used to bind all unless a loopback literal).
#[test]
fn a_name_resolving_to_loopback_binds_loopback_only() {
    // A name /etc/hosts maps to 127.x (this machine's hostname here), or localhost.
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let name = hosts
        .lines()
        .filter(|l| l.starts_with("127."))
        .flat_map(|l| l.split_whitespace().skip(1))
        .find(|n| *n != "localhost")
        .unwrap_or("localhost")
        .to_string();
    let mut info = LaunchInfo::loopback(0, 2, 0);
    info.master_addr = name.clone();
    let l = bind_port(&info, 0).unwrap();
    let ip = l.local_addr().unwrap().ip();
    assert!(ip.is_loopback(), "{name} bound {ip}");
}

/// Whether this host has an IPv6 loopback (some containers have none).
fn have_ipv6_loopback() -> bool {
    match TcpListener::bind("[::1]:0") {
        Ok(_) => true,
        Err(e) => {
            eprintln!("SKIPPED: no IPv6 loopback here ({e})");
            false
        }
    }
}

#[test]
fn ranks_meet_over_ipv6_and_print_bracketed_addresses() {
    if !have_ipv6_loopback() {
        return;
    }
    let l = TcpListener::bind("[::1]:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let info = move |r| LaunchInfo {
        master_addr: "::1".into(),
        ..LaunchInfo::loopback(r, 2, port)
    };
    let t = Duration::from_secs(20);
    let leaf = std::thread::spawn(move || rendezvous(&info(1), || Ok(vec![]), t));
    let root = rendezvous(&info(0), || Ok(b"v6".to_vec()), t).unwrap();
    assert_eq!(root.address, format!("[::1]:{port}"));
    let s = leaf.join().unwrap().unwrap();
    assert_eq!(s.payload, b"v6");
    assert_eq!(s.address, format!("[::1]:{port}"));
}

#[test]
fn all_interfaces_take_both_families() {
    let l = bind_all_interfaces(0).unwrap();
    let port = l.local_addr().unwrap().port();
    TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
    if have_ipv6_loopback() {
        assert!(l.local_addr().unwrap().is_ipv6(), "{:?}", l.local_addr());
        TcpStream::connect((std::net::Ipv6Addr::LOCALHOST, port)).unwrap();
    }
    // A taken port is AddrInUse, as for std's bind (the error names MASTER_PORT).
    let e = bind_all_interfaces(port).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrInUse, "{e}");
}

#[test]
fn a_joiner_tries_every_resolved_address() {
    // "localhost" resolves to ::1 and 127.0.0.1 on most hosts; rank 0
    // listens on 127.0.0.1 only, so a joiner stuck on the first address
    // (::1 where it comes first) would never arrive.
    let port = free_port().unwrap();
    let info = move |r| LaunchInfo {
        master_addr: "localhost".into(),
        ..LaunchInfo::loopback(r, 2, port)
    };
    let t = Duration::from_secs(20);
    let leaf = std::thread::spawn(move || rendezvous(&info(1), || Ok(vec![]), t));
    rendezvous(&info(0), || Ok(vec![]), t).unwrap();
    leaf.join().unwrap().unwrap();
}

#[test]
fn ranks_that_came_learn_who_did_not() {
    let port = free_port().unwrap();
    let leaf = std::thread::spawn(move || {
        rendezvous(
            &LaunchInfo::loopback(1, 3, port),
            || Ok(vec![]),
            Duration::from_secs(30),
        )
    });
    let e = rendezvous(
        &LaunchInfo::loopback(0, 3, port),
        || Ok(vec![]),
        Duration::from_secs(2),
    )
    .unwrap_err();
    assert!(e.to_string().contains("missing ranks: 2"), "{e}");
    let e = leaf.join().unwrap().unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains(&format!(
            "rendezvous failed: rank 1 reached rank 0 at 127.0.0.1:{port}, but rank 0 gave up after 2 s: \
             2 of 3 ranks arrived at 127.0.0.1:{port} (missing ranks: 2)"
        )),
        "{m}"
    );
    assert!(
        matches!(
            e.downcast_ref::<RendezvousError>(),
            Some(RendezvousError::RootGaveUp { rank: 1, .. })
        ),
        "{e:?}"
    );
}

#[test]
fn taken_port_is_named() {
    let hold = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = hold.local_addr().unwrap().port();
    let e = rendezvous(
        &LaunchInfo::loopback(0, 2, port),
        || Ok(vec![]),
        Duration::from_secs(1),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("MASTER_PORT {port} is already in use")),
        "{e}"
    );
}
