//! spawnkit-observe: see processes cheaply. The process table (a BPF task iterator and a lean
//! /proc walker behind one interface), per-process memory from `smaps_rollup`, and anonymous
//! shared memory regions each counted once.
//!
//! ```no_run
//! use spawnkit_observe::{Backend, Fields, ProcessTable};
//!
//! let mut table = ProcessTable::new(Backend::Auto)?; // BPF when it loads, else /proc
//! for p in table.list(Fields { uid: true, cmdline: false })? {
//!     println!("{} {} {} {}", p.pid, p.ppid, p.state.letter(), p.comm);
//! }
//! let regions = spawnkit_observe::shared_regions()?; // each shmem object once
//! # Ok::<(), spawnkit::Error>(())
//! ```
//!
//! Errors are spawnkit's one [`spawnkit::Error`]: the step that failed, on what, and why.

#![deny(unsafe_code)]

mod memory;
mod parse;
mod proc_walk;
mod process;
mod reader;
mod select;
mod shared;
#[allow(unsafe_code)]
mod sys;
mod table;
mod task_iter;

pub use memory::*;
pub use process::{Backend, Comm, Fields, Process, State};
pub use select::Selection;
pub use shared::*;
pub use sys::localtime::local_time;
pub use table::*;
