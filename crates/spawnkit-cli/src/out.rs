//! What the subcommands share: the buffered stdout their reports go to, how a report stops
//! early ([`Failure`]: a closed stdout is no error), and writing that never panics ([`note!`],
//! [`print_stdout`]). One home for all of it, shared with `spawnkit bench`: spawnkit-bench's
//! `out` module, re-exported here under the name the subcommands use.

pub use spawnkit_bench::out::{note, print_stdout, stdout_writer, Failure};
