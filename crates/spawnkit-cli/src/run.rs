//! `spawnkit run`: every option of a [`Command`] as a flag; spawn the program, forward to it
//! every signal that would otherwise end spawnkit and orphan it, wait, and exit with its
//! status.
//!
//! Exit codes follow env(1) and the shells: the program's own code, 128+N when signal N
//! killed it, 127 when it was not found, 126 when it could not be executed, 125 when spawnkit
//! itself failed (a bad option, a file it could not open, a setup step such as chdir).
//!
//! The flow, in order:
//! 1. check that the fds named by `--keep-fd`/`--fd` are open here (before spawnkit opens
//!    any fd of its own, which could otherwise take their number);
//! 2. resolve user and group names (getpwnam_r/getgrnam_r) and build the [`Command`];
//! 3. open the `--stdin`/`--stdout`/`--stderr` files (not in a dry run); a standard fd that
//!    was closed when spawnkit started and that no flag sets is closed in the program
//!    ([`closed`](crate::closed): read before Rust's runtime put /dev/null there);
//! 4. block the forwarded signals in spawnkit and open a signalfd for them (the library
//!    installs the child's own mask, empty by default, just before execve);
//! 5. spawn, then poll(2) the signalfd and the child's pidfd until the child exits.
//!
//! Signals, decided one by one (spawnkit stands for the program: a signal sent to spawnkit is
//! meant for the program, and spawnkit must never die of one and leave the program running):
//! - forwarded: every signal whose default action ends a process (terminate or core) and
//!   that can be caught: HUP INT QUIT TERM USR1 USR2 ALRM VTALRM PROF XCPU XFSZ IO PWR
//!   STKFLT ABRT PIPE, and 32 to 64 (SIGRTMIN..SIGRTMAX, glibc's private 32 and 33 too:
//!   without a handler they end a process, so they are blocked with the raw system call,
//!   which glibc's sigprocmask would not do). spawnkit then exits with the program's status,
//!   128+N when it dies of signal N.
//! - SIGPIPE: spawnkit's own writes to a closed pipe raise it too (si_code SI_USER, from its
//!   own pid); those are dropped (the write reports EPIPE), a SIGPIPE from any other process
//!   is forwarded. The same holds for any signal spawnkit sends itself.
//! - the fault signals SEGV BUS FPE ILL TRAP SYS: forwarded when another process sends them
//!   (kill(1): si_code SI_USER, SI_QUEUE, SI_TKILL). A real fault of spawnkit's own is not
//!   held back by the mask: the kernel unblocks a fault signal it forces and spawnkit dies of
//!   it, as any program would.
//! - not forwarded: KILL and STOP (they cannot be caught: `--pdeathsig KILL` takes the program
//!   along when spawnkit is killed), the job-control signals TSTP TTIN TTOU CONT (they stop
//!   and resume spawnkit itself, and a terminal sends them to the whole foreground group,
//!   the program included unless --setsid or --pgid), and CHLD URG WINCH, ignored by default.
//! - a signal the kernel sent (si_code SI_KERNEL: a terminal's Ctrl-C, Ctrl-\, hangup) went
//!   to spawnkit's whole process group: it is forwarded only when the program has a group or
//!   session of its own.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use crate::closed;
use crate::out::{self, note};
use clap::builder::{OsStringValueParser, PossibleValuesParser, TypedValueParser};
use spawnkit::{
    quoted, Child, Command, CpuList, ExitStatus, Group, Lock, LookupError, Namespaces,
    ParseValueError, ReceivedSignal, Resource, Rlimit, SigSet, Signal, SignalFd, Stdio, Strategy,
    TmpOptions, Umask, User, UserMap,
};

/// The exit code for a failure of spawnkit itself (env(1)'s convention).
const SETUP_FAILED: i32 = 125;

const AFTER_HELP: &str = "\
Examples:
  spawnkit run -- make -j4
  spawnkit run --cwd /srv/app --env-clear --env PATH=/usr/bin:/bin -- ./server
  spawnkit run --rlimit nofile=1024:4096 --rlimit core=0 --nice 10 --cpus 0-3,6 -- ./job
  spawnkit run --uid nobody --gid nogroup --groups '' --no-new-privs --umask 077 -- id
  spawnkit run --setsid --pdeathsig TERM -- ./worker    (the worker dies with spawnkit)
  spawnkit run --stdin in.txt --stdout out.log --stderr-to-stdout -- sort
  spawnkit run --keep-fd 3 --fd 4=7 -- ./tool 3<input 7>output
  spawnkit run --sigmask INT,QUIT -- ./daemon            (starts with INT, QUIT blocked)
  spawnkit run --dry-run --rlimit nofile=64 -- ls        (print the steps, spawn nothing)
  spawnkit run --map-root-user --private-tmp --private-net -- ./test-suite
  spawnkit run --unshare pid,mount --hostname box -- sh -c 'echo $$; hostname'
  spawnkit run --ro-bind /usr --private-tmp=/srv/scratch -- make check
  spawnkit run --lock /var/lock/backup --lock-timeout 30 -- ./backup
  spawnkit run --cgroup /sys/fs/cgroup/jobs/42 -- ./job
  spawnkit run --via $XDG_RUNTIME_DIR/spawnkit/server.sock -- make   (see spawnkit serve)

Exit status:
  The program's exit code, or 128+N when signal N killed it. 127: the program was not
  found; 126: it was found but could not be executed; 125: spawnkit itself failed (a bad
  option, a file it could not open, a setup step such as chdir or setrlimit). With --lock:
  the --conflict-exit-code (1) when the lock is held elsewhere and --lock-nonblock or
  --lock-timeout says not to wait.

Closed standard streams:
  The program gets spawnkit's fds 0, 1 and 2 unless a flag sets them, and one that was
  closed when spawnkit started is closed in the program too (with --via as well):
  `spawnkit run -- echo hi >&-` fails as `echo hi >&-` does, instead of writing into
  /dev/null unseen (spawnkit itself keeps the /dev/null Rust's runtime opens there).
  --stdin, --stdout, --stderr and --fd CHILD=PARENT set a stream ('-' leaves it closed);
  --stderr-to-stdout follows a closed stdout; --keep-fd or --fd of a closed fd is refused.

Signals:
  Every signal that would end spawnkit and can be caught is forwarded to the program, and
  spawnkit exits with the program's status (128+N if signal N kills it): HUP INT QUIT TERM
  USR1 USR2 ALRM VTALRM PROF XCPU XFSZ IO PWR STKFLT ABRT PIPE and the real-time signals
  32-64; SEGV BUS FPE ILL TRAP SYS too when another process sends them (kill). A SIGPIPE
  spawnkit raises itself, writing to a closed pipe, is not forwarded. Not forwarded: KILL
  and STOP, which cannot be caught (--pdeathsig KILL takes the program along), TSTP TTIN TTOU
  CONT, which stop and resume spawnkit itself, and CHLD URG WINCH. A terminal's Ctrl-C or
  Ctrl-\\ already reaches a program in spawnkit's process group, so signals sent by the
  kernel are forwarded only with --setsid or --pgid.";

/// Options of `spawnkit run`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = AFTER_HELP,
    override_usage = "spawnkit run [OPTIONS] [--] <PROGRAM> [ARGS]..."
)]
pub struct RunArgs {
    /// Working directory of the program.
    #[arg(long, value_name = "DIR", help_heading = "Environment")]
    pub cwd: Option<PathBuf>,

    /// Set an environment variable (repeatable; applied after --env-clear and --unset).
    #[arg(
        long,
        value_name = "NAME=VALUE",
        help_heading = "Environment",
        value_parser = OsStringValueParser::new().try_map(parse_env_pair)
    )]
    pub env: Vec<(OsString, OsString)>,

    /// Start from an empty environment (variables from --env are still set).
    #[arg(long, help_heading = "Environment")]
    pub env_clear: bool,

    /// Remove a variable from the environment (repeatable).
    #[arg(long, value_name = "NAME", help_heading = "Environment")]
    pub unset: Vec<OsString>,

    /// `argv[0]` as the program sees it (default: PROGRAM as given).
    #[arg(long, value_name = "NAME", help_heading = "Environment")]
    pub arg0: Option<OsString>,

    /// Set a resource limit; with only SOFT, the hard limit is the same (repeatable).
    /// NAME: nofile, NOFILE or RLIMIT_NOFILE...; values: numbers, unlimited, infinity.
    #[arg(
        long,
        value_name = "NAME=SOFT[:HARD]",
        help_heading = "Process",
        value_parser = parse_rlimit
    )]
    pub rlimit: Vec<(Resource, u64, u64)>,

    /// Add N to the niceness, like nice(1) (clamped to -20..=19).
    #[arg(long, value_name = "N", help_heading = "Process", allow_negative_numbers = true)]
    pub nice: Option<i32>,

    /// Run only on these CPUs: 0,2 and ranges 0-3.
    #[arg(long, value_name = "LIST", help_heading = "Process", value_parser = str::parse::<CpuList>)]
    pub cpus: Option<CpuList>,

    /// Start a new session (setsid): no controlling terminal, a process group of its own.
    #[arg(long, help_heading = "Process")]
    pub setsid: bool,

    /// Put the program in process group N; 0 makes a new group led by the program.
    #[arg(
        long,
        value_name = "N",
        help_heading = "Process",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(0..)
    )]
    pub pgid: Option<i32>,

    /// The program's umask, in octal (e.g. 077).
    #[arg(long, value_name = "OCTAL", help_heading = "Process", value_parser = parse_umask)]
    pub umask: Option<u32>,

    /// Signal the program gets when spawnkit dies (PR_SET_PDEATHSIG): TERM, SIGTERM or 15.
    #[arg(long, value_name = "SIG", help_heading = "Process", value_parser = parse_signal)]
    pub pdeathsig: Option<Signal>,

    /// Set no_new_privs: execve can never grant privileges (setuid bits, file capabilities).
    #[arg(long, help_heading = "Process")]
    pub no_new_privs: bool,

    /// Run as this user (name or number). Does not change the group: add --gid.
    #[arg(
        long,
        value_name = "USER|UID",
        help_heading = "Credentials",
        allow_negative_numbers = true,
        value_parser = parse_user
    )]
    pub uid: Option<User>,

    /// Run with this group (name or number).
    #[arg(
        long,
        value_name = "GROUP|GID",
        help_heading = "Credentials",
        allow_negative_numbers = true,
        value_parser = parse_group
    )]
    pub gid: Option<Group>,

    /// Supplementary groups, names or numbers, comma-separated; '' drops them all.
    /// Default: kept, or dropped when --uid is given (when permitted).
    #[arg(long, value_name = "LIST", help_heading = "Credentials", value_parser = parse_id_list)]
    pub groups: Option<IdList>,

    /// Keep spawnkit's fd N open in the program as fd N (repeatable). Not 0, 1 or 2 with
    /// the --stdin, --stdout or --stderr flag for that fd.
    #[arg(
        long,
        value_name = "N",
        help_heading = "File descriptors",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(0..)
    )]
    pub keep_fd: Vec<RawFd>,

    /// Make the program's fd CHILD a copy of spawnkit's fd PARENT (repeatable). CHILD 0, 1
    /// or 2 cannot be combined with the --stdin, --stdout or --stderr flag for that fd.
    #[arg(
        long,
        value_name = "CHILD=PARENT",
        help_heading = "File descriptors",
        value_parser = parse_fd_map
    )]
    pub fd: Vec<(RawFd, RawFd)>,

    /// Keep every inherited fd (default: close all but 0, 1, 2 and the mapped ones).
    #[arg(long, help_heading = "File descriptors")]
    pub no_close_fds: bool,

    /// Read stdin from FILE ('-': inherit).
    #[arg(long, value_name = "FILE", help_heading = "Standard streams")]
    pub stdin: Option<PathBuf>,

    /// Write stdout to FILE, created or truncated ('-': inherit).
    #[arg(long, value_name = "FILE", help_heading = "Standard streams")]
    pub stdout: Option<PathBuf>,

    /// Append stdout to FILE, created if needed.
    #[arg(long, value_name = "FILE", help_heading = "Standard streams", conflicts_with = "stdout")]
    pub stdout_append: Option<PathBuf>,

    /// Write stderr to FILE, created or truncated ('-': inherit).
    #[arg(long, value_name = "FILE", help_heading = "Standard streams")]
    pub stderr: Option<PathBuf>,

    /// Append stderr to FILE, created if needed.
    #[arg(long, value_name = "FILE", help_heading = "Standard streams", conflicts_with = "stderr")]
    pub stderr_append: Option<PathBuf>,

    /// Send stderr where stdout goes (2>&1).
    #[arg(
        long,
        help_heading = "Standard streams",
        conflicts_with_all = ["stderr", "stderr_append"]
    )]
    pub stderr_to_stdout: bool,

    /// Signals blocked when the program starts: INT,TERM,10 (default: none).
    #[arg(long, value_name = "LIST", help_heading = "Signals", value_parser = parse_signal_list)]
    pub sigmask: Option<SigSet>,

    /// Do not reset SIGPIPE and SIGXFSZ to their default action in the program. (spawnkit,
    /// a Rust program, ignores SIGPIPE itself, so the program then starts with it ignored.)
    #[arg(long, help_heading = "Signals")]
    pub no_restore_signals: bool,

    /// How to start the program.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "clone-vfork",
        help_heading = "Spawning",
        value_parser = PossibleValuesParser::new(Strategy::ALL.map(Strategy::name))
            .try_map(|s| s.parse::<Strategy>())
    )]
    pub strategy: Strategy,

    /// Create namespaces for the program: a comma-separated list of user, mount, net, pid,
    /// uts, ipc, cgroup (as unshare(1)); at least one, no empty item. Without root, a user
    /// namespace mapping you to yourself is added. With pid and mount, a fresh /proc is
    /// mounted.
    #[arg(long, value_name = "LIST", help_heading = "Isolation", value_parser = parse_namespaces)]
    pub unshare: Option<Namespaces>,

    /// New user namespace where your uid and gid are root (unshare -r).
    #[arg(long, help_heading = "Isolation", conflicts_with = "map_current_user")]
    pub map_root_user: bool,

    /// New user namespace where your uid and gid stay the same.
    #[arg(long, help_heading = "Isolation")]
    pub map_current_user: bool,

    /// A private /tmp: a fresh tmpfs, or --private-tmp=DIR bound on /tmp (new mount
    /// namespace, mount propagation private). A tmpfs is gone when the program exits.
    #[arg(
        long,
        value_name = "DIR",
        num_args = 0..=1,
        default_missing_value = "",
        require_equals = true,
        help_heading = "Isolation",
        value_parser = OsStringValueParser::new()
    )]
    pub private_tmp: Option<OsString>,

    /// Mount options of the private /tmp: any of nosuid,nodev,noexec, or none.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "nosuid,nodev",
        requires = "private_tmp",
        help_heading = "Isolation",
        value_parser = parse_tmp_options
    )]
    pub tmp_options: TmpOptions,

    /// Bind SRC read-only on DST (default: SRC itself) in a new mount namespace (repeatable).
    #[arg(
        long,
        value_name = "SRC[:DST]",
        help_heading = "Isolation",
        value_parser = OsStringValueParser::new().try_map(parse_bind)
    )]
    pub ro_bind: Vec<(PathBuf, PathBuf)>,

    /// A new network namespace with only the loopback interface, up (127.0.0.1 works).
    #[arg(long, help_heading = "Isolation")]
    pub private_net: bool,

    /// The hostname, in a new uts namespace (1 to 64 bytes).
    #[arg(
        long,
        value_name = "NAME",
        help_heading = "Isolation",
        value_parser = OsStringValueParser::new()
    )]
    pub hostname: Option<OsString>,

    /// chroot into DIR (after the mounts); the working directory becomes its / unless --cwd.
    #[arg(long, value_name = "DIR", help_heading = "Isolation")]
    pub chroot: Option<PathBuf>,

    /// Let a fenced program keep its capabilities. By default a program with a fence (any
    /// namespace but a user namespace alone, or --chroot) starts with none, so root inside
    /// cannot undo the fences (umount the private /tmp, remount a --ro-bind writable, setns
    /// out, reach the parent's files through /proc/PID/root). With --keep-caps it can.
    #[arg(long, help_heading = "Isolation")]
    pub keep_caps: bool,

    /// Run under an flock(2) lock on PATH (created if missing), held by the program itself
    /// for its whole life, released when it exits (flock(1) without the extra process).
    #[arg(long, value_name = "PATH", help_heading = "Locking")]
    pub lock: Option<PathBuf>,

    /// Take a shared lock instead of an exclusive one (flock -s).
    #[arg(long, help_heading = "Locking", requires = "lock")]
    pub lock_shared: bool,

    /// Fail at once if the lock is held (flock -n).
    #[arg(long, help_heading = "Locking", requires = "lock", conflicts_with = "lock_timeout")]
    pub lock_nonblock: bool,

    /// Wait at most SECS (fractions allowed, at most 1000000000; 0 = --lock-nonblock) for the
    /// lock (flock -w).
    #[arg(
        long,
        value_name = "SECS",
        help_heading = "Locking",
        requires = "lock",
        allow_negative_numbers = true,
        value_parser = parse_seconds
    )]
    pub lock_timeout: Option<std::time::Duration>,

    /// Exit code when the lock cannot be taken: 0 to 255 (flock -E; default 1, as flock(1)).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        help_heading = "Locking",
        requires = "lock",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(0..=255)
    )]
    pub conflict_exit_code: i32,

    /// Start the program in this cgroup v2 directory from its first instruction (clone3
    /// CLONE_INTO_CGROUP).
    #[arg(long, value_name = "DIR", help_heading = "Isolation")]
    pub cgroup: Option<PathBuf>,

    /// Print the steps the program's setup would run (and the environment changes: env
    /// clear, unset, set), and exit without spawning. A setup the chosen strategy cannot do
    /// is refused as the real run would refuse it.
    #[arg(long, help_heading = "Spawning")]
    pub dry_run: bool,

    /// Spawn through the spawn server listening at SOCKET (`spawnkit serve`) instead of
    /// here: the program's parent is the server; its cwd, environment and standard streams
    /// are still this command's. Default: $SPAWNKIT_SERVER when set.
    #[arg(long, value_name = "SOCKET", help_heading = "Spawning")]
    pub via: Option<PathBuf>,

    /// The server's key file, for --via (default: $SPAWNKIT_SERVER_KEY, else SOCKET.key).
    /// Refused without --via or $SPAWNKIT_SERVER: a local run has no server to prove it to.
    #[arg(long, value_name = "PATH", help_heading = "Spawning")]
    pub key_file: Option<PathBuf>,

    /// The program (looked up in PATH when it has no '/') and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM")]
    pub command: Vec<OsString>,
}

/// A comma-separated list of groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdList(pub Vec<Group>);

// ---------------------------------------------------------------------------------------
// Parsing helpers (pure; clap calls them and names the flag and value on error).
// ---------------------------------------------------------------------------------------

/// `NAME=VALUE` (VALUE may be empty or contain '=').
pub fn parse_env_pair(s: OsString) -> Result<(OsString, OsString), String> {
    let bytes = s.as_bytes();
    match bytes.iter().position(|&b| b == b'=') {
        Some(0) => Err("the variable name is empty".into()),
        Some(i) => Ok((
            OsString::from_vec(bytes[..i].to_vec()),
            OsString::from_vec(bytes[i + 1..].to_vec()),
        )),
        None => Err("expected NAME=VALUE".into()),
    }
}

/// `--rlimit NAME=SOFT[:HARD]` ([`Rlimit`]'s parser), as [`Command::rlimit`] takes it.
pub fn parse_rlimit(s: &str) -> Result<(Resource, u64, u64), ParseValueError> {
    s.parse::<Rlimit>().map(Into::into)
}

/// A non-negative fd number.
fn parse_fd_number(s: &str) -> Result<RawFd, String> {
    match s.trim().parse::<RawFd>() {
        Ok(fd) if fd >= 0 => Ok(fd),
        _ => Err(format!("{s:?} is not a file descriptor number")),
    }
}

/// `CHILD=PARENT`: the child's fd CHILD is a copy of spawnkit's fd PARENT.
pub fn parse_fd_map(s: &str) -> Result<(RawFd, RawFd), String> {
    let (child, parent) = s.split_once('=').ok_or("expected CHILD=PARENT, for example 3=7")?;
    Ok((parse_fd_number(child)?, parse_fd_number(parent)?))
}

/// `--umask OCTAL` ([`Umask`]'s parser), as [`Command::umask`] takes it.
pub fn parse_umask(s: &str) -> Result<u32, ParseValueError> {
    s.parse::<Umask>().map(Umask::bits)
}

/// A signal: `TERM`, `SIGTERM` or `15`.
pub fn parse_signal(s: &str) -> Result<Signal, String> {
    s.trim().parse::<Signal>().map_err(|_| {
        format!("{s:?} is not a signal (a name like TERM or SIGTERM, or a number 1..=64)")
    })
}

/// A comma-separated signal list, `INT,TERM,10`; empty for none. SIGKILL and SIGSTOP cannot
/// be blocked, so they are refused (the library's rule, [`SigSet::try_with`]).
pub fn parse_signal_list(s: &str) -> Result<SigSet, String> {
    let mut set = SigSet::empty();
    if s.trim().is_empty() {
        return Ok(set);
    }
    for part in s.split(',') {
        set = set.try_with(parse_signal(part)?).map_err(|e| e.to_string())?;
    }
    Ok(set)
}

/// Comma-separated users or groups; the empty string is the empty list.
pub fn parse_id_list(s: &str) -> Result<IdList, spawnkit::ParseIdError> {
    if s.trim().is_empty() {
        return Ok(IdList(Vec::new()));
    }
    s.split(',').map(str::parse::<Group>).collect::<Result<Vec<_>, _>>().map(IdList)
}

/// Whether a signal spawnkit received should go on to the child, from its si_code and
/// sender. A signal spawnkit sent itself (SIGPIPE when it writes to a closed pipe: SI_USER
/// from its own pid) is not the child's business. A signal the kernel sent (si_code
/// SI_KERNEL: a terminal's Ctrl-C, Ctrl-\, hangup) went to the whole foreground process
/// group, which includes the child unless it has a session or group of its own.
pub fn should_forward(si_code: i32, sender: u32, me: u32, child_has_own_group: bool) -> bool {
    if si_code != libc::SI_KERNEL && sender == me {
        return false;
    }
    child_has_own_group || si_code != libc::SI_KERNEL
}

// ---------------------------------------------------------------------------------------
// Failures of spawnkit itself.
// ---------------------------------------------------------------------------------------

/// A failure, printed as `spawnkit: MESSAGE`, with the exit code to use.
#[derive(Debug)]
struct Failure {
    message: String,
    code: i32,
}

impl Failure {
    fn setup(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), code: SETUP_FAILED }
    }
}

impl From<spawnkit::Error> for Failure {
    fn from(e: spawnkit::Error) -> Failure {
        Failure { message: e.to_string(), code: e.exit_code() }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

// ---------------------------------------------------------------------------------------
// The subcommand.
// ---------------------------------------------------------------------------------------

/// Run `spawnkit run`; returns the exit code.
pub fn main(args: &RunArgs) -> i32 {
    match run(args) {
        Ok(code) => code,
        Err(f) => {
            note!("spawnkit: {f}");
            f.code
        }
    }
}

fn run(args: &RunArgs) -> Result<i32, Failure> {
    check_stdio_conflicts(args)?;
    let via = args.via.clone().or_else(|| {
        std::env::var_os(spawnkit::serve::SERVER_ENV).filter(|v| !v.is_empty()).map(PathBuf::from)
    });
    if via.is_none() && args.key_file.is_some() {
        return Err(Failure::setup(format!(
            "--key-file is a spawn server's key: give --via SOCKET (or set ${}) too, or drop it",
            spawnkit::serve::SERVER_ENV
        )));
    }
    check_parent_fds(args)?;
    let mut cmd = build_command(args)?;
    let opened = open_stdio(args, &mut cmd)?;
    if args.dry_run {
        // The plan opens the lock file (creating it, as flock(1) does): a dry run creates
        // nothing, so a lock file that was not there before goes again.
        let new_lock = args.lock.as_ref().filter(|p| std::fs::symlink_metadata(p).is_err());
        let plan = cmd.plan();
        if let Some(p) = new_lock {
            if std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file() && m.len() == 0) {
                let _ = std::fs::remove_file(p);
            }
        }
        let plan = plan?;
        let mut text = String::new();
        for line in &opened {
            text += &format!("{line} (in spawnkit; not done in a dry run)\n");
        }
        text += &with_env_lines(&plan.to_string(), &env_lines(args));
        text.push('\n');
        // A reader that went away (`| head -3`) had what it wanted, as for `spawnkit ps`.
        return match out::print_stdout(&text) {
            Ok(()) | Err(out::Failure::Pipe) => Ok(0),
            Err(out::Failure::Msg(m)) => Err(Failure::setup(m)),
        };
    }
    let mut client = match &via {
        None => None,
        Some(socket) => Some(match &args.key_file {
            Some(k) => spawnkit::Client::connect_with_key_file(socket, k)?,
            None => spawnkit::Client::connect(socket)?,
        }),
    };
    let signals = block_forwarded().map_err(|e| Failure::setup(format!("signalfd: {e}")))?;
    let spawned = match client.as_mut() {
        Some(client) => client.spawn(&cmd),
        None => cmd.spawn(),
    };
    let mut child = match spawned {
        Ok(child) => child,
        // flock(1)'s convention: a lock that cannot be taken is the conflict exit code.
        Err(e)
            if args.lock.is_some()
                && e.step() == "flock"
                && e.raw_os_error() == Some(libc::EWOULDBLOCK) =>
        {
            return Err(Failure { message: e.to_string(), code: args.conflict_exit_code });
        }
        Err(e) => return Err(e.into()),
    };
    let status = wait_forwarding(&mut child, &signals, child_has_own_group(args))?;
    Ok(status.shell_code())
}

/// `--fd` and `--keep-fd` may not set the fd a `--stdin`/`--stdout`/`--stderr` flag sets:
/// one of the two would silently lose (the file still opened, and truncated, for nothing).
fn check_stdio_conflicts(args: &RunArgs) -> Result<(), Failure> {
    let first = |flags: &[(bool, &'static str)]| flags.iter().find(|f| f.0).map(|f| f.1);
    let streams = [
        first(&[(args.stdin.is_some(), "--stdin")]),
        first(&[
            (args.stdout.is_some(), "--stdout"),
            (args.stdout_append.is_some(), "--stdout-append"),
        ]),
        first(&[
            (args.stderr.is_some(), "--stderr"),
            (args.stderr_append.is_some(), "--stderr-append"),
            (args.stderr_to_stdout, "--stderr-to-stdout"),
        ]),
    ];
    let maps = args.fd.iter().map(|&(c, p)| (c, format!("--fd {c}={p}")));
    let keeps = args.keep_fd.iter().map(|&fd| (fd, format!("--keep-fd {fd}")));
    let mut seen: std::collections::HashMap<RawFd, String> = std::collections::HashMap::new();
    for (fd, given) in maps.chain(keeps) {
        let stream = usize::try_from(fd).ok().and_then(|i| streams.get(i).copied().flatten());
        if let Some(flag) = stream {
            return Err(Failure::setup(format!(
                "{given} and {flag} both set the program's fd {fd}: give only one"
            )));
        }
        // Two of --fd/--keep-fd for one fd: one would silently lose.
        if let Some(earlier) = seen.insert(fd, given.clone()) {
            if earlier != given {
                return Err(Failure::setup(format!(
                    "{earlier} and {given} both set the program's fd {fd}: give only one"
                )));
            }
        }
    }
    Ok(())
}

/// The environment changes the flags make, one line each in the plan's style, in the order
/// they apply (env(1)'s: clear, unset, set). The plan itself does not show the environment.
fn env_lines(args: &RunArgs) -> Vec<String> {
    let mut lines = Vec::new();
    if args.env_clear {
        lines.push("env clear".to_string());
    }
    for key in &args.unset {
        lines.push(format!("env unset {}", quoted(key)));
    }
    for (key, value) in &args.env {
        let mut pair = key.clone();
        pair.push("=");
        pair.push(value);
        lines.push(format!("env set {}", quoted(&pair)));
    }
    lines
}

/// `plan` (the plan's lines) with `env` inserted before its execve line, which takes the
/// environment.
fn with_env_lines(plan: &str, env: &[String]) -> String {
    if env.is_empty() {
        return plan.to_string();
    }
    let at = plan.rfind("\nexecve ").map_or(plan.len(), |i| i + 1);
    let mut text = plan[..at].to_string();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    for line in env {
        text += line;
        text.push('\n');
    }
    text += &plan[at..];
    text
}

/// The fds `--keep-fd` and `--fd` hand over must be open in spawnkit now, before it opens any
/// of its own (a signalfd, a file) that could take a missing number.
fn check_parent_fds(args: &RunArgs) -> Result<(), Failure> {
    let keep = args.keep_fd.iter().map(|&fd| ("--keep-fd", fd.to_string(), fd));
    let maps = args.fd.iter().map(|&(c, p)| ("--fd", format!("{c}={p}"), p));
    for (flag, value, fd) in keep.chain(maps) {
        // (Rust's runtime put /dev/null on a standard fd that was closed.)
        if closed::at_start(fd) {
            return Err(Failure::setup(format!(
                "{flag} {value}: fd {fd} is not open in spawnkit (it was closed when spawnkit \
                 started)"
            )));
        }
        if let Err(e) = spawnkit::process::fd_flags(fd) {
            return Err(Failure::setup(format!(
                "{flag} {value}: fd {fd} is not open in spawnkit ({e})"
            )));
        }
    }
    Ok(())
}

/// Every option except the standard streams.
fn build_command(args: &RunArgs) -> Result<Command, Failure> {
    let (program, rest) =
        args.command.split_first().ok_or_else(|| Failure::setup("no program given"))?;
    let mut cmd = Command::new(program);
    cmd.args(rest).strategy(args.strategy);
    if let Some(arg0) = &args.arg0 {
        cmd.arg0(arg0);
    }
    if let Some(dir) = &args.cwd {
        cmd.current_dir(dir);
    }
    // env(1)'s order: clear, then unset, then set.
    if args.env_clear {
        cmd.env_clear();
    }
    for key in &args.unset {
        cmd.env_remove(key);
    }
    for (key, value) in &args.env {
        cmd.env(key, value);
    }
    for &(resource, soft, hard) in &args.rlimit {
        cmd.rlimit(resource, soft, hard);
    }
    if let Some(n) = args.nice {
        cmd.nice(n);
    }
    if let Some(CpuList(cpus)) = &args.cpus {
        cmd.cpu_affinity(cpus.iter().copied());
    }
    cmd.setsid(args.setsid);
    if let Some(pgid) = args.pgid {
        cmd.process_group(pgid);
    }
    if let Some(mask) = args.umask {
        cmd.umask(mask);
    }
    if let Some(sig) = args.pdeathsig {
        cmd.parent_death_signal(sig);
    }
    cmd.no_new_privs(args.no_new_privs);
    if let Some(uid) = &args.uid {
        cmd.uid(resolve("--uid", uid, uid.kind(), uid.uid())?);
    }
    if let Some(gid) = &args.gid {
        cmd.gid(resolve("--gid", gid, gid.kind(), gid.gid())?);
    }
    if let Some(IdList(groups)) = &args.groups {
        let gids = groups
            .iter()
            .map(|g| resolve("--groups", g, g.kind(), g.gid()))
            .collect::<Result<Vec<_>, _>>()?;
        cmd.groups(gids);
    }
    for &fd in &args.keep_fd {
        cmd.keep_fd(fd);
    }
    for &(child, parent) in &args.fd {
        cmd.fd(child, parent);
    }
    cmd.close_other_fds(!args.no_close_fds);
    if let Some(mask) = args.sigmask {
        cmd.signal_mask(mask);
    }
    cmd.restore_signals(!args.no_restore_signals);
    isolation(args, &mut cmd);
    Ok(cmd)
}

/// The isolation and locking flags.
fn isolation(args: &RunArgs, cmd: &mut Command) {
    if let Some(ns) = args.unshare {
        cmd.unshare(ns);
    }
    if args.map_root_user {
        cmd.user_map(UserMap::Root);
    } else if args.map_current_user {
        cmd.user_map(UserMap::Current);
    }
    if let Some(dir) = &args.private_tmp {
        let dir = (!dir.is_empty()).then(|| PathBuf::from(dir));
        cmd.private_tmp(dir, args.tmp_options);
    }
    for (src, dst) in &args.ro_bind {
        cmd.ro_bind(src, dst);
    }
    cmd.private_network(args.private_net);
    if let Some(name) = &args.hostname {
        cmd.hostname(name);
    }
    if let Some(dir) = &args.chroot {
        cmd.chroot(dir);
    }
    if let Some(path) = &args.lock {
        let timeout =
            if args.lock_nonblock { Some(std::time::Duration::ZERO) } else { args.lock_timeout };
        cmd.lock(Lock { path: path.clone(), shared: args.lock_shared, timeout });
    }
    if let Some(dir) = &args.cgroup {
        cmd.cgroup(dir);
    }
    cmd.keep_capabilities(args.keep_caps);
}

/// `--unshare LIST`.
pub fn parse_namespaces(s: &str) -> Result<Namespaces, String> {
    s.parse::<Namespaces>().map_err(|e| e.to_string())
}

/// `--tmp-options LIST`.
pub fn parse_tmp_options(s: &str) -> Result<TmpOptions, String> {
    s.parse::<TmpOptions>().map_err(|e| e.to_string())
}

/// `--ro-bind SRC[:DST]`: paths are bytes, split at the first ':'.
pub fn parse_bind(s: OsString) -> Result<(PathBuf, PathBuf), String> {
    let bytes = s.as_bytes();
    let (src, dst) = match bytes.iter().position(|&b| b == b':') {
        Some(i) => (&bytes[..i], &bytes[i + 1..]),
        None => (bytes, bytes),
    };
    if src.is_empty() || dst.is_empty() {
        return Err(format!("{} is not SRC[:DST]", quoted(&s)));
    }
    let path = |b: &[u8]| PathBuf::from(OsStr::from_bytes(b));
    Ok((path(src), path(dst)))
}

/// The largest number of seconds [`parse_seconds`] takes (about 31 years): far past any
/// wait anyone means, and far from where adding it to a clock reading (an `Instant`, in the
/// server and the worker) would overflow.
pub const MAX_SECONDS: u64 = 1_000_000_000;

/// `--lock-timeout SECS` (and the other SECS flags): a number of seconds from 0 to
/// [`MAX_SECONDS`], fractions allowed.
pub fn parse_seconds(s: &str) -> Result<std::time::Duration, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if v.is_nan() {
        return Err(format!("{s:?} is not a number of seconds"));
    }
    if v < 0.0 {
        return Err(format!("{s:?} is negative: a number of seconds is 0 or more"));
    }
    if v > MAX_SECONDS as f64 {
        return Err(format!("{s:?} is too large: at most {MAX_SECONDS} seconds (about 31 years)"));
    }
    std::time::Duration::try_from_secs_f64(v)
        .map_err(|_| format!("{s:?} is not a number of seconds from 0 to {MAX_SECONDS}"))
}

/// A negative number given for a user or group id: refused here, where a name lookup of
/// "-1" would only say there is no such user.
fn refuse_negative_id(s: &str, what: &str) -> Result<(), String> {
    match s.trim().strip_prefix('-') {
        Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            Err(format!("{s} is negative: a {what} id is 0 to {}", u32::MAX))
        }
        _ => Ok(()),
    }
}

/// `--uid USER|UID` ([`User`]'s parser; a negative number is refused).
pub fn parse_user(s: &str) -> Result<User, String> {
    refuse_negative_id(s, "user")?;
    s.parse::<User>().map_err(|e| e.to_string())
}

/// `--gid GROUP|GID` ([`Group`]'s parser; a negative number is refused).
pub fn parse_group(s: &str) -> Result<Group, String> {
    refuse_negative_id(s, "group")?;
    s.parse::<Group>().map_err(|e| e.to_string())
}

/// How a `--stdin`/`--stdout`/`--stderr` file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenMode {
    Read,
    Truncate,
    Append,
}

impl OpenMode {
    fn flags(self) -> &'static str {
        match self {
            OpenMode::Read => "O_RDONLY",
            OpenMode::Truncate => "O_WRONLY|O_CREAT|O_TRUNC 0666",
            OpenMode::Append => "O_WRONLY|O_CREAT|O_APPEND 0666",
        }
    }

    fn open(self, path: &Path) -> io::Result<File> {
        match self {
            OpenMode::Read => File::open(path),
            OpenMode::Truncate => {
                OpenOptions::new().write(true).create(true).truncate(true).open(path)
            }
            OpenMode::Append => OpenOptions::new().append(true).create(true).open(path),
        }
    }
}

/// Open the stdio files and hand them to `cmd`; returns one line per file opened, as the dry
/// run prints them. In a dry run nothing is opened (no file is created or truncated):
/// /dev/null stands in so the plan shows the dup2 steps.
///
/// A standard fd that was closed when spawnkit started (Rust's runtime has put /dev/null
/// there since) is closed in the program unless a flag here sets it: the program inherits
/// what spawnkit was given, as under env(1). `--stderr-to-stdout` follows a closed stdout.
fn open_stdio(args: &RunArgs, cmd: &mut Command) -> Result<Vec<String>, Failure> {
    if closed::at_start(0) {
        cmd.stdin(Stdio::Closed);
    }
    if closed::at_start(1) {
        cmd.stdout(Stdio::Closed);
    }
    if closed::at_start(2) {
        cmd.stderr(Stdio::Closed);
    }
    let pick = |trunc: &Option<PathBuf>, append: &Option<PathBuf>, trunc_flag, append_flag| match (
        trunc, append,
    ) {
        (Some(p), _) => Some((p.clone(), OpenMode::Truncate, trunc_flag)),
        (None, Some(p)) => Some((p.clone(), OpenMode::Append, append_flag)),
        (None, None) => None,
    };
    let specs = [
        args.stdin.clone().map(|p| (p, OpenMode::Read, "--stdin")),
        pick(&args.stdout, &args.stdout_append, "--stdout", "--stdout-append"),
        pick(&args.stderr, &args.stderr_append, "--stderr", "--stderr-append"),
    ];
    let mut lines = Vec::new();
    for (target, spec) in specs.into_iter().enumerate() {
        let Some((path, mode, flag)) = spec else { continue };
        if path.as_os_str() == "-" {
            continue;
        }
        let file = if args.dry_run { File::open("/dev/null") } else { mode.open(&path) }
            .map_err(|e| Failure::setup(format!("open {} ({flag}): {e}", quoted(&path))))?;
        lines.push(format!(
            "open {} {} -> fd {} for fd {target}",
            quoted(&path),
            mode.flags(),
            file.as_raw_fd()
        ));
        match target {
            0 => cmd.stdin(file),
            1 => cmd.stdout(file),
            _ => cmd.stderr(file),
        };
    }
    if args.stderr_to_stdout {
        cmd.stderr(Stdio::Stdout);
    }
    Ok(lines)
}

// ---------------------------------------------------------------------------------------
// Users and groups (getpwnam_r/getgrnam_r in spawnkit, never in the child).
// ---------------------------------------------------------------------------------------

/// The id `found` for `id` (a [`User`] or [`Group`] resolved by the library), or the
/// error naming the flag and the name.
fn resolve(
    flag: &str,
    id: &dyn std::fmt::Display,
    what: &str,
    found: Result<u32, LookupError>,
) -> Result<u32, Failure> {
    match found {
        Ok(n) => Ok(n),
        Err(LookupError::NotFound) => {
            Err(Failure::setup(format!("{flag} {}: no such {what}", quoted(id.to_string()))))
        }
        Err(LookupError::Failed(e)) => Err(Failure::setup(format!(
            "{flag} {}: {what} lookup failed: {e}",
            quoted(id.to_string())
        ))),
    }
}

// ---------------------------------------------------------------------------------------
// Signal forwarding: blocked signals, a signalfd, and poll(2) with the child's pidfd.
// ---------------------------------------------------------------------------------------

/// The signals spawnkit does not forward, left at their default action: SIGKILL and SIGSTOP
/// (they cannot be caught), the job-control signals (TSTP, TTIN and TTOU stop spawnkit
/// itself, CONT resumes it, as a shell expects of any foreground program), and those whose
/// default is to be ignored (CHLD, URG, WINCH). See the module comment for the rest.
const NOT_FORWARDED: [libc::c_int; 9] = [
    libc::SIGKILL,
    libc::SIGSTOP,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
    libc::SIGCONT,
    libc::SIGCHLD,
    libc::SIGURG,
    libc::SIGWINCH,
];

/// The signals spawnkit passes on to the child, as the kernel's 64-bit mask (bit N-1 for
/// signal N): every other one, 1 to 64.
fn forwarded_mask() -> u64 {
    NOT_FORWARDED.iter().fold(u64::MAX, |mask, &sig| mask & !(1u64 << (sig - 1)))
}

fn child_has_own_group(args: &RunArgs) -> bool {
    let ours = spawnkit::process::getpgrp();
    args.setsid || args.pgid.is_some_and(|pgid| pgid != ours)
}

/// Block the forwarded signals ([`forwarded_mask`]) and open a signalfd for them
/// ([`SignalFd`]: spawnkit has one thread, so the process mask is this thread's). The child
/// does not inherit the mask: the library installs the child's own mask (empty unless
/// --sigmask) before execve.
///
/// Blocked, since without a handler (spawnkit installs none) any of them would end spawnkit
/// and orphan the child; the library blocks with raw system calls, so glibc's signals 32 and
/// 33 are blocked too.
fn block_forwarded() -> io::Result<SignalFd> {
    SignalFd::block(SigSet::from_bits(forwarded_mask()))
}

/// Wait for the child, forwarding signals to it meanwhile.
fn wait_forwarding(
    child: &mut Child,
    signals: &SignalFd,
    own_group: bool,
) -> Result<ExitStatus, Failure> {
    loop {
        let fds = [signals.as_fd().as_raw_fd(), child.pidfd().as_raw_fd()];
        let ready = match spawnkit::process::poll_readable(fds, -1) {
            Ok(ready) => ready,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Failure::setup(format!("poll: {e}"))),
        };
        if ready[0] {
            let pending =
                signals.read_pending().map_err(|e| Failure::setup(format!("signalfd: {e}")))?;
            for ReceivedSignal { signo, code, sender } in pending {
                if !should_forward(code, sender, std::process::id(), own_group) {
                    continue;
                }
                let Ok(sig) = Signal::new(signo) else { continue };
                if let Err(e) = child.send_signal(sig) {
                    note!("spawnkit: {e}");
                }
            }
        }
        if ready[1] {
            return Ok(child.wait()?);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_pairs() {
        let p = |s: &str| parse_env_pair(OsString::from(s));
        assert_eq!(p("A=1"), Ok(("A".into(), "1".into())));
        assert_eq!(p("A="), Ok(("A".into(), "".into())));
        assert_eq!(p("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert!(p("=1").unwrap_err().contains("empty"));
        assert!(p("A").unwrap_err().contains("NAME=VALUE"));
        let raw = OsString::from_vec(b"K=\xff".to_vec());
        assert_eq!(parse_env_pair(raw), Ok(("K".into(), OsString::from_vec(vec![0xff]))));
    }

    #[test]
    fn rlimit_specs() {
        // The parser is Rlimit's (its tests are in the library); the flag gets the tuple.
        assert_eq!(parse_rlimit("nofile=64:128"), Ok((Resource::Nofile, 64, 128)));
        assert!(parse_rlimit("nofile=10:5").unwrap_err().to_string().contains("above the hard"));
    }

    #[test]
    fn fd_maps() {
        assert_eq!(parse_fd_map("3=7"), Ok((3, 7)));
        assert_eq!(parse_fd_map("0=9"), Ok((0, 9)));
        assert!(parse_fd_map("3").unwrap_err().contains("CHILD=PARENT"));
        assert!(parse_fd_map("3=-1").unwrap_err().contains("\"-1\""));
        assert!(parse_fd_map("x=1").is_err());
        assert!(parse_fd_map("1=").is_err());
    }

    #[test]
    fn umasks() {
        assert_eq!(parse_umask("0027"), Ok(0o27));
        assert!(parse_umask("1000").unwrap_err().to_string().contains("out of range"));
    }

    #[test]
    fn signals() {
        assert_eq!(parse_signal("TERM"), Ok(Signal::TERM));
        assert_eq!(parse_signal("SIGTERM"), Ok(Signal::TERM));
        assert_eq!(parse_signal("term"), Ok(Signal::TERM));
        assert_eq!(parse_signal("15"), Ok(Signal::TERM));
        assert!(parse_signal("FOO").unwrap_err().contains("\"FOO\" is not a signal"));
        assert!(parse_signal("0").is_err());
        assert!(parse_signal("65").is_err());
    }

    #[test]
    fn signal_lists() {
        assert_eq!(parse_signal_list(""), Ok(SigSet::empty()));
        let set = parse_signal_list("INT,SIGTERM,10").unwrap();
        assert_eq!(set.bits(), (1 << 1) | (1 << 14) | (1 << 9));
        assert!(parse_signal_list("INT,NOPE").unwrap_err().contains("\"NOPE\""));
        assert!(parse_signal_list("KILL").unwrap_err().contains("cannot be blocked"));
        assert!(parse_signal_list("STOP").unwrap_err().contains("cannot be blocked"));
        assert!(parse_signal_list("INT,").is_err());
    }

    #[test]
    fn ids() {
        // User's and Group's own parsers are tested in the library (users.rs).
        assert_eq!(parse_id_list(""), Ok(IdList(vec![])));
        assert_eq!(
            parse_id_list("1,adm,3"),
            Ok(IdList(vec![Group::Id(1), Group::Name("adm".into()), Group::Id(3)]))
        );
        assert!(parse_id_list("1,,2").is_err());
    }

    #[test]
    fn forwarding_rule() {
        let me = 100;
        // kill(2) from another process: SI_USER; forwarded whatever the group.
        assert!(should_forward(libc::SI_USER, 7, me, false));
        assert!(should_forward(libc::SI_USER, 7, me, true));
        assert!(should_forward(libc::SI_QUEUE, 7, me, false));
        assert!(should_forward(libc::SI_TKILL, 7, me, false));
        // A terminal's Ctrl-C: already delivered to a child in our group.
        assert!(!should_forward(libc::SI_KERNEL, 0, me, false));
        assert!(should_forward(libc::SI_KERNEL, 0, me, true));
        // spawnkit's own SIGPIPE (a write to a closed pipe is SI_USER from itself).
        assert!(!should_forward(libc::SI_USER, me, me, false));
        assert!(!should_forward(libc::SI_USER, me, me, true));
    }

    #[test]
    fn forwarded_signals() {
        let mask = forwarded_mask();
        let has = |sig: i32| mask & (1u64 << (sig - 1)) != 0;
        for sig in [
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGTERM,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGALRM,
            libc::SIGPIPE,
            libc::SIGABRT,
            libc::SIGSEGV,
            libc::SIGSYS,
            libc::SIGPWR,
            libc::SIGSTKFLT,
        ]
        .into_iter()
        .chain(32..=64)
        {
            assert!(has(sig), "signal {sig} is not forwarded");
        }
        for sig in NOT_FORWARDED {
            assert!(!has(sig), "signal {sig} is forwarded");
        }
        assert_eq!(mask.count_ones() as usize, 64 - NOT_FORWARDED.len());
    }
}
