//! The BPF task-iterator backend: one `iter/task` program (bpf/task_iter.bpf.c,
//! compiled by build.rs and embedded here) writes a fixed-size binary record per process; a
//! listing is a few large reads of a fresh iterator fd.
//!
//! [`TaskIter::open`] maps the kernel's BTF (/sys/kernel/btf/vmlinux; read when it cannot be
//! mapped, before Linux 6.16), resolves the program's CO-RE field relocations against it
//! ([`core`]), loads the program and attaches it (`sys::bpf`), and keeps only the link: the
//! program stays loaded as long as the link is open. [`TaskIter::read`] then costs one
//! `BPF_ITER_CREATE` and reads of up to the kernel's seq_file buffer (8 pages) each.
//!
//! The loader is our own, not aya's: parsing all of vmlinux's BTF into aya's types, its
//! feature probes and its relocation search cost ~70 ms per `open` here, against ~3 ms for
//! one pass over the mapped BTF that only indexes types and picks the few structs the program
//! reads.
//!
//! Records carry global pids (task->tgid), so the iterator is refused to a caller outside the
//! initial pid namespace (the header of every read says the reader's pid-namespace level).
//! The iterator shows every task whoever reads it, and reading a loaded one needs no
//! privilege: the table asks `super::reader` before every listing whether the caller may
//! have that view now (its credentials and its /proc), and drops the program when not. The
//! fields mirror `/proc/PID/stat` (see the C file for how each is read); two known
//! differences: kernel threads' `comm` is `task->comm` where /proc shows workqueue workers as
//! `kworker/0:1-events` and long kthread names in full, and rss before Linux 6.2 leaves out
//! the per-thread counter caches, exactly as /proc did then.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::fd::{AsFd, OwnedFd};

use super::process::{Comm, Process, State, NS_PER_TICK};
use spawnkit::Error;

mod btf;
mod core;
mod elf;

/// The program (an ELF object built by build.rs), or why this build has none.
#[cfg(not(spawnkit_no_bpf))]
static PROGRAM: Result<&[u8], &str> =
    Ok(include_bytes!(concat!(env!("OUT_DIR"), "/task_iter.bpf.o")));
#[cfg(spawnkit_no_bpf)]
static PROGRAM: Result<&[u8], &str> = Err(env!("SPAWNKIT_NO_BPF_REASON"));

/// The program's section and function names in the object.
const SECTION: &str = "iter/task";
const PROGRAM_NAME: &str = "spawnkit_tasks";
/// The kernel function whose BTF id a task iterator attaches to.
const ITER_FUNC: &[u8] = b"bpf_iter_task";
/// The one kfunc the program calls (see task_iter.bpf.c).
const RDONLY_CAST: &[u8] = b"bpf_rdonly_cast";

/// Must match task_iter.bpf.c (`SPAWNKIT_MAGIC`, `SPAWNKIT_LAYOUT_VERSION`, `struct header`,
/// `struct record`).
const MAGIC: u32 = 0x4b50_5350;
const VERSION: u16 = 2;
const HEADER_SIZE: usize = 24;
const RECORD_SIZE: usize = 56;

/// What a caller asks for per read: the kernel returns at most its seq_file buffer (8 pages)
/// per read, so a bigger buffer only guarantees that no record is ever split.
const BUF_SIZE: usize = 256 * 1024;

/// A loaded and attached task iterator, kept loaded between reads.
pub(crate) struct TaskIter {
    /// The `BPF_LINK_CREATE` fd: holds the program in the kernel.
    link: OwnedFd,
    /// Read buffer, reused by every read.
    buf: Vec<u8>,
    page_size: u64,
}

impl TaskIter {
    /// Load and attach the iterator; `Err` says why it is unavailable.
    pub(crate) fn open() -> Result<TaskIter, String> {
        let program = PROGRAM.map_err(|why| format!("this build has no BPF program: {why}"))?;
        if !privileged() {
            return Err("needs root or CAP_BPF+CAP_PERFMON".into());
        }
        let link = load_and_attach(program, true)?;
        let mut it =
            TaskIter { link, buf: vec![0; BUF_SIZE], page_size: crate::sys::procfs::page_size() };
        it.check_reader().map_err(|e| e.to_string())?;
        Ok(it)
    }

    /// Append one record per process (thread-group leader) to `out`; on error, `out` is left
    /// as it was.
    pub(crate) fn read(&mut self, out: &mut Vec<Process>) -> spawnkit::Result<()> {
        let len = out.len();
        self.read_records(out).inspect_err(|_| out.truncate(len))
    }

    fn read_records(&mut self, out: &mut Vec<Process>) -> spawnkit::Result<()> {
        let mut file = self.session()?;
        let decoder = Decoder { page_size: self.page_size };
        decoder.stream(&mut self.buf, |buf| read_some(&mut file, buf), out)
    }

    /// A new iterator session: reading its fd runs the program over every task once.
    fn session(&self) -> spawnkit::Result<File> {
        crate::sys::bpf::iter_create(self.link.as_fd())
            .map(File::from)
            .map_err(|e| Error::os("bpf iterator read", "(BPF_ITER_CREATE)", e))
    }

    /// Refuse a reader outside the initial pid namespace: read the first page of a session
    /// and look at its header.
    fn check_reader(&mut self) -> spawnkit::Result<()> {
        let mut file = self.session()?;
        let mut filled = 0;
        while filled < HEADER_SIZE {
            let n = read_some(&mut file, &mut self.buf[filled..4096])?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        if filled < HEADER_SIZE {
            return Err(Error::invalid("bpf iterator read", "task iterator", "no header"));
        }
        check_header(&self.buf[..HEADER_SIZE]).map(drop)
    }
}

/// Turns the bytes of a session (a header, then records) into [`Process`]es.
struct Decoder {
    page_size: u64,
}

impl Decoder {
    /// Fill `buf` with `read` until it returns 0, decoding as it goes; a record split between
    /// two reads (only when a read returns less than asked) waits in `buf` for the rest.
    fn stream(
        &self,
        buf: &mut [u8],
        mut read: impl FnMut(&mut [u8]) -> spawnkit::Result<usize>,
        out: &mut Vec<Process>,
    ) -> spawnkit::Result<()> {
        // The reader's boottime offset, once the header is read.
        let mut header = None;
        let mut filled = 0;
        loop {
            let n = read(&mut buf[filled..])?;
            if n == 0 {
                break;
            }
            filled += n;
            let mut at = 0;
            let boottime_offset = match header {
                Some(offset) => offset,
                None if filled < HEADER_SIZE => continue,
                None => {
                    at = HEADER_SIZE;
                    *header.insert(check_header(&buf[..HEADER_SIZE])?)
                }
            };
            let records = buf[at..filled].chunks_exact(RECORD_SIZE);
            at += records.len() * RECORD_SIZE;
            out.extend(records.map(|r| process(r, self.page_size, boottime_offset)));
            buf.copy_within(at..filled, 0);
            filled -= at;
        }
        let bad = |why| Err(Error::invalid("bpf iterator read", "task iterator", why));
        match (header, filled) {
            (None, _) => bad("the iterator wrote no header"),
            (Some(_), 0) => Ok(()),
            (Some(_), _) => bad("the output ended in the middle of a record"),
        }
    }
}

/// Check the header every session starts with: this build's layout, a reader in the initial
/// pid namespace. Gives the boottime offset of the reader's time namespace (ns), which /proc
/// adds to start times.
fn check_header(h: &[u8]) -> spawnkit::Result<i64> {
    let bad = |why: &str| Error::invalid("bpf iterator read", "task iterator", why);
    if u32_at(h, 0) != MAGIC || u16_at(h, 4) != VERSION || usize::from(u16_at(h, 6)) != RECORD_SIZE
    {
        return Err(bad("the BPF program's output does not match this build's record layout"));
    }
    let (tgid, level) = (u32_at(h, 8), u32_at(h, 12));
    if level != 0 || tgid != std::process::id() {
        return Err(Error::unsupported(
            "bpf iterator read",
            "not in the initial pid namespace: the task iterator reports global pids",
        ));
    }
    Ok(u64_at(h, 16) as i64)
}

/// One record (`struct record` of task_iter.bpf.c) as a [`Process`].
fn process(r: &[u8], page_size: u64, boottime_offset: i64) -> Process {
    let start_ns = u64_at(r, 0).saturating_add_signed(boottime_offset);
    Process {
        pid: u32_at(r, 16) as i32,
        ppid: u32_at(r, 20) as i32,
        comm: Comm::new(&r[40..56]),
        state: State::from_task_state(u32_at(r, 32), u32_at(r, 36)),
        uid: Some(u32_at(r, 24)),
        threads: u32_at(r, 28),
        start_ticks: start_ns / NS_PER_TICK,
        rss_bytes: u64_at(r, 8).saturating_mul(page_size),
        cmdline: None,
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    let mut a = [0; 2];
    a.copy_from_slice(&b[at..at + 2]);
    u16::from_ne_bytes(a)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(a)
}

/// read(2) into `buf`, retrying on EINTR, and on EAGAIN (the iterator gives up a read after a
/// million tasks without output, and goes on with the next read).
fn read_some(file: &mut File, buf: &mut [u8]) -> spawnkit::Result<usize> {
    loop {
        match file.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if matches!(e.kind(), ErrorKind::Interrupted | ErrorKind::WouldBlock) => {
                continue
            }
            Err(e) => {
                return Err(Error::os(
                    "bpf iterator read",
                    "task iterator",
                    e.raw_os_error().unwrap_or(libc::EIO),
                ))
            }
        }
    }
}

impl State {
    /// From the kernel's task state bits, as `fs/proc/array.c` turns them into the letter of
    /// `/proc/PID/stat` (`task_state_index`: "RSDTtXZPI"): the reportable bits of
    /// `state | exit_state`; TASK_IDLE reads as I, an RT-lock wait and a frozen task as D; then
    /// the highest bit set picks the letter.
    pub(crate) fn from_task_state(state: u32, exit_state: u32) -> State {
        const TASK_UNINTERRUPTIBLE: u32 = 0x2;
        const TASK_NOLOAD: u32 = 0x400;
        const TASK_IDLE: u32 = TASK_UNINTERRUPTIBLE | TASK_NOLOAD;
        const TASK_RTLOCK_WAIT: u32 = 0x1000;
        const TASK_FROZEN: u32 = 0x8000;
        /// RUNNING | INTERRUPTIBLE | UNINTERRUPTIBLE | STOPPED | TRACED | EXIT_DEAD |
        /// EXIT_ZOMBIE | PARKED
        const TASK_REPORT: u32 = 0x7f;
        const TASK_REPORT_IDLE: u32 = TASK_REPORT + 1;
        const LETTERS: &[u8; 9] = b"RSDTtXZPI";

        let mut bits = (state | exit_state) & TASK_REPORT;
        if state & TASK_IDLE == TASK_IDLE {
            bits = TASK_REPORT_IDLE;
        }
        if state & (TASK_RTLOCK_WAIT | TASK_FROZEN) != 0 {
            bits = TASK_UNINTERRUPTIBLE;
        }
        // fls(): 0 for no bit, else 1 + the index of the highest bit; at most 8 here.
        let index = (u32::BITS - bits.leading_zeros()) as usize;
        State::from_letter(LETTERS[index.min(LETTERS.len() - 1)])
    }
}

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Whether the calling thread may load a tracing program: CAP_SYS_ADMIN, or CAP_BPF and
/// CAP_PERFMON, in its effective set (capget(2)). When the set cannot be read, try anyway and
/// let the kernel say.
fn privileged() -> bool {
    crate::sys::creds::effective_caps().map_or(true, super::reader::may_load)
}

/// Relocate the program against the kernel's BTF, load it, attach it; keep only the link,
/// which holds the program. `kfunc`: call bpf_rdonly_cast where the kernel has it (else the
/// loader's fallback, as on kernels without it).
fn load_and_attach(object: &[u8], kfunc: bool) -> Result<OwnedFd, String> {
    let obj = elf::parse(object, SECTION)?;
    let local = btf::Btf::parse(obj.btf, |_, _, _| {})?;
    let relos = core::relocations(obj.btf_ext, &local, SECTION)?;
    let wanted = core::wanted(&relos, &local)?;

    // Mapped where the kernel allows it (6.16+), else read.
    let (mapped, read);
    let kernel: &[u8] = match crate::sys::bpf::Mapped::vmlinux_btf() {
        Ok(m) => {
            mapped = m;
            mapped.bytes()
        }
        Err(_) => {
            read = std::fs::read(VMLINUX_BTF).map_err(|e| match e.kind() {
                ErrorKind::NotFound => format!("kernel has no BTF ({VMLINUX_BTF} missing)"),
                _ => format!("{VMLINUX_BTF}: {e}"),
            })?;
            &read
        }
    };
    let mut candidates = vec![Vec::new(); wanted.len()];
    let (mut iter_func, mut rdonly_cast) = (None, None);
    let target = btf::Btf::parse(kernel, |id, ty, names| {
        if ty.is_composite() {
            for (w, c) in wanted.iter().zip(candidates.iter_mut()) {
                if w.kind == ty.kind && names.is(ty.name_off, w.name) {
                    c.push(id);
                }
            }
        } else if ty.kind == btf::kind::FUNC {
            if names.is(ty.name_off, ITER_FUNC) {
                iter_func = iter_func.or(Some(id));
            } else if names.is(ty.name_off, RDONLY_CAST) {
                rdonly_cast = rdonly_cast.or(Some(id));
            }
        }
    })
    .map_err(|e| format!("kernel BTF: {e}"))?;
    let iter_func = iter_func.ok_or("kernel has no task iterator (Linux 5.8+)")?;

    let mut insns = obj.insns.to_vec();
    core::apply(&mut insns, &relos, &local, &target, &wanted, &candidates)?;
    let license = std::ffi::CStr::from_bytes_until_nul(obj.license)
        .map_err(|_| "bad BPF object: license is not a C string")?;

    // With the kfunc where the kernel has it; if the kernel refuses that, without.
    let rdonly_cast = rdonly_cast.filter(|_| kfunc);
    let mut attempts = if rdonly_cast.is_some() { vec![rdonly_cast, None] } else { vec![None] };
    let prog = loop {
        let cast = attempts.remove(0);
        link_kfuncs(&mut insns, &obj.kfunc_calls, cast)?;
        match crate::sys::bpf::prog_load_iter(&insns, license, PROGRAM_NAME, iter_func, None) {
            Ok(fd) => break fd,
            Err(libc::EPERM) => return Err(load_error("BPF_PROG_LOAD: Operation not permitted")),
            Err(_) if !attempts.is_empty() => continue,
            Err(e) => return Err(verifier_error(&insns, license, iter_func, e)),
        }
    };
    crate::sys::bpf::link_create_iter(prog.as_fd()).map_err(|e| {
        load_error(&format!("BPF_LINK_CREATE: {}", std::io::Error::from_raw_os_error(e)))
    })
}

/// Point each kfunc call at the kernel's function `cast` (the BTF id of `bpf_rdonly_cast`),
/// or, without one, turn it into `r0 = r1`: what the verifier itself makes of that kfunc.
fn link_kfuncs(
    insns: &mut [u8],
    calls: &[(usize, &[u8])],
    cast: Option<u32>,
) -> Result<(), String> {
    const CALL: u8 = 0x85; // BPF_JMP | BPF_CALL
    const MOV64_X: u8 = 0xbf; // BPF_ALU64 | BPF_MOV | BPF_X
    const PSEUDO_KFUNC_CALL: u8 = 2;
    let regs = |dst: u8, src: u8| {
        if cfg!(target_endian = "little") {
            src << 4 | dst
        } else {
            dst << 4 | src
        }
    };
    for &(at, name) in calls {
        if name != RDONLY_CAST {
            let name = String::from_utf8_lossy(name);
            return Err(format!("bad BPF object: unknown kernel function {name}"));
        }
        let insn = at.checked_add(8).and_then(|end| insns.get_mut(at..end));
        let insn = insn.filter(|_| at % 8 == 0);
        let insn = insn.ok_or("bad BPF object: kfunc call out of range")?;
        let (code, regs, imm) = match cast {
            Some(id) => (CALL, regs(0, PSEUDO_KFUNC_CALL), id as i32),
            None => (MOV64_X, regs(0, 1), 0),
        };
        insn[0] = code;
        insn[1] = regs;
        insn[2..4].copy_from_slice(&0i16.to_ne_bytes());
        insn[4..8].copy_from_slice(&imm.to_ne_bytes());
    }
    Ok(())
}

/// Load again with the verifier's log, to say why it refused (with `errno`, what the load
/// without a log failed with: a log that fills its buffer makes the load fail with ENOSPC,
/// the log's end kept).
fn verifier_error(insns: &[u8], license: &std::ffi::CStr, iter_func: u32, errno: i32) -> String {
    let mut log = vec![0u8; 1 << 20];
    let _ =
        crate::sys::bpf::prog_load_iter(insns, license, PROGRAM_NAME, iter_func, Some(&mut log));
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let log = String::from_utf8_lossy(&log[..end]);
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" / ");
    load_error(&format!(
        "BPF_PROG_LOAD: {}; verifier: {tail}",
        std::io::Error::from_raw_os_error(errno)
    ))
}

/// A load failure, with the privilege hint when the kernel said EPERM.
fn load_error(what: &str) -> String {
    if what.contains("Operation not permitted") {
        format!("needs root or CAP_BPF+CAP_PERFMON ({what})")
    } else {
        format!("the kernel refused the BPF task iterator: {what}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_states_map_like_fs_proc_array_c() {
        let cases: &[(u32, u32, char)] = &[
            (0x0000, 0, 'R'),
            (0x0001, 0, 'S'),
            (0x0002, 0, 'D'),
            (0x0102, 0, 'D'),    // TASK_KILLABLE
            (0x0104, 0, 'T'),    // TASK_STOPPED = WAKEKILL | __TASK_STOPPED
            (0x0008, 0, 't'),    // TASK_TRACED
            (0x0080, 0x10, 'X'), // TASK_DEAD, EXIT_DEAD
            (0x0080, 0x20, 'Z'), // TASK_DEAD, EXIT_ZOMBIE
            (0x0000, 0x20, 'Z'),
            (0x0040, 0, 'P'), // TASK_PARKED
            (0x0402, 0, 'I'), // TASK_IDLE
            (0x2402, 0, 'I'), // TASK_IDLE | TASK_FREEZABLE
            (0x1000, 0, 'D'), // TASK_RTLOCK_WAIT
            (0x8000, 0, 'D'), // TASK_FROZEN
            (0x2001, 0, 'S'), // TASK_INTERRUPTIBLE | TASK_FREEZABLE
            (0x0200, 0, 'R'), // TASK_WAKING alone reports as running
            (0x0800, 0, 'R'), // TASK_NEW
        ];
        for &(state, exit, letter) in cases {
            assert_eq!(
                State::from_task_state(state, exit).letter(),
                letter,
                "state {state:#x} exit_state {exit:#x}"
            );
        }
    }

    fn header(magic: u32, version: u16, size: u16, tgid: u32, level: u32) -> Vec<u8> {
        header_with_offset(magic, version, size, tgid, level, 0)
    }

    fn header_with_offset(
        magic: u32,
        version: u16,
        size: u16,
        tgid: u32,
        level: u32,
        boottime_offset: i64,
    ) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&magic.to_ne_bytes());
        h.extend_from_slice(&version.to_ne_bytes());
        h.extend_from_slice(&size.to_ne_bytes());
        h.extend_from_slice(&tgid.to_ne_bytes());
        h.extend_from_slice(&level.to_ne_bytes());
        h.extend_from_slice(&boottime_offset.to_ne_bytes());
        assert_eq!(h.len(), HEADER_SIZE);
        h
    }

    #[test]
    fn header_checks_layout_and_pid_namespace() {
        let me = std::process::id();
        assert_eq!(check_header(&header(MAGIC, VERSION, RECORD_SIZE as u16, me, 0)).unwrap(), 0);
        let h = header_with_offset(MAGIC, VERSION, RECORD_SIZE as u16, me, 0, -7_000_000_001);
        assert_eq!(check_header(&h).unwrap(), -7_000_000_001);
        let e = check_header(&header(MAGIC, VERSION, RECORD_SIZE as u16, me, 1)).unwrap_err();
        assert!(e.to_string().contains("initial pid namespace"), "{e}");
        assert!(check_header(&header(MAGIC, VERSION, RECORD_SIZE as u16, me + 1, 0)).is_err());
        assert!(check_header(&header(MAGIC, VERSION + 1, RECORD_SIZE as u16, me, 0)).is_err());
        assert!(check_header(&header(MAGIC, VERSION, 48, me, 0)).is_err());
        assert!(check_header(&header(!MAGIC, VERSION, RECORD_SIZE as u16, me, 0)).is_err());
    }

    #[test]
    fn record_decodes() {
        let mut r = Vec::new();
        r.extend_from_slice(&(1234 * NS_PER_TICK + 5).to_ne_bytes()); // start_boottime
        r.extend_from_slice(&7u64.to_ne_bytes()); // rss pages
        r.extend_from_slice(&42i32.to_ne_bytes()); // pid
        r.extend_from_slice(&1i32.to_ne_bytes()); // ppid
        r.extend_from_slice(&1000u32.to_ne_bytes()); // euid
        r.extend_from_slice(&3u32.to_ne_bytes()); // threads
        r.extend_from_slice(&0x402u32.to_ne_bytes()); // state
        r.extend_from_slice(&0u32.to_ne_bytes()); // exit_state
        r.extend_from_slice(b"a (b)\nc\0\0\0\0\0\0\0\0\0");
        assert_eq!(r.len(), RECORD_SIZE);
        let p = process(&r, 4096, 0);
        assert_eq!((p.pid, p.ppid, p.uid, p.threads), (42, 1, Some(1000), 3));
        assert_eq!((p.start_ticks, p.rss_bytes), (1234, 7 * 4096));
        assert_eq!(p.comm.as_bytes(), b"a (b)\nc");
        assert_eq!(p.state, State::Idle);
        assert_eq!(p.cmdline, None);
        // A time namespace's boottime offset moves the start like /proc does.
        assert_eq!(process(&r, 4096, -(4 * NS_PER_TICK as i64)).start_ticks, 1230);
    }

    /// A record as task_iter.bpf.c writes it.
    fn record(pid: i32, ppid: i32, comm: &[u8; 16], state: u32, rss: u64) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&(pid as u64 * NS_PER_TICK).to_ne_bytes());
        r.extend_from_slice(&rss.to_ne_bytes());
        r.extend_from_slice(&pid.to_ne_bytes());
        r.extend_from_slice(&ppid.to_ne_bytes());
        r.extend_from_slice(&0u32.to_ne_bytes());
        r.extend_from_slice(&1u32.to_ne_bytes());
        r.extend_from_slice(&state.to_ne_bytes());
        r.extend_from_slice(&0u32.to_ne_bytes());
        r.extend_from_slice(comm);
        r
    }

    /// Feed `stream` to a decoder in reads of the given sizes (cycled; 0 ends the stream).
    fn decode_in_reads(stream: &[u8], sizes: &[usize]) -> spawnkit::Result<Vec<Process>> {
        let decoder = Decoder { page_size: 4096 };
        let mut buf = vec![0u8; 4 * RECORD_SIZE];
        let (mut at, mut i) = (0, 0);
        let mut out = Vec::new();
        let read = |dst: &mut [u8]| {
            let n = sizes[i % sizes.len()].min(dst.len()).min(stream.len() - at);
            dst[..n].copy_from_slice(&stream[at..at + n]);
            (at, i) = (at + n, i + 1);
            Ok(n)
        };
        decoder.stream(&mut buf, read, &mut out).map(|()| out)
    }

    proptest::proptest! {
        /// However the kernel splits the output between reads, the same records come out, odd
        /// comms (spaces, parentheses, newlines, no NUL) included.
        #[test]
        fn records_survive_any_split(
            procs in proptest::collection::vec(
                (1..i32::MAX, 0..i32::MAX, proptest::array::uniform16(proptest::num::u8::ANY),
                 0u32..0x10000, 0u64..1 << 40),
                0..20,
            ),
            sizes in proptest::collection::vec(1usize..200, 1..8),
        ) {
            let me = std::process::id();
            let mut stream = header(MAGIC, VERSION, RECORD_SIZE as u16, me, 0);
            let mut whole = Vec::new();
            for &(pid, ppid, comm, state, rss) in &procs {
                let r = record(pid, ppid, &comm, state, rss);
                whole.push(process(&r, 4096, 0));
                stream.extend_from_slice(&r);
            }
            let got = decode_in_reads(&stream, &sizes).unwrap();
            proptest::prop_assert_eq!(&got, &whole);
            for (p, &(pid, ppid, comm, _, rss)) in got.iter().zip(&procs) {
                let end = comm.iter().position(|&b| b == 0).unwrap_or(16).min(15);
                proptest::prop_assert_eq!(p.comm.as_bytes(), &comm[..end]);
                proptest::prop_assert_eq!((p.pid, p.ppid, p.rss_bytes), (pid, ppid, rss * 4096));
            }
            // Cut short anywhere after the header: an error, never a partial answer.
            if !procs.is_empty() {
                let cut = stream.len() - 1 - (sizes[0] % (RECORD_SIZE - 1));
                proptest::prop_assert!(decode_in_reads(&stream[..cut], &sizes).is_err());
            }
        }

        /// The loader's parsers take any bytes without panicking.
        #[test]
        fn parsers_take_any_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = elf::parse(&bytes, SECTION);
            if let Ok(b) = btf::Btf::parse(&bytes, |_, _, _| {}) {
                let _ = core::relocations(&bytes, &b, SECTION);
                for id in 0..64 {
                    let _ = b.size_of(id);
                }
            }
        }
    }

    #[test]
    fn the_header_gives_the_readers_boottime_offset() {
        let me = std::process::id();
        let offset = -(4 * NS_PER_TICK as i64);
        let mut stream = header_with_offset(MAGIC, VERSION, RECORD_SIZE as u16, me, 0, offset);
        stream.extend_from_slice(&record(1234, 1, b"x\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 1, 0));
        let got = decode_in_reads(&stream, &[7]).unwrap();
        assert_eq!(got[0].start_ticks, 1230);
    }

    #[test]
    fn a_stream_without_header_or_cut_in_a_record_is_an_error() {
        let e = decode_in_reads(&[], &[64]).unwrap_err();
        assert!(e.to_string().contains("no header"), "{e}");
        let mut stream = header(MAGIC, VERSION, RECORD_SIZE as u16, std::process::id(), 0);
        stream.extend_from_slice(&record(5, 1, b"x\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 1, 0)[..30]);
        let e = decode_in_reads(&stream, &[64]).unwrap_err();
        assert_eq!(e.step(), "bpf iterator read");
        assert!(e.to_string().contains("middle of a record"), "{e}");
    }

    /// Whether BPF can load here (root, kernel BTF, a build with the program); when not, the
    /// tests that need it say why and pass, unless SPAWNKIT_REQUIRE_BPF=1.
    fn bpf_here() -> bool {
        let why = if PROGRAM.is_err() {
            "this build has no BPF program"
        } else if !privileged() {
            "not root"
        } else if !std::path::Path::new(VMLINUX_BTF).exists() {
            "no kernel BTF"
        } else {
            return true;
        };
        let required = std::env::var_os("SPAWNKIT_REQUIRE_BPF").is_some_and(|v| v == "1");
        assert!(!required, "SPAWNKIT_REQUIRE_BPF=1 but BPF cannot load here: {why}");
        eprintln!("skipped: {why}");
        false
    }

    /// The id of the kernel function `name` in the kernel's BTF.
    fn kernel_func(name: &[u8]) -> u32 {
        let btf = std::fs::read(VMLINUX_BTF).unwrap();
        let mut found = None;
        btf::Btf::parse(&btf, |id, ty, names| {
            if ty.kind == btf::kind::FUNC && names.is(ty.name_off, name) {
                found = found.or(Some(id));
            }
        })
        .unwrap();
        found.unwrap()
    }

    /// Both ways of loading the program verify and list this process: with bpf_rdonly_cast
    /// and with the `r0 = r1` the loader puts in its place on kernels without it.
    #[test]
    fn the_program_loads_with_and_without_the_kfunc() {
        if !bpf_here() {
            return;
        }
        for kfunc in [true, false] {
            let link = load_and_attach(PROGRAM.unwrap(), kfunc)
                .unwrap_or_else(|e| panic!("kfunc {kfunc}: {e}"));
            let mut it = TaskIter { link, buf: vec![0; BUF_SIZE], page_size: 4096 };
            let mut procs = Vec::new();
            it.read(&mut procs).unwrap();
            let me = std::process::id() as i32;
            assert!(procs.iter().any(|p| p.pid == me), "kfunc {kfunc}: this process listed");
        }
    }

    /// A program the verifier refuses: the error gives the verifier's own reason.
    #[test]
    fn a_refused_program_says_what_the_verifier_said() {
        if !bpf_here() {
            return;
        }
        // `exit` with r0 never set.
        let exit = [0x95, 0, 0, 0, 0, 0, 0, 0];
        let why = verifier_error(&exit, c"GPL", kernel_func(ITER_FUNC), libc::EACCES);
        assert!(why.contains("R0 !read_ok"), "{why}");
        assert!(why.starts_with("the kernel refused the BPF task iterator"), "{why}");
    }

    /// A kfunc relocation must sit on a call instruction: anything else would be overwritten.
    #[cfg(not(spawnkit_no_bpf))]
    #[test]
    fn a_kfunc_relocation_off_a_call_is_refused() {
        let program = PROGRAM.unwrap();
        let obj = elf::parse(program, SECTION).unwrap();
        let section = obj.insns.as_ptr() as usize - program.as_ptr() as usize;
        let (at, name) = obj.kfunc_calls[0];
        assert_eq!((name, program[section + at]), (RDONLY_CAST, 0x85));
        let mut bad = program.to_vec();
        bad[section + at] = 0xb7; // r0 = imm
        let e = elf::parse(&bad, SECTION).err().unwrap();
        assert!(e.contains("not on a call"), "{e}");
    }

    /// The embedded program, damaged byte by byte, never makes the loader's parsing panic.
    #[cfg(not(spawnkit_no_bpf))]
    #[test]
    fn a_damaged_program_is_an_error_not_a_panic() {
        let program = PROGRAM.unwrap();
        let obj = elf::parse(program, SECTION).unwrap();
        let local = btf::Btf::parse(obj.btf, |_, _, _| {}).unwrap();
        let relos = core::relocations(obj.btf_ext, &local, SECTION).unwrap();
        assert!(!relos.is_empty());
        assert_eq!(obj.kfunc_calls.len(), 1);
        let step = (program.len() / 4000).max(1);
        for at in (0..program.len()).step_by(step) {
            let mut bad = program.to_vec();
            bad[at] ^= 0xff;
            if let Ok(obj) = elf::parse(&bad, SECTION) {
                if let Ok(local) = btf::Btf::parse(obj.btf, |_, _, _| {}) {
                    if let Ok(relos) = core::relocations(obj.btf_ext, &local, SECTION) {
                        let _ = core::wanted(&relos, &local);
                    }
                }
            }
        }
    }
}
