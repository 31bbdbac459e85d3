//! 8-bit planar YUV 4:2:0 pictures to packed 8-bit BGR (or RGB), with the arithmetic of
//! swscale's unscaled x86 fast path (`yuv420_bgr24`): every sample widened to 16 bits and
//! scaled by 8, offsets subtracted, products kept as their high 16 bits, sums saturated,
//! results clamped to 0..=255. Two pixels of a row share one chroma sample, two rows share
//! one chroma row.
//!
//! Why this exists: the video reader converts every decoded frame exactly as OpenCV's FFmpeg
//! backend does (swscale at the same size, `SWS_BICUBIC`), and on a 2-core machine that
//! conversion is a fifth of the decode's cost. swscale's fast path is 128 bits wide
//! (SSSE3); the same arithmetic 256 bits wide (AVX2) does a 1080p frame in about half the
//! time, and gives the same bytes, because every step is exact integer arithmetic on the
//! same coefficients.
//!
//! The caller decides whether these bytes are the ones it must reproduce: the worker checks
//! [`convert`] against the swscale it loaded, on every (Y, U, V), before it uses it
//! (`worker/src/nodes/video/convert.rs`).
//!
//! - [`calibration`] — pictures holding every (Y, U, V), to check a converter against another.
//! - [`coefficients`] — swscale's conversion table for a colourspace and range.
//! - [`scalar`] — the arithmetic, one pixel at a time: the definition, and the tail of a row.
//! - `avx2` — 32 pixels at a time (x86-64 only).

pub mod calibration;
pub mod coefficients;
pub mod scalar;

#[cfg(target_arch = "x86_64")]
mod avx2;

pub use coefficients::Coefficients;

/// The byte order of a packed pixel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Blue, green, red (OpenCV's order, `BGR24`).
    Bgr,
    /// Red, green, blue (`RGB24`).
    Rgb,
}

/// One 8-bit planar 4:2:0 picture: `width × height` pixels, rows of `stride` bytes per plane.
#[derive(Debug, Clone, Copy)]
pub struct Picture<'a> {
    /// Pixels per row.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// Luma, `height` rows of `width` samples.
    pub y: &'a [u8],
    /// Bytes from one luma row to the next.
    pub y_stride: usize,
    /// Blue-difference chroma, `height / 2` rows (rounded up) of `width / 2` samples
    /// (rounded up).
    pub u: &'a [u8],
    /// Bytes from one `u` row to the next.
    pub u_stride: usize,
    /// Red-difference chroma, laid out as `u`.
    pub v: &'a [u8],
    /// Bytes from one `v` row to the next.
    pub v_stride: usize,
}

/// Where a converted picture goes: rows of `width × 3` bytes, `stride` apart.
#[derive(Debug)]
pub struct Packed<'a> {
    /// The output rows.
    pub bytes: &'a mut [u8],
    /// Bytes from one output row to the next.
    pub stride: usize,
    /// The byte order of each pixel.
    pub order: Order,
}

/// Which code converted a picture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// 32 pixels at a time in AVX2 (the tail of a row one pixel at a time).
    Avx2,
    /// One pixel at a time.
    Scalar,
}

/// Why a picture could not be converted: its planes or the output are shorter than its
/// size says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the picture's {buffer} buffer holds {len} bytes where its size and stride need {needed}")]
pub struct ShortBuffer {
    /// Which buffer: `y`, `u`, `v` or `output`.
    pub buffer: &'static str,
    /// Bytes it needs for the picture's size and stride.
    pub needed: usize,
    /// Bytes it has.
    pub len: usize,
}

/// Whether [`convert`] runs its AVX2 code on this CPU.
pub fn accelerated() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Converts `picture` into `out`, in AVX2 where the CPU has it ([`accelerated`]), one pixel
/// at a time otherwise.
pub fn convert(
    picture: &Picture<'_>,
    out: &mut Packed<'_>,
    c: &Coefficients,
) -> Result<Path, ShortBuffer> {
    let path = if accelerated() {
        Path::Avx2
    } else {
        Path::Scalar
    };
    convert_on(path, picture, out, c)?;
    Ok(path)
}

/// Converts `picture` one pixel at a time: the definition [`convert`]'s AVX2 code is tested
/// against.
pub fn convert_scalar(
    picture: &Picture<'_>,
    out: &mut Packed<'_>,
    c: &Coefficients,
) -> Result<(), ShortBuffer> {
    convert_on(Path::Scalar, picture, out, c)
}

/// Converts row by row on `path`; each row's pixels beyond the AVX2 blocks one at a time.
fn convert_on(
    path: Path,
    picture: &Picture<'_>,
    out: &mut Packed<'_>,
    c: &Coefficients,
) -> Result<(), ShortBuffer> {
    check(picture, out)?;
    let (width, stride, order) = (picture.width, out.stride, out.order);
    for row in 0..picture.height {
        let (y, u, v) = rows(picture, row);
        let line = &mut out.bytes[row * stride..row * stride + width * 3];
        let done = match path {
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => avx2::row(y, u, v, line, order, c),
            _ => 0,
        };
        scalar::row_from(done, y, u, v, line, order, c);
    }
    Ok(())
}

/// Luma row `row` and the chroma rows it shares, each cut to the samples of the row's pixels.
fn rows<'a>(planes: &Picture<'a>, row: usize) -> (&'a [u8], &'a [u8], &'a [u8]) {
    let width = planes.width;
    let cw = width.div_ceil(2);
    let (yo, co_u, co_v) = (
        row * planes.y_stride,
        (row / 2) * planes.u_stride,
        (row / 2) * planes.v_stride,
    );
    (
        &planes.y[yo..yo + width],
        &planes.u[co_u..co_u + cw],
        &planes.v[co_v..co_v + cw],
    )
}

/// Every row [`rows`] and the output will slice is inside its buffer.
fn check(planes: &Picture<'_>, out: &Packed<'_>) -> Result<(), ShortBuffer> {
    let (width, height) = (planes.width, planes.height);
    if width == 0 || height == 0 {
        return Ok(());
    }
    let (cw, ch) = (width.div_ceil(2), height.div_ceil(2));
    let need = |buffer, stride: usize, row: usize, rows: usize, len: usize| {
        let needed = stride
            .checked_mul(rows - 1)
            .and_then(|n| n.checked_add(row))
            .unwrap_or(usize::MAX);
        let short = stride < row || len < needed;
        if short {
            Err(ShortBuffer {
                buffer,
                needed,
                len,
            })
        } else {
            Ok(())
        }
    };
    need("y", planes.y_stride, width, height, planes.y.len())?;
    need("u", planes.u_stride, cw, ch, planes.u.len())?;
    need("v", planes.v_stride, cw, ch, planes.v.len())?;
    need("output", out.stride, width * 3, height, out.bytes.len())
}
