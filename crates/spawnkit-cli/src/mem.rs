//! `spawnkit mem`: memory per process (RSS, PSS, USS, swap, with shared memory kept apart),
//! from `smaps_rollup`; and `spawnkit mem --shared`: shared memory regions, each counted once,
//! checked against `Shmem` in /proc/meminfo.
//!
//! Exit codes: 0; 1 when a PID given does not exist (the others are still shown) or the
//! report cannot be made; 125 for a bad option or value (clap, as for every spawnkit
//! command). A closed stdout (`spawnkit mem --all | head`) ends the output quietly, with
//! the code it would have had.

use std::fmt::Write as _;
use std::io::{self, Write};

use clap::builder::TypedValueParser as _;
use serde_json::{json, Value};
use spawnkit_observe::{
    self as observe, MapsMethod, Memory, MemoryStatus, Selection, SharedRegion, SharedReport,
};

use crate::out::{note, stdout_writer, Failure};

/// A PID given does not exist, or the report could not be made.
const FAILED: i32 = 1;

/// Processes shown when neither PIDs, --top nor --all is given.
const DEFAULT_TOP: usize = 20;

const AFTER_HELP: &str = "\
Examples:
  spawnkit mem                        (the 20 processes with the largest RSS)
  spawnkit mem 1234 5678              (these processes, in this order)
  spawnkit mem --all --sort uss       (every process, largest USS first)
  spawnkit mem --top 5 --bytes        (exact byte counts)
  spawnkit mem --json $$              ([{\"pid\": ..., \"rss\": ..., ...}])
  spawnkit mem --shared               (shared memory regions, each once, and the check
                                       against Shmem in /proc/meminfo)
  spawnkit mem --shared --json        ([{\"dev\": \"0:1\", \"inode\": ..., \"pids\": [...]}])
  spawnkit mem --shared 1234          (only the regions process 1234 maps)

Columns (per process, from /proc/PID/smaps_rollup):
  RSS    resident set size: every page the process maps, shared or not.
  PSS    proportional set size: each page divided by the number of processes mapping it;
         PSS summed over all processes is the memory they use together.
  USS    unique set size: memory the process's exit surely frees. Unlike smem and psutil,
         shared memory (shmem: MAP_SHARED|MAP_ANONYMOUS, SysV segments, memfds, tmpfs
         files) mapped by this process alone is NOT counted here: those pages belong to
         the shmem object, which outlives the process whenever anything else holds it
         (another mapping or fd, a file not deleted). (For a process that maps shmem, its
         /proc/PID/smaps is read to find them, and /proc/PID/pagemap for a private
         mapping of a shmem file whose copied-on-write pages are shared with a forked
         relative; for the others the rollup suffices.)
  SHMEM  the shmem part of PSS (Pss_Shmem).
  SWAP   swapped-out memory (shmem swap included).
  '-' in every column: permission denied (another user's process: run as root; as root,
  a process with capabilities this one lacks, or outside its user namespace).
  Processes without user memory (kernel threads, zombies) are left out of --top and
  --all, and shown as 0 when named.

Shared regions (--shared):
  Per-process numbers miss shared memory whose writers have exited: a region mapped
  MAP_SHARED|MAP_ANONYMOUS by a parent and written by children that are gone shows ~0
  RSS in the parent, yet its pages still use memory. --shared reports objects instead:
  every shared mapping backed by shmem (/dev/zero (deleted), /SYSV..., /memfd:...,
  files on tmpfs such as /dev/shm/...) of every process, found with the PROCMAP_QUERY
  ioctl (Linux 6.11+) or by parsing /proc/PID/maps, keyed by (device, inode) so each
  object appears once with every process that maps it (a SysV segment's inode is its id,
  which every IPC namespace counts from 0: segments are told apart by their inode's
  generation as root, else by the mapper's IPC namespace; one of another namespace has
  ipc:[N] after its name). Plus SysV segments no process attaches
  (/proc/sysvipc/shm; this namespace's only; SHM_HUGETLB ones left out where their rss
  gives them away, as this kernel's does: huge pages are not shmem, and attached ones, on
  hugetlbfs, are left out likewise).
  DEV:INODE  the object; SIZE its virtual size; RESIDENT the memory it really holds
  (st_blocks of /proc/PID/map_files/START-END: pages in RAM or swap, including those
  written by processes that have exited; '-' when unknown: reading map_files needs
  CAP_SYS_ADMIN, and a process whose main thread has exited before its other threads has
  no map_files, so its regions are measured only through another process mapping them); PIDS
  the processes that map it; KIND anonymous, sysv, memfd, tmpfs or other.
  The footer compares the total with Shmem in /proc/meminfo (all shmem in RAM). The
  difference is shmem no process maps: files on tmpfs mounts (/dev/shm, /run, /tmp if
  tmpfs) that are not mapped, and kernel-internal users (GPU buffers...). It can be
  negative when regions have pages in swap, which RESIDENT counts and Shmem does not.
  A 'not read' line counts the processes whose mappings could not be read (another
  user's, without root; as root, those holding capabilities this one lacks or outside
  its user namespace): their regions are missing from the list and the total.

JSON (--json):
  Per process: an array of objects with the keys pid, comm, status (measured, no-memory,
  denied), rss, pss, uss, shmem (= pss_shmem), swap, pss_anon, pss_file, shmem_private
  (the shmem pages left out of uss), swap_pss, shared_clean, shared_dirty,
  private_clean, private_dirty; sizes in bytes (integers), null when denied.
  With --shared: an array of objects with the keys dev (\"MAJOR:MINOR\"), inode, name,
  kind, size_bytes, resident_bytes (null when unknown), pids and ipc_ns (for a SysV
  segment, the inode of /proc/PID/ns/ipc of the first process seen mapping it; else null).
  The array stays a plain list: the total and the Shmem check go to stderr with -v, as one
  JSON object; without -v, stderr says what could not be read, if anything.

Exit status:
  0 on success (a stdout closed early, as by 'head', is no failure); 1 when a PID given
  does not exist (the others are still shown) or the report cannot be made; 125 for a bad
  option or value.";

/// Options of `spawnkit mem`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct MemArgs {
    /// Processes to show, in this order (default: the --top 20 by RSS).
    #[arg(value_name = "PID", value_parser = Selection::parse_pid)]
    pub pids: Vec<i32>,

    /// Show the N processes with the largest RSS (with --shared: the N largest regions).
    #[arg(
        short = 'n',
        long,
        value_name = "N",
        conflicts_with_all = ["pids", "all"],
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(u32).range(0..).map(|n| n as usize)
    )]
    pub top: Option<usize>,

    /// Show every process that has user memory.
    #[arg(short = 'a', long, conflicts_with = "pids")]
    pub all: bool,

    /// Order of the rows, largest first (pid and comm: ascending; processes whose memory
    /// cannot be read come last). Default: rss, or the order of the PIDs given.
    #[arg(short = 's', long, value_name = "KEY", value_enum, conflicts_with = "shared")]
    pub sort: Option<SortKey>,

    /// Shared memory regions, each counted once, instead of processes.
    #[arg(long, conflicts_with = "all")]
    pub shared: bool,

    /// How --shared enumerates mappings: auto (PROCMAP_QUERY when the kernel has it, else
    /// maps-text), procmap-query, maps-text.
    #[arg(long, value_name = "METHOD", default_value = "auto", value_parser = str::parse::<MapsMethod>,
          requires = "shared")]
    pub method: MapsMethod,

    /// Sizes in bytes (exact) instead of human-readable units.
    #[arg(short = 'b', long, conflicts_with = "kib", help_heading = "Output")]
    pub bytes: bool,

    /// Sizes in KiB instead of human-readable units.
    #[arg(short = 'k', long, help_heading = "Output")]
    pub kib: bool,

    /// Print a JSON array of objects instead of a table (sizes in bytes).
    #[arg(long, help_heading = "Output")]
    pub json: bool,

    /// Leave out the header line (and, with --shared, the footer).
    #[arg(long, alias = "no-heading", help_heading = "Output")]
    pub no_headers: bool,

    /// Say on stderr how the numbers were read (and with --shared --json, the totals).
    #[arg(short = 'v', long, help_heading = "Output")]
    pub verbose: bool,
}

/// What to sort the process rows by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SortKey {
    Rss,
    Pss,
    Uss,
    Shmem,
    Swap,
    Pid,
    Comm,
}

pub fn main(args: &MemArgs) -> i32 {
    let res = if args.shared { run_shared(args) } else { run_processes(args) };
    match res {
        Ok(code) => code,
        Err(Failure::Pipe) => 0,
        Err(Failure::Msg(m)) => {
            note!("spawnkit mem: {m}");
            FAILED
        }
    }
}

/// How sizes are printed in tables.
#[derive(Clone, Copy)]
enum Units {
    Human,
    Bytes,
    Kib,
}

impl Units {
    fn of(args: &MemArgs) -> Units {
        if args.bytes {
            Units::Bytes
        } else if args.kib {
            Units::Kib
        } else {
            Units::Human
        }
    }

    fn show(self, n: u64) -> String {
        match self {
            Units::Bytes => n.to_string(),
            Units::Kib => n.div_ceil(1024).to_string(),
            Units::Human => human(n),
        }
    }
}

/// 0, 512B, 4.0K, 12K, 1.5M, 100M, 2.0G: binary units, one decimal below 10. The choice is
/// made on the value as shown, rounded: 9.96M shows as 10M (not 10.0M), 1023.6M as 1.0G (not
/// 1024M).
fn human(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "K", "M", "G", "T", "P"];
    if n == 0 {
        return "0".into();
    }
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n}B")
    } else if v < 9.95 {
        format!("{v:.1}{}", UNITS[i])
    } else if v.round() < 1024.0 || i == UNITS.len() - 1 {
        format!("{:.0}{}", v, UNITS[i])
    } else {
        format!("1.0{}", UNITS[i + 1])
    }
}

// ---------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------

fn run_processes(args: &MemArgs) -> Result<i32, Failure> {
    let mut code = 0;
    let mut rows: Vec<Memory> = if !args.pids.is_empty() {
        let rows = observe::memory_of(&args.pids)?;
        for pid in &args.pids {
            if !rows.iter().any(|m| m.pid == *pid) {
                note!("spawnkit mem: no process {pid}");
                code = FAILED;
            }
        }
        rows
    } else if args.all {
        observe::memory_all()?
    } else {
        // Processes without memory rank last by RSS (0); keep them out.
        let n = args.top.unwrap_or(DEFAULT_TOP);
        observe::top_by_rss(n)?
    };
    if args.pids.is_empty() {
        rows.retain(|m| m.status != MemoryStatus::NoMemory);
    }
    match args.sort {
        Some(key) => sort_rows(&mut rows, key),
        None if args.pids.is_empty() => sort_rows(&mut rows, SortKey::Rss),
        None => {}
    }
    if args.verbose {
        let shmem = rows.iter().filter(|m| m.pss_shmem > 0).count();
        let denied = rows.iter().filter(|m| m.status == MemoryStatus::Denied).count();
        note!(
            "spawnkit mem: {} processes from smaps_rollup; {shmem} with shmem (their smaps \
             read too); {denied} denied",
            rows.len()
        );
    }
    let mut out = stdout_writer();
    let res = if args.json {
        let list: Vec<Value> = rows.iter().map(memory_json).collect();
        write_json(&mut out, &list)
    } else {
        write_process_table(&mut out, &rows, Units::of(args), !args.no_headers)
    };
    written(code, res.and_then(|()| out.flush()))
}

/// The exit code once the output is written: `code` when it was (or when stdout was closed
/// early: a reader that stops reading is no failure, and a PID that does not exist stays one).
fn written(code: i32, res: io::Result<()>) -> Result<i32, Failure> {
    match res {
        Ok(()) => Ok(code),
        Err(e) => match Failure::from(e) {
            Failure::Pipe => Ok(code),
            other => Err(other),
        },
    }
}

fn write_json(out: &mut impl Write, list: &[Value]) -> io::Result<()> {
    serde_json::to_writer(&mut *out, list).map_err(io::Error::from)?;
    out.write_all(b"\n")
}

fn sort_rows(rows: &mut [Memory], key: SortKey) {
    let size = |m: &Memory| match key {
        SortKey::Rss => m.rss,
        SortKey::Pss => m.pss,
        SortKey::Uss => m.uss,
        SortKey::Shmem => m.pss_shmem,
        SortKey::Swap => m.swap,
        SortKey::Pid | SortKey::Comm => 0,
    };
    match key {
        SortKey::Pid => rows.sort_by_key(|m| m.pid),
        SortKey::Comm => rows.sort_by(|a, b| a.comm.as_bytes().cmp(b.comm.as_bytes())),
        // Unknown sizes (permission denied) last.
        _ => rows.sort_by(|a, b| {
            let denied = |m: &Memory| m.status == MemoryStatus::Denied;
            denied(a).cmp(&denied(b)).then(size(b).cmp(&size(a))).then(a.pid.cmp(&b.pid))
        }),
    }
}

fn memory_json(m: &Memory) -> Value {
    let n = |v: u64| if m.status == MemoryStatus::Denied { Value::Null } else { json!(v) };
    json!({
        "pid": m.pid,
        "comm": m.comm.to_string_lossy(),
        "status": m.status.as_str(),
        "rss": n(m.rss),
        "pss": n(m.pss),
        "uss": n(m.uss),
        "shmem": n(m.pss_shmem),
        "swap": n(m.swap),
        "pss_anon": n(m.pss_anon),
        "pss_file": n(m.pss_file),
        "shmem_private": n(m.shmem_private),
        "swap_pss": n(m.swap_pss),
        "shared_clean": n(m.shared_clean),
        "shared_dirty": n(m.shared_dirty),
        "private_clean": n(m.private_clean),
        "private_dirty": n(m.private_dirty),
    })
}

/// A comm as one table cell: control characters (a newline in a comm) as `?`.
fn cell(comm: &str) -> String {
    comm.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

fn write_process_table(
    out: &mut impl Write,
    rows: &[Memory],
    units: Units,
    headers: bool,
) -> io::Result<()> {
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|m| {
            if m.status == MemoryStatus::Denied {
                return std::array::from_fn(|_| "-".to_string());
            }
            [m.rss, m.pss, m.uss, m.pss_shmem, m.swap].map(|v| units.show(v))
        })
        .collect();
    let pid_w = rows.iter().map(|m| m.pid.to_string().len()).max().unwrap_or(0).max(3);
    let mut w = [3usize, 3, 3, 5, 4];
    for c in &cells {
        for (i, s) in c.iter().enumerate() {
            w[i] = w[i].max(s.len());
        }
    }
    let mut line = String::new();
    if headers {
        let h = ["RSS", "PSS", "USS", "SHMEM", "SWAP"];
        let _ = write!(line, "{:>pid_w$}", "PID");
        for (i, name) in h.iter().enumerate() {
            let _ = write!(line, " {:>1$}", name, w[i]);
        }
        line.push_str(" COMM\n");
        out.write_all(line.as_bytes())?;
    }
    for (m, c) in rows.iter().zip(&cells) {
        line.clear();
        let _ = write!(line, "{:>pid_w$}", m.pid);
        for (i, s) in c.iter().enumerate() {
            let _ = write!(line, " {:>1$}", s, w[i]);
        }
        let _ = writeln!(line, " {}", cell(&m.comm.to_string_lossy()));
        out.write_all(line.as_bytes())?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Shared regions
// ---------------------------------------------------------------------------------------

fn run_shared(args: &MemArgs) -> Result<i32, Failure> {
    let mut code = 0;
    let mut report = if args.pids.is_empty() {
        observe::shared_regions_with(args.method, None)?
    } else {
        for pid in &args.pids {
            if std::fs::metadata(format!("/proc/{pid}")).is_err() {
                note!("spawnkit mem: no process {pid}");
                code = FAILED;
            }
        }
        observe::shared_regions_with(args.method, Some(&args.pids))?
    };
    let found = report.regions.len();
    if let Some(n) = args.top {
        report.regions.truncate(n);
    }
    if args.verbose {
        let summary = json!({
            "method": report.method.as_str(),
            "processes_scanned": report.processes_scanned,
            "processes_denied": report.processes_denied,
            "regions": found,
            "total_resident_bytes": report.total_resident_bytes,
            "unknown_resident": report.unknown_resident,
            "map_files_denied": report.map_files_denied,
            "meminfo_shmem_bytes": report.meminfo_shmem_bytes,
            "difference_bytes": report.difference_bytes,
        });
        if args.json {
            note!("{summary}");
        } else {
            note!(
                "spawnkit mem: mappings read with {} from {} processes ({} denied)",
                report.method.as_str(),
                report.processes_scanned,
                report.processes_denied
            );
        }
    }
    // What could not be read: in the table's footer; else (JSON, --no-headers) on stderr,
    // unless -v with --json already put the counts there.
    let footer_says_it = !args.json && !args.no_headers;
    let summary_says_it = args.verbose && args.json;
    if !footer_says_it && !summary_says_it {
        if let Some(what) = unread(&report) {
            note!("spawnkit mem: {what}");
        }
    }
    let mut out = stdout_writer();
    let res = if args.json {
        let list: Vec<Value> = report.regions.iter().map(region_json).collect();
        write_json(&mut out, &list)
    } else {
        let footer = (!args.no_headers).then_some(Footer { found, pids: &args.pids });
        write_shared_table(&mut out, &report, Units::of(args), footer)
    };
    written(code, res.and_then(|()| out.flush()))
}

/// What the report could not read, in words; `None` when it read everything.
fn unread(report: &SharedReport) -> Option<String> {
    let mut parts = Vec::new();
    match report.processes_denied {
        0 => {}
        1 => parts.push(
            "1 process could not be read (permission denied): its regions are missing".to_string(),
        ),
        n => parts.push(format!(
            "{n} processes could not be read (permission denied): their regions are missing"
        )),
    }
    match report.unknown_resident {
        0 => {}
        1 => parts.push(format!(
            "1 region has an unknown resident size, not in the total ({})",
            unknown_why(report)
        )),
        n => parts.push(format!(
            "{n} regions have an unknown resident size, not in the total ({})",
            unknown_why(report)
        )),
    }
    if parts.is_empty() {
        return None;
    }
    if !caller_is_root() {
        parts.push("run as root to read them".into());
    } else if report.processes_denied > 0 {
        parts.push(
            "root too is refused a process that holds capabilities this one lacks, or one \
             outside this user namespace"
                .into(),
        );
    }
    Some(parts.join("; "))
}

fn caller_is_root() -> bool {
    spawnkit::process::geteuid() == 0
}

/// Why regions' resident sizes are unknown: reading /proc/PID/map_files was refused, or
/// (when it was not) no mapper had map_files to read: a process whose main thread has exited
/// before its other threads has none, and one that unmapped the region meanwhile has lost it.
fn unknown_why(report: &SharedReport) -> &'static str {
    if report.map_files_denied {
        "reading /proc/PID/map_files needs CAP_SYS_ADMIN"
    } else {
        "no /proc/PID/map_files: its mappers' main threads have exited, or they unmapped it"
    }
}

/// The footer's advice about processes /proc refused us. As another user: run as root. As
/// root, that advice would be wrong: root too is refused a process that holds capabilities
/// it lacks (pid 1 of a sandbox), and root of a user namespace is refused every process
/// outside it.
fn refused_short() -> &'static str {
    if caller_is_root() {
        "refused even to root: capabilities or user namespace"
    } else {
        "run as root"
    }
}

fn region_json(r: &SharedRegion) -> Value {
    json!({
        "dev": r.dev.to_string(),
        "inode": r.inode,
        "name": r.name,
        "kind": r.kind.as_str(),
        "size_bytes": r.size_bytes,
        "resident_bytes": r.resident_bytes,
        "pids": r.pids,
        "ipc_ns": r.ipc_ns,
    })
}

/// The PIDS cell: up to 8 pids, then `+N`.
fn pid_list(pids: &[i32]) -> String {
    if pids.is_empty() {
        return "-".into();
    }
    let mut s: Vec<String> = pids.iter().take(8).map(i32::to_string).collect();
    if pids.len() > 8 {
        s.push(format!("+{}", pids.len() - 8));
    }
    s.join(",")
}

/// What the footer of the --shared table needs beyond the report.
struct Footer<'a> {
    /// Regions found (before --top).
    found: usize,
    /// The PIDs the report was restricted to (empty: every process).
    pids: &'a [i32],
}

fn write_shared_table(
    out: &mut impl Write,
    report: &SharedReport,
    units: Units,
    footer: Option<Footer<'_>>,
) -> io::Result<()> {
    let cells: Vec<[String; 6]> = report
        .regions
        .iter()
        .map(|r| {
            [
                r.dev.to_string(),
                r.inode.to_string(),
                units.show(r.size_bytes),
                r.resident_bytes.map_or("-".to_string(), |b| units.show(b)),
                pid_list(&r.pids),
                r.kind.as_str().to_string(),
            ]
        })
        .collect();
    let names = ["DEV", "INODE", "SIZE", "RESIDENT", "PIDS", "KIND"];
    let mut w = names.map(str::len);
    for c in &cells {
        for (i, s) in c.iter().enumerate() {
            w[i] = w[i].max(s.len());
        }
    }
    let right = [false, true, true, true, false, false];
    let mut line = String::new();
    let row = |line: &mut String, c: &[String]| {
        for (i, s) in c.iter().enumerate() {
            if i > 0 {
                line.push(' ');
            }
            if right[i] {
                let _ = write!(line, "{:>1$}", s, w[i]);
            } else {
                let _ = write!(line, "{:<1$}", s, w[i]);
            }
        }
    };
    if footer.is_some() {
        row(&mut line, &names.map(String::from));
        line.push_str(" NAME\n");
        out.write_all(line.as_bytes())?;
    }
    let own_ipc_ns = std::fs::metadata("/proc/self/ns/ipc").ok().map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.ino()
    });
    for (r, c) in report.regions.iter().zip(&cells) {
        line.clear();
        row(&mut line, c);
        let _ = write!(line, " {}", cell(&r.name));
        // A SysV segment of another IPC namespace (a container's): its id means nothing here.
        if let Some(ns) = r.ipc_ns.filter(|&ns| Some(ns) != own_ipc_ns) {
            let _ = write!(line, " ipc:[{ns}]");
        }
        line.push('\n');
        out.write_all(line.as_bytes())?;
    }
    let Some(footer) = footer else { return Ok(()) };
    line.clear();
    let total = units.show(report.total_resident_bytes);
    let unknown = match report.unknown_resident {
        0 => String::new(),
        n => format!(", {n} of unknown size ({})", unknown_why(report)),
    };
    let denied = match report.processes_denied {
        0 => String::new(),
        1 => format!(
            "not read                {:>10} process (permission denied: its regions are \
             missing; {})\n",
            1,
            refused_short()
        ),
        n => format!(
            "not read                {n:>10} processes (permission denied: their regions are \
             missing; {})\n",
            refused_short()
        ),
    };
    let plural = if footer.found == 1 { "" } else { "s" };
    let _ = writeln!(
        line,
        "\ntotal resident          {total:>10}  ({} region{plural}{unknown})",
        footer.found
    );
    if let Some(shmem) = report.meminfo_shmem_bytes {
        let _ = writeln!(line, "Shmem in /proc/meminfo  {:>10}", units.show(shmem));
    }
    if let Some(d) = report.difference_bytes {
        let shown =
            if d < 0 { format!("-{}", units.show(d.unsigned_abs())) } else { units.show(d as u64) };
        let why = if footer.pids.is_empty() {
            "(shmem no process maps: unmapped tmpfs files, kernel-internal)"
        } else {
            "(system-wide Shmem minus these processes' regions)"
        };
        let _ = writeln!(line, "difference              {shown:>10}  {why}");
    }
    line.push_str(&denied);
    out.write_all(line.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn human_sizes_change_unit_and_precision_as_shown() {
        let k = 1024u64;
        assert_eq!(human(0), "0");
        assert_eq!(human(512), "512B");
        assert_eq!(human(1023), "1023B");
        assert_eq!(human(k), "1.0K");
        assert_eq!(human(4 * k), "4.0K");
        assert_eq!(human(12 * k), "12K");
        assert_eq!(human(3 * k * k / 2), "1.5M");
        assert_eq!(human(9 * k * k + 972 * k), "9.9M"); // 9.949M
        assert_eq!(human(9 * k * k + 1000 * k), "10M"); // 9.977M, not 10.0M
        assert_eq!(human(1023 * k * k + 700 * k), "1.0G"); // 1023.7M, not 1024M
        assert_eq!(human(1023 * k * k + 400 * k), "1023M");
        assert_eq!(human(2 * k * k * k), "2.0G");
        assert_eq!(human(u64::MAX), "16384P");
    }
}
