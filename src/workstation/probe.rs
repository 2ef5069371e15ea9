//! Whether a workstation's web service answers: one plain HTTP/1.0 `GET`
//! over a TCP connection, retried until a deadline (an image whose
//! entrypoint predates a service comes up healthy without it).
use std::time::{Duration, Instant};

/// Whether `GET path` on host:port answers 200 within a second or two.
pub fn http_ok(host: &str, port: u16, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(addr) = format!("{host}:{port}").parse::<std::net::SocketAddr>() else {
        return false;
    };
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/") && &head[9..12] == b"200"
}

/// Whether `GET path` on `address:port` answers 200 within `within`,
/// asked every half second; an unspecified `address` (`0.0.0.0`, `::`, none)
/// is asked on 127.0.0.1.
pub async fn answers_within(address: &str, port: u16, path: &str, within: Duration) -> bool {
    let host = match address {
        "" | "0.0.0.0" | "::" => "127.0.0.1".to_string(),
        a => a.to_string(),
    };
    let path = path.to_string();
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + within;
        loop {
            if http_ok(&host, port, &path) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    })
    .await
    .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_listener_that_answers_200_answers_and_a_closed_port_does_not() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
        });
        assert!(answers_within("0.0.0.0", port, "/", Duration::from_secs(3)).await);
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dead = closed.local_addr().unwrap().port();
        drop(closed);
        assert!(!answers_within("127.0.0.1", dead, "/", Duration::from_millis(600)).await);
    }
}
