//! Per-process memory: RSS, PSS, USS and swap from `/proc/PID/smaps_rollup`, with the shared
//! memory (shmem) part kept apart.
//!
//! `smaps_rollup` gives the sums of a process's `smaps` in one short read (the kernel walks the
//! page tables once; no text per mapping), about 4× cheaper than `smaps`. It is read only for
//! the processes asked for ([`memory`], [`memory_of`]) or for the top N by RSS
//! ([`top_by_rss`], which ranks by the process table's RSS first).
//!
//! # What USS means here
//!
//! smem and psutil define USS ("unique set size") as `Private_Clean + Private_Dirty`: the
//! pages mapped by this process only, which its exit would free. That does not hold for shmem
//! pages (shared anonymous mappings, SysV segments, memfds, tmpfs files): a shmem page mapped
//! by one process is counted as private, yet it belongs to the shmem object, which lives on
//! after the process exits whenever something else holds it (another process's mapping or
//! file descriptor, a file not unlinked, a SysV segment not removed). Whether anything does
//! cannot be read from the process's own numbers, so here:
//!
//! - [`Memory::shmem_private`] = the private pages of shmem mappings: for each shared mapping
//!   of a shmem object, its `Private_Clean + Private_Dirty`; for a private mapping of a shmem
//!   file (a program run from /tmp on tmpfs, a memfd mapped `MAP_PRIVATE`), those minus its
//!   private anonymous pages (the copied-on-write pages, which are truly private).
//! - [`Memory::uss`] = `Private_Clean + Private_Dirty - shmem_private`: memory the process's
//!   exit surely frees. (Its exit frees `shmem_private` too when nothing else holds those
//!   objects: a `MAP_SHARED | MAP_ANONYMOUS` region it alone maps, say.)
//! - [`Memory::pss_shmem`] = the shmem part of PSS (the kernel's `Pss_Shmem`), reported apart;
//!   `pss = pss_anon + pss_file + pss_shmem`.
//!
//! It is exact and cheap: `shmem_private` can only be non-zero when `Pss_Shmem` is, so the full
//! `smaps` (one record per mapping) is read only for the processes whose rollup shows
//! `Pss_Shmem > 0`. A mapping is shmem when its device is the kernel's internal shm mount
//! (learnt from a memfd's `st_dev`) or a tmpfs mount (from /proc/self/mountinfo; devices of
//! other mount namespaces are asked by statfs of `/proc/PID/map_files/START-END`).
//!
//! A private mapping of a shmem file mixes file pages (shmem) with copied-on-write anonymous
//! pages, and `smaps` does not say how its `Private_*` pages split between the two: its
//! `Anonymous` also counts copies still shared with a forked relative. When the numbers
//! leave the split open (some anonymous pages *and* some shared pages), the mapping's entries
//! in `/proc/PID/pagemap` are read: a page that is present, file-backed (bit 61) and mapped
//! exclusively (bit 56) is private shmem. Should that read fail, the lower bound
//! `Private - Anonymous` is used.
//!
//! Shmem whose writers have all exited shows in nobody's numbers here; see
//! [`crate::shared_regions`], which counts it per object.

use std::fs::File;
use std::io::Read;

use super::shared::{list_pids, live_thread_dir, parse_num, Dev, ShmemDevs};
use super::Comm;
use spawnkit::{Error, Result};

/// Whether a [`Memory`] record holds measured numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MemoryStatus {
    /// Read from `smaps_rollup` (and `smaps` when the process maps shmem).
    #[default]
    Measured,
    /// The process has no user memory: a kernel thread, or a zombie. The numbers are 0.
    NoMemory,
    /// Permission denied (another user's process, without CAP_SYS_PTRACE): the numbers are 0
    /// and unknown.
    Denied,
}

impl MemoryStatus {
    /// `measured`, `no-memory` or `denied`.
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryStatus::Measured => "measured",
            MemoryStatus::NoMemory => "no-memory",
            MemoryStatus::Denied => "denied",
        }
    }
}

/// The memory of one process, in bytes. See the module documentation for what `uss` and
/// `shmem_private` mean.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// Process id.
    pub pid: i32,
    /// Short name (`/proc/PID/comm`); empty if it could not be read.
    pub comm: Comm,
    /// Whether the numbers were measured.
    pub status: MemoryStatus,
    /// Resident set size (`Rss`): every page mapped, shared or not.
    pub rss: u64,
    /// Proportional set size (`Pss`): each page divided by the number of processes mapping
    /// it. `pss = pss_anon + pss_file + pss_shmem`.
    pub pss: u64,
    /// The anonymous part of PSS (`Pss_Anon`): heap, stacks, private copies.
    pub pss_anon: u64,
    /// The file-backed part of PSS (`Pss_File`): program text, libraries, mapped files.
    pub pss_file: u64,
    /// The shmem part of PSS (`Pss_Shmem`): shared anonymous memory, SysV segments, memfds,
    /// tmpfs files.
    pub pss_shmem: u64,
    /// Pages mapped by other processes too, unmodified (`Shared_Clean`).
    pub shared_clean: u64,
    /// Pages mapped by other processes too, modified (`Shared_Dirty`).
    pub shared_dirty: u64,
    /// Pages mapped by this process only, unmodified (`Private_Clean`; shmem included).
    pub private_clean: u64,
    /// Pages mapped by this process only, modified (`Private_Dirty`; shmem included).
    pub private_dirty: u64,
    /// The shmem pages among `private_clean + private_dirty`: they outlive the process when
    /// anything else holds their object.
    pub shmem_private: u64,
    /// Unique set size: `private_clean + private_dirty - shmem_private`, the memory this
    /// process's exit surely frees.
    pub uss: u64,
    /// Swapped-out memory of this process (`Swap`; shmem swap included).
    pub swap: u64,
    /// Proportional swap (`SwapPss`).
    pub swap_pss: u64,
}

/// Parse the text of `/proc/PID/smaps_rollup` (`Key:   N kB` lines; unknown keys, the header
/// line and lines that do not parse are ignored). `None` when there is no `Rss` line (empty
/// or not a rollup). The result has `pid` 0, an empty `comm`, `shmem_private` 0 and
/// `uss = private_clean + private_dirty`: the shmem correction needs the per-mapping `smaps`.
pub fn parse_smaps_rollup(text: &[u8]) -> Option<Memory> {
    let mut m = Memory::default();
    let mut seen_rss = false;
    for line in text.split(|&b| b == b'\n') {
        let Some((key, bytes)) = kb_line(line) else { continue };
        let slot = match key {
            b"Rss" => {
                seen_rss = true;
                &mut m.rss
            }
            b"Pss" => &mut m.pss,
            b"Pss_Anon" => &mut m.pss_anon,
            b"Pss_File" => &mut m.pss_file,
            b"Pss_Shmem" => &mut m.pss_shmem,
            b"Shared_Clean" => &mut m.shared_clean,
            b"Shared_Dirty" => &mut m.shared_dirty,
            b"Private_Clean" => &mut m.private_clean,
            b"Private_Dirty" => &mut m.private_dirty,
            b"Swap" => &mut m.swap,
            b"SwapPss" => &mut m.swap_pss,
            _ => continue,
        };
        *slot = bytes;
    }
    m.uss = m.private_clean.saturating_add(m.private_dirty);
    seen_rss.then_some(m)
}

/// `Key:   N kB` (or `Key: N` without a unit) → (key, bytes). None for anything else.
fn kb_line(line: &[u8]) -> Option<(&[u8], u64)> {
    let colon = line.iter().position(|&b| b == b':')?;
    let (key, rest) = (&line[..colon], &line[colon + 1..]);
    if key.is_empty() || !key.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    let mut words = rest.split(|&b| b == b' ' || b == b'\t').filter(|w| !w.is_empty());
    let n = parse_num(words.next()?, 10)?;
    match words.next() {
        Some(b"kB") => Some((key, n.saturating_mul(1024))),
        None => Some((key, n)),
        Some(_) => None,
    }
}

/// `START-END PERMS OFFSET MAJ:MIN INODE NAME`, the first line of each mapping in `smaps`:
/// (start, end, shared, dev).
fn vma_header(line: &[u8]) -> Option<(u64, u64, bool, Dev)> {
    let mut f = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let range = f.next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let start = parse_num(&range[..dash], 16)?;
    let end = parse_num(&range[dash + 1..], 16)?;
    let perms = f.next()?;
    let shared = match perms.get(3)? {
        b's' => true,
        b'p' => false,
        _ => return None,
    };
    let _offset = parse_num(f.next()?, 16)?;
    let dev = f.next()?;
    let colon = dev.iter().position(|&b| b == b':')?;
    let major = parse_num(&dev[..colon], 16)?;
    let minor = parse_num(&dev[colon + 1..], 16)?;
    Some((start, end, shared, Dev { major: major as u32, minor: minor as u32 }))
}

/// The private shmem bytes in the text of `/proc/PID/smaps`: over the mappings for which
/// `is_shmem(dev, start, end)` holds, `Private_Clean + Private_Dirty` of shared ones, and of
/// private ones the same minus their private anonymous (copied-on-write) pages. Where the
/// mapping's numbers leave that split open, `exclusive_file_bytes(start, end)` is asked for
/// the bytes of file pages mapped by this process alone (from pagemap); its answer is kept
/// within the bounds the numbers allow, and `None` means the lower bound.
pub(crate) fn shmem_private_from_smaps(
    text: &[u8],
    mut is_shmem: impl FnMut(Dev, u64, u64) -> bool,
    mut exclusive_file_bytes: impl FnMut(u64, u64) -> Option<u64>,
) -> u64 {
    #[derive(Default)]
    struct Vma {
        start: u64,
        end: u64,
        shared_mapping: bool,
        rss: u64,
        shared_pages: u64,
        private: u64,
        anon: u64,
    }
    let mut settle = |v: Option<Vma>| -> u64 {
        let Some(v) = v else { return 0 };
        if v.shared_mapping {
            // No copy-on-write in a shared mapping: every page is the object's.
            return v.private;
        }
        // Private anonymous pages: at least those not among the shared pages, at most all
        // anonymous pages. The rest of `private` is shmem.
        let anon_private_min = v.anon.saturating_sub(v.shared_pages).min(v.private);
        let anon_private_max = v.anon.min(v.private);
        let low = v.private - anon_private_max;
        let high = v.private - anon_private_min;
        if low == high {
            return low;
        }
        exclusive_file_bytes(v.start, v.end).map_or(low, |b| b.clamp(low, high))
    };
    let mut total = 0u64;
    let mut cur: Option<Vma> = None;
    for line in text.split(|&b| b == b'\n') {
        if let Some((start, end, shared_mapping, dev)) = vma_header(line) {
            total = total.saturating_add(settle(cur.take()));
            if is_shmem(dev, start, end) {
                cur = Some(Vma { start, end, shared_mapping, ..Vma::default() });
            }
            continue;
        }
        let Some(v) = cur.as_mut() else { continue };
        match kb_line(line) {
            Some((b"Rss", n)) => v.rss = n,
            Some((b"Shared_Clean" | b"Shared_Dirty", n)) => {
                v.shared_pages = v.shared_pages.saturating_add(n)
            }
            Some((b"Private_Clean" | b"Private_Dirty", n)) => {
                v.private = v.private.saturating_add(n)
            }
            Some((b"Anonymous", n)) => v.anon = v.anon.saturating_add(n),
            _ => {}
        }
    }
    total.saturating_add(settle(cur))
}

/// Bytes of the pages in `[start, end)` of `pagemap` (an open `/proc/PID/pagemap`) that are
/// present, file-backed or shared-anonymous (bit 61) and mapped by this process alone (bit 56,
/// PM_MMAP_EXCLUSIVE); see Documentation/admin-guide/mm/pagemap.rst. `None` if it cannot be
/// read whole (the process or mapping went away).
fn exclusive_file_bytes(pagemap: &File, start: u64, end: u64, page: u64) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    const PRESENT: u64 = 1 << 63;
    const FILE_OR_SHARED: u64 = 1 << 61;
    const EXCLUSIVE: u64 = 1 << 56;
    const WANT: u64 = PRESENT | FILE_OR_SHARED | EXCLUSIVE;
    let mut buf = vec![0u8; 8 * 4096];
    let mut pages = 0u64;
    let mut vpn = start / page;
    let last = end.div_ceil(page);
    while vpn < last {
        let n = ((last - vpn) as usize).min(buf.len() / 8);
        let chunk = &mut buf[..n * 8];
        pagemap.read_exact_at(chunk, vpn.checked_mul(8)?).ok()?;
        pages += chunk
            .chunks_exact(8)
            .filter(|e| {
                u64::from_ne_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]) & WANT == WANT
            })
            .count() as u64;
        vpn += n as u64;
    }
    Some(pages * page)
}

/// Reads memory records, reusing its buffers; learns the shmem devices only when a process
/// with shmem turns up.
struct Reader {
    buf: Vec<u8>,
    devs: Option<ShmemDevs>,
}

/// What reading a /proc file gave.
enum Got {
    Data,
    Vanished,
    NoMemory,
    Denied,
}

impl Reader {
    fn new() -> Reader {
        Reader { buf: Vec::with_capacity(4096), devs: None }
    }

    /// `DIR/NAME`, `dir` being the /proc directory of process `pid` (`/proc/PID`, or a
    /// thread's `/proc/PID/task/TID`).
    fn read_file(&mut self, dir: &str, pid: i32, name: &str) -> Got {
        self.buf.clear();
        let res =
            File::open(format!("{dir}/{name}")).and_then(|mut f| f.read_to_end(&mut self.buf));
        match res {
            Ok(0) | Err(_) if !proc_exists(pid) => Got::Vanished,
            Ok(0) => Got::NoMemory,
            Ok(_) => Got::Data,
            Err(e) => match e.raw_os_error() {
                Some(libc::EACCES | libc::EPERM) => Got::Denied,
                // ESRCH from a process that still exists: no mm (kernel thread, zombie).
                _ => Got::NoMemory,
            },
        }
    }

    fn comm(&mut self, pid: i32) -> Comm {
        match self.read_file(&format!("/proc/{pid}"), pid, "comm") {
            Got::Data => {
                let raw = self.buf.strip_suffix(b"\n").unwrap_or(&self.buf);
                Comm::new(raw)
            }
            _ => Comm::default(),
        }
    }

    /// `None` when the process does not exist (any more).
    fn memory(&mut self, pid: i32) -> Option<Memory> {
        let mut dir = format!("/proc/{pid}");
        let mut status = self.read_file(&dir, pid, "smaps_rollup");
        if let Got::NoMemory = status {
            // Perhaps a leader that exited before its threads: another thread shows the
            // memory they all share.
            if let Some(task) = live_thread_dir(pid) {
                match self.read_file(&task, pid, "smaps_rollup") {
                    Got::Data => {
                        status = Got::Data;
                        dir = task;
                    }
                    // Another user's: its leader's files said nothing, its thread's refuse.
                    Got::Denied => status = Got::Denied,
                    Got::NoMemory | Got::Vanished => {}
                }
            }
        }
        let mut m = match status {
            Got::Vanished => return None,
            Got::Data => match parse_smaps_rollup(&self.buf) {
                Some(m) => m,
                None => Memory { status: MemoryStatus::NoMemory, ..Memory::default() },
            },
            Got::NoMemory => Memory { status: MemoryStatus::NoMemory, ..Memory::default() },
            Got::Denied => Memory { status: MemoryStatus::Denied, ..Memory::default() },
        };
        m.pid = pid;
        if m.pss_shmem > 0 {
            if let Got::Data = self.read_file(&dir, pid, "smaps") {
                let devs = self.devs.get_or_insert_with(ShmemDevs::new);
                let page = crate::sys::procfs::page_size();
                let mut pagemap: Option<Option<File>> = None;
                let private = shmem_private_from_smaps(
                    &self.buf,
                    |dev, start, end| devs.is_shmem(dev, &dir, start, end),
                    |start, end| {
                        let f = pagemap
                            .get_or_insert_with(|| File::open(format!("{dir}/pagemap")).ok());
                        exclusive_file_bytes(f.as_ref()?, start, end, page)
                    },
                );
                m.shmem_private = private.min(m.uss);
                m.uss -= m.shmem_private;
            }
        }
        m.comm = self.comm(pid);
        Some(m)
    }
}

fn proc_exists(pid: i32) -> bool {
    std::fs::metadata(format!("/proc/{pid}")).is_ok()
}

fn check_pid(pid: i32) -> Result<()> {
    if pid <= 0 {
        return Err(Error::invalid("memory", format!("pid {pid}"), "not a process id"));
    }
    Ok(())
}

/// The memory of process `pid`; `Ok(None)` when there is no such process (any more). A
/// kernel thread or zombie gives [`MemoryStatus::NoMemory`], another user's process without
/// privilege [`MemoryStatus::Denied`]. Errors only for a pid that cannot exist (≤ 0).
pub fn memory(pid: i32) -> Result<Option<Memory>> {
    check_pid(pid)?;
    Ok(Reader::new().memory(pid))
}

/// The memory of each of `pids` that exists, in the order given (vanished ones skipped;
/// unreadable ones marked by [`Memory::status`]).
pub fn memory_of(pids: &[i32]) -> Result<Vec<Memory>> {
    for &pid in pids {
        check_pid(pid)?;
    }
    let mut reader = Reader::new();
    Ok(pids.iter().filter_map(|&pid| reader.memory(pid)).collect())
}

/// The memory of every process, by pid.
pub fn memory_all() -> Result<Vec<Memory>> {
    let mut reader = Reader::new();
    Ok(list_pids()?.into_iter().filter_map(|pid| reader.memory(pid)).collect())
}

/// The `n` processes with the largest RSS, largest first. They are ranked by the process
/// table's RSS (the kernel's mm counters, read for every process at once by
/// [`crate::processes`]: the BPF task iterator when it loads, else one `stat` per
/// process); `smaps_rollup` is read only for the `n` at the top. A process whose main thread
/// has exited before its other threads shows RSS 0 in the table (as in procps), so it ranks
/// last here; [`memory`], [`memory_of`] and [`memory_all`] measure it.
pub fn top_by_rss(n: usize) -> Result<Vec<Memory>> {
    let mut reader = Reader::new();
    let mut ranked: Vec<(u64, i32)> = match super::processes(super::Fields::default()) {
        Ok(procs) => procs.iter().map(|p| (p.rss_bytes, p.pid)).collect(),
        Err(_) => rank_by_statm(&mut reader)?,
    };
    ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut out = Vec::with_capacity(n.min(ranked.len()));
    for (_, pid) in ranked {
        if out.len() >= n {
            break;
        }
        if let Some(m) = reader.memory(pid) {
            out.push(m);
        }
    }
    out.sort_by(|a, b| b.rss.cmp(&a.rss).then(a.pid.cmp(&b.pid)));
    Ok(out)
}

/// (RSS, pid) of every process from `/proc/PID/statm`.
fn rank_by_statm(reader: &mut Reader) -> Result<Vec<(u64, i32)>> {
    let page = crate::sys::procfs::page_size();
    let mut ranked = Vec::new();
    for pid in list_pids()? {
        if let Got::Data = reader.read_file(&format!("/proc/{pid}"), pid, "statm") {
            let rss =
                reader.buf.split(|&b| b == b' ').nth(1).and_then(|f| parse_num(f, 10)).unwrap_or(0);
            ranked.push((rss.saturating_mul(page), pid));
        }
    }
    Ok(ranked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ROLLUP: &[u8] =
        b"55dbb075b000-7ffc3242c000 ---p 00000000 00:00 0                          [rollup]
Rss:               22332 kB
Pss:               20994 kB
Pss_Dirty:         15588 kB
Pss_Anon:           9444 kB
Pss_File:           5406 kB
Pss_Shmem:          6144 kB
Shared_Clean:       1640 kB
Shared_Dirty:          0 kB
Private_Clean:      5104 kB
Private_Dirty:     15588 kB
Referenced:        22332 kB
Anonymous:          9444 kB
Swap:                  8 kB
SwapPss:               4 kB
Locked:                0 kB
";

    #[test]
    fn rollup() {
        let m = parse_smaps_rollup(ROLLUP).unwrap();
        assert_eq!(m.rss, 22332 * 1024);
        assert_eq!(m.pss, 20994 * 1024);
        assert_eq!(m.pss_anon, 9444 * 1024);
        assert_eq!(m.pss_file, 5406 * 1024);
        assert_eq!(m.pss_shmem, 6144 * 1024);
        assert_eq!(m.shared_clean, 1640 * 1024);
        assert_eq!(m.private_clean, 5104 * 1024);
        assert_eq!(m.private_dirty, 15588 * 1024);
        assert_eq!(m.uss, (5104 + 15588) * 1024);
        assert_eq!(m.swap, 8 * 1024);
        assert_eq!(m.swap_pss, 4 * 1024);
        assert_eq!(parse_smaps_rollup(b""), None);
        assert_eq!(parse_smaps_rollup(b"Rss: lots kB\n"), None);
    }

    const SMAPS: &[u8] = b"7fbadf55e000-7fbadf95e000 rw-s 00000000 00:01 215737                     /memfd:hello (deleted)
Size:               4096 kB
Rss:                2048 kB
Private_Clean:         0 kB
Private_Dirty:      2048 kB
Anonymous:             0 kB
VmFlags: rd wr sh mr mw me ms
7fbadf95e000-7fbae015e000 rw-s 00000000 00:01 215736                     /dev/zero (deleted)
Size:               8192 kB
Shared_Dirty:       1024 kB
Private_Clean:         4 kB
Private_Dirty:      4092 kB
7fbae015e000-7fbae025e000 rw-p 00000000 00:00 0
Private_Dirty:       512 kB
Anonymous:           512 kB
55d0c0a00000-55d0c0a02000 r-xp 00000000 00:17 99   /tmp/prog
Private_Clean:        40 kB
Private_Dirty:         8 kB
Anonymous:             8 kB
55d0c0b00000-55d0c0b02000 rw-s 00000000 08:01 77   /home/x/file
Private_Dirty:       100 kB
";

    #[test]
    fn smaps_shmem_private() {
        let shmem = |d: Dev, _: u64, _: u64| d.major == 0 && (d.minor == 1 || d.minor == 0x17);
        let never = |_: u64, _: u64| -> Option<u64> { panic!("no pagemap needed") };
        let got = shmem_private_from_smaps(SMAPS, shmem, never);
        assert_eq!(got, (2048 + 4 + 4092 + 40) * 1024);
        assert_eq!(shmem_private_from_smaps(SMAPS, |_, _, _| false, never), 0);
        assert_eq!(shmem_private_from_smaps(b"", shmem, never), 0);
    }

    /// A memfd mapped MAP_PRIVATE: 16 copied-on-write pages still shared with a forked child
    /// (Shared_Dirty, and Anonymous), 43 file pages only this process maps (Private).
    const PRIVATE_COW: &[u8] =
        b"7ff268195000-7ff2681d5000 rw-p 00000000 00:01 217190   /memfd:x (deleted)
Size:                256 kB
Rss:                 236 kB
Shared_Clean:          0 kB
Shared_Dirty:         64 kB
Private_Clean:         0 kB
Private_Dirty:       172 kB
Anonymous:            64 kB
";

    #[test]
    fn private_mapping_with_shared_copies_asks_pagemap() {
        let shmem = |_: Dev, _: u64, _: u64| true;
        let mut asked = Vec::new();
        let got = shmem_private_from_smaps(PRIVATE_COW, shmem, |s, e| {
            asked.push((s, e));
            Some(172 * 1024)
        });
        assert_eq!(got, 172 * 1024);
        assert_eq!(asked, [(0x7ff2_6819_5000, 0x7ff2_681d_5000)]);
        // Without pagemap: the lower bound, Private - Anonymous.
        assert_eq!(shmem_private_from_smaps(PRIVATE_COW, shmem, |_, _| None), 108 * 1024);
        // An answer outside what the numbers allow is clamped: at most all of Private.
        assert_eq!(shmem_private_from_smaps(PRIVATE_COW, shmem, |_, _| Some(1 << 30)), 172 * 1024);
    }

    fn rollup_text(vals: &[(&str, u64)], header: &str) -> String {
        let mut s = format!("{header}\n");
        for (k, v) in vals {
            s += &format!("{k}:{:>width$} kB\n", v, width = 19 - k.len());
        }
        s
    }

    proptest! {
        #[test]
        fn garbage_never_panics(text in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = parse_smaps_rollup(&text);
            let _ = shmem_private_from_smaps(&text, |_, _, _| true, |_, _| Some(u64::MAX));
        }

        #[test]
        fn smaps_text_never_panics(text in "([0-9a-f]{1,12}-[0-9a-f]{1,12} [rwxsp-]{4} [0-9a-f]{8} [0-9a-f]{2}:[0-9a-f]{2} [0-9]{1,6} .{0,20}\n|Private_(Clean|Dirty): +[0-9]{1,25} kB\n|Anonymous: +[0-9]{1,5} kB\n|.{0,30}\n){0,20}") {
            let _ = shmem_private_from_smaps(text.as_bytes(), |_, _, _| true, |_, _| Some(3));
        }

        #[test]
        fn rollup_round_trip(
            vals in proptest::collection::vec(0u64..(1 << 40), 11),
            order in Just(()).prop_perturb(|_, mut rng| {
                let mut idx: Vec<usize> = (0..11).collect();
                for i in (1..idx.len()).rev() {
                    let j = (rng.next_u32() as usize) % (i + 1);
                    idx.swap(i, j);
                }
                idx
            }),
            header in "[ -~]{0,60}",
        ) {
            let keys = ["Rss", "Pss", "Pss_Anon", "Pss_File", "Pss_Shmem", "Shared_Clean",
                "Shared_Dirty", "Private_Clean", "Private_Dirty", "Swap", "SwapPss"];
            let mut pairs: Vec<(&str, u64)> = order.iter().map(|&i| (keys[i], vals[i])).collect();
            pairs.push(("Referenced", 7));
            pairs.push(("Unknown_Future_Key", 9));
            let text = rollup_text(&pairs, &header);
            let m = parse_smaps_rollup(text.as_bytes()).unwrap();
            let got = [m.rss, m.pss, m.pss_anon, m.pss_file, m.pss_shmem, m.shared_clean,
                m.shared_dirty, m.private_clean, m.private_dirty, m.swap, m.swap_pss];
            for i in 0..11 {
                prop_assert_eq!(got[i], vals[i] * 1024, "{}", keys[i]);
            }
            prop_assert_eq!(m.uss, (vals[7] + vals[8]) * 1024);
        }
    }
}
