//! Frames in, a video file out: FFmpeg's encoders and muxers on a thread of their own.
//!
//! Why a thread: as for decoding, FFmpeg's scaler context is not `Send`, and the node moves
//! between the runtime's threads; the thread also encodes while the next frame travels. The
//! channel holds at most [`FRAMES_QUEUED`] frames, so memory stays bounded; the file is whole
//! only after [`Encoding::finish`] (the encoder drained, the trailer written).

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use bytes::Bytes;
use ffmpeg::format::Pixel;
use ffmpeg::software::scaling::{self, Flags};
use ffmpeg::util::frame::video::Video as RawFrame;
use ffmpeg::{Dictionary, Packet, Rational, codec, encoder};
use ffmpeg_next as ffmpeg;

/// Frames waiting for the encoder at most.
const FRAMES_QUEUED: usize = 2;

/// Which encoder and settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Codec {
    /// Motion JPEG, full-range 4:2:0, as OpenCV's `VideoWriter` with fourcc `MJPG` writes it.
    Mjpeg,
    /// PNG, RGB (a still image: one frame to a `.png` name).
    Png,
    /// H.264 through libx264 (`crf`, `preset`), 4:2:0.
    H264 {
        /// x264's constant rate factor.
        crf: u32,
        /// x264's preset.
        preset: String,
    },
}

/// One frame for the encoder: packed 8-bit pixels, `width × height × 3`.
pub(crate) struct Picture {
    pub width: u32,
    pub height: u32,
    /// RGB when true, else BGR.
    pub rgb: bool,
    pub data: Bytes,
}

/// A file being written; see the module docs.
pub(crate) struct Encoding {
    frames: Option<SyncSender<Picture>>,
    thread: Option<JoinHandle<Result<u64, String>>>,
}

impl Encoding {
    /// Starts writing `path` at `width × height`, `fps` frames per second; frames of another
    /// size are scaled to it.
    pub(crate) fn start(
        path: &str,
        codec: Codec,
        width: u32,
        height: u32,
        fps: Rational,
    ) -> Result<Encoding, String> {
        if path.contains('\0') {
            return Err("the path contains a NUL character".to_owned());
        }
        let (opened_tx, opened_rx) = sync_channel::<Result<(), String>>(1);
        let (frames_tx, frames_rx) = sync_channel(FRAMES_QUEUED);
        let path = path.to_owned();
        let thread = std::thread::Builder::new()
            .name("vf-video-encode".to_owned())
            .spawn(move || encode(&path, &codec, width, height, fps, &opened_tx, frames_rx))
            .map_err(|e| format!("cannot start the encoding thread: {e}"))?;
        let mut encoding = Encoding {
            frames: Some(frames_tx),
            thread: Some(thread),
        };
        match opened_rx.recv() {
            Ok(Ok(())) => Ok(encoding),
            Ok(Err(e)) => {
                encoding.frames = None;
                let _ = encoding.join();
                Err(e)
            }
            Err(_) => Err(encoding
                .join()
                .err()
                .unwrap_or_else(|| "it ended".to_owned())),
        }
    }

    /// Hands one frame to the encoder (waits while [`FRAMES_QUEUED`] are queued); a failure
    /// of the encoder, this frame's or an earlier one's, is returned here.
    pub(crate) fn write(&mut self, picture: Picture) -> Result<(), String> {
        let sent = self.frames.as_ref().map(|f| f.send(picture));
        match sent {
            Some(Ok(())) => Ok(()),
            _ => {
                self.frames = None;
                Err(self
                    .join()
                    .err()
                    .unwrap_or_else(|| "the encoder stopped".to_owned()))
            }
        }
    }

    /// Drains the encoder and writes the trailer: the number of frames in the file.
    pub(crate) fn finish(mut self) -> Result<u64, String> {
        self.frames = None;
        self.join()
    }

    fn join(&mut self) -> Result<u64, String> {
        let Some(thread) = self.thread.take() else {
            return Err("the encoder had already stopped".to_owned());
        };
        match thread.join() {
            Ok(result) => result,
            Err(panic) => Err(panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "the encoding thread panicked".to_owned())),
        }
    }
}

/// The encoding thread: set up, report, then every frame until the node hangs up.
fn encode(
    path: &str,
    codec: &Codec,
    width: u32,
    height: u32,
    fps: Rational,
    opened: &SyncSender<Result<(), String>>,
    frames: Receiver<Picture>,
) -> Result<u64, String> {
    let mut writer = match Writer::open(path, codec, width, height, fps) {
        Ok(w) => {
            let _ = opened.send(Ok(()));
            w
        }
        Err(e) => {
            let _ = opened.send(Err(e.clone()));
            return Err(e);
        }
    };
    for picture in frames {
        writer.frame(&picture)?;
    }
    writer.finish()
}

/// The muxer, the encoder and the converter of one output file.
struct Writer {
    output: ffmpeg::format::context::Output,
    encoder: encoder::Video,
    format: Pixel,
    width: u32,
    height: u32,
    time_base: Rational,
    stream_time_base: Rational,
    scaler: Option<(u32, u32, bool, scaling::Context)>,
    source: RawFrame,
    next_pts: i64,
}

impl Writer {
    fn open(
        path: &str,
        codec: &Codec,
        width: u32,
        height: u32,
        fps: Rational,
    ) -> Result<Writer, String> {
        super::media::init();
        let mut output = ffmpeg::format::output(&path)
            .map_err(|e| format!("cannot create the file (FFmpeg: {e})"))?;
        let (found, format, options) = match codec {
            Codec::Mjpeg => (
                encoder::find(codec::Id::MJPEG),
                Pixel::YUVJ420P,
                Dictionary::new(),
            ),
            Codec::Png => (
                encoder::find(codec::Id::PNG),
                Pixel::RGB24,
                Dictionary::new(),
            ),
            Codec::H264 { crf, preset } => {
                let mut options = Dictionary::new();
                options.set("crf", &crf.to_string());
                options.set("preset", preset);
                (encoder::find_by_name("libx264"), Pixel::YUV420P, options)
            }
        };
        let found =
            found.ok_or_else(|| format!("this worker's FFmpeg has no {codec:?} encoder"))?;
        let global_header = output
            .format()
            .flags()
            .contains(ffmpeg::format::Flags::GLOBAL_HEADER);
        let mut stream = output
            .add_stream(found)
            .map_err(|e| format!("cannot add a video stream: {e}"))?;
        let mut video = codec::context::Context::new_with_codec(found)
            .encoder()
            .video()
            .map_err(|e| format!("cannot set up the encoder: {e}"))?;
        let time_base = fps.invert();
        video.set_width(width);
        video.set_height(height);
        video.set_format(format);
        video.set_time_base(time_base);
        video.set_frame_rate(Some(fps));
        if global_header {
            video.set_flags(codec::Flags::GLOBAL_HEADER);
        }
        if *codec == Codec::Mjpeg {
            // OpenCV's writer asks 1.5 bits per pixel per second of video; FFmpeg's default
            // (200 kb/s) would smear every frame.
            let fps_f = f64::from(fps.numerator()) / f64::from(fps.denominator().max(1));
            let bits = f64::from(width) * f64::from(height) * fps_f * 1.5;
            video.set_bit_rate(bits.min(f64::from(i32::MAX)) as usize);
        }
        let encoder = video
            .open_as_with(found, options)
            .map_err(|e| format!("the {} encoder refused the settings: {e}", found.name()))?;
        stream.set_parameters(&encoder);
        stream.set_time_base(time_base);
        output
            .write_header()
            .map_err(|e| format!("cannot write the file's header: {e}"))?;
        let stream_time_base = output.stream(0).map(|s| s.time_base()).unwrap_or(time_base);
        Ok(Writer {
            output,
            encoder,
            format,
            width,
            height,
            time_base,
            stream_time_base,
            scaler: None,
            source: RawFrame::empty(),
            next_pts: 0,
        })
    }

    fn frame(&mut self, picture: &Picture) -> Result<(), String> {
        let (w, h) = (picture.width, picture.height);
        let row = w as usize * 3;
        if w == 0 || h == 0 || picture.data.len() != row * h as usize {
            return Err(format!(
                "a frame of {w}×{h} must have {} bytes",
                row * h as usize
            ));
        }
        let stale = self
            .scaler
            .as_ref()
            .is_none_or(|(sw, sh, rgb, _)| (*sw, *sh, *rgb) != (w, h, picture.rgb));
        if stale {
            let packed = if picture.rgb {
                Pixel::RGB24
            } else {
                Pixel::BGR24
            };
            // Another size than the file's is scaled to it by area averaging (1.0.4 resizes
            // with cv2.INTER_AREA); the file's own size converts as OpenCV's writer does.
            let flags = if (w, h) == (self.width, self.height) {
                Flags::BICUBIC
            } else {
                Flags::AREA
            };
            let scaler =
                scaling::Context::get(packed, w, h, self.format, self.width, self.height, flags)
                    .map_err(|e| format!("cannot convert {w}×{h} frames: {e}"))?;
            self.scaler = Some((w, h, picture.rgb, scaler));
            self.source = RawFrame::new(packed, w, h);
        }
        if self.source.planes() == 0 {
            return Err("cannot allocate a frame".to_owned());
        }
        let stride = self.source.stride(0);
        let dst = self.source.data_mut(0);
        for (y, line) in picture.data.chunks_exact(row).enumerate() {
            dst[y * stride..y * stride + row].copy_from_slice(line);
        }
        let Some((_, _, _, scaler)) = self.scaler.as_mut() else {
            return Err("no colour converter".to_owned());
        };
        let mut converted = RawFrame::empty();
        scaler
            .run(&self.source, &mut converted)
            .map_err(|e| format!("colour conversion failed: {e}"))?;
        converted.set_pts(Some(self.next_pts));
        self.next_pts += 1;
        self.encoder
            .send_frame(&converted)
            .map_err(|e| format!("encoding failed: {e}"))?;
        self.packets()
    }

    /// Moves every packet the encoder has ready into the file.
    fn packets(&mut self) -> Result<(), String> {
        let mut packet = Packet::empty();
        while self.encoder.receive_packet(&mut packet).is_ok() {
            packet.set_stream(0);
            // Each packet lasts one frame; without a duration an MP4's edit list leaves the
            // last frame out.
            if packet.duration() <= 0 {
                packet.set_duration(1);
            }
            packet.rescale_ts(self.time_base, self.stream_time_base);
            packet
                .write_interleaved(&mut self.output)
                .map_err(|e| format!("writing the file failed: {e}"))?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<u64, String> {
        self.encoder
            .send_eof()
            .map_err(|e| format!("finishing the encoder failed: {e}"))?;
        self.packets()?;
        self.output
            .write_trailer()
            .map_err(|e| format!("writing the file's trailer failed: {e}"))?;
        Ok(self.next_pts as u64)
    }
}
