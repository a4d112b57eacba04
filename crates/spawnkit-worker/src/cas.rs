//! The REAPI ContentAddressableStorage and ByteStream services as the worker uses them:
//! small blobs in batches, large ones streamed, and a local content cache on disk whose files
//! are hard-linked into input roots.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use bazel_remote_apis::google::bytestream::{self as bs, byte_stream_client::ByteStreamClient};
use prost::Message;
use re::content_addressable_storage_client::ContentAddressableStorageClient;
use sha2::{Digest as _, Sha256};
use tokio_stream::StreamExt;
use tonic::transport::Channel;

use crate::auth::Auth;

/// Blobs up to this size travel in BatchReadBlobs/BatchUpdateBlobs (and a batch up to this
/// total); larger ones through ByteStream, in chunks of `CHUNK`.
const BATCH_LIMIT: usize = 2 << 20;
const CHUNK: usize = 1 << 20;

/// One action's waits on the CAS server: the wall time of each of its CAS and ByteStream
/// calls, summed (an action makes them one after another), and how many there were.
#[derive(Debug, Default, Clone, Copy)]
pub struct Wait {
    pub time: Duration,
    pub calls: u32,
}

tokio::task_local! {
    /// The current action's [`Wait`]; calls made outside [`count_waits`] are not counted.
    static WAIT: Cell<Wait>;
}

/// Run `f` (one action), counting its CAS calls; its output and their [`Wait`].
pub async fn count_waits<F: Future>(f: F) -> (F::Output, Wait) {
    WAIT.scope(Cell::new(Wait::default()), async move {
        let out = f.await;
        (out, WAIT.with(Cell::get))
    })
    .await
}

/// Count one call that started at `t0` and has just ended.
fn waited(t0: Instant) {
    let _ = WAIT.try_with(|w| {
        let mut v = w.get();
        v.time += t0.elapsed();
        v.calls += 1;
        w.set(v);
    });
}

/// How long a CAS call refused for the moment is tried again.
const RETRY_FOR: Duration = Duration::from_secs(60);

/// Make a unary CAS call (counted as a wait), and again while the server refuses it for the
/// moment (UNAVAILABLE, or UNKNOWN: a connection broken mid-call), for up to [`RETRY_FOR`]:
/// a server restart must not cost an action its result, since an action reported
/// UNAVAILABLE after its command ran would run again elsewhere.
async fn retrying<T, F, Fut>(mut call: F) -> Result<T, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>>,
{
    let deadline = Instant::now() + RETRY_FOR;
    let mut backoff = Duration::from_millis(100);
    loop {
        let t0 = Instant::now();
        let r = call().await;
        waited(t0);
        match r {
            Err(s)
                if matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown)
                    && Instant::now() + backoff < deadline =>
            {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            r => return r,
        }
    }
}

/// What went wrong talking to the CAS, kept apart so a missing input can be reported as
/// `FAILED_PRECONDITION` naming the digest.
#[derive(Debug)]
pub enum CasError {
    /// These blobs are not in the CAS.
    Missing(Vec<re::Digest>),
    /// The server or the connection failed (retryable by the scheduler).
    Rpc(tonic::Status),
    /// A local file system error, with what was being done.
    Io(String),
    /// The server sent bytes that do not match the digest, or a message that does not parse.
    Corrupt(String),
}

impl std::fmt::Display for CasError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CasError::Missing(d) => {
                let names: Vec<String> = d.iter().map(digest_name).collect();
                write!(f, "missing from the CAS: {}", names.join(", "))
            }
            CasError::Rpc(s) => write!(f, "CAS: {}: {}", s.code(), s.message()),
            CasError::Io(m) | CasError::Corrupt(m) => f.write_str(m),
        }
    }
}

impl From<tonic::Status> for CasError {
    fn from(s: tonic::Status) -> CasError {
        CasError::Rpc(s)
    }
}

pub fn io_err(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> CasError {
    move |e| CasError::Io(format!("{what}: {e}"))
}

/// `hash/size`, as REAPI names a blob.
pub fn digest_name(d: &re::Digest) -> String {
    format!("{}/{}", d.hash, d.size_bytes)
}

/// The SHA-256 digest of bytes.
pub fn digest_of(data: &[u8]) -> re::Digest {
    re::Digest { hash: hex(&Sha256::digest(data)), size_bytes: data.len() as i64 }
}

/// The SHA-256 digest of a file, read in chunks.
pub fn digest_file(path: &Path) -> std::io::Result<re::Digest> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut size = 0i64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        size += n as i64;
        h.update(&buf[..n]);
    }
    Ok(re::Digest { hash: hex(&h.finalize()), size_bytes: size })
}

fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
    s
}

fn valid_hash(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Something to upload: bytes in memory or a file on disk.
#[derive(Debug, Clone)]
pub enum Blob {
    Bytes(Vec<u8>),
    File(PathBuf),
}

/// The CAS and ByteStream clients of one instance.
#[derive(Clone)]
pub struct Cas {
    cas: ContentAddressableStorageClient<Channel>,
    bytestream: ByteStreamClient<Channel>,
    instance: String,
    auth: Auth,
}

impl Cas {
    pub fn new(channel: Channel, instance: &str, auth: Auth) -> Cas {
        const MAX: usize = 64 << 20;
        Cas {
            cas: ContentAddressableStorageClient::new(channel.clone())
                .max_decoding_message_size(MAX)
                .max_encoding_message_size(MAX),
            bytestream: ByteStreamClient::new(channel)
                .max_decoding_message_size(MAX)
                .max_encoding_message_size(MAX),
            instance: instance.to_owned(),
            auth,
        }
    }

    fn resource(&self, tail: String) -> String {
        if self.instance.is_empty() {
            tail
        } else {
            format!("{}/{tail}", self.instance)
        }
    }

    /// Read blobs into memory (for Action, Command, Directory messages and small files).
    pub async fn read_blobs(
        &self,
        digests: &[re::Digest],
    ) -> Result<HashMap<String, Vec<u8>>, CasError> {
        let mut out = HashMap::new();
        let mut missing = Vec::new();
        let mut batch: Vec<re::Digest> = Vec::new();
        let mut batch_size = 0usize;
        let mut seen = HashSet::new();
        let mut large = Vec::new();
        for d in digests {
            if !valid_hash(&d.hash) || d.size_bytes < 0 {
                return Err(CasError::Corrupt(format!("invalid digest {}", digest_name(d))));
            }
            if !seen.insert(d.hash.clone()) {
                continue;
            }
            if d.size_bytes == 0 {
                out.insert(d.hash.clone(), Vec::new());
                continue;
            }
            let size = d.size_bytes as usize;
            if size > BATCH_LIMIT / 2 {
                large.push(d.clone());
                continue;
            }
            if batch_size + size > BATCH_LIMIT {
                self.read_batch(std::mem::take(&mut batch), &mut out, &mut missing).await?;
                batch_size = 0;
            }
            batch_size += size;
            batch.push(d.clone());
        }
        if !batch.is_empty() {
            self.read_batch(batch, &mut out, &mut missing).await?;
        }
        for d in large {
            let mut data = Vec::with_capacity(d.size_bytes as usize);
            match self.read_stream(&d, &mut data).await {
                Ok(()) => {
                    out.insert(d.hash.clone(), data);
                }
                Err(CasError::Missing(m)) => missing.extend(m),
                Err(e) => return Err(e),
            }
        }
        if !missing.is_empty() {
            return Err(CasError::Missing(missing));
        }
        Ok(out)
    }

    async fn read_batch(
        &self,
        digests: Vec<re::Digest>,
        out: &mut HashMap<String, Vec<u8>>,
        missing: &mut Vec<re::Digest>,
    ) -> Result<(), CasError> {
        let req = re::BatchReadBlobsRequest {
            instance_name: self.instance.clone(),
            digests,
            ..Default::default()
        };
        let resp = retrying(|| {
            let mut c = self.cas.clone();
            let r = self.auth.request(req.clone());
            async move { c.batch_read_blobs(r).await }
        })
        .await;
        let resp = resp?.into_inner();
        for r in resp.responses {
            let d = r.digest.unwrap_or_default();
            let code = r.status.as_ref().map_or(0, |s| s.code);
            if code == tonic::Code::NotFound as i32 {
                missing.push(d);
                continue;
            }
            if code != 0 {
                let msg = r.status.map(|s| s.message).unwrap_or_default();
                return Err(CasError::Rpc(tonic::Status::new(tonic::Code::from(code), msg)));
            }
            if digest_of(&r.data) != d {
                return Err(CasError::Corrupt(format!(
                    "the CAS sent bytes that do not match {}",
                    digest_name(&d)
                )));
            }
            out.insert(d.hash, r.data);
        }
        Ok(())
    }

    /// Stream one blob through ByteStream Read into `sink`, checking its digest. The call's
    /// wait is the whole stream's (writing to `sink` included).
    async fn read_stream(&self, d: &re::Digest, sink: &mut impl Write) -> Result<(), CasError> {
        let t0 = Instant::now();
        let r = self.read_stream_uncounted(d, sink).await;
        waited(t0);
        r
    }

    async fn read_stream_uncounted(
        &self,
        d: &re::Digest,
        sink: &mut impl Write,
    ) -> Result<(), CasError> {
        let req = bs::ReadRequest {
            resource_name: self.resource(format!("blobs/{}/{}", d.hash, d.size_bytes)),
            read_offset: 0,
            read_limit: 0,
        };
        let mut stream = match self.bytestream.clone().read(self.auth.request(req)).await {
            Ok(r) => r.into_inner(),
            Err(s) if s.code() == tonic::Code::NotFound => {
                return Err(CasError::Missing(vec![d.clone()]))
            }
            Err(s) => return Err(s.into()),
        };
        let mut h = Sha256::new();
        let mut size = 0i64;
        while let Some(msg) = stream.next().await {
            let msg = match msg {
                Ok(m) => m,
                Err(s) if s.code() == tonic::Code::NotFound => {
                    return Err(CasError::Missing(vec![d.clone()]))
                }
                Err(s) => return Err(s.into()),
            };
            h.update(&msg.data);
            size += msg.data.len() as i64;
            sink.write_all(&msg.data).map_err(io_err("write a fetched blob"))?;
        }
        let got = re::Digest { hash: hex(&h.finalize()), size_bytes: size };
        if &got != d {
            return Err(CasError::Corrupt(format!(
                "ByteStream sent {} for {}",
                digest_name(&got),
                digest_name(d)
            )));
        }
        Ok(())
    }

    /// Fetch a blob into a file (large inputs, never whole in memory).
    pub async fn fetch_to_file(&self, d: &re::Digest, path: &Path) -> Result<(), CasError> {
        let mut f = std::fs::File::create(path).map_err(io_err(format!("create {path:?}")))?;
        if d.size_bytes as usize > BATCH_LIMIT / 2 {
            return self.read_stream(d, &mut f).await;
        }
        let mut got = self.read_blobs(std::slice::from_ref(d)).await?;
        let data = got.remove(&d.hash).unwrap_or_default();
        f.write_all(&data).map_err(io_err(format!("write {path:?}")))
    }

    /// Upload blobs the CAS does not have yet.
    pub async fn upload(&self, blobs: Vec<(re::Digest, Blob)>) -> Result<(), CasError> {
        let mut unique: HashMap<String, (re::Digest, Blob)> = HashMap::new();
        for (d, b) in blobs {
            if d.size_bytes > 0 {
                unique.entry(d.hash.clone()).or_insert((d, b));
            }
        }
        if unique.is_empty() {
            return Ok(());
        }
        let req = re::FindMissingBlobsRequest {
            instance_name: self.instance.clone(),
            blob_digests: unique.values().map(|(d, _)| d.clone()).collect(),
            ..Default::default()
        };
        let missing = retrying(|| {
            let mut c = self.cas.clone();
            let r = self.auth.request(req.clone());
            async move { c.find_missing_blobs(r).await }
        })
        .await;
        let missing = missing?.into_inner();
        let mut batch = Vec::new();
        let mut batch_size = 0usize;
        for d in missing.missing_blob_digests {
            let Some((d, blob)) = unique.remove(&d.hash) else { continue };
            let size = d.size_bytes as usize;
            if size > BATCH_LIMIT / 2 {
                self.write_stream(&d, &blob).await?;
                continue;
            }
            let data = match blob {
                Blob::Bytes(b) => b,
                Blob::File(p) => std::fs::read(&p).map_err(io_err(format!("read {p:?}")))?,
            };
            if batch_size + size > BATCH_LIMIT {
                self.update_batch(std::mem::take(&mut batch)).await?;
                batch_size = 0;
            }
            batch_size += size;
            batch.push(re::batch_update_blobs_request::Request {
                digest: Some(d),
                data,
                ..Default::default()
            });
        }
        if !batch.is_empty() {
            self.update_batch(batch).await?;
        }
        Ok(())
    }

    async fn update_batch(
        &self,
        requests: Vec<re::batch_update_blobs_request::Request>,
    ) -> Result<(), CasError> {
        let req = re::BatchUpdateBlobsRequest {
            instance_name: self.instance.clone(),
            requests,
            ..Default::default()
        };
        let resp = retrying(|| {
            let mut c = self.cas.clone();
            let r = self.auth.request(req.clone());
            async move { c.batch_update_blobs(r).await }
        })
        .await;
        let resp = resp?.into_inner();
        for r in resp.responses {
            if let Some(s) = r.status.filter(|s| s.code != 0) {
                return Err(CasError::Rpc(tonic::Status::new(
                    tonic::Code::from(s.code),
                    format!("upload {}: {}", digest_name(&r.digest.unwrap_or_default()), s.message),
                )));
            }
        }
        Ok(())
    }

    /// Stream one blob up through ByteStream Write, in chunks, from memory or a file.
    async fn write_stream(&self, d: &re::Digest, blob: &Blob) -> Result<(), CasError> {
        let name = self.resource(format!(
            "uploads/{}/blobs/{}/{}",
            crate::random_id(),
            d.hash,
            d.size_bytes
        ));
        let total = d.size_bytes;
        let (tx, rx) = tokio::sync::mpsc::channel::<bs::WriteRequest>(4);
        let blob = blob.clone();
        let producer = tokio::task::spawn_blocking(move || -> Result<(), CasError> {
            let mut reader: Box<dyn Read> = match &blob {
                Blob::Bytes(b) => Box::new(std::io::Cursor::new(b.clone())),
                Blob::File(p) => {
                    Box::new(std::fs::File::open(p).map_err(io_err(format!("open {p:?}")))?)
                }
            };
            let mut offset = 0i64;
            let mut first = true;
            loop {
                let mut buf = vec![0u8; CHUNK];
                let mut n = 0;
                while n < CHUNK {
                    let got = reader.read(&mut buf[n..]).map_err(io_err("read an output"))?;
                    if got == 0 {
                        break;
                    }
                    n += got;
                }
                buf.truncate(n);
                let finish = offset + n as i64 >= total;
                let msg = bs::WriteRequest {
                    resource_name: if first { name.clone() } else { String::new() },
                    write_offset: offset,
                    finish_write: finish,
                    data: buf,
                };
                first = false;
                offset += n as i64;
                if tx.blocking_send(msg).is_err() || finish {
                    return Ok(());
                }
                if n == 0 {
                    return Err(CasError::Io("an output shrank while it was uploaded".into()));
                }
            }
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        let t0 = Instant::now();
        let resp = self.bytestream.clone().write(self.auth.request(stream)).await;
        waited(t0);
        producer.await.map_err(|e| CasError::Io(format!("upload task: {e}")))??;
        let resp = resp?.into_inner();
        if resp.committed_size != total && resp.committed_size != -1 {
            return Err(CasError::Corrupt(format!(
                "ByteStream committed {} of {} bytes of {}",
                resp.committed_size,
                total,
                digest_name(d)
            )));
        }
        Ok(())
    }

    /// Fetch a message by digest.
    pub async fn get_message<M: Message + Default>(&self, d: &re::Digest) -> Result<M, CasError> {
        let mut got = self.read_blobs(std::slice::from_ref(d)).await?;
        let data = got.remove(&d.hash).unwrap_or_default();
        M::decode(data.as_slice())
            .map_err(|e| CasError::Corrupt(format!("blob {} does not parse: {e}", digest_name(d))))
    }
}

/// Files by digest on local disk, hard-linked into input roots. Two entries per content, one
/// read-only (0444) and one executable (0555), since hard links share their mode. Bounded
/// by size: the least recently used entries go first. Entries are never modified in place:
/// a new one is written under a temporary name and renamed.
pub struct LocalCache {
    dir: PathBuf,
    limit: u64,
    state: Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    /// name -> (size, last use tick)
    entries: HashMap<String, (u64, u64)>,
    total: u64,
    tick: u64,
    /// Whether hard links work from the cache to the work directory (else: copies).
    links_fail: bool,
}

impl LocalCache {
    /// Open (creating) the cache directory and index what is already there.
    pub fn open(dir: PathBuf, limit: u64) -> std::io::Result<LocalCache> {
        std::fs::create_dir_all(&dir)?;
        let mut st = CacheState::default();
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("tmp.") {
                let _ = std::fs::remove_file(e.path());
                continue;
            }
            let size = e.metadata()?.len();
            st.total += size;
            st.entries.insert(name, (size, 0));
        }
        let cache = LocalCache { dir, limit, state: Mutex::new(st) };
        cache.evict("");
        Ok(cache)
    }

    fn name(d: &re::Digest, exec: bool) -> String {
        format!("{}-{}{}", d.hash, d.size_bytes, if exec { "-x" } else { "" })
    }

    /// Put the file of `d` at `dst` (a hard link from the cache, else a copy), fetching it
    /// into the cache first if needed.
    pub async fn materialize(
        &self,
        cas: &Cas,
        d: &re::Digest,
        exec: bool,
        dst: &Path,
    ) -> Result<(), CasError> {
        let name = Self::name(d, exec);
        let src = self.dir.join(&name);
        if !self.touch(&name) {
            let tmp = self.dir.join(format!("tmp.{}", crate::random_id()));
            let other = self.dir.join(Self::name(d, !exec));
            let copied = self.touch(&Self::name(d, !exec)) && std::fs::copy(&other, &tmp).is_ok();
            if !copied {
                if let Err(e) = cas.fetch_to_file(d, &tmp).await {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(e);
                }
            }
            let mode = if exec { 0o555 } else { 0o444 };
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
                .map_err(io_err(format!("chmod {tmp:?}")))?;
            std::fs::rename(&tmp, &src).map_err(io_err(format!("rename into {src:?}")))?;
            self.insert(name, d.size_bytes as u64);
        }
        self.place(&src, dst)
    }

    /// Put bytes already in memory (fetched in a batch) into the cache and at `dst`.
    pub fn materialize_bytes(
        &self,
        d: &re::Digest,
        exec: bool,
        data: &[u8],
        dst: &Path,
    ) -> Result<(), CasError> {
        let name = Self::name(d, exec);
        let src = self.dir.join(&name);
        if !self.touch(&name) {
            let tmp = self.dir.join(format!("tmp.{}", crate::random_id()));
            std::fs::write(&tmp, data).map_err(io_err(format!("write {tmp:?}")))?;
            let mode = if exec { 0o555 } else { 0o444 };
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
                .map_err(io_err(format!("chmod {tmp:?}")))?;
            std::fs::rename(&tmp, &src).map_err(io_err(format!("rename into {src:?}")))?;
            self.insert(name, data.len() as u64);
        }
        self.place(&src, dst)
    }

    /// Whether the entry of `d` is in the cache already.
    pub fn has(&self, d: &re::Digest, exec: bool) -> bool {
        self.touch(&Self::name(d, exec))
    }

    fn place(&self, src: &Path, dst: &Path) -> Result<(), CasError> {
        let try_link = !self.state.lock().unwrap().links_fail;
        if try_link {
            match std::fs::hard_link(src, dst) {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                    self.state.lock().unwrap().links_fail = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !src.exists() => {
                    // Evicted by another action between touch and link: the caller's
                    // next attempt fetches it again; report it as an I/O error here.
                    return Err(CasError::Io(format!("cache entry {src:?} vanished")));
                }
                Err(e) => return Err(CasError::Io(format!("link {src:?} to {dst:?}: {e}"))),
            }
        }
        std::fs::copy(src, dst).map_err(io_err(format!("copy {src:?} to {dst:?}")))?;
        Ok(())
    }

    fn touch(&self, name: &str) -> bool {
        let mut st = self.state.lock().unwrap();
        st.tick += 1;
        let tick = st.tick;
        match st.entries.get_mut(name) {
            Some(e) => {
                e.1 = tick;
                true
            }
            None => false,
        }
    }

    fn insert(&self, name: String, size: u64) {
        let keep = name.clone();
        {
            let mut st = self.state.lock().unwrap();
            st.tick += 1;
            let tick = st.tick;
            if let Some(old) = st.entries.insert(name, (size, tick)) {
                st.total -= old.0;
            }
            st.total += size;
        }
        self.evict(&keep);
    }

    /// Drop least recently used entries until the total fits the limit, never `keep` (the
    /// entry just added, about to be linked: a file larger than the whole cache still
    /// works, and goes at the next insertion). Files already linked into input roots keep
    /// their content (a hard link is a name of its own).
    fn evict(&self, keep: &str) {
        let mut st = self.state.lock().unwrap();
        if st.total <= self.limit {
            return;
        }
        let mut by_age: Vec<(u64, String, u64)> =
            st.entries.iter().map(|(n, (s, t))| (*t, n.clone(), *s)).collect();
        by_age.sort();
        for (_, name, size) in by_age {
            if st.total <= self.limit {
                break;
            }
            if name == keep {
                continue;
            }
            let _ = std::fs::remove_file(self.dir.join(&name));
            st.entries.remove(&name);
            st.total -= size;
        }
    }
}

/// Input-root `Directory` messages by digest, in memory: input roots of one build share most
/// of their directories, and a `Directory` is content-addressed, so once fetched it never
/// needs a round trip again. Bounded by the messages' encoded size; the least recently used
/// go first.
pub struct DirCache {
    limit: u64,
    state: Mutex<DirState>,
}

#[derive(Default)]
struct DirState {
    /// hash -> (the message, its encoded size, last use tick)
    entries: HashMap<String, (std::sync::Arc<re::Directory>, u64, u64)>,
    total: u64,
    tick: u64,
}

impl DirCache {
    pub fn new(limit: u64) -> DirCache {
        DirCache { limit, state: Mutex::new(DirState::default()) }
    }

    /// The cached message of `d`, if any.
    pub fn get(&self, d: &re::Digest) -> Option<std::sync::Arc<re::Directory>> {
        let mut st = self.state.lock().unwrap();
        st.tick += 1;
        let tick = st.tick;
        let e = st.entries.get_mut(&d.hash)?;
        e.2 = tick;
        Some(e.0.clone())
    }

    /// Remember the message of `d` (already checked against its digest).
    pub fn insert(&self, d: &re::Digest, dir: std::sync::Arc<re::Directory>) {
        let size = d.size_bytes.max(0) as u64;
        let mut st = self.state.lock().unwrap();
        st.tick += 1;
        let tick = st.tick;
        if let Some(old) = st.entries.insert(d.hash.clone(), (dir, size, tick)) {
            st.total -= old.1;
        }
        st.total += size;
        if st.total <= self.limit {
            return;
        }
        let mut by_age: Vec<(u64, String)> =
            st.entries.iter().map(|(h, (_, _, t))| (*t, h.clone())).collect();
        by_age.sort();
        for (_, h) in by_age {
            if st.total <= self.limit {
                break;
            }
            if let Some(e) = st.entries.remove(&h) {
                st.total -= e.1;
            }
        }
    }
}
