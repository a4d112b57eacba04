//! The observation functions: the process table, per-process memory, shared regions.
//!
//! Records are frozen classes that hold the Rust values as they came from the library and
//! make Python objects only when an attribute is read, so a listing of 10,000 processes costs
//! 10,000 small allocations and no string decoding. One process table per backend is kept
//! loaded for the life of the interpreter (the BPF iterator stays attached), behind a mutex,
//! and every read runs with the GIL released. The table checks the caller on every call
//! (`ProcessTable::select_backend`): after `os.setuid()`, a capability drop or a new /proc,
//! the iterator loaded as root no longer serves it.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Mutex, OnceLock};

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use spawnkit_observe::{
    self as observe, Backend, Comm, Fields, Memory, MemoryStatus, Process, ProcessTable, Selection,
    SharedRegion as Region, SharedReport as Report,
};

fn error(e: spawnkit::Error) -> PyErr {
    match e.kind() {
        spawnkit::ErrorKind::InvalidInput => PyValueError::new_err(e.to_string()),
        _ => match e.raw_os_error() {
            Some(errno) => PyOSError::new_err((errno, e.to_string())),
            None => PyOSError::new_err(e.to_string()),
        },
    }
}

/// A backend by name: the library's parser, with its message in a ValueError.
fn backend_of(name: &str) -> PyResult<Backend> {
    name.parse().map_err(|e: spawnkit::ParseValueError| PyValueError::new_err(e.to_string()))
}

/// The tables kept loaded, one per backend asked for.
fn tables() -> &'static Mutex<HashMap<Backend, ProcessTable>> {
    static TABLES: OnceLock<Mutex<HashMap<Backend, ProcessTable>>> = OnceLock::new();
    TABLES.get_or_init(|| Mutex::new(HashMap::new()))
}

fn with_table<T>(
    backend: Backend,
    f: impl FnOnce(&mut ProcessTable) -> spawnkit::Result<T>,
) -> spawnkit::Result<T> {
    let mut map = tables().lock().unwrap_or_else(|p| p.into_inner());
    let table = match map.entry(backend) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(v) => v.insert(ProcessTable::new(backend)?),
    };
    f(table)
}

fn comm_str(c: &Comm) -> &OsStr {
    OsStr::from_bytes(c.as_bytes())
}

/// One process of the table (`spawnkit.ps()`).
#[pyclass(frozen, module = "spawnkit._native", name = "ProcessInfo")]
pub struct ProcessInfo {
    p: Process,
    boot: u64,
    hz: u64,
}

#[pymethods]
impl ProcessInfo {
    /// Process id.
    #[getter]
    fn pid(&self) -> i32 {
        self.p.pid
    }

    /// Parent's process id (0 for init and kthreadd).
    #[getter]
    fn ppid(&self) -> i32 {
        self.p.ppid
    }

    /// Short name (`comm`, at most 15 bytes), decoded like os.fsdecode.
    #[getter]
    fn comm<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(comm_str(&self.p.comm).into_pyobject(py)?.into_any())
    }

    /// `psutil`'s name for `comm`.
    #[getter]
    fn name<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.comm(py)
    }

    /// State letter, as ps shows it: R S D T t X Z P I.
    #[getter]
    fn state(&self) -> String {
        self.p.state.letter().to_string()
    }

    /// Effective uid; None when it was not read (`ps(uid=False)` with the procfs backend).
    #[getter]
    fn uid(&self) -> Option<u32> {
        self.p.uid
    }

    /// Number of threads.
    #[getter]
    fn threads(&self) -> u32 {
        self.p.threads
    }

    /// Start time, Unix seconds.
    #[getter]
    fn start_time(&self) -> f64 {
        self.boot as f64 + self.p.start_ticks as f64 / self.hz as f64
    }

    /// Start time in clock ticks after boot (/proc/PID/stat field 22).
    #[getter]
    fn start_ticks(&self) -> u64 {
        self.p.start_ticks
    }

    /// Resident set size in bytes (the kernel's mm counters).
    #[getter]
    fn rss(&self) -> u64 {
        self.p.rss_bytes
    }

    /// The arguments (os.fsdecode'd); None when not asked for (`ps(cmdline=True)`); [] for
    /// kernel threads and zombies.
    #[getter]
    fn cmdline<'py>(&self, py: Python<'py>) -> PyResult<Option<Vec<Bound<'py, PyAny>>>> {
        if self.p.cmdline.is_none() {
            return Ok(None);
        }
        let args: PyResult<Vec<_>> =
            self.p.args().map(|a| Ok(OsStr::from_bytes(a).into_pyobject(py)?.into_any())).collect();
        args.map(Some)
    }

    /// Every field as a dict keyed by the attributes' names (pid, ppid, comm, state, uid,
    /// threads, start_time, rss, cmdline) with their values: rss in bytes, cmdline a list.
    /// (`spawnkit ps --json` uses procps names and units instead: nlwp, rss in KiB, args.)
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("pid", self.pid())?;
        d.set_item("ppid", self.ppid())?;
        d.set_item("comm", self.comm(py)?)?;
        d.set_item("state", self.state())?;
        d.set_item("uid", self.uid())?;
        d.set_item("threads", self.threads())?;
        d.set_item("start_time", self.start_time())?;
        d.set_item("rss", self.rss())?;
        d.set_item("cmdline", self.cmdline(py)?)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "ProcessInfo(pid={}, ppid={}, comm={:?}, state='{}', uid={}, threads={}, rss={})",
            self.p.pid,
            self.p.ppid,
            self.p.comm.to_string_lossy(),
            self.p.state.letter(),
            self.p.uid.map_or("None".into(), |u| u.to_string()),
            self.p.threads,
            self.p.rss_bytes
        )
    }
}

/// The process table; see `spawnkit.ps` for the arguments.
#[pyfunction]
#[pyo3(signature = (*, pids=None, ppid=None, tree_of=None, uid=false, cmdline=false, backend="auto"))]
#[allow(clippy::too_many_arguments)]
pub fn ps(
    py: Python<'_>,
    pids: Option<Vec<i32>>,
    ppid: Option<Vec<i32>>,
    tree_of: Option<Vec<i32>>,
    uid: bool,
    cmdline: bool,
    backend: &str,
) -> PyResult<Vec<ProcessInfo>> {
    let backend = backend_of(backend)?;
    let fields = Fields { uid, cmdline };
    // The one selection `spawnkit ps` builds too: procps' union of the selectors.
    let selection = (|| {
        let mut s = Selection::all();
        if let Some(pids) = pids {
            s = s.pids(pids)?;
        }
        if let Some(parents) = ppid {
            s = s.ppids(parents)?;
        }
        if let Some(roots) = tree_of {
            s = s.tree_of(roots)?;
        }
        Ok(s)
    })()
    .map_err(error)?;
    let (procs, boot) = py
        .detach(|| -> spawnkit::Result<(Vec<Process>, u64)> {
            let procs = with_table(backend, |t| selection.list(t, fields))?;
            Ok((procs, observe::boot_time()?))
        })
        .map_err(error)?;
    let hz = observe::clock_ticks().max(1);
    Ok(procs.into_iter().map(|p| ProcessInfo { p, boot, hz }).collect())
}

/// The backend `ps(backend=...)` uses now, for this caller ("bpf" or "procfs"), and why
/// "auto" fell back, if it did.
#[pyfunction]
#[pyo3(signature = (backend="auto"))]
pub fn ps_backend(py: Python<'_>, backend: &str) -> PyResult<(&'static str, Option<String>)> {
    let backend = backend_of(backend)?;
    py.detach(|| {
        with_table(backend, |t| {
            let chosen = t.select_backend()?;
            Ok((chosen.name(), t.fallback_reason().map(String::from)))
        })
    })
    .map_err(error)
}

/// The memory of one process (`spawnkit.memory()`), in bytes; every size is `None` when the
/// process could not be read (`status == "denied"`).
#[pyclass(frozen, module = "spawnkit._native", name = "MemoryInfo")]
pub struct MemoryInfo {
    m: Memory,
}

#[pymethods]
impl MemoryInfo {
    /// Resident set size: every page mapped.
    #[getter]
    fn rss(&self) -> Option<u64> {
        self.known(self.m.rss)
    }

    /// Proportional set size: pss_anon + pss_file + pss_shmem.
    #[getter]
    fn pss(&self) -> Option<u64> {
        self.known(self.m.pss)
    }

    /// The anonymous part of PSS.
    #[getter]
    fn pss_anon(&self) -> Option<u64> {
        self.known(self.m.pss_anon)
    }

    /// The file-backed part of PSS.
    #[getter]
    fn pss_file(&self) -> Option<u64> {
        self.known(self.m.pss_file)
    }

    /// The shared-memory (shmem: shared anonymous, SysV, memfd, tmpfs) part of PSS.
    #[getter]
    fn pss_shmem(&self) -> Option<u64> {
        self.known(self.m.pss_shmem)
    }

    /// Unique set size: the private pages the process's exit surely frees (shmem excluded).
    #[getter]
    fn uss(&self) -> Option<u64> {
        self.known(self.m.uss)
    }

    /// The shmem pages only this process maps (not in uss: they outlive it when anything
    /// else holds their object).
    #[getter]
    fn shmem_private(&self) -> Option<u64> {
        self.known(self.m.shmem_private)
    }

    /// Swapped-out memory.
    #[getter]
    fn swap(&self) -> Option<u64> {
        self.known(self.m.swap)
    }

    /// Proportional swap.
    #[getter]
    fn swap_pss(&self) -> Option<u64> {
        self.known(self.m.swap_pss)
    }

    /// Shared_Clean.
    #[getter]
    fn shared_clean(&self) -> Option<u64> {
        self.known(self.m.shared_clean)
    }

    /// Shared_Dirty.
    #[getter]
    fn shared_dirty(&self) -> Option<u64> {
        self.known(self.m.shared_dirty)
    }

    /// Private_Clean (shmem included).
    #[getter]
    fn private_clean(&self) -> Option<u64> {
        self.known(self.m.private_clean)
    }

    /// Private_Dirty (shmem included).
    #[getter]
    fn private_dirty(&self) -> Option<u64> {
        self.known(self.m.private_dirty)
    }

    /// Process id.
    #[getter]
    fn pid(&self) -> i32 {
        self.m.pid
    }

    /// Short name (`comm`).
    #[getter]
    fn comm<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(comm_str(&self.m.comm).into_pyobject(py)?.into_any())
    }

    /// "measured", "no-memory" (kernel thread, zombie) or "denied" (no permission).
    #[getter]
    fn status(&self) -> &'static str {
        self.m.status.as_str()
    }

    /// Every field as a dict keyed by the attributes' names (None where unknown).
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = &self.m;
        let d = PyDict::new(py);
        d.set_item("pid", m.pid)?;
        d.set_item("comm", self.comm(py)?)?;
        d.set_item("status", self.status())?;
        for (k, v) in [
            ("rss", m.rss),
            ("pss", m.pss),
            ("pss_anon", m.pss_anon),
            ("pss_file", m.pss_file),
            ("pss_shmem", m.pss_shmem),
            ("uss", m.uss),
            ("shmem_private", m.shmem_private),
            ("swap", m.swap),
            ("swap_pss", m.swap_pss),
            ("shared_clean", m.shared_clean),
            ("shared_dirty", m.shared_dirty),
            ("private_clean", m.private_clean),
            ("private_dirty", m.private_dirty),
        ] {
            d.set_item(k, self.known(v))?;
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let m = &self.m;
        if m.status == MemoryStatus::Denied {
            return format!(
                "MemoryInfo(pid={}, comm={:?}, status=\"denied\")",
                m.pid,
                m.comm.to_string_lossy()
            );
        }
        format!(
            "MemoryInfo(pid={}, comm={:?}, rss={}, pss={}, uss={}, pss_shmem={}, swap={})",
            m.pid,
            m.comm.to_string_lossy(),
            m.rss,
            m.pss,
            m.uss,
            m.pss_shmem,
            m.swap
        )
    }
}

impl MemoryInfo {
    /// A size, or `None` when the process could not be read (its numbers are unknown, not 0).
    fn known(&self, v: u64) -> Option<u64> {
        (self.m.status != MemoryStatus::Denied).then_some(v)
    }
}

/// Memory of the given pids (vanished ones left out), of the `top` processes by RSS, or of
/// every process.
#[pyfunction]
#[pyo3(signature = (pids=None, *, top=None))]
pub fn memory(
    py: Python<'_>,
    pids: Option<Vec<i32>>,
    top: Option<usize>,
) -> PyResult<Vec<MemoryInfo>> {
    let list = py
        .detach(|| match (&pids, top) {
            (Some(pids), _) => observe::memory_of(pids),
            (None, Some(n)) => observe::top_by_rss(n),
            (None, None) => observe::memory_all(),
        })
        .map_err(error)?;
    Ok(list.into_iter().map(|m| MemoryInfo { m }).collect())
}

/// One shared-memory object, counted once (`spawnkit.shared_regions()`).
#[pyclass(frozen, module = "spawnkit._native", name = "SharedRegion")]
pub struct SharedRegion {
    r: Region,
}

#[pymethods]
impl SharedRegion {
    /// Device as "MAJOR:MINOR".
    #[getter]
    fn dev(&self) -> String {
        self.r.dev.to_string()
    }

    /// Inode number (for SysV segments: the shmid).
    #[getter]
    fn inode(&self) -> u64 {
        self.r.inode
    }

    /// The name the mappings show: "/dev/zero (deleted)", "/SYSV... (deleted)", "/memfd:...".
    #[getter]
    fn name(&self) -> &str {
        &self.r.name
    }

    /// "anonymous", "sysv", "memfd", "tmpfs" or "other".
    #[getter]
    fn kind(&self) -> &'static str {
        self.r.kind.as_str()
    }

    /// Virtual size in bytes.
    #[getter]
    fn size_bytes(&self) -> u64 {
        self.r.size_bytes
    }

    /// Memory the object holds, in bytes (pages written by exited processes included); None
    /// when it could not be read (not root).
    #[getter]
    fn resident_bytes(&self) -> Option<u64> {
        self.r.resident_bytes
    }

    /// The processes that map it, sorted.
    #[getter]
    fn pids(&self) -> Vec<i32> {
        self.r.pids.clone()
    }

    /// For a SysV segment: the inode of its IPC namespace (segment ids are per namespace);
    /// None for other kinds.
    #[getter]
    fn ipc_ns(&self) -> Option<u64> {
        self.r.ipc_ns
    }

    /// Every field as a dict (keys as `spawnkit mem --shared --json`).
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("dev", self.dev())?;
        d.set_item("inode", self.r.inode)?;
        d.set_item("name", &self.r.name)?;
        d.set_item("kind", self.kind())?;
        d.set_item("size_bytes", self.r.size_bytes)?;
        d.set_item("resident_bytes", self.r.resident_bytes)?;
        d.set_item("pids", self.pids())?;
        d.set_item("ipc_ns", self.r.ipc_ns)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "SharedRegion(dev='{}', inode={}, name={:?}, size_bytes={}, resident_bytes={}, pids={:?})",
            self.r.dev,
            self.r.inode,
            self.r.name,
            self.r.size_bytes,
            self.r.resident_bytes.map_or("None".into(), |b| b.to_string()),
            self.r.pids
        )
    }
}

/// The regions and the check against /proc/meminfo (`spawnkit.shared_report()`).
#[pyclass(frozen, module = "spawnkit._native", name = "SharedReport")]
pub struct SharedReport {
    rep: Report,
}

#[pymethods]
impl SharedReport {
    /// The regions, largest resident first.
    #[getter]
    fn regions(&self) -> Vec<SharedRegion> {
        self.rep.regions.iter().map(|r| SharedRegion { r: r.clone() }).collect()
    }

    /// Sum of the known resident_bytes.
    #[getter]
    fn total_resident_bytes(&self) -> u64 {
        self.rep.total_resident_bytes
    }

    /// Shmem of /proc/meminfo, in bytes (None if unreadable).
    #[getter]
    fn meminfo_shmem_bytes(&self) -> Option<u64> {
        self.rep.meminfo_shmem_bytes
    }

    /// meminfo Shmem minus the total: shmem nobody maps (tmpfs files, kernel users).
    #[getter]
    fn difference_bytes(&self) -> Option<i64> {
        self.rep.difference_bytes
    }

    /// How many regions have an unknown resident size.
    #[getter]
    fn unknown_resident(&self) -> usize {
        self.rep.unknown_resident
    }

    /// Whether reading /proc/PID/map_files was refused (needs CAP_SYS_ADMIN): then every
    /// resident size is unknown.
    #[getter]
    fn map_files_denied(&self) -> bool {
        self.rep.map_files_denied
    }

    /// "procmap-query" or "maps-text".
    #[getter]
    fn method(&self) -> &'static str {
        self.rep.method.as_str()
    }

    /// Processes whose mappings were read.
    #[getter]
    fn processes_scanned(&self) -> usize {
        self.rep.processes_scanned
    }

    /// Processes whose mappings could not be read (permission).
    #[getter]
    fn processes_denied(&self) -> usize {
        self.rep.processes_denied
    }

    fn __repr__(&self) -> String {
        format!(
            "SharedReport({} regions, total_resident_bytes={}, meminfo_shmem_bytes={}, method='{}')",
            self.rep.regions.len(),
            self.rep.total_resident_bytes,
            self.rep.meminfo_shmem_bytes.map_or("None".into(), |b| b.to_string()),
            self.rep.method.as_str()
        )
    }
}

/// Every shared-memory region (or those the given pids map), each once, with the totals.
#[pyfunction]
#[pyo3(signature = (pids=None))]
pub fn shared_report(py: Python<'_>, pids: Option<Vec<i32>>) -> PyResult<SharedReport> {
    let rep = py
        .detach(|| match &pids {
            Some(p) => observe::shared_regions_of(p),
            None => observe::shared_regions(),
        })
        .map_err(error)?;
    Ok(SharedReport { rep })
}

/// Register the classes and functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ProcessInfo>()?;
    m.add_class::<MemoryInfo>()?;
    m.add_class::<SharedRegion>()?;
    m.add_class::<SharedReport>()?;
    m.add_function(wrap_pyfunction!(ps, m)?)?;
    m.add_function(wrap_pyfunction!(ps_backend, m)?)?;
    m.add_function(wrap_pyfunction!(memory, m)?)?;
    m.add_function(wrap_pyfunction!(shared_report, m)?)?;
    Ok(())
}
