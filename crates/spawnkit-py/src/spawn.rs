//! `spawn()` and `plan()`: one call builds the whole [`Command`] from Python values.
//!
//! `spawnkit.subprocess.Popen._execute_child` calls `spawn` positionally with what CPython
//! would hand `_posixsubprocess.fork_exec` (pipes already made, user/group resolved); the
//! native `spawnkit.Command` adds what `subprocess` cannot say through `options`.

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList};
use spawnkit::{Command, Resource, SigSet, Signal, Stdio, Strategy};

use crate::child::Child;
use crate::convert::{fs_bytes, fs_os};
use crate::errors::{spawn_error, Names};
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

/// The calling thread's signal mask: CPython's child inherits it, so ours does too.
fn current_sigmask() -> SigSet {
    // SAFETY: sigset_t is plain old data; an all-zero value is a valid (empty) set.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: with a NULL new set pthread_sigmask only writes the current mask into `set`.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set) };
    if r != 0 {
        return SigSet::empty();
    }
    let mut bits = 0u64;
    for sig in 1..=64 {
        // SAFETY: `set` is initialized above; sigismember only reads it.
        if unsafe { libc::sigismember(&set, sig) } == 1 {
            bits |= 1u64 << (sig - 1);
        }
    }
    SigSet::from_bits(bits)
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

/// A limit: negative (`resource.RLIM_INFINITY` is -1) or too large means unlimited.
fn limit(v: i128) -> u64 {
    if v < 0 || v >= u64::MAX as i128 {
        spawnkit::RLIM_INFINITY
    } else {
        v as u64
    }
}

/// An int as CPython's `_Py_Uid_Converter`/`_Py_Gid_Converter` take it for `user=`/`group=`:
/// `2**32 - 1` means "no change", larger values fail with CPython's messages.
fn id_arg(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<u32>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(None) };
    match obj.extract::<i128>() {
        Ok(v) if (0..u32::MAX as i128).contains(&v) => Ok(Some(v as u32)),
        Ok(v) if v == u32::MAX as i128 => Ok(None),
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

/// What `spawnkit.Options` set that the preexec hook must know about.
#[derive(Default)]
struct Extras {
    strategy: Option<Strategy>,
    signal_mask: Option<SigSet>,
    fd_targets: Vec<i32>,
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
            cmd.rlimit(resource(&res)?, limit(soft), limit(hard));
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
            set = set.with(signal(sig?.extract()?)?);
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
    Ok(extras)
}

fn build(spec: &Spec<'_, '_>) -> PyResult<Command> {
    let mut cmd = Command::new(fs_os(spec.program)?);
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
    if let Some(env) = spec.env {
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
    let sigmask = extras.signal_mask.unwrap_or_else(current_sigmask);
    cmd.signal_mask(sigmask);
    if let Some(f) = spec.preexec_fn {
        let close_fds_except = spec.close_fds.then(|| {
            let mut keep: Vec<i32> = kept.iter().chain(&extras.fd_targets).copied().collect();
            keep.sort_unstable();
            keep.dedup();
            keep
        });
        let hook = Preexec { f: f.clone().unbind(), close_fds_except };
        // SAFETY: the hook runs Python code in a fork()ed child, which is not
        // async-signal-safe; this is exactly the hazard CPython documents for preexec_fn
        // ("not safe to use in the presence of threads") and takes the same way: the GIL is
        // held across the fork and PyOS_AfterFork_Child runs before any Python code.
        unsafe { cmd.pre_exec(move || hook.run()) };
        // pre_exec picked fork-exec: an explicit other strategy is refused by the engine.
        if let Some(s) = extras.strategy {
            cmd.strategy(s);
        }
    }
    Ok(cmd)
}

/// Spawn a child: returns its `Child` handle. Positional, in the order
/// `Popen._execute_child` has the values; `compat` picks CPython's exception rules.
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
    };
    let mut cmd = build(&spec)?;
    let result = if spec.preexec_fn.is_some() {
        // As CPython's _posixsubprocess with a preexec_fn: keep the GIL (the child runs Python
        // on this thread), stop the GC, and let the interpreter prepare for the fork and
        // recover from it in the parent.
        // SAFETY: the GIL is held; PyGC_Disable/Enable and PyOS_BeforeFork/AfterFork_Parent
        // are called in the pairs CPython itself uses around fork().
        let gc_was_enabled = unsafe { ffi::PyGC_Disable() };
        // SAFETY: see above.
        unsafe { ffi::PyOS_BeforeFork() };
        let r = cmd.spawn();
        // SAFETY: see above; the parent side after the fork, whether or not it succeeded.
        unsafe { ffi::PyOS_AfterFork_Parent() };
        if gc_was_enabled != 0 {
            // SAFETY: see above.
            unsafe { ffi::PyGC_Enable() };
        }
        r
    } else {
        py.detach(|| cmd.spawn())
    };
    match result {
        Ok(child) => Ok(Child::new(child)),
        Err(e) => Err(spawn_error(py, &e, &Names { executable: program, cwd }, compat)),
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
    };
    let cmd = build(&spec)?;
    cmd.plan()
        .map(|p| p.to_string())
        .map_err(|e| spawn_error(py, &e, &Names { executable: program, cwd }, false))
}
