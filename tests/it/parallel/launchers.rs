//! Rendezvous and launchers: torchrun's agent store, waiting ranks told who is
//! missing, IPv6, a taken port, and the launcher examples.
use super::*;

#[test]
fn rendezvous_times_out_naming_the_missing_ranks() {
    let port = free_port().to_string();
    let o = run(cmd(&[
        "train-demo",
        "--preset",
        "tiny",
        "--rendezvous-timeout",
        "1",
    ])
    .env("RANK", "0")
    .env("WORLD_SIZE", "2")
    .env("MASTER_ADDR", "127.0.0.1")
    .env("MASTER_PORT", &port));
    let (_, err) = texts(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "rendezvous timed out after 1 s: 1 of 2 ranks arrived at 127.0.0.1:{port} (missing ranks: 1)"
        )),
        "{err}"
    );
    assert!(err.contains("hint: "), "{err}");
    // A non-zero rank with nobody at MASTER_PORT, timeout from the environment.
    let o = run(cmd(&["train-demo", "--preset", "tiny"])
        .env("RANK", "1")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", &port)
        .env("IMGCTL_RENDEZVOUS_TIMEOUT", "1"));
    let (_, err) = texts(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("rendezvous timed out after 1 s: rank 1 could not reach rank 0"),
        "{err}"
    );
}

/// The real torchrun of the set-up venv (scripts/setup.sh installs torch
/// there) launches two CPU ranks: its elastic agent holds MASTER_PORT with
/// its own c10d TCPStore, so rank 0 must publish a port of its own there.
#[test]
fn torchrun_launches_two_cpu_ranks_through_its_agent_store() {
    let Some(torchrun) = torchrun_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let hashes = dir.path().join("hashes");
    std::fs::create_dir_all(&hashes).unwrap();
    let mut c = Command::new(&torchrun);
    c.args(["--standalone", "--nproc-per-node=2", "--no-python"])
        .arg(imgctl_bin())
        .args(small_train_args(dir.path(), "run", "2"))
        .env("NO_COLOR", "1")
        .env("OMP_NUM_THREADS", "1")
        .env("IMGCTL_PARAM_HASH_DIR", &hashes)
        .env("IMGCTL_RENDEZVOUS_TIMEOUT", "120");
    for k in [
        "RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "IMGCTL_CPU_RANKS",
    ] {
        c.env_remove(k);
    }
    let o = run(&mut c);
    let (out, err) = texts(&o);
    assert!(o.status.success(), "torchrun failed:\n{out}\n{err}");
    // Rank 0 serves at the address it reached torchrun's store from (the
    // loopback here, `--standalone`), on a port of its own.
    let at = err
        .lines()
        .find_map(|l| l.strip_prefix("data parallel: 2 ranks, cpu backend, rendezvous at "))
        .unwrap_or_else(|| panic!("no rendezvous line:\n{err}"));
    let at: std::net::SocketAddr = at.trim().parse().unwrap_or_else(|e| panic!("{at}: {e}"));
    assert!(at.ip().is_loopback(), "{at}");
    assert!(!err.contains("already in use"), "{err}");
    // Rank 0's summary names the all-reduce.
    assert!(err.contains("gradient all-reduce: "), "{err}");
    assert!(err.contains(", overlapped with backward ("), "{err}");
    assert!(!err.contains(" 1 buckets"), "{err}");
    assert_ranks_agree(&hashes, 2, &err);
    let metrics = std::fs::read_to_string(dir.path().join("run/metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 2, "only rank 0 writes: {metrics}");
}

/// imgctl's TCPStore client against PyTorch's own TCPStore server: what one
/// writes, the other reads (keys, framing, the `/` key prefix), and a wait
/// for a key nobody writes ends at its deadline.
#[test]
fn the_store_client_speaks_pytorchs_tcpstore_protocol() {
    use imgctl::world::tcpstore::StoreClient;
    let script = "import datetime, sys, torch.distributed as d\n\
                  s = d.TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False, \
                  timeout=datetime.timedelta(seconds=60))\n\
                  s.set('from_python', b'hello')\n\
                  print(s.port, flush=True)\n\
                  print(s.get('imgctl/run/0/rendezvous_address').decode(), flush=True)\n";
    let mut py = Command::new(crate::common::venv_python())
        .args(["-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(py.stdout.take().unwrap()).lines();
    let port: u16 = lines.next().unwrap().unwrap().trim().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut c = StoreClient::connect("127.0.0.1", port, deadline).unwrap();
    assert_eq!(
        c.wait_get("from_python", deadline).unwrap().as_deref(),
        Some(&b"hello"[..])
    );
    let soon = Instant::now() + Duration::from_millis(300);
    assert_eq!(c.wait_get("nobody/writes/this", soon).unwrap(), None);
    // A fresh connection (the one above gave up in the middle of a WAIT).
    let mut c = StoreClient::connect("127.0.0.1", port, deadline).unwrap();
    c.set("imgctl/run/0/rendezvous_address", b"127.0.0.1:29601")
        .unwrap();
    assert_eq!(lines.next().unwrap().unwrap().trim(), "127.0.0.1:29601");
    assert!(py.wait().unwrap().success());
}

/// Under torchrun's agent store, a rank whose rank 0 never publishes its
/// port gives up at its deadline, naming the key and the store it waited on.
#[test]
fn a_rank_waiting_on_the_agent_store_names_what_it_waited_for() {
    let script = "import datetime, time, torch.distributed as d\n\
                  s = d.TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False, \
                  timeout=datetime.timedelta(seconds=60))\n\
                  print(s.port, flush=True)\n\
                  time.sleep(60)\n";
    let mut py = Command::new(crate::common::venv_python())
        .args(["-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(py.stdout.take().unwrap()).lines();
    let port = lines.next().unwrap().unwrap().trim().to_string();
    let o = run(cmd(&["train-demo", "--preset", "tiny", "--device", "cpu"])
        .env("RANK", "1")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", &port)
        .env("TORCHELASTIC_USE_AGENT_STORE", "True")
        .env("TORCHELASTIC_RUN_ID", "job7")
        .env("TORCHELASTIC_RESTART_COUNT", "2")
        .env("IMGCTL_RENDEZVOUS_TIMEOUT", "1"));
    let _ = py.kill();
    let _ = py.wait();
    let (_, err) = texts(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "error: rendezvous timed out after 1 s: rank 1 waited for rank 0 to publish its \
             rendezvous address under key \"imgctl/job7/2/rendezvous_address\" in torchrun's agent \
             store at 127.0.0.1:{port}"
        )),
        "{err}"
    );
}

/// A rank that arrived is told which rank rank 0 gave up on, not that the
/// connection closed.
#[test]
fn a_rank_that_arrived_learns_which_rank_did_not() {
    let port = free_port().to_string();
    let rank = |r: &str, timeout: &str| {
        cmd(&["train-demo", "--preset", "tiny", "--device", "cpu"])
            .env("RANK", r)
            .env("WORLD_SIZE", "3")
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", &port)
            .env("IMGCTL_RENDEZVOUS_TIMEOUT", timeout)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let root = rank("0", "3");
    let one = rank("1", "60");
    let o1 = one.wait_with_output().unwrap();
    let o0 = root.wait_with_output().unwrap();
    let (_, err) = texts(&o1);
    assert_eq!(o1.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "error: rendezvous failed: rank 1 reached rank 0 at 127.0.0.1:{port}, \
             but rank 0 gave up after 3 s: 2 of 3 ranks arrived at 127.0.0.1:{port} (missing ranks: 2)"
        )),
        "{err}"
    );
    assert!(!err.contains("failed to fill whole buffer"), "{err}");
    assert_eq!(o0.status.code(), Some(1), "{}", texts(&o0).1);
}

/// Two CPU ranks meet over IPv6 (MASTER_ADDR=::1) and train in agreement.
#[test]
fn two_ranks_train_over_ipv6() {
    if let Err(e) = TcpListener::bind("[::1]:0") {
        eprintln!("SKIPPED: no IPv6 loopback here ({e})");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hashes = dir.path().join("hashes");
    std::fs::create_dir_all(&hashes).unwrap();
    let port = TcpListener::bind("[::1]:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let args = small_train_args(dir.path(), "v6", "1");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let spawn = |r: &str| {
        cmd(&args)
            .env("RANK", r)
            .env("WORLD_SIZE", "2")
            .env("MASTER_ADDR", "::1")
            .env("MASTER_PORT", &port)
            .env("IMGCTL_PARAM_HASH_DIR", &hashes)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("0"), spawn("1"));
    let (o0, o1) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let err = format!("{}\n{}", texts(&o0).1, texts(&o1).1);
    assert!(o0.status.success() && o1.status.success(), "{err}");
    assert!(
        err.contains(&format!("rendezvous at [::1]:{port}")),
        "{err}"
    );
    assert_ranks_agree(&hashes, 1, &err);
}

#[test]
fn a_taken_master_port_is_named() {
    let hold = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hold.local_addr().unwrap().port().to_string();
    let o = run(cmd(&["train-demo", "--preset", "tiny"])
        .env("RANK", "0")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", &port));
    let (_, err) = texts(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("error: MASTER_PORT {port} is already in use")),
        "{err}"
    );
}

/// The `imgctl train-demo …` command lines of the examples parse with imgctl's own CLI.
#[test]
fn the_launcher_examples_run_valid_imgctl_commands() {
    use clap::Parser;
    let root = crate::common::repo_root();
    let manifest = std::fs::read_to_string(root.join("examples/k8s-pytorchjob.yaml")).unwrap();
    let mut pods = 0;
    for doc in serde_yaml::Deserializer::from_str(&manifest) {
        let v = serde_yaml::Value::deserialize(doc).unwrap();
        if v["kind"] != "PyTorchJob" {
            continue;
        }
        for role in ["Master", "Worker"] {
            let spec = &v["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"];
            let c = &spec["containers"][0];
            assert_eq!(c["name"], "pytorch", "{role}: the operator needs this name");
            assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], 1, "{role}");
            // Kubernetes' restricted profile, with a read-only root file system
            // and writable /tmp and HOME (what the image's user writes).
            assert_eq!(spec["securityContext"]["runAsNonRoot"], true, "{role}");
            assert_eq!(spec["securityContext"]["runAsUser"], 1000, "{role}");
            let sec = &c["securityContext"];
            assert_eq!(sec["allowPrivilegeEscalation"], false, "{role}");
            assert_eq!(sec["readOnlyRootFilesystem"], true, "{role}");
            assert_eq!(sec["capabilities"]["drop"][0], "ALL", "{role}");
            let mounts: Vec<&str> = c["volumeMounts"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|m| m["mountPath"].as_str().unwrap())
                .collect();
            for path in ["/tmp", "/home/dev", "/out"] {
                assert!(mounts.contains(&path), "{role}: {path} is not mounted");
            }
            let args: Vec<String> = c["args"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect();
            assert_eq!(&args[..2], ["imgctl", "train-demo"], "{role}");
            imgctl::cli::Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{role}: {e}"));
            pods += 1;
        }
    }
    assert_eq!(pods, 2);
    // The SLURM script: join the continuation lines of the srun command.
    let script = std::fs::read_to_string(root.join("examples/slurm-two-node.sbatch")).unwrap();
    let joined = script.replace("\\\n", " ");
    let line = joined
        .lines()
        .find(|l| l.trim_start().starts_with("srun ") && l.contains("imgctl train-demo"))
        .expect("an srun … imgctl train-demo line");
    // The training flags are the script's default `train_args=(…)`, and in
    // the container the output directory is /out.
    let defaults = script
        .lines()
        .find_map(|l| l.strip_prefix("train_args=("))
        .and_then(|l| l.strip_suffix(')'))
        .expect("a train_args=(…) line");
    let line = line
        .replace("\"${train_args[@]}\"", defaults)
        .replace("\"$out\"", "/out");
    // The command ends at the shell's `|| status=$?` (the step retry).
    let words: Vec<&str> = line
        .split_whitespace()
        .take_while(|w| !matches!(*w, "||" | "&&" | ";" | "|"))
        .collect();
    let at = words.iter().position(|w| *w == "imgctl").unwrap();
    imgctl::cli::Cli::try_parse_from(&words[at..]).unwrap_or_else(|e| panic!("sbatch: {e}"));
    assert!(script.contains("#SBATCH --nodes=2"));
    // All GPUs of a node visible to its tasks (NCCL's P2P needs them), the
    // rank's own picked from SLURM_LOCALID; a pyxis image URI (`registry#image`).
    assert!(script.contains("#SBATCH --gpus-per-node=8"));
    assert!(!script.contains("#SBATCH --gpus-per-task"));
    assert!(script.contains("IMAGE='registry.example.com#imgctl:cu124'"));
    assert!(!script.contains("SLURM_LAUNCH_NODE_IPADDR"));
    // Both restart: the first start begins the run, a restart continues it.
    assert!(line.contains("--resume auto"), "{line}");
    assert_eq!(manifest.matches("\"--resume\", \"auto\"").count(), 2);
}
