//! The process table: one interface over two backends, and pure helpers on listings.
//!
//! ```no_run
//! use spawnkit_observe::{self as observe, Backend, Fields, ProcessTable, SortKey};
//!
//! let mut table = ProcessTable::new(Backend::Auto)?;
//! let mut procs = table.list(Fields { uid: true, ..Fields::default() })?;
//! observe::retain_trees(&mut procs, &[1]);
//! observe::sort_processes(&mut procs, SortKey::Rss, true);
//! for p in &procs {
//!     println!("{} {} {} {} KiB", p.pid, p.comm, p.state.letter(), p.rss_bytes / 1024);
//! }
//! # Ok::<(), spawnkit::Error>(())
//! ```
//!
//! A [`ProcessTable`] keeps its backend loaded between refreshes: the BPF task iterator stays
//! attached, the procfs walker keeps its /proc fd and buffers, and the `_into` variants reuse
//! the caller's vector, so a monitor that refreshes every second allocates nothing per
//! process.
//!
//! Which backend may serve which caller is decided before every listing: see
//! [`ProcessTable`].

use super::parse;
use super::proc_walk::Walker;
use super::process::{Backend, Fields, Process};
use super::reader;
use super::task_iter::TaskIter;
use crate::sys::procfs as sys;
use spawnkit::{Error, Result};

/// A process table that can be read again and again.
///
/// Records come in increasing pid order, one per process (thread-group leader; threads are
/// counted in [`Process::threads`]). Processes that exit while the table is read are left
/// out, never an error. [`Fields`] says which costly fields to fill; a backend may fill a
/// field that was not asked for when it costs nothing (the BPF backend always gives the
/// uid), so `uid: None` means "not read", and `Some` is always right.
///
/// # Which backend serves whom
///
/// What a listing shows does not depend on the backend, only how fast it is read. The BPF
/// iterator sees every task of the machine, whoever reads it (reading a loaded one needs no
/// privilege), so the table lets it serve a caller only while that view is no wider than
/// the one /proc gives the same caller, and checks that before every listing, not only when
/// it loads the program: a process that listed as root and has since dropped to another uid,
/// lowered its capabilities or entered a user namespace is not served by the program it
/// loaded. The BPF backend serves a caller (the calling thread: credentials are per thread)
/// that
/// - could load it now: CAP_SYS_ADMIN, or CAP_BPF and CAP_PERFMON, in its effective set,
///   in the initial user namespace;
/// - is in the initial pid namespace, and whose /proc is that namespace's (the records carry
///   global pids);
/// - sees every process in its /proc: the procfs on its `/proc` is not mounted `hidepid=`,
///   or it holds CAP_SYS_PTRACE (which hidepid yields to), or, for `hidepid=noaccess` and
///   `invisible`, it is in the mount's `gid=` group (root's group 0 when not given).
///
/// A caller with CAP_BPF and CAP_PERFMON could read every task with a program of its own, so
/// the last rule hides nothing from it that it could not get; it keeps the promise that the
/// backend does not change the answer: a /proc mounted `hidepid=` (by an administrator, or
/// by systemd's `ProtectProc=` for a service) says what that process is meant to see.
///
/// Otherwise [`Backend::Auto`] drops the program (it is unloaded) and lists with /proc, and
/// [`Backend::Bpf`] fails with [`ErrorKind::Unsupported`](spawnkit::ErrorKind::Unsupported);
/// both load it again once the caller passes. The check costs a capget(2), a readlink and a
/// stat per listing (plus a read of the caller's mountinfo when it lacks CAP_SYS_PTRACE).
/// The /proc walker follows the caller's /proc the same way: when `/proc` is another procfs
/// than the one it has open (another mount namespace or root, a procfs mounted over it), it
/// opens that one.
///
/// Not consulted: Linux security modules that refuse ptrace reads (SELinux, AppArmor
/// policies); under such a policy and hidepid, /proc may show a caller with CAP_SYS_PTRACE
/// fewer processes than the BPF backend does.
pub struct ProcessTable {
    /// The backend asked for: `Auto`, `Bpf` or `Procfs`.
    asked: Backend,
    bpf: Option<TaskIter>,
    /// Whether the BPF iterator may be loaded (again) when the caller passes the reader
    /// check: false once loading failed for what the kernel or this build lacks, which no
    /// change of the caller's credentials mends.
    may_load: bool,
    /// The walker: the backend itself, or (with BPF) the reader of command lines, opened on
    /// first use.
    procfs: Option<Walker>,
    /// Why BPF is not in use (`"load the BPF task iterator: ..."`), when it was asked for.
    refused: Option<String>,
    /// Sorted, deduplicated copy of the pids asked for by [`ProcessTable::list_pids`].
    wanted: Vec<i32>,
    /// Room for the record of pid 1 when the BPF iterator hides it (see `patch_init`).
    scratch: Vec<Process>,
}

impl std::fmt::Debug for ProcessTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessTable")
            .field("backend", &self.backend())
            .field("fallback_reason", &self.fallback_reason())
            .finish()
    }
}

impl ProcessTable {
    /// Load a backend.
    ///
    /// - [`Backend::Bpf`]: load and attach the BPF task iterator, or fail with
    ///   [`ErrorKind::Unsupported`](spawnkit::ErrorKind::Unsupported) and the reason (not root
    ///   nor CAP_BPF+CAP_PERFMON, kernel without BPF iterators, build without the program,
    ///   or a caller whose /proc would show it less: see [which backend serves
    ///   whom](ProcessTable#which-backend-serves-whom)).
    /// - [`Backend::Procfs`]: open /proc.
    /// - [`Backend::Auto`]: BPF when it may serve the caller, else procfs;
    ///   [`ProcessTable::fallback_reason`] then says why BPF was not used.
    ///
    /// Every listing checks the caller again and may change the backend: see
    /// [`ProcessTable::select_backend`].
    pub fn new(backend: Backend) -> Result<ProcessTable> {
        let mut table = ProcessTable {
            asked: backend,
            bpf: None,
            may_load: true,
            procfs: None,
            refused: None,
            wanted: Vec::new(),
            scratch: Vec::new(),
        };
        table.select_backend()?;
        Ok(table)
    }

    /// Check the caller and choose the backend the next listing uses, as every listing does
    /// first: for [`Backend::Auto`] and [`Backend::Bpf`], the BPF iterator is kept, loaded
    /// again or dropped (the program unloaded) according to whether it may serve the caller
    /// now (see [which backend serves whom](ProcessTable#which-backend-serves-whom));
    /// [`Backend::Auto`] then falls back to procfs, and
    /// [`Backend::Bpf`] fails with [`ErrorKind::Unsupported`](spawnkit::ErrorKind::Unsupported).
    /// The walker is pointed at the caller's /proc. Gives [`ProcessTable::backend`].
    pub fn select_backend(&mut self) -> Result<Backend> {
        if self.asked != Backend::Procfs && (self.bpf.is_some() || self.may_load) {
            match reader::bpf_refusal() {
                Some(why) => {
                    // Dropping the link unloads the program (nothing else holds it).
                    self.bpf = None;
                    self.refused = Some(format!("{BPF_STEP}: {why}"));
                }
                None if self.bpf.is_none() => match TaskIter::open() {
                    Ok(it) => {
                        self.bpf = Some(it);
                        self.refused = None;
                    }
                    Err(why) => {
                        self.may_load = false;
                        self.refused = Some(format!("{BPF_STEP}: {why}"));
                    }
                },
                None => {}
            }
        }
        if self.bpf.is_none() && self.asked == Backend::Bpf {
            let why = self.refused.as_deref().unwrap_or_default();
            let why = why.strip_prefix(BPF_STEP).and_then(|w| w.strip_prefix(": ")).unwrap_or(why);
            return Err(Error::unsupported(BPF_STEP, why));
        }
        match &mut self.procfs {
            Some(w) => w.follow_proc()?,
            // The walker is the backend: open it now, so that a table that cannot read /proc
            // fails here.
            None if self.bpf.is_none() => self.procfs = Some(Walker::open()?),
            None => {}
        }
        Ok(self.backend())
    }

    /// The backend the last listing (or [`ProcessTable::new`], or
    /// [`ProcessTable::select_backend`]) chose: [`Backend::Bpf`] or [`Backend::Procfs`],
    /// never `Auto`. A table asked for [`Backend::Bpf`] says `Bpf` even while the caller is
    /// refused it: it lists with BPF or not at all.
    pub fn backend(&self) -> Backend {
        if self.bpf.is_some() || self.asked == Backend::Bpf {
            Backend::Bpf
        } else {
            Backend::Procfs
        }
    }

    /// Why [`Backend::Auto`] fell back to procfs at the last choice
    /// (`"load the BPF task iterator: ..."`); `None` when it did not, or when a backend was
    /// named.
    pub fn fallback_reason(&self) -> Option<&str> {
        match self.asked {
            Backend::Auto if self.bpf.is_none() => self.refused.as_deref(),
            _ => None,
        }
    }

    /// Read the whole table.
    pub fn list(&mut self, fields: Fields) -> Result<Vec<Process>> {
        let mut out = Vec::new();
        self.list_into(fields, &mut out)?;
        Ok(out)
    }

    /// Read the whole table into `out` (cleared first; its capacity is reused).
    pub fn list_into(&mut self, fields: Fields, out: &mut Vec<Process>) -> Result<()> {
        out.clear();
        self.select_backend()?;
        match &mut self.bpf {
            Some(it) => {
                it.read(out)?;
                self.patch_init(out)?;
                self.fill_cmdlines(fields, out)
            }
            None => self.walker()?.read_all(fields, out),
        }
    }

    /// Read only the processes among `pids` (order and duplicates do not matter; pids that
    /// do not exist, or that name a thread other than its group's leader, give nothing).
    /// The procfs backend reads just those pids' files, with no directory walk; the BPF
    /// backend reads the table (one read) and keeps those.
    pub fn list_pids(&mut self, pids: &[i32], fields: Fields) -> Result<Vec<Process>> {
        let mut out = Vec::new();
        self.list_pids_into(pids, fields, &mut out)?;
        Ok(out)
    }

    /// [`ProcessTable::list_pids`] into `out` (cleared first).
    pub fn list_pids_into(
        &mut self,
        pids: &[i32],
        fields: Fields,
        out: &mut Vec<Process>,
    ) -> Result<()> {
        out.clear();
        self.select_backend()?;
        let mut wanted = std::mem::take(&mut self.wanted);
        wanted.clear();
        wanted.extend(pids.iter().copied().filter(|&p| p > 0));
        wanted.sort_unstable();
        wanted.dedup();
        let res = match &mut self.bpf {
            Some(it) => it.read(out).and_then(|()| {
                if wanted.first() == Some(&1) {
                    self.patch_init(out)?;
                }
                out.retain(|p| wanted.binary_search(&p.pid).is_ok());
                self.fill_cmdlines(fields, out)
            }),
            None => self.walker().and_then(|w| w.read_pids(&wanted, fields, out)),
        };
        self.wanted = wanted;
        res
    }

    fn walker(&mut self) -> Result<&mut Walker> {
        match &mut self.procfs {
            Some(w) => Ok(w),
            slot => Ok(slot.insert(Walker::open()?)),
        }
    }

    /// After a BPF read: put pid 1 in when the iterator did not show it. Some kernels hide
    /// tasks from BPF task iterators (seen here: a sandbox kernel with a `task_iter_hides`
    /// hook that hides its pid 1, `process_api`); /proc still shows it, and a table without
    /// init would be wrong. One `stat` and `status` read, only when pid 1 is missing.
    fn patch_init(&mut self, out: &mut Vec<Process>) -> Result<()> {
        if out.first().is_some_and(|p| p.pid == 1) {
            return Ok(());
        }
        let mut init = std::mem::take(&mut self.scratch);
        let res = self
            .walker()
            .and_then(|w| w.read_pids(&[1], Fields { uid: true, cmdline: false }, &mut init));
        if res.is_ok() {
            if let Some(p) = init.pop() {
                out.insert(0, p);
            }
        }
        init.clear();
        self.scratch = init;
        res
    }

    /// After a BPF read: the command lines, from /proc, when asked for. A process that has
    /// exited since the read leaves the listing, as the procfs backend would skip it. (That
    /// its pid names a newcomer by then is not checked, which would cost a `stat` read per
    /// process: the kernel hands pids out cyclically, so a pid comes back only after the
    /// counter has gone round every free pid, which takes far longer than a listing unless
    /// the pid space is all but full.)
    fn fill_cmdlines(&mut self, fields: Fields, out: &mut Vec<Process>) -> Result<()> {
        if !fields.cmdline {
            return Ok(());
        }
        let w = self.walker()?;
        let mut res = Ok(());
        out.retain_mut(|p| {
            if res.is_err() {
                return true;
            }
            match w.cmdline(p.pid) {
                Ok(Some(cmdline)) => {
                    p.cmdline = Some(cmdline);
                    true
                }
                Ok(None) => false,
                Err(e) => {
                    res = Err(e);
                    true
                }
            }
        });
        res
    }
}

const BPF_STEP: &str = "load the BPF task iterator";

/// The whole process table, read once with [`Backend::Auto`]. To read it repeatedly, keep a
/// [`ProcessTable`]: loading the BPF iterator costs more than a read.
pub fn processes(fields: Fields) -> Result<Vec<Process>> {
    ProcessTable::new(Backend::Auto)?.list(fields)
}

impl Process {
    /// The start time as Unix seconds, given [`boot_time`]: `boot_time + start_ticks / HZ`
    /// (the precision of `btime` is one second, as for procps).
    pub fn start_time(&self, boot_time: u64) -> f64 {
        boot_time as f64 + self.start_ticks as f64 / clock_ticks() as f64
    }

    /// Seconds since the process started, given [`uptime`] (both count from boot, so no
    /// wall-clock rounding enters): procps `etimes` is this, truncated. 0 for a start time
    /// after `uptime`.
    pub fn elapsed(&self, uptime: f64) -> f64 {
        (uptime - self.start_ticks as f64 / clock_ticks() as f64).max(0.0)
    }

    /// The arguments from [`Process::cmdline`] (split at NULs, the final NUL dropped); none
    /// when the command line was not read or is empty (kernel threads, zombies).
    pub fn args(&self) -> impl Iterator<Item = &[u8]> {
        let raw = self.cmdline.as_deref().unwrap_or_default();
        let raw = raw.strip_suffix(b"\0").unwrap_or(raw);
        raw.split(|&b| b == 0).filter(move |_| !raw.is_empty())
    }
}

/// `/proc/PID/cmdline` of one process: the raw bytes (each argument followed by a NUL; see
/// [`Process::args`]), `Some(empty)` for a kernel thread or a zombie, `None` when the process
/// is gone (or /proc cannot be read). For a listing, ask [`Fields::cmdline`] instead.
pub fn read_cmdline(pid: i32) -> Option<Vec<u8>> {
    super::proc_walk::read_cmdline(pid)
}

/// The clock tick of `/proc/PID/stat` times (`sysconf(_SC_CLK_TCK)`, USER_HZ: 100 on Linux).
pub fn clock_ticks() -> u64 {
    sys::clock_ticks()
}

/// When the system booted, as Unix seconds: `btime` in /proc/stat, or, where that file
/// cannot be read (a /proc mounted with `subset=pid`), the same value computed the way the
/// kernel does: the real-time clock minus the time since boot, in whole seconds.
pub fn boot_time() -> Result<u64> {
    if let Some(btime) = std::fs::read("/proc/stat").ok().and_then(|text| parse::btime(&text)) {
        return Ok(btime);
    }
    boot_time_from_clocks()
}

/// btime as the kernel computes it: CLOCK_REALTIME - CLOCK_BOOTTIME, whole seconds.
fn boot_time_from_clocks() -> Result<u64> {
    let clock = |id| {
        sys::clock_gettime(id).ok_or_else(|| {
            Error::os("clock_gettime", "CLOCK_REALTIME, CLOCK_BOOTTIME", libc::EINVAL)
        })
    };
    let ((real_s, real_ns), (boot_s, boot_ns)) =
        (clock(libc::CLOCK_REALTIME)?, clock(libc::CLOCK_BOOTTIME)?);
    let nanos = (real_s - boot_s) as i128 * 1_000_000_000 + (real_ns - boot_ns) as i128;
    u64::try_from(nanos.div_euclid(1_000_000_000)).map_err(|_| {
        Error::invalid("compute", "the boot time", "the real-time clock is before the boot")
    })
}

/// Seconds since boot, suspended time included (CLOCK_BOOTTIME): the clock that
/// [`Process::start_ticks`] counts on. See [`Process::elapsed`].
pub fn uptime() -> f64 {
    sys::clock_gettime(libc::CLOCK_BOOTTIME).map_or(0.0, |(s, ns)| s as f64 + ns as f64 * 1e-9)
}

fn sorted(pids: &[i32]) -> Vec<i32> {
    let mut v = pids.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

/// Keep the processes whose pid is in `pids`.
pub fn retain_pids(procs: &mut Vec<Process>, pids: &[i32]) {
    let set = sorted(pids);
    procs.retain(|p| set.binary_search(&p.pid).is_ok());
}

/// Keep the direct children of `parents` (the processes whose ppid is one of them).
pub fn retain_children(procs: &mut Vec<Process>, parents: &[i32]) {
    let set = sorted(parents);
    procs.retain(|p| set.binary_search(&p.ppid).is_ok());
}

/// Keep `roots` and all their descendants (children, their children, ...).
pub fn retain_trees(procs: &mut Vec<Process>, roots: &[i32]) {
    let keep = tree_pids(procs, roots);
    procs.retain(|p| keep.binary_search(&p.pid).is_ok());
}

/// The pids of `roots` (those in `procs`) and of all their descendants in `procs`, sorted.
/// Descent follows ppid links through `procs` only: a descendant whose parent is missing
/// from the listing is not reached. Bad input (a ppid cycle) cannot make it loop.
pub fn tree_pids(procs: &[Process], roots: &[i32]) -> Vec<i32> {
    let mut by_ppid: Vec<(i32, usize)> =
        procs.iter().enumerate().map(|(i, p)| (p.ppid, i)).collect();
    by_ppid.sort_unstable();
    let mut seen = vec![false; procs.len()];
    let mut queue: Vec<i32> = sorted(roots);
    for (i, p) in procs.iter().enumerate() {
        if queue.binary_search(&p.pid).is_ok() {
            seen[i] = true;
        }
    }
    while let Some(parent) = queue.pop() {
        let start = by_ppid.partition_point(|&(pp, _)| pp < parent);
        for &(pp, i) in &by_ppid[start..] {
            if pp != parent {
                break;
            }
            if !seen[i] {
                seen[i] = true;
                queue.push(procs[i].pid);
            }
        }
    }
    let mut pids: Vec<i32> =
        procs.iter().zip(&seen).filter(|(_, &s)| s).map(|(p, _)| p.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// A field to sort by ([`sort_processes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SortKey {
    /// [`Process::pid`].
    Pid,
    /// [`Process::ppid`].
    Ppid,
    /// [`Process::comm`], bytewise.
    Comm,
    /// [`Process::state`], by its letter.
    State,
    /// [`Process::uid`] (not read sorts first).
    Uid,
    /// [`Process::threads`].
    Threads,
    /// [`Process::start_ticks`]: oldest first.
    StartTime,
    /// [`Process::rss_bytes`].
    Rss,
    /// [`Process::cmdline`], bytewise (not read sorts first).
    Cmdline,
}

/// Sort by `key`, smallest first, or largest first when `reverse`. The sort is stable in
/// both directions (equal keys keep their order), so sorting by a second key and then by
/// the first gives a two-key order.
pub fn sort_processes(procs: &mut [Process], key: SortKey, reverse: bool) {
    use std::cmp::Ordering;
    let cmp = |a: &Process, b: &Process| -> Ordering {
        match key {
            SortKey::Pid => a.pid.cmp(&b.pid),
            SortKey::Ppid => a.ppid.cmp(&b.ppid),
            SortKey::Comm => a.comm.as_bytes().cmp(b.comm.as_bytes()),
            SortKey::State => a.state.letter().cmp(&b.state.letter()),
            SortKey::Uid => a.uid.cmp(&b.uid),
            SortKey::Threads => a.threads.cmp(&b.threads),
            SortKey::StartTime => a.start_ticks.cmp(&b.start_ticks),
            SortKey::Rss => a.rss_bytes.cmp(&b.rss_bytes),
            SortKey::Cmdline => a.cmdline.cmp(&b.cmdline),
        }
    };
    if reverse {
        procs.sort_by(|a, b| cmp(b, a));
    } else {
        procs.sort_by(cmp);
    }
}

/// One row of a tree view ([`tree_order`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeRow {
    /// Index of the process in the slice given to [`tree_order`].
    pub index: usize,
    /// Its pid.
    pub pid: i32,
    /// 0 for a root, 1 for its children, ...
    pub depth: usize,
    /// Whether another child of the same parent (or another root, at depth 0) comes later:
    /// the tree view draws the parent's branch line on past this row.
    pub more_siblings: bool,
}

/// The order of a `ps --forest` view: each root, then its subtree depth first, children in
/// the order they have in `procs` (sort first to order siblings; procps sorts them by start
/// time). Roots, too, keep their order in `procs`, where procps shows them last first.
///
/// A root is a process whose parent is not in `procs` (or is itself). Every process appears
/// exactly once: on bad input where ppids form a cycle (no root reaches it), the first
/// process of the cycle is taken as a root, so the walk always ends.
pub fn tree_order(procs: &[Process]) -> Vec<TreeRow> {
    let n = procs.len();
    let mut by_pid: Vec<(i32, usize)> = procs.iter().enumerate().map(|(i, p)| (p.pid, i)).collect();
    by_pid.sort_by_key(|&(pid, _)| pid); // stable: with duplicate pids, the first one wins
    let parent = |i: usize| -> Option<usize> {
        let p = &procs[i];
        let at = by_pid.partition_point(|&(pid, _)| pid < p.ppid);
        match by_pid.get(at) {
            Some(&(pid, j)) if pid == p.ppid && j != i && p.ppid != p.pid => Some(j),
            _ => None,
        }
    };
    let parents: Vec<Option<usize>> = (0..n).map(parent).collect();
    // (parent index, child index), children in input order.
    let mut kids: Vec<(usize, usize)> =
        parents.iter().enumerate().filter_map(|(i, p)| p.map(|p| (p, i))).collect();
    kids.sort_unstable();

    let mut rows = Vec::with_capacity(n);
    let mut seen = vec![false; n];
    let mut stack: Vec<(usize, usize)> = Vec::new();
    let mut walk = |root: usize, rows: &mut Vec<TreeRow>, seen: &mut Vec<bool>| {
        stack.push((root, 0));
        while let Some((i, depth)) = stack.pop() {
            if seen[i] {
                continue;
            }
            seen[i] = true;
            rows.push(TreeRow { index: i, pid: procs[i].pid, depth, more_siblings: false });
            let start = kids.partition_point(|&(p, _)| p < i);
            let end = kids.partition_point(|&(p, _)| p <= i);
            // Reversed, so that the first child is popped first.
            for &(_, c) in kids[start..end].iter().rev() {
                if !seen[c] {
                    stack.push((c, depth + 1));
                }
            }
        }
    };
    for (i, p) in parents.iter().enumerate() {
        if p.is_none() {
            walk(i, &mut rows, &mut seen);
        }
    }
    for i in 0..n {
        if !seen[i] {
            walk(i, &mut rows, &mut seen);
        }
    }

    // more_siblings, from the end: a row at depth d has a later sibling when a later row is
    // at depth d with no row above depth d in between.
    let max_depth = rows.iter().map(|r| r.depth).max().unwrap_or(0);
    let mut later = vec![false; max_depth + 2];
    let mut deepest_set = 0;
    for r in rows.iter_mut().rev() {
        let d = r.depth;
        r.more_siblings = later[d];
        later[d] = true;
        for flag in later.iter_mut().take(deepest_set + 1).skip(d + 1) {
            *flag = false;
        }
        deepest_set = d;
    }
    rows
}

/// The procps-style prefix of each row's name in a tree view: `" \_ "` before a child,
/// `" |  "` under an ancestor whose siblings continue below, `"    "` otherwise; empty for
/// roots.
pub fn tree_prefixes(rows: &[TreeRow]) -> Vec<String> {
    let mut open: Vec<bool> = Vec::new();
    rows.iter()
        .map(|r| {
            let mut s = String::with_capacity(4 * r.depth);
            for level in 1..r.depth {
                s += if open.get(level).copied().unwrap_or(false) { " |  " } else { "    " };
            }
            if r.depth > 0 {
                s += " \\_ ";
            }
            if open.len() <= r.depth {
                open.resize(r.depth + 1, false);
            }
            open[r.depth] = r.more_siblings;
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Comm, State};

    fn p(pid: i32, ppid: i32) -> Process {
        Process {
            pid,
            ppid,
            comm: Comm::new(format!("p{pid}").as_bytes()),
            state: State::Sleeping,
            uid: None,
            threads: 1,
            start_ticks: pid as u64,
            rss_bytes: 0,
            cmdline: None,
        }
    }

    fn pids(procs: &[Process]) -> Vec<i32> {
        procs.iter().map(|p| p.pid).collect()
    }

    /// 1 -> {2, 3}, 2 -> {4, 5}, 5 -> {6}; 7 is a root of its own (parent 99 absent).
    fn sample() -> Vec<Process> {
        vec![p(1, 0), p(2, 1), p(3, 1), p(4, 2), p(5, 2), p(6, 5), p(7, 99)]
    }

    #[test]
    fn filters() {
        let mut v = sample();
        retain_pids(&mut v, &[6, 1, 42, 6]);
        assert_eq!(pids(&v), [1, 6]);

        let mut v = sample();
        retain_children(&mut v, &[2, 99]);
        assert_eq!(pids(&v), [4, 5, 7]);

        let mut v = sample();
        retain_trees(&mut v, &[2]);
        assert_eq!(pids(&v), [2, 4, 5, 6]);
        let mut v = sample();
        retain_trees(&mut v, &[5, 3]);
        assert_eq!(pids(&v), [3, 5, 6]);
        assert_eq!(tree_pids(&sample(), &[1]), [1, 2, 3, 4, 5, 6]);
        assert_eq!(tree_pids(&sample(), &[42]), Vec::<i32>::new());
        // Children of a root that is not listed are still its descendants.
        assert_eq!(tree_pids(&sample(), &[99]), [7]);
    }

    #[test]
    fn tree_pids_survives_cycles() {
        let v = vec![p(1, 2), p(2, 1), p(3, 3), p(4, 3)];
        assert_eq!(tree_pids(&v, &[1]), [1, 2]);
        assert_eq!(tree_pids(&v, &[3]), [3, 4]);
    }

    #[test]
    fn sorting_is_stable_both_ways() {
        let mut v = sample();
        for (q, rss) in v.iter_mut().zip([5u64, 9, 5, 1, 9, 5, 0]) {
            q.rss_bytes = rss;
        }
        sort_processes(&mut v, SortKey::Rss, false);
        assert_eq!(pids(&v), [7, 4, 1, 3, 6, 2, 5]);
        sort_processes(&mut v, SortKey::Pid, false);
        sort_processes(&mut v, SortKey::Rss, true);
        assert_eq!(pids(&v), [2, 5, 1, 3, 6, 4, 7]);
        sort_processes(&mut v, SortKey::Ppid, true);
        assert_eq!(pids(&v), [7, 6, 5, 4, 2, 3, 1]);
        v[0].comm = Comm::new(b"zz");
        sort_processes(&mut v, SortKey::Comm, true);
        assert_eq!(v[0].pid, 7);
        v[3].uid = Some(0);
        sort_processes(&mut v, SortKey::Uid, true);
        assert_eq!(v[0].uid, Some(0));
    }

    #[test]
    fn tree_order_like_ps_forest() {
        let v = sample();
        let rows = tree_order(&v);
        let got: Vec<(i32, usize, bool)> =
            rows.iter().map(|r| (r.pid, r.depth, r.more_siblings)).collect();
        assert_eq!(
            got,
            [
                (1, 0, true),
                (2, 1, true),
                (4, 2, true),
                (5, 2, false),
                (6, 3, false),
                (3, 1, false),
                (7, 0, false)
            ]
        );
        assert!(rows.iter().all(|r| v[r.index].pid == r.pid));
        let prefixes = tree_prefixes(&rows);
        assert_eq!(prefixes, ["", " \\_ ", " |   \\_ ", " |   \\_ ", " |       \\_ ", " \\_ ", ""]);
    }

    #[test]
    fn tree_order_keeps_sibling_order_and_ends_on_cycles() {
        let mut v = sample();
        sort_processes(&mut v, SortKey::Pid, true);
        let order: Vec<i32> = tree_order(&v).iter().map(|r| r.pid).collect();
        assert_eq!(order, [7, 1, 3, 2, 5, 6, 4]);

        // 1 <-> 2 form a cycle, 3 is its own parent, 4 hangs off 3, 5 duplicates pid 4.
        let v = vec![p(1, 2), p(2, 1), p(3, 3), p(4, 3), p(4, 1)];
        let rows = tree_order(&v);
        let got: Vec<(i32, usize)> = rows.iter().map(|r| (r.pid, r.depth)).collect();
        assert_eq!(got, [(3, 0), (4, 1), (1, 0), (2, 1), (4, 1)]);
        let mut indices: Vec<usize> = rows.iter().map(|r| r.index).collect();
        indices.sort_unstable();
        assert_eq!(indices, [0, 1, 2, 3, 4]);
        assert!(tree_order(&[]).is_empty());
    }

    #[test]
    fn deep_chain_is_linear() {
        let v: Vec<Process> = (1..=20_000).map(|i| p(i, i - 1)).collect();
        let rows = tree_order(&v);
        assert_eq!(rows.last().map(|r| r.depth), Some(19_999));
        assert!(rows.iter().all(|r| !r.more_siblings));
        assert_eq!(tree_pids(&v, &[19_999]), [19_999, 20_000]);
    }

    #[test]
    fn args_and_start_time() {
        let mut q = p(1, 0);
        assert_eq!(q.args().count(), 0);
        q.cmdline = Some(b"sleep\x00100\0\0x\0".to_vec());
        assert_eq!(q.args().collect::<Vec<_>>(), [&b"sleep"[..], b"100", b"", b"x"]);
        q.cmdline = Some(Vec::new());
        assert_eq!(q.args().count(), 0);
        q.cmdline = Some(b"no-nul".to_vec());
        assert_eq!(q.args().collect::<Vec<_>>(), [&b"no-nul"[..]]);
        q.start_ticks = 250;
        assert_eq!(q.start_time(1000), 1002.5);
        assert_eq!(q.elapsed(4.0), 1.5);
        assert_eq!(q.elapsed(2.0), 0.0);
        assert_eq!(clock_ticks(), 100);
        let boot = boot_time().unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        assert!(boot > 1_000_000_000 && boot <= now.as_secs());
        // Where /proc/stat is hidden, the clocks give the same btime (give or take the
        // second boundary between two clock reads).
        let computed = boot_time_from_clocks().unwrap();
        assert!(computed.abs_diff(boot) <= 1, "btime {boot}, from the clocks {computed}");
        let up = uptime();
        assert!(up > 0.0 && up <= (now.as_secs() - boot + 2) as f64);
    }
}
