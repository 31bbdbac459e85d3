//! A set of pictures in which every 8-bit (Y, U, V) occurs once: what a caller converts
//! with both this crate and the converter it must equal, to know that it does.
//!
//! Each picture is [`SIZE`] × [`SIZE`] pixels, 2^20 triples: every (U, V) pair with the 16
//! luma values `16 × part ..= 16 × part + 15`, four to a 2×2 block (which shares one chroma
//! sample). [`PARTS`] pictures cover all 2^24.

/// Pixels per side of one calibration picture.
pub const SIZE: usize = 1024;

/// Pictures that together hold every triple.
pub const PARTS: u8 = 16;

/// Writes calibration picture `part` (0..[`PARTS`]) into planes of the given strides, each
/// at least [`SIZE`] (luma) or [`SIZE`]/2 (chroma) wide, with [`SIZE`] and [`SIZE`]/2 rows.
pub fn fill(
    part: u8,
    y: &mut [u8],
    y_stride: usize,
    u: &mut [u8],
    u_stride: usize,
    v: &mut [u8],
    v_stride: usize,
) {
    let half = SIZE / 2;
    for by in 0..half {
        for bx in 0..half {
            let block = by * half + bx;
            let uv = block >> 2;
            u[by * u_stride + bx] = (uv >> 8) as u8;
            v[by * v_stride + bx] = uv as u8;
            let base = (usize::from(part) * 16 + (block & 3) * 4) as u8;
            let top = 2 * by * y_stride + 2 * bx;
            y[top] = base;
            y[top + 1] = base + 1;
            y[top + y_stride] = base + 2;
            y[top + y_stride + 1] = base + 3;
        }
    }
}
