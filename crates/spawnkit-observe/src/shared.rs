//! Shared memory regions, each counted once.
//!
//! Per-process numbers cannot show shared memory honestly: a region mapped
//! `MAP_SHARED | MAP_ANONYMOUS` by a parent, written by children that have since exited,
//! shows ~0 RSS and PSS in every survivor (nobody has its pages in a page table any more), yet
//! its pages still occupy memory and are counted in `Shmem` of /proc/meminfo. The memory
//! belongs to the object behind the mapping, a file of the kernel's shmem (tmpfs) file system,
//! so [`shared_regions`] reports objects, not mappings:
//!
//! 1. For every process, enumerate its shared file-backed mappings with the `PROCMAP_QUERY`
//!    ioctl on an fd of `/proc/PID/maps` (Linux 6.11+; the kernel filters and returns binary
//!    records), or by parsing the text of `/proc/PID/maps` on older kernels.
//! 2. Keep those backed by shmem: the kernel's internal shm mount (shared anonymous memory,
//!    `/dev/zero (deleted)`; SysV segments, `/SYSV...`; memfds, `/memfd:...`) or a tmpfs
//!    mount (`/dev/shm/...`, `/run/...`).
//! 3. Key them by (device, inode): one [`SharedRegion`] per object, with every process that
//!    maps it. A SysV segment's inode number is its id, which each IPC namespace counts from
//!    0, so segments are told apart by their inode's generation too (random per shmem inode,
//!    from a file handle of the `map_files` link; needs the same privilege as step 4), or
//!    else by the IPC namespace of the process that maps them.
//! 4. Measure the object once: `stat` of `/proc/PID/map_files/START-END` of one of its
//!    mappings follows the link to the object itself; `st_blocks` × 512 is its real
//!    allocation, which still counts pages written by processes that have exited, and
//!    `st_size` its virtual size. (Reading `map_files` needs CAP_SYS_ADMIN or
//!    CAP_CHECKPOINT_RESTORE: without it the resident size is unknown, `None`.)
//! 5. Add the SysV segments that no process attaches (`/proc/sysvipc/shm`, nattch 0): they
//!    too hold memory. Only this process's IPC namespace can be listed so; unattached
//!    segments of other namespaces (containers) show only in the difference below.
//!
//! The [`SharedReport`] then compares the total with `Shmem` of /proc/meminfo. The difference
//! is shmem that no process maps: files on tmpfs mounts (/dev/shm, /run, /tmp when it is a
//! tmpfs) that are not mapped, plus kernel-internal users (GPU buffers, ...). It can be
//! negative when regions have pages in swap (st_blocks counts them, `Shmem` does not).

use std::collections::{BTreeSet, HashMap};
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;

use crate::sys::procmap;
use spawnkit::{Error, Result};

/// A device number, as `/proc/PID/maps` and `stat` show it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dev {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

impl Dev {
    /// From a `dev_t` (st_dev), with glibc's encoding.
    pub fn from_dev_t(dev: u64) -> Dev {
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
        let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
        Dev { major: major as u32, minor: minor as u32 }
    }

    /// As a `dev_t` (st_dev), with glibc's encoding.
    pub fn to_dev_t(self) -> u64 {
        let (major, minor) = (self.major as u64, self.minor as u64);
        (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12) | ((major & !0xfff) << 32)
    }
}

impl std::fmt::Display for Dev {
    /// `MAJOR:MINOR` in decimal, as in /proc/PID/mountinfo and lsblk.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// What kind of shmem object a region is, from its device and name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SharedKind {
    /// `mmap(MAP_SHARED | MAP_ANONYMOUS)` (or a shared mapping of /dev/zero): named
    /// `/dev/zero (deleted)` (or `[anon_shmem:NAME]` once named with PR_SET_VMA_ANON_NAME), on
    /// the kernel's internal shm mount.
    Anonymous,
    /// A System V shared memory segment (shmget/shmat): `/SYSV<key in hex> (deleted)`; its
    /// inode number is the shmid.
    SysV,
    /// A memfd (memfd_create): `/memfd:NAME (deleted)`.
    Memfd,
    /// A file on a tmpfs mount: `/dev/shm/...` (POSIX shm_open), `/run/...`, ...
    Tmpfs,
    /// Another object of the internal shm mount (a driver's buffer, ...).
    Other,
}

impl SharedKind {
    /// Short lower-case name: `anonymous`, `sysv`, `memfd`, `tmpfs`, `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            SharedKind::Anonymous => "anonymous",
            SharedKind::SysV => "sysv",
            SharedKind::Memfd => "memfd",
            SharedKind::Tmpfs => "tmpfs",
            SharedKind::Other => "other",
        }
    }
}

/// One shmem object (file of tmpfs or of the internal shm mount), counted once however many
/// processes and mappings share it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedRegion {
    /// Device of the file system holding the object (for the internal shm mount typically
    /// 0:1).
    pub dev: Dev,
    /// Inode number of the object (for SysV segments: the shmid).
    pub inode: u64,
    /// The name the mappings show in /proc/PID/maps: `/dev/zero (deleted)`, `/SYSV00000000
    /// (deleted)`, `/memfd:NAME (deleted)`, `/dev/shm/NAME` (bytes that are not UTF-8 become
    /// U+FFFD).
    pub name: String,
    /// What kind of object it is.
    pub kind: SharedKind,
    /// Virtual size in bytes: the object's size (`st_size`) when it could be stat'ed, else the
    /// largest extent a mapping covers (offset + length).
    pub size_bytes: u64,
    /// Memory the object really holds, in bytes: `st_blocks` × 512 of the object behind
    /// `/proc/PID/map_files/START-END` (its pages in RAM, or in swap), which includes pages
    /// written by processes that have exited. For a SysV segment nobody attaches: `rss + swap`
    /// of /proc/sysvipc/shm. `None` when it could not be read (not root).
    pub resident_bytes: Option<u64>,
    /// The processes that map it, sorted, each once (empty for a SysV segment nobody
    /// attaches). In a report restricted to some processes ([`shared_regions_of`]), only
    /// those among them.
    pub pids: Vec<i32>,
    /// For a SysV segment: the IPC namespace of the first process seen mapping it, as the
    /// inode number of `/proc/PID/ns/ipc` (`ipc:[N]`): the namespace it belongs to, unless
    /// that process has moved to another since it attached the segment (for an unattached
    /// segment, this process's own). Segment ids, and so the inode numbers, are counted per
    /// namespace: segments of two namespaces can share `(dev, inode)`, and this says which
    /// is which. `None` for every other kind.
    pub ipc_ns: Option<u64>,
}

/// How the mappings were (or are to be) enumerated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MapsMethod {
    /// `ProcmapQuery` when the kernel has it, else `MapsText` (only as a request; a report
    /// names the method used).
    #[default]
    Auto,
    /// The `PROCMAP_QUERY` ioctl on an fd of /proc/PID/maps (Linux 6.11+).
    ProcmapQuery,
    /// Parsing the text of /proc/PID/maps.
    MapsText,
}

impl MapsMethod {
    /// Every method, in the order help texts list them.
    pub const ALL: [MapsMethod; 3] =
        [MapsMethod::Auto, MapsMethod::ProcmapQuery, MapsMethod::MapsText];

    /// `auto`, `procmap-query` or `maps-text`.
    pub fn as_str(self) -> &'static str {
        match self {
            MapsMethod::Auto => "auto",
            MapsMethod::ProcmapQuery => "procmap-query",
            MapsMethod::MapsText => "maps-text",
        }
    }
}

impl std::fmt::Display for MapsMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for MapsMethod {
    type Err = spawnkit::ParseValueError;
    /// A name [`MapsMethod::as_str`] gives, or the short `ioctl` (procmap-query) and `maps`
    /// (maps-text).
    fn from_str(s: &str) -> std::result::Result<MapsMethod, Self::Err> {
        match s {
            "ioctl" => Ok(MapsMethod::ProcmapQuery),
            "maps" => Ok(MapsMethod::MapsText),
            _ => MapsMethod::ALL.into_iter().find(|m| m.as_str() == s).ok_or_else(|| {
                spawnkit::ParseValueError::new(format!(
                    "'{s}' is not a method: auto, procmap-query or maps-text"
                ))
            }),
        }
    }
}

/// Every shmem region, each once, and the check against /proc/meminfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedReport {
    /// The regions, largest `resident_bytes` first (unknown last), then by size, device,
    /// inode, IPC namespace.
    pub regions: Vec<SharedRegion>,
    /// Sum of the known `resident_bytes`.
    pub total_resident_bytes: u64,
    /// How many regions have an unknown `resident_bytes` (not counted in the total).
    pub unknown_resident: usize,
    /// Whether reading `/proc/PID/map_files` was refused (it needs CAP_SYS_ADMIN or
    /// CAP_SYS_CHECKPOINT_RESTORE in the initial user namespace): then every resident size is
    /// unknown. When it was not, a region is unknown only if no process mapping it had
    /// `map_files` to read: their main threads exited before their other threads, or they
    /// unmapped it or exited while the walk went on.
    pub map_files_denied: bool,
    /// `Shmem` of /proc/meminfo in bytes, read after the walk: all shmem and tmpfs pages in
    /// RAM, system-wide. `None` if it could not be read.
    pub meminfo_shmem_bytes: Option<u64>,
    /// `meminfo_shmem_bytes - total_resident_bytes`: shmem nobody maps (tmpfs files such as
    /// /dev/shm or /run that are not mapped, kernel-internal users), minus swapped pages the
    /// total counts. Only meaningful for a report of every process.
    pub difference_bytes: Option<i64>,
    /// The method used: `ProcmapQuery` or `MapsText`, never `Auto`.
    pub method: MapsMethod,
    /// Processes whose mappings were read.
    pub processes_scanned: usize,
    /// Processes whose mappings could not be read (permission denied): their regions may be
    /// missing.
    pub processes_denied: usize,
}

/// Every shmem region of every process (and SysV segments nobody attaches), each once.
pub fn shared_regions() -> Result<SharedReport> {
    shared_regions_with(MapsMethod::Auto, None)
}

/// The shmem regions mapped by the given processes, each once. Processes that do not exist
/// (or vanish meanwhile) are skipped.
pub fn shared_regions_of(pids: &[i32]) -> Result<SharedReport> {
    shared_regions_with(MapsMethod::Auto, Some(pids))
}

/// [`shared_regions`] or [`shared_regions_of`] (with `Some(pids)`) by a chosen method.
/// `MapsMethod::ProcmapQuery` fails with [`spawnkit::ErrorKind::Unsupported`] when the kernel
/// lacks the ioctl.
pub fn shared_regions_with(method: MapsMethod, pids: Option<&[i32]>) -> Result<SharedReport> {
    let mut walk = Walk::new(method);
    match pids {
        Some(pids) => {
            for &pid in pids {
                walk.process(pid)?;
            }
        }
        None => {
            for pid in list_pids()? {
                walk.process(pid)?;
            }
            walk.add_unattached_sysv();
        }
    }
    Ok(walk.finish())
}

/// The numeric entries of /proc: every process (thread-group leader) visible here.
pub(crate) fn list_pids() -> Result<Vec<i32>> {
    let dir = std::fs::read_dir("/proc")
        .map_err(|e| Error::os("read_dir", "/proc", e.raw_os_error().unwrap_or(libc::EIO)))?;
    let mut pids: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| p > 0)
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

/// `/proc/PID/task/TID` of a thread of `pid` other than its leader, `None` when it has none.
/// Once the leader (main thread) has exited while other threads run, the files of
/// `/proc/PID` that go through the leader's mm (`maps`, `smaps`, `smaps_rollup`, `pagemap`,
/// `map_files`) see no memory at all; those of another thread's task directory show the
/// process's (all but `map_files`, which task directories lack).
pub(crate) fn live_thread_dir(pid: i32) -> Option<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let tid = tasks
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .find(|&tid| tid != pid)?;
    Some(format!("/proc/{pid}/task/{tid}"))
}

/// Which device numbers hold shmem: the internal shm mount, tmpfs mounts of this mount
/// namespace, and (asked lazily, by statfs of a `map_files` entry) devices this namespace
/// does not show.
pub(crate) struct ShmemDevs {
    internal: Option<Dev>,
    known: HashMap<Dev, bool>,
}

impl ShmemDevs {
    pub(crate) fn new() -> ShmemDevs {
        let internal = procmap::shmem_dev().ok().map(Dev::from_dev_t);
        let mut known = HashMap::new();
        if let Ok(text) = std::fs::read("/proc/self/mountinfo") {
            for (dev, fstype) in parse_mountinfo(&text) {
                // devtmpfs is shmem too, but what is mapped from /dev is device memory.
                known.insert(dev, fstype == b"tmpfs");
            }
        }
        if let Some(d) = internal {
            known.insert(d, true);
        }
        ShmemDevs { internal, known }
    }

    /// The internal shm mount's device.
    pub(crate) fn internal(&self) -> Option<Dev> {
        self.internal
    }

    /// Whether `dev` holds shmem; for a device not seen in mountinfo, statfs the mapped file
    /// through `DIR/map_files/START-END` (once per device), `dir` being the process's
    /// `/proc/PID`.
    pub(crate) fn is_shmem(&mut self, dev: Dev, dir: &str, start: u64, end: u64) -> bool {
        if dev == Dev::default() {
            return false;
        }
        if let Some(&yes) = self.known.get(&dev) {
            return yes;
        }
        let path = format!("{dir}/map_files/{start:x}-{end:x}");
        let Ok(path) = CString::new(path) else { return false };
        match procmap::fs_type(&path) {
            Ok(t) => {
                let yes = t == procmap::TMPFS_MAGIC;
                self.known.insert(dev, yes);
                yes
            }
            // Not root: unknown devices stay unknown; ask no more.
            Err(libc::EPERM | libc::EACCES) => {
                self.known.insert(dev, false);
                false
            }
            Err(_) => false,
        }
    }
}

/// (dev, fstype) of each line of /proc/PID/mountinfo:
/// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`.
pub(crate) fn parse_mountinfo(text: &[u8]) -> Vec<(Dev, &[u8])> {
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let mut fields = line.split(|&b| b == b' ');
        let Some(dev) = fields.nth(2).and_then(parse_dev_dec) else { continue };
        let mut rest = fields.skip_while(|f| *f != b"-");
        if rest.next().is_none() {
            continue;
        }
        if let Some(fstype) = rest.next() {
            out.push((dev, fstype));
        }
    }
    out
}

fn parse_dev_dec(s: &[u8]) -> Option<Dev> {
    let s = std::str::from_utf8(s).ok()?;
    let (a, b) = s.split_once(':')?;
    Some(Dev { major: a.parse().ok()?, minor: b.parse().ok()? })
}

/// One shared file-backed mapping of a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub dev: Dev,
    pub inode: u64,
    pub name: Vec<u8>,
}

/// The shared (`s`), file-backed mappings in the text of /proc/PID/maps (device or inode not
/// 0; the inode alone does not tell: a SysV segment's inode is its id, and the first segment
/// of every IPC namespace is number 0):
/// `START-END PERMS OFFSET MAJ:MIN INODE   NAME`, numbers in hex but the inode in decimal.
/// Lines that do not parse are skipped. The kernel escapes a newline in a name as `\012`;
/// it is turned back into a newline, as `PROCMAP_QUERY` gives names unescaped. (A name that
/// holds a real backslash and 012 reads the same; the walk asks map_files about those.)
pub(crate) fn parse_maps_shared(text: &[u8]) -> Vec<Mapping> {
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        if let Some(m) = parse_maps_line(line) {
            out.push(m);
        }
    }
    out
}

fn parse_maps_line(line: &[u8]) -> Option<Mapping> {
    let mut rest = line;
    let mut field = || -> Option<&[u8]> {
        let start = rest.iter().position(|&b| b != b' ')?;
        let r = &rest[start..];
        let end = r.iter().position(|&b| b == b' ').unwrap_or(r.len());
        let (f, tail) = r.split_at(end);
        rest = tail;
        Some(f)
    };
    let range = field()?;
    let perms = field()?;
    let offset = field()?;
    let dev = field()?;
    let inode = field()?;
    if perms.get(3) != Some(&b's') {
        return None;
    }
    let (start, end) = split_once(range, b'-')?;
    let (major, minor) = split_once(dev, b':')?;
    let inode = parse_num(inode, 10)?;
    let dev = Dev { major: parse_num(major, 16)? as u32, minor: parse_num(minor, 16)? as u32 };
    if inode == 0 && dev == Dev::default() {
        return None;
    }
    let name = rest.iter().position(|&b| b != b' ').map(|p| &rest[p..]).unwrap_or(&[]);
    Some(Mapping {
        start: parse_num(start, 16)?,
        end: parse_num(end, 16)?,
        offset: parse_num(offset, 16)?,
        dev,
        inode,
        name: unescape_newlines(name),
    })
}

fn split_once(s: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let p = s.iter().position(|&b| b == sep)?;
    Some((&s[..p], &s[p + 1..]))
}

/// An unsigned number in `radix` (10 or 16), all of `s`, no overflow.
pub(crate) fn parse_num(s: &[u8], radix: u32) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        let d = (b as char).to_digit(radix)? as u64;
        v = v.checked_mul(radix as u64)?.checked_add(d)?;
    }
    Some(v)
}

fn unescape_newlines(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len());
    let mut i = 0;
    while i < name.len() {
        if name[i..].starts_with(b"\\012") {
            out.push(b'\n');
            i += 4;
        } else {
            out.push(name[i]);
            i += 1;
        }
    }
    out
}

/// The kind of a shmem object from its device and name.
pub(crate) fn kind_of(dev: Dev, internal: Option<Dev>, name: &[u8]) -> SharedKind {
    if Some(dev) != internal {
        SharedKind::Tmpfs
    } else if name.starts_with(b"/dev/zero") || name.starts_with(b"[anon_shmem:") {
        // `[anon_shmem:NAME]`: a shared anonymous mapping named with prctl(PR_SET_VMA,
        // PR_SET_VMA_ANON_NAME) (Linux 6.2+, CONFIG_ANON_VMA_NAME).
        SharedKind::Anonymous
    } else if name.starts_with(b"/SYSV") {
        SharedKind::SysV
    } else if name.starts_with(b"/memfd:") {
        SharedKind::Memfd
    } else {
        SharedKind::Other
    }
}

/// A region being gathered: the mappings seen so far, and its measure once taken.
struct Gathered {
    region: SharedRegion,
    largest_extent: u64,
    measured: bool,
    /// Not shmem after all (a device node on a tmpfs, as /dev in a container).
    dropped: bool,
    /// Mappings not yet tried for a stat (the process's /proc directory, start, end), when
    /// every try so far failed because the process or mapping went away.
    candidates: Vec<(String, u64, u64)>,
    pids: BTreeSet<i32>,
}

/// One walk over processes.
struct Walk {
    requested: MapsMethod,
    method: Option<MapsMethod>,
    devs: ShmemDevs,
    /// Keyed by (device, inode, what else tells SysV segments apart).
    regions: HashMap<(Dev, u64, Ident), Gathered>,
    /// The IPC namespace of this process, once asked.
    own_ipc_ns: Option<Option<u64>>,
    map_files_denied: bool,
    name: Vec<u8>,
    text: Vec<u8>,
    scanned: usize,
    denied: usize,
}

/// What tells apart objects with the same (device, inode) in [`Walk::regions`]: nothing for
/// most, since an inode number names one object of its file system. A SysV segment's inode
/// number is its id, which every IPC namespace counts from 0, so two segments can share one.
/// Their shmem inodes have random generations, read from a file handle of the mapping
/// (`map_files`, so with the same privilege as the resident size); without one, the IPC
/// namespace of the process that maps it is the next best thing (wrong for a process that
/// attached a segment and then moved to another IPC namespace).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Ident {
    Object,
    SysvGeneration(u32),
    SysvNamespace(u64),
}

/// What reading one process's mappings gave.
enum Read1 {
    Mappings(Vec<Mapping>),
    /// The process is gone or has no memory (kernel thread, zombie, or a leader that has
    /// exited while other threads run: see [`live_thread_dir`]).
    Gone,
    Denied,
    /// PROCMAP_QUERY is not supported here.
    NoIoctl,
}

impl Walk {
    fn new(requested: MapsMethod) -> Walk {
        Walk {
            requested,
            method: match requested {
                MapsMethod::Auto => None,
                m => Some(m),
            },
            devs: ShmemDevs::new(),
            regions: HashMap::new(),
            own_ipc_ns: None,
            map_files_denied: false,
            name: vec![0u8; libc::PATH_MAX as usize + 1],
            text: Vec::new(),
            scanned: 0,
            denied: 0,
        }
    }

    fn process(&mut self, pid: i32) -> Result<()> {
        let mut dir = format!("/proc/{pid}");
        let mut got = self.read_mappings(&dir)?;
        if let Read1::Gone = got {
            // No memory through /proc/PID: perhaps a leader that exited before its threads.
            let Some(task) = live_thread_dir(pid) else { return Ok(()) };
            got = self.read_mappings(&task)?;
            dir = task;
        }
        let mappings = match got {
            Read1::Mappings(m) => m,
            Read1::Gone => return Ok(()),
            Read1::Denied => {
                self.denied += 1;
                return Ok(());
            }
            // read_mappings never gives it.
            Read1::NoIoctl => return Ok(()),
        };
        if self.method.is_none() {
            self.method = Some(MapsMethod::ProcmapQuery);
        }
        self.scanned += 1;
        // The IPC namespace of this process, read only if it maps a SysV segment.
        let mut ipc_ns: Option<Option<u64>> = None;
        for m in mappings {
            if !self.devs.is_shmem(m.dev, &dir, m.start, m.end) {
                continue;
            }
            let (ident, ns) = if kind_of(m.dev, self.devs.internal(), &m.name) == SharedKind::SysV {
                let Some(ns) = *ipc_ns.get_or_insert_with(|| ipc_ns_of(&format!("{dir}/ns/ipc")))
                else {
                    // Gone meanwhile: its segments cannot be told apart from others'.
                    continue;
                };
                let link = CString::new(format!("{dir}/map_files/{:x}-{:x}", m.start, m.end));
                let generation = link.ok().and_then(|p| procmap::shmem_generation(&p).ok());
                (generation.map_or(Ident::SysvNamespace(ns), Ident::SysvGeneration), Some(ns))
            } else {
                (Ident::Object, None)
            };
            self.add(&dir, pid, m, ident, ns);
        }
        Ok(())
    }

    /// The shared file-backed mappings of the process whose /proc directory is `dir`, by
    /// the method chosen (switching to the text of `maps` for good when `Auto` finds no
    /// ioctl). Never `Read1::NoIoctl`.
    fn read_mappings(&mut self, dir: &str) -> Result<Read1> {
        let method = self.method.unwrap_or(MapsMethod::ProcmapQuery);
        let got = match method {
            MapsMethod::MapsText => self.read_text(dir),
            _ => self.read_ioctl(dir),
        };
        if let Read1::NoIoctl = got {
            if self.requested == MapsMethod::ProcmapQuery {
                return Err(Error::unsupported(
                    "PROCMAP_QUERY",
                    "this kernel has no PROCMAP_QUERY ioctl on /proc/PID/maps (Linux 6.11+)",
                ));
            }
            self.method = Some(MapsMethod::MapsText);
            return Ok(self.read_text(dir));
        }
        Ok(got)
    }

    fn read_ioctl(&mut self, dir: &str) -> Read1 {
        let file = match File::open(format!("{dir}/maps")) {
            Ok(f) => f,
            Err(e) => return gone_or_denied(&e),
        };
        let flags = procmap::COVERING_OR_NEXT_VMA | procmap::FILE_BACKED_VMA | procmap::VMA_SHARED;
        let mut out = Vec::new();
        let mut addr = 0u64;
        let mut retries = 0;
        loop {
            match procmap::query(file.as_fd(), addr, flags, &mut self.name) {
                Ok(v) => {
                    out.push(Mapping {
                        start: v.start,
                        end: v.end,
                        offset: v.offset,
                        dev: Dev { major: v.dev_major, minor: v.dev_minor },
                        inode: v.inode,
                        name: self.name[..v.name_len].to_vec(),
                    });
                    if v.end <= addr {
                        break; // never loop on a confused answer
                    }
                    addr = v.end;
                }
                Err(libc::ENOENT) => break,
                Err(libc::ENOTTY | libc::EINVAL) if out.is_empty() && addr == 0 => {
                    return Read1::NoIoctl
                }
                Err(libc::EACCES | libc::EPERM) => return Read1::Denied,
                // A path longer than PATH_MAX (deep directories on a tmpfs): the ioctl cannot
                // name the mapping, and its text in `maps` can. Read this process that way.
                Err(libc::ENAMETOOLONG) => return self.read_text(dir),
                // The mm lock wait was interrupted or must be retried: ask again, a few times.
                Err(libc::EINTR | libc::EAGAIN) if retries < 3 => retries += 1,
                // ESRCH: gone or no mm; anything else mid-walk: treat as gone.
                Err(_) => return Read1::Gone,
            }
        }
        Read1::Mappings(out)
    }

    fn read_text(&mut self, dir: &str) -> Read1 {
        self.text.clear();
        let res = File::open(format!("{dir}/maps")).and_then(|mut f| f.read_to_end(&mut self.text));
        match res {
            // Every process with memory maps something: an empty text means no mm (as the
            // ioctl's ESRCH).
            Ok(0) => Read1::Gone,
            Ok(_) => {
                let mut mappings = parse_maps_shared(&self.text);
                // `\012` in the text is a newline the kernel escaped, or a real backslash and
                // 012 (backslashes are not escaped): map_files names the file exactly (root).
                for m in mappings.iter_mut().filter(|m| m.name.contains(&b'\n')) {
                    let link = format!("{dir}/map_files/{:x}-{:x}", m.start, m.end);
                    if let Ok(path) = std::fs::read_link(link) {
                        m.name = path.into_os_string().into_vec();
                    }
                }
                Read1::Mappings(mappings)
            }
            Err(e) => gone_or_denied(&e),
        }
    }

    /// Count mapping `m` of process `pid` (whose /proc directory is `dir`) in its region.
    fn add(&mut self, dir: &str, pid: i32, m: Mapping, ident: Ident, ipc_ns: Option<u64>) {
        let internal = self.devs.internal();
        let key = (m.dev, m.inode, ident);
        let extent = m.offset.saturating_add(m.end.saturating_sub(m.start));
        let g = self.regions.entry(key).or_insert_with(|| Gathered {
            region: SharedRegion {
                dev: m.dev,
                inode: m.inode,
                name: String::from_utf8_lossy(&m.name).into_owned(),
                kind: kind_of(m.dev, internal, &m.name),
                size_bytes: 0,
                resident_bytes: None,
                pids: Vec::new(),
                ipc_ns,
            },
            largest_extent: 0,
            measured: false,
            dropped: false,
            candidates: Vec::new(),
            pids: BTreeSet::new(),
        });
        g.pids.insert(pid);
        g.largest_extent = g.largest_extent.max(extent);
        if !g.measured && !self.map_files_denied {
            match measure(dir, m.start, m.end, (m.dev, m.inode)) {
                Measure::Done { size, blocks_bytes, regular } => {
                    g.measured = true;
                    if regular {
                        g.region.size_bytes = size;
                        g.region.resident_bytes = Some(blocks_bytes);
                    } else {
                        // A device node on a tmpfs (/dev in a container): device memory.
                        g.dropped = true;
                    }
                }
                Measure::Denied => self.map_files_denied = true,
                Measure::Gone => g.candidates.push((dir.to_string(), m.start, m.end)),
            }
        }
    }

    /// A SysV mapping whose generation could not be read although map_files can be (its
    /// process has none: a main thread that exited; or it went away meanwhile) was keyed by
    /// its IPC namespace. When exactly one segment with that device, inode and namespace was
    /// keyed by generation, it is that one: its mappers join it instead of making a second
    /// region of the same segment.
    fn merge_sysv_without_generation(&mut self) {
        if self.map_files_denied {
            return;
        }
        let by_ns: Vec<(Dev, u64, Ident)> = self
            .regions
            .keys()
            .filter(|(_, _, ident)| matches!(ident, Ident::SysvNamespace(_)))
            .copied()
            .collect();
        for key in by_ns {
            let (dev, inode, Ident::SysvNamespace(ns)) = key else { continue };
            let twins: Vec<(Dev, u64, Ident)> = self
                .regions
                .iter()
                .filter(|(k, g)| {
                    matches!(k.2, Ident::SysvGeneration(_))
                        && (k.0, k.1) == (dev, inode)
                        && g.region.ipc_ns == Some(ns)
                })
                .map(|(k, _)| *k)
                .collect();
            let [twin] = twins[..] else { continue };
            let Some(orphan) = self.regions.remove(&key) else { continue };
            if let Some(g) = self.regions.get_mut(&twin) {
                g.pids.extend(orphan.pids);
                g.largest_extent = g.largest_extent.max(orphan.largest_extent);
            }
        }
    }

    /// SysV segments that no process attaches: from /proc/sysvipc/shm (this IPC namespace's),
    /// on the internal shm device with inode = shmid.
    fn add_unattached_sysv(&mut self) {
        let Some(dev) = self.devs.internal() else { return };
        let Ok(text) = std::fs::read("/proc/sysvipc/shm") else { return };
        let ns = *self.own_ipc_ns.get_or_insert_with(|| ipc_ns_of("/proc/self/ns/ipc"));
        let page = crate::sys::procfs::page_size();
        for seg in parse_sysvipc_shm(&text) {
            // Attached after all (between the walk and this read): already counted.
            let seen = |g: &Gathered| {
                g.region.kind == SharedKind::SysV
                    && (g.region.dev, g.region.inode, g.region.ipc_ns) == (dev, seg.shmid, ns)
            };
            if seg.nattch != 0 || self.regions.values().any(seen) {
                continue;
            }
            if let Some(region) = unattached_sysv_region(&seg, dev, ns, page) {
                let key = (dev, seg.shmid, Ident::SysvNamespace(ns.unwrap_or(0)));
                self.regions.insert(
                    key,
                    Gathered {
                        largest_extent: region.size_bytes,
                        region,
                        measured: true,
                        dropped: false,
                        candidates: Vec::new(),
                        pids: BTreeSet::new(),
                    },
                );
            }
        }
    }

    fn finish(mut self) -> SharedReport {
        self.merge_sysv_without_generation();
        let mut regions = Vec::with_capacity(self.regions.len());
        for (_, mut g) in self.regions.drain() {
            // Mappings whose stat failed because they went away: try the others.
            if !g.measured && !self.map_files_denied {
                for (dir, start, end) in &g.candidates {
                    let object = (g.region.dev, g.region.inode);
                    if let Measure::Done { size, blocks_bytes, regular: true } =
                        measure(dir, *start, *end, object)
                    {
                        g.region.size_bytes = size;
                        g.region.resident_bytes = Some(blocks_bytes);
                        g.measured = true;
                        break;
                    }
                }
            }
            if g.dropped {
                continue;
            }
            if !g.measured {
                g.region.size_bytes = g.largest_extent;
            }
            g.region.pids = g.pids.into_iter().collect();
            regions.push(g.region);
        }
        regions.sort_by(|a, b| {
            b.resident_bytes
                .cmp(&a.resident_bytes)
                .then(b.size_bytes.cmp(&a.size_bytes))
                .then(a.dev.cmp(&b.dev))
                .then(a.inode.cmp(&b.inode))
                .then(a.ipc_ns.cmp(&b.ipc_ns))
        });
        let total: u64 = regions.iter().filter_map(|r| r.resident_bytes).sum();
        let unknown = regions.iter().filter(|r| r.resident_bytes.is_none()).count();
        let shmem = meminfo_shmem();
        SharedReport {
            regions,
            total_resident_bytes: total,
            unknown_resident: unknown,
            map_files_denied: self.map_files_denied,
            meminfo_shmem_bytes: shmem,
            difference_bytes: shmem.map(|s| s as i64 - total as i64),
            method: self.method.unwrap_or(match self.requested {
                MapsMethod::Auto => MapsMethod::ProcmapQuery,
                m => m,
            }),
            processes_scanned: self.scanned,
            processes_denied: self.denied,
        }
    }
}

/// The inode number of an IPC namespace file (`/proc/PID/ns/ipc`), which names the
/// namespace; `None` if it cannot be read (the process is gone).
fn ipc_ns_of(path: &str) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.ino())
}

fn gone_or_denied(e: &io::Error) -> Read1 {
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => Read1::Denied,
        _ => Read1::Gone,
    }
}

enum Measure {
    Done { size: u64, blocks_bytes: u64, regular: bool },
    Denied,
    Gone,
}

/// stat(2) the object behind `DIR/map_files/START-END` (`dir`: the process's /proc
/// directory), which must still be `object` (dev, inode): if the process has mapped something
/// else there since its mappings were read, that is `Gone` too, not a measure of the wrong
/// object. A thread's task directory has no `map_files`: `Gone`.
fn measure(dir: &str, start: u64, end: u64, object: (Dev, u64)) -> Measure {
    match std::fs::metadata(format!("{dir}/map_files/{start:x}-{end:x}")) {
        Ok(meta) if (Dev::from_dev_t(meta.dev()), meta.ino()) != object => Measure::Gone,
        Ok(meta) => Measure::Done {
            size: meta.size(),
            blocks_bytes: meta.blocks().saturating_mul(512),
            regular: meta.file_type().is_file(),
        },
        Err(e) => match e.raw_os_error() {
            Some(libc::EACCES | libc::EPERM) => Measure::Denied,
            _ => Measure::Gone,
        },
    }
}

/// The region of a SysV segment that no process attaches, from its row of
/// /proc/sysvipc/shm; `None` for a SHM_HUGETLB segment. Its pages are huge pages, not shmem
/// (not in `Shmem` of /proc/meminfo; a hugetlb segment that is attached is on a hugetlbfs
/// device, which the walk leaves out likewise), and the row does not say which it is, but
/// its `rss` gives it away: for hugetlb the kernel counts each huge page's base pages once
/// per base page (2 MiB shows as 1 GiB), more than the segment's size, which shmem never is.
fn unattached_sysv_region(
    seg: &SysvSegment,
    dev: Dev,
    ipc_ns: Option<u64>,
    page: u64,
) -> Option<SharedRegion> {
    let resident = seg.rss.saturating_add(seg.swap);
    if resident > seg.size.div_ceil(page.max(1)).saturating_mul(page) {
        return None;
    }
    Some(SharedRegion {
        dev,
        inode: seg.shmid,
        name: format!("/SYSV{:08x} (deleted)", seg.key as u32),
        kind: SharedKind::SysV,
        size_bytes: seg.size,
        resident_bytes: Some(resident),
        pids: Vec::new(),
        ipc_ns,
    })
}

/// One row of /proc/sysvipc/shm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SysvSegment {
    pub key: i32,
    pub shmid: u64,
    pub size: u64,
    pub nattch: u64,
    pub rss: u64,
    pub swap: u64,
}

/// The rows of /proc/sysvipc/shm: `key shmid perms size cpid lpid nattch uid gid cuid cgid
/// atime dtime ctime rss swap` (the header line and rows that do not parse are skipped).
pub(crate) fn parse_sysvipc_shm(text: &[u8]) -> Vec<SysvSegment> {
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let f: Vec<&[u8]> = line.split(|&b| b == b' ').filter(|f| !f.is_empty()).collect();
        if f.len() < 16 {
            continue;
        }
        let key = std::str::from_utf8(f[0]).ok().and_then(|s| s.parse::<i32>().ok());
        let (Some(key), Some(shmid), Some(size), Some(nattch), Some(rss), Some(swap)) = (
            key,
            parse_num(f[1], 10),
            parse_num(f[3], 10),
            parse_num(f[6], 10),
            parse_num(f[14], 10),
            parse_num(f[15], 10),
        ) else {
            continue;
        };
        out.push(SysvSegment { key, shmid, size, nattch, rss, swap });
    }
    out
}

/// `Shmem` of /proc/meminfo, in bytes.
pub fn meminfo_shmem() -> Option<u64> {
    let text = std::fs::read("/proc/meminfo").ok()?;
    for line in text.split(|&b| b == b'\n') {
        if let Some(rest) = line.strip_prefix(b"Shmem:") {
            let digits: Vec<u8> = rest.iter().copied().filter(u8::is_ascii_digit).collect();
            return parse_num(&digits, 10).map(|kb| kb.saturating_mul(1024));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn maps_method_names_round_trip() {
        for m in MapsMethod::ALL {
            assert_eq!(m.to_string().parse::<MapsMethod>(), Ok(m));
        }
        assert_eq!("ioctl".parse::<MapsMethod>(), Ok(MapsMethod::ProcmapQuery));
        assert_eq!("maps".parse::<MapsMethod>(), Ok(MapsMethod::MapsText));
        let err = "nope".parse::<MapsMethod>().unwrap_err().to_string();
        assert_eq!(err, "'nope' is not a method: auto, procmap-query or maps-text");
    }

    #[test]
    fn maps_lines() {
        let text = b"55d0c0a00000-55d0c0a02000 r--p 00000000 fd:01 1234   /usr/bin/cat\n\
7f0000000000-7f000c800000 rw-s 00000000 00:01 215736                     /dev/zero (deleted)\n\
7f1000000000-7f1000400000 rw-s 00001000 00:1b 77 /dev/shm/my name\\012x\n\
7f2000000000-7f2000001000 rw-s 00000000 00:00 0 \n\
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n\
7f3000000000-7f3000400000 rw-s 00000000 00:01 0                          /SYSV00000000 (deleted)\n\
garbage line\n";
        let m = parse_maps_shared(text);
        assert_eq!(m.len(), 3);
        assert_eq!((m[2].dev, m[2].inode), (Dev { major: 0, minor: 1 }, 0), "SysV segment 0");
        assert_eq!(m[0].start, 0x7f00_0000_0000);
        assert_eq!(m[0].end, 0x7f00_0c80_0000);
        assert_eq!(m[0].dev, Dev { major: 0, minor: 1 });
        assert_eq!(m[0].inode, 215736);
        assert_eq!(m[0].name, b"/dev/zero (deleted)");
        assert_eq!(m[1].offset, 0x1000);
        assert_eq!(m[1].dev, Dev { major: 0, minor: 0x1b });
        assert_eq!(m[1].name, b"/dev/shm/my name\nx");
    }

    #[test]
    fn mountinfo_lines() {
        let text = b"24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=1k\n\
25 24 0:23 / /dev/shm rw,relatime shared:2 - tmpfs tmpfs rw\nbad\n";
        let got = parse_mountinfo(text);
        assert_eq!(
            got,
            vec![
                (Dev { major: 0, minor: 6 }, &b"devtmpfs"[..]),
                (Dev { major: 0, minor: 23 }, &b"tmpfs"[..])
            ]
        );
    }

    #[test]
    fn sysvipc_rows() {
        let text = b"       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n\
         0          5   600               4194304 13991 13991      0     0     0     0     0 1795312861 1795312861 1795312861               1048576                     4096\n\
        -1         6   600               8192 1 1      2     0     0     0     0 0 0 0 0 0\n";
        let got = parse_sysvipc_shm(text);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0],
            SysvSegment { key: 0, shmid: 5, size: 4194304, nattch: 0, rss: 1048576, swap: 4096 }
        );
        assert_eq!(got[1].key, -1);
        assert_eq!(got[1].nattch, 2);
    }

    #[test]
    fn kinds() {
        let int = Some(Dev { major: 0, minor: 1 });
        let d = Dev { major: 0, minor: 1 };
        assert_eq!(kind_of(d, int, b"/dev/zero (deleted)"), SharedKind::Anonymous);
        assert_eq!(kind_of(d, int, b"[anon_shmem:my pool]"), SharedKind::Anonymous);
        assert_eq!(kind_of(d, int, b"/SYSV00000000 (deleted)"), SharedKind::SysV);
        assert_eq!(kind_of(d, int, b"/memfd:x (deleted)"), SharedKind::Memfd);
        assert_eq!(kind_of(d, int, b"/i915"), SharedKind::Other);
        assert_eq!(kind_of(Dev { major: 0, minor: 23 }, int, b"/dev/shm/x"), SharedKind::Tmpfs);
    }

    #[test]
    fn dev_t_round_trip() {
        for (major, minor) in [(0, 1), (8, 1), (259, 3), (4095, 255), (4096, 1 << 19)] {
            let d = Dev { major, minor };
            assert_eq!(Dev::from_dev_t(d.to_dev_t()), d);
        }
        assert_eq!(Dev { major: 8, minor: 1 }.to_dev_t(), 0x801);
    }

    proptest! {
        #[test]
        fn maps_parser_never_panics(text in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_maps_shared(&text);
            let _ = parse_mountinfo(&text);
            let _ = parse_sysvipc_shm(&text);
        }

        #[test]
        fn maps_line_round_trip(
            start in 0u64..(1 << 47),
            len in 1u64..(1 << 30),
            offset in 0u64..(1 << 40),
            major in 0u32..4096,
            minor in 0u32..(1 << 20),
            inode in prop_oneof![Just(0u64), 1u64..u64::MAX],
            name in "[ -~]{0,40}",
        ) {
            let line = format!(
                "{:x}-{:x} rw-s {:08x} {:02x}:{:02x} {}                    {}\n",
                start, start + len, offset, major, minor, inode, name
            );
            let got = parse_maps_shared(line.as_bytes());
            if inode == 0 && major == 0 && minor == 0 {
                // Shared but with no file at all: not a shmem object.
                prop_assert_eq!(got.len(), 0);
                return Ok(());
            }
            prop_assert_eq!(got.len(), 1);
            let m = &got[0];
            prop_assert_eq!((m.start, m.end, m.offset), (start, start + len, offset));
            prop_assert_eq!(m.dev, Dev { major, minor });
            prop_assert_eq!(m.inode, inode);
            let want = name.trim_start().replace("\\012", "\n");
            prop_assert_eq!(String::from_utf8_lossy(&m.name).into_owned(), want);
        }

        /// A path as the kernel writes it in maps (a newline escaped as `\012`, nothing else
        /// escaped) reads back as the path, whatever spaces, parentheses, newlines or
        /// field-like words it holds.
        #[test]
        fn maps_names_read_back(
            name in "/[ -\\[\\]-~\n]{0,60}",
            deleted in any::<bool>(),
        ) {
            let name = if deleted { format!("{name} (deleted)") } else { name };
            let line = format!(
                "7f0000000000-7f0000001000 rw-s 00000000 00:1b 42                         {}\n",
                name.replace('\n', "\\012")
            );
            let got = parse_maps_shared(line.as_bytes());
            prop_assert_eq!(got.len(), 1);
            prop_assert_eq!(&got[0].name, name.as_bytes());
            prop_assert_eq!((got[0].dev, got[0].inode), (Dev { major: 0, minor: 0x1b }, 42));
        }
    }

    #[test]
    fn unattached_hugetlb_segments_are_not_shmem() {
        let dev = Dev { major: 0, minor: 1 };
        let seg = |size, rss, swap| SysvSegment { key: 0, shmid: 7, size, nattch: 0, rss, swap };
        // A 4 MiB shmem segment, half written, half of that swapped out.
        let r = unattached_sysv_region(&seg(4 << 20, 1 << 20, 1 << 20), dev, Some(9), 4096);
        let r = r.expect("shmem");
        assert_eq!(
            (r.size_bytes, r.resident_bytes, r.kind),
            (4 << 20, Some(2 << 20), SharedKind::SysV)
        );
        assert_eq!((r.inode, r.ipc_ns, r.pids.len()), (7, Some(9), 0));
        // Fully written, size not a page multiple: at most the pages it covers.
        assert!(unattached_sysv_region(&seg(4097, 8192, 0), dev, None, 4096).is_some());
        // SHM_HUGETLB, 4 MiB written: this kernel reports 2 GiB of rss.
        assert!(unattached_sysv_region(&seg(4 << 20, 2 << 30, 0), dev, None, 4096).is_none());
        assert!(unattached_sysv_region(&seg(4097, 12288, 0), dev, None, 4096).is_none());
    }
}
