//! Decoded pictures to packed 8-bit BGR (or RGB) bytes, as OpenCV's FFmpeg backend converts
//! them: an swscale context to `BGR24` with `SWS_BICUBIC` at the decoded size. For a
//! conversion without resizing that selects swscale's unscaled YUV→RGB path, so the result
//! is what `ffmpeg -pix_fmt bgr24` writes and what 1.0.4's reader returns, byte for byte.
//!
//! Two things keep the cost per frame to the conversion itself:
//!
//! - The conversion writes straight into the picture that becomes the output tensor's bytes
//!   (`Bytes::from_owner` over the frame), with no second copy, whenever its rows are
//!   packed (`width × 3` a multiple of 32 bytes, as at 640, 1280, 1920 or 3840 pixels).
//!   Other widths are copied once into packed rows.
//! - When those bytes are dropped, the picture goes back to the converter's [`Pool`] for a
//!   later frame of the same size: a fresh 6 MB buffer per 1080p frame would cost the
//!   allocator's page faults on every frame, and the pool keeps memory flat.
//! - With `swap_channels` the converter writes `RGB24` instead of `BGR24` and then swapping
//!   every pixel, for 8-bit YUV pictures (what cameras and files nearly always carry):
//!   swscale's RGB and BGR writers are mirror images there, so the bytes are the BGR ones
//!   with the channels swapped (tested per format). Deeper pictures are dithered down to 8
//!   bits with a pattern that depends on the channel's place, so those are converted to BGR
//!   and swapped afterwards.
//!
//! The commonest case — an 8-bit limited-range `yuv420p` picture whose width is a multiple
//! of 16 and height even (what swscale converts on its x86 fast path, `yuv420_bgr24`) — is
//! converted by `videoflow_yuv`'s AVX2 code instead, with the same arithmetic 256 bits wide
//! in place of swscale's 128: about half the time for a 1080p frame. It is used only once
//! it was seen to give this process's swscale's bytes for every (Y, U, V) (checked once,
//! on 16 calibration pictures, [`kernel_agrees`]); on a CPU without AVX2, or a swscale that
//! computes otherwise, swscale converts every picture.
//!
//! NVDEC's pictures are semi-planar (`NV12`, `P010`): they are first laid out planar, the
//! layout libavcodec's own decoder gives for the same stream (an exact copy, no arithmetic),
//! and then converted by the same context, so a GPU-decoded frame is converted exactly as
//! a CPU-decoded one.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use bytes::Bytes;
use ffmpeg::format::Pixel;
use ffmpeg::software::scaling::{self, Flags};
use ffmpeg::util::frame::video::Video as RawFrame;
use ffmpeg_next as ffmpeg;
use videoflow_yuv::{Coefficients, Order, Picture, calibration};

/// A converted picture: `height × width × 3` bytes, rows packed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Packed {
    /// Pixels per row.
    pub width: u32,
    /// Rows.
    pub height: u32,
    /// `BGR` (or `RGB`) bytes, row after row.
    pub data: Bytes,
}

/// Converted pictures no longer referenced: more than the frames a reader keeps in flight
/// (the node's queue, the one being converted, the one being published).
const POOL_SIZE: usize = 4;

/// Output pictures handed back when the bytes made of them are dropped (on whatever thread
/// drops them), reused by the converter for the next frames of the same size and format.
#[derive(Clone, Default)]
struct Pool(Arc<Mutex<Vec<RawFrame>>>);

impl Pool {
    /// A free picture of `format` at `width × height`, if one came back; pictures of
    /// another size are dropped (the stream changed size).
    fn take(&self, format: Pixel, width: u32, height: u32) -> Option<RawFrame> {
        let mut free = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        free.retain(|f| (f.format(), f.width(), f.height()) == (format, width, height));
        free.pop()
    }

    fn give(&self, frame: RawFrame) {
        let mut free = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if free.len() < POOL_SIZE {
            free.push(frame);
        }
    }
}

/// A converted picture whose rows are packed, owned by the bytes that expose it; back to
/// its pool when they are dropped.
struct PackedPicture {
    frame: Option<RawFrame>,
    len: usize,
    pool: Pool,
}

impl AsRef<[u8]> for PackedPicture {
    fn as_ref(&self) -> &[u8] {
        // `len` was checked against plane 0 when the picture was wrapped.
        self.frame.as_ref().map_or(&[], |f| &f.data(0)[..self.len])
    }
}

impl Drop for PackedPicture {
    fn drop(&mut self) {
        if let Some(frame) = self.frame.take() {
            self.pool.give(frame);
        }
    }
}

/// The planar layout libavcodec's software decoder gives for a semi-planar picture NVDEC
/// hands back (same bit depth, same subsampling).
fn planar_twin(format: Pixel) -> Option<Pixel> {
    match format {
        Pixel::NV12 => Some(Pixel::YUV420P),
        Pixel::P010LE => Some(Pixel::YUV420P10LE),
        Pixel::P016LE => Some(Pixel::YUV420P16LE),
        _ => None,
    }
}

/// Whether swscale's `RGB24` output of `format` is exactly its `BGR24` output with the
/// channels swapped (8-bit planar YUV: no dithering).
fn rgb_mirrors_bgr(format: Pixel) -> bool {
    matches!(
        format,
        Pixel::YUV420P
            | Pixel::YUVJ420P
            | Pixel::YUV422P
            | Pixel::YUVJ422P
            | Pixel::YUV444P
            | Pixel::YUVJ444P
    )
}

/// The converter of one stream; holds its swscale contexts, which are not `Send`, so it is
/// created and used on one thread.
pub(crate) struct Converter {
    /// `swap_channels`: RGB out instead of BGR.
    rgb: bool,
    /// Semi-planar → planar (NVDEC pictures), and the picture it writes.
    planar: Option<(scaling::Context, RawFrame)>,
    scaler: Option<scaling::Context>,
    pool: Pool,
    /// Whether `videoflow_yuv` may convert the pictures it reproduces ([`kernel_agrees`]).
    kernel: bool,
}

impl Converter {
    /// A converter to BGR, or RGB with `swap_channels`.
    pub(crate) fn new(swap_channels: bool) -> Self {
        Converter {
            rgb: swap_channels,
            planar: None,
            scaler: None,
            pool: Pool::default(),
            kernel: true,
        }
    }

    /// A converter that leaves every picture to swscale (what the kernel is compared with).
    #[cfg(test)]
    fn swscale_only(swap_channels: bool) -> Self {
        Converter {
            kernel: false,
            ..Converter::new(swap_channels)
        }
    }

    /// `picture` as packed BGR (or RGB) bytes at its own size.
    pub(crate) fn convert(&mut self, picture: &RawFrame) -> Result<Packed, String> {
        let (format, width, height) = (picture.format(), picture.width(), picture.height());
        if width == 0 || height == 0 {
            return Err("the decoder returned an empty picture".to_owned());
        }
        let source = match planar_twin(format) {
            Some(twin) => {
                let stale = self.planar.as_ref().is_none_or(|(s, _)| {
                    let i = s.input();
                    (i.format, i.width, i.height) != (format, width, height)
                });
                if stale {
                    let context = scaling::Context::get(
                        format,
                        width,
                        height,
                        twin,
                        width,
                        height,
                        Flags::BICUBIC,
                    )
                    .map_err(|e| format!("cannot lay {format:?} pictures out as {twin:?}: {e}"))?;
                    self.planar = Some((context, RawFrame::empty()));
                }
                let Some((context, planar)) = self.planar.as_mut() else {
                    return Err("no planar converter".to_owned());
                };
                context
                    .run(picture, planar)
                    .map_err(|e| format!("laying the picture out planar failed: {e}"))?;
                &*planar
            }
            None => picture,
        };
        let format = source.format();
        let direct_rgb = self.rgb && rgb_mirrors_bgr(format);
        let output = if direct_rgb {
            Pixel::RGB24
        } else {
            Pixel::BGR24
        };
        let stale = self.scaler.as_ref().is_none_or(|s| {
            let (i, o) = (s.input(), s.output());
            (i.format, i.width, i.height, o.format) != (format, width, height, output)
        });
        if stale {
            // As sws_getCachedContext: a new context only when the picture changes.
            let scaler =
                scaling::Context::get(format, width, height, output, width, height, Flags::BICUBIC)
                    .map_err(|e| format!("cannot convert {format:?} pictures to BGR: {e}"))?;
            self.scaler = Some(scaler);
        }
        let Some(scaler) = self.scaler.as_mut() else {
            return Err("no colour converter".to_owned());
        };
        let mut converted = self
            .pool
            .take(output, width, height)
            .unwrap_or_else(|| RawFrame::new(output, width, height));
        if converted.planes() == 0 {
            return Err(format!(
                "no memory for a {width}×{height} picture (the conversion's output)"
            ));
        }
        if !(self.kernel && kernel_converts(source) && kernel_agrees()) {
            scaler
                .run(source, &mut converted)
                .map_err(|e| format!("colour conversion failed: {e}"))?;
        } else {
            let order = if direct_rgb { Order::Rgb } else { Order::Bgr };
            kernel_convert(source, &mut converted, order)?;
        }
        let row = width as usize * 3;
        let rows = height as usize;
        let stride = converted.stride(0);
        let plane = converted.data(0).len();
        if stride < row || plane < stride * (rows - 1) + row {
            return Err("colour conversion produced a short picture".to_owned());
        }
        if self.rgb && !direct_rgb {
            for y in 0..rows {
                let line = &mut converted.data_mut(0)[y * stride..y * stride + row];
                for px in line.chunks_exact_mut(3) {
                    px.swap(0, 2);
                }
            }
        }
        let data = if stride == row {
            Bytes::from_owner(PackedPicture {
                frame: Some(converted),
                len: row * rows,
                pool: self.pool.clone(),
            })
        } else {
            let src = converted.data(0);
            let mut packed = Vec::with_capacity(row * rows);
            for y in 0..rows {
                packed.extend_from_slice(&src[y * stride..y * stride + row]);
            }
            Bytes::from(packed)
        };
        Ok(Packed {
            width,
            height,
            data,
        })
    }
}

/// Whether `picture` is one swscale converts on its `yuv420_bgr24` fast path, the arithmetic
/// `videoflow_yuv` reproduces: 8-bit limited-range 4:2:0, a width of whole 16-pixel steps, an
/// even height.
fn kernel_converts(picture: &RawFrame) -> bool {
    picture.format() == Pixel::YUV420P
        && picture.width().is_multiple_of(16)
        && picture.height().is_multiple_of(2)
}

/// `picture` ([`kernel_converts`]) into `out`, a `BGR24`/`RGB24` picture of its size.
fn kernel_convert(picture: &RawFrame, out: &mut RawFrame, order: Order) -> Result<(), String> {
    let planes = Picture {
        width: picture.width() as usize,
        height: picture.height() as usize,
        y: picture.data(0),
        y_stride: picture.stride(0),
        u: picture.data(1),
        u_stride: picture.stride(1),
        v: picture.data(2),
        v_stride: picture.stride(2),
    };
    let stride = out.stride(0);
    let mut packed = videoflow_yuv::Packed {
        bytes: out.data_mut(0),
        stride,
        order,
    };
    videoflow_yuv::convert(&planes, &mut packed, &Coefficients::bt601_limited())
        .map(|_| ())
        .map_err(|e| format!("colour conversion failed: {e}"))
}

/// Whether `videoflow_yuv` runs its AVX2 code here and gives the bytes this process's swscale
/// gives, for every (Y, U, V) of limited-range `yuv420p` to `BGR24`: checked on the first
/// call (16 calibration pictures of 1024 × 1024, a few tens of milliseconds) and logged.
pub(crate) fn kernel_agrees() -> bool {
    static AGREES: OnceLock<bool> = OnceLock::new();
    *AGREES.get_or_init(|| {
        if !videoflow_yuv::accelerated() {
            tracing::debug!("colour conversion: swscale (this CPU has no AVX2)");
            return false;
        }
        match calibrate() {
            Ok(()) => {
                tracing::debug!(
                    "colour conversion: AVX2, equal to swscale for every (Y, U, V) of yuv420p"
                );
                true
            }
            Err(why) => {
                tracing::warn!("colour conversion: swscale, not the AVX2 kernel: {why}");
                false
            }
        }
    })
}

/// Converts the calibration pictures with swscale and with the kernel; the first difference.
fn calibrate() -> Result<(), String> {
    let size = calibration::SIZE as u32;
    let mut scaler = scaling::Context::get(
        Pixel::YUV420P,
        size,
        size,
        Pixel::BGR24,
        size,
        size,
        Flags::BICUBIC,
    )
    .map_err(|e| format!("no swscale context to check it against: {e}"))?;
    let mut source = RawFrame::new(Pixel::YUV420P, size, size);
    let mut want = RawFrame::new(Pixel::BGR24, size, size);
    let mut got = RawFrame::new(Pixel::BGR24, size, size);
    let row = calibration::SIZE * 3;
    let (ys, us, vs) = (source.stride(0), source.stride(1), source.stride(2));
    // The planes are filled apart and copied in: a frame's planes are one `&mut` borrow.
    let mut y = vec![0; ys * calibration::SIZE];
    let mut u = vec![0; us * calibration::SIZE / 2];
    let mut v = vec![0; vs * calibration::SIZE / 2];
    for part in 0..calibration::PARTS {
        calibration::fill(part, &mut y, ys, &mut u, us, &mut v, vs);
        source.data_mut(0)[..y.len()].copy_from_slice(&y);
        source.data_mut(1)[..u.len()].copy_from_slice(&u);
        source.data_mut(2)[..v.len()].copy_from_slice(&v);
        scaler
            .run(&source, &mut want)
            .map_err(|e| format!("swscale failed on a calibration picture: {e}"))?;
        kernel_convert(&source, &mut got, Order::Bgr)?;
        let (ws, gs) = (want.stride(0), got.stride(0));
        for r in 0..calibration::SIZE {
            if want.data(0)[r * ws..r * ws + row] != got.data(0)[r * gs..r * gs + row] {
                return Err(format!(
                    "calibration picture {part} differs from swscale's in row {r}"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A picture of `format` filled with a deterministic pattern (every plane, every byte of
    /// its rows; 16-bit formats keep their samples in range of their depth).
    fn pattern(format: Pixel, width: u32, height: u32, seed: u32) -> RawFrame {
        let mut frame = RawFrame::new(format, width, height);
        let depth_mask: u16 = match format {
            Pixel::YUV420P10LE => 0x03ff,
            _ => 0xffff,
        };
        for plane in 0..frame.planes() {
            let wide = matches!(format, Pixel::YUV420P10LE | Pixel::YUV420P16LE);
            let data = frame.data_mut(plane);
            let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(plane as u32);
            if wide {
                for pair in data.chunks_exact_mut(2) {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    let v = (x as u16) & depth_mask;
                    pair.copy_from_slice(&v.to_le_bytes());
                }
            } else {
                for b in data.iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    *b = x as u8;
                }
            }
        }
        frame
    }

    /// `picture` re-laid out as `format` by swscale (what NVDEC would hand back).
    fn relaid(picture: &RawFrame, format: Pixel) -> RawFrame {
        let (w, h) = (picture.width(), picture.height());
        let mut ctx = scaling::Context::get(picture.format(), w, h, format, w, h, Flags::BICUBIC)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut out = RawFrame::empty();
        ctx.run(picture, &mut out).unwrap_or_else(|e| panic!("{e}"));
        out
    }

    #[test]
    fn semi_planar_pictures_convert_to_the_same_bytes_as_their_planar_twins() {
        for (planar, semi) in [
            (Pixel::YUV420P, Pixel::NV12),
            (Pixel::YUV420P10LE, Pixel::P010LE),
            (Pixel::YUV420P16LE, Pixel::P016LE),
        ] {
            for (w, h) in [(64, 36), (1920, 1080), (34, 18)] {
                let original = pattern(planar, w, h, w + h);
                let semi_planar = relaid(&original, semi);
                assert_eq!(semi_planar.format(), semi);
                let direct = Converter::new(false)
                    .convert(&original)
                    .unwrap_or_else(|e| panic!("{e}"));
                let through = Converter::new(false)
                    .convert(&semi_planar)
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!((through.width, through.height), (w, h));
                assert!(
                    direct.data == through.data,
                    "{semi:?} {w}×{h} converts unlike {planar:?}"
                );
            }
        }
    }

    #[test]
    fn rgb_output_is_bgr_with_the_channels_swapped() {
        for format in [
            Pixel::YUV420P,
            Pixel::YUVJ420P,
            Pixel::YUV422P,
            Pixel::YUVJ422P,
            Pixel::YUV444P,
            Pixel::YUVJ444P,
            Pixel::NV12,
            Pixel::YUV420P10LE,
            Pixel::P010LE,
            Pixel::GRAY8,
            Pixel::RGB24,
        ] {
            for (w, h) in [(64, 36), (30, 20)] {
                let picture = pattern(format, w, h, 7);
                let bgr = Converter::new(false)
                    .convert(&picture)
                    .unwrap_or_else(|e| panic!("{e}"));
                let rgb = Converter::new(true)
                    .convert(&picture)
                    .unwrap_or_else(|e| panic!("{e}"));
                let swapped: Vec<u8> = bgr
                    .data
                    .chunks_exact(3)
                    .flat_map(|p| [p[2], p[1], p[0]])
                    .collect();
                assert!(rgb.data == swapped, "{format:?} {w}×{h}");
            }
        }
    }

    #[test]
    fn packed_and_padded_rows_both_come_out_packed() {
        // 1920 × 3 is a multiple of 32 (the picture is the output); 30 × 3 is not (copied).
        for (w, h) in [(1920, 8), (30, 8)] {
            let picture = pattern(Pixel::YUV420P, w, h, 3);
            let out = Converter::new(false)
                .convert(&picture)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(out.data.len(), w as usize * h as usize * 3);
        }
    }

    #[test]
    fn a_dropped_frame_is_reused_and_a_held_one_never_is() {
        let mut converter = Converter::new(false);
        let a = pattern(Pixel::YUV420P, 1920, 8, 1);
        let b = pattern(Pixel::YUV420P, 1920, 8, 2);
        let first = converter.convert(&a).unwrap_or_else(|e| panic!("{e}"));
        let want_a = first.data.to_vec();
        let at = first.data.as_ptr();
        drop(first);
        // The dropped picture's buffer carries the next frame.
        let second = converter.convert(&b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(second.data.as_ptr(), at);
        let want_b = Converter::new(false)
            .convert(&b)
            .unwrap_or_else(|e| panic!("{e}"))
            .data;
        assert!(second.data == want_b);
        // While held, a frame keeps its bytes: the next conversion gets another buffer.
        let third = converter.convert(&a).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(third.data.as_ptr(), second.data.as_ptr());
        assert!(third.data == want_a[..] && second.data == want_b);
    }

    #[test]
    fn a_size_change_gets_a_new_context() {
        let mut converter = Converter::new(false);
        let a = converter
            .convert(&pattern(Pixel::YUV420P, 64, 36, 1))
            .unwrap_or_else(|e| panic!("{e}"));
        let b = converter
            .convert(&pattern(Pixel::NV12, 32, 18, 1))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((a.width, a.height, a.data.len()), (64, 36, 64 * 36 * 3));
        assert_eq!((b.width, b.height, b.data.len()), (32, 18, 32 * 18 * 3));
    }

    /// The AVX2 kernel is in use wherever the CPU has it: it reproduced this swscale on every
    /// (Y, U, V).
    #[test]
    fn the_kernel_is_used_where_the_cpu_has_avx2() {
        assert_eq!(kernel_agrees(), videoflow_yuv::accelerated());
    }

    /// Pictures the kernel converts and pictures it leaves to swscale come out as swscale's,
    /// in both channel orders.
    #[test]
    fn the_kernel_gives_swscales_bytes() {
        for (w, h) in [
            (1920, 1080),
            (640, 360),
            (48, 2),
            (1280, 720),
            (30, 20),
            (64, 35),
        ] {
            for rgb in [false, true] {
                for format in [Pixel::YUV420P, Pixel::NV12, Pixel::YUVJ420P] {
                    let picture = pattern(format, w, h, w ^ h);
                    let fast = Converter::new(rgb)
                        .convert(&picture)
                        .unwrap_or_else(|e| panic!("{e}"));
                    let swscale = Converter::swscale_only(rgb)
                        .convert(&picture)
                        .unwrap_or_else(|e| panic!("{e}"));
                    assert!(fast == swscale, "{format:?} {w}×{h} rgb {rgb}");
                }
            }
        }
    }

    #[test]
    fn an_empty_picture_is_refused() {
        let e = Converter::new(false).convert(&RawFrame::empty());
        assert!(e.is_err());
    }
}
