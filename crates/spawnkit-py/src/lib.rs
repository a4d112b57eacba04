//! `spawnkit._native`: the PyO3 glue between the spawn engine and the Python package.
//!
//! Glue only: `Command` is the engine's [`spawnkit::Command`] with one method per option
//! taking Python values; the glue releases the GIL around the spawn and every blocking wait,
//! and maps engine errors to the exceptions CPython's `subprocess` raises in the same
//! situation. `spawnkit.Command` subclasses the native `Command` (adding `spawn`, `output` and
//! `status`, which return the `subprocess`-compatible `Popen`), in `python/spawnkit/`.

mod child;
mod command;
mod convert;
mod errors;
mod observe;
mod preexec;
mod server;
mod zygote;

use pyo3::prelude::*;

/// `gil_used = true`: the module relies on the GIL. Without it a free-threaded CPython
/// (3.13t, 3.14t) would run it GIL-less, and the inherited environment, copied with the GIL
/// held so that no `os.environ` writer can free it mid-copy, would race those writers again.
#[pymodule(gil_used = true)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<child::Child>()?;
    observe::register(m)?;
    m.add_class::<command::Command>()?;
    m.add_class::<command::Starting>()?;
    m.add_class::<server::Server>()?;
    m.add_class::<zygote::Frames>()?;
    m.add_function(wrap_pyfunction!(zygote::frame_header, m)?)?;
    m.add_function(wrap_pyfunction!(zygote::auth_nonce, m)?)?;
    m.add_function(wrap_pyfunction!(zygote::auth_answer, m)?)?;
    m.add_function(wrap_pyfunction!(zygote::auth_check_answer, m)?)?;
    m.add_function(wrap_pyfunction!(zygote::auth_check_welcome, m)?)?;
    m.add_function(wrap_pyfunction!(zygote::remote_child, m)?)?;
    m.add_function(wrap_pyfunction!(reap_orphans, m)?)?;
    m.add_function(wrap_pyfunction!(uses_clone3, m)?)?;
    m.add("STRATEGIES", spawnkit::Strategy::ALL.map(|s| s.name()).to_vec())?;
    m.add("RLIM_INFINITY", spawnkit::RLIM_INFINITY)?;
    m.add("NAMESPACES", spawnkit::Namespaces::from_bits(u64::MAX).names())?;
    Ok(())
}

/// Reap children whose handle was dropped while they ran; returns how many still run.
#[pyfunction]
fn reap_orphans(py: Python<'_>) -> usize {
    py.detach(spawnkit::reap_orphans)
}

/// Whether the clone-vfork strategy uses clone3 in this process (false after a fallback).
#[pyfunction]
fn uses_clone3() -> bool {
    spawnkit::uses_clone3()
}
