//! The subcommands' output: spawnkit-bench's `out` module, re-exported (one home for both).
//!
//! The buffered stdout reports go to ([`stdout_writer`]), how a report stops early
//! ([`Failure`]: a closed stdout is no error), and writing that never panics ([`note!`],
//! [`print_stdout`]), shared with `spawnkit bench`.

pub use spawnkit_bench::out::{
    note, print_stdout, stdout_closed_at_start, stdout_open, stdout_writer, Failure,
};
