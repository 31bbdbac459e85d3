//! `videoflow-worker`: runs one node replica (the runtime lands with issue #3).

fn main() {
    println!("videoflow-worker {}", env!("CARGO_PKG_VERSION"));
}
