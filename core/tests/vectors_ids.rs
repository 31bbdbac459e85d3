//! Golden message-id, join and partition vectors (being written).
fn main() {}
