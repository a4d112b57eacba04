//! `spawnkit._native.Command`: the engine's [`spawnkit::Command`] as a Python class, one
//! method per option, each converting its Python value once and setting the Rust field.
//!
//! `spawnkit.Command` subclasses it (adding `spawn`/`output`/`status`, which return a
//! `subprocess.Popen`), and `spawnkit.subprocess.Popen._execute_child` builds one from
//! CPython's arguments and calls [`Command::spawn_child`] with the pipes it made. The standard
//! streams are kept as Python gave them (`PIPE`, a file object...): `Popen` makes the pipes, so
//! they reach the engine as fds at spawn time.

use pyo3::exceptions::{PyKeyError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyList, PyString, PyTuple};
use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::time::{Duration, Instant};

use spawnkit::{
    Group, IdMap, Lock, LookupError, Namespaces, PathSearch, Resource, SigSet, Signal, Stdio,
    Strategy, TmpOptions, User, UserMap,
};

use crate::child::Child;
use crate::convert::{fs_bytes, fs_os};
use crate::errors::{lock_timeout_error, spawn_error, Names};
use crate::preexec::Preexec;
use crate::server::Server;

/// A process to start, built like the Rust `spawnkit::Command`; every method chains.
#[pyclass(subclass, module = "spawnkit._native", name = "Command")]
pub(crate) struct Command {
    cmd: spawnkit::Command,
    /// The program, working directory, lock path and chroot as Python gave them: CPython puts
    /// the caller's own object on an exception as `filename`.
    program: Py<PyAny>,
    cwd: Option<Py<PyAny>>,
    lock_path: Option<Py<PyAny>>,
    chroot: Option<Py<PyAny>>,
    /// The standard streams as given (`None` inherits).
    streams: [Option<Py<PyAny>>; 3],
    preexec: Option<Py<PyAny>>,
    /// The strategy asked for, if any (a `pre_exec` hook otherwise picks fork-exec).
    strategy: Option<Strategy>,
    /// Whether `signal_mask` was called; otherwise the spawning thread's mask is used.
    mask_set: bool,
    /// Whether `env_clear` was called; otherwise the environment is inherited (copied at
    /// spawn with the GIL held, see `spawn_child`).
    env_cleared: bool,
    /// The child fds kept open (fd maps and `keep_fd`), for `pre_exec`'s close_fds.
    kept: Vec<i32>,
    /// The lock as asked (`spawn_child` waits for it in slices).
    lock: Option<Lock>,
    /// The uid and gid lines of a custom user map, each settable alone.
    id_maps: (Vec<IdMap>, Vec<IdMap>),
    /// CPython's `subprocess` rules: its PATH search and its exceptions.
    subprocess_rules: bool,
}

fn value_error(e: spawnkit::Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn opt<'a, 'py>(obj: &'a Bound<'py, PyAny>) -> Option<&'a Bound<'py, PyAny>> {
    (!obj.is_none()).then_some(obj)
}

/// A signal from 15, `signal.SIGTERM`, `"TERM"` or `"SIGTERM"`.
fn signal(obj: &Bound<'_, PyAny>) -> PyResult<Signal> {
    if let Ok(name) = obj.cast::<PyString>() {
        let text = name.to_str()?;
        return text
            .parse::<Signal>()
            .map_err(|_| PyValueError::new_err(format!("unknown signal '{text}'")));
    }
    Signal::new(obj.extract::<i32>()?).map_err(value_error)
}

/// A resource limit by name (`"nofile"`, `"RLIMIT_AS"`) or `resource.RLIMIT_*` number.
fn resource(obj: &Bound<'_, PyAny>) -> PyResult<Resource> {
    if let Ok(n) = obj.extract::<u32>() {
        return Resource::ALL
            .iter()
            .copied()
            .find(|r| r.raw() == n)
            .ok_or_else(|| PyValueError::new_err(format!("unknown resource limit {n}")));
    }
    let name: String = obj.extract()?;
    name.parse().map_err(value_error)
}

/// An int as CPython's `_Py_Uid_Converter`/`_Py_Gid_Converter` take it for `user=`/`group=`,
/// with CPython's messages for values out of range. `2**32 - 1`, which CPython passes on as
/// `(uid_t)-1` ("no change": the child stays root), goes to the engine, which refuses it.
fn id_number(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u32> {
    match obj.extract::<i128>() {
        Ok(v) if (0..=u32::MAX as i128).contains(&v) => Ok(v as u32),
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

/// `KeyError` as `pwd.getpwnam`/`grp.getgrnam` raise it for an unknown name.
fn lookup_error(e: LookupError, lookup: &str, name: &str) -> PyErr {
    match e {
        LookupError::NotFound => {
            PyKeyError::new_err(format!("{lookup}(): name not found: {name:?}").replace('"', "'"))
        }
        LookupError::Failed(e) => PyErr::from(e),
    }
}

/// A uid: a number, or a user name looked up with the library (getpwnam_r).
fn uid_of(obj: &Bound<'_, PyAny>) -> PyResult<u32> {
    if let Ok(name) = obj.cast::<PyString>() {
        let name = name.to_str()?;
        return User::Name(name.to_owned()).uid().map_err(|e| lookup_error(e, "getpwnam", name));
    }
    id_number(obj, "uid")
}

/// A gid: a number, or a group name looked up with the library (getgrnam_r).
fn gid_of(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u32> {
    if let Ok(name) = obj.cast::<PyString>() {
        let name = name.to_str()?;
        return Group::Name(name.to_owned()).gid().map_err(|e| lookup_error(e, "getgrnam", name));
    }
    id_number(obj, what)
}

/// A C int argument (`umask`, `process_group`) with CPython's overflow messages; `None` and
/// negative values mean unset.
fn c_int(obj: &Bound<'_, PyAny>) -> PyResult<Option<i32>> {
    if obj.is_none() {
        return Ok(None);
    }
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
    Ok((v >= 0).then_some(v as i32))
}

/// `(inside, outside, count)` lines of a uid_map or gid_map.
fn id_lines(lines: &Bound<'_, PyAny>) -> PyResult<Vec<IdMap>> {
    let mut out = Vec::new();
    for line in lines.try_iter()? {
        let line = line?;
        let items: Vec<Bound<'_, PyAny>> = line.try_iter()?.collect::<PyResult<_>>()?;
        let [inside, outside, count] = items.as_slice() else {
            let shown = PyTuple::new(line.py(), &items)?.repr()?;
            return Err(PyValueError::new_err(format!(
                "an id map line is (inside, outside, count), not {shown}"
            )));
        };
        out.push(IdMap {
            inside: inside.extract()?,
            outside: outside.extract()?,
            count: count.extract()?,
        });
    }
    Ok(out)
}

/// A lock timeout in seconds: `None` or infinity waits as long as it takes.
fn lock_timeout(timeout: Option<f64>, nonblock: bool) -> PyResult<Option<Duration>> {
    if nonblock {
        return match timeout {
            None | Some(0.0) => Ok(Some(Duration::ZERO)),
            Some(_) => Err(PyValueError::new_err("nonblock and a timeout exclude each other")),
        };
    }
    match timeout {
        None => Ok(None),
        Some(t) if t == f64::INFINITY => Ok(None),
        Some(t) => Duration::try_from_secs_f64(t).map(Some).map_err(|_| {
            PyValueError::new_err(format!("lock timeout must be a number of seconds >= 0, not {t}"))
        }),
    }
}

/// `subprocess.PIPE`, `STDOUT`, `DEVNULL`, or a file descriptor.
fn stdio_code(code: i32) -> Stdio {
    match code {
        -1 => Stdio::Pipe,
        -2 => Stdio::Stdout,
        -3 => Stdio::Null,
        fd => Stdio::Fd(fd),
    }
}

/// A stream as given to `stdin()`/`stdout()`/`stderr()`: `None` inherits, an int is a code
/// or an fd, anything else must have `fileno()`.
fn stream(obj: &Bound<'_, PyAny>) -> PyResult<Option<Stdio>> {
    if obj.is_none() {
        return Ok(None);
    }
    if let Ok(code) = obj.extract::<i32>() {
        return Ok(Some(stdio_code(code)));
    }
    Ok(Some(Stdio::Fd(obj.call_method0("fileno")?.extract()?)))
}

/// The argument after the first, in the order given.
fn for_each<'py>(
    obj: &Bound<'py, PyAny>,
    mut f: impl FnMut(&Bound<'py, PyAny>) -> PyResult<()>,
) -> PyResult<()> {
    if let Ok(list) = obj.cast::<PyList>() {
        for item in list.iter() {
            f(&item)?;
        }
        return Ok(());
    }
    for item in obj.try_iter()? {
        f(&item?)?;
    }
    Ok(())
}

/// An environment name as the child will see it: `illegal environment variable name` for `=`.
fn env_name(key: &Bound<'_, PyAny>) -> PyResult<OsString> {
    let k = fs_bytes(key)?;
    if k.contains(&b'=') {
        return Err(PyValueError::new_err("illegal environment variable name"));
    }
    Ok(OsString::from_vec(k))
}

type Slf<'py> = PyRefMut<'py, Command>;

#[pymethods]
impl Command {
    /// `Command(program)`: run `program`, found along the child's PATH if it has no `/`.
    /// `subprocess_rules=True` gives CPython's `subprocess` PATH search and exceptions (and
    /// its reading of a child that ends before exec with no step failing, in a `pre_exec`
    /// hook that exits or killed by a signal: a child, not an error).
    #[new]
    #[pyo3(signature = (program, *, subprocess_rules = false))]
    fn new(program: &Bound<'_, PyAny>, subprocess_rules: bool) -> PyResult<Command> {
        let mut cmd = spawnkit::Command::new(fs_os(program)?);
        if subprocess_rules {
            // CPython's _posixsubprocess tries every PATH entry (see PathSearch::TryAll).
            cmd.path_search(PathSearch::TryAll);
            // Its parent reads EOF on the error pipe from a child killed before exec: a
            // Popen whose wait() gives the signal, no exception.
            cmd.may_die_before_exec(true);
        }
        Ok(Command {
            cmd,
            program: program.clone().unbind(),
            cwd: None,
            lock_path: None,
            chroot: None,
            streams: [None, None, None],
            preexec: None,
            strategy: None,
            mask_set: false,
            env_cleared: false,
            kept: Vec::new(),
            lock: None,
            id_maps: (Vec::new(), Vec::new()),
            subprocess_rules,
        })
    }

    fn __repr__(&self) -> String {
        format!("Command({:?}, args={:?})", self.cmd.get_program(), self.cmd.get_args())
    }

    // ---- argv and environment

    /// Append one argument.
    fn arg<'py>(mut slf: Slf<'py>, arg: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        slf.cmd.arg(fs_os(arg)?);
        Ok(slf)
    }

    /// Append arguments.
    fn args<'py>(mut slf: Slf<'py>, args: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        for_each(args, |a| {
            slf.cmd.arg(fs_os(a)?);
            Ok(())
        })?;
        Ok(slf)
    }

    /// `argv[0]` as the child sees it (default: the program as given).
    fn arg0<'py>(mut slf: Slf<'py>, arg0: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        slf.cmd.arg0(fs_os(arg0)?);
        Ok(slf)
    }

    /// The program as given, `argv[0]` and the arguments, as `str` (`os.fsdecode`).
    fn argv(&self) -> (OsString, Vec<OsString>) {
        let argv0 = self.cmd.get_arg0().unwrap_or(self.cmd.get_program()).to_owned();
        let mut argv = vec![argv0];
        argv.extend(self.cmd.get_args().iter().cloned());
        (self.cmd.get_program().to_owned(), argv)
    }

    /// Set an environment variable in the child.
    fn env<'py>(
        mut slf: Slf<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Slf<'py>> {
        slf.cmd.env(env_name(key)?, fs_os(value)?);
        Ok(slf)
    }

    /// Set several variables (a mapping or (key, value) pairs). A name given twice in one
    /// call (as `str` and as `bytes`) keeps the first value, as the child of CPython's
    /// `subprocess` sees it through getenv(3).
    fn envs<'py>(mut slf: Slf<'py>, mapping: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        let items = if mapping.hasattr("items")? {
            mapping.call_method0("items")?
        } else {
            mapping.clone()
        };
        let mut seen = HashSet::new();
        for item in items.try_iter()? {
            let (k, v): (Bound<'py, PyAny>, Bound<'py, PyAny>) = item?.extract()?;
            let k = env_name(&k)?;
            let v = fs_os(&v)?;
            if seen.insert(k.clone()) {
                slf.cmd.env(k, v);
            }
        }
        Ok(slf)
    }

    /// Remove a variable from the child's environment.
    fn env_remove<'py>(mut slf: Slf<'py>, key: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        slf.cmd.env_remove(env_name(key)?);
        Ok(slf)
    }

    /// Start from an empty environment (variables set with `env` still pass).
    fn env_clear(mut slf: Slf<'_>) -> Slf<'_> {
        slf.cmd.env_clear();
        slf.env_cleared = true;
        slf
    }

    /// The child's working directory (str, bytes or os.PathLike).
    fn current_dir<'py>(mut slf: Slf<'py>, path: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        slf.cmd.current_dir(fs_os(path)?);
        slf.cwd = Some(path.clone().unbind());
        Ok(slf)
    }

    // ---- standard streams and fds

    /// `PIPE`, `DEVNULL`, an fd, a file object, or `None` to inherit.
    fn stdin<'py>(mut slf: Slf<'py>, spec: &Bound<'py, PyAny>) -> Slf<'py> {
        slf.streams[0] = opt(spec).map(|s| s.clone().unbind());
        slf
    }

    /// `PIPE`, `DEVNULL`, an fd, a file object, or `None` to inherit.
    fn stdout<'py>(mut slf: Slf<'py>, spec: &Bound<'py, PyAny>) -> Slf<'py> {
        slf.streams[1] = opt(spec).map(|s| s.clone().unbind());
        slf
    }

    /// `PIPE`, `DEVNULL`, `STDOUT` (2>&1), an fd, a file object, or `None` to inherit.
    fn stderr<'py>(mut slf: Slf<'py>, spec: &Bound<'py, PyAny>) -> Slf<'py> {
        slf.streams[2] = opt(spec).map(|s| s.clone().unbind());
        slf
    }

    /// The standard streams as given (for `Popen`, which makes the pipes).
    fn streams(&self, py: Python<'_>) -> (Py<PyAny>, Py<PyAny>, Py<PyAny>) {
        let get =
            |i: usize| self.streams[i].as_ref().map_or_else(|| py.None(), |s| s.clone_ref(py));
        (get(0), get(1), get(2))
    }

    /// Make the child's fd `child_fd` a copy of the parent's `parent_fd` (swaps and cycles
    /// allowed; `fd(n, n)` keeps `n` even if it is close-on-exec).
    fn fd(mut slf: Slf<'_>, child_fd: i32, parent_fd: i32) -> Slf<'_> {
        slf.cmd.fd(child_fd, parent_fd);
        slf.kept.push(child_fd);
        slf
    }

    /// Keep the parent's fd `fd` open in the child under the same number.
    fn keep_fd(mut slf: Slf<'_>, fd: i32) -> Slf<'_> {
        slf.cmd.keep_fd(fd);
        slf.kept.push(fd);
        slf
    }

    /// Close every fd but 0-2 and the mapped ones in the child (default: on).
    #[pyo3(signature = (on = true))]
    fn close_other_fds(mut slf: Slf<'_>, on: bool) -> Slf<'_> {
        slf.cmd.close_other_fds(on);
        slf
    }

    // ---- signals, session

    /// The child's signal mask at execve (default: the calling thread's, as `subprocess`);
    /// an empty iterable unblocks everything. SIGKILL and SIGSTOP cannot be blocked: a
    /// ValueError.
    fn signal_mask<'py>(mut slf: Slf<'py>, signals: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        let mut set = SigSet::empty();
        for_each(signals, |s| {
            set = set.try_with(signal(s)?).map_err(value_error)?;
            Ok(())
        })?;
        slf.cmd.signal_mask(set);
        slf.mask_set = true;
        Ok(slf)
    }

    /// Reset SIGPIPE and SIGXFSZ to their default action in the child (default: on).
    #[pyo3(signature = (on = true))]
    fn restore_signals(mut slf: Slf<'_>, on: bool) -> Slf<'_> {
        slf.cmd.restore_signals(on);
        slf
    }

    /// Reset `sig` to its default action in the child even if the parent ignores it.
    fn signal_default<'py>(mut slf: Slf<'py>, sig: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        slf.cmd.signal_default(signal(sig)?);
        Ok(slf)
    }

    /// Start a new session.
    #[pyo3(signature = (on = true))]
    fn setsid(mut slf: Slf<'_>, on: bool) -> Slf<'_> {
        slf.cmd.setsid(on);
        slf
    }

    /// Put the child in process group `pgid` (0: a new group led by the child; `None` or a
    /// negative value: the parent's).
    fn process_group<'py>(mut slf: Slf<'py>, pgid: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        if let Some(pgid) = c_int(pgid)? {
            slf.cmd.process_group(pgid);
        }
        Ok(slf)
    }

    // ---- limits and scheduling

    /// Set a resource limit: `resource` is a name (`"nofile"`, `"RLIMIT_AS"`) or a
    /// `resource.RLIMIT_*` number; `RLIM_INFINITY` (-1) for no limit, any other negative
    /// value is a ValueError; `hard` defaults to `soft`.
    #[pyo3(signature = (resource, soft, hard = None))]
    fn rlimit<'py>(
        mut slf: Slf<'py>,
        resource: &Bound<'py, PyAny>,
        soft: i128,
        hard: Option<i128>,
    ) -> PyResult<Slf<'py>> {
        let res = self::resource(resource)?;
        let limit = |v| res.limit_from_signed(v).map_err(value_error);
        let (soft, hard) = (limit(soft)?, limit(hard.unwrap_or(soft))?);
        slf.cmd.rlimit(res, soft, hard);
        Ok(slf)
    }

    /// Add `increment` to the niceness, like nice(1).
    fn nice(mut slf: Slf<'_>, increment: i32) -> Slf<'_> {
        slf.cmd.nice(increment);
        slf
    }

    /// Run only on these CPUs.
    fn cpu_affinity(mut slf: Slf<'_>, cpus: Vec<usize>) -> Slf<'_> {
        slf.cmd.cpu_affinity(cpus);
        slf
    }

    // ---- credentials

    /// Run as this user (id or name). Supplementary groups are dropped unless `groups` says
    /// which to keep.
    fn uid<'py>(mut slf: Slf<'py>, uid: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        if let Some(uid) = opt(uid) {
            slf.cmd.uid(uid_of(uid)?);
        }
        Ok(slf)
    }

    /// Run with this group (id or name).
    fn gid<'py>(mut slf: Slf<'py>, gid: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        if let Some(gid) = opt(gid) {
            slf.cmd.gid(gid_of(gid, "gid")?);
        }
        Ok(slf)
    }

    /// Supplementary groups (ids or names); an empty list drops them all.
    fn groups<'py>(mut slf: Slf<'py>, groups: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        let mut ids = Vec::new();
        for_each(groups, |g| {
            let id = if g.is_instance_of::<PyString>() {
                gid_of(g, "gid")?
            } else {
                match g.extract::<i128>() {
                    Ok(v) if (0..=u32::MAX as i128).contains(&v) => v as u32,
                    _ => return Err(PyValueError::new_err("invalid group id")),
                }
            };
            ids.push(id);
            Ok(())
        })?;
        slf.cmd.groups(ids);
        Ok(slf)
    }

    /// The child's umask, 0 to 0o777 (`None` or a negative value: the parent's). Under
    /// `subprocess_rules` a larger value is masked to its permission bits, as umask(2) does
    /// in CPython's child; the native API refuses it when the command is planned.
    fn umask<'py>(mut slf: Slf<'py>, mask: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        if let Some(mask) = c_int(mask)? {
            let mask = if slf.subprocess_rules { mask as u32 & 0o777 } else { mask as u32 };
            slf.cmd.umask(mask);
        }
        Ok(slf)
    }

    /// Signal the child gets when the parent *thread* that spawned it exits.
    fn parent_death_signal<'py>(mut slf: Slf<'py>, sig: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        slf.cmd.parent_death_signal(signal(sig)?);
        Ok(slf)
    }

    /// Set no_new_privs: execve can never grant privileges.
    #[pyo3(signature = (on = true))]
    fn no_new_privs(mut slf: Slf<'_>, on: bool) -> Slf<'_> {
        slf.cmd.no_new_privs(on);
        slf
    }

    // ---- how

    /// `"clone-vfork"` (default), `"posix-spawn"` or `"fork-exec"`.
    fn strategy<'py>(mut slf: Slf<'py>, name: &str) -> PyResult<Slf<'py>> {
        let s: Strategy = name.parse().map_err(|_| {
            PyValueError::new_err(format!(
                "unknown strategy {name:?} (use one of clone-vfork, posix-spawn, fork-exec)"
            ))
        })?;
        slf.cmd.strategy(s);
        slf.strategy = Some(s);
        Ok(slf)
    }

    /// Call `fn()` in the child just before execve (forces the fork-exec strategy; the same
    /// caveats as `preexec_fn`). `None` removes it.
    fn pre_exec<'py>(mut slf: Slf<'py>, r#fn: &Bound<'py, PyAny>) -> Slf<'py> {
        slf.preexec = opt(r#fn).map(|f| f.clone().unbind());
        slf
    }

    /// SIGKILL and reap the child when its Popen object is collected unwaited.
    #[pyo3(signature = (on = true))]
    fn kill_on_drop(mut slf: Slf<'_>, on: bool) -> Slf<'_> {
        slf.cmd.kill_on_drop(on);
        slf
    }

    /// How the child walks PATH when an execve fails: `"execvp"` (the default: stop at an
    /// error other than ENOENT, ENOTDIR, EACCES...) or `"try-all"` (CPython's `subprocess`:
    /// try every entry, report the first error that is not ENOENT or ENOTDIR). The
    /// posix-spawn strategy always follows glibc's execvp.
    fn path_search<'py>(mut slf: Slf<'py>, how: &str) -> PyResult<Slf<'py>> {
        let search = match how {
            "execvp" => PathSearch::Execvp,
            "try-all" | "try_all" => PathSearch::TryAll,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "unknown path search {how:?} (use one of execvp, try-all)"
                )))
            }
        };
        slf.cmd.path_search(search);
        Ok(slf)
    }

    // ---- isolation

    /// Create these namespaces for the child: names from `NAMESPACES` (`"user"`, `"mount"`,
    /// `"net"`, `"pid"`, `"uts"`, `"ipc"`, `"cgroup"`; `"mnt"` and `"network"` too), as an
    /// iterable or a comma-separated string; adds to earlier calls. With the default
    /// strategy the clone creates them, so the child starts inside; with `pid` it is pid 1,
    /// and with `pid` and `mount` a fresh /proc is mounted. Without root, a user namespace
    /// mapping you to yourself is added. A list naming no namespace (`""`, `[]`) or with an
    /// empty item (`"user,,net"`) is a ValueError.
    fn unshare<'py>(mut slf: Slf<'py>, namespaces: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        let text = if let Ok(s) = namespaces.cast::<PyString>() {
            s.to_str()?.to_owned()
        } else {
            let mut names = Vec::new();
            for_each(namespaces, |n| {
                let n = n.cast::<PyString>().map_err(|_| {
                    let ty = n.get_type().name().map(|t| t.to_string()).unwrap_or_default();
                    PyTypeError::new_err(format!("a namespace name is a str, not {ty}"))
                })?;
                names.push(n.to_str()?.to_owned());
                Ok(())
            })?;
            names.join(",")
        };
        // The library's parse, as `spawnkit run --unshare`: at least one name, none empty.
        slf.cmd.unshare(text.parse::<Namespaces>().map_err(value_error)?);
        Ok(slf)
    }

    /// A new user namespace where your effective uid and gid are 0 (`unshare -r`).
    fn map_root_user(mut slf: Slf<'_>) -> Slf<'_> {
        slf.cmd.user_map(UserMap::Root);
        slf
    }

    /// A new user namespace where your uid and gid stay the same.
    fn map_current_user(mut slf: Slf<'_>) -> Slf<'_> {
        slf.cmd.user_map(UserMap::Current);
        slf
    }

    /// A new user namespace with this uid_map: `(inside, outside, count)` lines. More than
    /// your own id needs privilege outside; written by the parent (clone-vfork only).
    fn uid_map<'py>(mut slf: Slf<'py>, lines: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        slf.id_maps.0 = id_lines(lines)?;
        let (uid, gid) = slf.id_maps.clone();
        slf.cmd.user_map(UserMap::Custom { uid, gid });
        Ok(slf)
    }

    /// A new user namespace with this gid_map: `(inside, outside, count)` lines.
    fn gid_map<'py>(mut slf: Slf<'py>, lines: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        slf.id_maps.1 = id_lines(lines)?;
        let (uid, gid) = slf.id_maps.clone();
        slf.cmd.user_map(UserMap::Custom { uid, gid });
        Ok(slf)
    }

    /// A private /tmp in a new mount namespace: a fresh tmpfs (`dir` None or True), or the
    /// directory `dir` bound on /tmp; mounted nosuid and nodev by default (`False` turns the
    /// private /tmp off again).
    #[pyo3(signature = (dir = None, *, nosuid = true, nodev = true, noexec = false))]
    fn private_tmp<'py>(
        mut slf: Slf<'py>,
        dir: Option<&Bound<'py, PyAny>>,
        nosuid: bool,
        nodev: bool,
        noexec: bool,
    ) -> PyResult<Slf<'py>> {
        let dir = dir.filter(|d| !d.is_none());
        if let Some(flag) = dir.and_then(|d| d.cast::<PyBool>().ok()) {
            if !flag.is_true() {
                slf.cmd.no_private_tmp();
                return Ok(slf);
            }
        }
        let dir = match dir {
            Some(d) if !d.is_instance_of::<PyBool>() => Some(fs_os(d)?.into()),
            _ => None,
        };
        slf.cmd.private_tmp(dir, TmpOptions { nosuid, nodev, noexec });
        Ok(slf)
    }

    /// Bind `src` read-only (recursively) on `dst` (default: `src` itself, which must exist)
    /// in a new mount namespace.
    #[pyo3(signature = (src, dst = None))]
    fn ro_bind<'py>(
        mut slf: Slf<'py>,
        src: &Bound<'py, PyAny>,
        dst: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Slf<'py>> {
        let src = fs_os(src)?;
        let dst = match dst.filter(|d| !d.is_none()) {
            Some(d) => fs_os(d)?,
            None => src.clone(),
        };
        slf.cmd.ro_bind(src, dst);
        Ok(slf)
    }

    /// A new network namespace with only the loopback interface, up (127.0.0.1 works).
    #[pyo3(signature = (on = true))]
    fn private_network(mut slf: Slf<'_>, on: bool) -> Slf<'_> {
        slf.cmd.private_network(on);
        slf
    }

    /// The hostname (1 to 64 bytes), in a new uts namespace: `str` (encoded as `os.fsencode`
    /// does, as `socket.sethostname` takes it) or `bytes`.
    fn hostname<'py>(mut slf: Slf<'py>, name: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        if !name.is_instance_of::<PyBytes>() && !name.is_instance_of::<PyString>() {
            let ty = name.get_type().name()?;
            return Err(PyTypeError::new_err(format!("a hostname is str or bytes, not {ty}")));
        }
        slf.cmd.hostname(fs_os(name)?);
        Ok(slf)
    }

    /// chroot into `dir` after the mounts, then `chdir("/")`; `current_dir` is resolved
    /// inside it.
    fn chroot<'py>(mut slf: Slf<'py>, dir: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        slf.cmd.chroot(fs_os(dir)?);
        slf.chroot = Some(dir.clone().unbind());
        Ok(slf)
    }

    /// Let a fenced child keep its capabilities. By default a child with a fence (any
    /// namespace but a user namespace alone, or a chroot) starts with none, so root inside
    /// cannot undo the fences (umount the private /tmp, remount a read-only bind writable,
    /// setns out, reach the parent's files through /proc/PID/root). With this it can.
    #[pyo3(signature = (on = true))]
    fn keep_capabilities(mut slf: Slf<'_>, on: bool) -> Slf<'_> {
        slf.cmd.keep_capabilities(on);
        slf
    }

    /// Hold an flock(2) lock on `path` (created if missing, as flock(1)) for the child's
    /// whole life: the child holds the only fd of it, so it is released when the child (and
    /// anything it hands the fd to) exits. Exclusive unless `shared`. Waits as long as it
    /// takes (`timeout=None`), at most `timeout` seconds, or not at all (`nonblock`, or
    /// `timeout=0`); the wait releases the GIL and Ctrl-C interrupts it.
    ///
    /// A lock held elsewhere raises `BlockingIOError` (errno EWOULDBLOCK) with `nonblock`,
    /// and `TimeoutError` (errno ETIMEDOUT) once `timeout` runs out; both have `filename`
    /// set to `path` and `step == "flock"`.
    #[pyo3(signature = (path, *, shared = false, timeout = None, nonblock = false))]
    fn lock<'py>(
        mut slf: Slf<'py>,
        path: &Bound<'py, PyAny>,
        shared: bool,
        timeout: Option<f64>,
        nonblock: bool,
    ) -> PyResult<Slf<'py>> {
        let lock =
            Lock { path: fs_os(path)?.into(), shared, timeout: lock_timeout(timeout, nonblock)? };
        slf.cmd.lock(lock.clone());
        slf.lock = Some(lock);
        slf.lock_path = Some(path.clone().unbind());
        Ok(slf)
    }

    /// Start the child in this cgroup v2 directory from its first instruction (clone3
    /// CLONE_INTO_CGROUP; fork-exec moves it first thing; posix-spawn cannot).
    fn cgroup<'py>(mut slf: Slf<'py>, path: &Bound<'py, PyAny>) -> PyResult<Slf<'py>> {
        slf.cmd.cgroup(fs_os(path)?);
        Ok(slf)
    }

    // ---- doing it

    /// The steps the child would run, one per line, without spawning (like `spawnkit run
    /// --dry-run`). Pipes show as the pipe they would be. Paths and arguments are exact:
    /// bytes that are not printable UTF-8 are escaped (`"\377"`, a backslash as `\\`), as
    /// `ls --quoting-style=c` shows names.
    fn plan(&self, py: Python<'_>) -> PyResult<String> {
        let mut codes = [None, None, None];
        for (code, spec) in codes.iter_mut().zip(&self.streams) {
            if let Some(spec) = spec {
                *code = stream(spec.bind(py))?;
            }
        }
        let (cmd, _) = self.prepared(py, codes)?;
        cmd.plan().map(|p| p.to_string()).map_err(|e| spawn_error(py, &e, &self.names(py), false))
    }

    /// Send the request for this child to the spawn server `via` and return its id at once
    /// (the fds are passed now); [`receive_child`](Command::receive_child) takes the answer.
    /// Many requests can be in flight this way (`spawnkit.spawn_many(..., via=...)`).
    #[pyo3(signature = (stdin = None, stdout = None, stderr = None, *, via))]
    fn submit_child(
        &self,
        py: Python<'_>,
        stdin: Option<i32>,
        stdout: Option<i32>,
        stderr: Option<i32>,
        via: &Bound<'_, Server>,
    ) -> PyResult<u64> {
        let codes = [stdin, stdout, stderr].map(|c| c.map(stdio_code));
        let cmd = self.copy_for_server(codes)?;
        let server = via.get();
        let result = py.detach(|| server.client().map(|mut c| c.get().submit(&cmd)))?;
        result.map_err(|e| spawn_error(py, &e, &self.names(py), self.subprocess_rules))
    }

    /// The answer to request `id` sent by [`submit_child`](Command::submit_child): the child,
    /// or the exception a spawn of this command raises.
    #[pyo3(signature = (id, *, via))]
    fn receive_child(&self, py: Python<'_>, id: u64, via: &Bound<'_, Server>) -> PyResult<Child> {
        let server = via.get();
        let result = py.detach(|| server.client().map(|mut c| c.get().receive_id(id)))?;
        match result {
            Ok(child) => Ok(Child::new(child)),
            Err(e) => Err(spawn_error(py, &e, &self.names(py), self.subprocess_rules)),
        }
    }

    /// Start the child with these fds as its standard streams (`None`: the parent's), as
    /// `Popen` does with the pipes it made; through the spawn server `via` when given.
    /// Returns the engine's handle.
    #[pyo3(signature = (stdin = None, stdout = None, stderr = None, *, via = None))]
    fn spawn_child(
        &self,
        py: Python<'_>,
        stdin: Option<i32>,
        stdout: Option<i32>,
        stderr: Option<i32>,
        via: Option<&Bound<'_, Server>>,
    ) -> PyResult<Child> {
        let codes = [stdin, stdout, stderr].map(|c| c.map(stdio_code));
        if let Some(server) = via {
            return self.spawn_via(py, codes, server.get());
        }
        let (mut cmd, lock) = self.prepared(py, codes)?;
        let with_gil = self.preexec.is_some();
        let mut once = |cmd: &mut spawnkit::Command| -> spawnkit::Result<spawnkit::Child> {
            if with_gil {
                // As CPython's _posixsubprocess with a preexec_fn: keep the GIL (the child
                // runs Python on this thread), stop the GC, and let the interpreter prepare
                // for the fork and recover from it in the parent.
                // SAFETY: the GIL is held; PyGC_Disable/Enable and PyOS_BeforeFork/
                // AfterFork_Parent are called in the pairs CPython itself uses around fork().
                let gc_was_enabled = unsafe {
                    let enabled = ffi::PyGC_Disable();
                    ffi::PyOS_BeforeFork();
                    enabled
                };
                let r = cmd.spawn();
                // SAFETY: as above, the parent side after the fork, whether or not it
                // succeeded; the GC is enabled again only if it was before.
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
        drop(cmd);
        match result {
            Ok(child) => Ok(Child::new(child)),
            Err(Failed::Engine(e)) => {
                Err(spawn_error(py, &e, &self.names(py), self.subprocess_rules))
            }
            Err(Failed::LockTimeout(t)) => Err(lock_timeout_error(py, &self.names(py), t)),
        }
    }

    /// Start the child without waiting for it to exec (the engine's `Command::start`): the
    /// returned `Starting`'s `fileno()` becomes readable when the outcome is known, and its
    /// `finish()` gives the `Child` or raises what `spawn_child` would have raised. A command
    /// with a `pre_exec` hook or a lock to wait for is spawned at once (`fileno()` is None).
    #[pyo3(signature = (stdin = None, stdout = None, stderr = None))]
    fn start_child(
        &self,
        py: Python<'_>,
        stdin: Option<i32>,
        stdout: Option<i32>,
        stderr: Option<i32>,
    ) -> PyResult<Starting> {
        let waits_for_lock = self.lock.as_ref().is_some_and(|l| l.timeout != Some(Duration::ZERO));
        if self.preexec.is_some() || waits_for_lock {
            let done = self.spawn_child(py, stdin, stdout, stderr, None);
            let state = std::sync::Mutex::new(StartingState::Done(Some(done)));
            return Ok(Starting { state, names: None });
        }
        let codes = [stdin, stdout, stderr].map(|c| c.map(stdio_code));
        let (mut cmd, _) = self.prepared(py, codes)?;
        let started = cmd.start();
        drop(cmd);
        match started {
            // A spawn the start fell back to failed already: raised now, as a start that
            // fails does (spawn_many tells a lack of fds apart this way).
            Ok(s) if s.id().is_none() => match s.finish() {
                Err(e) => Err(spawn_error(py, &e, &self.names(py), self.subprocess_rules)),
                Ok(_) => unreachable!("a start without a pid is a failed one"),
            },
            Ok(s) => Ok(Starting {
                state: std::sync::Mutex::new(StartingState::Pending(Some(s))),
                names: Some((self.owned_names(py), self.subprocess_rules)),
            }),
            Err(e) => Err(spawn_error(py, &e, &self.names(py), self.subprocess_rules)),
        }
    }
}

/// The file names of a [`Names`], owned.
struct OwnedNames {
    executable: Py<PyAny>,
    cwd: Option<Py<PyAny>>,
    lock: Option<Py<PyAny>>,
    chroot: Option<Py<PyAny>>,
}

impl OwnedNames {
    fn bind<'py>(&self, py: Python<'py>) -> Names<'py> {
        let bind = |o: &Option<Py<PyAny>>| o.as_ref().map(|o| o.bind(py).clone());
        Names {
            executable: self.executable.bind(py).clone(),
            cwd: bind(&self.cwd),
            lock: bind(&self.lock),
            chroot: bind(&self.chroot),
        }
    }
}

// One per Python object; boxing the pending start would only add an allocation per start.
#[allow(clippy::large_enum_variant)]
enum StartingState {
    Pending(Option<spawnkit::Starting>),
    Done(Option<PyResult<Child>>),
}

/// A child being started by `Command.start_child`: cloned, perhaps not yet exec'd.
#[pyclass(frozen, module = "spawnkit._native")]
pub(crate) struct Starting {
    state: std::sync::Mutex<StartingState>,
    /// What `spawn_error` needs to word a failure as `spawn_child` would.
    names: Option<(OwnedNames, bool)>,
}

#[pymethods]
impl Starting {
    /// The fd that becomes readable once the child has exec'd or failed (for an event loop's
    /// `add_reader`); None when the outcome is known already. Owned by this object.
    fn fileno(&self) -> Option<i32> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &*state {
            StartingState::Pending(Some(s)) => {
                s.fd().map(|fd| std::os::fd::AsRawFd::as_raw_fd(&fd))
            }
            _ => None,
        }
    }

    /// The started `Child`, or the error of the step that failed (raised as `spawn_child`
    /// raises it). Blocks, with the GIL released, until the child has exec'd or exited if
    /// `fileno()` was not readable yet. Once only.
    fn finish(&self, py: Python<'_>) -> PyResult<Child> {
        let taken = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            match &mut *state {
                StartingState::Pending(s) => s.take().map(Ok),
                StartingState::Done(d) => d.take().map(Err),
            }
        };
        match taken {
            None => Err(PyValueError::new_err("Starting.finish() was called already")),
            Some(Err(done)) => done,
            Some(Ok(s)) => match py.detach(|| s.finish()) {
                Ok(child) => Ok(Child::new(child)),
                Err(e) => {
                    let (names, rules) =
                        self.names.as_ref().expect("a pending start keeps its names");
                    Err(spawn_error(py, &e, &names.bind(py), *rules))
                }
            },
        }
    }
}

impl Command {
    /// Spawn through a spawn server: the same command, its fds passed by SCM_RIGHTS, the
    /// child's pidfd back. A `pre_exec` hook is Python code of this process: refused.
    fn spawn_via(
        &self,
        py: Python<'_>,
        codes: [Option<Stdio>; 3],
        server: &Server,
    ) -> PyResult<Child> {
        let cmd = self.copy_for_server(codes)?;
        let result = py.detach(|| server.client().map(|mut c| c.get().spawn(&cmd)))?;
        drop(cmd);
        match result {
            Ok(child) => Ok(Child::new(child)),
            Err(e) => Err(spawn_error(py, &e, &self.names(py), self.subprocess_rules)),
        }
    }

    /// The copy a server receives; a `pre_exec` hook is Python code of this process.
    fn copy_for_server(&self, codes: [Option<Stdio>; 3]) -> PyResult<spawnkit::Command> {
        if self.preexec.is_some() {
            return Err(PyValueError::new_err(
                "preexec_fn cannot run through a spawn server (it is Python code of this \
                 process): spawn locally, or set what it did with the Command's options",
            ));
        }
        self.copy_with(codes)
    }

    /// The file names an exception may carry, as the caller gave them, kept past this call (for
    /// `Starting.finish`).
    fn owned_names(&self, py: Python<'_>) -> OwnedNames {
        let own = |o: &Option<Py<PyAny>>| o.as_ref().map(|o| o.clone_ref(py));
        OwnedNames {
            executable: self.program.clone_ref(py).into_any(),
            cwd: own(&self.cwd),
            lock: own(&self.lock_path),
            chroot: own(&self.chroot),
        }
    }

    /// The same, borrowed for an error raised now.
    fn names<'py>(&self, py: Python<'py>) -> Names<'py> {
        self.owned_names(py).bind(py)
    }

    /// A copy of the command ready to spawn: these standard streams, the inherited
    /// environment and the thread's signal mask taken now, the `pre_exec` hook installed.
    /// Also the lock it asks for (waited for by `spawn_child`).
    fn prepared(
        &self,
        py: Python<'_>,
        streams: [Option<Stdio>; 3],
    ) -> PyResult<(spawnkit::Command, Option<Lock>)> {
        let redirected = streams.each_ref().map(Option::is_some);
        let mut cmd = self.copy_with(streams)?;
        if let Some(f) = &self.preexec {
            let close_fds_except = self.cmd.get_close_other_fds().then(|| {
                let mut keep: Vec<i32> = self
                    .kept
                    .iter()
                    .copied()
                    .filter(|&fd| !(0..3).contains(&fd) || !redirected[fd as usize])
                    .collect();
                keep.sort_unstable();
                keep.dedup();
                keep
            });
            // The lock fd's number is picked at spawn time: the hook keeps every fd open when
            // it starts (the engine has closed the others by then), which includes it.
            let keep_open_at_entry = self.lock.is_some();
            let hook = Preexec { f: f.clone_ref(py), close_fds_except, keep_open_at_entry };
            // The hook runs Python code in a fork()ed child, which is not async-signal-safe:
            // the hazard CPython documents for preexec_fn ("not safe in the presence of
            // threads").
            // SAFETY: taken the same way as CPython: the GIL is held across the fork and
            // PyOS_AfterFork_Child runs before any Python code.
            unsafe { cmd.pre_exec(move || hook.run()) };
            if self.subprocess_rules {
                // CPython's parent reads EOF on its error pipe from a preexec_fn that calls
                // os._exit (or is killed): no error, a Popen whose wait() gives that status.
                cmd.pre_exec_may_exit(true);
            }
            // pre_exec picked fork-exec: an explicit other strategy is refused by the engine.
            if let Some(s) = self.strategy {
                cmd.strategy(s);
            }
        }
        Ok((cmd, self.lock.clone()))
    }

    /// A copy of the command with these standard streams, the inherited environment and the
    /// thread's signal mask taken now (with the GIL held).
    fn copy_with(&self, streams: [Option<Stdio>; 3]) -> PyResult<spawnkit::Command> {
        let mut cmd = self.cmd.try_clone().map_err(value_error)?;
        let [stdin, stdout, stderr] = streams;
        if let Some(s) = stdin {
            cmd.stdin(s);
        }
        if let Some(s) = stdout {
            cmd.stdout(s);
        }
        if let Some(s) = stderr {
            cmd.stderr(s);
        }
        if !self.env_cleared {
            // The inherited environment is copied here, with the GIL held: every Python
            // writer of os.environ (putenv/unsetenv) holds it, and the spawn itself runs with
            // the GIL released, where a copy taken by the engine could meet a setenv halfway.
            // In a process that has only ever had one thread, the copy the last spawn took
            // is used again when the environment has not changed (compared in place).
            cmd.base_env_now();
        }
        if !self.mask_set {
            // The calling thread's signal mask: CPython's child inherits it, so ours does too.
            cmd.signal_mask(SigSet::current_thread_mask());
        }
        Ok(cmd)
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
    cmd: &mut spawnkit::Command,
    lock: &Lock,
    once: &mut impl FnMut(&mut spawnkit::Command) -> spawnkit::Result<spawnkit::Child>,
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
