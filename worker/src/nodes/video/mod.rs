//! The video nodes, over FFmpeg's libraries (cargo feature `video`, on by default).
//!
//! - [`nvdec`] — which decoder a stream gets: NVDEC's when the node holds a GPU grant,
//!   else the CPU's, and the fallback's reason, logged and on `/metrics`.
//! - [`convert`] — decoded pictures to packed BGR as OpenCV's FFmpeg backend converts them
//!   (what 1.0.4 reads files with), so frames match the reference byte for byte; NVDEC's
//!   semi-planar pictures laid out planar first, so they convert the same way.
//! - [`media`] — one video file or live source opened, demuxed and decoded; damage is
//!   typed, never concealed.
//! - [`decoding`] — [`media`] and [`convert`] on two threads of their own, frames handed to
//!   the node in order.
//! - [`reader`] — `videoflow.producers.video.VideoFileReader`: 1.0.4's parameters, its
//!   `(index, frame)` outputs and event timestamps, over [`decoding`].
//! - [`images`] — 1.0.4's `ImageProducer` and `ImageFolderReader`: still images through
//!   FFmpeg's image decoders, RGB as `cv2.imread(...)[..., ::-1]`.
//! - [`check`] — what a sample's self-check reads back from a written video: frames, size,
//!   frames showing the box colour, and a PNG contact sheet.
//! - [`live`] — `VideoUrlReader` and `VideoDeviceReader`: a live URL or V4L2 device over
//!   [`decoding`], reopened with backoff when it fails, ends or stalls.
//! - [`compare`] — a file decoded as a CPU node and as the grant places it, compared frame
//!   by frame (`videoflow-worker gpu --decode`).
//! - [`encode`] — frames to a file through FFmpeg's encoders and muxers, on its own thread.
//! - [`writer`] — 1.0.4's `VideofileWriter` (`.avi`, Motion JPEG) and our H.264
//!   `VideoFileWriter` (MP4/MKV/MOV), over [`encode`].
//!
//! Why a feature: the statically linked musl worker (Dockerfile.worker, copied into user
//! images by the init container) has no libav to link. Built without it, the registry still
//! knows the video classes and refuses them with a `VF_CONFIG` error that says why, instead
//! of calling them unknown.

#[cfg(feature = "video")]
pub mod check;
#[cfg(feature = "video")]
pub mod compare;
#[cfg(feature = "video")]
mod convert;
#[cfg(feature = "video")]
mod decoding;
#[cfg(feature = "video")]
mod encode;
#[cfg(feature = "video")]
pub mod images;
#[cfg(feature = "video")]
pub mod live;
#[cfg(feature = "video")]
mod media;
#[cfg(feature = "video")]
pub mod nvdec;
#[cfg(feature = "video")]
pub mod reader;
#[cfg(feature = "video")]
pub mod writer;

use std::path::PathBuf;

use serde_json::Value as Json;
use videoflow_core::errors::{ErrorCode, VfError};

use super::params::Params;
use super::{Consumer, GpuPlacement, Producer};

/// The name of the binary that runs video nodes, installed next to `videoflow-worker`.
pub const VIDEO_BINARY: &str = "videoflow-worker-video";

/// The built-in classes that need FFmpeg, by canonical path (SelfCheck needs it only with a
/// `video_file`: `registry::needs_video`).
pub const CLASSES: &[&str] = &[
    "videoflow.producers.video.VideoFileReader",
    "videoflow.producers.video.VideoUrlReader",
    "videoflow.producers.video.VideoDeviceReader",
    "videoflow.producers.video.ImageProducer",
    "videoflow.producers.video.ImageFolderReader",
    "videoflow.consumers.video.VideofileWriter",
    "videoflow.rs.consumers.VideoFileWriter",
];

/// The video nodes' entry points, which only a binary that calls [`install`] holds.
///
/// Why installed at run time rather than called directly: a binary whose code never names
/// them is linked without FFmpeg's libraries (an unreferenced `--as-needed` library is
/// dropped), so `videoflow-worker` maps none of the ~215 shared libraries libav brings —
/// about 40 MiB resident per worker and a few CPU-µs a message of symbol binding
/// (docs/PERFORMANCE.md) — and hands video work to [`VIDEO_BINARY`], which installs them.
#[cfg(feature = "video")]
struct Library {
    builders: Builders,
    decode_twice: fn(&str, &GpuPlacement) -> Json,
    inspect: Inspect,
}

/// `check::inspect`: a written video read back for a self-check.
#[cfg(feature = "video")]
type Inspect =
    fn(&str, [u8; 3], Option<&str>, std::time::Duration) -> Result<check::VideoReport, String>;

#[cfg(feature = "video")]
static INSTALLED: std::sync::OnceLock<&'static Library> = std::sync::OnceLock::new();

#[cfg(feature = "video")]
static FFMPEG: Library = Library {
    builders: FFMPEG_BUILDERS,
    decode_twice: compare::decode_twice,
    inspect: check::inspect,
};

/// Makes the video nodes available in this process (what `videoflow-worker-video`'s `main`
/// does first; tests that build video nodes in process call it too). A build without the
/// `video` feature has none to install: its video classes stay refused.
pub fn install() {
    #[cfg(feature = "video")]
    let _ = INSTALLED.set(&FFMPEG);
}

#[cfg(feature = "video")]
fn installed() -> Option<&'static Library> {
    INSTALLED.get().copied()
}

/// Whether this process can run video nodes.
pub fn available() -> bool {
    #[cfg(feature = "video")]
    return installed().is_some();
    #[cfg(not(feature = "video"))]
    false
}

/// [`VIDEO_BINARY`] next to this process's executable, when this process cannot run video
/// nodes itself and that file exists.
pub fn sibling() -> Option<PathBuf> {
    if available() {
        return None;
    }
    let path = std::env::current_exe().ok()?.with_file_name(VIDEO_BINARY);
    path.is_file().then_some(path)
}

/// The built-in video classes' builders, `name(params, class)` (`class` names the node in
/// errors): the node `$build` makes from its params, boxed in its family; a process without
/// the video nodes refuses each one (see [`unavailable`]).
macro_rules! video_builders {
    ($( $(#[$doc:meta])* $name:ident -> $family:ident = $build:path; )*) => {
        /// The constructors [`Library`] holds.
        #[cfg(feature = "video")]
        struct Builders {
            $( $name: fn(&mut Params<'_>, &'static str) -> Result<Box<dyn $family>, VfError>, )*
        }

        #[cfg(feature = "video")]
        const FFMPEG_BUILDERS: Builders = Builders {
            $( $name: |p, class| $build(p, class).map(|n| Box::new(n) as Box<dyn $family>), )*
        };

        $(
            $(#[$doc])*
            pub(crate) fn $name(
                p: &mut Params<'_>,
                class: &'static str,
            ) -> Result<Box<dyn $family>, VfError> {
                #[cfg(feature = "video")]
                if let Some(library) = installed() {
                    return (library.builders.$name)(p, class);
                }
                let _ = p;
                Err(unavailable(class))
            }
        )*
    };
}

video_builders! {
    /// `VideoFileReader` from its params.
    file_reader -> Producer = reader::VideoFileReader::from_params;
    /// `VideoUrlReader` from its params.
    url_reader -> Producer = live::url_reader;
    /// `VideoDeviceReader` from its params.
    device_reader -> Producer = live::device_reader;
    /// 1.0.4's `VideofileWriter` from its params.
    reference_writer -> Consumer = writer::VideoWriter::reference;
    /// Our H.264 `VideoFileWriter` from its params.
    h264_writer -> Consumer = writer::VideoWriter::h264;
    /// `ImageProducer` from its params.
    image_producer -> Producer = images::ImageProducer::from_params;
    /// `ImageFolderReader` from its params.
    image_folder_reader -> Producer = images::ImageFolderReader::from_params;
}

/// `video_file` decoded as a CPU node and as `gpu` places it, compared
/// ([`compare::decode_twice`]); without the video nodes, what this process lacks.
pub fn decode_twice(video_file: &str, gpu: &GpuPlacement) -> Json {
    #[cfg(feature = "video")]
    if let Some(library) = installed() {
        return (library.decode_twice)(video_file, gpu);
    }
    let _ = gpu;
    serde_json::json!({"file": video_file, "error": missing_text()})
}

/// What reading a written video back found (`check::inspect`), for the self-check.
#[cfg(feature = "video")]
pub(crate) fn inspect(
    path: &str,
    box_color: [u8; 3],
    sheet: Option<&str>,
    wait: std::time::Duration,
) -> Result<check::VideoReport, String> {
    match installed() {
        Some(library) => (library.inspect)(path, box_color, sheet, wait),
        None => Err(missing_text()),
    }
}

/// Why this process has no video nodes, in a sentence.
pub(crate) fn missing_text() -> String {
    if cfg!(feature = "video") {
        format!(
            "this videoflow-worker runs video nodes in {VIDEO_BINARY}, which it looks for next \
             to itself and did not find"
        )
    } else {
        "this videoflow-worker was built without video support (the statically linked build \
         has no FFmpeg libraries)"
            .to_owned()
    }
}

/// What to do about [`missing_text`].
pub(crate) fn remedy() -> String {
    if cfg!(feature = "video") {
        format!(
            "Install {VIDEO_BINARY} beside videoflow-worker (the videoflow-worker image ships \
             both; `cargo build -p videoflow-worker` builds both), or start the node with \
             {VIDEO_BINARY} itself."
        )
    } else {
        "Run video nodes on the videoflow-worker image (it carries FFmpeg's libraries), or \
         build the worker with its default `video` feature."
            .to_owned()
    }
}

/// A `VF_CONFIG` error naming the video class this process cannot build, and why.
pub(crate) fn unavailable(class: &str) -> VfError {
    VfError::new(
        ErrorCode::Config,
        format!(
            "VF_NODE_CLASS ({class}) is a video node, and {}.",
            missing_text()
        ),
    )
    .with_remedy(remedy())
    .with_context("variable", "VF_NODE_CLASS")
    .with_context("class", class)
}
