//! `spawnkit ps` (to be written).

/// List processes.
#[derive(Debug, clap::Args)]
pub struct PsArgs {}

pub fn main(_args: &PsArgs) -> i32 {
    0
}
