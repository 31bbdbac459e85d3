//! The video nodes, over FFmpeg's libraries (cargo feature `video`, on by default).
//!
//! - [`media`] — one local video file opened, decoded and converted to packed BGR as
//!   OpenCV's FFmpeg backend does it (what 1.0.4 reads files with), so frames match the
//!   reference byte for byte; damage is typed, never concealed.
//! - [`reader`] — `videoflow.producers.video.VideoFileReader`: 1.0.4's parameters, its
//!   `(index, frame)` outputs and event timestamps, over [`media`].
//!
//! Why a feature: the statically linked musl worker (Dockerfile.worker, copied into user
//! images by the init container) has no libav to link. Built without it, the registry still
//! knows the video classes and refuses them with a `VF_CONFIG` error that says why, instead
//! of calling them unknown.

#[cfg(feature = "video")]
mod media;
#[cfg(feature = "video")]
pub mod reader;

use videoflow_core::errors::VfError;

use super::Producer;
use super::params::Params;

/// `VideoFileReader` from its params (`class` names it in errors).
#[cfg(feature = "video")]
pub(crate) fn file_reader(
    p: &mut Params<'_>,
    class: &'static str,
) -> Result<Box<dyn Producer>, VfError> {
    reader::VideoFileReader::from_params(p, class).map(|r| Box::new(r) as Box<dyn Producer>)
}

/// Without the `video` feature: a `VF_CONFIG` error naming the class and the build.
#[cfg(not(feature = "video"))]
pub(crate) fn file_reader(
    _p: &mut Params<'_>,
    class: &'static str,
) -> Result<Box<dyn Producer>, VfError> {
    Err(without_video(class))
}

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
