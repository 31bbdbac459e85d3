//! A source being decoded and converted on threads of its own, frames handed to the node in
//! display order, at most [`FRAMES_AHEAD`] converted frames ahead of it (a live source:
//! [`LIVE_FRAMES_AHEAD`]).
//!
//! Two threads, in a pipeline: `vf-video-decode` opens the source ([`super::media`]),
//! demuxes and decodes; `vf-video-convert` (started by it once the source is open) converts
//! each picture to packed BGR ([`super::convert`]). Why threads: FFmpeg's scaler context is
//! not `Send`, while a node moves between the threads the runtime builds and runs it on; and
//! decoding, converting and publishing then overlap — with one decoder thread the
//! conversion no longer adds to the decoding time, it runs beside it. Dropping (or
//! stopping) the [`Decoding`] ends both at their next frame.

use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::convert::Converter;
use super::media::{Damage, Decoded, MediaFile, OpenFailure, Source};
use super::nvdec::DecoderInUse;
use crate::nodes::GpuPlacement;

/// Converted frames of a file queued for the node: enough to overlap decoding with
/// publishing, few enough that memory stays a handful of frames whatever the file.
const FRAMES_AHEAD: usize = 2;

/// The same for a live source, which delivers in real time: a frame converted ahead only
/// adds latency and a frame's memory (6 MB at 1080p) to a reader that keeps up anyway.
const LIVE_FRAMES_AHEAD: usize = 1;

/// Decoded pictures queued for the converter: one, so the decoder runs a picture ahead of
/// the conversion and no further.
const PICTURES_AHEAD: usize = 1;

/// How often a wait on a live source looks at the node's halt request.
const HALT_POLL: Duration = Duration::from_millis(50);

/// One converted frame, packed (no row padding): `height × width × 3` bytes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DecodedFrame {
    /// Pixels per row.
    pub width: u32,
    /// Rows.
    pub height: u32,
    /// `BGR` (or `RGB` when asked to swap) bytes, row after row.
    pub data: Bytes,
    /// Where the frame sits on the file's timeline, in milliseconds, as OpenCV's
    /// `CAP_PROP_POS_MSEC` reports it after reading this frame.
    pub position_ms: f64,
}

/// What the decoding thread hands the converter, in order.
enum Stage {
    Picture(Decoded),
    End,
    Damaged(Damage),
}

/// What the converter hands the node, in order.
enum Message {
    Frame(DecodedFrame),
    End,
    Damaged(Damage),
}

/// A source being decoded on threads of its own; see the module docs.
pub(crate) struct Decoding {
    frames: Receiver<Message>,
    thread: Option<JoinHandle<()>>,
    decoder: DecoderInUse,
    /// A live source's bound on each wait for the decoding thread (open, next frame).
    stall_timeout: Option<Duration>,
}

impl Decoding {
    /// Opens the file at `path` on new threads; frames come out BGR, or RGB with
    /// `swap_channels`; `threads` decoder threads (0: FFmpeg's automatic count); decoded on
    /// NVDEC when `gpu` holds a device.
    pub(crate) fn start(
        path: &str,
        swap_channels: bool,
        threads: usize,
        gpu: &GpuPlacement,
    ) -> Result<Decoding, OpenFailure> {
        Decoding::start_source(
            Source::File(path.to_owned(), threads),
            swap_channels,
            gpu,
            &|| false,
        )
    }

    /// Opens `source` on new threads. A live source's open is given up (as
    /// [`OpenFailure::Unreachable`]) after its stall timeout, or once `halted` says the
    /// node is stopping; the thread is then left to end on its own (FFmpeg's socket timeout
    /// bounds it), see [`Decoding::abandon`].
    pub(crate) fn start_source(
        source: Source,
        swap_channels: bool,
        gpu: &GpuPlacement,
        halted: &dyn Fn() -> bool,
    ) -> Result<Decoding, OpenFailure> {
        let (opened_tx, opened_rx) = sync_channel::<Result<DecoderInUse, OpenFailure>>(1);
        let (ahead, stall_timeout) = match &source {
            Source::File(..) => (FRAMES_AHEAD, None),
            Source::Live(live) => (LIVE_FRAMES_AHEAD, Some(live.stall_timeout)),
        };
        let (frames_tx, frames) = sync_channel(ahead);
        let gpu = gpu.clone();
        let thread = std::thread::Builder::new()
            .name("vf-video-decode".to_owned())
            .spawn(move || decode(&source, swap_channels, &gpu, &opened_tx, frames_tx))
            .map_err(|e| OpenFailure::Thread(e.to_string()))?;
        let mut decoding = Decoding {
            frames,
            thread: Some(thread),
            decoder: DecoderInUse {
                codec: String::new(),
                decoder: String::new(),
                gpu: false,
                requested_gpu: false,
                fallback: None,
            },
            stall_timeout,
        };
        let started = Instant::now();
        let opened = loop {
            let Some(bound) = stall_timeout else {
                break opened_rx.recv().map_err(|_| ());
            };
            match opened_rx.recv_timeout(HALT_POLL) {
                Ok(result) => break Ok(result),
                Err(RecvTimeoutError::Disconnected) => break Err(()),
                Err(RecvTimeoutError::Timeout) => {
                    let why = if halted() {
                        "the node is stopping".to_owned()
                    } else if started.elapsed() >= bound {
                        stalled(bound)
                    } else {
                        continue;
                    };
                    drop(decoding.abandon());
                    return Err(OpenFailure::Unreachable(why));
                }
            }
        };
        match opened {
            Ok(Ok(decoder)) => {
                decoding.decoder = decoder;
                Ok(decoding)
            }
            Ok(Err(failure)) => {
                decoding.join();
                Err(failure)
            }
            Err(()) => Err(OpenFailure::Thread(decoding.join())),
        }
    }

    /// As [`Decoding::next_frame`] for a live source: a wait ends early with `Ok(None)`
    /// once `halted` says the node is stopping, and with a stall (as damage) when no frame
    /// came within the stall timeout.
    pub(crate) fn next_frame_unless(
        &mut self,
        halted: &dyn Fn() -> bool,
    ) -> Result<Option<DecodedFrame>, Damage> {
        let started = Instant::now();
        loop {
            match self.frames.recv_timeout(HALT_POLL) {
                Ok(Message::Frame(frame)) => return Ok(Some(frame)),
                Ok(Message::End) => return Ok(None),
                Ok(Message::Damaged(damage)) => return Err(damage),
                Err(RecvTimeoutError::Timeout) => {
                    if halted() {
                        return Ok(None);
                    }
                    if let Some(bound) = self.stall_timeout.filter(|b| started.elapsed() >= *b) {
                        return Err(Damage {
                            byte_offset: None,
                            reason: stalled(bound),
                        });
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let reason = self.join();
                    return Err(Damage {
                        byte_offset: None,
                        reason: format!("the decoding thread stopped: {reason}"),
                    });
                }
            }
        }
    }

    /// Hangs up without waiting: the threads end at their next frame, or when FFmpeg's
    /// blocked read returns (a live source's socket timeout bounds that); the decoding
    /// thread's handle (it outlives its converter) is returned so the caller can bound how
    /// many such threads linger.
    pub(crate) fn abandon(mut self) -> Option<JoinHandle<()>> {
        let (_, dead) = sync_channel(0);
        drop(std::mem::replace(&mut self.frames, dead));
        self.thread.take()
    }

    /// The decoder in use: the codec, FFmpeg's decoder, GPU or CPU and why.
    pub(crate) fn decoder(&self) -> &DecoderInUse {
        &self.decoder
    }

    /// The next frame, `Ok(None)` after the last one, or the damage that ended the file.
    pub(crate) fn next_frame(&mut self) -> Result<Option<DecodedFrame>, Damage> {
        match self.frames.recv() {
            Ok(Message::Frame(frame)) => Ok(Some(frame)),
            Ok(Message::End) => Ok(None),
            Ok(Message::Damaged(damage)) => Err(damage),
            Err(_) => {
                let reason = self.join();
                Err(Damage {
                    byte_offset: None,
                    reason: format!("the decoding thread stopped: {reason}"),
                })
            }
        }
    }

    /// Waits for the decoding thread (which waits for its converter) to end; the panic
    /// text, if it panicked.
    fn join(&mut self) -> String {
        let Some(thread) = self.thread.take() else {
            return "it had ended".to_owned();
        };
        match thread.join() {
            Ok(()) => "it ended early".to_owned(),
            Err(panic) => panic_text(panic.as_ref()),
        }
    }

    /// Stops the threads (at their next frame) and waits for them, so the file and the
    /// decoder are released when this returns.
    pub(crate) fn stop(mut self) {
        let (_, dead) = sync_channel(0);
        // Replacing the receiver drops it: the converter's next send fails, it returns,
        // and then the decoding thread's next send fails and it returns too.
        drop(std::mem::replace(&mut self.frames, dead));
        self.join();
    }
}

/// The text of a thread's panic.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "it panicked".to_owned())
}

/// The reason a live source that went quiet for `bound` is given up.
fn stalled(bound: Duration) -> String {
    format!("no data for {:.1} s (stalled)", bound.as_secs_f64())
}

/// The decoding thread: open, report, start the converter, then pictures until the end,
/// damage, or the converter hanging up; it returns once its converter has ended.
fn decode(
    source: &Source,
    swap_channels: bool,
    gpu: &GpuPlacement,
    opened: &SyncSender<Result<DecoderInUse, OpenFailure>>,
    frames: SyncSender<Message>,
) {
    let opening = match source {
        Source::File(path, threads) => MediaFile::open(path, *threads, gpu),
        Source::Live(live) => MediaFile::open_live(live, gpu),
    };
    let mut media = match opening {
        Ok(media) => media,
        Err(failure) => {
            let _ = opened.send(Err(failure));
            return;
        }
    };
    let (pictures, pictures_rx) = sync_channel::<Stage>(PICTURES_AHEAD);
    let converter = std::thread::Builder::new()
        .name("vf-video-convert".to_owned())
        .spawn(move || convert(swap_channels, &pictures_rx, &frames));
    let converter = match converter {
        Ok(handle) => handle,
        Err(e) => {
            let _ = opened.send(Err(OpenFailure::Thread(e.to_string())));
            return;
        }
    };
    if opened.send(Ok(media.decoder_in_use().clone())).is_ok() {
        loop {
            let (stage, last) = match media.next_frame() {
                Ok(Some(picture)) => (Stage::Picture(picture), false),
                Ok(None) => (Stage::End, true),
                Err(damage) => (Stage::Damaged(damage), true),
            };
            if pictures.send(stage).is_err() || last {
                break;
            }
        }
    }
    drop(pictures);
    // The converter ends once its input is closed (or the node hung up); a panic in it
    // ends its output, which the node reads as the thread having stopped.
    if let Err(panic) = converter.join() {
        tracing::warn!(
            "the video converter panicked: {}",
            panic_text(panic.as_ref())
        );
    }
}

/// The converting thread: each picture to packed BGR (RGB with `swap_channels`), passed on
/// in order with the end or the damage that follows the last one.
fn convert(swap_channels: bool, pictures: &Receiver<Stage>, frames: &SyncSender<Message>) {
    let mut converter = Converter::new(swap_channels);
    while let Ok(stage) = pictures.recv() {
        let (message, last) = match stage {
            Stage::Picture(decoded) => match converter.convert(&decoded.picture) {
                Ok(packed) => (
                    Message::Frame(DecodedFrame {
                        width: packed.width,
                        height: packed.height,
                        data: packed.data,
                        position_ms: decoded.position_ms,
                    }),
                    false,
                ),
                Err(reason) => (
                    Message::Damaged(Damage {
                        byte_offset: None,
                        reason,
                    }),
                    true,
                ),
            },
            Stage::End => (Message::End, true),
            Stage::Damaged(damage) => (Message::Damaged(damage), true),
        };
        if frames.send(message).is_err() || last {
            return;
        }
    }
}
