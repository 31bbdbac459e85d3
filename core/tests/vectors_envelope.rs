//! Golden envelope and reject vectors (being written).
fn main() {}
