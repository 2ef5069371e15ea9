//! Sockets, through libc: the one listener std cannot make, a dual-stack
//! `[::]` socket with `IPV6_V6ONLY` off (rendezvous's rank 0 listens on it
//! when its address is not loopback). Which port, and who connects, belong
//! to the caller. Also this host's name, as the kernel gives it, the
//! read of a whole message against one deadline, and [`poll_readable`]
//! (one thread watching many sockets: the heartbeat of `world::heartbeat`).
use std::io::Read;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Instant;

/// Fills `buf` from `stream` before `deadline`, whatever the pace of the
/// bytes: each `read` waits only for what is left of the deadline, so a peer
/// that drips a byte a second cannot stretch a bounded wait (a read timeout
/// alone bounds each read, not the message). Past the deadline: `TimedOut`.
pub fn read_exact_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    let mut filled = 0;
    while filled < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::new(
                ErrorKind::TimedOut,
                "the message did not arrive in time",
            ));
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => {
                return Err(Error::new(
                    ErrorKind::UnexpectedEof,
                    "the connection closed mid-message",
                ))
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(Error::new(
                    ErrorKind::TimedOut,
                    "the message did not arrive in time",
                ))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Waits up to `timeout` until any of `fds` has something to read (data,
/// a closed connection, an error, a pending connection on a listener);
/// returns, per descriptor, whether it has. An interrupted wait returns
/// all `false` (the caller loops anyway).
pub fn poll_readable(
    fds: &[std::os::fd::RawFd],
    timeout: std::time::Duration,
) -> std::io::Result<Vec<bool>> {
    let mut polls: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `polls` is a live array of `polls.len()` pollfd entries that
    // the kernel only writes `revents` of; the descriptors are the caller's.
    let n = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(e);
    }
    Ok(polls
        .iter()
        .map(|p| p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
        .collect())
}

/// This host's name (`/proc/sys/kernel/hostname`), `localhost` when unreadable.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Listens on `[::]:port` with `IPV6_V6ONLY` off (IPv4 peers arrive as
/// `::ffff:a.b.c.d`), whatever `net.ipv6.bindv6only` says; falls back to
/// `0.0.0.0:port` when the host has no IPv6.
pub fn bind_all_interfaces(port: u16) -> std::io::Result<TcpListener> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket syscalls on a descriptor this function owns; it is
    // closed on every error path and handed to TcpListener otherwise.
    unsafe {
        let fd = libc::socket(libc::AF_INET6, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAFNOSUPPORT) | Some(libc::EPROTONOSUPPORT) => {
                    TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))
                }
                _ => Err(e),
            };
        }
        let fail = |fd: libc::c_int| {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            Err(e)
        };
        let off: libc::c_int = 0;
        let on: libc::c_int = 1;
        let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SO_REUSEADDR as std's TcpListener::bind sets it on Unix: a port in
        // TIME_WAIT from a previous run is free to bind.
        if libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            &on as *const _ as *const libc::c_void,
            len,
        ) != 0
            || libc::setsockopt(
                fd,
                libc::IPPROTO_IPV6,
                libc::IPV6_V6ONLY,
                &off as *const _ as *const libc::c_void,
                len,
            ) != 0
        {
            return fail(fd);
        }
        let mut addr: libc::sockaddr_in6 = std::mem::zeroed();
        addr.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        addr.sin6_port = port.to_be();
        // sin6_addr zeroed: in6addr_any.
        if libc::bind(
            fd,
            &addr as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
        ) != 0
        {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            // An IPv6 stack without any IPv6 address (disabled by sysctl).
            if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) {
                return TcpListener::bind((Ipv4Addr::UNSPECIFIED, port));
            }
            return Err(e);
        }
        // Backlog: as many connections as the kernel lets wait
        // (net.core.somaxconn, 4096 on current kernels): a fleet of
        // thousands of ranks joins at once ([`widen_backlog`]).
        if libc::listen(fd, BACKLOG) != 0 {
            return fail(fd);
        }
        Ok(TcpListener::from_raw_fd(fd))
    }
}

/// The backlog rank 0's listener asks for; the kernel caps it at
/// `net.core.somaxconn`.
const BACKLOG: libc::c_int = 4096;

/// Asks for a longer queue of connections waiting to be accepted on `l`
/// (std's bind asks for 128; 1,024 ranks joining at once overflow it, and
/// each SYN dropped waits 1, 3, 7 s … for its retry). Best effort: on
/// failure the queue stays as it was.
pub fn widen_backlog(l: &TcpListener) {
    use std::os::fd::AsRawFd;
    // SAFETY: listen on a descriptor `l` owns and keeps open; calling it
    // again on a listening socket only changes its backlog.
    unsafe {
        libc::listen(l.as_raw_fd(), BACKLOG);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    /// A connected pair on loopback.
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn a_dripped_message_ends_at_the_deadline_not_at_its_last_byte() {
        let (mut writer, mut reader) = pair();
        let drip = std::thread::spawn(move || {
            for _ in 0..20 {
                if writer.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let start = Instant::now();
        let mut buf = [0u8; 20];
        let e =
            read_exact_by(&mut reader, &mut buf, start + Duration::from_millis(350)).unwrap_err();
        let took = start.elapsed();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(took < Duration::from_millis(900), "{took:?}");
        drop(reader);
        drip.join().unwrap();
    }

    #[test]
    fn a_whole_message_in_time_is_read_and_a_closed_one_is_eof() {
        let (mut writer, mut reader) = pair();
        writer.write_all(b"hello").unwrap();
        let mut buf = [0u8; 5];
        read_exact_by(
            &mut reader,
            &mut buf,
            Instant::now() + Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(&buf, b"hello");
        writer.write_all(b"he").unwrap();
        drop(writer);
        let e = read_exact_by(
            &mut reader,
            &mut buf,
            Instant::now() + Duration::from_secs(5),
        )
        .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
