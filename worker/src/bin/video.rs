//! `videoflow-worker-video`: `videoflow-worker` with the video nodes installed, the binary
//! that maps FFmpeg's libraries. `videoflow-worker` hands video classes (and a self-check
//! that reads a video back, and `gpu --decode`) to it; it takes every other command too, so
//! either binary runs any node.

#[path = "../main.rs"]
mod worker;

fn main() -> std::process::ExitCode {
    videoflow_worker::nodes::video::install();
    worker::main()
}
