//! Bodies of the server's replies: Spawned (pid), Error (the structured spawn error: kind,
//! step, subject, errno, reason) and Exit (pid and status), encoded and decoded (the decoder
//! refuses anything malformed, never panics).

use crate::error::{Error, ErrorKind, Result};
use crate::ExitStatus;

fn kind_code(k: ErrorKind) -> u8 {
    match k {
        ErrorKind::InvalidInput => 1,
        ErrorKind::Os => 2,
        ErrorKind::NotFound => 3,
        ErrorKind::Unsupported => 4,
        ErrorKind::Timeout => 5,
        ErrorKind::ChildDied => 6,
    }
}

fn kind_of(code: u8) -> Option<ErrorKind> {
    Some(match code {
        1 => ErrorKind::InvalidInput,
        2 => ErrorKind::Os,
        3 => ErrorKind::NotFound,
        4 => ErrorKind::Unsupported,
        5 => ErrorKind::Timeout,
        6 => ErrorKind::ChildDied,
        _ => return None,
    })
}

fn bad(what: &str) -> Error {
    Error::invalid("decode", "server reply", what)
}

/// Error body: kind u8, in_child u8, has_errno u8, errno i32 LE, then step, subject and
/// reason each as u32 LE length + UTF-8 (reason: length u32::MAX for none).
pub(crate) fn encode_error(e: &Error, out: &mut Vec<u8>) {
    out.push(kind_code(e.kind()));
    out.push(e.is_in_child() as u8);
    out.push(e.raw_os_error().is_some() as u8);
    out.extend_from_slice(&e.raw_os_error().unwrap_or(0).to_le_bytes());
    for s in [Some(e.step()), Some(e.subject()), e.reason()] {
        match s {
            Some(s) => {
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(bad("truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn string(&mut self) -> Result<Option<String>> {
        let n = self.u32()?;
        if n == u32::MAX {
            return Ok(None);
        }
        let b = self.take(n as usize)?;
        Ok(Some(String::from_utf8_lossy(b).into_owned()))
    }
}

pub(crate) fn decode_error(body: &[u8]) -> Result<Error> {
    let mut r = Reader(body);
    let kind = kind_of(r.u8()?).ok_or_else(|| bad("unknown error kind"))?;
    let in_child = r.u8()? != 0;
    let has_errno = r.u8()? != 0;
    let errno = r.u32()? as i32;
    let step = r.string()?.ok_or_else(|| bad("no step"))?;
    let subject = r.string()?.ok_or_else(|| bad("no subject"))?;
    let reason = r.string()?;
    if !r.0.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(Error::from_parts(kind, step, subject, has_errno.then_some(errno), reason, in_child))
}

/// Spawned body: the pid, i32 LE.
pub(crate) fn decode_pid(body: &[u8]) -> Result<i32> {
    match body {
        [a, b, c, d] => {
            let pid = i32::from_le_bytes([*a, *b, *c, *d]);
            if pid > 0 {
                Ok(pid)
            } else {
                Err(bad("pid not positive"))
            }
        }
        _ => Err(bad("spawned body is not 4 bytes")),
    }
}

/// Exit body: pid i32 LE, then 0 + code i32 LE, or 1 + signal i32 LE + core u8.
pub(crate) fn encode_exit(pid: i32, status: ExitStatus) -> Vec<u8> {
    let mut out = pid.to_le_bytes().to_vec();
    match status {
        ExitStatus::Exited(c) => {
            out.push(0);
            out.extend_from_slice(&c.to_le_bytes());
            out.push(0);
        }
        ExitStatus::Signaled { signal, core_dumped } => {
            out.push(1);
            out.extend_from_slice(&signal.to_le_bytes());
            out.push(core_dumped as u8);
        }
    }
    out
}

pub(crate) fn decode_exit(body: &[u8]) -> Result<(i32, ExitStatus)> {
    let mut r = Reader(body);
    let pid = r.u32()? as i32;
    let how = r.u8()?;
    let v = r.u32()? as i32;
    let core = r.u8()? != 0;
    if !r.0.is_empty() {
        return Err(bad("trailing bytes"));
    }
    match how {
        0 => Ok((pid, ExitStatus::Exited(v))),
        1 => Ok((pid, ExitStatus::Signaled { signal: v, core_dumped: core })),
        _ => Err(bad("unknown exit kind")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn errors_round_trip() {
        let e = Error::os("chdir", "\"/nope\"", libc::ENOENT).in_child();
        let mut b = Vec::new();
        encode_error(&e, &mut b);
        let d = decode_error(&b).unwrap();
        assert_eq!(d.to_string(), e.to_string());
        assert_eq!((d.step(), d.raw_os_error(), d.is_in_child()), ("chdir", Some(2), true));
        let s = ExitStatus::Signaled { signal: 9, core_dumped: false };
        assert_eq!(decode_exit(&encode_exit(5, s)).unwrap(), (5, s));
    }

    proptest! {
        #[test]
        fn arbitrary_reply_bodies(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_error(&b);
            let _ = decode_exit(&b);
            let _ = decode_pid(&b);
        }
    }
}
