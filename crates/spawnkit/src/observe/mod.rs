//! Observation: the process table (two backends behind one interface), per-process memory from
//! `smaps_rollup`, and anonymous shared memory regions each counted once.

mod bpf;
mod memory;
pub(crate) mod parse;
mod process;
mod procfs;
mod reader;
mod shared;
mod table;

pub use memory::*;
pub use process::{Backend, Comm, Fields, Process, State};
pub use shared::*;
pub use table::*;
