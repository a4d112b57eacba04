//! Frames of the spawn-server protocol: a fixed 16-byte header (length, version, kind, flags,
//! fd count, request id) and a body of at most [`MAX_BODY`] bytes; the decoder treats every
//! byte and every fd it is handed as hostile (see docs/protocol.md).

use std::collections::VecDeque;
use std::fmt;
use std::os::fd::OwnedFd;

/// The protocol version this build speaks (byte 4 of every header).
pub const VERSION: u8 = 6;
/// Bytes in a frame header.
pub const HEADER_LEN: usize = 16;
/// The largest body a frame may have (4 MiB: room for a command with an environment and
/// arguments at the kernel's usual 2 MiB `ARG_MAX`). A header announcing more is refused
/// before anything is read or allocated for it.
pub const MAX_BODY: usize = 4 << 20;
/// The most fds one frame may carry (the kernel's `SCM_MAX_FD`).
pub const MAX_FDS: usize = 253;
/// The most reads whose fds were lost that an [`Inbox`] follows at once (their frames not
/// read yet); a sender that follows the protocol leaves at most two.
pub const MAX_CUTS: usize = 16;

/// Request flag: also send an [`Kind::Exit`] frame when the child is reaped (for kernels
/// without `PIDFD_INFO_EXIT`).
pub const FLAG_WANT_EXIT: u8 = 1;

/// Request flag: the client reads [`Kind::SpawnedMany`]: the server may answer this request
/// together with others of the same connection that finish at about the same time (one
/// message, one `recvmsg` for the client, however many pidfds).
pub const FLAG_BATCH_REPLY: u8 = 2;

/// Request flag: each command of the request that neither clears its environment nor
/// carries a base environment starts from the connection's (the last [`Kind::Env`] frame):
/// the caller's environment travels once, not in every request.
pub const FLAG_CONN_ENV: u8 = 4;

/// Request flag: spawn and wait (a `status` request). The server keeps the child's pidfd and
/// answers once: an [`Kind::Exit`] frame under the request's id when the child has ended, or
/// an [`Kind::Error`] if it could not start. No Spawned, no pidfd: the caller holds no fd per
/// child and reads no status from one.
pub const FLAG_STATUS: u8 = 8;

/// Request flag, on a [`Kind::SpawnMany`]: each entry names its fds by index into the
/// frame's (its fd count byte followed by that many one-byte indices), so a fd that several
/// entries use (the same stdout for all, the caller's own stdin and stderr) is passed once
/// per frame, not once per entry. Every fd of the frame is named by at least one entry.
pub const FLAG_FD_INDEX: u8 = 16;

/// Bytes per entry of a [`Kind::SpawnedMany`] body: the request id (u64 LE) and the pid
/// (i32 LE).
pub const SPAWNED_ENTRY: usize = 12;

/// The most answers one [`Kind::SpawnedMany`] frame carries.
pub const MAX_BATCH_REPLY: usize = 64;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Server → client, first: a 32-byte nonce.
    Challenge = 1,
    /// Client → server: the client's 32-byte nonce and its 32-byte MAC.
    Answer = 2,
    /// Server → client: the server's 32-byte MAC; requests may follow.
    Welcome = 3,
    /// Server → client: authentication failed (a text reason); the connection closes.
    Failure = 4,
    /// Client → server: a command's wire form (docs/wire.md); its fds beside it.
    Spawn = 16,
    /// Server → client: the child's pid (4 bytes) and its pidfd beside it.
    Spawned = 17,
    /// Server → client: the structured error of a refused or failed spawn.
    Error = 18,
    /// Server → client: the child was reaped; its pid and status (only when asked for).
    Exit = 19,
    /// Client → server: several commands in one frame (entries of a u32 LE length, a u8 fd
    /// count and a command's wire form); request ids `id`, `id + 1`, ...; the fds of every
    /// entry beside it, in order (`nfds` is their sum).
    SpawnMany = 20,
    /// Server → client: several children at once (entries of [`SPAWNED_ENTRY`] bytes: id,
    /// pid), their pidfds beside it in the same order; only to requests flagged
    /// [`FLAG_BATCH_REPLY`].
    SpawnedMany = 21,
    /// Client → server: the connection's environment from now on (an environment's wire
    /// form, docs/wire.md), for the requests flagged [`FLAG_CONN_ENV`]; no fds, no reply.
    Env = 22,
    /// Client → server: a request follows at once; stay awake for it (no body, no fds, no
    /// reply).
    Wake = 23,
    /// Client → the Python zygote (`spawnkit.multiprocessing`): a pickled process to start
    /// in a pooled worker, its fds beside it. The spawn server refuses it.
    Fork = 32,
    /// The Python zygote → its client: idle pooled workers handed over ahead of need, 1 to 64
    /// entries of a pid (u32 LE); beside it two fds per entry, in order: the worker's pidfd
    /// and the worker's end of its private channel (`nfds` = 2 × entries).
    Workers = 33,
    /// Client → the Python zygote: send this many more workers (a u32 LE count); no reply
    /// but the Workers frames.
    Want = 34,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Challenge,
            2 => Kind::Answer,
            3 => Kind::Welcome,
            4 => Kind::Failure,
            16 => Kind::Spawn,
            17 => Kind::Spawned,
            18 => Kind::Error,
            19 => Kind::Exit,
            20 => Kind::SpawnMany,
            21 => Kind::SpawnedMany,
            22 => Kind::Env,
            23 => Kind::Wake,
            32 => Kind::Fork,
            33 => Kind::Workers,
            34 => Kind::Want,
            _ => return None,
        })
    }
}

/// A frame header: `len` (u32 LE, the body's size), `version` (u8), `kind` (u8), `flags`
/// (u8), `nfds` (u8, the fds passed with the frame), `id` (u64 LE, the request it belongs to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub len: u32,
    pub kind: Kind,
    pub flags: u8,
    pub nfds: u8,
    pub id: u64,
}

/// Why bytes were refused; the connection is closed on any of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// Byte 4 is not [`VERSION`].
    Version(u8),
    /// Byte 5 names no kind, or a kind not allowed at this point of the conversation.
    Kind(u8),
    /// The body would be longer than allowed here.
    TooLong(u32),
    /// More fds declared than a frame may carry, or than were passed.
    FdsMissing { declared: u8, passed: usize },
    /// Fds passed that no frame declared (fd flooding), or control data cut short.
    FdFlood(usize),
    /// The fds of a message were lost (the receiver at its fd limit) and no frame that
    /// declares fds begins in it: no request can be told.
    FdsCut,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Version(v) => {
                write!(f, "protocol version {v} (this build speaks {VERSION})")
            }
            FrameError::Kind(k) => write!(f, "unexpected frame kind {k}"),
            FrameError::TooLong(n) => write!(f, "frame body of {n} bytes is over the limit"),
            FrameError::FdsMissing { declared, passed } => {
                write!(f, "frame declares {declared} fds, {passed} passed")
            }
            FrameError::FdFlood(n) => write!(f, "{n} fds passed that no frame declared"),
            FrameError::FdsCut => {
                write!(f, "fds lost with a message in which no frame declaring fds begins")
            }
        }
    }
}

impl Header {
    /// The 16 bytes of this header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&self.len.to_le_bytes());
        b[4] = VERSION;
        b[5] = self.kind as u8;
        b[6] = self.flags;
        b[7] = self.nfds;
        b[8..16].copy_from_slice(&self.id.to_le_bytes());
        b
    }

    /// Parse 16 bytes, refusing a foreign version, an unknown kind, a body over
    /// [`MAX_BODY`] and more than [`MAX_FDS`] fds.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, FrameError> {
        let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if b[4] != VERSION {
            return Err(FrameError::Version(b[4]));
        }
        let kind = Kind::from_u8(b[5]).ok_or(FrameError::Kind(b[5]))?;
        if len as usize > MAX_BODY {
            return Err(FrameError::TooLong(len));
        }
        if b[7] as usize > MAX_FDS {
            return Err(FrameError::FdsMissing { declared: b[7], passed: 0 });
        }
        let id = u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
        Ok(Header { len, kind, flags: b[6], nfds: b[7], id })
    }
}

/// What kinds of frame, and how long, the reader accepts now.
#[derive(Debug, Clone, Copy)]
pub struct Expect {
    /// The kinds allowed.
    pub kinds: &'static [Kind],
    /// The largest body allowed (at most [`MAX_BODY`]).
    pub max_body: usize,
    /// Whether fds may come with these frames.
    pub fds: bool,
}

/// A complete frame: its header and its fds (the body is borrowed from the [`Inbox`]).
#[derive(Debug)]
pub struct Frame {
    pub header: Header,
    pub fds: Vec<OwnedFd>,
    /// Its fds were lost on the way in ([`Inbox::filled_cut`]): `fds` is empty, whatever
    /// the header declares. The receiver answers the frame's requests with an error.
    pub fds_lost: bool,
}

/// The bytes and fds received on one connection, cut into frames.
///
/// Fds arrive (with `SCM_RIGHTS`) attached to the first byte of the message that carried
/// them, so by the time a header is complete its fds are here: a header declaring more than
/// arrived is refused, and so are fds left over once a frame is complete with no byte of a
/// next frame behind it, or while a frame's body is still arriving (more fds than declared),
/// and more than [`MAX_FDS`] waiting at all. Nothing is allocated for a frame before its
/// header has passed the checks.
pub struct Inbox {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    fds: VecDeque<OwnedFd>,
    current: Option<Frame>,
    /// Bytes of the stream before `buf[start]` (taken as frames or headers).
    taken: u64,
    /// Where in the stream the bytes of each read whose fds were lost begin and end
    /// ([`Inbox::filled_cut`]), in order, until the frame they belonged to is read.
    cuts: VecDeque<(u64, u64)>,
}

impl Default for Inbox {
    fn default() -> Inbox {
        Inbox::new()
    }
}

impl Inbox {
    /// An empty inbox with a small buffer (it grows for large frames, up to the limit).
    pub fn new() -> Inbox {
        Inbox {
            buf: vec![0; 16 * 1024],
            start: 0,
            end: 0,
            fds: VecDeque::new(),
            current: None,
            taken: 0,
            cuts: VecDeque::new(),
        }
    }

    /// Space to receive into (at least `min` bytes; the buffer is compacted or grown, never
    /// beyond what a frame in progress may need).
    pub fn spare(&mut self, min: usize) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            // A large frame is gone: give its room back (a connection idles at 16 KiB).
            if self.buf.len() > 256 * 1024 && self.current.is_none() {
                self.buf.truncate(16 * 1024);
                self.buf.shrink_to_fit();
            }
        }
        if self.buf.len() - self.end < min {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() - self.end < min {
                let want = (self.end + min).min(HEADER_LEN + MAX_BODY + 64 * 1024);
                self.buf.resize(want.max(self.buf.len()), 0);
            }
        }
        &mut self.buf[self.end..]
    }

    /// Record that `n` bytes were written into [`spare`](Inbox::spare) and `fds` came with
    /// them.
    pub fn filled(&mut self, n: usize, fds: impl IntoIterator<Item = OwnedFd>) {
        self.end = (self.end + n).min(self.buf.len());
        self.fds.extend(fds);
    }

    /// Record that `n` bytes were written into [`spare`](Inbox::spare) by a read whose fds
    /// were lost (`MSG_CTRUNC`: the receiver is at its fd limit; the caller closes those that
    /// did come). Fds ride on the first byte of the message that carries their frame's
    /// header, and one read takes at most one message's fds (with fd-less bytes sent before
    /// them), so they belonged to the first frame beginning in these bytes that declares
    /// fds: that frame is returned with [`fds_lost`](Frame::fds_lost) set and no fds, and its
    /// requests can be answered. No such frame (the next header begins after these bytes)
    /// is an error ([`FrameError::FdsCut`]). Such reads are followed in order (a read that
    /// ends inside its frame's header leaves it pending while the next read, with the rest
    /// of it and the next frame, may lose fds too), at most [`MAX_CUTS`] at once: false
    /// (nothing recorded) beyond.
    pub fn filled_cut(&mut self, n: usize) -> bool {
        if self.cuts.len() >= MAX_CUTS {
            return false;
        }
        let at = self.taken + (self.end - self.start) as u64;
        self.cuts.push_back((at, at + n as u64));
        self.filled(n, std::iter::empty());
        true
    }

    /// Take `n` bytes off the front (a header or a body).
    fn take(&mut self, n: usize) {
        self.start += n;
        self.taken += n as u64;
    }

    /// Append bytes (tests and the proptest; the server receives into `spare`).
    pub fn push(&mut self, bytes: &[u8], fds: impl IntoIterator<Item = OwnedFd>) {
        let mut rest = bytes;
        while !rest.is_empty() {
            let room = self.spare(rest.len().min(64 * 1024));
            let n = room.len().min(rest.len());
            room[..n].copy_from_slice(&rest[..n]);
            self.filled(n, std::iter::empty());
            rest = &rest[n..];
        }
        self.fds.extend(fds);
    }

    /// Whether a frame has begun to arrive and is not complete (its header or body cut).
    pub fn partial(&self) -> bool {
        self.current.is_some() || self.end > self.start
    }

    /// How many bytes are buffered and not yet part of a returned frame.
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// The next complete frame allowed by `expect`, with its body; `Ok(None)` until more
    /// bytes arrive. The body slice is valid until the next call.
    pub fn next(&mut self, expect: Expect) -> Result<Option<(Frame, &[u8])>, FrameError> {
        if self.fds.len() > MAX_FDS {
            return Err(FrameError::FdFlood(self.fds.len()));
        }
        if self.current.is_none() {
            if self.end - self.start < HEADER_LEN {
                return self.check_no_stray_fds();
            }
            let mut hb = [0u8; HEADER_LEN];
            hb.copy_from_slice(&self.buf[self.start..self.start + HEADER_LEN]);
            let header = Header::decode(&hb)?;
            if !expect.kinds.contains(&header.kind) {
                return Err(FrameError::Kind(header.kind as u8));
            }
            if header.len as usize > expect.max_body.min(MAX_BODY) {
                return Err(FrameError::TooLong(header.len));
            }
            let declared = header.nfds as usize;
            // A read lost its fds: the first frame beginning in its bytes that declares fds
            // is the one they came for; none there, and no one can be told.
            let here = self.taken;
            let fds_lost = match self.cuts.front() {
                Some(&(_, end)) if here >= end => return Err(FrameError::FdsCut),
                Some(&(at, _)) => here >= at && declared > 0,
                None => false,
            };
            if fds_lost {
                if !expect.fds {
                    return Err(FrameError::FdsCut);
                }
                self.cuts.pop_front();
            } else if (declared > 0 && !expect.fds) || self.fds.len() < declared {
                return Err(FrameError::FdsMissing {
                    declared: header.nfds,
                    passed: self.fds.len(),
                });
            }
            let fds: Vec<OwnedFd> =
                if fds_lost { Vec::new() } else { self.fds.drain(..declared).collect() };
            self.take(HEADER_LEN);
            self.current = Some(Frame { header, fds, fds_lost });
        }
        let len = self.current.as_ref().map_or(0, |f| f.header.len as usize);
        if self.end - self.start < len {
            // The frame's fds were taken with its header: any other fd is a flood.
            if !self.fds.is_empty() {
                return Err(FrameError::FdFlood(self.fds.len()));
            }
            return Ok(None);
        }
        // Fds left over with no byte after this frame: no frame can claim them (more fds
        // than declared). A legitimate next frame's fds come with its first byte.
        if !self.fds.is_empty() && self.start + len == self.end {
            return Err(FrameError::FdFlood(self.fds.len()));
        }
        let Some(frame) = self.current.take() else { return Ok(None) };
        let at = self.start;
        self.take(len);
        Ok(Some((frame, &self.buf[at..at + len])))
    }

    /// Fds may wait only for a header that has begun to arrive.
    fn check_no_stray_fds(&self) -> Result<Option<(Frame, &[u8])>, FrameError> {
        if !self.fds.is_empty() && self.end == self.start {
            return Err(FrameError::FdFlood(self.fds.len()));
        }
        Ok(None)
    }
}

/// One entry of a [`Kind::SpawnMany`] body: a command's wire bytes and its fds.
pub type ManyEntry<'a> = (&'a [u8], Vec<OwnedFd>);

/// The length field of a [`Kind::SpawnMany`] entry that repeats the command of the entry
/// before it (spawn N alike): no bytes follow its header; its own fds still do.
pub const REPEAT_ENTRY: u32 = u32::MAX;

/// Split a [`Kind::SpawnMany`] body and its fds into entries. Every byte is checked: an
/// entry cut short, an empty body, fd counts that do not add up to the fds passed, more
/// entries than `max`, a repeat with no entry before it, or entries whose commands add up
/// (repeats counted again) to more than [`MAX_BODY`] are refused (the whole frame): a frame
/// never asks the server to decode more than a frame's worth of commands.
pub fn split_many(
    body: &[u8],
    fds: Vec<OwnedFd>,
    max: usize,
) -> Result<Vec<ManyEntry<'_>>, &'static str> {
    let mut out: Vec<ManyEntry<'_>> = Vec::new();
    let mut fds = fds.into_iter();
    walk_many(body, max, false, |bytes, indices| {
        let nfds = indices.len();
        let entry_fds: Vec<OwnedFd> = fds.by_ref().take(nfds).collect();
        if entry_fds.len() != nfds {
            return Err("entries declare more fds than were passed");
        }
        out.push((bytes, entry_fds));
        Ok(())
    })?;
    if fds.next().is_some() {
        return Err("fds passed that no entry declares");
    }
    Ok(out)
}

/// One entry of a [`Kind::SpawnMany`] body flagged [`FLAG_FD_INDEX`]: a command's wire
/// bytes and the indices of its fds among the frame's, in the command's order.
pub type IndexedEntry<'a> = (&'a [u8], &'a [u8]);

/// Split a [`Kind::SpawnMany`] body flagged [`FLAG_FD_INDEX`] whose frame passed `nfds` fds
/// into entries. Checked as [`split_many`] checks a body, and: an index at or beyond `nfds`,
/// or a fd of the frame that no entry names, refuses the whole frame.
pub fn split_many_indexed(
    body: &[u8],
    nfds: usize,
    max: usize,
) -> Result<Vec<IndexedEntry<'_>>, &'static str> {
    let mut out: Vec<IndexedEntry<'_>> = Vec::new();
    let mut named = [false; MAX_FDS];
    walk_many(body, max, true, |bytes, indices| {
        for &i in indices {
            let i = i as usize;
            if i >= nfds || i >= MAX_FDS {
                return Err("an entry names a fd the frame did not pass");
            }
            named[i] = true;
        }
        out.push((bytes, indices));
        Ok(())
    })?;
    if named.iter().take(nfds).any(|&n| !n) || nfds > MAX_FDS {
        return Err("fds passed that no entry names");
    }
    Ok(out)
}

/// How many commands a [`Kind::SpawnMany`] body holds, checked as [`split_many`] (or, with
/// `indexed`, [`split_many_indexed`]) checks it when handed the `declared` fds of the
/// frame's header (a frame whose fds were lost on the way in: each command is answered).
pub fn count_many(
    body: &[u8],
    max: usize,
    declared: usize,
    indexed: bool,
) -> Result<usize, &'static str> {
    if indexed {
        return split_many_indexed(body, declared, max).map(|e| e.len());
    }
    let mut left = declared;
    let n = walk_many(body, max, false, |_, indices| {
        left =
            left.checked_sub(indices.len()).ok_or("entries declare more fds than were passed")?;
        Ok(())
    })?;
    if left > 0 {
        return Err("fds passed that no entry declares");
    }
    Ok(n)
}

/// Walk the entries of a [`Kind::SpawnMany`] body: `each(command bytes, fd indices)` per
/// entry (a repeat hands the entry before it again); how many there were. With `indexed`
/// ([`FLAG_FD_INDEX`]) an entry's fd count byte is followed by its indices; without, the
/// slice handed is as long as the count and holds nothing to read (the fds go in order).
fn walk_many<'a>(
    body: &'a [u8],
    max: usize,
    indexed: bool,
    mut each: impl FnMut(&'a [u8], &'a [u8]) -> Result<(), &'static str>,
) -> Result<usize, &'static str> {
    const UNINDEXED: [u8; 256] = [0; 256];
    let mut count = 0usize;
    let mut last: Option<&'a [u8]> = None;
    let mut rest = body;
    let mut decoded = 0usize;
    while !rest.is_empty() {
        if count >= max {
            return Err("more commands than one frame may carry");
        }
        if rest.len() < 5 {
            return Err("an entry cut short");
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let nfds = rest[4] as usize;
        rest = &rest[5..];
        let indices: &'a [u8] = if indexed {
            if rest.len() < nfds {
                return Err("an entry cut short");
            }
            let (indices, after) = rest.split_at(nfds);
            rest = after;
            indices
        } else {
            &UNINDEXED[..nfds]
        };
        let bytes = if len == REPEAT_ENTRY {
            match last {
                Some(prev) => prev,
                None => return Err("a repeated entry with none before it"),
            }
        } else {
            let len = len as usize;
            if len > rest.len() {
                return Err("an entry longer than the frame");
            }
            let (bytes, after) = rest.split_at(len);
            rest = after;
            bytes
        };
        decoded += bytes.len();
        if decoded > MAX_BODY {
            return Err("entries that add up to more than a frame may carry");
        }
        each(bytes, indices)?;
        last = Some(bytes);
        count += 1;
    }
    if count == 0 {
        return Err("no command");
    }
    Ok(count)
}

/// Split a [`Kind::SpawnedMany`] body: (id, pid) per entry; its fds must number the same.
pub fn split_spawned_many(body: &[u8], nfds: usize) -> Result<Vec<(u64, i32)>, &'static str> {
    if body.is_empty() || !body.len().is_multiple_of(SPAWNED_ENTRY) {
        return Err("a batch of answers of the wrong size");
    }
    let n = body.len() / SPAWNED_ENTRY;
    if n != nfds || n > MAX_BATCH_REPLY {
        return Err("a batch of answers whose pidfds do not match its entries");
    }
    Ok(body
        .chunks_exact(SPAWNED_ENTRY)
        .map(|e| {
            let mut id = [0u8; 8];
            id.copy_from_slice(&e[..8]);
            (u64::from_le_bytes(id), i32::from_le_bytes([e[8], e[9], e[10], e[11]]))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every kind (a kind missing here fails `any_names_every_kind`).
    const ANY: Expect = Expect {
        kinds: &[
            Kind::Challenge,
            Kind::Answer,
            Kind::Welcome,
            Kind::Failure,
            Kind::Spawn,
            Kind::Spawned,
            Kind::Error,
            Kind::Exit,
            Kind::SpawnMany,
            Kind::SpawnedMany,
            Kind::Env,
            Kind::Wake,
            Kind::Fork,
            Kind::Workers,
            Kind::Want,
        ],
        max_body: MAX_BODY,
        fds: true,
    };

    fn hdr(kind: Kind, len: u32, nfds: u8, id: u64) -> [u8; HEADER_LEN] {
        Header { len, kind, flags: 0, nfds, id }.encode()
    }

    pub(super) fn devnull() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    /// The body bytes the entries account for: a header each, and the command's bytes unless
    /// it is a repeat (whose bytes are the entry's before it: the same slice).
    fn covered(entries: &[ManyEntry<'_>]) -> usize {
        entries
            .iter()
            .enumerate()
            .map(|(i, (b, _))| {
                let repeat = i > 0 && std::ptr::eq(*b, entries[i - 1].0);
                5 + if repeat { 0 } else { b.len() }
            })
            .sum()
    }

    /// `n` fds each with an inode of its own (socketpair ends), and those inodes in order.
    fn distinct_fds(n: usize) -> (Vec<OwnedFd>, Vec<u64>) {
        let mut fds: Vec<OwnedFd> = Vec::with_capacity(n + 1);
        while fds.len() < n {
            let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
            fds.push(a.into());
            fds.push(b.into());
        }
        fds.truncate(n);
        let inos = fds.iter().map(ino).collect();
        (fds, inos)
    }

    fn ino(fd: &OwnedFd) -> u64 {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap().ino()
    }

    #[test]
    fn a_frame_round_trips_in_pieces() {
        let mut inbox = Inbox::new();
        let mut bytes = hdr(Kind::Spawn, 3, 1, 42).to_vec();
        bytes.extend_from_slice(b"abc");
        inbox.push(&bytes[..1], [devnull()]);
        assert!(inbox.next(ANY).unwrap().is_none());
        inbox.push(&bytes[1..17], []);
        assert!(inbox.next(ANY).unwrap().is_none());
        inbox.push(&bytes[17..], []);
        let (frame, body) = inbox.next(ANY).unwrap().unwrap();
        assert_eq!((frame.header.id, frame.fds.len(), body), (42, 1, &b"abc"[..]));
        assert!(inbox.next(ANY).unwrap().is_none());
    }

    #[test]
    fn refusals() {
        let mut b = hdr(Kind::Spawn, 0, 0, 1);
        b[4] = VERSION + 1;
        assert_eq!(Header::decode(&b), Err(FrameError::Version(VERSION + 1)));
        // Version 1 had no repeat entries: its peers are told, not misread.
        b[4] = 1;
        assert_eq!(Header::decode(&b), Err(FrameError::Version(1)));
        let mut b = hdr(Kind::Spawn, 0, 0, 1);
        b[5] = 99;
        assert_eq!(Header::decode(&b), Err(FrameError::Kind(99)));
        let b = hdr(Kind::Spawn, MAX_BODY as u32 + 1, 0, 1);
        assert!(matches!(Header::decode(&b), Err(FrameError::TooLong(_))));
        // More fds than declared.
        let mut inbox = Inbox::new();
        inbox.push(&hdr(Kind::Spawn, 4, 1, 1), [devnull(), devnull()]);
        assert_eq!(inbox.next(ANY).unwrap_err(), FrameError::FdFlood(1));
        // More fds than declared, with the whole frame in one message: refused, not spawned.
        let mut inbox = Inbox::new();
        let mut whole = hdr(Kind::Spawn, 2, 1, 1).to_vec();
        whole.extend_from_slice(b"ab");
        inbox.push(&whole, [devnull(), devnull()]);
        assert_eq!(inbox.next(ANY).unwrap_err(), FrameError::FdFlood(1));
        // Fewer.
        let mut inbox = Inbox::new();
        inbox.push(&hdr(Kind::Spawn, 0, 2, 1), [devnull()]);
        assert!(matches!(inbox.next(ANY), Err(FrameError::FdsMissing { .. })));
        // A kind not allowed now.
        let mut inbox = Inbox::new();
        inbox.push(&hdr(Kind::Spawn, 0, 0, 1), []);
        let only_answer = Expect { kinds: &[Kind::Answer], max_body: 64, fds: false };
        assert_eq!(inbox.next(only_answer).unwrap_err(), FrameError::Kind(16));
    }

    /// One read whose fds were lost (the receiver at its fd limit).
    pub(super) fn push_cut(inbox: &mut Inbox, bytes: &[u8]) -> bool {
        let room = inbox.spare(bytes.len());
        room[..bytes.len()].copy_from_slice(bytes);
        inbox.filled_cut(bytes.len())
    }

    /// A whole frame: its header and `body`.
    pub(super) fn framed(kind: Kind, nfds: u8, id: u64, body: &[u8]) -> Vec<u8> {
        let mut b = hdr(kind, body.len() as u32, nfds, id).to_vec();
        b.extend_from_slice(body);
        b
    }

    #[test]
    fn a_frame_whose_fds_were_lost_comes_without_them_and_the_next_is_whole() {
        let mut inbox = Inbox::new();
        // A first frame, whole, so that the cut one does not begin the stream.
        inbox.push(&framed(Kind::Spawn, 1, 1, b"a"), [devnull()]);
        let (frame, _) = inbox.next(ANY).unwrap().unwrap();
        assert!(!frame.fds_lost && frame.fds.len() == 1);
        assert!(push_cut(&mut inbox, &framed(Kind::Spawn, 3, 7, b"abc")));
        let (frame, body) = inbox.next(ANY).unwrap().unwrap();
        assert!(frame.fds_lost && frame.fds.is_empty(), "{frame:?}");
        assert_eq!((frame.header.id, frame.header.nfds, body), (7, 3, &b"abc"[..]));
        // The next frame takes its own fds, as ever.
        inbox.push(&framed(Kind::Spawn, 1, 8, b"d"), [devnull()]);
        let (frame, body) = inbox.next(ANY).unwrap().unwrap();
        assert!(!frame.fds_lost && frame.fds.len() == 1 && body == b"d");
        assert!(inbox.next(ANY).unwrap().is_none());
        // Its header in pieces after the cut read's first byte: still that frame.
        let whole = framed(Kind::Spawn, 2, 9, b"xy");
        assert!(push_cut(&mut inbox, &whole[..1]));
        assert!(inbox.next(ANY).unwrap().is_none());
        inbox.push(&whole[1..], []);
        let (frame, _) = inbox.next(ANY).unwrap().unwrap();
        assert!(frame.fds_lost && frame.header.id == 9);
        // One read that took fd-less frames sent before the message with the fds (a Wake, a
        // request without fds): those are whole, the first that declares fds lost them.
        let mut glued = hdr(Kind::Wake, 0, 0, 0).to_vec();
        glued.extend(framed(Kind::Spawn, 0, 10, b"e"));
        glued.extend(framed(Kind::Spawn, 4, 11, b"f"));
        glued.extend(framed(Kind::Spawn, 0, 12, b"g"));
        assert!(push_cut(&mut inbox, &glued));
        let mut got = Vec::new();
        while let Some((frame, _)) = inbox.next(ANY).unwrap() {
            got.push((frame.header.id, frame.fds_lost, frame.fds.len()));
        }
        assert_eq!(got, [(0, false, 0), (10, false, 0), (11, true, 0), (12, false, 0)]);
    }

    #[test]
    fn lost_fds_where_no_frame_declaring_fds_begins_are_refused() {
        // The frame there declares none: the fds were nobody's (told at the next header).
        let mut inbox = Inbox::new();
        assert!(push_cut(&mut inbox, &framed(Kind::Spawn, 0, 1, b"ab")));
        assert!(!inbox.next(ANY).unwrap().unwrap().0.fds_lost);
        inbox.push(&framed(Kind::Spawn, 0, 2, b"c"), []);
        assert_eq!(inbox.next(ANY).unwrap_err(), FrameError::FdsCut);
        // Where fds may not come at all.
        let mut inbox = Inbox::new();
        assert!(push_cut(&mut inbox, &framed(Kind::Spawn, 1, 1, b"ab")));
        let no_fds = Expect { kinds: &[Kind::Spawn], max_body: 64, fds: false };
        assert_eq!(inbox.next(no_fds).unwrap_err(), FrameError::FdsCut);
        // Inside a frame's body, or its header, and no frame begins after: the frame is
        // whole (its own fds came before), the next header is refused.
        let whole = framed(Kind::Spawn, 1, 1, b"abcd");
        for split in [HEADER_LEN + 1, 5] {
            let mut inbox = Inbox::new();
            inbox.push(&whole[..split], [devnull()]);
            assert!(inbox.next(ANY).unwrap().is_none());
            assert!(push_cut(&mut inbox, &whole[split..]));
            let (frame, _) = inbox.next(ANY).unwrap().unwrap();
            assert!(!frame.fds_lost && frame.fds.len() == 1);
            inbox.push(&framed(Kind::Spawn, 0, 2, b""), []);
            assert_eq!(inbox.next(ANY).unwrap_err(), FrameError::FdsCut);
        }
        // More cut reads pending at once than any sender following the protocol leaves:
        // not followed.
        let mut inbox = Inbox::new();
        for _ in 0..MAX_CUTS {
            assert!(push_cut(&mut inbox, &whole[..1]));
        }
        assert!(!push_cut(&mut inbox, &whole[..1]));
    }

    #[test]
    fn any_names_every_kind() {
        let every: Vec<Kind> = (0..=255u8).filter_map(Kind::from_u8).collect();
        assert_eq!(every.len(), ANY.kinds.len());
        assert!(every.iter().all(|k| ANY.kinds.contains(k)));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Arbitrary bytes, cut anywhere, with arbitrary fds: the decoder never panics, never
        /// returns a body over the limit, and accounts for every fd.
        #[test]
        fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600),
                           cuts in proptest::collection::vec(0usize..600, 0..6),
                           nfds in 0usize..4, small in any::<bool>()) {
            let expect = if small {
                Expect { kinds: &[Kind::Answer], max_body: 64, fds: false }
            } else {
                ANY
            };
            let mut inbox = Inbox::new();
            let mut cuts = cuts;
            cuts.push(bytes.len());
            cuts.sort_unstable();
            let mut at = 0;
            let mut fds_left = nfds;
            'outer: for cut in cuts {
                let cut = cut.min(bytes.len());
                if cut < at { continue; }
                let fds: Vec<OwnedFd> = (0..fds_left).map(|_| devnull()).collect();
                fds_left = 0;
                inbox.push(&bytes[at..cut], fds);
                at = cut;
                loop {
                    match inbox.next(expect) {
                        Ok(Some((frame, body))) => {
                            prop_assert!(body.len() <= expect.max_body);
                            prop_assert_eq!(body.len(), frame.header.len as usize);
                            prop_assert_eq!(frame.fds.len(), frame.header.nfds as usize);
                        }
                        Ok(None) => break,
                        Err(_) => break 'outer,
                    }
                }
            }
        }

        /// A SpawnMany body flagged FLAG_FD_INDEX, of arbitrary bytes, whose frame passed
        /// `nfds` fds: never a panic; when it is accepted, the entries cover the body
        /// exactly (headers, indices, commands), every index names one of the frame's fds,
        /// and every fd of the frame is named. Counted without its fds (a frame whose fds
        /// were lost): the same count, or the same refusal.
        #[test]
        fn arbitrary_indexed_spawn_many_bodies(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
            nfds in 0usize..6,
            max in 1usize..8,
        ) {
            let counted = count_many(&bytes, max, nfds, true);
            match split_many_indexed(&bytes, nfds, max) {
                Ok(entries) => {
                    prop_assert!(!entries.is_empty() && entries.len() <= max);
                    let covered: usize = entries
                        .iter()
                        .enumerate()
                        .map(|(i, (b, ix))| {
                            let repeat = i > 0 && std::ptr::eq(*b, entries[i - 1].0);
                            5 + ix.len() + if repeat { 0 } else { b.len() }
                        })
                        .sum();
                    prop_assert_eq!(covered, bytes.len());
                    let mut named = vec![false; nfds];
                    for (_, ix) in &entries {
                        for &i in *ix {
                            prop_assert!((i as usize) < nfds);
                            named[i as usize] = true;
                        }
                    }
                    prop_assert!(named.iter().all(|&n| n));
                    prop_assert_eq!(counted, Ok(entries.len()));
                }
                Err(why) => prop_assert_eq!(counted, Err(why)),
            }
        }

        /// Well-formed indexed bodies (entries naming any of the frame's fds, some of them
        /// repeats) split back into what was put in.
        #[test]
        fn indexed_spawn_many_round_trip(
            cmds in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..40),
                 proptest::collection::vec(0u8..5, 0..4), any::<bool>()), 1..10),
        ) {
            let mut body = Vec::new();
            let mut want: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            for (i, (b, ix, again)) in cmds.iter().enumerate() {
                let b = if *again && i > 0 { want[i - 1].0.clone() } else { b.clone() };
                if i > 0 && want[i - 1].0 == b {
                    body.extend_from_slice(&REPEAT_ENTRY.to_le_bytes());
                    body.push(ix.len() as u8);
                    body.extend_from_slice(ix);
                } else {
                    body.extend_from_slice(&(b.len() as u32).to_le_bytes());
                    body.push(ix.len() as u8);
                    body.extend_from_slice(ix);
                    body.extend_from_slice(&b);
                }
                want.push((b, ix.clone()));
            }
            // The frame passed as many fds as the highest index names (all named, or the
            // frame is refused for the fds no entry names).
            let nfds = want.iter().flat_map(|(_, ix)| ix).map(|&i| i as usize + 1).max();
            let nfds = nfds.unwrap_or(0);
            let mut named = vec![false; nfds];
            want.iter().flat_map(|(_, ix)| ix).for_each(|&i| named[i as usize] = true);
            match split_many_indexed(&body, nfds, 64) {
                Ok(entries) => {
                    prop_assert!(named.iter().all(|&n| n));
                    prop_assert_eq!(entries.len(), want.len());
                    for ((b, ix), (wb, wix)) in entries.iter().zip(&want) {
                        prop_assert_eq!(*b, &wb[..]);
                        prop_assert_eq!(*ix, &wix[..]);
                    }
                }
                Err(why) => {
                    prop_assert!(!named.iter().all(|&n| n));
                    prop_assert_eq!(why, "fds passed that no entry names");
                }
            }
        }

        /// A SpawnMany body of arbitrary bytes with arbitrary fds: never a panic; when it is
        /// accepted, the entries cover the body exactly, every fd belongs to exactly one
        /// entry, and there are at most `max` of them. The count without fds
        /// ([`count_many`], given the fds' number) agrees with every split: the same count,
        /// or the same refusal.
        #[test]
        fn arbitrary_spawn_many_bodies(bytes in proptest::collection::vec(any::<u8>(), 0..300),
                                       nfds in 0usize..6, max in 1usize..8) {
            let fds: Vec<OwnedFd> = (0..nfds).map(|_| devnull()).collect();
            let counted = count_many(&bytes, max, nfds, false);
            match split_many(&bytes, fds, max) {
                Ok(entries) => {
                    prop_assert!(!entries.is_empty() && entries.len() <= max);
                    prop_assert_eq!(covered(&entries), bytes.len());
                    prop_assert_eq!(entries.iter().map(|(_, f)| f.len()).sum::<usize>(), nfds);
                    prop_assert_eq!(counted, Ok(entries.len()));
                }
                Err(why) => prop_assert_eq!(counted, Err(why)),
            }
        }

        /// Well-formed SpawnMany bodies split back into what was put in.
        #[test]
        fn spawn_many_round_trip(cmds in proptest::collection::vec(
                                     (proptest::collection::vec(any::<u8>(), 0..40), 0u8..3,
                                      any::<bool>()), 1..6)) {
            // An entry whose bytes are the same as the one before may go as a repeat.
            let mut body = Vec::new();
            let mut total = 0;
            let cmds: Vec<(Vec<u8>, u8)> = cmds
                .iter()
                .enumerate()
                .map(|(i, (b, n, again))| {
                    let b = if *again && i > 0 { cmds[i - 1].0.clone() } else { b.clone() };
                    (b, *n)
                })
                .collect();
            for (i, (b, n)) in cmds.iter().enumerate() {
                if i > 0 && cmds[i - 1].0 == *b {
                    body.extend_from_slice(&REPEAT_ENTRY.to_le_bytes());
                    body.push(*n);
                } else {
                    body.extend_from_slice(&(b.len() as u32).to_le_bytes());
                    body.push(*n);
                    body.extend_from_slice(b);
                }
                total += *n as usize;
            }
            let fds: Vec<OwnedFd> = (0..total).map(|_| devnull()).collect();
            let entries = split_many(&body, fds, 8).expect("well formed");
            prop_assert_eq!(entries.len(), cmds.len());
            // Counted without its fds (a frame whose fds were lost): as many.
            prop_assert_eq!(count_many(&body, 8, total, false), Ok(cmds.len()));
            for ((b, f), (want, n)) in entries.iter().zip(&cmds) {
                prop_assert_eq!(*b, &want[..]);
                prop_assert_eq!(f.len(), *n as usize);
            }
        }

        /// Bodies built from entries, some of them repeats, with fds told apart by their
        /// inode: split back into the same commands, each entry holding its own fds in
        /// order (or refused when over `max`). Then the same body with one byte changed,
        /// or cut short: never a panic, and what is accepted still covers the body exactly
        /// and hands every fd, in order, to exactly one entry.
        #[test]
        fn spawn_many_entries_keep_their_fds(
            cmds in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..40), 0u8..4, any::<bool>()), 1..70),
            max in 1usize..=64,
            at in any::<proptest::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<bool>(),
        ) {
            let mut body = Vec::new();
            let mut want: Vec<(Vec<u8>, usize)> = Vec::new();
            for (i, (b, n, again)) in cmds.iter().enumerate() {
                let n = *n as usize;
                if *again && i > 0 {
                    body.extend_from_slice(&REPEAT_ENTRY.to_le_bytes());
                    body.push(n as u8);
                    let prev = want[i - 1].0.clone();
                    want.push((prev, n));
                } else {
                    body.extend_from_slice(&(b.len() as u32).to_le_bytes());
                    body.push(n as u8);
                    body.extend_from_slice(b);
                    want.push((b.clone(), n));
                }
            }
            let total: usize = want.iter().map(|(_, n)| n).sum();
            let (fds, inos) = distinct_fds(total);
            match split_many(&body, fds, max) {
                Ok(entries) => {
                    prop_assert!(want.len() <= max);
                    prop_assert_eq!(entries.len(), want.len());
                    let mut next = inos.iter();
                    for ((b, f), (wb, wn)) in entries.iter().zip(&want) {
                        prop_assert_eq!(*b, &wb[..]);
                        prop_assert_eq!(f.len(), *wn);
                        for fd in f {
                            prop_assert_eq!(Some(&ino(fd)), next.next());
                        }
                    }
                }
                Err(e) => {
                    prop_assert!(want.len() > max);
                    prop_assert_eq!(e, "more commands than one frame may carry");
                }
            }
            // Damaged: one byte changed, or the body cut short there.
            let i = at.index(body.len());
            let mut bad = body.clone();
            if cut { bad.truncate(i) } else { bad[i] = byte }
            let (fds, inos) = distinct_fds(total);
            if let Ok(entries) = split_many(&bad, fds, max) {
                prop_assert!(!entries.is_empty() && entries.len() <= max);
                prop_assert_eq!(covered(&entries), bad.len());
                let got: Vec<u64> = entries.iter().flat_map(|(_, f)| f.iter().map(ino)).collect();
                prop_assert_eq!(got, inos);
            }
        }

        /// A SpawnedMany body of arbitrary bytes: accepted only with one pidfd per entry.
        #[test]
        fn arbitrary_spawned_many_bodies(bytes in proptest::collection::vec(any::<u8>(), 0..200),
                                         nfds in 0usize..20) {
            if let Ok(entries) = split_spawned_many(&bytes, nfds) {
                prop_assert_eq!(entries.len(), nfds);
                prop_assert_eq!(entries.len() * SPAWNED_ENTRY, bytes.len());
            }
        }
    }

    #[test]
    fn spawn_many_refusals() {
        let entry = |len: u32, n: u8, b: &[u8]| {
            let mut v = len.to_le_bytes().to_vec();
            v.push(n);
            v.extend_from_slice(b);
            v
        };
        assert_eq!(split_many(&[], vec![], 4).err(), Some("no command"));
        assert_eq!(split_many(&[1, 0, 0], vec![], 4).err(), Some("an entry cut short"));
        assert_eq!(
            split_many(&entry(9, 0, b"abc"), vec![], 4).err(),
            Some("an entry longer than the frame")
        );
        assert_eq!(
            split_many(&entry(3, 1, b"abc"), vec![], 4).err(),
            Some("entries declare more fds than were passed")
        );
        assert_eq!(
            split_many(&entry(3, 0, b"abc"), vec![devnull()], 4).err(),
            Some("fds passed that no entry declares")
        );
        let two = [entry(1, 0, b"a"), entry(1, 0, b"b")].concat();
        assert_eq!(
            split_many(&two, vec![], 1).err(),
            Some("more commands than one frame may carry")
        );
        assert_eq!(split_many(&two, vec![], 2).map(|v| v.len()), Ok(2));
        // Repeats: of the entry before, never first, and never past a frame's worth.
        let repeat = |n: u8| entry(REPEAT_ENTRY, n, b"");
        let again = [entry(1, 0, b"a"), repeat(1), repeat(0)].concat();
        let split = split_many(&again, vec![devnull()], 4).expect("well formed");
        assert_eq!(
            split.iter().map(|(b, f)| (*b, f.len())).collect::<Vec<_>>(),
            [(&b"a"[..], 0), (&b"a"[..], 1), (&b"a"[..], 0)]
        );
        assert_eq!(
            split_many(&repeat(0), vec![], 4).err(),
            Some("a repeated entry with none before it")
        );
        // Exactly a frame's worth to decode is allowed (the client may send that).
        let half = vec![0u8; MAX_BODY / 2];
        let full = [entry(half.len() as u32, 0, &half), repeat(0)].concat();
        assert_eq!(split_many(&full, vec![], 4).map(|v| v.len()), Ok(2));
        let big = vec![0u8; MAX_BODY / 2 + 1];
        let amplified = [entry(big.len() as u32, 0, &big), repeat(0)].concat();
        assert_eq!(
            split_many(&amplified, vec![], 4).err(),
            Some("entries that add up to more than a frame may carry")
        );
        // Fds by index (FLAG_FD_INDEX): each entry names its fds among the frame's.
        let named = |len: u32, ix: &[u8], b: &[u8]| {
            [&len.to_le_bytes()[..], &[ix.len() as u8], ix, b].concat()
        };
        let shared = [named(1, &[0, 1], b"a"), named(REPEAT_ENTRY, &[1, 0, 1], b"")].concat();
        let split = split_many_indexed(&shared, 2, 4).expect("well formed");
        assert_eq!(split, [(&b"a"[..], &[0u8, 1][..]), (&b"a"[..], &[1u8, 0, 1][..])]);
        assert_eq!(count_many(&shared, 4, 2, true), Ok(2));
        assert_eq!(
            split_many_indexed(&shared, 1, 4).err(),
            Some("an entry names a fd the frame did not pass")
        );
        assert_eq!(split_many_indexed(&shared, 3, 4).err(), Some("fds passed that no entry names"));
        let cut = &named(0, &[0, 1, 2], b"")[..7];
        assert_eq!(split_many_indexed(cut, 3, 4).err(), Some("an entry cut short"));
        assert_eq!(count_many(cut, 4, 3, true).err(), Some("an entry cut short"));
    }
}

/// Reads whose fds were lost (`Inbox::filled_cut`): the decoder against a model of an honest
/// sender and of the kernel's reads, against hostile frames, and across the buffer's moves.
#[cfg(test)]
mod cut_tests {
    use super::tests::{devnull, framed, push_cut};
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::os::fd::AsRawFd;

    const REQ: Expect = Expect {
        kinds: &[Kind::Spawn, Kind::SpawnMany, Kind::Env, Kind::Wake],
        max_body: MAX_BODY,
        fds: true,
    };

    /// One message in the model's socket: its bytes, how far they were read, its fds (taken
    /// with its first byte read), and the frame it belongs to.
    struct Skb {
        bytes: Vec<u8>,
        off: usize,
        fds: Option<Vec<OwnedFd>>,
        frame: u64,
    }

    /// A lost SpawnMany is counted as it would be split with the fds its header declares:
    /// entries that declare other than that are refused, as on the normal path.
    #[test]
    fn count_many_holds_the_entries_to_the_headers_fd_count() {
        let mut body = Vec::new();
        body.extend_from_slice(&1u32.to_le_bytes());
        body.push(2); // the entry declares two fds
        body.push(b'x');
        assert_eq!(count_many(&body, 64, 2, false), Ok(1));
        assert_eq!(count_many(&body, 64, 5, false), Err("fds passed that no entry declares"));
        assert_eq!(
            count_many(&body, 64, 1, false),
            Err("entries declare more fds than were passed")
        );
    }

    /// An honest client pipelines two fd-carrying frames, the first read ending inside the
    /// first one's header (the inbox's room ran out there), and both reads lose their fds:
    /// both frames are told, in order.
    #[test]
    fn two_cut_reads_pending_at_once_are_both_followed() {
        let mut inbox = Inbox::new();
        let f1 = framed(Kind::Spawn, 3, 1, b"abc");
        let f2 = framed(Kind::Spawn, 2, 2, b"de");
        // Read A: fd-less bytes sent before (a whole Env frame), then F1's first 5 bytes.
        let mut a = framed(Kind::Env, 0, 0, b"env");
        a.extend_from_slice(&f1[..5]);
        assert!(push_cut(&mut inbox, &a));
        let (fr, _) = inbox.next(REQ).unwrap().unwrap();
        assert_eq!(fr.header.kind, Kind::Env);
        assert!(inbox.next(REQ).unwrap().is_none());
        // Read B: the rest of F1 (the fd-less rest of its message) and F2, fds lost too.
        let mut b = f1[5..].to_vec();
        b.extend_from_slice(&f2);
        assert!(push_cut(&mut inbox, &b));
        let mut seen = Vec::new();
        while let Some((f, _)) = inbox.next(REQ).unwrap() {
            seen.push((f.header.id, f.fds_lost, f.fds.len()));
        }
        assert_eq!(seen, [(1, true, 0), (2, true, 0)]);
        // And the next frame takes its own fds.
        inbox.push(&framed(Kind::Spawn, 1, 3, b"f"), [devnull()]);
        let (f, _) = inbox.next(REQ).unwrap().unwrap();
        assert!(!f.fds_lost && f.fds.len() == 1);
    }

    /// The positions survive compaction and growth: a cut read landing after the buffer was
    /// compacted and grown (a large frame in progress) still finds its frame.
    #[test]
    fn cut_positions_across_compaction_and_growth() {
        let mut inbox = Inbox::new();
        let big = vec![7u8; 100_000];
        let env = framed(Kind::Env, 0, 0, &big);
        // Arrive in pieces of 3000 so the buffer compacts and grows.
        let mut off = 0;
        let mut got_env = false;
        let tail_cut_from = env.len() - 1000;
        while off < tail_cut_from {
            let n = 3000.min(tail_cut_from - off);
            inbox.push(&env[off..off + n], []);
            off += n;
            if let Some((f, body)) = inbox.next(REQ).unwrap() {
                assert_eq!(body.len(), big.len());
                assert_eq!(f.header.kind, Kind::Env);
                got_env = true;
            }
        }
        let mut cut = env[off..].to_vec();
        cut.extend(framed(Kind::Spawn, 0, 5, b"z"));
        cut.extend(framed(Kind::Spawn, 4, 6, b"yy"));
        assert!(push_cut(&mut inbox, &cut));
        let mut seen = Vec::new();
        while let Some((f, body)) = inbox.next(REQ).unwrap() {
            seen.push((f.header.kind, f.header.id, f.fds_lost, body.len()));
        }
        assert!(!got_env);
        assert_eq!(
            seen,
            [(Kind::Env, 0, false, 100_000), (Kind::Spawn, 5, false, 1), (Kind::Spawn, 6, true, 2)]
        );
        inbox.push(&framed(Kind::Spawn, 1, 7, b"w"), [devnull()]);
        let (f, _) = inbox.next(REQ).unwrap().unwrap();
        assert!(!f.fds_lost && f.fds.len() == 1);
    }

    /// Fds queued by a normal read for a header that began before the cut read are that
    /// header's; the lost frame in the cut read does not touch them.
    #[test]
    fn queued_fds_go_to_the_header_that_began_before_the_cut() {
        let mut inbox = Inbox::new();
        let f1 = framed(Kind::Spawn, 2, 1, b"abc");
        let f2 = framed(Kind::Spawn, 3, 2, b"de");
        inbox.push(&f1[..3], [devnull(), devnull()]);
        assert!(inbox.next(REQ).unwrap().is_none());
        let mut b = f1[3..].to_vec();
        b.extend_from_slice(&f2);
        assert!(push_cut(&mut inbox, &b));
        let (f, _) = inbox.next(REQ).unwrap().unwrap();
        assert!(!f.fds_lost && f.fds.len() == 2 && f.header.id == 1);
        let (f, _) = inbox.next(REQ).unwrap().unwrap();
        assert!(f.fds_lost && f.fds.is_empty() && f.header.id == 2);
        assert!(inbox.next(REQ).unwrap().is_none());
    }
    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]
        /// An honest sender (each frame its own sendmsg, fds on its first byte, possibly sent
        /// in two parts) and the kernel's unix stream reads (fd-less skbs glued before at most
        /// one fd-carrying skb; partial skbs when the room runs out); any read's fds may be
        /// cut. Every frame comes with exactly its own fds, or fds_lost exactly when its own
        /// were cut; nothing errs, and nothing is refused.
        #[test]
        fn honest_sender_kernel_reads_cut_anywhere(
            frames in proptest::collection::vec((0u8..3, 0u8..4, 0usize..40, 0usize..60), 1..12),
            rooms in proptest::collection::vec((1usize..80, any::<bool>()), 1..200),
        ) {
            let mut queue: std::collections::VecDeque<Skb> = Default::default();
            let mut owner: HashMap<i32, u64> = HashMap::new();
            for (i, &(k, nfds, len, split)) in frames.iter().enumerate() {
                let id = i as u64 + 1;
                let (kind, nfds) = match k { 0 => (Kind::Spawn, nfds), 1 => (Kind::Env, 0), _ => (Kind::Wake, 0) };
                let len = if kind == Kind::Wake { 0 } else { len };
                let mut b = Header { len: len as u32, kind, flags: 0, nfds, id }.encode().to_vec();
                b.extend((0..len).map(|j| j as u8));
                let fds: Vec<OwnedFd> = (0..nfds).map(|_| devnull()).collect();
                for f in &fds { owner.insert(f.as_raw_fd(), id); }
                let split = split.min(b.len());
                if split > 0 && split < b.len() {
                    let rest = b.split_off(split);
                    queue.push_back(Skb { bytes: b, off: 0, fds: (nfds > 0).then_some(fds), frame: id });
                    queue.push_back(Skb { bytes: rest, off: 0, fds: None, frame: id });
                } else {
                    queue.push_back(Skb { bytes: b, off: 0, fds: (nfds > 0).then_some(fds), frame: id });
                }
            }
            let mut inbox = Inbox::new();
            let mut cut_frames: Vec<u64> = Vec::new();
            let mut seen = 0u64;
            let mut rooms = rooms.into_iter().cycle();
            while !queue.is_empty() {
                let (room, cut) = rooms.next().unwrap();
                let mut data = Vec::new();
                let mut got: Option<(Vec<OwnedFd>, u64)> = None;
                while let Some(skb) = queue.front_mut() {
                    let chunk = (skb.bytes.len() - skb.off).min(room - data.len());
                    data.extend_from_slice(&skb.bytes[skb.off..skb.off + chunk]);
                    skb.off += chunk;
                    if let Some(f) = skb.fds.take() { got = Some((f, skb.frame)); }
                    if skb.off < skb.bytes.len() { break; }
                    queue.pop_front();
                    if got.is_some() || data.len() == room { break; }
                }
                if let (true, Some(frame)) = (cut, got.as_ref().map(|(_, id)| *id)) {
                    drop(got.take());
                    cut_frames.push(frame);
                    let sp = inbox.spare(data.len());
                    sp[..data.len()].copy_from_slice(&data);
                    prop_assert!(inbox.filled_cut(data.len()), "a cut read not followed");
                } else {
                    inbox.push(&data, got.map(|(f, _)| f).unwrap_or_default());
                }
                loop {
                    match inbox.next(REQ) {
                        Ok(Some((f, _))) => {
                            seen += 1;
                            prop_assert_eq!(f.header.id, seen);
                            if f.fds_lost {
                                prop_assert!(cut_frames.contains(&f.header.id), "lost {} not cut", f.header.id);
                            } else {
                                prop_assert!(!cut_frames.contains(&f.header.id) || f.header.nfds == 0);
                                prop_assert_eq!(f.fds.len(), f.header.nfds as usize);
                                for fd in &f.fds {
                                    prop_assert_eq!(owner.get(&fd.as_raw_fd()), Some(&f.header.id));
                                }
                            }
                        }
                        Ok(None) => break,
                        Err(e) => prop_assert!(false, "decoder error {:?}", e),
                    }
                }
            }
            prop_assert_eq!(seen, frames.len() as u64);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 6000, ..ProptestConfig::default() })]
        /// Valid headers with lying fd counts, fds attached to arbitrary reads in arbitrary
        /// numbers, arbitrary reads cut: never a panic, never a frame with other than its
        /// declared fds (or none, lost), at most MAX_FDS queued, and every call makes progress.
        #[test]
        fn hostile_structured(
            frames in proptest::collection::vec((0u8..4, 0u8..5, 0usize..30), 1..10),
            reads in proptest::collection::vec((1usize..60, 0usize..5, any::<bool>()), 1..60),
        ) {
            let mut stream = Vec::new();
            for (i, &(k, nfds, len)) in frames.iter().enumerate() {
                let kind = [Kind::Spawn, Kind::SpawnMany, Kind::Env, Kind::Wake][k as usize];
                stream.extend(Header { len: len as u32, kind, flags: 0, nfds, id: i as u64 }.encode());
                stream.extend((0..len).map(|j| j as u8));
            }
            let mut inbox = Inbox::new();
            let mut at = 0;
            let mut calls = 0;
            'outer: for (n, nfds, cut) in reads {
                if at >= stream.len() { break; }
                let n = n.min(stream.len() - at);
                let data = &stream[at..at + n];
                at += n;
                if cut {
                    let sp = inbox.spare(n);
                    sp[..n].copy_from_slice(data);
                    if !inbox.filled_cut(n) { break; }
                } else {
                    inbox.push(data, (0..nfds).map(|_| devnull()));
                }
                loop {
                    calls += 1;
                    prop_assert!(calls < 10_000);
                    let before = inbox.buffered();
                    match inbox.next(REQ) {
                        Ok(Some((f, body))) => {
                            prop_assert_eq!(body.len(), f.header.len as usize);
                            if f.fds_lost { prop_assert!(f.fds.is_empty() && f.header.nfds > 0); }
                            else { prop_assert_eq!(f.fds.len(), f.header.nfds as usize); }
                            prop_assert!(inbox.buffered() < before || f.header.len == 0 && inbox.buffered() <= before);
                        }
                        Ok(None) => break,
                        Err(_) => break 'outer,
                    }
                }
            }
        }
    }
}
