//! `videoflow.producers.video.VideoFileReader` (and its old name `VideofileReader`): the
//! frames of a local video file, as 1.0.4 returns them.

use videoflow_core::envelope::Payload;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::partition::py_repr_str;
use videoflow_core::value::{Tensor, Value};

use super::decoding::{DecodedFrame, Decoding};
use super::media::{Damage, OpenFailure, libavcodec_version, supported_codecs};
use crate::clock::wall_now;
use crate::nodes::params::Params;
use crate::nodes::{NodeContext, Producer};

/// How each frame's event time is stamped (1.0.4 `TIMESTAMP_SOURCES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampSource {
    /// `clock`: the wall clock when the frame was read.
    Clock,
    /// `position`: the frame's place on the file's own timeline (OpenCV's
    /// `CAP_PROP_POS_MSEC / 1000`).
    Position,
}

/// The reader; see the module docs. Each `next()` returns the tuple `(index, frame)`: the
/// index counts from 1, the frame is a `uint8` tensor `[height, width, 3]` in BGR order (RGB
/// with `swap_channels`). It ends after the last frame, or once `nb_frames` were returned
/// (`-1`: all). A file that cannot be read is a `VF_CONFIG` error at `open()`; damage found
/// while reading ends the file with a `VF_POISON` error after the frames before it.
pub struct VideoFileReader {
    class: &'static str,
    video_file: String,
    swap_channels: bool,
    nb_frames: i64,
    timestamp_source: TimestampSource,
    decoder_threads: usize,
    frame_count: i64,
    media: Option<Decoding>,
    ended: bool,
}

impl std::fmt::Debug for VideoFileReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VideoFileReader")
            .field("video_file", &self.video_file)
            .field("swap_channels", &self.swap_channels)
            .field("nb_frames", &self.nb_frames)
            .field("timestamp_source", &self.timestamp_source)
            .field("frame_count", &self.frame_count)
            .field("open", &self.media.is_some())
            .finish()
    }
}

/// `timestamp_source` from the params (`default` when absent), refused as 1.0.4's
/// constructor refuses it.
pub(crate) fn timestamp_source(
    p: &mut Params<'_>,
    class: &'static str,
    default: &str,
) -> Result<TimestampSource, VfError> {
    let source = p.string("timestamp_source", default)?;
    match source.as_str() {
        "clock" => Ok(TimestampSource::Clock),
        "position" => Ok(TimestampSource::Position),
        // 1.0.4 raises ValueError in the constructor with this text.
        other => Err(VfError::new(
            ErrorCode::Config,
            format!(
                "timestamp_source must be one of ('clock', 'position'), got {}",
                py_repr_str(other)
            ),
        )
        .with_remedy("Set timestamp_source to 'clock' or 'position'.")
        .with_context("variable", "VF_NODE_PARAMS_JSON")
        .with_context("class", class)
        .with_context("param", "timestamp_source")),
    }
}

/// `decoder_threads` (ours): the decoder's thread count, `0` for FFmpeg's automatic one (a
/// thread per core of the machine plus one, which in a pod with a CPU limit is more than it
/// may use); `default` when absent.
pub(crate) fn decoder_threads(p: &mut Params<'_>, default: i64) -> Result<usize, VfError> {
    let n = p.int("decoder_threads", default)?;
    match usize::try_from(n) {
        Ok(n) if n <= 64 => Ok(n),
        _ => Err(p.bad(
            "decoder_threads",
            "a thread count from 0 (automatic) to 64",
            &serde_json::Value::from(n),
        )),
    }
}

/// The refusal of a reader that must decode on its GPU (`gpu.fallback: none`) when NVDEC
/// cannot: `VF_RESOURCE_UNAVAILABLE`, like a grant the node cannot run without (GPU-3).
pub(crate) fn gpu_required(class: &str, what: &str, source: &str, why: &str) -> VfError {
    VfError::new(
        ErrorCode::ResourceUnavailable,
        format!(
            "{class}: {what} {} must be decoded on the GPU (gpu.fallback: none), and NVDEC \
             cannot: {why}.",
            py_repr_str(source)
        ),
    )
    .with_remedy(
        "Give the worker NVDEC (the NVIDIA driver with its video capability), or declare \
         gpu.fallback: cpu to decode on the CPU when NVDEC cannot.",
    )
    .with_context("class", class.to_owned())
    .with_context(what, source.to_owned())
}

impl VideoFileReader {
    /// 1.0.4's constructor: `video_file` (required), `swap_channels=False`, `nb_frames=-1`,
    /// `timestamp_source='position'`; ours: `decoder_threads` (0: automatic).
    pub(crate) fn from_params(p: &mut Params<'_>, class: &'static str) -> Result<Self, VfError> {
        let video_file = p.required_string("video_file")?;
        let swap_channels = p.bool("swap_channels", false)?;
        let nb_frames = p.int("nb_frames", -1)?;
        let timestamp_source = timestamp_source(p, class, "position")?;
        let decoder_threads = decoder_threads(p, 0)?;
        Ok(VideoFileReader {
            class,
            video_file,
            swap_channels,
            nb_frames,
            timestamp_source,
            decoder_threads,
            frame_count: 0,
            media: None,
            ended: false,
        })
    }

    fn open_error(&self, failure: OpenFailure) -> VfError {
        let file = py_repr_str(&self.video_file);
        let supported = supported_codecs().join(", ");
        let (what, remedy) = match failure {
            OpenFailure::Missing => (
                format!("video_file {file} does not exist"),
                "Point video_file at an existing video file (a relative path is relative to \
                 the worker's working directory)."
                    .to_owned(),
            ),
            OpenFailure::NotAFile => (
                format!("video_file {file} is not a regular file"),
                "Point video_file at a video file, not a directory or device.".to_owned(),
            ),
            OpenFailure::BadPath => (
                format!("video_file {file} contains a NUL character"),
                "Fix the path in the node's params.".to_owned(),
            ),
            OpenFailure::Unreadable(e) => (
                format!("video_file {file} cannot be read: {e}"),
                "Make the file readable by the worker's user.".to_owned(),
            ),
            OpenFailure::NotMedia(e) | OpenFailure::Unreachable(e) => (
                format!(
                    "video_file {file} is not a video file this worker can read (FFmpeg: {e}); \
                     a file whose header is damaged or missing (e.g. an MP4 cut short before \
                     its index was written) reads the same"
                ),
                format!(
                    "Use a video file in a container FFmpeg reads (MP4/MOV, Matroska/WebM, \
                     AVI, MPEG-TS, …) with a supported codec: {supported}."
                ),
            ),
            OpenFailure::NoVideoStream => (
                format!("video_file {file} has no video stream"),
                format!("Use a file with a video stream in a supported codec: {supported}."),
            ),
            OpenFailure::UnsupportedCodec(codec) => (
                format!(
                    "video_file {file} is coded with {codec}, which this worker's FFmpeg \
                     (libavcodec {}) cannot decode",
                    libavcodec_version()
                ),
                format!("Re-encode the file with a supported codec: {supported}."),
            ),
            OpenFailure::GpuRequired(why) => {
                return gpu_required(self.class, "video_file", &self.video_file, &why);
            }
            OpenFailure::Thread(e) => {
                return VfError::new(
                    ErrorCode::ResourceExhausted,
                    format!("{}: cannot start decoding {file}: {e}.", self.class),
                )
                .with_context("class", self.class)
                .with_context("file", self.video_file.clone());
            }
            OpenFailure::DecoderFailed(codec, e) => (
                format!("video_file {file}: the {codec} decoder refused the stream ({e})"),
                format!("Re-encode the file with a supported codec: {supported}."),
            ),
        };
        VfError::new(ErrorCode::Config, format!("{}: {what}.", self.class))
            .with_remedy(remedy)
            .with_context("variable", "VF_NODE_PARAMS_JSON")
            .with_context("class", self.class)
            .with_context("param", "video_file")
            .with_context("file", self.video_file.clone())
    }

    fn damage_error(&self, damage: Damage) -> VfError {
        let delivered = self.frame_count;
        let place = match damage.byte_offset {
            Some(offset) => format!("after frame {delivered}, at byte offset {offset}"),
            None => format!("after frame {delivered}"),
        };
        let mut e = VfError::new(
            ErrorCode::Poison,
            format!(
                "{}: video_file {} is damaged {place}: {}.",
                self.class,
                py_repr_str(&self.video_file),
                damage.reason
            ),
        )
        .with_remedy(
            "The frames before the damage were delivered. Repair or re-encode the file, or \
             set nb_frames to stop before the damage.",
        )
        .with_context("class", self.class)
        .with_context("file", self.video_file.clone())
        .with_context("frames_delivered", delivered);
        if let Some(offset) = damage.byte_offset {
            e = e.with_context("byte_offset", offset);
        }
        e
    }

    /// Releases the file and its decoding thread.
    fn stop(&mut self) {
        if let Some(media) = self.media.take() {
            media.stop();
        }
    }

    fn output(&self, frame: DecodedFrame) -> Payload {
        let shape = vec![i64::from(frame.height), i64::from(frame.width), 3];
        let tensor = Tensor::new(shape, "uint8", frame.data);
        Payload::Value(Value::List(vec![
            Value::Int(self.frame_count),
            Value::Tensor(tensor),
        ]))
    }
}

impl Producer for VideoFileReader {
    fn open(&mut self, ctx: &mut NodeContext) -> Result<(), VfError> {
        if self.media.is_none() && !self.ended {
            let media = Decoding::start(
                &self.video_file,
                self.swap_channels,
                self.decoder_threads,
                &ctx.gpu,
            )
            .map_err(|f| self.open_error(f))?;
            media
                .decoder()
                .announce(self.class, &self.video_file, &ctx.node_name, None);
            self.media = Some(media);
        }
        Ok(())
    }

    fn next(&mut self, ctx: &mut NodeContext) -> Result<Option<Payload>, VfError> {
        // 1.0.4 compares before reading, so nb_frames = 0 returns nothing and a negative
        // value never stops it.
        if self.frame_count == self.nb_frames || self.ended {
            return Ok(None);
        }
        let Some(media) = self.media.as_mut() else {
            return Err(VfError::new(
                ErrorCode::NodeContract,
                format!(
                    "{}.next() called before open(). The capture object is created in open(), \
                     which the task runs in the worker — call open() first.",
                    self.class.rsplit('.').next().unwrap_or(self.class)
                ),
            ));
        };
        match media.next_frame() {
            Ok(Some(frame)) => {
                self.frame_count = self.frame_count.saturating_add(1);
                let ts = match self.timestamp_source {
                    TimestampSource::Position => frame.position_ms / 1000.0,
                    TimestampSource::Clock => wall_now(),
                };
                ctx.set_output_event_timestamp(ts);
                Ok(Some(self.output(frame)))
            }
            Ok(None) => {
                self.ended = true;
                self.stop();
                Ok(None)
            }
            Err(damage) => {
                self.ended = true;
                self.stop();
                Err(self.damage_error(damage))
            }
        }
    }

    /// Item `n` is the file's frame `n` (the tuple's index), whatever process decoded it.
    fn replayable(&self) -> bool {
        true
    }

    /// Decodes and drops the first `offset` frames: exact whatever the file's keyframe
    /// spacing, where a container seek lands on a keyframe and would have to count anyway.
    fn seek(&mut self, offset: u64) -> Result<(), VfError> {
        let target = i64::try_from(offset).unwrap_or(i64::MAX);
        while self.frame_count < target && self.frame_count != self.nb_frames && !self.ended {
            let Some(media) = self.media.as_mut() else {
                break;
            };
            match media.next_frame() {
                Ok(Some(_)) => self.frame_count = self.frame_count.saturating_add(1),
                Ok(None) => {
                    self.ended = true;
                    self.stop();
                }
                Err(damage) => {
                    self.ended = true;
                    self.stop();
                    return Err(self.damage_error(damage));
                }
            }
        }
        Ok(())
    }

    fn close(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        self.stop();
        Ok(())
    }
}
