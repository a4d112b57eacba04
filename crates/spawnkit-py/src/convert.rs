//! Python values to the bytes the engine takes, the way CPython's `PyUnicode_FSConverter`
//! (and so `subprocess`) converts them: `str` with the file system encoding and
//! `surrogateescape`, `bytes` as they are, `os.PathLike` through `os.fspath`; a NUL byte is
//! `ValueError: embedded null byte`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyString};

/// Whether the file system encoding is UTF-8 (then a `str` that is valid UTF-8 is its own
/// encoding; anything else goes through `os.fsencode`).
static FS_UTF8: PyOnceLock<bool> = PyOnceLock::new();

fn fs_is_utf8(py: Python<'_>) -> bool {
    *FS_UTF8.get_or_init(py, || {
        py.import("sys")
            .and_then(|sys| sys.call_method0("getfilesystemencoding"))
            .and_then(|e| e.extract::<String>())
            .map(|e| matches!(e.to_ascii_lowercase().as_str(), "utf-8" | "utf8"))
            .unwrap_or(false)
    })
}

/// `os.fsencode(obj)` plus the NUL check.
pub(crate) fn fs_bytes(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let bytes = fs_bytes_unchecked(obj, true)?;
    if bytes.contains(&0) {
        return Err(PyValueError::new_err("embedded null byte"));
    }
    Ok(bytes)
}

fn fs_bytes_unchecked(obj: &Bound<'_, PyAny>, follow_fspath: bool) -> PyResult<Vec<u8>> {
    let py = obj.py();
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        if fs_is_utf8(py) {
            if let Ok(text) = s.to_str() {
                return Ok(text.as_bytes().to_vec());
            }
        }
        // Surrogate escapes or another file system encoding: exactly what os.fsencode does.
        let encoded = py.import("os")?.call_method1("fsencode", (s,))?;
        return Ok(encoded.cast::<PyBytes>()?.as_bytes().to_vec());
    }
    if !follow_fspath {
        return Err(pyo3::exceptions::PyTypeError::new_err("os.fspath returned a non-path"));
    }
    // os.PathLike, or the TypeError os.fspath raises ("expected str, bytes or os.PathLike
    // object, not int"), the same message CPython's converter gives.
    let path = py.import("os")?.call_method1("fspath", (obj,))?;
    fs_bytes_unchecked(&path, false)
}

/// [`fs_bytes`] as an `OsString`.
pub(crate) fn fs_os(obj: &Bound<'_, PyAny>) -> PyResult<OsString> {
    fs_bytes(obj).map(OsString::from_vec)
}
