//! Method 4, the cost of a fence: the tiny child started inside a user namespace (the caller
//! mapped to root), a mount namespace with a fresh tmpfs on /tmp, and a network namespace with
//! `lo` up, built three ways, against the same launches without a fence.
//!
//! Rows:
//! - spawnkit clone-vfork, no fence, and vfork + execvp, no fence (the launcher of the two
//!   chains below): the bases the fence costs are taken from;
//! - spawnkit: `Command::user_map(UserMap::Root).private_tmp(..).private_network(true)`, one
//!   spawn (clone3 with `CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET`, then the id maps, the
//!   mounts and the loopback ioctl in the child);
//! - the usual shell chain, `unshare -Urmn sh -c 'mount -t tmpfs tmpfs /tmp && ip link set lo
//!   up && exec tiny'`, started by vfork + execvp;
//! - bubblewrap, `bwrap --unshare-user --uid 0 --gid 0 --unshare-net --dev-bind / / --tmpfs
//!   /tmp -- tiny` (bwrap brings `lo` up itself), started by vfork + execvp; installed from
//!   Debian's packages (`apt-get install -y bubblewrap`) when missing, unless `--no-install`;
//! - with `--steps`, each fence built one piece at a time, each step's cost being the
//!   difference to the step before it: spawnkit with the user namespace and maps, then the
//!   mount namespace and tmpfs, the network namespace, lo up; unshare alone, then sh, mount,
//!   ip; bwrap with a user namespace only, then the tmpfs, the network namespace.
//!
//! The measurement is the latency method's: the parent reads CLOCK_MONOTONIC, starts the row,
//! and the tiny child, found through the same PATH, writes its own CLOCK_MONOTONIC to the pipe
//! it has as stdout (every layer of the chains passes fd 1 on); the difference is spawn → the
//! child running. Each spawn gets a fresh pipe whose write end the parent closes right after the
//! spawn (the child's timestamp is absolute, so that close is not in the measured interval), so
//! a chain that dies before starting the child is an EOF and an error, never a hang. Rows take
//! turns in blocks of [`BLOCK`], the starting row rotating; reaping (and with it the namespaces'
//! teardown) happens outside the timed window. A row that cannot run here is skipped with its
//! reason, never estimated.

use std::ffi::{CStr, OsStr};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio as ProcessStdio};

use spawnkit::{Command, Namespaces, Stdio, Strategy, TmpOptions, UserMap};

use super::latency::{Stats, BLOCK};
use super::rows::{Row, Started};
use super::sys::{self, Argv};
use super::Progress;

/// One row of the fence method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// spawnkit clone-vfork, no fence (the latency method's row).
    Plain,
    /// vfork + execvp, no fence (the latency method's row): the chains' launcher.
    PlainVfork,
    /// spawnkit, the fence in the same single spawn.
    Spawnkit,
    /// unshare -Urmn sh -c 'mount ... && ip link set lo up && exec tiny'.
    Shell,
    /// bwrap --unshare-user --uid 0 --gid 0 --unshare-net --dev-bind / / --tmpfs /tmp -- tiny.
    Bwrap,
    // The steps (`--steps`): each fence built one piece at a time.
    /// spawnkit: user namespace and its maps only.
    SkUser,
    /// spawnkit: + mount namespace, tmpfs on /tmp.
    SkUserTmp,
    /// spawnkit: + network namespace, lo left down.
    SkUserTmpNet,
    /// unshare -Urmn tiny.
    ShUnshare,
    /// unshare -Urmn sh -c 'exec tiny'.
    ShSh,
    /// unshare -Urmn sh -c 'mount -t tmpfs tmpfs /tmp && exec tiny'.
    ShMount,
    /// bwrap --unshare-user --uid 0 --gid 0 --dev-bind / / -- tiny.
    BwUser,
    /// bwrap ... --tmpfs /tmp -- tiny.
    BwTmp,
}

/// The rows of the method, bases first.
pub const ALL: [Fence; 5] =
    [Fence::Plain, Fence::PlainVfork, Fence::Spawnkit, Fence::Shell, Fence::Bwrap];

/// With `--steps`: every row, each fence's steps in the order they add up.
pub const WITH_STEPS: [Fence; 13] = [
    Fence::Plain,
    Fence::SkUser,
    Fence::SkUserTmp,
    Fence::SkUserTmpNet,
    Fence::Spawnkit,
    Fence::PlainVfork,
    Fence::ShUnshare,
    Fence::ShSh,
    Fence::ShMount,
    Fence::Shell,
    Fence::BwUser,
    Fence::BwTmp,
    Fence::Bwrap,
];

impl Fence {
    /// Stable key in the JSON file.
    pub fn id(self) -> &'static str {
        match self {
            Fence::Plain => "spawnkit_plain",
            Fence::PlainVfork => "vfork_exec_plain",
            Fence::Spawnkit => "spawnkit_fence",
            Fence::Shell => "shell_unshare_mount_ip",
            Fence::Bwrap => "bwrap",
            Fence::SkUser => "step_spawnkit_user",
            Fence::SkUserTmp => "step_spawnkit_user_tmp",
            Fence::SkUserTmpNet => "step_spawnkit_user_tmp_net",
            Fence::ShUnshare => "step_unshare",
            Fence::ShSh => "step_unshare_sh",
            Fence::ShMount => "step_unshare_sh_mount",
            Fence::BwUser => "step_bwrap_user",
            Fence::BwTmp => "step_bwrap_user_tmp",
        }
    }

    /// The name in tables and charts.
    pub fn name(self) -> &'static str {
        match self {
            Fence::Plain => "spawnkit clone-vfork, no fence",
            Fence::PlainVfork => "vfork+exec, no fence",
            Fence::Spawnkit => "spawnkit, fence in one spawn",
            Fence::Shell => "unshare -Urmn + mount + ip (sh)",
            Fence::Bwrap => "bubblewrap (bwrap)",
            Fence::SkUser => "spawnkit: user ns + maps",
            Fence::SkUserTmp => "spawnkit: + mount ns, tmpfs /tmp",
            Fence::SkUserTmpNet => "spawnkit: + net ns (lo down)",
            Fence::ShUnshare => "unshare -Urmn: exec the child",
            Fence::ShSh => "unshare: + sh -c 'exec child'",
            Fence::ShMount => "unshare: + sh runs mount",
            Fence::BwUser => "bwrap: user ns, --dev-bind / /",
            Fence::BwTmp => "bwrap: + --tmpfs /tmp",
        }
    }

    /// The name in the steps table: what the row adds to the one above.
    pub fn step(self) -> &'static str {
        match self {
            Fence::Spawnkit => "spawnkit: + lo up = the fence",
            Fence::Shell => "unshare: + sh runs ip = the chain",
            Fence::Bwrap => "bwrap: + --unshare-net = the row",
            other => other.name(),
        }
    }

    /// A short name for the summary line.
    pub fn short(self) -> &'static str {
        match self {
            Fence::Spawnkit => "spawnkit",
            Fence::Shell => "unshare+mount+ip",
            Fence::Bwrap => "bwrap",
            other => other.name(),
        }
    }

    /// "spawnkit" or "baseline".
    pub fn kind(self) -> &'static str {
        match self {
            Fence::Plain
            | Fence::Spawnkit
            | Fence::SkUser
            | Fence::SkUserTmp
            | Fence::SkUserTmpNet => "spawnkit",
            _ => "baseline",
        }
    }

    /// The row without a fence started by the same launcher: the fence's cost is this row
    /// minus that one. None for the bases themselves.
    pub fn base(self) -> Option<Fence> {
        match self {
            Fence::Plain | Fence::PlainVfork => None,
            Fence::Spawnkit | Fence::SkUser | Fence::SkUserTmp | Fence::SkUserTmpNet => {
                Some(Fence::Plain)
            }
            _ => Some(Fence::PlainVfork),
        }
    }

    /// The step this row adds to (`--steps`): what the row costs beyond it is one piece.
    pub fn previous(self) -> Option<Fence> {
        match self {
            Fence::Plain | Fence::PlainVfork => None,
            Fence::SkUser => Some(Fence::Plain),
            Fence::SkUserTmp => Some(Fence::SkUser),
            Fence::SkUserTmpNet => Some(Fence::SkUserTmp),
            Fence::Spawnkit => Some(Fence::SkUserTmpNet),
            Fence::ShUnshare | Fence::BwUser => Some(Fence::PlainVfork),
            Fence::ShSh => Some(Fence::ShUnshare),
            Fence::ShMount => Some(Fence::ShSh),
            Fence::Shell => Some(Fence::ShMount),
            Fence::BwTmp => Some(Fence::BwUser),
            Fence::Bwrap => Some(Fence::BwTmp),
        }
    }

    /// The programs the row needs along PATH.
    fn tools(self) -> &'static [&'static str] {
        match self {
            Fence::ShUnshare => &["unshare"],
            Fence::ShSh => &["unshare", "sh"],
            Fence::ShMount => &["unshare", "sh", "mount"],
            Fence::Shell => &["unshare", "sh", "mount", "ip"],
            Fence::Bwrap | Fence::BwUser | Fence::BwTmp => &["bwrap"],
            _ => &[],
        }
    }

    /// The argument vector of the chains (None: the row is not a command line).
    fn argv(self, tiny: &str) -> Option<Vec<String>> {
        let bwrap_user = ["bwrap", "--unshare-user", "--uid", "0", "--gid", "0"];
        let v: Vec<String> = match self {
            Fence::ShUnshare => vec!["unshare".into(), "-Urmn".into(), tiny.into()],
            Fence::ShSh | Fence::ShMount | Fence::Shell => {
                let script = match self {
                    Fence::ShSh => format!("exec {tiny}"),
                    Fence::ShMount => format!("mount -t tmpfs tmpfs /tmp && exec {tiny}"),
                    _ => format!("mount -t tmpfs tmpfs /tmp && ip link set lo up && exec {tiny}"),
                };
                ["unshare", "-Urmn", "sh", "-c", &script].map(String::from).to_vec()
            }
            Fence::BwUser | Fence::BwTmp | Fence::Bwrap => {
                let mut v: Vec<&str> = bwrap_user.to_vec();
                if self == Fence::Bwrap {
                    v.push("--unshare-net");
                }
                v.extend(["--dev-bind", "/", "/"]);
                if self != Fence::BwUser {
                    v.extend(["--tmpfs", "/tmp"]);
                }
                v.extend(["--", tiny]);
                v.into_iter().map(String::from).collect()
            }
            _ => return None,
        };
        Some(v)
    }

    /// What the row runs, for the JSON file and the docs.
    fn command(self, tiny: &str) -> String {
        let sk = |opts: &str| format!("Command::new({tiny:?}){opts}.spawn()");
        let tmp = ".private_tmp(None, TmpOptions::default())";
        match self {
            Fence::Plain => sk(""),
            Fence::PlainVfork => format!("vfork(); dup2; execvp({tiny:?})"),
            Fence::SkUser => sk(".user_map(UserMap::Root)"),
            Fence::SkUserTmp => sk(&format!(".user_map(UserMap::Root){tmp}")),
            Fence::SkUserTmpNet => {
                sk(&format!(".user_map(UserMap::Root){tmp}.unshare(Namespaces::NET)"))
            }
            Fence::Spawnkit => sk(&format!(".user_map(UserMap::Root){tmp}.private_network(true)")),
            _ => {
                let argv = self.argv(tiny).unwrap_or_default();
                let quoted: Vec<String> = argv
                    .iter()
                    .map(|a| if a.contains(' ') { format!("'{a}'") } else { a.clone() })
                    .collect();
                format!("vfork(); dup2; execvp: {}", quoted.join(" "))
            }
        }
    }
}

/// One row of the fence table: its stats, or why it was skipped.
#[derive(Debug, Clone)]
pub struct FenceRow {
    pub fence: Fence,
    pub command: String,
    pub stats: Option<Stats>,
    pub skipped: Option<String>,
}

impl FenceRow {
    /// The fence's cost, (minimum, median) of this row minus those of its base, in µs.
    pub fn cost(&self, rows: &[FenceRow]) -> Option<(f64, f64)> {
        self.minus(self.fence.base()?, rows)
    }

    /// What this step adds to the previous one, (minimum, median) in µs, when both ran.
    pub fn added(&self, rows: &[FenceRow]) -> Option<(f64, f64)> {
        self.minus(self.fence.previous()?, rows)
    }

    fn minus(&self, other: Fence, rows: &[FenceRow]) -> Option<(f64, f64)> {
        let b = rows.iter().find(|r| r.fence == other)?.stats?;
        let s = self.stats?;
        Some((s.min_us - b.min_us, s.median_us - b.median_us))
    }
}

/// Everything found out before the timed runs: which rows can run, the tools' versions.
pub struct Setup {
    tiny: String,
    /// Per row: its argument vector (chains), or why it cannot run.
    rows: Vec<(Fence, Result<Option<Argv>, String>)>,
    /// Tool → the first line of its `--version`.
    pub tools: Vec<(String, String)>,
    pub notes: Vec<String>,
}

/// The first match of `name` along PATH that is an executable file.
pub(crate) fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// The first non-empty line `tool args` prints (stdout, else stderr).
pub(crate) fn version(tool: &Path, args: &[&str]) -> Option<String> {
    let out = Process::new(tool).args(args).stdin(ProcessStdio::null()).output().ok()?;
    let text = if out.stdout.is_empty() { out.stderr } else { out.stdout };
    String::from_utf8_lossy(&text).lines().map(str::trim).find(|l| !l.is_empty()).map(String::from)
}

/// Run apt-get with its output on our stderr (stdout carries the tables).
fn apt_get(args: &[&str]) -> Result<(), String> {
    let to_stderr = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(ProcessStdio::from)
        .unwrap_or_else(|_| ProcessStdio::null());
    crate::out::note!("spawnkit bench: apt-get {}", args.join(" "));
    let status = Process::new("apt-get")
        .args(["-o", "DPkg::Lock::Timeout=120"])
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(ProcessStdio::null())
        .stdout(to_stderr)
        .status()
        .map_err(|e| format!("apt-get: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("apt-get {} failed ({status})", args.join(" ")))
    }
}

/// Install bubblewrap from the distribution's packages (`apt-get install -y bubblewrap`, after
/// `apt-get update` if the first try fails); the path of bwrap, or why not.
pub(crate) fn install_bwrap() -> Result<PathBuf, String> {
    if spawnkit::process::geteuid() != 0 {
        return Err("bwrap is not installed, and installing bubblewrap needs root".into());
    }
    if which("apt-get").is_none() {
        return Err("bwrap is not installed, and there is no apt-get here to install it".into());
    }
    crate::out::note!(
        "spawnkit bench: bwrap not found in PATH; installing Debian's bubblewrap package"
    );
    if let Err(first) = apt_get(&["install", "-y", "bubblewrap"]) {
        apt_get(&["update"]).map_err(|e| format!("{first}; then {e}"))?;
        apt_get(&["install", "-y", "bubblewrap"])
            .map_err(|e| format!("{first}; after apt-get update: {e}"))?;
    }
    which("bwrap").ok_or_else(|| "apt-get installed bubblewrap, but bwrap is not in PATH".into())
}

/// Find (or install) what the rows need; `child_dir` holds the tiny child and must not be
/// under /tmp, which every fence replaces. `steps`: also the rows that build each fence one
/// piece at a time.
pub fn setup(tiny: &str, child_dir: &Path, install: bool, steps: bool) -> Setup {
    let mut s = Setup { tiny: tiny.into(), rows: Vec::new(), tools: Vec::new(), notes: Vec::new() };
    let hidden = child_dir.starts_with("/tmp").then(|| {
        format!(
            "the tiny child is in {}, under the /tmp every fence replaces (set TMPDIR elsewhere)",
            child_dir.display()
        )
    });
    // Each tool once: its path, or why not (bwrap is installed when missing, unless told not).
    let mut found: Vec<(&str, Result<PathBuf, String>)> = Vec::new();
    for tool in ["unshare", "sh", "mount", "ip", "bwrap"] {
        let path = match which(tool) {
            Some(p) => Ok(p),
            None if tool != "bwrap" => Err(format!("{tool} not found in PATH")),
            None if !install => Err("bwrap not found in PATH (--no-install)".into()),
            None => install_bwrap().inspect(|_| {
                s.notes.push("fence: bwrap was missing; installed it with apt-get".into());
            }),
        };
        if let Ok(p) = &path {
            let v = match tool {
                "ip" => version(p, &["-V"]),
                "sh" => std::fs::canonicalize(p).ok().map(|c| c.display().to_string()),
                _ => version(p, &["--version"]),
            };
            s.tools.push((tool.into(), v.unwrap_or_else(|| "?".into())));
        }
        found.push((tool, path));
    }
    let rows: &[Fence] = if steps { &WITH_STEPS } else { &ALL };
    for &f in rows {
        let mut ok: Result<(), String> = match &hidden {
            Some(why) if f.base().is_some() => Err(why.clone()),
            _ => Ok(()),
        };
        for tool in f.tools() {
            if let Some((_, Err(why))) = found.iter().find(|(t, _)| t == tool) {
                ok = ok.and(Err(why.clone()));
            }
        }
        let row = ok.and_then(|()| f.argv(tiny).map(|a| Argv::new(&a)).transpose());
        s.rows.push((f, row));
    }
    s
}

/// Start one row with stdout on `out_fd` (and stderr on `err_fd` when given: the trial run).
fn spawn(
    f: Fence,
    argv: Option<&Argv>,
    prog: &CStr,
    out_fd: RawFd,
    err_fd: Option<RawFd>,
) -> Result<Started, String> {
    match (f, argv) {
        (Fence::Plain, _) => Row::Spawnkit(Strategy::CloneVfork).spawn(prog, out_fd),
        (Fence::PlainVfork, _) => Row::VforkExec.spawn(prog, out_fd),
        (Fence::Spawnkit | Fence::SkUser | Fence::SkUserTmp | Fence::SkUserTmpNet, _) => {
            let mut cmd = Command::new(OsStr::from_bytes(prog.to_bytes()));
            cmd.stdout(Stdio::Fd(out_fd)).user_map(UserMap::Root);
            if f != Fence::SkUser {
                cmd.private_tmp(None, TmpOptions::default());
            }
            match f {
                Fence::SkUserTmpNet => {
                    cmd.unshare(Namespaces::NET);
                }
                Fence::Spawnkit => {
                    cmd.private_network(true);
                }
                _ => {}
            }
            if let Some(fd) = err_fd {
                cmd.stderr(Stdio::Fd(fd));
            }
            cmd.spawn().map(Started::Child).map_err(|e| e.to_string())
        }
        (_, Some(argv)) => sys::vfork_execvp(argv, out_fd, err_fd).map(Started::Pid),
        (_, None) => Err("no command line".into()),
    }
}

/// One measurement: a fresh pipe, spawn, close our write end, read the child's timestamp,
/// reap. Only spawn → the child's own clock is measured.
fn once(f: Fence, argv: Option<&Argv>, prog: &CStr, err_fd: Option<RawFd>) -> Result<i64, String> {
    let (r, w) = sys::pipe()?;
    let mut buf = [0u8; 16];
    let t0 = sys::mono_ns();
    let started = spawn(f, argv, prog, w.as_raw_fd(), err_fd)?;
    drop(w);
    let read = sys::read_exact(r.as_raw_fd(), &mut buf);
    let reaped = started.reap();
    match (read, reaped) {
        (Ok(()), Ok(())) => Ok(sys::timestamp_ns(&buf) - t0),
        (Err(_), Err(status)) => Err(format!("before starting the tiny child, {status}")),
        (Err(e), Ok(())) => Err(e),
        (Ok(()), Err(e)) => Err(format!("after the tiny child ran, {e}")),
    }
}

/// One untimed run with stderr captured: whether the row works here, and if not, what it said.
fn trial(f: Fence, argv: Option<&Argv>, prog: &CStr) -> Result<(), String> {
    let (r, w) = sys::pipe()?;
    let result = once(f, argv, prog, Some(w.as_raw_fd()));
    drop(w);
    result.map(|_| ()).map_err(|e| {
        // The children are gone: the captured stderr is complete.
        let mut text = Vec::new();
        let _ = sys::read_to_vec(r.as_raw_fd(), &mut text);
        let said = String::from_utf8_lossy(&text);
        let said: Vec<&str> = said.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        if said.is_empty() {
            e
        } else {
            format!("{e}: {}", said.join(" / "))
        }
    })
}

/// Spawns the method plans (for the progress bar).
pub fn planned(runs: usize, steps: bool) -> usize {
    runs * if steps { WITH_STEPS.len() } else { ALL.len() }
}

/// Measure every row that can run, `runs` times each.
pub fn run(setup: &Setup, runs: usize, prog: &CStr, progress: &Progress) -> Vec<FenceRow> {
    progress.phase("fence");
    let tiny = &setup.tiny;
    let mut out: Vec<FenceRow> = setup
        .rows
        .iter()
        .map(|(f, row)| FenceRow {
            fence: *f,
            command: f.command(tiny),
            stats: None,
            skipped: row.as_ref().err().cloned(),
        })
        .collect();
    let argvs: Vec<Option<&Argv>> =
        setup.rows.iter().map(|(_, row)| row.as_ref().ok().and_then(Option::as_ref)).collect();
    for (i, (f, _)) in setup.rows.iter().enumerate() {
        if out[i].skipped.is_none() {
            if let Err(e) = trial(*f, argvs[i], prog) {
                out[i].skipped = Some(e);
            }
        }
    }
    let n = out.len();
    let mut samples: Vec<Vec<i64>> = vec![Vec::with_capacity(runs); n];
    for round in 0..runs.div_ceil(BLOCK) {
        for k in 0..n {
            let i = (round + k) % n;
            if out[i].skipped.is_some() {
                continue;
            }
            let f = out[i].fence;
            for _ in 0..BLOCK.min(runs.saturating_sub(samples[i].len())) {
                match once(f, argvs[i], prog, None) {
                    Ok(ns) => samples[i].push(ns),
                    Err(e) => {
                        let done = samples[i].len();
                        out[i].skipped = Some(format!("failed after {done} runs: {e}"));
                        samples[i].clear();
                        break;
                    }
                }
                progress.inc(1);
            }
        }
    }
    for (row, ns) in out.iter_mut().zip(samples) {
        if row.skipped.is_none() {
            row.stats = Stats::of(ns);
        }
    }
    out
}
