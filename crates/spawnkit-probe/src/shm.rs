//! `shm-fixture ...`: a known shared anonymous region for the memory tests (to be written).

pub fn main(_args: &[String]) {}
