//! Sockets, through libc: the one listener std cannot make, a dual-stack
//! `[::]` socket with `IPV6_V6ONLY` off (rendezvous's rank 0 listens on it
//! when its address is not loopback). Which port, and who connects, belong
//! to the caller. Also this host's name, as the kernel gives it.
use std::net::{Ipv4Addr, TcpListener};

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
        // Backlog 128: SOMAXCONN's traditional value, ample for one rank per GPU.
        if libc::listen(fd, 128) != 0 {
            return fail(fd);
        }
        Ok(TcpListener::from_raw_fd(fd))
    }
}
