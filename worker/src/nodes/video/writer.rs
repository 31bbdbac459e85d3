//! The video writers: `videoflow.consumers.video.VideofileWriter` (1.0.4's: `.avi`, Motion
//! JPEG) and ours, `videoflow.rs.consumers.VideoFileWriter` (H.264 through libx264 in MP4,
//! Matroska or MOV).
//!
//! Both open the file on the first frame, whose size becomes the file's (a later frame of
//! another size is scaled to it, as 1.0.4 resizes it), and finish it — the encoder drained,
//! the trailer written — at `close()`: until then the file is not playable, as with 1.0.4.

use ffmpeg_next::Rational;
use videoflow_core::envelope::Payload;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::partition::py_repr_str;
use videoflow_core::value::{Tensor, Value};

use super::encode::{Codec, Encoding, Picture};
use crate::nodes::params::Params;
use crate::nodes::{Consumer, Input, NodeContext};

/// A writer of either kind; see the module docs.
pub struct VideoWriter {
    class: &'static str,
    video_file: String,
    swap_channels: bool,
    fps: Rational,
    codec: Codec,
    encoding: Option<Encoding>,
    frames: u64,
}

impl std::fmt::Debug for VideoWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VideoWriter")
            .field("class", &self.class)
            .field("video_file", &self.video_file)
            .field("codec", &self.codec)
            .field("frames", &self.frames)
            .finish_non_exhaustive()
    }
}

/// A frame rate as a fraction: whole rates exactly, others to the millisecond (OpenCV's
/// writer rounds the same way).
fn rate(p: &Params<'_>, fps: f64) -> Result<Rational, VfError> {
    if !(fps > 0.0 && fps <= 1000.0) {
        return Err(p.bad(
            "fps",
            "a frame rate above 0 and at most 1000",
            &serde_json::json!(fps),
        ));
    }
    if fps.fract() == 0.0 {
        return Ok(Rational::new(fps as i32, 1));
    }
    Ok(Rational::new((fps * 1000.0).round() as i32, 1000))
}

impl VideoWriter {
    /// 1.0.4's `VideofileWriter(video_file, swap_channels=True, fps=30)`: `.avi` only.
    pub(crate) fn reference(p: &mut Params<'_>, class: &'static str) -> Result<Self, VfError> {
        let video_file = p.required_string("video_file")?;
        let swap_channels = p.bool("swap_channels", true)?;
        let fps = p.float("fps", 30.0)?;
        let fps = rate(p, fps)?;
        // 1.0.4 raises ValueError in the constructor with this text.
        if !video_file.ends_with(".avi") {
            return Err(VfError::new(ErrorCode::Config, "Only .avi format is supported")
                .with_remedy("Give video_file an .avi name, or use videoflow.rs.consumers.VideoFileWriter for MP4/MKV.")
                .with_context("variable", "VF_NODE_PARAMS_JSON")
                .with_context("class", class)
                .with_context("param", "video_file"));
        }
        Ok(VideoWriter::new(
            class,
            video_file,
            swap_channels,
            fps,
            Codec::Mjpeg,
        ))
    }

    /// Ours: `video_file` (`.mp4`, `.mkv`, `.mov`), `fps=30`, `swap_channels=False` (frames
    /// are BGR, as the readers return them), `crf=23`, `preset='medium'`.
    pub(crate) fn h264(p: &mut Params<'_>, class: &'static str) -> Result<Self, VfError> {
        let video_file = p.required_string("video_file")?;
        let swap_channels = p.bool("swap_channels", false)?;
        let fps = p.float("fps", 30.0)?;
        let fps = rate(p, fps)?;
        let crf = p.int("crf", 23)?;
        let crf = u32::try_from(crf)
            .ok()
            .filter(|c| *c <= 51)
            .ok_or_else(|| p.bad("crf", "an integer from 0 to 51", &serde_json::json!(crf)))?;
        let preset = p.string("preset", "medium")?;
        const PRESETS: &[&str] = &[
            "ultrafast",
            "superfast",
            "veryfast",
            "faster",
            "fast",
            "medium",
            "slow",
            "slower",
            "veryslow",
        ];
        if !PRESETS.contains(&preset.as_str()) {
            return Err(p.bad(
                "preset",
                &format!("one of {}", PRESETS.join(", ")),
                &serde_json::json!(preset),
            ));
        }
        let lower = video_file.to_ascii_lowercase();
        if ![".mp4", ".mkv", ".mov"]
            .iter()
            .any(|ext| lower.ends_with(ext))
        {
            return Err(p.bad(
                "video_file",
                "a path ending in .mp4, .mkv or .mov",
                &serde_json::json!(video_file),
            ));
        }
        Ok(VideoWriter::new(
            class,
            video_file,
            swap_channels,
            fps,
            Codec::H264 { crf, preset },
        ))
    }

    fn new(
        class: &'static str,
        video_file: String,
        swap_channels: bool,
        fps: Rational,
        codec: Codec,
    ) -> Self {
        VideoWriter {
            class,
            video_file,
            swap_channels,
            fps,
            codec,
            encoding: None,
            frames: 0,
        }
    }

    fn failed(&self, what: &str, e: String) -> VfError {
        VfError::new(
            ErrorCode::WorkerFatal,
            format!(
                "{}: {what} {}: {e}.",
                self.class,
                py_repr_str(&self.video_file)
            ),
        )
        .with_context("class", self.class)
        .with_context("file", self.video_file.clone())
        .with_context("frames_written", self.frames)
    }
}

/// The frame of an input: a bare `uint8` `[H, W, 3]` tensor, or the frame of a reader's
/// `(index, frame)` tuple.
fn frame_of(inputs: &[Input]) -> Result<&Tensor, VfError> {
    let tensor = match inputs {
        [Input::Present(Payload::Tensor(t))] => Some(t),
        [Input::Present(Payload::Value(Value::Tensor(t)))] => Some(t),
        [Input::Present(Payload::Value(Value::List(items)))] => match items.as_slice() {
            [Value::Int(_), Value::Tensor(t)] => Some(t),
            _ => None,
        },
        _ => None,
    };
    let schema = |what: String| {
        VfError::new(ErrorCode::PoisonSchema, what).with_remedy(
            "Send uint8 frames of shape [height, width, 3] (or a reader's (index, frame)).",
        )
    };
    let t =
        tensor.ok_or_else(|| schema("a video writer takes one frame per message".to_owned()))?;
    match t.shape.as_slice() {
        [h, w, 3] if *h > 0 && *w > 0 && t.dtype == "uint8" => Ok(t),
        _ => Err(schema(format!(
            "a video writer takes uint8 frames of shape [height, width, 3], got {} {:?}",
            t.dtype, t.shape
        ))),
    }
}

impl Consumer for VideoWriter {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        if parents == 1 {
            return Ok(());
        }
        Err(VfError::new(
            ErrorCode::NodeContract,
            format!(
                "{} writes one stream of frames: it takes 1 parent, not {parents}.",
                self.class
            ),
        ))
    }

    fn consume(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<(), VfError> {
        let t = frame_of(inputs)?;
        let (h, w) = (t.shape[0], t.shape[1]);
        let (Ok(height), Ok(width)) = (u32::try_from(h), u32::try_from(w)) else {
            return Err(VfError::new(
                ErrorCode::PoisonSchema,
                format!("a frame of {w}×{h} is too large"),
            ));
        };
        let picture = Picture {
            width,
            height,
            rgb: self.swap_channels,
            data: t.data.clone(),
        };
        if self.encoding.is_none() {
            let encoding = Encoding::start(
                &self.video_file,
                self.codec.clone(),
                width,
                height,
                self.fps,
            )
            .map_err(|e| {
                VfError::new(
                    ErrorCode::Config,
                    format!(
                        "{}: cannot write video_file {}: {e}.",
                        self.class,
                        py_repr_str(&self.video_file)
                    ),
                )
                .with_remedy("The folder must exist and be writable.")
                .with_context("class", self.class)
                .with_context("param", "video_file")
                .with_context("file", self.video_file.clone())
            })?;
            self.encoding = Some(encoding);
        }
        let written = match self.encoding.as_mut() {
            Some(encoding) => encoding.write(picture),
            None => Err("not open".to_owned()),
        };
        match written {
            Ok(()) => {
                self.frames += 1;
                Ok(())
            }
            Err(e) => {
                self.encoding = None;
                Err(self.failed("writing", e))
            }
        }
    }

    fn close(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        match self.encoding.take() {
            Some(encoding) => encoding
                .finish()
                .map(|_| ())
                .map_err(|e| self.failed("finishing", e)),
            None => Ok(()),
        }
    }
}
