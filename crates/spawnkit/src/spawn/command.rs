//! [`Command`]: pure data describing a process to start.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::options::{PathSearch, Resource, SigSet, Signal, Stdio, Strategy};
use super::plan::Plan;
use crate::error::Result;
use crate::isolate::{Isolation, Lock, Namespaces, PrivateTmp, TmpOptions, UserMap};
use crate::{Child, ExitStatus, Output};

pub(crate) use crate::steps::Hook;

/// A process to start, built like `std::process::Command`, with everything `posix_spawn`
/// lacks. Building a `Command` does nothing; [`spawn`](Command::spawn) compiles it to a
/// [`Plan`] and runs it with the chosen [`Strategy`].
///
/// The child's setup happens in this order (each step is one raw system call or a few):
/// (the isolation steps), signals reset, session/process group, fd map, close other fds,
/// umask, rlimits, nice, affinity, chdir, (a fenced child: the bounding set dropped), groups,
/// gid, uid, (a fenced child: every other capability set cleared), parent-death signal,
/// no_new_privs, (pre_exec hooks), signal mask, execve along the PATH candidates.
///
/// Every option but a `pre_exec` hook has a versioned binary form, with fds passed beside it
/// by index: [`to_wire`](Command::to_wire) and [`from_wire`](Command::from_wire) (what the
/// spawn server receives; see docs/wire.md).
pub struct Command {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) arg0: Option<OsString>,
    pub(crate) env_clear: bool,
    /// Changes to the environment, in the order they were made (a name appears once).
    pub(crate) env: Vec<(OsString, Option<OsString>)>,
    /// The environment the changes apply to, when not this process's (see `base_env`).
    pub(crate) base_env: Option<Arc<[(OsString, OsString)]>>,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) stdio: [Option<Stdio>; 3],
    pub(crate) fds: Vec<(RawFd, RawFd)>,
    /// The parent fds of `fds` that this command owns (a command decoded from its wire form
    /// received them); closed when the command is dropped. Only held, never read.
    #[allow(dead_code)]
    pub(crate) held_fds: Vec<OwnedFd>,
    /// A SpawnMany frame's fds that this command borrows in `stdio` and `fds` (decoded with
    /// `from_wire_shared`), shared with the frame's other commands: closed when the last of
    /// them is dropped. Only held, never read.
    #[allow(dead_code)]
    pub(crate) shared_fds: Option<Arc<[OwnedFd]>>,
    pub(crate) close_other_fds: bool,
    pub(crate) sigmask: SigSet,
    pub(crate) restore_signals: bool,
    pub(crate) sig_default: SigSet,
    pub(crate) setsid: bool,
    pub(crate) pgid: Option<i32>,
    pub(crate) rlimits: Vec<(Resource, u64, u64)>,
    pub(crate) nice: Option<i32>,
    pub(crate) cpus: Option<Vec<usize>>,
    pub(crate) uid: Option<u32>,
    pub(crate) gid: Option<u32>,
    pub(crate) groups: Option<Vec<u32>>,
    pub(crate) umask: Option<u32>,
    pub(crate) pdeathsig: Option<Signal>,
    pub(crate) no_new_privs: bool,
    pub(crate) strategy: Strategy,
    pub(crate) pre_exec: Vec<Hook>,
    /// A child that ends inside a `pre_exec` hook is handed out (see `pre_exec_may_exit`).
    pub(crate) pre_exec_may_exit: bool,
    /// A child killed before execve with no step failed is handed out (see
    /// `may_die_before_exec`).
    pub(crate) may_die_before_exec: bool,
    pub(crate) kill_on_drop: bool,
    pub(crate) isolation: Isolation,
    pub(crate) path_search: PathSearch,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Command")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("strategy", &self.strategy)
            .finish_non_exhaustive()
    }
}

impl Command {
    /// A command running `program`, found along the child's PATH if it has no `/`.
    pub fn new(program: impl AsRef<OsStr>) -> Command {
        Command {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            arg0: None,
            env_clear: false,
            base_env: None,
            env: Vec::new(),
            cwd: None,
            stdio: [None, None, None],
            fds: Vec::new(),
            held_fds: Vec::new(),
            shared_fds: None,
            close_other_fds: true,
            sigmask: SigSet::empty(),
            restore_signals: true,
            sig_default: SigSet::empty(),
            setsid: false,
            pgid: None,
            rlimits: Vec::new(),
            nice: None,
            cpus: None,
            uid: None,
            gid: None,
            groups: None,
            umask: None,
            pdeathsig: None,
            no_new_privs: false,
            strategy: Strategy::default(),
            pre_exec: Vec::new(),
            pre_exec_may_exit: false,
            may_die_before_exec: false,
            kill_on_drop: false,
            isolation: Isolation::default(),
            path_search: PathSearch::default(),
        }
    }

    /// Append one argument.
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Command {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Append arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// `argv[0]` as the child sees it (default: the program as given).
    pub fn arg0(&mut self, arg0: impl AsRef<OsStr>) -> &mut Command {
        self.arg0 = Some(arg0.as_ref().to_owned());
        self
    }

    /// Set an environment variable in the child.
    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Command {
        self.set_env(key.as_ref(), Some(value.as_ref().to_owned()));
        self
    }

    /// Set several environment variables.
    pub fn envs<I, K, V>(&mut self, vars: I) -> &mut Command
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        for (k, v) in vars {
            self.env(k, v);
        }
        self
    }

    /// Record a change, keeping the order names were first set in (as a Python dict does).
    fn set_env(&mut self, key: &OsStr, value: Option<OsString>) {
        match self.env.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.env.push((key.to_owned(), value)),
        }
    }

    /// Remove a variable from the child's environment.
    pub fn env_remove(&mut self, key: impl AsRef<OsStr>) -> &mut Command {
        self.set_env(key.as_ref(), None);
        self
    }

    /// Start from these variables instead of this process's environment (changes made with
    /// [`env`](Command::env) and [`env_remove`](Command::env_remove) still apply on top;
    /// [`env_clear`](Command::env_clear) still starts from nothing). They are passed as
    /// given, like the parent's own environment; a NUL byte in one is an error at spawn.
    ///
    /// Without it the child's environment is copied from this process's when the command is
    /// spawned, with `std::env::vars_os`, which holds Rust's environment lock: a Rust thread's
    /// `std::env::set_var` is never seen half done. A process that has only ever had one
    /// thread, where nobody else can be changing the environment, compares it in place with
    /// the copy the last spawn took instead, and uses that copy again when nothing changed.
    /// C code that calls `setenv`, `putenv` or `unsetenv` does not take that lock, and may
    /// free the strings being copied (the hazard
    /// every `getenv` reader shares, glibc's `environ` has no lock of its own): while such
    /// code can run on another thread, take a copy under whatever lock that code holds and
    /// pass it here. spawnkit's Python module does so under the GIL, which every writer of
    /// `os.environ` holds.
    pub fn base_env<I, K, V>(&mut self, vars: I) -> &mut Command
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let vars = vars.into_iter().map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned()));
        self.base_env = Some(vars.collect::<Vec<_>>().into());
        self
    }

    /// Start from this process's environment as it is now (at this call, not at the spawn):
    /// [`base_env`](Command::base_env) with what `std::env::vars_os` reads, taken under
    /// Rust's environment lock. For a caller that must take it under a lock of its own, as
    /// spawnkit's Python module does under the GIL. In a process that has only ever had one
    /// thread, the copy the last call took on this thread is used again when the environment
    /// is still the same (compared in place), and then the spawn reuses what it built from it.
    pub fn base_env_now(&mut self) -> &mut Command {
        self.base_env = Some(crate::sys::environ::snapshot());
        self
    }

    /// Start from an empty environment instead of the parent's (variables set with
    /// [`env`](Command::env) are still passed).
    pub fn env_clear(&mut self) -> &mut Command {
        self.env_clear = true;
        self.env.retain(|(_, v)| v.is_some());
        self
    }

    /// The child's working directory. A relative program path (`./tool`) and relative PATH
    /// entries are resolved from it, as in CPython and Rust std.
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Command {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// The child's stdin (default: inherit).
    pub fn stdin(&mut self, s: impl Into<Stdio>) -> &mut Command {
        self.stdio[0] = Some(s.into());
        self
    }

    /// The child's stdout (default: inherit).
    pub fn stdout(&mut self, s: impl Into<Stdio>) -> &mut Command {
        self.stdio[1] = Some(s.into());
        self
    }

    /// The child's stderr (default: inherit). [`Stdio::Stdout`] sends it where stdout goes.
    pub fn stderr(&mut self, s: impl Into<Stdio>) -> &mut Command {
        self.stdio[2] = Some(s.into());
        self
    }

    /// Make the child's fd `child_fd` a copy of the parent's fd `parent_fd`. Maps may form
    /// swaps and cycles (3->4, 4->3); `fd(n, n)` keeps fd `n` open across exec even if it is
    /// close-on-exec in the parent. Later maps for the same `child_fd` replace earlier ones.
    pub fn fd(&mut self, child_fd: RawFd, parent_fd: RawFd) -> &mut Command {
        self.fds.retain(|(c, _)| *c != child_fd);
        self.fds.push((child_fd, parent_fd));
        self
    }

    /// Keep the parent's fd `fd` open in the child under the same number (`fd(fd, fd)`).
    pub fn keep_fd(&mut self, fd: RawFd) -> &mut Command {
        self.fd(fd, fd)
    }

    /// Close every fd of the child except 0, 1, 2 and the mapped ones (default: true), with
    /// close_range(2), falling back to /proc/self/fd on kernels before 5.9.
    pub fn close_other_fds(&mut self, on: bool) -> &mut Command {
        self.close_other_fds = on;
        self
    }

    /// The child's signal mask at execve (default: empty, whatever the parent's is).
    pub fn signal_mask(&mut self, mask: SigSet) -> &mut Command {
        self.sigmask = mask;
        self
    }

    /// Reset SIGPIPE and SIGXFSZ to their default action in the child even if the parent
    /// ignores them (default: true, like CPython's `restore_signals` and Rust std). Handled
    /// signals are always reset to default: a handler cannot survive execve anyway.
    pub fn restore_signals(&mut self, on: bool) -> &mut Command {
        self.restore_signals = on;
        self
    }

    /// Reset `sig` to its default action in the child even if the parent ignores it.
    pub fn signal_default(&mut self, sig: Signal) -> &mut Command {
        self.sig_default = self.sig_default.with(sig);
        self
    }

    /// Start a new session (setsid(2)): no controlling terminal, its own process group.
    pub fn setsid(&mut self, on: bool) -> &mut Command {
        self.setsid = on;
        self
    }

    /// Put the child in process group `pgid`; `0` makes a new group led by the child.
    pub fn process_group(&mut self, pgid: i32) -> &mut Command {
        self.pgid = Some(pgid);
        self
    }

    /// Set a resource limit ([`RLIM_INFINITY`](crate::RLIM_INFINITY) for none).
    pub fn rlimit(&mut self, resource: Resource, soft: u64, hard: u64) -> &mut Command {
        self.rlimits.retain(|(r, _, _)| *r != resource);
        self.rlimits.push((resource, soft, hard));
        self
    }

    /// Add `increment` to the niceness, like nice(1) (clamped to -20..=19).
    pub fn nice(&mut self, increment: i32) -> &mut Command {
        self.nice = Some(increment);
        self
    }

    /// Run only on these CPUs (sched_setaffinity(2)).
    pub fn cpu_affinity(&mut self, cpus: impl IntoIterator<Item = usize>) -> &mut Command {
        self.cpus = Some(cpus.into_iter().collect());
        self
    }

    /// Run as this user id (setresuid). Without [`groups`](Command::groups), supplementary
    /// groups are dropped when permitted, as Rust std does.
    pub fn uid(&mut self, uid: u32) -> &mut Command {
        self.uid = Some(uid);
        self
    }

    /// Run with this group id (setresgid).
    pub fn gid(&mut self, gid: u32) -> &mut Command {
        self.gid = Some(gid);
        self
    }

    /// Supplementary groups (setgroups); an empty list drops them all.
    pub fn groups(&mut self, groups: impl IntoIterator<Item = u32>) -> &mut Command {
        self.groups = Some(groups.into_iter().collect());
        self
    }

    /// The child's umask.
    pub fn umask(&mut self, mask: u32) -> &mut Command {
        self.umask = Some(mask);
        self
    }

    /// Signal the child gets when the parent *thread* that spawned it exits
    /// (PR_SET_PDEATHSIG; a kernel rule: spawn from a long-lived thread). Set after the
    /// credential changes, which would clear it; if the parent is already gone when it is
    /// set, the child signals itself.
    pub fn parent_death_signal(&mut self, sig: Signal) -> &mut Command {
        self.pdeathsig = Some(sig);
        self
    }

    /// Set no_new_privs: execve can never grant privileges (setuid bits, file caps).
    pub fn no_new_privs(&mut self, on: bool) -> &mut Command {
        self.no_new_privs = on;
        self
    }

    /// How to start the child (default [`Strategy::CloneVfork`]).
    pub fn strategy(&mut self, strategy: Strategy) -> &mut Command {
        self.strategy = strategy;
        self
    }

    /// Whether a spawn server's parked child could run this command (sys/pool.rs): no
    /// isolation (whose namespaces and cgroup the clone itself carries) and the default
    /// strategy. Conservative: a false here only means a clone made for the request.
    pub(crate) fn pool_may_serve(&self) -> bool {
        self.strategy == Strategy::CloneVfork
            && self.isolation == crate::isolate::Isolation::default()
    }

    /// Kill (SIGKILL) and reap the child when its [`Child`] is dropped unwaited.
    pub fn kill_on_drop(&mut self, on: bool) -> &mut Command {
        self.kill_on_drop = on;
        self
    }

    /// Run `f` in the child after every other step, just before the signal mask is installed
    /// and execve. Forces the [`Strategy::ForkExec`] strategy (any other strategy errors).
    ///
    /// # Safety
    /// `f` runs in a `fork()`ed copy of a possibly multi-threaded process: it may only call
    /// async-signal-safe functions. It must not allocate, lock, or touch state another thread
    /// may have held at the fork (see `std::os::unix::process::CommandExt::pre_exec`).
    #[allow(unsafe_code)] // declares the contract; the hook itself runs in sys/in_child.rs
    pub unsafe fn pre_exec<F>(&mut self, f: F) -> &mut Command
    where
        F: FnMut() -> io::Result<()> + Send + Sync + 'static,
    {
        self.pre_exec.push(Box::new(f));
        self.strategy = Strategy::ForkExec;
        self
    }

    /// What a child that ends inside a [`pre_exec`](Command::pre_exec) hook (the hook called
    /// `_exit`, or a signal killed it there) without the hook returning an error is: by
    /// default an error ([`ErrorKind::ChildDied`](crate::ErrorKind::ChildDied), the child
    /// reaped), since it never ran the program; with `true` a [`Child`](crate::Child) whose
    /// wait gives that exit status, as CPython's `subprocess` (and Rust's `std::process`)
    /// treat a child that ends before exec without reporting a failure.
    pub fn pre_exec_may_exit(&mut self, on: bool) -> &mut Command {
        self.pre_exec_may_exit = on;
        self
    }

    /// What a child killed by a signal before its execve (while it set itself up, outside
    /// any [`pre_exec`](Command::pre_exec) hook, with no step failing) is: by default an error
    /// ([`ErrorKind::ChildDied`](crate::ErrorKind::ChildDied), the child reaped), which names
    /// the step it was at; with `true` a [`Child`](crate::Child) whose wait gives that signal,
    /// as CPython's `subprocess` and Rust's `std::process` hand out a child that ended before
    /// exec without reporting a failure. A step that fails is an error either way. Through a
    /// spawn server too (the command carries it), where the server's watchdog killing a
    /// child stuck before exec is then such a child.
    pub fn may_die_before_exec(&mut self, on: bool) -> &mut Command {
        self.may_die_before_exec = on;
        self
    }

    /// How the child walks the PATH candidates ([`PathSearch::Execvp`] by default;
    /// [`PathSearch::TryAll`] is CPython's subprocess behaviour). The posix-spawn strategy
    /// always follows glibc's.
    pub fn path_search(&mut self, search: PathSearch) -> &mut Command {
        self.path_search = search;
        self
    }

    /// Create these namespaces for the child (at clone time with clone-vfork). A caller
    /// without root gets a user namespace mapping it to itself added, as bubblewrap does.
    pub fn unshare(&mut self, ns: Namespaces) -> &mut Command {
        self.isolation.unshare = self.isolation.unshare.union(ns);
        self
    }

    /// A new user namespace with this id mapping ([`UserMap::Root`]: `unshare -r`).
    pub fn user_map(&mut self, map: UserMap) -> &mut Command {
        self.isolation.user_map = Some(map);
        self
    }

    /// A private /tmp (new mount namespace, propagation private): a fresh tmpfs, or `dir`
    /// bound on /tmp, mounted with `options`.
    pub fn private_tmp(&mut self, dir: Option<PathBuf>, options: TmpOptions) -> &mut Command {
        self.isolation.private_tmp = Some(PrivateTmp { dir, options });
        self
    }

    /// No private /tmp after all (undoes [`private_tmp`](Command::private_tmp); the other
    /// fences stay).
    pub fn no_private_tmp(&mut self) -> &mut Command {
        self.isolation.private_tmp = None;
        self
    }

    /// Bind `src` read-only on `dst` (which must exist) in a new mount namespace.
    pub fn ro_bind(&mut self, src: impl AsRef<Path>, dst: impl AsRef<Path>) -> &mut Command {
        self.isolation.ro_binds.push((src.as_ref().to_owned(), dst.as_ref().to_owned()));
        self
    }

    /// A new network namespace with only the loopback interface, up.
    pub fn private_network(&mut self, on: bool) -> &mut Command {
        self.isolation.private_net = on;
        self
    }

    /// The hostname, in a new uts namespace: 1 to 64 bytes, any bytes (sethostname(2) takes
    /// them as they are; a `&str` or `String` works too).
    pub fn hostname(&mut self, name: impl AsRef<OsStr>) -> &mut Command {
        self.isolation.hostname = Some(name.as_ref().to_owned());
        self
    }

    /// Let a fenced child keep its capabilities (default off). A child with a fence (a
    /// namespace other than a user namespace alone, or a chroot) starts with none: the
    /// bounding, ambient, permitted, effective and inheritable sets are emptied after the
    /// mounts and credential changes, so even uid 0 inside gains nothing at execve and cannot
    /// undo the fences; it also gets a session keyring of its own, and under real root with
    /// a mount namespace /proc/sys, /proc/sysrq-trigger and /sys are read-only to it (uid 0
    /// writes them without a capability). With this on, none of that happens: root inside
    /// keeps its capabilities and can undo every fence.
    pub fn keep_capabilities(&mut self, on: bool) -> &mut Command {
        self.isolation.keep_caps = on;
        self
    }

    /// chroot into `dir` (after the mounts; the working directory becomes `/` of it unless
    /// [`current_dir`](Command::current_dir) is set, which is then resolved inside).
    pub fn chroot(&mut self, dir: impl AsRef<Path>) -> &mut Command {
        self.isolation.chroot = Some(dir.as_ref().to_owned());
        self
    }

    /// Hold an flock(2) lock for the child's whole life, without an extra process: the parent
    /// takes it just before the clone and the child inherits the only fd holding it (kept
    /// open under its own number, as flock(1) does), so it is released when the child and
    /// anything it passed the fd to exit.
    pub fn lock(&mut self, lock: Lock) -> &mut Command {
        self.isolation.lock = Some(lock);
        self
    }

    /// Start in this cgroup v2 directory from the first instruction (clone3
    /// CLONE_INTO_CGROUP; fork-exec moves the child before anything else).
    pub fn cgroup(&mut self, dir: impl AsRef<Path>) -> &mut Command {
        self.isolation.cgroup = Some(dir.as_ref().to_owned());
        self
    }

    /// A copy of every option, for spawning the same command again elsewhere (a template
    /// that several threads spawn from). Fds the command owns (`Stdio::File`, `Stdio::Owned`,
    /// the fds a decoded command holds) are duplicated. A `pre_exec` hook is code and cannot
    /// be copied: a command with one is an `InvalidInput` error.
    pub fn try_clone(&self) -> Result<Command> {
        if !self.pre_exec.is_empty() {
            return Err(crate::Error::invalid("copy", "", "a pre_exec hook cannot be copied"));
        }
        let os_err = |e: io::Error| crate::Error::os("dup", "", e.raw_os_error().unwrap_or(0));
        let dup = |fd: &OwnedFd| fd.try_clone().map_err(os_err);
        let mut stdio: [Option<Stdio>; 3] = [None, None, None];
        for (slot, s) in stdio.iter_mut().zip(&self.stdio) {
            *slot = match s {
                None => None,
                Some(Stdio::Inherit) => Some(Stdio::Inherit),
                Some(Stdio::Null) => Some(Stdio::Null),
                Some(Stdio::Pipe) => Some(Stdio::Pipe),
                Some(Stdio::Stdout) => Some(Stdio::Stdout),
                Some(Stdio::Closed) => Some(Stdio::Closed),
                Some(Stdio::Fd(fd)) => Some(Stdio::Fd(*fd)),
                Some(Stdio::File(f)) => Some(Stdio::File(f.try_clone().map_err(os_err)?)),
                Some(Stdio::Owned(fd)) => Some(Stdio::Owned(dup(fd)?)),
            };
        }
        let held_fds = self.held_fds.iter().map(dup).collect::<Result<Vec<_>>>()?;
        Ok(Command {
            program: self.program.clone(),
            args: self.args.clone(),
            arg0: self.arg0.clone(),
            env_clear: self.env_clear,
            env: self.env.clone(),
            base_env: self.base_env.clone(),
            cwd: self.cwd.clone(),
            stdio,
            fds: self.fds.clone(),
            held_fds,
            shared_fds: self.shared_fds.clone(),
            close_other_fds: self.close_other_fds,
            sigmask: self.sigmask,
            restore_signals: self.restore_signals,
            sig_default: self.sig_default,
            setsid: self.setsid,
            pgid: self.pgid,
            rlimits: self.rlimits.clone(),
            nice: self.nice,
            cpus: self.cpus.clone(),
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
            umask: self.umask,
            pdeathsig: self.pdeathsig,
            no_new_privs: self.no_new_privs,
            strategy: self.strategy,
            pre_exec: Vec::new(),
            pre_exec_may_exit: self.pre_exec_may_exit,
            may_die_before_exec: self.may_die_before_exec,
            kill_on_drop: self.kill_on_drop,
            isolation: self.isolation.clone(),
            path_search: self.path_search,
        })
    }

    /// The program as given.
    pub fn get_program(&self) -> &OsStr {
        &self.program
    }

    /// `argv[0]` when set apart from the program ([`arg0`](Command::arg0)).
    pub fn get_arg0(&self) -> Option<&OsStr> {
        self.arg0.as_deref()
    }

    /// Whether the child closes the fds it is not given ([`close_other_fds`](Command::close_other_fds)).
    pub fn get_close_other_fds(&self) -> bool {
        self.close_other_fds
    }

    /// The arguments after `argv[0]`.
    pub fn get_args(&self) -> &[OsString] {
        &self.args
    }

    /// The strategy that will be used.
    pub fn get_strategy(&self) -> Strategy {
        self.strategy
    }

    /// Compile to a [`Plan`] without spawning: every input is checked and the fds the child
    /// will get are made (pipes, /dev/null) so the steps show real numbers; dropping the plan
    /// closes them. Useful to see the exact steps (`spawnkit run --dry-run`).
    pub fn plan(&self) -> Result<Plan> {
        Plan::build(self)
    }

    /// Start the child.
    pub fn spawn(&mut self) -> Result<Child> {
        super::engine::spawn(self)
    }

    /// Start the child without waiting for it to exec: the calling thread returns right after
    /// the clone (the child runs its steps and `execve` meanwhile, on a stack of its own), and
    /// the [`Starting`](crate::Starting) it returns tells when the outcome is known (an fd for
    /// an event loop) and gives the [`Child`] or the error of the step that failed. What
    /// [`spawn`](Command::spawn) would report as an error is the same, only later. Plans that
    /// need the calling thread during the clone (id maps written from outside, fork-exec, the
    /// posix_spawn strategy) are spawned as `spawn` does and come back ready. `Stdio::File`
    /// and `Stdio::Owned` streams are used up by the start even if it fails later (a failed
    /// `spawn` leaves them in the command).
    pub fn start(&mut self) -> Result<super::engine::Starting> {
        super::engine::start(self)
    }

    /// Start the child with stdin from /dev/null (unless set) and stdout/stderr captured
    /// (unless set), wait for it, and return everything it wrote.
    pub fn output(&mut self) -> Result<Output> {
        let mut filled = [false; 3];
        for (i, default) in [(0, Stdio::Null), (1, Stdio::Pipe), (2, Stdio::Pipe)] {
            if self.stdio[i].is_none() {
                self.stdio[i] = Some(default);
                filled[i] = true;
            }
        }
        let child = self.spawn();
        for (slot, filled) in self.stdio.iter_mut().zip(filled) {
            if filled {
                *slot = None;
            }
        }
        child?.communicate(None, None)
    }

    /// Start the child and wait for it.
    pub fn status(&mut self) -> Result<ExitStatus> {
        self.spawn()?.wait()
    }
}
