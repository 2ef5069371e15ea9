//! Inputs render refuses: bad build options, CA files that are not certificates only,
//! credentials in an index URL, malformed image references.
use super::*;

#[test]
fn bad_build_options_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not-a-cert.txt");
    std::fs::write(&not_pem, "hello").unwrap();
    let cases: [(&[&str], &str); 7] = [
        (
            &["--uid", "abc"],
            "invalid value 'abc' for '--uid <UID>': expected an integer 1000-60000 (0 is root)",
        ),
        (
            &["--uid", "0"],
            "invalid value '0' for '--uid <UID>': expected an integer 1000-60000 (0 is root)",
        ),
        (
            &["--gid", "70000"],
            "invalid value '70000' for '--gid <GID>'",
        ),
        (
            &["--ca-cert", not_pem.to_str().unwrap()],
            "is not a PEM certificate",
        ),
        (
            &["--ca-cert", "/nonexistent/ca.crt"],
            "cannot read --ca-cert /nonexistent/ca.crt",
        ),
        (
            &["--pip-index-url", "ftp://x"],
            "invalid --pip-index-url 'ftp://x'",
        ),
        (
            &["--base-image", "bad image"],
            "invalid --base-image 'bad image'",
        ),
    ];
    for (args, message) in cases {
        let mut all = vec!["render"];
        all.extend_from_slice(args);
        let out = imgctl(&all);
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(message),
            "{args:?}: {stderr}"
        );
        // clap reads --uid/--gid: its one line carries the hint.
        let hinted = stderr.contains("\nhint: ")
            || stderr.lines().next().unwrap().contains("; use your own ");
        assert!(hinted, "{args:?}: no hint: {stderr}");
    }
}

#[test]
fn ca_cert_takes_certificates_only() {
    let dir = tempfile::tempdir().unwrap();
    let cert = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";
    let key = |label: &str| format!("-----BEGIN {label}-----\nMIIBfake\n-----END {label}-----\n");
    let big = dir.path().join("big.crt");
    let mut f = std::fs::File::create(&big).unwrap();
    f.write_all(cert.as_bytes()).unwrap();
    f.write_all(&vec![b'#'; 1024 * 1024]).unwrap();
    let mut cases: Vec<(PathBuf, String)> = Vec::new();
    for (name, text, message) in [
        (
            "with-key.pem",
            format!("{cert}{}", key("PRIVATE KEY")),
            "has a PRIVATE KEY block at line 4: only CERTIFICATE blocks are accepted",
        ),
        (
            "rsa.pem",
            key("RSA PRIVATE KEY"),
            "has a RSA PRIVATE KEY block at line 1",
        ),
        (
            "ec.pem",
            format!("{cert}{}", key("EC PRIVATE KEY")),
            "has a EC PRIVATE KEY block at line 4",
        ),
        (
            "not-base64.pem",
            "-----BEGIN CERTIFICATE-----\n%%%%\n-----END CERTIFICATE-----\n".to_string(),
            "has a CERTIFICATE block at line 1 that is not valid base64",
        ),
        (
            "not-der.pem",
            "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n".to_string(),
            "that is not a DER certificate (starts with byte 0x68",
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        cases.push((path, message.to_string()));
    }
    cases.push((big, "is larger than 1048576 bytes (1 MiB)".to_string()));
    cases.push((
        dir.path().to_path_buf(),
        "is a directory, not a certificate file".to_string(),
    ));
    cases.push((
        "/dev/zero".into(),
        "/dev/zero is a device, not a certificate file".to_string(),
    ));
    for (path, message) in cases {
        let started = Instant::now();
        let (code, stderr) = render_with_ca(&path);
        assert_eq!(code, Some(2), "{}: {stderr}", path.display());
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{}",
            path.display()
        );
        let first = stderr.lines().next().unwrap_or_default();
        assert!(
            first.contains(message.as_str()),
            "{}: {stderr}",
            path.display()
        );
        assert!(stderr.contains("\nhint: "), "{stderr}");
    }
    // A real bundle of many certificates passes.
    let bundle = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if bundle.is_file() {
        let (code, stderr) = render_with_ca(bundle);
        assert_eq!(code, Some(0), "{stderr}");
    }
}

#[test]
fn pip_index_url_with_credentials_is_refused() {
    for url in [
        "https://user:s3cret-pw@mirror.example/simple",
        "https://s3cret-token@mirror.example/simple",
    ] {
        for command in [
            &["render", "--cuda", "12.4", "--pip-index-url", url][..],
            &[
                "build",
                "--cuda",
                "12.4",
                "--dry-run",
                "--pip-index-url",
                url,
            ],
            &["lock", "--cuda", "12.4", "--check", "--pip-index-url", url],
        ] {
            let out = imgctl(command);
            let (stdout, stderr) = texts(&out);
            assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
            assert!(stdout.is_empty(), "{command:?}: {stdout}");
            assert!(!stderr.contains("s3cret"), "{command:?}: {stderr}");
            let first = stderr.lines().next().unwrap_or_default();
            assert_eq!(
                first,
                "error: --pip-index-url 'https://***@mirror.example/simple' contains credentials (user or password before '@'), which would be stored in the image's history and labels",
                "{command:?}"
            );
            assert!(
                stderr.contains("\nhint: ") && stderr.contains("~/.netrc"),
                "{stderr}"
            );
        }
    }
}

#[test]
fn image_references_are_parsed_before_the_engine_sees_them() {
    let grammar = "hint: an image reference is [HOST[:PORT]/]PATH[:TAG][@sha256:<64 hex>]";
    for (args, line) in [
        (
            &["render", "--base-image", "UPPER/Case:@@::"][..],
            "error: invalid --base-image 'UPPER/Case:@@::': the digest '@::' is not sha256:<64 hex digits>",
        ),
        (
            &["render", "--base-image", "UPPER/case:1"][..],
            "error: invalid --base-image 'UPPER/case:1': 'UPPER' is not a lower-case path component [a-z0-9]+([._-][a-z0-9]+)*",
        ),
        (
            &["render", "--base-image", ""][..],
            "error: invalid --base-image '': it is empty",
        ),
        (
            &["verify", "--image", "", "--expect-gpus", "0"][..],
            "error: invalid --image '': it is empty",
        ),
        (
            &["verify", "--image", "UPPER/Case:@@::", "--expect-gpus", "0"][..],
            "error: invalid --image 'UPPER/Case:@@::': the digest '@::' is not sha256:<64 hex digits>",
        ),
        (
            &["build", "--dry-run", "--tag", "me/x:a:b"][..],
            "error: invalid --tag 'me/x:a:b': 'x:a' is not a lower-case path component [a-z0-9]+([._-][a-z0-9]+)*",
        ),
    ] {
        let out = imgctl(args);
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert_eq!(stderr.lines().next(), Some(line), "{args:?}: {stderr}");
        assert!(stderr.contains(grammar), "{args:?}: {stderr}");
    }
    // Registry hosts with ports, digests and docker's separators pass.
    let digest = format!("sha256:{}", "0a".repeat(32));
    for good in [
        "localhost:5000/me/base:1.0".to_string(),
        format!("registry.example.com/a__b/c--d.e:tag_1@{digest}"),
    ] {
        let out = imgctl(&["render", "--cuda", "12.4", "--base-image", &good]);
        assert!(out.status.success(), "{good}: {}", texts(&out).1);
    }
}
