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

use videoflow_core::errors::VfError;

use super::params::Params;
use super::{Consumer, Producer};

/// The built-in video classes' builders, `name(params, class)` (`class` names the node in
/// errors): the node `$build` makes from its params, boxed in its family; a build without the
/// `video` feature refuses each one (see [`without_video`]).
macro_rules! video_builders {
    ($( $(#[$doc:meta])* $name:ident -> $family:ident = $build:path; )*) => {$(
        $(#[$doc])*
        #[cfg(feature = "video")]
        pub(crate) fn $name(
            p: &mut Params<'_>,
            class: &'static str,
        ) -> Result<Box<dyn $family>, VfError> {
            $build(p, class).map(|n| Box::new(n) as Box<dyn $family>)
        }

        /// Without the `video` feature: refused (see [`without_video`]).
        #[cfg(not(feature = "video"))]
        pub(crate) fn $name(
            _p: &mut Params<'_>,
            class: &'static str,
        ) -> Result<Box<dyn $family>, VfError> {
            Err(without_video(class))
        }
    )*};
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
/// ([`compare::decode_twice`]).
#[cfg(feature = "video")]
pub fn decode_twice(video_file: &str, gpu: &super::GpuPlacement) -> serde_json::Value {
    compare::decode_twice(video_file, gpu)
}

/// Without the `video` feature: what the build lacks.
#[cfg(not(feature = "video"))]
pub fn decode_twice(video_file: &str, _gpu: &super::GpuPlacement) -> serde_json::Value {
    serde_json::json!({
        "file": video_file,
        "error": "this videoflow-worker was built without video support (no FFmpeg libraries)",
    })
}

/// Without the `video` feature: a `VF_CONFIG` error naming the class and the build.
#[cfg(not(feature = "video"))]
fn without_video(class: &str) -> VfError {
    use videoflow_core::errors::ErrorCode;
    VfError::new(
        ErrorCode::Config,
        format!(
            "VF_NODE_CLASS ({class}) is a video node, and this videoflow-worker was built \
             without video support (the statically linked build has no FFmpeg libraries)."
        ),
    )
    .with_remedy(
        "Run video nodes on the videoflow-worker image (it carries FFmpeg's libraries), or \
         build the worker with its default `video` feature.",
    )
    .with_context("variable", "VF_NODE_CLASS")
    .with_context("class", class)
}
