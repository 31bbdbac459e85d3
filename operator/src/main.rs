//! `videoflow-operator`: the Kubernetes controller (lands with issue #7).

fn main() {
    println!("videoflow-operator {}", env!("CARGO_PKG_VERSION"));
}
