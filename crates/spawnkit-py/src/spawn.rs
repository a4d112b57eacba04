//! `spawn()` and `plan()`: one call builds the whole [`Command`] from Python values.
//!
//! `spawnkit.subprocess.Popen._execute_child` calls `spawn` positionally with what CPython
//! would hand `_posixsubprocess.fork_exec` (pipes already made, user/group resolved); the
//! native `spawnkit.Command` adds what `subprocess` cannot say through `options`.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyList, PyString};
use std::ffi::OsString;
use std::time::{Duration, Instant};

use spawnkit::{
    Command, IdMap, Lock, Namespaces, PathSearch, Resource, SigSet, Signal, Stdio, Strategy,
    TmpOptions, UserMap,
};

use crate::child::Child;
use crate::convert::{fs_bytes, fs_os};
use crate::errors::{lock_timeout_error, spawn_error, Names};
use crate::preexec::Preexec;

/// The arguments `spawn` and `plan` share, as Python gave them.
struct Spec<'a, 'py> {
    program: &'a Bound<'py, PyAny>,
    argv: &'a Bound<'py, PyAny>,
    env: Option<&'a Bound<'py, PyAny>>,
    cwd: &'a Bound<'py, PyAny>,
    stdio: [Option<i32>; 3],
    close_fds: bool,
    pass_fds: Option<&'a Bound<'py, PyAny>>,
    restore_signals: bool,
    setsid: bool,
    pgid: Option<&'a Bound<'py, PyAny>>,
    uid: Option<&'a Bound<'py, PyAny>>,
    gid: Option<&'a Bound<'py, PyAny>>,
    groups: Option<&'a Bound<'py, PyAny>>,
    umask: Option<&'a Bound<'py, PyAny>>,
    preexec_fn: Option<&'a Bound<'py, PyAny>>,
    options: Option<&'a Bound<'py, PyAny>>,
    /// `spawnkit.subprocess`: CPython's PATH search (and exception rules, see errors.rs).
    compat: bool,
}

/// `subprocess.PIPE`, `STDOUT`, `DEVNULL`, or a file descriptor; `None` inherits.
fn stdio(code: Option<i32>) -> Option<Stdio> {
    match code {
        None => None,
        Some(-1) => Some(Stdio::Pipe),
        Some(-2) => Some(Stdio::Stdout),
        Some(-3) => Some(Stdio::Null),
        Some(fd) => Some(Stdio::Fd(fd)),
    }
}

fn signal(n: i32) -> PyResult<Signal> {
    Signal::new(n).map_err(|e| PyValueError::new_err(e.to_string()))
}

fn resource(obj: &Bound<'_, PyAny>) -> PyResult<Resource> {
    if let Ok(n) = obj.extract::<u32>() {
        return Resource::ALL
            .iter()
            .copied()
            .find(|r| r.raw() == n)
            .ok_or_else(|| PyValueError::new_err(format!("unknown resource limit {n}")));
    }
    let name: String = obj.extract()?;
    name.parse().map_err(|e: spawnkit::Error| PyValueError::new_err(e.to_string()))
}

/// An int as CPython's `_Py_Uid_Converter`/`_Py_Gid_Converter` take it for `user=`/`group=`,
/// with CPython's messages for values out of range. `2**32 - 1`, which CPython passes on as
/// `(uid_t)-1` ("no change": the child stays root), goes to the engine, which refuses it.
fn id_arg(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<u32>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(None) };
    match obj.extract::<i128>() {
        Ok(v) if (0..=u32::MAX as i128).contains(&v) => Ok(Some(v as u32)),
        Ok(v) if v < 0 || v < (1i128 << 63) => {
            Err(PyOverflowError::new_err(format!("{what} is less than minimum")))
        }
        Ok(_) => Err(PyOverflowError::new_err(format!("{what} is greater than maximum"))),
        Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
            Err(PyOverflowError::new_err(format!("{what} is greater than maximum")))
        }
        Err(e) => Err(e),
    }
}

/// A C int argument (`umask`, `process_group`): -1 or less means unset.
fn int_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<i32> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(-1) };
    let v: i128 = match obj.extract() {
        Ok(v) => v,
        Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => i128::MAX,
        Err(e) => return Err(e),
    };
    if v > i32::MAX as i128 {
        return Err(PyOverflowError::new_err("signed integer is greater than maximum"));
    }
    if v < i32::MIN as i128 {
        return Err(PyOverflowError::new_err("signed integer is less than minimum"));
    }
    Ok(v as i32)
}

/// `extra_groups` as CPython takes them (each an unsigned 32-bit group id).
fn groups_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<u32>>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(None) };
    let mut out = Vec::new();
    for g in obj.try_iter()? {
        match g?.extract::<i128>() {
            Ok(v) if (0..=u32::MAX as i128).contains(&v) => out.push(v as u32),
            _ => return Err(PyValueError::new_err("invalid group id")),
        }
    }
    Ok(Some(out))
}

/// What `spawnkit.Options` set that the preexec hook and the spawn loop must know about.
#[derive(Default)]
struct Extras {
    strategy: Option<Strategy>,
    signal_mask: Option<SigSet>,
    fd_targets: Vec<i32>,
    /// The lock as asked (the spawn waits for it in slices, see `spawn_waiting`).
    lock: Option<Lock>,
}

fn value_error(e: spawnkit::Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// `(inside, outside, count)` triples: one uid_map or gid_map.
fn id_maps(obj: &Bound<'_, PyAny>) -> PyResult<Vec<IdMap>> {
    let mut out = Vec::new();
    for line in obj.try_iter()? {
        let (inside, outside, count): (u32, u32, u32) = line?.extract()?;
        out.push(IdMap { inside, outside, count });
    }
    Ok(out)
}

/// `"root"`, `"current"`, or `(uid_map, gid_map)`.
fn user_map(obj: &Bound<'_, PyAny>) -> PyResult<UserMap> {
    if let Ok(kind) = obj.extract::<String>() {
        return match kind.as_str() {
            "root" => Ok(UserMap::Root),
            "current" => Ok(UserMap::Current),
            _ => Err(PyValueError::new_err(format!(
                "unknown user map {kind:?} (use \"root\", \"current\" or (uid_map, gid_map))"
            ))),
        };
    }
    let (uid, gid): (Bound<'_, PyAny>, Bound<'_, PyAny>) = obj.extract()?;
    Ok(UserMap::Custom { uid: id_maps(&uid)?, gid: id_maps(&gid)? })
}

/// Seconds as a `Duration` (non-negative and finite).
fn seconds(obj: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let secs: f64 = obj.extract()?;
    Duration::try_from_secs_f64(secs).map_err(|_| {
        PyValueError::new_err(format!("lock timeout must be a number of seconds >= 0, not {secs}"))
    })
}

fn path_search(name: &str) -> PyResult<PathSearch> {
    match name {
        "execvp" => Ok(PathSearch::Execvp),
        "try-all" | "try_all" => Ok(PathSearch::TryAll),
        _ => Err(PyValueError::new_err(format!(
            "unknown path search {name:?} (use \"execvp\" or \"try-all\")"
        ))),
    }
}

/// `Command.unshare`'s check: the library's parse of a comma-separated list (at least one
/// name, no empty item, known names and their aliases); the canonical names.
#[pyfunction]
pub(crate) fn namespaces(text: &str) -> PyResult<Vec<&'static str>> {
    Ok(text.parse::<Namespaces>().map_err(value_error)?.names())
}

/// A hostname as `socket.sethostname` takes it: `bytes` as they are, `str` encoded as a file
/// name is (`os.fsencode`); anything else is a TypeError.
fn hostname(obj: &Bound<'_, PyAny>) -> PyResult<OsString> {
    if obj.is_instance_of::<PyBytes>() || obj.is_instance_of::<PyString>() {
        return fs_os(obj);
    }
    Err(PyTypeError::new_err(format!("a hostname is str or bytes, not {}", obj.get_type().name()?)))
}

/// The isolation fields of `spawnkit.Options` (see `python/spawnkit/__init__.py`).
fn apply_isolation(
    cmd: &mut Command,
    opts: &Bound<'_, PyAny>,
    extras: &mut Extras,
) -> PyResult<()> {
    let get = |name: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
        let v = opts.getattr(name)?;
        Ok(if v.is_none() { None } else { Some(v) })
    };
    if let Some(ns) = get("unshare")? {
        let names: String = ns.extract()?;
        cmd.unshare(names.parse::<Namespaces>().map_err(value_error)?);
    }
    if let Some(map) = get("user_map")? {
        cmd.user_map(user_map(&map)?);
    }
    if let Some(tmp) = get("private_tmp")? {
        let (dir, nosuid, nodev, noexec): (Bound<'_, PyAny>, bool, bool, bool) = tmp.extract()?;
        let dir = if dir.is_none() { None } else { Some(fs_os(&dir)?.into()) };
        cmd.private_tmp(dir, TmpOptions { nosuid, nodev, noexec });
    }
    if let Some(binds) = get("ro_binds")? {
        for bind in binds.try_iter()? {
            let (src, dst): (Bound<'_, PyAny>, Bound<'_, PyAny>) = bind?.extract()?;
            cmd.ro_bind(fs_os(&src)?, fs_os(&dst)?);
        }
    }
    if let Some(on) = get("private_network")? {
        cmd.private_network(on.is_truthy()?);
    }
    if let Some(name) = get("hostname")? {
        cmd.hostname(hostname(&name)?);
    }
    if let Some(dir) = get("chroot")? {
        cmd.chroot(fs_os(&dir)?);
    }
    if let Some(on) = get("keep_caps")? {
        cmd.keep_capabilities(on.is_truthy()?);
    }
    if let Some(lock) = get("lock")? {
        let (path, shared, timeout): (Bound<'_, PyAny>, bool, Bound<'_, PyAny>) = lock.extract()?;
        let timeout = if timeout.is_none() { None } else { Some(seconds(&timeout)?) };
        let lock = Lock { path: fs_os(&path)?.into(), shared, timeout };
        cmd.lock(lock.clone());
        extras.lock = Some(lock);
    }
    if let Some(dir) = get("cgroup")? {
        cmd.cgroup(fs_os(&dir)?);
    }
    if let Some(search) = get("path_search")? {
        cmd.path_search(path_search(&search.extract::<String>()?)?);
    }
    Ok(())
}

/// The extras of `spawnkit.Options` (attributes read by name; see `python/spawnkit`).
fn apply_options(cmd: &mut Command, opts: &Bound<'_, PyAny>) -> PyResult<Extras> {
    let mut extras = Extras::default();
    let get = |name: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
        let v = opts.getattr(name)?;
        Ok(if v.is_none() { None } else { Some(v) })
    };
    if let Some(rlimits) = get("rlimits")? {
        for item in rlimits.try_iter()? {
            let (res, soft, hard): (Bound<'_, PyAny>, i128, i128) = item?.extract()?;
            // -1 (resource.RLIM_INFINITY) is unlimited, other negative values an error.
            let res = resource(&res)?;
            let limit = |v| res.limit_from_signed(v).map_err(value_error);
            cmd.rlimit(res, limit(soft)?, limit(hard)?);
        }
    }
    if let Some(nice) = get("nice")? {
        cmd.nice(nice.extract()?);
    }
    if let Some(cpus) = get("cpus")? {
        cmd.cpu_affinity(cpus.extract::<Vec<usize>>()?);
    }
    if let Some(sig) = get("pdeathsig")? {
        cmd.parent_death_signal(signal(sig.extract()?)?);
    }
    if let Some(on) = get("no_new_privs")? {
        cmd.no_new_privs(on.is_truthy()?);
    }
    if let Some(fds) = get("fds")? {
        for item in fds.try_iter()? {
            let (child_fd, parent_fd): (i32, i32) = item?.extract()?;
            cmd.fd(child_fd, parent_fd);
            extras.fd_targets.push(child_fd);
        }
    }
    if let Some(mask) = get("signal_mask")? {
        let mut set = SigSet::empty();
        for sig in mask.try_iter()? {
            // SIGKILL and SIGSTOP cannot be blocked: a ValueError, as the CLI refuses them.
            set = set.try_with(signal(sig?.extract()?)?).map_err(value_error)?;
        }
        extras.signal_mask = Some(set);
    }
    if let Some(sigs) = get("signal_default")? {
        for sig in sigs.try_iter()? {
            cmd.signal_default(signal(sig?.extract()?)?);
        }
    }
    if let Some(strategy) = get("strategy")? {
        let name: String = strategy.extract()?;
        let s: Strategy =
            name.parse().map_err(|e: spawnkit::Error| PyValueError::new_err(e.to_string()))?;
        cmd.strategy(s);
        extras.strategy = Some(s);
    }
    if let Some(on) = get("kill_on_drop")? {
        cmd.kill_on_drop(on.is_truthy()?);
    }
    apply_isolation(cmd, opts, &mut extras)?;
    Ok(extras)
}

/// An explicit `env=` mapping: the child gets exactly these variables.
fn cmd_env(cmd: &mut Command, env: &Bound<'_, PyAny>) -> PyResult<()> {
    cmd.env_clear();
    // The first of two equal names wins, as getenv(3) and os.environ see it in CPython's
    // child (which gets both entries).
    let mut seen = std::collections::HashSet::new();
    for item in env.call_method0("items")?.try_iter()? {
        let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
        let k = fs_bytes(&k)?;
        if k.contains(&b'=') {
            return Err(PyValueError::new_err("illegal environment variable name"));
        }
        let v = fs_os(&v)?;
        if seen.insert(k.clone()) {
            use std::os::unix::ffi::OsStringExt;
            cmd.env(std::ffi::OsString::from_vec(k), v);
        }
    }
    Ok(())
}

/// The command, and the lock it asks for (if any).
fn build(spec: &Spec<'_, '_>) -> PyResult<(Command, Option<Lock>)> {
    let mut cmd = Command::new(fs_os(spec.program)?);
    if spec.compat {
        // CPython's _posixsubprocess tries every PATH entry (see PathSearch::TryAll).
        cmd.path_search(PathSearch::TryAll);
    }
    // argv, argv[0] included (the program may differ from it: `executable=`).
    let mut first = true;
    let mut add = |cmd: &mut Command, a: &Bound<'_, PyAny>| -> PyResult<()> {
        let a = fs_os(a)?;
        if std::mem::take(&mut first) {
            cmd.arg0(a);
        } else {
            cmd.arg(a);
        }
        Ok(())
    };
    if let Ok(list) = spec.argv.cast::<PyList>() {
        for a in list.iter() {
            add(&mut cmd, &a)?;
        }
    } else {
        for a in spec.argv.try_iter()? {
            add(&mut cmd, &a?)?;
        }
    }
    match spec.env {
        // The inherited environment is copied here, with the GIL held: every Python writer
        // of os.environ (putenv/unsetenv) holds it, and the spawn itself runs with the GIL
        // released, where a copy taken by the engine could meet a setenv halfway through.
        None => {
            cmd.base_env(std::env::vars_os());
        }
        Some(env) => cmd_env(&mut cmd, env)?,
    }
    if !spec.cwd.is_none() {
        cmd.current_dir(fs_os(spec.cwd)?);
    }
    for (i, code) in spec.stdio.iter().enumerate() {
        if let Some(s) = stdio(*code) {
            match i {
                0 => cmd.stdin(s),
                1 => cmd.stdout(s),
                _ => cmd.stderr(s),
            };
        }
    }
    cmd.close_other_fds(spec.close_fds);
    let mut kept = Vec::new();
    if let Some(fds) = spec.pass_fds {
        for fd in fds.try_iter()? {
            let fd = fd?;
            let n: i128 = match fd.extract() {
                Ok(n) => n,
                // CPython maps int() over pass_fds.
                Err(_) => fd.py().get_type::<PyInt>().call1((&fd,))?.extract().unwrap_or(-1),
            };
            if !(0..=i32::MAX as i128).contains(&n) {
                return Err(PyValueError::new_err("bad value(s) in fds_to_keep"));
            }
            let n = n as i32;
            // A redirected standard stream stays redirected (keeping the parent's fd under
            // that number would replace the redirection).
            if (0..3).contains(&n) && spec.stdio[n as usize].is_some() {
                continue;
            }
            cmd.keep_fd(n);
            kept.push(n);
        }
    }
    cmd.restore_signals(spec.restore_signals);
    cmd.setsid(spec.setsid);
    let pgid = int_arg(spec.pgid)?;
    if pgid >= 0 {
        cmd.process_group(pgid);
    }
    let uid = id_arg(spec.uid, "uid")?;
    let gid = id_arg(spec.gid, "gid")?;
    if let Some(groups) = groups_arg(spec.groups)? {
        cmd.groups(groups);
    }
    if let Some(gid) = gid {
        cmd.gid(gid);
    }
    if let Some(uid) = uid {
        cmd.uid(uid);
    }
    let umask = int_arg(spec.umask)?;
    if umask >= 0 {
        cmd.umask(umask as u32 & 0o777);
    }
    let extras = match spec.options {
        Some(opts) => apply_options(&mut cmd, opts)?,
        None => Extras::default(),
    };
    // The calling thread's signal mask: CPython's child inherits it, so ours does too.
    let sigmask = extras.signal_mask.unwrap_or_else(SigSet::current_thread_mask);
    cmd.signal_mask(sigmask);
    if let Some(f) = spec.preexec_fn {
        let close_fds_except = spec.close_fds.then(|| {
            let mut keep: Vec<i32> = kept.iter().chain(&extras.fd_targets).copied().collect();
            keep.sort_unstable();
            keep.dedup();
            keep
        });
        // The lock fd's number is picked at spawn time: the hook keeps every fd open when it
        // starts (the engine has closed the others by then), which includes it.
        let keep_open_at_entry = extras.lock.is_some();
        let hook = Preexec { f: f.clone().unbind(), close_fds_except, keep_open_at_entry };
        // The hook runs Python code in a fork()ed child, which is not async-signal-safe: the
        // hazard CPython documents for preexec_fn ("not safe in the presence of threads").
        // SAFETY: taken the same way as CPython: the GIL is held across the fork and
        // PyOS_AfterFork_Child runs before any Python code.
        unsafe { cmd.pre_exec(move || hook.run()) };
        // pre_exec picked fork-exec: an explicit other strategy is refused by the engine.
        if let Some(s) = extras.strategy {
            cmd.strategy(s);
        }
    }
    Ok((cmd, extras.lock))
}

/// Spawn a child: returns its `Child` handle. Positional, in the order
/// `Popen._execute_child` has the values; `compat` picks CPython's exception rules and PATH
/// search (`spawnkit.subprocess`).
#[pyfunction]
#[pyo3(signature = (program, argv, env, cwd, stdin, stdout, stderr, close_fds, pass_fds,
    restore_signals, setsid, pgid, uid, gid, groups, umask, preexec_fn, options, compat))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn spawn<'py>(
    py: Python<'py>,
    program: &Bound<'py, PyAny>,
    argv: &Bound<'py, PyAny>,
    env: Option<&Bound<'py, PyAny>>,
    cwd: &Bound<'py, PyAny>,
    stdin: Option<i32>,
    stdout: Option<i32>,
    stderr: Option<i32>,
    close_fds: bool,
    pass_fds: Option<&Bound<'py, PyAny>>,
    restore_signals: bool,
    setsid: bool,
    pgid: Option<&Bound<'py, PyAny>>,
    uid: Option<&Bound<'py, PyAny>>,
    gid: Option<&Bound<'py, PyAny>>,
    groups: Option<&Bound<'py, PyAny>>,
    umask: Option<&Bound<'py, PyAny>>,
    preexec_fn: Option<&Bound<'py, PyAny>>,
    options: Option<&Bound<'py, PyAny>>,
    compat: bool,
) -> PyResult<Child> {
    let spec = Spec {
        program,
        argv,
        env,
        cwd,
        stdio: [stdin, stdout, stderr],
        close_fds,
        pass_fds,
        restore_signals,
        setsid,
        pgid,
        uid,
        gid,
        groups,
        umask,
        preexec_fn,
        options,
        compat,
    };
    let (mut cmd, lock) = build(&spec)?;
    let with_gil = spec.preexec_fn.is_some();
    let mut once = |cmd: &mut Command| -> spawnkit::Result<spawnkit::Child> {
        if with_gil {
            // As CPython's _posixsubprocess with a preexec_fn: keep the GIL (the child runs
            // Python on this thread), stop the GC, and let the interpreter prepare for the
            // fork and recover from it in the parent.
            // SAFETY: the GIL is held; PyGC_Disable/Enable and PyOS_BeforeFork/AfterFork_Parent
            // are called in the pairs CPython itself uses around fork().
            let gc_was_enabled = unsafe {
                let enabled = ffi::PyGC_Disable();
                ffi::PyOS_BeforeFork();
                enabled
            };
            let r = cmd.spawn();
            // SAFETY: as above, the parent side after the fork, whether or not it succeeded;
            // the GC is enabled again only if it was before.
            unsafe {
                ffi::PyOS_AfterFork_Parent();
                if gc_was_enabled != 0 {
                    ffi::PyGC_Enable();
                }
            }
            r
        } else {
            py.detach(|| cmd.spawn())
        }
    };
    let result = match lock {
        Some(lock) if lock.timeout != Some(Duration::ZERO) => {
            spawn_waiting(py, &mut cmd, &lock, &mut once)?
        }
        _ => once(&mut cmd).map_err(Failed::Engine),
    };
    let option = |name: &str| {
        options.filter(|o| !o.is_none()).and_then(|o| o.getattr(name).ok()).filter(|v| !v.is_none())
    };
    let lock_path = option("lock").and_then(|l| l.get_item(0).ok());
    let chroot = option("chroot");
    let names =
        Names { executable: program, cwd, lock: lock_path.as_ref(), chroot: chroot.as_ref() };
    match result {
        Ok(child) => Ok(Child::new(child)),
        Err(Failed::Engine(e)) => Err(spawn_error(py, &e, &names, compat)),
        Err(Failed::LockTimeout(t)) => Err(lock_timeout_error(py, &names, t)),
    }
}

/// Why a spawn failed.
enum Failed {
    Engine(spawnkit::Error),
    /// The lock was still held elsewhere after this long.
    LockTimeout(Duration),
}

/// Whether the engine refused because the lock is held elsewhere.
fn is_lock_conflict(e: &spawnkit::Error) -> bool {
    e.step() == "flock" && e.raw_os_error() == Some(libc::EWOULDBLOCK)
}

/// Spawn under a lock that may have to be waited for. The engine would wait inside the spawn
/// (retrying flock on EINTR, and with the GIL held when there is a preexec_fn); here every
/// attempt asks it not to wait, and between attempts this thread waits for the lock to look
/// free with the GIL released, running Python's signal handlers (Ctrl-C interrupts the wait).
fn spawn_waiting(
    py: Python<'_>,
    cmd: &mut Command,
    lock: &Lock,
    once: &mut impl FnMut(&mut Command) -> spawnkit::Result<spawnkit::Child>,
) -> PyResult<Result<spawnkit::Child, Failed>> {
    let deadline = lock.timeout.and_then(|t| Instant::now().checked_add(t));
    cmd.lock(Lock { timeout: Some(Duration::ZERO), ..lock.clone() });
    loop {
        match once(cmd) {
            Err(e) if is_lock_conflict(&e) => {}
            other => return Ok(other.map_err(Failed::Engine)),
        }
        // The library's wait; the GIL is released for each nap and the signal handlers run
        // after it (so Ctrl-C interrupts the wait).
        let free = lock.wait_until_free(deadline, |pause| {
            py.detach(|| std::thread::sleep(pause));
            py.check_signals()
        })?;
        if !free {
            return Ok(Err(Failed::LockTimeout(lock.timeout.unwrap_or_default())));
        }
    }
}

/// The steps a spawn with these arguments would run, one per line (`spawnkit run
/// --dry-run`), without spawning. Same arguments as `spawn` but `compat`.
#[pyfunction]
#[pyo3(signature = (program, argv, env, cwd, stdin, stdout, stderr, close_fds, pass_fds,
    restore_signals, setsid, pgid, uid, gid, groups, umask, preexec_fn, options))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan<'py>(
    py: Python<'py>,
    program: &Bound<'py, PyAny>,
    argv: &Bound<'py, PyAny>,
    env: Option<&Bound<'py, PyAny>>,
    cwd: &Bound<'py, PyAny>,
    stdin: Option<i32>,
    stdout: Option<i32>,
    stderr: Option<i32>,
    close_fds: bool,
    pass_fds: Option<&Bound<'py, PyAny>>,
    restore_signals: bool,
    setsid: bool,
    pgid: Option<&Bound<'py, PyAny>>,
    uid: Option<&Bound<'py, PyAny>>,
    gid: Option<&Bound<'py, PyAny>>,
    groups: Option<&Bound<'py, PyAny>>,
    umask: Option<&Bound<'py, PyAny>>,
    preexec_fn: Option<&Bound<'py, PyAny>>,
    options: Option<&Bound<'py, PyAny>>,
) -> PyResult<String> {
    let spec = Spec {
        program,
        argv,
        env,
        cwd,
        stdio: [stdin, stdout, stderr],
        close_fds,
        pass_fds,
        restore_signals,
        setsid,
        pgid,
        uid,
        gid,
        groups,
        umask,
        preexec_fn,
        options,
        compat: false,
    };
    let (cmd, _) = build(&spec)?;
    cmd.plan().map(|p| p.to_string()).map_err(|e| {
        spawn_error(py, &e, &Names { executable: program, cwd, lock: None, chroot: None }, false)
    })
}
