//! The procfs backend: getdents64 over /proc, one `openat(procfd, "PID/stat")` + `read` +
//! `close` per process, parsed in place.
//!
//! Nothing is allocated per process in the walk: the directory buffer, the file buffer and
//! the caller's output vector are reused from one refresh to the next, paths are built in a
//! stack buffer, and a [`Process`] keeps its comm inline. `status` is read only when the uid
//! is asked for, `cmdline` only when the command line is (that one allocates its result).
//! A process whose `cmdline` is gone by the time it is read is skipped too.
//! Those are opened before `stat` is read, so that a pid reused between the reads cannot
//! mix two processes in one record (see `read_process`).
//!
//! A process that exits while it is being read (ENOENT or ESRCH from openat or read, an empty
//! read, a file that no longer parses) is skipped without an error: it is simply not in the
//! table. Only a failure to open or read /proc itself, or a resource shortage (EMFILE,
//! ENOMEM...) on a per-process file, is an error.

use std::ffi::CStr;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use super::parse;
use super::process::{Fields, Process};
use crate::sys::procfs as sys;
use spawnkit::quoted;
use spawnkit::{Error, Result};

/// The getdents64 buffer: about 2,000 /proc entries per call.
const DENTS_BUF: usize = 64 * 1024;
/// One read of `stat` (at most ~1.3 KiB) or of the head of `status` (~1.5 KiB; the lines we
/// need are in its first 20).
const FILE_BUF: usize = 4096;

/// /proc opened as a directory, and which procfs it is (st_dev, st_ino).
fn open_proc() -> Result<(File, (u64, u64))> {
    let proc =
        File::from(sys::open_dir(c"/proc").map_err(|e| Error::os("open", quoted("/proc"), e))?);
    let meta = proc
        .metadata()
        .map_err(|e| Error::os("fstat", quoted("/proc"), e.raw_os_error().unwrap_or(libc::EIO)))?;
    Ok((proc, (meta.dev(), meta.ino())))
}

/// The per-process errors that mean "it is gone" (or was never visible to us): skip it.
fn vanished(errno: i32) -> bool {
    matches!(errno, libc::ENOENT | libc::ESRCH | libc::EACCES | libc::EPERM)
}

/// `PID/NAME\0` in a stack buffer.
struct PidPath {
    buf: [u8; 32],
}

impl PidPath {
    /// `name` is a `PID/file` suffix such as `b"/stat\0"` (at most 16 bytes).
    fn new(pid: &[u8], name: &[u8]) -> Option<PidPath> {
        let mut buf = [0u8; 32];
        let end = pid.len() + name.len();
        if pid.is_empty() || end > buf.len() || name.last() != Some(&0) {
            return None;
        }
        buf[..pid.len()].copy_from_slice(pid);
        buf[pid.len()..end].copy_from_slice(name);
        Some(PidPath { buf })
    }

    fn as_cstr(&self) -> &CStr {
        // The buffer always holds a NUL (names end in one; the rest is zeros).
        CStr::from_bytes_until_nul(&self.buf).unwrap_or(c"")
    }
}

/// A pid in decimal, on the stack.
struct Digits {
    buf: [u8; 10],
    start: usize,
}

impl Digits {
    /// `None` for pids that cannot exist (0 and below).
    fn new(pid: i32) -> Option<Digits> {
        let mut buf = [0u8; 10];
        let mut start = buf.len();
        let mut n = u32::try_from(pid).ok().filter(|&n| n > 0)?;
        while n > 0 {
            start -= 1;
            buf[start] = b'0' + (n % 10) as u8;
            n /= 10;
        }
        Some(Digits { buf, start })
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

/// The /proc walker, kept open between refreshes.
pub(crate) struct Walker {
    proc: File,
    /// (st_dev, st_ino) of `proc`: which procfs it is.
    proc_id: (u64, u64),
    dents: Vec<u8>,
    file: Vec<u8>,
    page_size: u64,
}

impl Walker {
    /// Open /proc (`O_RDONLY | O_DIRECTORY | O_CLOEXEC`) and the buffers.
    pub(crate) fn open() -> Result<Walker> {
        let (proc, proc_id) = open_proc()?;
        Ok(Walker {
            proc,
            proc_id,
            dents: vec![0; DENTS_BUF],
            file: vec![0; FILE_BUF],
            page_size: sys::page_size(),
        })
    }

    /// Follow the caller's /proc: when `/proc` is now another procfs than the one open here
    /// (the caller moved to another mount namespace or root, or a procfs was mounted over
    /// it), open that one. Each procfs has its own options (`hidepid=`, `subset=`) and pid
    /// namespace, so a listing through the old one could show what the caller's /proc now
    /// hides. One stat(2) when nothing changed.
    pub(crate) fn follow_proc(&mut self) -> Result<()> {
        let now = std::fs::metadata("/proc").map_err(|e| {
            Error::os("stat", quoted("/proc"), e.raw_os_error().unwrap_or(libc::EIO))
        })?;
        if (now.dev(), now.ino()) != self.proc_id {
            (self.proc, self.proc_id) = open_proc()?;
        }
        Ok(())
    }

    /// Every process in /proc, appended to `out` in the order /proc lists them (increasing
    /// pid).
    pub(crate) fn read_all(&mut self, fields: Fields, out: &mut Vec<Process>) -> Result<()> {
        sys::rewind(self.proc.as_fd()).map_err(|e| Error::os("lseek", quoted("/proc"), e))?;
        loop {
            let n = sys::getdents64(self.proc.as_fd(), &mut self.dents)
                .map_err(|e| Error::os("getdents64", quoted("/proc"), e))?;
            if n == 0 {
                return Ok(());
            }
            // The names borrow `dents` while `file` is written: split the borrows.
            let Walker { proc, dents, file, page_size, .. } = self;
            for name in sys::dirents(&dents[..n]) {
                if name.is_empty() || !name.iter().all(u8::is_ascii_digit) {
                    continue;
                }
                let got = read_process(proc.as_fd(), name, fields, false, file, *page_size)?;
                if let Some(p) = got {
                    out.push(p);
                }
            }
        }
    }

    /// The processes among `pids` (each read directly, no directory walk), appended to
    /// `out` in the order given. Pids that do not exist, or that name a thread other than
    /// its group's leader, give nothing.
    pub(crate) fn read_pids(
        &mut self,
        pids: &[i32],
        fields: Fields,
        out: &mut Vec<Process>,
    ) -> Result<()> {
        let Walker { proc, file, page_size, .. } = self;
        for &pid in pids {
            let Some(name) = Digits::new(pid) else { continue };
            // /proc/TID exists for any thread: read_process checks the tgid in status.
            let got = read_process(proc.as_fd(), name.as_bytes(), fields, true, file, *page_size)?;
            if let Some(p) = got.filter(|p| p.pid == pid) {
                out.push(p);
            }
        }
        Ok(())
    }

    /// `/proc/PID/cmdline`, or `None` when the process is gone.
    pub(crate) fn cmdline(&mut self, pid: i32) -> Result<Option<Vec<u8>>> {
        cmdline_in(self.proc.as_fd(), pid, &mut self.file)
    }
}

/// One process: `PID/stat`, and `status` (for the uid, or for `check_leader`: drop a pid
/// that names a thread other than its group's leader) and `cmdline` when `fields` asks.
/// `Ok(None)` when the process is gone.
///
/// Every file is opened before `stat` is read, so all of them describe one process even if
/// the pid is reused meanwhile: an open file keeps naming the process it was opened for
/// (reading it once that process has been reaped fails with ESRCH), and a pid is reused only
/// after its process has been reaped. The stat read succeeding after the other opens shows
/// that the process was still there when they were made, so they found it and not a
/// newcomer with the same pid.
fn read_process(
    proc: BorrowedFd<'_>,
    name: &[u8],
    fields: Fields,
    check_leader: bool,
    buf: &mut Vec<u8>,
    page_size: u64,
) -> Result<Option<Process>> {
    let Some(stat_fd) = open_file(proc, name, b"/stat\0")? else { return Ok(None) };
    let status_fd = if fields.uid || check_leader {
        match open_file(proc, name, b"/status\0")? {
            Some(fd) => Some(fd),
            None => return Ok(None),
        }
    } else {
        None
    };
    let cmdline_fd = if fields.cmdline {
        match open_file(proc, name, b"/cmdline\0")? {
            Some(fd) => Some(fd),
            None => return Ok(None),
        }
    } else {
        None
    };

    let Some(n) = read_once(&stat_fd, buf)? else { return Ok(None) };
    let Some(s) = parse::stat(&buf[..n]) else { return Ok(None) };
    let mut p = Process {
        pid: s.pid,
        ppid: s.ppid,
        comm: s.comm,
        state: s.state,
        uid: None,
        threads: s.threads,
        start_ticks: super::process::unwrap_start_ticks(s.start_ticks),
        rss_bytes: s.rss_pages.saturating_mul(page_size),
        cmdline: None,
    };
    if let Some(fd) = &status_fd {
        let Some(n) = read_once(fd, buf)? else { return Ok(None) };
        let status = &buf[..n];
        if check_leader && parse::status_tgid(status) != Some(p.pid) {
            return Ok(None);
        }
        if fields.uid {
            let Some(uid) = parse::status_euid(status) else { return Ok(None) };
            p.uid = Some(uid);
        }
    }
    if let Some(fd) = &cmdline_fd {
        // Gone since its stat was read: skipped like any other vanished process, not listed
        // without its command line.
        let Some(cmdline) = read_whole(fd, buf)? else { return Ok(None) };
        p.cmdline = Some(cmdline);
    }
    Ok(Some(p))
}

/// An open file of /proc: its fd and (for error messages) its path under /proc.
struct ProcFile {
    fd: OwnedFd,
    path: PidPath,
}

/// `openat(proc, "PID/NAME")`: `None` when the process is gone (or hidden from us).
fn open_file(proc: BorrowedFd<'_>, pid: &[u8], name: &[u8]) -> Result<Option<ProcFile>> {
    let Some(path) = PidPath::new(pid, name) else { return Ok(None) };
    match sys::open_in(proc, path.as_cstr()) {
        Ok(fd) => Ok(Some(ProcFile { fd, path })),
        Err(e) if vanished(e) => Ok(None),
        Err(e) => Err(Error::os("openat", quoted(proc_path(&path)), e)),
    }
}

/// One read: the byte count, or `None` when the process is gone (an empty read included:
/// the file of a process being torn down).
fn read_once(file: &ProcFile, buf: &mut [u8]) -> Result<Option<usize>> {
    match sys::read(file.fd.as_fd(), buf) {
        Ok(0) => Ok(None),
        Ok(n) => Ok(Some(n)),
        Err(e) if vanished(e) => Ok(None),
        Err(e) => Err(Error::os("read", quoted(proc_path(&file.path)), e)),
    }
}

/// The whole file (cmdline can be longer than the buffer, which grows and is kept): `None`
/// when the process is gone. An empty file (kernel thread, zombie) is `Some(empty)`.
fn read_whole(file: &ProcFile, buf: &mut Vec<u8>) -> Result<Option<Vec<u8>>> {
    let mut have = 0;
    loop {
        if have == buf.len() {
            buf.resize((buf.len() * 2).max(FILE_BUF), 0);
        }
        match sys::read(file.fd.as_fd(), &mut buf[have..]) {
            Ok(0) => return Ok(Some(buf[..have].to_vec())),
            Ok(n) => have += n,
            Err(e) if vanished(e) => return Ok(None),
            Err(e) => return Err(Error::os("read", quoted(proc_path(&file.path)), e)),
        }
    }
}

fn proc_path(path: &PidPath) -> String {
    format!("/proc/{}", path.as_cstr().to_string_lossy())
}

/// `/proc/PID/cmdline` read on its own (for the BPF backend, or any caller): the raw bytes
/// (arguments each followed by a NUL), `Some(empty)` for a kernel thread or a zombie,
/// `None` when the process is gone or /proc cannot be read.
pub(crate) fn read_cmdline(pid: i32) -> Option<Vec<u8>> {
    let proc = sys::open_dir(c"/proc").ok()?;
    cmdline_in(proc.as_fd(), pid, &mut Vec::new()).ok().flatten()
}

fn cmdline_in(proc: BorrowedFd<'_>, pid: i32, buf: &mut Vec<u8>) -> Result<Option<Vec<u8>>> {
    let Some(digits) = Digits::new(pid) else { return Ok(None) };
    match open_file(proc, digits.as_bytes(), b"/cmdline\0")? {
        Some(file) => read_whole(&file, buf),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl PidPath {
        fn from_pid(pid: i32, name: &[u8]) -> Option<PidPath> {
            PidPath::new(Digits::new(pid)?.as_bytes(), name)
        }
    }

    #[test]
    fn pid_paths() {
        assert_eq!(PidPath::from_pid(1234, b"/stat\0").unwrap().as_cstr(), c"1234/stat");
        assert_eq!(
            PidPath::from_pid(i32::MAX, b"/cmdline\0").unwrap().as_cstr(),
            c"2147483647/cmdline"
        );
        assert!(PidPath::from_pid(0, b"/stat\0").is_none());
        assert!(PidPath::from_pid(-5, b"/stat\0").is_none());
        assert!(PidPath::new(b"1", b"/stat").is_none());
        assert!(PidPath::new(&[b'9'; 30], b"/stat\0").is_none());
    }

    #[test]
    fn walker_sees_itself_and_its_threads_are_not_processes() {
        let mut w = Walker::open().unwrap();
        let me = std::process::id() as i32;
        let mut out = Vec::new();
        let all = Fields { uid: true, cmdline: true };
        w.read_all(all, &mut out).unwrap();
        let p = out.iter().find(|p| p.pid == me).expect("listed");
        assert_eq!(p.ppid, std::os::unix::process::parent_id() as i32);
        assert!(p.uid.is_some());
        assert!(p.cmdline.as_ref().is_some_and(|c| !c.is_empty()));
        assert!(out.windows(2).all(|w| w[0].pid < w[1].pid));

        // A thread of ours: /proc/TID/stat exists, but it is no process.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // This thread's id, from /proc/thread-self -> PID/task/TID.
            let tid = std::fs::read_link("/proc/thread-self").unwrap();
            let tid: i32 = tid.file_name().unwrap().to_str().unwrap().parse().unwrap();
            tx.send(tid).unwrap();
            done_rx.recv().ok();
        });
        let tid = rx.recv().unwrap();
        out.clear();
        w.read_pids(&[tid, me, 0, -1, i32::MAX], Fields::default(), &mut out).unwrap();
        assert_eq!(out.iter().map(|p| p.pid).collect::<Vec<_>>(), [me]);
        assert_eq!(out[0].uid, None);
        assert_eq!(out[0].cmdline, None);
        done_tx.send(()).unwrap();
        t.join().unwrap();
    }
}
