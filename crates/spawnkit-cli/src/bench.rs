//! `spawnkit bench`: a short built-in comparison of spawn strategies (full suite: issue 4).

/// Options of `spawnkit bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Spawns per row.
    #[arg(long, default_value_t = 300)]
    pub runs: usize,
}

/// Run the benchmark; returns the process exit code.
pub fn main(args: &BenchArgs) -> i32 {
    println!("bench: {} runs (not implemented yet)", args.runs);
    0
}
