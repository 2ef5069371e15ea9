//! Every environment variable imgctl reads, declared once, and the reading
//! of a duration from one ([`seconds`], whose error is an [`EnvError`];
//! `commands/` gives it its exit status and hint).

/// Docker engine address (`unix:///var/run/docker.sock`, `tcp://host:2375`).
pub const DOCKER_HOST: &str = "DOCKER_HOST";
/// Pins the Engine API version the client speaks (`1.41`), as for the docker
/// CLI; without it the version is negotiated.
pub const DOCKER_API_VERSION: &str = "DOCKER_API_VERSION";
/// `1` or `0`: the docker CLI's switch between BuildKit and the classic
/// builder; `imgctl build --builder auto` honours it.
pub const DOCKER_BUILDKIT: &str = "DOCKER_BUILDKIT";
/// Directory holding the docker client `config.json` (registry credentials,
/// `currentContext`) and its context store (`contexts/`).
pub const DOCKER_CONFIG: &str = "DOCKER_CONFIG";
/// The docker context to use (a name in the context store, or `default`);
/// `DOCKER_HOST` beats it, as in the docker CLI.
pub const DOCKER_CONTEXT: &str = "DOCKER_CONTEXT";
/// Set (non-empty): the docker CLI talks TLS to `DOCKER_HOST`; imgctl refuses
/// such an address instead of talking plain HTTP to it.
pub const DOCKER_TLS_VERIFY: &str = "DOCKER_TLS_VERIFY";
/// The user's runtime folder (`/run/user/UID`): rootless Podman's API socket
/// is `podman/podman.sock` in it.
pub const XDG_RUNTIME_DIR: &str = "XDG_RUNTIME_DIR";
/// The CDI kind GPUs are named by in a CDI device request (default
/// `nvidia.com/gpu`; another vendor's, or a test's fake one).
pub const IMGCTL_CDI_KIND: &str = "IMGCTL_CDI_KIND";
/// Set by Jupyter in a kernel's environment (jupyter_client), so inherited
/// by `!imgctl …` in a notebook cell: output goes to a notebook, whose
/// output area understands `\r` but not the terminal's line erase, and is
/// far wider than the 80 columns of the pty ipykernel runs commands in.
pub const JPY_PARENT_PID: &str = "JPY_PARENT_PID";
/// Disables colour when set to any value (<https://no-color.org>).
pub const NO_COLOR: &str = "NO_COLOR";
/// Global rank of a worker (torchrun).
pub const RANK: &str = "RANK";
/// Rank of a worker on its node (torchrun).
pub const LOCAL_RANK: &str = "LOCAL_RANK";
/// Number of workers in the job (torchrun).
pub const WORLD_SIZE: &str = "WORLD_SIZE";
/// Number of workers on this node (torchrun).
pub const LOCAL_WORLD_SIZE: &str = "LOCAL_WORLD_SIZE";
/// Host of rank 0's rendezvous server (torchrun).
pub const MASTER_ADDR: &str = "MASTER_ADDR";
/// Port of rank 0's rendezvous server (torchrun).
pub const MASTER_PORT: &str = "MASTER_PORT";
/// Global rank under SLURM.
pub const SLURM_PROCID: &str = "SLURM_PROCID";
/// Node-local rank under SLURM.
pub const SLURM_LOCALID: &str = "SLURM_LOCALID";
/// Number of tasks under SLURM.
pub const SLURM_NTASKS: &str = "SLURM_NTASKS";
/// Tasks on this node under SLURM.
pub const SLURM_NTASKS_PER_NODE: &str = "SLURM_NTASKS_PER_NODE";
/// `True` when torchrun's elastic agent holds its c10d TCPStore at
/// `MASTER_ADDR:MASTER_PORT` and lends it to the workers (torch 2.7
/// torch/distributed/elastic/agent/server/local_elastic_agent.py).
pub const TORCHELASTIC_USE_AGENT_STORE: &str = "TORCHELASTIC_USE_AGENT_STORE";
/// torchrun's job id (`--rdzv-id`, a fresh UUID with `--standalone`).
pub const TORCHELASTIC_RUN_ID: &str = "TORCHELASTIC_RUN_ID";
/// The named pipe of torchrun's worker watchdog (set by its agent when the
/// agent runs with `TORCHELASTIC_ENABLE_FILE_TIMER=1`): a worker whose timer
/// there expires is SIGKILLed, and so is the agent itself.
pub const TORCHELASTIC_TIMER_FILE: &str = "TORCHELASTIC_TIMER_FILE";
/// How many times torchrun restarted the workers of this job (0 at first).
pub const TORCHELASTIC_RESTART_COUNT: &str = "TORCHELASTIC_RESTART_COUNT";
/// The rendezvous's shared secret: set on every rank, each proves it holds
/// it (HMAC-SHA256) on the hello, rank 0's answer and the fleet verdict.
pub const IMGCTL_RENDEZVOUS_TOKEN: &str = "IMGCTL_RENDEZVOUS_TOKEN";
/// A file whose first line is the rendezvous token (instead of
/// `IMGCTL_RENDEZVOUS_TOKEN`, which other users may read in `/proc`).
pub const IMGCTL_RENDEZVOUS_TOKEN_FILE: &str = "IMGCTL_RENDEZVOUS_TOKEN_FILE";
/// The passphrase of an encrypted signing key: `key generate` encrypts the
/// new private key with it, signing decrypts with it. Read from the
/// environment only (a flag's value would show in `ps`), never printed.
pub const IMGCTL_KEY_PASSPHRASE: &str = "IMGCTL_KEY_PASSPHRASE";
/// The private key `build` signs its attestations with (instead of
/// `--sign-key`).
pub const IMGCTL_SIGN_KEY: &str = "IMGCTL_SIGN_KEY";
/// Rendezvous timeout in seconds (also `--rendezvous-timeout`).
pub const IMGCTL_RENDEZVOUS_TIMEOUT: &str = "IMGCTL_RENDEZVOUS_TIMEOUT";
/// GPU visibility as set by the container runtime or the user.
pub const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";
/// Pins (JSON) that `imgctl verify` checks torch and its CUDA libraries
/// against; `verify --image` sets it inside the container from the image labels.
pub const IMGCTL_VERIFY_PINS: &str = "IMGCTL_VERIFY_PINS";
/// `verify --expect-gpus`'s default (`N` or `any`): `imgctl up` sets it to
/// the GPUs the workstation got, so a plain `imgctl verify` inside agrees
/// with `up`'s own quick verify (no GPU: `0`, not "no NVIDIA driver").
pub const IMGCTL_EXPECT_GPUS: &str = "IMGCTL_EXPECT_GPUS";
/// CUDA device enumeration order; verify sets `PCI_BUS_ID` when unset so CUDA
/// ordinals follow NVML's (PCI) order.
pub const CUDA_DEVICE_ORDER: &str = "CUDA_DEVICE_ORDER";
/// Kineto's (libtorch's profiler's) log threshold; a CPU profile sets `5`
/// when unset, which silences Kineto's complaint that it found no CUDA device.
pub const KINETO_LOG_LEVEL: &str = "KINETO_LOG_LEVEL";
/// Read by libtorch, not set by imgctl: `1` makes fp32 matmuls use TF32
/// (ATen/Context.h; NVIDIA's NGC containers set it). verify's fp32 matmul
/// check then judges against TF32's error bound.
pub const TORCH_ALLOW_TF32_CUBLAS_OVERRIDE: &str = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE";
/// Unix time to use as the image's `org.opencontainers.image.created` label
/// (<https://reproducible-builds.org/specs/source-date-epoch/>).
pub const SOURCE_DATE_EPOCH: &str = "SOURCE_DATE_EPOCH";
/// Test knob (train-demo): make the loss NaN at this step (1-based) to exercise the NaN guard.
pub const IMGCTL_TEST_INJECT_NAN_AT_STEP: &str = "IMGCTL_TEST_INJECT_NAN_AT_STEP";
/// Test knob (train-demo): act as if Ctrl-C arrived right after this step (1-based).
pub const IMGCTL_TEST_INTERRUPT_AFTER_STEP: &str = "IMGCTL_TEST_INTERRUPT_AFTER_STEP";
/// Compressed host list of a SLURM job step (`node[01-04],gpu7`); its first
/// host (the node of task 0) is the rendezvous host when `MASTER_ADDR` is unset.
pub const SLURM_STEP_NODELIST: &str = "SLURM_STEP_NODELIST";
/// Compressed host list of a SLURM job; its first host is the rendezvous host
/// when neither `MASTER_ADDR` nor `SLURM_STEP_NODELIST` is set.
pub const SLURM_JOB_NODELIST: &str = "SLURM_JOB_NODELIST";
/// This node's name under SLURM (set by slurmd for every task): the name
/// `verify --fleet --history` records and `sbatch --exclude` takes.
pub const SLURMD_NODENAME: &str = "SLURMD_NODENAME";
/// Where a node sits in the network under SLURM's topology plugin
/// (`s0.s3.node17`, switches then node): `verify --fleet` groups nodes under
/// one leaf switch in its tree.
pub const SLURM_TOPOLOGY_ADDR: &str = "SLURM_TOPOLOGY_ADDR";
/// The Kubernetes node a pod runs on, when its manifest sets it from the
/// downward API (`fieldRef: spec.nodeName`), as examples/kubernetes does.
pub const NODE_NAME: &str = "NODE_NAME";
/// Tasks per node under SLURM in its compressed form (`4(x2),2`).
pub const SLURM_TASKS_PER_NODE: &str = "SLURM_TASKS_PER_NODE";
/// Hidden test/CPU launcher: `IMGCTL_CPU_RANKS=N imgctl train-demo …` supervises
/// N CPU worker processes on this machine, as `--gpus N` does with GPUs.
pub const IMGCTL_CPU_RANKS: &str = "IMGCTL_CPU_RANKS";
/// Python interpreter for `train-demo --benchmark --compare` (default `python3`).
pub const IMGCTL_PYTHON: &str = "IMGCTL_PYTHON";
/// The virtual environment scripts/setup.sh made (`.cargo/config.toml` sets it
/// to the repository's `.venv`): `--compare` runs its `bin/python` when
/// `IMGCTL_PYTHON` is unset, and `imgctl lock` its `bin/uv` (before uv on PATH).
pub const IMGCTL_VENV: &str = "IMGCTL_VENV";
/// Seconds a collective may wait for the other ranks before the rank gives
/// up (default 30 for the smoke preset and `--benchmark`, 1800 otherwise):
/// the CPU backend's exchanges and the NCCL watchdog.
pub const IMGCTL_COLLECTIVE_TIMEOUT: &str = "IMGCTL_COLLECTIVE_TIMEOUT";
/// Seconds one PyTorch reference run of `--compare` may take (default 1800);
/// a run past it is stopped and reported as not ok, the others still compare.
pub const IMGCTL_REFERENCE_TIMEOUT: &str = "IMGCTL_REFERENCE_TIMEOUT";
/// A file: `train-demo --benchmark` runs a few more steps under libtorch's
/// profiler after its measurements and writes their Chrome trace there
/// (`scripts/trace_summary.py` sums its kernels by kind).
pub const IMGCTL_PROFILE_TRACE: &str = "IMGCTL_PROFILE_TRACE";
/// OpenMP threads per process; the `--gpus` supervisor sets it for its workers when unset.
pub const OMP_NUM_THREADS: &str = "OMP_NUM_THREADS";
/// A `libnvrtc.so.<major>` (file path) to compile imgctl's CUDA kernels with,
/// ahead of the one beside the torch imgctl runs on.
pub const IMGCTL_NVRTC: &str = "IMGCTL_NVRTC";
/// Set by the `--gpus` supervisor in each worker it starts, so the worker knows
/// that its output is prefixed and collected.
pub const IMGCTL_SUPERVISED: &str = "IMGCTL_SUPERVISED";
/// The folder of per-registry CA folders (`HOST:PORT/ca.crt`) read instead
/// of `/etc/docker/certs.d` (the docker CLI's own place), for tests and for
/// users without write access there.
pub const IMGCTL_REGISTRY_CERTS_DIR: &str = "IMGCTL_REGISTRY_CERTS_DIR";
/// Debug/test hook: a directory where every rank writes one line per optimizer
/// step with a hash of its parameters (`rank-N.txt`), to prove ranks agree bit for bit.
pub const IMGCTL_PARAM_HASH_DIR: &str = "IMGCTL_PARAM_HASH_DIR";
/// Test hook only (never set it in a real run): seconds every checkpoint
/// write sleeps inside its temporary folder, before it is complete, so a
/// test can hold rank 0 in a slow checkpoint write (the heartbeat must not
/// declare anyone lost meanwhile).
pub const IMGCTL_TEST_CHECKPOINT_DELAY: &str = "IMGCTL_TEST_CHECKPOINT_DELAY";

/// An environment variable whose value imgctl cannot use.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// Not a positive number of seconds.
    #[error("{var}={value:?} is not a positive number of seconds")]
    NotSeconds {
        /// The variable.
        var: String,
        /// Its value.
        value: String,
        /// What it means when unset.
        default: std::time::Duration,
    },
}

/// The duration in seconds that `var` holds, else `default`; a value that is
/// not a positive number is an [`EnvError`] naming the variable.
pub fn seconds(var: &str, default: std::time::Duration) -> anyhow::Result<std::time::Duration> {
    match std::env::var(var) {
        Err(_) => Ok(default),
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 => Ok(std::time::Duration::from_secs_f64(s)),
            _ => Err(EnvError::NotSeconds {
                var: var.to_string(),
                value: v,
                default,
            }
            .into()),
        },
    }
}
/// Width of the terminal in columns, when the shell exports it: tables fit
/// this width even when piped (POSIX lists `COLUMNS` among the variables
/// that override the terminal's width).
pub const COLUMNS: &str = "COLUMNS";

/// The user's home folder (`imgctl up` reads the SSH public keys in `~/.ssh`).
pub const HOME: &str = "HOME";

/// The base of the user's state files (XDG Base Directory): `imgctl up`
/// keeps each workstation's SSH host key under
/// `$XDG_STATE_HOME/imgctl/workstations/NAME/` (default `~/.local/state`).
pub const XDG_STATE_HOME: &str = "XDG_STATE_HOME";

/// Set by `sudo` to the uid of the user who ran it: under sudo, imgctl acts
/// on that user's workstations (`ps`, `down`, `logs`), not root's.
pub const SUDO_UID: &str = "SUDO_UID";

/// imgctl's cache folder (default `$XDG_CACHE_HOME/imgctl`, else
/// `~/.cache/imgctl`): the set-up's torch venv, NVRTC, the release tools.
pub const IMGCTL_CACHE: &str = "IMGCTL_CACHE";

/// The base of the user's cache files (XDG Base Directory).
pub const XDG_CACHE_HOME: &str = "XDG_CACHE_HOME";

/// The active Python virtual environment: the front end looks there for
/// torch 2.7.0 before it hands a torch command to `imgctl-torch`.
pub const VIRTUAL_ENV: &str = "VIRTUAL_ENV";

/// The image the front end runs torch commands in when no `imgctl-torch`
/// here can load torch 2.7.0 (default `imgctl/cu124:latest`, build's tag).
pub const IMGCTL_IMAGE: &str = "IMGCTL_IMAGE";
