//! FFmpeg's libraries behind one small type: a video file (or live source) opened, demuxed
//! and decoded, one picture per call, in display order.
//!
//! Why these settings: the reference reads files through OpenCV's FFmpeg backend, and frames
//! must match it byte for byte. That backend takes the first video stream and decodes with
//! libavcodec's own decoder (its pictures are converted as [`super::convert`] says). Its frame
//! position is `(pts − stream start) × time base`, taking the packet's dts when a frame's pts
//! is missing or 0 — kept here as [`position_ms`] so the `position` timestamps match too.
//!
//! A node holding a GPU grant decodes with FFmpeg's NVDEC decoder for the codec instead
//! (`h264_cuvid`, …, chosen by [`super::nvdec`]); when that decoder does not open, the CPU
//! one does, and the [`DecoderInUse`] says why.
//!
//! Where this is stricter than OpenCV: a decoder or demuxer error ends the file with an error
//! that names the file and the place ([`Damage`]), after the frames decoded before it, where
//! OpenCV delivers concealed frames or stops as if the file had ended. Damage the decoder
//! conceals without reporting it (FFmpeg flags such frames only in `decode_error_flags`, which
//! the safe bindings do not expose) is delivered as decoded, as OpenCV does.

use std::path::Path;
use std::time::Duration;

use ffmpeg::codec::decoder::Check;
use ffmpeg::codec::{self, threading};
use ffmpeg::util::frame::video::Video as RawFrame;
use ffmpeg::{Packet, Rational, media};
use ffmpeg_next as ffmpeg;

use super::nvdec::{self, DecoderInUse, Plan};
use crate::nodes::GpuPlacement;

/// FFmpeg's "no timestamp" (`AV_NOPTS_VALUE`).
const NOPTS: i64 = i64::MIN;

/// One decoded picture, as the decoder gave it, and its place on the timeline.
pub(crate) struct Decoded {
    /// The picture (any pixel format; NVDEC's are semi-planar).
    pub picture: RawFrame,
    /// Where the frame sits on the file's timeline, in milliseconds, as OpenCV's
    /// `CAP_PROP_POS_MSEC` reports it after reading this frame.
    pub position_ms: f64,
}

/// Why a file cannot be read at all (refused at open: a configuration problem).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OpenFailure {
    /// Nothing at the path.
    Missing,
    /// The path is a directory, or not a regular file.
    NotAFile,
    /// The path cannot be handed to FFmpeg (an interior NUL).
    BadPath,
    /// The path exists but the OS refused to read it.
    Unreadable(String),
    /// FFmpeg found no container it can parse (not a video file, or a damaged header).
    NotMedia(String),
    /// The container has no video stream.
    NoVideoStream,
    /// The video stream's codec has no decoder in this build (its FFmpeg name, if known).
    UnsupportedCodec(String),
    /// The decoder refused to open (its name and FFmpeg's reason).
    DecoderFailed(String, String),
    /// The decoding thread could not be started, or died (the OS's or the panic's text).
    Thread(String),
    /// A live source could not be opened (FFmpeg's reason: refused, not found, timed out).
    Unreachable(String),
    /// The node requires its GPU (`gpu.fallback: none`) and NVDEC cannot decode the stream
    /// (the fallback's details).
    GpuRequired(String),
}

/// Where reading stopped on damage, after the frames before it were delivered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Damage {
    /// Byte offset of the damaged packet in the file, when FFmpeg knows it.
    pub byte_offset: Option<i64>,
    /// What FFmpeg (or the check that caught it) said.
    pub reason: String,
}

/// What is read: a local file, or a live source (a URL or a capture device).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Source {
    /// A local file (its path, and the decoder's thread count: 0 lets FFmpeg pick), read
    /// to its end; damage ends it with an error.
    File(String, usize),
    /// A stream that is watched for stalls and joined at its first keyframe.
    Live(LiveSource),
}

/// A live source as FFmpeg opens it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LiveSource {
    /// What FFmpeg opens: a URL (`rtsp://…`, `http://…`) or a device path (`/dev/video0`).
    pub target: String,
    /// The input format to force (`v4l2` for a device); `None` lets FFmpeg probe.
    pub format: Option<&'static str>,
    /// Demuxer/protocol options (`rtsp_transport`, …).
    pub options: Vec<(&'static str, String)>,
    /// The longest wait for the source to open, or for the next packet once open, before
    /// it counts as stalled.
    pub stall_timeout: Duration,
    /// The decoder's thread count (0 lets FFmpeg pick).
    pub threads: usize,
}

/// The decoder's state: reading packets, draining after the last one, or finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Reading,
    Draining,
    Finished,
}

/// An open video file or live source; see the module docs. Lives on the decoding thread.
pub(crate) struct MediaFile {
    input: ffmpeg::format::context::Input,
    stream_index: usize,
    time_base: Rational,
    start_time: i64,
    decoder: codec::decoder::Video,
    in_use: DecoderInUse,
    decoded: RawFrame,
    phase: Phase,
    /// Damage seen while the decoder still held good frames: reported once they are out.
    damage: Option<Damage>,
    /// The display time a frame must have to follow the last one delivered without a gap
    /// (only checked while draining after damage).
    next_pts: Option<i64>,
    /// Frames returned so far.
    delivered: u64,
    /// A live source: packets are skipped until a keyframe (at the start, and after a
    /// packet the decoder refused), decoding errors are concealed as OpenCV does instead of
    /// ending the stream.
    live: bool,
    waiting_for_key: bool,
}

/// Codecs named in the error for a file this build cannot decode: the common ones it can.
const COMMON_CODECS: &[(codec::Id, &str)] = &[
    (codec::Id::H264, "H.264"),
    (codec::Id::HEVC, "H.265/HEVC"),
    (codec::Id::VP8, "VP8"),
    (codec::Id::VP9, "VP9"),
    (codec::Id::AV1, "AV1"),
    (codec::Id::MPEG4, "MPEG-4 Part 2"),
    (codec::Id::MPEG2VIDEO, "MPEG-2"),
    (codec::Id::MJPEG, "Motion JPEG"),
    (codec::Id::PNG, "PNG"),
    (codec::Id::RAWVIDEO, "raw video"),
];

/// FFmpeg's global set-up, once per process: its own log on stderr only for errors (the
/// level OpenCV sets), since every failure is reported as a typed error anyway.
pub(crate) fn init() {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| {
        // `init` only fails on builds with device support registration problems; the
        // decoders and demuxers need no registration since FFmpeg 4, so go on regardless.
        let _ = ffmpeg::init();
        ffmpeg::util::log::set_level(ffmpeg::util::log::Level::Error);
    });
}

/// The common codecs this build decodes, for error texts ("H.264, H.265/HEVC, …").
pub(crate) fn supported_codecs() -> Vec<&'static str> {
    init();
    COMMON_CODECS
        .iter()
        .filter(|(id, _)| codec::decoder::find(*id).is_some())
        .map(|(_, name)| *name)
        .collect()
}

/// The libavcodec version this worker runs, `major.minor.micro`.
pub(crate) fn libavcodec_version() -> String {
    let v = codec::version();
    format!("{}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
}

/// Where a container runtime puts the NVIDIA driver's libraries: where `libnvcuvid.so.1` is
/// looked for when an NVDEC decoder does not open, to name the likely cause.
const DRIVER_LIBRARY_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
];

/// Whether the driver's NVDEC library is in one of [`DRIVER_LIBRARY_DIRS`].
fn nvcuvid_installed() -> bool {
    DRIVER_LIBRARY_DIRS
        .iter()
        .any(|d| Path::new(d).join("libnvcuvid.so.1").exists())
}

/// The NVDEC decoder `name` for the stream `parameters` describe, or why it did not open.
fn open_nvdec(
    parameters: codec::Parameters,
    name: &'static str,
    live: bool,
) -> Result<codec::decoder::Video, nvdec::Fallback> {
    let failed = |e: &dyn std::fmt::Display| nvdec::open_failed(name, &e.to_string(), true);
    let Some(found) = codec::decoder::find_by_name(name) else {
        return Err(failed(&"FFmpeg has no decoder of that name"));
    };
    let mut decoder = codec::context::Context::from_parameters(parameters)
        .map_err(|e| failed(&e))?
        .decoder();
    if !live {
        decoder.check(Check::EXPLODE);
    }
    decoder
        .open_as(found)
        .and_then(|opened| opened.video())
        .map_err(|e| nvdec::open_failed(name, &e.to_string(), nvcuvid_installed()))
}

impl MediaFile {
    /// Opens `path` (a local file, never a URL) and its first video stream's decoder, on
    /// NVDEC when `gpu` says the node holds a GPU.
    pub(crate) fn open(
        path: &str,
        threads: usize,
        gpu: &GpuPlacement,
    ) -> Result<MediaFile, OpenFailure> {
        init();
        if path.contains('\0') {
            return Err(OpenFailure::BadPath);
        }
        match std::fs::metadata(Path::new(path)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(OpenFailure::Missing);
            }
            Err(e) => return Err(OpenFailure::Unreadable(e.to_string())),
            Ok(m) if !m.is_file() => return Err(OpenFailure::NotAFile),
            Ok(_) => {}
        }
        // The `file:` protocol, so a name with a colon is never taken for a URL scheme.
        let url = format!("file:{path}");
        let input =
            ffmpeg::format::input(&url).map_err(|e| OpenFailure::NotMedia(e.to_string()))?;
        MediaFile::with_input(input, false, threads, gpu)
    }

    /// The first video stream of an opened input and its decoder: NVDEC's when the plan
    /// says so and it opens, else libavcodec's own.
    fn with_input(
        input: ffmpeg::format::context::Input,
        live: bool,
        threads: usize,
        gpu: &GpuPlacement,
    ) -> Result<MediaFile, OpenFailure> {
        // The first video stream, as OpenCV picks it (not FFmpeg's "best" one).
        let stream = input
            .streams()
            .find(|s| s.parameters().medium() == media::Type::Video)
            .ok_or(OpenFailure::NoVideoStream)?;
        let stream_index = stream.index();
        let time_base = stream.time_base();
        let start_time = stream.start_time();
        let parameters = stream.parameters();
        let id = parameters.id();
        let codec = codec_name(id);
        let in_ffmpeg = |name: &str| codec::decoder::find_by_name(name).is_some();
        let fallback = match nvdec::plan(gpu, &codec, &in_ffmpeg) {
            Plan::Cpu => None,
            Plan::Fallback(f) => Some(f),
            Plan::Nvdec(name) => match open_nvdec(stream.parameters(), name, live) {
                Ok(decoder) => {
                    let in_use = DecoderInUse {
                        codec,
                        decoder: name.to_owned(),
                        gpu: true,
                        requested_gpu: true,
                        fallback: None,
                    };
                    return Ok(MediaFile::with_decoder(
                        input,
                        (stream_index, time_base, start_time),
                        decoder,
                        in_use,
                        live,
                    ));
                }
                Err(f) => Some(f),
            },
        };
        if let Some(f) = fallback.as_ref().filter(|_| gpu.required()) {
            return Err(OpenFailure::GpuRequired(f.detail.clone()));
        }
        let Some(found) = codec::decoder::find(id) else {
            return Err(OpenFailure::UnsupportedCodec(codec));
        };
        let mut context = codec::context::Context::from_parameters(parameters)
            .map_err(|e| OpenFailure::DecoderFailed(found.name().to_owned(), e.to_string()))?;
        // Frame threads: as many as asked, or as FFmpeg picks for the machine when 0 (OpenCV
        // also uses one per core); the decoded pictures do not depend on it.
        context.set_threading(threading::Config {
            kind: threading::Type::Frame,
            count: threads,
            ..threading::Config::default()
        });
        let mut decoder = context.decoder();
        // A file: a bitstream error fails the packet instead of being concealed, so damage
        // is reported rather than delivered as a smeared picture. A live source conceals
        // (as OpenCV does): a lost packet must not end the stream.
        if !live {
            decoder.check(Check::EXPLODE);
        }
        let decoder = decoder
            .open_as(found)
            .and_then(|opened| opened.video())
            .map_err(|e| OpenFailure::DecoderFailed(found.name().to_owned(), e.to_string()))?;
        let in_use = DecoderInUse {
            codec,
            decoder: found.name().to_owned(),
            gpu: false,
            requested_gpu: gpu.requested(),
            fallback,
        };
        Ok(MediaFile::with_decoder(
            input,
            (stream_index, time_base, start_time),
            decoder,
            in_use,
            live,
        ))
    }

    /// The state of a file whose stream `(index, time base, start time)` is decoded by
    /// `decoder`.
    fn with_decoder(
        input: ffmpeg::format::context::Input,
        (stream_index, time_base, start_time): (usize, Rational, i64),
        decoder: codec::decoder::Video,
        in_use: DecoderInUse,
        live: bool,
    ) -> MediaFile {
        MediaFile {
            input,
            stream_index,
            time_base,
            start_time,
            decoder,
            in_use,
            decoded: RawFrame::empty(),
            phase: Phase::Reading,
            damage: None,
            next_pts: None,
            delivered: 0,
            live,
            waiting_for_key: live,
        }
    }

    /// Opens a live source through FFmpeg's own URL or device handling, with
    /// `live.options`; on NVDEC as [`MediaFile::open`].
    pub(crate) fn open_live(
        live: &LiveSource,
        gpu: &GpuPlacement,
    ) -> Result<MediaFile, OpenFailure> {
        init();
        if live.target.contains('\0') {
            return Err(OpenFailure::BadPath);
        }
        let mut options = ffmpeg::Dictionary::new();
        for (key, value) in &live.options {
            options.set(key, value);
        }
        let input = match live.format {
            None => ffmpeg::format::input_with_dictionary(&live.target, options),
            Some(name) => {
                let Some(format) = ffmpeg::device::input::video().find(|f| f.name() == name) else {
                    return Err(OpenFailure::NotMedia(format!(
                        "this FFmpeg has no {name} input device"
                    )));
                };
                match ffmpeg::format::open_with(&live.target, &format, options) {
                    Ok(ffmpeg::format::context::Context::Input(input)) => Ok(input),
                    Ok(ffmpeg::format::context::Context::Output(_)) => {
                        return Err(OpenFailure::NotMedia(format!("{name} opened for output")));
                    }
                    Err(e) => Err(e),
                }
            }
        };
        let input = input.map_err(|e| match e {
            ffmpeg::Error::ProtocolNotFound => OpenFailure::NotMedia(format!(
                "{e} (FFmpeg reads rtsp://, rtmp://, http(s)://, udp://, tcp://, file: …)"
            )),
            e => OpenFailure::Unreachable(e.to_string()),
        })?;
        MediaFile::with_input(input, true, live.threads, gpu)
    }

    /// The decoder it opened, and why not NVDEC when NVDEC was asked for.
    pub(crate) fn decoder_in_use(&self) -> &DecoderInUse {
        &self.in_use
    }

    /// The next picture in display order, `Ok(None)` after the last one, or the damage that
    /// ended the file once every frame decoded before it was returned.
    pub(crate) fn next_frame(&mut self) -> Result<Option<Decoded>, Damage> {
        loop {
            match self.decoder.receive_frame(&mut self.decoded) {
                Ok(()) => return self.take_decoded().map(Some),
                Err(ffmpeg::Error::Eof) => {
                    self.phase = Phase::Finished;
                    return match self.damage.take() {
                        Some(d) => Err(d),
                        None => Ok(None),
                    };
                }
                Err(ffmpeg::Error::Other { errno }) if errno == ffmpeg::util::error::EAGAIN => {}
                Err(e) => {
                    self.phase = Phase::Finished;
                    return Err(self.damage.take().unwrap_or(Damage {
                        byte_offset: None,
                        reason: format!("decoding failed: {e}"),
                    }));
                }
            }
            match self.phase {
                Phase::Reading => self.feed()?,
                // The decoder asked for input after end of stream: nothing more will come.
                Phase::Draining | Phase::Finished => {
                    self.phase = Phase::Finished;
                    return match self.damage.take() {
                        Some(d) => Err(d),
                        None => Ok(None),
                    };
                }
            }
        }
    }

    /// Reads packets until one of the video stream went to the decoder (or the file ended).
    fn feed(&mut self) -> Result<(), Damage> {
        let mut packet = Packet::empty();
        loop {
            match packet.read(&mut self.input) {
                Ok(()) => {}
                Err(ffmpeg::Error::Eof) => {
                    self.drain();
                    return Ok(());
                }
                Err(ffmpeg::Error::Other { errno }) if errno == ffmpeg::util::error::EAGAIN => {
                    continue;
                }
                Err(e) if self.live => {
                    // No draining: the frames the decoder holds are dropped with the
                    // connection, and the node opens a new one.
                    self.phase = Phase::Finished;
                    return Err(Damage {
                        byte_offset: None,
                        reason: format!("reading the stream failed: {e}"),
                    });
                }
                Err(e) => {
                    self.damaged(None, format!("reading the file failed: {e}"));
                    return Ok(());
                }
            }
            if packet.stream() != self.stream_index {
                continue;
            }
            if self.live {
                // Start (and restart after a refused packet) at a keyframe: what comes
                // before it refers to pictures this connection never saw.
                if self.waiting_for_key && !packet.is_key() {
                    continue;
                }
                if packet.is_corrupt() {
                    self.waiting_for_key = true;
                    continue;
                }
                self.waiting_for_key = false;
                match self.decoder.send_packet(&packet) {
                    Ok(()) => return Ok(()),
                    Err(e) => {
                        tracing::debug!(
                            "live stream: the decoder refused a packet ({e}); waiting for the next keyframe"
                        );
                        self.waiting_for_key = true;
                        continue;
                    }
                }
            }
            let offset = Some(packet.position() as i64).filter(|p| *p >= 0);
            if packet.is_corrupt() {
                self.damaged(
                    offset,
                    "the demuxer marked a packet corrupt (truncated or damaged data)".to_owned(),
                );
                return Ok(());
            }
            return match self.decoder.send_packet(&packet) {
                Ok(()) => Ok(()),
                // No draining here: with frame threads the error may surface a few packets
                // late, and the decoder already holds later packets that may lean on the
                // damaged one; the frames it returned before are clean.
                Err(e) => {
                    self.phase = Phase::Finished;
                    Err(Damage {
                        byte_offset: offset,
                        reason: format!("decoding failed: {e}"),
                    })
                }
            };
        }
    }

    /// End of input: the decoder gives back the frames it still holds.
    fn drain(&mut self) {
        self.phase = Phase::Draining;
        // Fails only when already draining, which the phase rules out.
        let _ = self.decoder.send_eof();
    }

    /// Damage the demuxer found at `byte_offset`, before the packet reached the decoder:
    /// nothing more is read; the frames the decoder holds from earlier (intact) packets
    /// still come out, up to the first gap in display order, then the error.
    fn damaged(&mut self, byte_offset: Option<i64>, reason: String) {
        if self.damage.is_none() {
            self.damage = Some(Damage {
                byte_offset,
                reason,
            });
        }
        if self.phase == Phase::Reading {
            self.drain();
        }
    }

    /// Hands out the picture just decoded, unless damage before it ends the file here.
    fn take_decoded(&mut self) -> Result<Decoded, Damage> {
        let pts = self.decoded.pts();
        if self.damage.is_some() {
            // After damage, only frames that follow the last delivered one without a gap
            // (a frame whose predecessor in display order was in the damaged part would
            // come out of order otherwise).
            let follows = match (self.delivered, self.next_pts, pts) {
                // The first frame out is the first in display order: nothing before it.
                (0, _, _) => true,
                (_, Some(want), Some(got)) => want == got,
                _ => false,
            };
            if !follows {
                self.phase = Phase::Finished;
                return Err(self.damage.take().unwrap_or_else(|| Damage {
                    byte_offset: None,
                    reason: "frames missing after damage".to_owned(),
                }));
            }
        }
        if self.decoded.is_corrupt() && !self.live {
            let reason = "the decoder marked a frame corrupt".to_owned();
            self.phase = Phase::Finished;
            return Err(self.damage.take().unwrap_or(Damage {
                byte_offset: None,
                reason,
            }));
        }
        let duration = self.decoded.packet().duration;
        self.next_pts = match (pts, duration) {
            (Some(p), d) if d > 0 => p.checked_add(d),
            _ => None,
        };
        let position_ms = position_ms(
            pts,
            Some(self.decoded.packet().dts).filter(|d| *d != NOPTS),
            self.start_time,
            self.time_base,
        );
        self.delivered += 1;
        // The next picture is received into a fresh frame: this one goes to the converter.
        let picture = std::mem::replace(&mut self.decoded, RawFrame::empty());
        Ok(Decoded {
            picture,
            position_ms,
        })
    }
}

/// The FFmpeg name of a codec id (`h264`), or its debug form when FFmpeg has none.
fn codec_name(id: codec::Id) -> String {
    let name = id.name();
    if name.is_empty() || name == "none" {
        format!("{id:?}").to_lowercase()
    } else {
        name.to_owned()
    }
}

/// OpenCV's `CAP_PROP_POS_MSEC` for a frame (its `dts_to_sec(picture_pts) * 1000`): the
/// frame's pts unless missing or 0, then the packet's dts; 0 when neither is known. The
/// arithmetic is OpenCV's (64-bit difference, then doubles) so the values agree to the bit.
pub(crate) fn position_ms(
    pts: Option<i64>,
    pkt_dts: Option<i64>,
    start_time: i64,
    time_base: Rational,
) -> f64 {
    let picture_pts = match pts {
        Some(p) if p != 0 => Some(p),
        _ => pkt_dts,
    };
    let Some(picture_pts) = picture_pts else {
        return 0.0;
    };
    let r2d = if time_base.numerator() == 0 || time_base.denominator() == 0 {
        0.0
    } else {
        f64::from(time_base.numerator()) / f64::from(time_base.denominator())
    };
    (picture_pts.wrapping_sub(start_time) as f64) * r2d * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_follows_opencv() {
        let tb = Rational::new(1, 12800);
        assert_eq!(position_ms(Some(512), Some(0), 0, tb), 40.0);
        // pts 0 falls back to the packet's dts, as OpenCV does.
        assert_eq!(position_ms(Some(0), Some(-1024), 0, tb), -80.0);
        assert_eq!(position_ms(Some(0), None, 0, tb), 0.0);
        assert_eq!(position_ms(None, None, 0, tb), 0.0);
        assert_eq!(position_ms(Some(1000), None, 1000, tb), 0.0);
        assert_eq!(position_ms(Some(5), None, 0, Rational::new(0, 1)), 0.0);
    }
}
