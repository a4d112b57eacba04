//! `tree ...`: a known process tree for the listing tests (to be written).

pub fn main(_args: &[String]) {}
