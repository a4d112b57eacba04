//! `spawnkit mem` (to be written).

/// Per-process memory and shared regions.
#[derive(Debug, clap::Args)]
pub struct MemArgs {}

pub fn main(_args: &MemArgs) -> i32 {
    0
}
