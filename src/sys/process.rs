//! Processes, through libc: a signal to another process (or group, or a
//! child's whole process group), this
//! process's immediate exit, a child's death with its parent, and glibc's
//! allocator setting. Safe wrappers only; which process gets which signal,
//! and when to leave, belongs to the callers.
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Sends `sig` to process `pid` (kill(2): a negative `pid` is a process
/// group, signal 0 only checks that the process exists). The error is the
/// call's errno (`EPERM`: the process exists under another user).
pub fn kill(pid: i32, sig: i32) -> std::io::Result<()> {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(pid as libc::pid_t, sig) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Sends SIGKILL to every process of the group whose leader is `leader`
/// (`kill(-leader, SIGKILL)`): a child started in a process group of its
/// own (`CommandExt::process_group(0)`), with the children it started.
/// Call it before reaping the leader, so that its pid cannot have been
/// reused. The error is the call's errno (`ESRCH`: the group is gone).
pub fn kill_process_group(leader: u32) -> std::io::Result<()> {
    let Ok(pid) = i32::try_from(leader) else {
        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
    };
    if pid <= 1 {
        // -1 would be every process this one may signal, -0 its own group.
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    kill(-pid, libc::SIGKILL)
}

/// Ends this process at once with `status`'s code (`_exit(2)`): no exit
/// handlers, no destructors, no flush of Rust's buffered output (flush
/// before calling).
pub fn exit_now(status: crate::error::ExitStatus) -> ! {
    let code = i32::from(status.code());
    // SAFETY: _exit ends the process at once; the caller flushed its output.
    unsafe { libc::_exit(code) }
}

/// Makes the child `cmd` starts get SIGKILL when this process dies
/// (`PR_SET_PDEATHSIG`); a child whose parent already died between the fork
/// and the prctl sent no signal, so it checks that its parent is still this
/// process, and exits with status 1 otherwise.
pub fn kill_child_with_parent(cmd: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl, getppid and _exit are async-signal-safe; this runs
    // in the child before exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Fixes glibc's `M_MMAP_THRESHOLD` at `bytes`: every allocation that large
/// is mapped on its own and unmapped on free (mallopt(3)). musl's
/// allocator has no such setting (the static front end): nothing to do.
pub fn set_mmap_threshold(bytes: i32) {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes allocator parameters; any value is valid.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, bytes);
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = bytes;
}

/// Gives the heap's free pages back to the kernel (malloc_trim(3)), so the
/// resident set holds live allocations only (glibc; musl returns freed
/// memory itself, and has no malloc_trim).
pub fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases memory glibc holds free; it takes no
    // pointers and is safe to call at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// This process's real user id (getuid(2)).
pub fn real_uid() -> u32 {
    // SAFETY: getuid has no failure mode and touches no memory.
    unsafe { libc::getuid() }
}

/// This process's real group id (getgid(2)).
pub fn real_gid() -> u32 {
    // SAFETY: getgid has no failure mode and touches no memory.
    unsafe { libc::getgid() }
}

/// The login name of `uid` from the user database (getpwuid_r(3)); None
/// when it has none.
pub fn login_name(uid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: a zeroed passwd is a valid value for getpwuid_r to fill.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to memory we own that outlives the call, and
    // buf's length is passed with it.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points at a NUL-terminated string in buf.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    Some(name.to_string_lossy().into_owned()).filter(|n| !n.is_empty())
}

/// This process's hard limit of the resource `name` as docker's `--ulimit`
/// spells it (`nofile`, `nproc`, `memlock`, `stack`, …; getrlimit(2));
/// None for another name, an unlimited one, or a failed call.
pub fn hard_limit(name: &str) -> Option<u64> {
    let resource = match name {
        "core" => libc::RLIMIT_CORE,
        "cpu" => libc::RLIMIT_CPU,
        "data" => libc::RLIMIT_DATA,
        "fsize" => libc::RLIMIT_FSIZE,
        "locks" => libc::RLIMIT_LOCKS,
        "memlock" => libc::RLIMIT_MEMLOCK,
        "msgqueue" => libc::RLIMIT_MSGQUEUE,
        "nice" => libc::RLIMIT_NICE,
        "nofile" => libc::RLIMIT_NOFILE,
        "nproc" => libc::RLIMIT_NPROC,
        "rss" => libc::RLIMIT_RSS,
        "rtprio" => libc::RLIMIT_RTPRIO,
        "sigpending" => libc::RLIMIT_SIGPENDING,
        "stack" => libc::RLIMIT_STACK,
        _ => return None,
    };
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit we own for the call's duration.
    let rc = unsafe { libc::getrlimit(resource, &mut limit) };
    (rc == 0 && limit.rlim_max != libc::RLIM_INFINITY).then_some(limit.rlim_max)
}

/// CPU seconds the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_seconds() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// Raises this process's limit on open files to at least `want`: the soft
/// limit, and the hard one too where the process may (root); returns the
/// soft limit it ends with.
pub fn raise_open_files(want: u64) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid pointers to an rlimit, for the calling process.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        if r.rlim_cur < want {
            let raised = libc::rlimit {
                rlim_cur: want,
                rlim_max: want.max(r.rlim_max),
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                r.rlim_cur = r.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &r);
            }
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
    }
    r.rlim_cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hard_limit_of_open_files_is_read() {
        let n = hard_limit("nofile").expect("a finite nofile limit");
        assert!(n >= 64, "{n}");
        assert_eq!(hard_limit("no-such-limit"), None);
    }

    #[test]
    fn signal_zero_probes_a_process() {
        kill(std::process::id() as i32, 0).unwrap();
        // No process has pid i32::MAX (pid_max is at most 2^22).
        let e = kill(i32::MAX, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH));
    }

    #[test]
    fn a_process_group_is_killed_whole() {
        use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
        let mut child = Command::new("sleep")
            .arg("100")
            .process_group(0)
            .spawn()
            .unwrap();
        kill_process_group(child.id()).unwrap();
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        // Never this process's own group, nor every process.
        for leader in [0, 1] {
            let e = kill_process_group(leader).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        }
    }
}
