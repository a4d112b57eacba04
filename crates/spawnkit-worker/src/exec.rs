//! Executing one action: fetch `Action` and `Command`, lay out the input root, run the
//! command fenced with the spawnkit engine, upload outputs, build the `ActionResult`.

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use bazel_remote_apis::google::protobuf::{Any, Timestamp};
use bazel_remote_apis::google::rpc::Status;
use prost::Message;
use spawnkit::{Namespaces, Rlimit, Stdio, TmpOptions};

use crate::cas::{
    count_waits, digest_file, digest_name, digest_of, io_err, Blob, Cas, CasError, DirCache,
    LocalCache, Wait,
};
use crate::proto::{self, PreconditionFailure, Violation};

/// The fence every action gets unless its platform says otherwise.
#[derive(Debug, Clone)]
pub struct Fence {
    /// A network namespace with only `lo` (lifted by the platform property `network=on`).
    pub private_net: bool,
    /// A fresh tmpfs on /tmp.
    pub private_tmp: bool,
    /// A pid namespace: the command is pid 1 and everything it started dies with it.
    pub private_pid: bool,
    /// Run as this uid/gid (the work tree is handed to them).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub rlimits: Vec<Rlimit>,
}

impl Default for Fence {
    fn default() -> Fence {
        Fence {
            private_net: true,
            private_tmp: true,
            private_pid: true,
            uid: None,
            gid: None,
            rlimits: Vec::new(),
        }
    }
}

/// What the executor needs, shared by every running action.
pub struct Executor {
    pub cas: Cas,
    pub cache: LocalCache,
    /// The input roots' `Directory` messages already fetched.
    pub dirs: DirCache,
    pub work_dir: PathBuf,
    pub fence: Fence,
    pub bot_id: String,
    /// Used when the action sets no timeout (and the cap on the one it sets).
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    /// Clean workspaces (`actions/wN`) ready for the next action, and the next N.
    pub workspaces: Mutex<Vec<PathBuf>>,
    pub next_workspace: AtomicU64,
}

/// What a lease ends with: a status (OK even when the command failed) and a result.
pub struct Outcome {
    pub status: Status,
    pub result: Option<re::ActionResult>,
    /// The command's own run time (for the worker's overhead figure).
    pub run_time: Duration,
    /// The action's waits on the CAS server (its CAS and ByteStream calls).
    pub cas_wait: Wait,
    /// When the action's task began, and when the outcome was whole (the start of its wait
    /// to be reported).
    pub started: Instant,
    pub ready: Instant,
}

pub fn timestamp(t: SystemTime) -> Timestamp {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    Timestamp { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 }
}

fn status(code: tonic::Code, message: impl Into<String>) -> Status {
    Status { code: code as i32, message: message.into(), details: Vec::new() }
}

/// A failure of the worker (not of the command).
enum Fail {
    Cas(CasError),
    Internal(String),
    Invalid(String),
}

impl From<CasError> for Fail {
    fn from(e: CasError) -> Fail {
        Fail::Cas(e)
    }
}

impl Fail {
    fn into_status(self) -> Status {
        match self {
            Fail::Cas(CasError::Missing(digests)) => {
                let names: Vec<String> = digests.iter().map(digest_name).collect();
                let details = PreconditionFailure {
                    violations: digests
                        .iter()
                        .map(|d| Violation {
                            r#type: "MISSING".into(),
                            subject: format!("blobs/{}", digest_name(d)),
                            description: "input blob not in the CAS".into(),
                        })
                        .collect(),
                };
                Status {
                    code: tonic::Code::FailedPrecondition as i32,
                    message: format!("missing input blob(s): {}", names.join(", ")),
                    details: vec![proto::pack("google.rpc.PreconditionFailure", &details)],
                }
            }
            Fail::Cas(CasError::Rpc(s)) => {
                // Retryable by the scheduler: the job goes to a worker again.
                status(tonic::Code::Unavailable, format!("CAS: {}: {}", s.code(), s.message()))
            }
            Fail::Cas(e) => status(tonic::Code::Internal, e.to_string()),
            Fail::Internal(m) => status(tonic::Code::Internal, m),
            Fail::Invalid(m) => status(tonic::Code::InvalidArgument, m),
        }
    }
}

/// An action's directory, `actions/wN` under the work directory: `root` (the input root)
/// and `io` (stdout, stderr). Reused from action to action: one that ends is cleaned (the
/// input root emptied and its mode reset, stdout and stderr truncated) after its result has
/// been sent, and goes back to the pool, so that an action does not create and delete these
/// inodes every time (on ext4 without a journal, each new inode is searched for past the
/// recently deleted ones: that took ~40 % of the worker's CPU in `spawnkit bench worker`).
/// One dropped without [`release`](Workspace::release) (a cancelled or returned lease, whose
/// command may still be dying) is removed whole and never reused. Only the pid fence makes
/// reuse safe (every process of the action is dead once its pid 1 is reaped); without it a
/// process that left the action's group could still write into the directory or stdout, so
/// each workspace is removed after its action, as before.
pub struct Workspace {
    dir: PathBuf,
    exec: Arc<Executor>,
    released: bool,
}

impl Workspace {
    /// Clean the directory and give it back to the pool; if it cannot be cleaned, it is
    /// removed instead.
    pub fn release(mut self) {
        if !self.exec.fence.private_pid {
            return;
        }
        let root = self.dir.join("root");
        let io = self.dir.join("io");
        let truncate =
            |p: PathBuf| match std::fs::OpenOptions::new().write(true).truncate(true).open(&p) {
                Ok(_) => true,
                Err(e) => e.kind() == std::io::ErrorKind::NotFound,
            };
        let clean = empty_dir(&root)
            && (!root.exists()
                || std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).is_ok())
            && truncate(io.join("stdout"))
            && truncate(io.join("stderr"));
        if clean {
            self.released = true;
            self.exec.workspaces.lock().unwrap().push(std::mem::take(&mut self.dir));
        }
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if !self.released {
            remove_tree(&self.dir);
        }
    }
}

/// Remove everything inside `dir` (which may be missing); whether it is empty now.
fn empty_dir(dir: &Path) -> bool {
    let Ok(rd) = std::fs::read_dir(dir) else { return !dir.exists() };
    for e in rd.flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&p);
        } else {
            let _ = std::fs::remove_file(&p);
        }
    }
    std::fs::read_dir(dir).is_ok_and(|mut rd| rd.next().is_none())
}

/// Outputs (stdout and stderr included) up to this many bytes in all are hashed on the
/// action's task; larger ones, or any output directory, on tokio's blocking pool.
const INLINE_OUTPUTS: u64 = 64 << 10;

/// Remove a directory tree, making directories writable first where the action took that away.
pub fn remove_tree(dir: &Path) {
    if std::fs::remove_dir_all(dir).is_ok() || !dir.exists() {
        return;
    }
    fn chmod_dirs(p: &Path) {
        if let Ok(m) = std::fs::symlink_metadata(p) {
            if m.is_dir() {
                let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700));
                if let Ok(rd) = std::fs::read_dir(p) {
                    for e in rd.flatten() {
                        chmod_dirs(&e.path());
                    }
                }
            }
        }
    }
    chmod_dirs(dir);
    let _ = std::fs::remove_dir_all(dir);
}

/// A relative path inside the input root, refusing `..`, absolute paths and empty names.
fn safe_rel(p: &str, what: &str) -> Result<PathBuf, Fail> {
    let path = Path::new(p);
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return Err(Fail::Invalid(format!("{what} {p:?} leaves the input root"))),
        }
    }
    Ok(out)
}

fn safe_name(n: &str) -> Result<&str, Fail> {
    if n.is_empty() || n == "." || n == ".." || n.contains('/') || n.contains('\0') {
        return Err(Fail::Invalid(format!("invalid name in a Directory: {n:?}")));
    }
    Ok(n)
}

impl Executor {
    /// Run the action of a lease payload to the end. Never fails: a failure of the worker
    /// is a status.
    /// The action's [`Workspace`] comes back with the outcome: release it once the outcome
    /// has been sent.
    pub async fn run(self: &Arc<Self>, payload: Option<Any>) -> (Outcome, Workspace) {
        let started = Instant::now();
        let start = SystemTime::now();
        let mut meta = re::ExecutedActionMetadata {
            worker: self.bot_id.clone(),
            worker_start_timestamp: Some(timestamp(start)),
            ..Default::default()
        };
        let ws = self.workspace();
        let mut run_time = Duration::ZERO;
        let (r, cas_wait) =
            count_waits(self.run_inner(payload, &ws.dir, &mut meta, &mut run_time)).await;
        let out = match r {
            Ok((st, mut result)) => {
                let mut m = meta;
                m.worker_completed_timestamp = Some(timestamp(SystemTime::now()));
                result.execution_metadata = Some(m);
                let ready = Instant::now();
                Outcome { status: st, result: Some(result), run_time, cas_wait, started, ready }
            }
            Err(f) => Outcome {
                status: f.into_status(),
                result: None,
                run_time,
                cas_wait,
                started,
                ready: Instant::now(),
            },
        };
        (out, ws)
    }

    /// A clean workspace from the pool, or a new one.
    fn workspace(self: &Arc<Self>) -> Workspace {
        let reused = self.workspaces.lock().unwrap().pop();
        let dir = reused.unwrap_or_else(|| {
            let n = self.next_workspace.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.work_dir.join("actions").join(format!("w{n}"))
        });
        Workspace { dir, exec: self.clone(), released: false }
    }

    async fn run_inner(
        self: &Arc<Self>,
        payload: Option<Any>,
        dir: &Path,
        meta: &mut re::ExecutedActionMetadata,
        run_time: &mut Duration,
    ) -> Result<(Status, re::ActionResult), Fail> {
        meta.input_fetch_start_timestamp = Some(timestamp(SystemTime::now()));
        let payload = payload.ok_or_else(|| Fail::Invalid("the lease has no payload".into()))?;
        let action: re::Action = match proto::type_name(&payload) {
            "build.bazel.remote.execution.v2.Action" => {
                re::Action::decode(payload.value.as_slice())
                    .map_err(|e| Fail::Invalid(format!("the lease's Action does not parse: {e}")))?
            }
            "build.bazel.remote.execution.v2.Digest" => {
                let d = re::Digest::decode(payload.value.as_slice()).map_err(|e| {
                    Fail::Invalid(format!("the lease's Digest does not parse: {e}"))
                })?;
                self.cas.get_message(&d).await?
            }
            other => return Err(Fail::Invalid(format!("unknown lease payload type {other:?}"))),
        };
        let cmd_digest = action
            .command_digest
            .clone()
            .ok_or_else(|| Fail::Invalid("the Action has no command_digest".into()))?;
        // The Command and, unless cached, the input root's top Directory: one BatchReadBlobs.
        let mut want = vec![cmd_digest.clone()];
        let root_digest = action.input_root_digest.clone().filter(|d| d.size_bytes > 0);
        let mut fetched_root = None;
        if let Some(d) = root_digest.as_ref().filter(|d| self.dirs.get(d).is_none()) {
            if d.hash != cmd_digest.hash {
                want.push(d.clone());
            }
        }
        let mut got = self.cas.read_blobs(&want).await?;
        if let Some(d) = want.get(1) {
            fetched_root = got.remove(&d.hash).map(|data| (d.clone(), data));
        }
        let data = got.remove(&cmd_digest.hash).unwrap_or_default();
        let command = re::Command::decode(data.as_slice()).map_err(|e| {
            Fail::Cas(CasError::Corrupt(format!(
                "blob {} does not parse: {e}",
                digest_name(&cmd_digest)
            )))
        })?;
        if command.arguments.is_empty() {
            return Err(Fail::Invalid("the Command has no arguments".into()));
        }

        // The input root.
        // A workspace from the pool has them already, empty.
        let root = dir.join("root");
        std::fs::create_dir_all(&root)
            .map_err(|e| Fail::Internal(format!("mkdir {root:?}: {e}")))?;
        let out_dir = dir.join("io");
        std::fs::create_dir_all(&out_dir)
            .map_err(|e| Fail::Internal(format!("mkdir {out_dir:?}: {e}")))?;
        if let Some(d) = &action.input_root_digest {
            self.materialize(d, fetched_root, &root).await?;
        }
        let workdir_rel = safe_rel(&command.working_directory, "working_directory")?;
        let workdir = root.join(&workdir_rel);
        std::fs::create_dir_all(&workdir)
            .map_err(|e| Fail::Internal(format!("mkdir {workdir:?}: {e}")))?;
        let (outputs, legacy_files) = output_list(&command);
        for (p, _) in &outputs {
            let rel = safe_rel(p, "output path")?;
            if let Some(parent) = workdir.join(rel).parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| Fail::Internal(format!("mkdir {parent:?}: {e}")))?;
            }
        }
        if let Some(uid) = self.fence.uid {
            chown_dirs(&root, uid, self.fence.gid.unwrap_or(uid))
                .map_err(|e| Fail::Internal(format!("chown the input root: {e}")))?;
        }
        meta.input_fetch_completed_timestamp = Some(timestamp(SystemTime::now()));

        // Run.
        let network = platform_value(&action, &command, "network").is_some_and(|v| v == "on");
        let timeout = match action.timeout.as_ref() {
            Some(t) if t.seconds > 0 || t.nanos > 0 => {
                Duration::new(t.seconds.max(0) as u64, t.nanos.max(0) as u32).min(self.max_timeout)
            }
            _ => self.default_timeout,
        };
        let stdout_path = out_dir.join("stdout");
        let stderr_path = out_dir.join("stderr");
        let mut c = spawnkit::Command::new(&command.arguments[0]);
        c.args(&command.arguments[1..])
            .env_clear()
            .envs(command.environment_variables.iter().map(|v| (&v.name, &v.value)))
            .current_dir(&workdir)
            .stdin(Stdio::Null)
            .kill_on_drop(true)
            .parent_death_signal(spawnkit::Signal::new(libc::SIGKILL).expect("SIGKILL"))
            .process_group(0);
        let open = |p: &Path| {
            std::fs::File::create(p).map_err(|e| Fail::Internal(format!("create {p:?}: {e}")))
        };
        c.stdout(Stdio::File(open(&stdout_path)?)).stderr(Stdio::File(open(&stderr_path)?));
        let f = &self.fence;
        if f.private_net && !network {
            c.private_network(true);
        }
        if f.private_tmp {
            c.private_tmp(None, TmpOptions::default());
        }
        if f.private_pid {
            c.unshare(Namespaces::PID);
        }
        if let Some(uid) = f.uid {
            c.uid(uid).gid(f.gid.unwrap_or(uid)).groups([]);
        }
        for r in &f.rlimits {
            c.rlimit(r.resource(), r.soft(), r.hard());
        }
        meta.execution_start_timestamp = Some(timestamp(SystemTime::now()));
        let t0 = Instant::now();
        let mut exit_code;
        let mut st = status(tonic::Code::Ok, "");
        // The spawn is a clone-vfork: its thread is blocked until the child's exec (~1 ms
        // with the fence's namespaces), so it runs on tokio's blocking pool, not on a runtime
        // thread that other actions' tasks and the bot sessions share.
        let private_pid = f.private_pid;
        let spawned = tokio::task::spawn_blocking(move || {
            let child = c.spawn()?;
            // In a pid namespace the kernel kills everything inside when pid 1 dies; without
            // one, the process group is what the command's children share. Made here, so
            // that an action cancelled during the spawn still ends its group (the child
            // itself goes with kill_on_drop).
            let killer = GroupKiller(if private_pid { 0 } else { child.id() as i32 });
            Ok::<_, spawnkit::Error>((child, killer))
        })
        .await
        .map_err(|e| Fail::Internal(format!("spawn task: {e}")))?;
        match spawned {
            Err(e) if e.step() == "execve" || e.kind() == spawnkit::ErrorKind::NotFound => {
                // The command could not start: a result, as a shell reports it.
                exit_code = e.exit_code();
                let _ = std::fs::write(&stderr_path, format!("spawnkit worker: {e}\n"));
            }
            Err(e) => return Err(Fail::Internal(format!("spawn: {e}"))),
            Ok((child, killer)) => {
                let mut child = spawnkit::tokio::Child::new(child)
                    .map_err(|e| Fail::Internal(format!("spawn: {e}")))?;
                let pgid = child.id().unwrap_or(0) as i32;
                match tokio::time::timeout(timeout, child.wait()).await {
                    Ok(Ok(s)) => exit_code = exit_code_of(s),
                    Ok(Err(e)) => return Err(Fail::Internal(format!("wait: {e}"))),
                    Err(_) => {
                        // Not reaped yet: the group id is still the command's.
                        GroupKiller(pgid).kill();
                        let _ = child.start_kill();
                        let s = child.wait().await;
                        exit_code = s.map(exit_code_of).unwrap_or(137);
                        st = status(
                            tonic::Code::DeadlineExceeded,
                            format!(
                                "the action ran past its timeout of {timeout:?} and was killed"
                            ),
                        );
                    }
                }
                // Anything the command left in its process group goes too.
                drop(killer);
            }
        }
        *run_time = t0.elapsed();
        meta.execution_completed_timestamp = Some(timestamp(SystemTime::now()));
        if exit_code == 0 && st.code != 0 {
            exit_code = 137;
        }

        // Outputs.
        meta.output_upload_start_timestamp = Some(timestamp(SystemTime::now()));
        let mut result = re::ActionResult { exit_code, ..Default::default() };
        let outputs_small = outputs_size(&workdir, &outputs, [&stdout_path, &stderr_path])
            .is_some_and(|n| n <= INLINE_OUTPUTS);
        let mut blobs = Vec::new();
        let this = self.clone();
        let workdir2 = workdir.clone();
        let collect = move || {
            let mut result = result;
            for (p, is_dir) in &outputs {
                this.collect_output(&workdir2, p, *is_dir, legacy_files, &mut result, &mut blobs)?;
            }
            for (path, slot) in [(&stdout_path, 0), (&stderr_path, 1)] {
                let d = digest_file(path).map_err(io_err(format!("hash {path:?}")))?;
                if d.size_bytes > 0 {
                    blobs.push((d.clone(), Blob::File(path.clone())));
                    if slot == 0 {
                        result.stdout_digest = Some(d);
                    } else {
                        result.stderr_digest = Some(d);
                    }
                }
            }
            Ok::<_, CasError>((result, blobs))
        };
        // Small outputs are hashed here: a hop to the blocking pool and back costs more (two
        // thread wake-ups, each a wait for a CPU on a loaded node) than hashing 64 KiB.
        let (result_filled, blobs_filled) = if outputs_small {
            collect()?
        } else {
            tokio::task::spawn_blocking(collect)
                .await
                .map_err(|e| Fail::Internal(format!("output task: {e}")))??
        };
        result = result_filled;
        self.cas.upload(blobs_filled).await?;
        meta.output_upload_completed_timestamp = Some(timestamp(SystemTime::now()));
        Ok((st, result))
    }

    /// Fetch the input root's directories (those not in the Directory cache, one level per
    /// BatchReadBlobs; `fetched`: the root's bytes when they came with the Command), then its
    /// files (hard links from the content cache).
    async fn materialize(
        &self,
        root_digest: &re::Digest,
        fetched: Option<(re::Digest, Vec<u8>)>,
        root: &Path,
    ) -> Result<(), Fail> {
        let parse = |d: &re::Digest, data: &[u8]| {
            re::Directory::decode(data).map(Arc::new).map_err(|e| {
                Fail::Cas(CasError::Corrupt(format!(
                    "Directory {} does not parse: {e}",
                    digest_name(d)
                )))
            })
        };
        let mut dirs: HashMap<String, Arc<re::Directory>> = HashMap::new();
        let mut level = vec![root_digest.clone()];
        let mut given = fetched;
        while !level.is_empty() {
            let mut found = Vec::new();
            let mut wanted = Vec::new();
            for d in level {
                if let Some(dir) = self.dirs.get(&d) {
                    found.push((d, dir));
                } else if let Some((_, data)) = given.take().filter(|(g, _)| g.hash == d.hash) {
                    let dir = parse(&d, &data)?;
                    self.dirs.insert(&d, dir.clone());
                    found.push((d, dir));
                } else {
                    wanted.push(d);
                }
            }
            if !wanted.is_empty() {
                let got = self.cas.read_blobs(&wanted).await?;
                for d in wanted {
                    let dir = parse(&d, got.get(&d.hash).map(Vec::as_slice).unwrap_or_default())?;
                    self.dirs.insert(&d, dir.clone());
                    found.push((d, dir));
                }
            }
            let mut next = Vec::new();
            for (d, dir) in found {
                for sub in &dir.directories {
                    if let Some(sd) = &sub.digest {
                        if !dirs.contains_key(&sd.hash) {
                            next.push(sd.clone());
                        }
                    }
                }
                dirs.insert(d.hash, dir);
            }
            next.sort_by(|a, b| a.hash.cmp(&b.hash));
            next.dedup();
            level = next;
        }
        // Lay out the tree; collect files.
        let mut files: Vec<(PathBuf, re::Digest, bool)> = Vec::new();
        let mut stack = vec![(root_digest.hash.clone(), root.to_path_buf())];
        while let Some((hash, path)) = stack.pop() {
            let dir = &dirs[&hash];
            for f in &dir.files {
                let p = path.join(safe_name(&f.name)?);
                let d = f.digest.clone().unwrap_or_default();
                files.push((p, d, f.is_executable));
            }
            for s in &dir.symlinks {
                let p = path.join(safe_name(&s.name)?);
                std::os::unix::fs::symlink(&s.target, &p)
                    .map_err(|e| Fail::Internal(format!("symlink {p:?}: {e}")))?;
            }
            for sub in &dir.directories {
                let p = path.join(safe_name(&sub.name)?);
                std::fs::create_dir(&p).map_err(|e| Fail::Internal(format!("mkdir {p:?}: {e}")))?;
                let h = sub.digest.as_ref().map(|d| d.hash.clone()).unwrap_or_default();
                if !dirs.contains_key(&h) {
                    return Err(Fail::Internal(format!("Directory {h} was not fetched")));
                }
                stack.push((h, p));
            }
        }
        // Files: from the cache where present, small missing ones in batches, large streamed.
        let mut small = Vec::new();
        let mut large = Vec::new();
        for (p, d, x) in files {
            if d.size_bytes == 0 {
                self.cache.materialize_bytes(&d, x, &[], &p)?;
            } else if self.cache.has(&d, x) {
                if self.cache.materialize(&self.cas, &d, x, &p).await.is_err() {
                    // Evicted meanwhile: fetch again.
                    small.push((p, d, x));
                }
            } else if d.size_bytes as usize <= 1 << 20 {
                small.push((p, d, x));
            } else {
                large.push((p, d, x));
            }
        }
        if !small.is_empty() {
            let digests: Vec<re::Digest> = small.iter().map(|(_, d, _)| d.clone()).collect();
            let got = self.cas.read_blobs(&digests).await?;
            for (p, d, x) in &small {
                let data = got.get(&d.hash).map(Vec::as_slice).unwrap_or_default();
                self.cache.materialize_bytes(d, *x, data, p)?;
            }
        }
        let mut missing = Vec::new();
        for (p, d, x) in &large {
            match self.cache.materialize(&self.cas, d, *x, p).await {
                Err(CasError::Missing(m)) => missing.extend(m),
                r => r?,
            }
        }
        if !missing.is_empty() {
            return Err(Fail::Cas(CasError::Missing(missing)));
        }
        Ok(())
    }

    // The legacy output fields are what older clients (bgd among them) still send and read.
    #[allow(deprecated)]
    fn collect_output(
        &self,
        workdir: &Path,
        p: &str,
        is_dir: bool,
        legacy_files: bool,
        result: &mut re::ActionResult,
        blobs: &mut Vec<(re::Digest, Blob)>,
    ) -> Result<(), CasError> {
        let full = workdir.join(p);
        let Ok(m) = std::fs::symlink_metadata(&full) else { return Ok(()) };
        if m.file_type().is_symlink() {
            let target = std::fs::read_link(&full).map_err(io_err(format!("readlink {full:?}")))?;
            let s = re::OutputSymlink {
                path: p.to_owned(),
                target: target.to_string_lossy().into_owned(),
                ..Default::default()
            };
            if legacy_files {
                if is_dir {
                    result.output_directory_symlinks.push(s.clone());
                } else {
                    result.output_file_symlinks.push(s.clone());
                }
            }
            result.output_symlinks.push(s);
        } else if m.is_dir() {
            let mut children = Vec::new();
            let root = tree_dir(&full, &mut children, blobs)?;
            let tree = re::Tree { root: Some(root), children };
            let bytes = tree.encode_to_vec();
            let d = digest_of(&bytes);
            blobs.push((d.clone(), Blob::Bytes(bytes)));
            result.output_directories.push(re::OutputDirectory {
                path: p.to_owned(),
                tree_digest: Some(d),
                ..Default::default()
            });
        } else if m.is_file() {
            let d = digest_file(&full).map_err(io_err(format!("hash {full:?}")))?;
            blobs.push((d.clone(), Blob::File(full)));
            result.output_files.push(re::OutputFile {
                path: p.to_owned(),
                digest: Some(d),
                is_executable: m.mode() & 0o111 != 0,
                ..Default::default()
            });
        }
        Ok(())
    }
}

/// One directory of an output tree (names sorted, as REAPI wants), its subdirectories added
/// to `children` (each once), its files to `blobs`.
fn tree_dir(
    dir: &Path,
    children: &mut Vec<re::Directory>,
    blobs: &mut Vec<(re::Digest, Blob)>,
) -> Result<re::Directory, CasError> {
    let mut out = re::Directory::default();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(io_err(format!("read {dir:?}")))?
        .collect::<Result<_, _>>()
        .map_err(io_err(format!("read {dir:?}")))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        let m = std::fs::symlink_metadata(&path).map_err(io_err(format!("stat {path:?}")))?;
        if m.file_type().is_symlink() {
            let t = std::fs::read_link(&path).map_err(io_err(format!("readlink {path:?}")))?;
            out.symlinks.push(re::SymlinkNode {
                name,
                target: t.to_string_lossy().into_owned(),
                ..Default::default()
            });
        } else if m.is_dir() {
            let sub = tree_dir(&path, children, blobs)?;
            let d = digest_of(&sub.encode_to_vec());
            if !children.contains(&sub) {
                children.push(sub);
            }
            out.directories.push(re::DirectoryNode { name, digest: Some(d) });
        } else if m.is_file() {
            let d = digest_file(&path).map_err(io_err(format!("hash {path:?}")))?;
            blobs.push((d.clone(), Blob::File(path)));
            out.files.push(re::FileNode {
                name,
                digest: Some(d),
                is_executable: m.mode() & 0o111 != 0,
                ..Default::default()
            });
        }
    }
    Ok(out)
}

/// The outputs to collect: (path relative to the working directory, declared a directory),
/// and whether they came from the legacy `output_files`/`output_directories` fields.
#[allow(deprecated)]
fn output_list(command: &re::Command) -> (Vec<(String, bool)>, bool) {
    if !command.output_paths.is_empty() {
        return (command.output_paths.iter().map(|p| (p.clone(), false)).collect(), false);
    }
    let mut v: Vec<(String, bool)> =
        command.output_files.iter().map(|p| (p.clone(), false)).collect();
    v.extend(command.output_directories.iter().map(|p| (p.clone(), true)));
    (v, true)
}

/// A platform property of the action (v2.2 `Action.platform`) or else of the command.
#[allow(deprecated)]
fn platform_value<'a>(
    action: &'a re::Action,
    command: &'a re::Command,
    key: &str,
) -> Option<&'a str> {
    let find = |p: &'a Option<re::Platform>| {
        p.as_ref()?.properties.iter().find(|x| x.name == key).map(|x| x.value.as_str())
    };
    find(&action.platform).or_else(|| find(&command.platform))
}

fn exit_code_of(s: spawnkit::ExitStatus) -> i32 {
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

/// SIGKILLs a process group when asked or dropped (the action's group: the command and
/// whatever it started that stayed in the group).
struct GroupKiller(i32);

impl GroupKiller {
    fn kill(&self) {
        // The group the command leads (process_group(0)). Before the leader is reaped the id
        // cannot be reused; after, only by a wrap of the pid space between the reap and this.
        // 0 (a pid namespace ends everything itself) is refused by the call: nothing to do.
        let _ = spawnkit::process::kill_process_group(self.0, libc::SIGKILL);
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

fn chown_dirs(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            chown_dirs(&e.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// The bytes of the outputs and of stdout and stderr, if none of them is a directory (a tree
/// is not sized here: `None`).
fn outputs_size(workdir: &Path, outputs: &[(String, bool)], io: [&Path; 2]) -> Option<u64> {
    let mut total = 0;
    for p in outputs.iter().map(|(p, _)| workdir.join(p)).chain(io.iter().map(|p| p.to_path_buf()))
    {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => return None,
            Ok(m) if m.is_file() => total += m.len(),
            _ => {}
        }
    }
    Some(total)
}
