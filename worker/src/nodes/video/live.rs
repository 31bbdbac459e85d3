//! `videoflow.producers.video.VideoUrlReader` and `VideoDeviceReader`: frames of a live
//! source (an RTSP/HTTP/… URL, or a V4L2 capture device), as 1.0.4 returns them, kept alive
//! across the ways such sources fail.
//!
//! 1.0.4's loop, kept: a read that fails counts one frame index (so the first frame after a
//! reconnection has the index after the lost one plus one), and each reopening counts one
//! of `nb_retries` over the reader's whole life. What is added (docs/COMPATIBILITY.md): a
//! negative `nb_retries` retries forever; reopenings wait a backoff (none before the first,
//! then 0.25 s doubling to 5 s; a delivered frame resets it); a source that delivers no
//! packet for `stall_timeout_s` (default 30 s, OpenCV's own read and open timeout) counts as
//! failed and is reopened; every connection starts at a keyframe; running out of retries
//! after a failure is a `VF_RESOURCE_UNAVAILABLE` error naming the source (after a clean end
//! of stream it is end of input, as in 1.0.4). Waits end early when the runtime stops the
//! node.

use std::time::{Duration, Instant};

use serde_json::Value as Json;
use videoflow_core::envelope::Payload;
use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::partition::py_repr_str;
use videoflow_core::redact::redact_url;
use videoflow_core::value::{Tensor, Value};

use super::decoding::{DecodedFrame, Decoding};
use super::media::{LiveSource, OpenFailure, Source, supported_codecs};
use super::nvdec::DecoderInUse;
use super::reader::{TimestampSource, decoder_threads, gpu_required, timestamp_source};
use crate::clock::wall_now;
use crate::nodes::params::Params;
use crate::nodes::{NodeContext, Producer};

/// No wait before the first reopening after a frame was delivered (1.0.4 reopens at once);
/// then this, doubling per failed attempt in a row…
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
/// …up to this.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// The default `stall_timeout_s`: OpenCV's FFmpeg backend gives up an open or a read after
/// 30 s (`LIBAVFORMAT_INTERRUPT_OPEN/READ_DEFAULT_TIMEOUT_MS`).
const DEFAULT_STALL_TIMEOUT_S: f64 = 30.0;
/// The default `decoder_threads` of a live source: one. A live source arrives in real time,
/// and one thread decodes 1080p H.264 many times faster than that (about 240 frames per
/// second on the 2-core test machine); each frame thread would add a frame of latency and
/// its pictures' memory (about 9 MB at 1080p), and FFmpeg's automatic count follows the
/// machine's cores, not the pod's limit. A 4K or high-rate source can ask for more.
const LIVE_DECODER_THREADS: i64 = 1;

/// How often a backoff wait looks at the runtime's stop request and beats the health loop.
const WAIT_SLICE: Duration = Duration::from_millis(50);
/// Decoding threads of given-up connections still blocked in FFmpeg (each ends within its
/// socket timeout): at most this many before a new connection waits for one to end.
const MAX_LINGERING: usize = 2;

/// Which reference class this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Url,
    Device,
}

/// How the last connection ended.
#[derive(Debug, Clone, PartialEq)]
enum Loss {
    /// The source said end of stream.
    Ended,
    /// It could not be opened, failed while reading, or stalled (the reason).
    Failed(String),
}

/// The reader; see the module docs. Each `next()` returns `(index, frame)`: the index
/// counts from 1 (and skips one per failed read, as 1.0.4's), the frame a `uint8` tensor
/// `[height, width, 3]` in RGB order (1.0.4's default `swap_channels=True`), BGR without.
pub struct LiveReader {
    class: &'static str,
    kind: Kind,
    /// The source as errors and logs show it (credentials masked).
    shown: String,
    source: LiveSource,
    swap_channels: bool,
    nb_frames: i64,
    nb_retries: i64,
    timestamp_source: TimestampSource,
    frame_count: i64,
    retries: i64,
    /// Lost or failed connections since the last delivered frame (for the backoff).
    failures_in_row: u32,
    last_loss: Option<Loss>,
    media: Option<Decoding>,
    /// The decoder of the last connection (a fallback to the CPU is warned about once per
    /// reason, not at every reconnection).
    last_decoder: Option<DecoderInUse>,
    /// See [`MAX_LINGERING`].
    lingering: Vec<std::thread::JoinHandle<()>>,
    ended: bool,
}

impl std::fmt::Debug for LiveReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveReader")
            .field("class", &self.class)
            .field("source", &self.shown)
            .field("nb_frames", &self.nb_frames)
            .field("nb_retries", &self.nb_retries)
            .field("frame_count", &self.frame_count)
            .field("retries", &self.retries)
            .field("open", &self.media.is_some())
            .finish()
    }
}

/// `VideoUrlReader` from its params: 1.0.4's `url` (required), `nb_frames=-1`,
/// `nb_retries=0`, `swap_channels=True`, `timestamp_source='clock'`; ours:
/// `rtsp_transport` (`auto` — TCP preferred, as OpenCV asks FFmpeg — `tcp` or `udp`),
/// `stall_timeout_s` and `decoder_threads` (default [`LIVE_DECODER_THREADS`]).
pub(crate) fn url_reader(p: &mut Params<'_>, class: &'static str) -> Result<LiveReader, VfError> {
    let url = p.required_string("url")?;
    if url.is_empty() || url.contains('\0') {
        return Err(config(
            class,
            "url",
            format!(
                "{class}: url {} is not a URL",
                py_repr_str(&redact_url(&url))
            ),
            "Set url to the stream's address, e.g. 'rtsp://camera.local:554/stream'.",
        ));
    }
    let transport = p.string("rtsp_transport", "auto")?;
    let mut options = Vec::new();
    match transport.as_str() {
        // What OpenCV's FFmpeg backend sets when OPENCV_FFMPEG_CAPTURE_OPTIONS is unset.
        "auto" => options.push(("rtsp_flags", "prefer_tcp".to_owned())),
        "tcp" | "udp" => options.push(("rtsp_transport", transport.clone())),
        other => {
            return Err(config(
                class,
                "rtsp_transport",
                format!(
                    "{class}: rtsp_transport must be 'auto', 'tcp' or 'udp', got {}",
                    py_repr_str(other)
                ),
                "Set rtsp_transport to 'auto' (TCP preferred), 'tcp' or 'udp'.",
            ));
        }
    }
    let shown = redact_url(&url);
    common(
        p,
        class,
        Kind::Url,
        shown,
        LiveSource {
            target: url,
            format: None,
            options,
            stall_timeout: Duration::ZERO,
            threads: 0,
        },
    )
}

/// `VideoDeviceReader` from its params: 1.0.4's `device_id` (required; `N` is
/// `/dev/videoN`, and a device path is taken as it is), then as [`url_reader`] without
/// `rtsp_transport`. The device is read through libavdevice's `v4l2` input.
pub(crate) fn device_reader(
    p: &mut Params<'_>,
    class: &'static str,
) -> Result<LiveReader, VfError> {
    let device = match p.opt_json("device_id") {
        Some(Json::Number(n)) if n.as_u64().is_some() => {
            format!("/dev/video{}", n.as_u64().unwrap_or_default())
        }
        Some(Json::String(s)) if s.starts_with('/') && !s.contains('\0') => s.clone(),
        Some(other) => {
            return Err(p.bad(
                "device_id",
                "a device number (N for /dev/videoN) or a device path",
                other,
            ));
        }
        None => {
            return Err(config(
                class,
                "device_id",
                format!("VF_NODE_PARAMS_JSON: {class} requires parameter 'device_id'."),
                "Add it to the node's params in the Flow (0 for /dev/video0).",
            ));
        }
    };
    common(
        p,
        class,
        Kind::Device,
        device.clone(),
        LiveSource {
            target: device,
            format: Some("v4l2"),
            options: Vec::new(),
            stall_timeout: Duration::ZERO,
            threads: 0,
        },
    )
}

fn common(
    p: &mut Params<'_>,
    class: &'static str,
    kind: Kind,
    shown: String,
    mut source: LiveSource,
) -> Result<LiveReader, VfError> {
    let nb_frames = p.int("nb_frames", -1)?;
    let nb_retries = p.int("nb_retries", 0)?;
    let swap_channels = p.bool("swap_channels", true)?;
    let timestamp_source = timestamp_source(p, class, "clock")?;
    source.threads = decoder_threads(p, LIVE_DECODER_THREADS)?;
    let stall = p.float("stall_timeout_s", DEFAULT_STALL_TIMEOUT_S)?;
    source.stall_timeout = p.seconds_value("stall_timeout_s", stall)?;
    if source.stall_timeout.is_zero() {
        return Err(p.bad(
            "stall_timeout_s",
            "a positive number of seconds",
            &Json::from(stall),
        ));
    }
    // FFmpeg's own socket timeout for the network protocols that take one (microseconds),
    // so a connection given up as stalled also ends inside FFmpeg.
    let scheme = source
        .target
        .split("://")
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    if kind == Kind::Url && matches!(scheme.as_str(), "rtsp" | "rtsps" | "http" | "https" | "tcp") {
        let micros = source.stall_timeout.as_micros().min(i64::MAX as u128);
        source.options.push(("timeout", micros.to_string()));
    }
    Ok(LiveReader {
        class,
        kind,
        shown,
        source,
        swap_channels,
        nb_frames,
        nb_retries,
        timestamp_source,
        frame_count: 0,
        retries: 0,
        failures_in_row: 0,
        last_loss: None,
        media: None,
        last_decoder: None,
        lingering: Vec::new(),
        ended: false,
    })
}

fn config(class: &'static str, param: &'static str, what: String, remedy: &str) -> VfError {
    VfError::new(ErrorCode::Config, what)
        .with_remedy(remedy)
        .with_context("variable", "VF_NODE_PARAMS_JSON")
        .with_context("class", class)
        .with_context("param", param)
}

impl LiveReader {
    fn what(&self) -> &'static str {
        match self.kind {
            Kind::Url => "url",
            Kind::Device => "device",
        }
    }

    /// A failure no retry can mend: what is at the address is not a video this worker reads.
    fn open_error(&self, failure: OpenFailure) -> VfError {
        let supported = supported_codecs().join(", ");
        let shown = py_repr_str(&self.shown);
        if let OpenFailure::GpuRequired(why) = &failure {
            return gpu_required(self.class, self.what(), &self.shown, why);
        }
        let what = match failure {
            OpenFailure::NoVideoStream => format!("{} {shown} has no video stream", self.what()),
            OpenFailure::UnsupportedCodec(codec) => format!(
                "{} {shown} sends {codec}, which this worker's FFmpeg cannot decode",
                self.what()
            ),
            OpenFailure::DecoderFailed(codec, e) => format!(
                "{} {shown}: the {codec} decoder refused the stream ({e})",
                self.what()
            ),
            OpenFailure::NotMedia(e) => format!("{} {shown} cannot be read: {e}", self.what()),
            OpenFailure::BadPath => format!("{} {shown} contains a NUL character", self.what()),
            other => format!("{} {shown} cannot be read: {other:?}", self.what()),
        };
        config(
            self.class,
            match self.kind {
                Kind::Url => "url",
                Kind::Device => "device_id",
            },
            format!("{}: {what}.", self.class),
            &format!("Point it at a video source in a supported codec: {supported}."),
        )
        .with_context(self.what(), self.shown.clone())
    }

    /// A missing device: named, with the capture devices this machine has.
    fn missing_device(&self) -> VfError {
        let mut present: Vec<String> = std::fs::read_dir("/dev")
            .map(|dir| {
                dir.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("video"))
                    .map(|n| format!("/dev/{n}"))
                    .collect()
            })
            .unwrap_or_default();
        present.sort();
        let present = if present.is_empty() {
            "none".to_owned()
        } else {
            present.join(", ")
        };
        config(
            self.class,
            "device_id",
            format!(
                "{}: device {} does not exist (V4L2 capture devices here: {present}).",
                self.class,
                py_repr_str(&self.shown)
            ),
            "Set device_id to a V4L2 capture device present in the worker's container \
             (N for /dev/videoN), and give the pod that device.",
        )
        .with_context("device", self.shown.clone())
    }

    /// Retries run out after a failure (after a clean end of stream: end of input).
    fn exhausted(&self) -> Result<Option<Payload>, VfError> {
        match &self.last_loss {
            None | Some(Loss::Ended) => Ok(None),
            Some(Loss::Failed(reason)) => Err(VfError::new(
                ErrorCode::ResourceUnavailable,
                format!(
                    "{}: {} {} failed and {} reconnection attempts were used ({} frames \
                     read): {reason}.",
                    self.class,
                    self.what(),
                    py_repr_str(&self.shown),
                    self.retries,
                    self.frame_count,
                ),
            )
            .with_remedy(
                "Check that the source is up and reachable from the worker; raise \
                 nb_retries (-1 retries forever).",
            )
            .with_context("class", self.class)
            .with_context(self.what(), self.shown.clone())
            .with_context("retries", self.retries)),
        }
    }

    fn may_retry(&self) -> bool {
        self.nb_retries < 0 || self.retries < self.nb_retries
    }

    fn backoff(&self) -> Duration {
        match self.failures_in_row {
            0 | 1 => Duration::ZERO,
            n => BACKOFF_FIRST
                .saturating_mul(1u32 << (n - 2).min(8))
                .min(BACKOFF_MAX),
        }
    }

    /// Waits `pause`; `false` if the runtime asked the node to stop meanwhile.
    fn wait(ctx: &NodeContext, pause: Duration) -> bool {
        let until = Instant::now() + pause;
        loop {
            crate::health::beat();
            if ctx.halt.requested() {
                return false;
            }
            let now = Instant::now();
            if now >= until {
                return true;
            }
            std::thread::sleep(WAIT_SLICE.min(until - now));
        }
    }

    /// One connection attempt; a failure that a retry may mend is noted, not returned.
    fn connect(&mut self, ctx: &NodeContext) -> Result<(), VfError> {
        loop {
            self.lingering.retain(|t| !t.is_finished());
            if self.lingering.len() < MAX_LINGERING {
                break;
            }
            if !LiveReader::wait(ctx, WAIT_SLICE) {
                return Ok(());
            }
        }
        let halt = ctx.halt.clone();
        let started = Decoding::start_source(
            Source::Live(self.source.clone()),
            self.swap_channels,
            &ctx.gpu,
            &|| halt.requested(),
        );
        match started {
            Ok(media) => {
                let decoder = media.decoder();
                decoder.announce(
                    self.class,
                    &self.shown,
                    &ctx.node_name,
                    self.last_decoder.as_ref(),
                );
                self.last_decoder = Some(decoder.clone());
                self.media = Some(media);
                Ok(())
            }
            Err(OpenFailure::Unreachable(reason) | OpenFailure::Thread(reason)) => {
                tracing::warn!("{}: cannot open {}: {reason}", self.class, self.shown);
                self.failures_in_row = self.failures_in_row.saturating_add(1);
                self.last_loss = Some(Loss::Failed(reason));
                Ok(())
            }
            Err(other) => Err(self.open_error(other)),
        }
    }

    /// Hangs up the connection without waiting for FFmpeg (see [`MAX_LINGERING`]).
    fn stop(&mut self) {
        if let Some(thread) = self.media.take().and_then(Decoding::abandon) {
            self.lingering.push(thread);
        }
    }

    fn output(&self, frame: DecodedFrame) -> Payload {
        let shape = vec![i64::from(frame.height), i64::from(frame.width), 3];
        Payload::Value(Value::List(vec![
            Value::Int(self.frame_count),
            Value::Tensor(Tensor::new(shape, "uint8", frame.data)),
        ]))
    }
}

impl Producer for LiveReader {
    fn open(&mut self, ctx: &mut NodeContext) -> Result<(), VfError> {
        if self.media.is_some() || self.ended {
            return Ok(());
        }
        if self.kind == Kind::Device && !std::path::Path::new(&self.source.target).exists() {
            return Err(self.missing_device());
        }
        // As 1.0.4's open(): one attempt, not counted as a retry; a failure is retried by
        // next() as far as nb_retries allows.
        self.connect(ctx)
    }

    fn next(&mut self, ctx: &mut NodeContext) -> Result<Option<Payload>, VfError> {
        // 1.0.4 stops when the count equals nb_frames; a failed read also counts, so
        // "reached" (not "equal") keeps a reconnection from skipping past the limit.
        if self.ended || (self.nb_frames >= 0 && self.frame_count >= self.nb_frames) {
            return Ok(None);
        }
        loop {
            if let Some(media) = self.media.as_mut() {
                let halt = ctx.halt.clone();
                let read = media.next_frame_unless(&|| halt.requested());
                let loss = match read {
                    Ok(Some(frame)) => {
                        self.frame_count = self.frame_count.saturating_add(1);
                        self.failures_in_row = 0;
                        let ts = match self.timestamp_source {
                            TimestampSource::Position => frame.position_ms / 1000.0,
                            TimestampSource::Clock => wall_now(),
                        };
                        ctx.set_output_event_timestamp(ts);
                        return Ok(Some(self.output(frame)));
                    }
                    Ok(None) if ctx.halt.requested() => {
                        self.ended = true;
                        self.stop();
                        return Ok(None);
                    }
                    Ok(None) => Loss::Ended,
                    Err(damage) => Loss::Failed(damage.reason),
                };
                // 1.0.4 counts the failed read as a frame.
                self.frame_count = self.frame_count.saturating_add(1);
                self.failures_in_row = self.failures_in_row.saturating_add(1);
                self.stop();
                match &loss {
                    Loss::Ended => {
                        tracing::info!("{}: {} ended", self.class, self.shown);
                    }
                    Loss::Failed(reason) => {
                        tracing::warn!("{}: lost {}: {reason}", self.class, self.shown);
                    }
                }
                self.last_loss = Some(loss);
            }
            if !self.may_retry() {
                self.ended = true;
                return self.exhausted();
            }
            self.retries = self.retries.saturating_add(1);
            if !LiveReader::wait(ctx, self.backoff()) {
                self.ended = true;
                return Ok(None);
            }
            tracing::info!(
                "{}: reopening {} (retry {} of {})",
                self.class,
                self.shown,
                self.retries,
                if self.nb_retries < 0 {
                    "unlimited".to_owned()
                } else {
                    self.nb_retries.to_string()
                }
            );
            self.connect(ctx)?;
            if ctx.halt.requested() {
                self.ended = true;
                self.stop();
                return Ok(None);
            }
        }
    }

    fn close(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        // Released when close returns, except a thread still blocked in FFmpeg, which ends
        // within its socket timeout on its own.
        if let Some(media) = self.media.take() {
            media.stop();
        }
        self.lingering.retain(|t| !t.is_finished());
        Ok(())
    }
}
