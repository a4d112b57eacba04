//! Authentication of a spawn-server connection: the 32-byte key, and the mutual
//! HMAC-SHA256 challenge-response over fresh nonces, the direction bound into each MAC.
//!
//! ```text
//! server → client  Challenge  Ns (32 random bytes)
//! client → server  Answer     Nc (32 random bytes) ‖ HMAC(key, "spawnkit-1 client" ‖ Ns ‖ Nc)
//! server → client  Welcome    HMAC(key, "spawnkit-1 server" ‖ Ns ‖ Nc)      (or Failure)
//! ```
//! The client proves the key first, over the server's fresh nonce, so a recorded answer is
//! worth nothing on another connection (replay), and the server reveals a MAC only to a client
//! that has proved the key. The labels differ per direction, so the server's MAC can never be
//! passed off as a client's (reflection), nor the reverse.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use hmac::{KeyInit, Mac};

use crate::error::{quoted, Error, Result};
use crate::sys::sock;

/// Bytes in a key, a nonce and a MAC.
pub const KEY_LEN: usize = 32;
pub const NONCE_LEN: usize = 32;
pub const MAC_LEN: usize = 32;

const CLIENT_LABEL: &[u8] = b"spawnkit-1 client";
const SERVER_LABEL: &[u8] = b"spawnkit-1 server";

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// A spawn server's 32-byte secret. Its `Debug` shows nothing of it; it is wiped on drop.
#[derive(Clone)]
pub struct Key([u8; KEY_LEN]);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        // Best effort without unsafe code: zeroed, then passed through a black box so the
        // writes are not optimised away as dead stores.
        self.0.fill(0);
        std::hint::black_box(&self.0);
    }
}

impl Key {
    /// 32 bytes from the kernel's random generator (getrandom(2)).
    pub fn generate() -> Result<Key> {
        let mut k = [0u8; KEY_LEN];
        sock::random(&mut k).map_err(|e| Error::os("getrandom", "key", e))?;
        Ok(Key(k))
    }

    /// A key from its bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Key {
        Key(bytes)
    }

    /// Read a key file: exactly 32 bytes, a regular file that neither group nor others may
    /// read or write.
    pub fn read_file(path: &Path) -> Result<Key> {
        let err = |e: std::io::Error| {
            Error::os("open", quoted(path), e.raw_os_error().unwrap_or(libc::EIO))
        };
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(err)?;
        let meta = f.metadata().map_err(err)?;
        if !meta.is_file() || meta.mode() & 0o077 != 0 {
            return Err(Error::invalid(
                "key file",
                quoted(path),
                "not a regular file that only its owner can read (mode 0600)",
            ));
        }
        // Ours, or root's (a root server with --allow-uid gives the key to the allowed user):
        // a key another user wrote proves nothing about the server (root reads every file).
        let me = crate::sys::parent::geteuid();
        if meta.uid() != me && meta.uid() != 0 {
            return Err(Error::invalid(
                "key file",
                quoted(path),
                "not owned by this user or root: another user's key proves nothing",
            ));
        }
        let mut k = [0u8; KEY_LEN + 1];
        let mut n = 0;
        while n < k.len() {
            match f.read(&mut k[n..]) {
                Ok(0) => break,
                Ok(m) => n += m,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(err(e)),
            }
        }
        if n != KEY_LEN {
            return Err(Error::invalid("key file", quoted(path), "not exactly 32 bytes"));
        }
        let mut key = [0u8; KEY_LEN];
        key.copy_from_slice(&k[..KEY_LEN]);
        k.fill(0);
        Ok(Key(key))
    }

    /// Write the key to a new file, mode 0600 (refusing to overwrite anything but a key file
    /// of ours: an existing file is replaced only if it is a regular file we own, of mode
    /// 0600 and 32 bytes, as a key file left by an earlier server is).
    pub fn write_file(&self, path: &Path) -> Result<()> {
        self.write_file_for(path, None)
    }

    /// Whether a key may be written at `path`: nothing there, or a key file of ours (a
    /// regular file we own, of mode 0600 and 32 bytes, as an earlier server left it). Any
    /// other file is someone's, named by mistake, and never replaced.
    pub fn check_replaceable(path: &Path) -> Result<()> {
        let Ok(meta) = std::fs::symlink_metadata(path) else { return Ok(()) };
        if !meta.is_file() || meta.uid() != crate::sys::parent::geteuid() {
            return Err(Error::invalid(
                "key file",
                quoted(path),
                "exists and is not a regular file of ours",
            ));
        }
        if meta.mode() & 0o7777 != 0o600 || meta.len() != KEY_LEN as u64 {
            return Err(Error::invalid(
                "key file",
                quoted(path),
                "exists and is not a key file (mode 0600, 32 bytes): remove it or name another",
            ));
        }
        Ok(())
    }

    /// [`write_file`](Key::write_file), the file then given to `owner` through its open fd
    /// (never by path: a path can be swapped for a symlink between the write and a chown)
    /// before the key is written into it.
    pub fn write_file_for(&self, path: &Path, owner: Option<u32>) -> Result<()> {
        let err = |step, e: std::io::Error| {
            Error::os(step, quoted(path), e.raw_os_error().unwrap_or(libc::EIO))
        };
        Key::check_replaceable(path)?;
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(err("unlink", e)),
            _ => {}
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| err("open", e))?;
        f.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(|e| err("fchmod", e))?;
        if let Some(uid) = owner {
            std::os::unix::fs::fchown(&f, Some(uid), None).map_err(|e| err("fchown", e))?;
        }
        std::io::Write::write_all(&mut f, &self.0).map_err(|e| err("write", e))?;
        f.sync_all().map_err(|e| err("fsync", e))
    }

    fn mac(&self, label: &[u8], ns: &[u8], nc: &[u8]) -> HmacSha256 {
        // HMAC takes a key of any length: this cannot fail.
        let mut m = <HmacSha256 as KeyInit>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        m.update(label);
        m.update(ns);
        m.update(nc);
        m
    }
}

/// A fresh nonce.
pub fn nonce() -> Result<[u8; NONCE_LEN]> {
    let mut n = [0u8; NONCE_LEN];
    sock::random(&mut n).map_err(|e| Error::os("getrandom", "nonce", e))?;
    Ok(n)
}

/// The client's Answer body for the server's nonce `ns`: `Nc ‖ MAC`, and `Nc`.
pub fn client_answer(
    key: &Key,
    ns: &[u8; NONCE_LEN],
) -> Result<([u8; NONCE_LEN + MAC_LEN], [u8; NONCE_LEN])> {
    let nc = nonce()?;
    let tag = key.mac(CLIENT_LABEL, ns, &nc).finalize().into_bytes();
    let mut body = [0u8; NONCE_LEN + MAC_LEN];
    body[..NONCE_LEN].copy_from_slice(&nc);
    body[NONCE_LEN..].copy_from_slice(&tag);
    Ok((body, nc))
}

/// The server's check of an Answer body (exactly 64 bytes) for its nonce `ns`: the Welcome
/// body (the server's MAC) if the client proved the key, else `None`. Constant time.
pub fn server_check(key: &Key, ns: &[u8; NONCE_LEN], answer: &[u8]) -> Option<[u8; MAC_LEN]> {
    if answer.len() != NONCE_LEN + MAC_LEN {
        return None;
    }
    let (nc, tag) = answer.split_at(NONCE_LEN);
    key.mac(CLIENT_LABEL, ns, nc).verify_slice(tag).ok()?;
    let mut out = [0u8; MAC_LEN];
    out.copy_from_slice(&key.mac(SERVER_LABEL, ns, nc).finalize().into_bytes());
    Some(out)
}

/// The client's check of the Welcome body: the server proved the key over our nonce.
/// Constant time.
pub fn client_check(key: &Key, ns: &[u8; NONCE_LEN], nc: &[u8; NONCE_LEN], welcome: &[u8]) -> bool {
    welcome.len() == MAC_LEN && key.mac(SERVER_LABEL, ns, nc).verify_slice(welcome).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn both_sides_agree_and_directions_differ() {
        let key = Key::generate().unwrap();
        let ns = nonce().unwrap();
        let (answer, nc) = client_answer(&key, &ns).unwrap();
        let welcome = server_check(&key, &ns, &answer).expect("client proved the key");
        assert!(client_check(&key, &ns, &nc, &welcome));
        // Reflection: the server's MAC offered back as a client's answer fails.
        let mut reflected = [0u8; 64];
        reflected[..32].copy_from_slice(&nc);
        reflected[32..].copy_from_slice(&welcome);
        assert!(server_check(&key, &ns, &reflected).is_none());
        // Replay: the same answer against a fresh challenge fails.
        let ns2 = nonce().unwrap();
        assert!(server_check(&key, &ns2, &answer).is_none());
        // Wrong key.
        let other = Key::generate().unwrap();
        assert!(server_check(&other, &ns, &answer).is_none());
        assert!(!client_check(&other, &ns, &nc, &welcome));
    }

    proptest! {
        /// Arbitrary answers never pass and never panic.
        #[test]
        fn arbitrary_answers_fail(answer in proptest::collection::vec(any::<u8>(), 0..100)) {
            let key = Key::from_bytes([7; 32]);
            prop_assert!(server_check(&key, &[1; 32], &answer).is_none());
            prop_assert!(!client_check(&key, &[1; 32], &[2; 32], &answer));
        }
    }
}
