//! OpenCV's `cv2.resize(im, (w, h))` — `INTER_LINEAR` on 8-bit images — reproduced exactly.
//!
//! Why exactly: 1.0.4's `ResizeImageTransformer` calls it, and a flow that moves a resize
//! from a Python worker to ours must not change a pixel. What OpenCV does, and this does:
//! - source positions in single precision: `fx = (float)((dx + 0.5) · scale − 0.5)` with
//!   `scale = 1 / (dst / src)` in double; the weights are `cvRound((1 − fx) · 2048)` and
//!   `cvRound(fx · 2048)` (11 fraction bits, rounding ties to even);
//! - columns left of the first or right of the last source pixel take that pixel alone;
//!   rows are not clamped that way — their weights stay, and the row index is clamped;
//! - the horizontal pass keeps 32-bit sums; the vertical pass is the vectorised one:
//!   `((S0 >> 4) · b0 >> 16) + ((S1 >> 4) · b1 >> 16) + 2 >> 2`.
//!
//! OpenCV's 2× downscale takes its area path instead, which gives the same bytes (checked
//! by the differential test, as are up- and downscales of odd factors).

/// Weight scale: 11 fraction bits (`INTER_RESIZE_COEF_BITS`).
const ONE: f32 = 2048.0;

/// A weight pair for destination index `d`: the source start and its two weights.
fn position(d: usize, scale: f64) -> (i64, i32, i32) {
    let f = ((d as f64 + 0.5) * scale - 0.5) as f32;
    let s = f.floor() as i64;
    let frac = f - s as f32;
    weights(s, frac)
}

fn weights(s: i64, frac: f32) -> (i64, i32, i32) {
    let w0 = ((1.0 - frac) * ONE).round_ties_even() as i32;
    let w1 = (frac * ONE).round_ties_even() as i32;
    (s, w0, w1)
}

/// The columns: positions before the first or past the last source pixel take that pixel
/// with full weight.
fn columns(dst: usize, src: usize) -> Vec<(usize, i32, i32)> {
    let scale = 1.0 / (dst as f64 / src as f64);
    let last = src as i64 - 1;
    (0..dst)
        .map(|d| {
            let (s, w0, w1) = position(d, scale);
            let (s, w0, w1) = if s < 0 {
                weights(0, 0.0)
            } else if s >= last {
                weights(last, 0.0)
            } else {
                (s, w0, w1)
            };
            (s as usize, w0, w1)
        })
        .collect()
}

/// The rows: weights as computed, start unclamped (each row index is clamped on use).
fn rows(dst: usize, src: usize) -> Vec<(i64, i32, i32)> {
    let scale = 1.0 / (dst as f64 / src as f64);
    (0..dst).map(|d| position(d, scale)).collect()
}

/// Resizes packed 8-bit pixels `src` (`sh × sw × channels`) to `dh × dw`. All sizes must
/// be positive (the node checks).
pub fn resize_linear(
    src: &[u8],
    sh: usize,
    sw: usize,
    channels: usize,
    dh: usize,
    dw: usize,
) -> Vec<u8> {
    let c = channels;
    let xs = columns(dw, sw);
    let ys = rows(dh, sh);
    let row_len = dw * c;
    // Horizontal pass of one source row into 32-bit sums.
    let hresize = |y: usize, out: &mut Vec<i32>| {
        out.clear();
        let row = &src[y * sw * c..(y + 1) * sw * c];
        for &(sx, a0, a1) in &xs {
            let p0 = &row[sx * c..(sx + 1) * c];
            if a1 == 0 || sx + 1 >= sw {
                out.extend(p0.iter().map(|&v| i32::from(v) * a0));
            } else {
                let p1 = &row[(sx + 1) * c..(sx + 2) * c];
                out.extend(
                    p0.iter()
                        .zip(p1)
                        .map(|(&v0, &v1)| i32::from(v0) * a0 + i32::from(v1) * a1),
                );
            }
        }
    };
    let clamp_row = |y: i64| y.clamp(0, sh as i64 - 1) as usize;
    let mut out = Vec::with_capacity(dh * row_len);
    let (mut buf0, mut buf1) = (Vec::with_capacity(row_len), Vec::with_capacity(row_len));
    let (mut have0, mut have1) = (usize::MAX, usize::MAX);
    for &(sy, b0, b1) in &ys {
        let (r0, r1) = (clamp_row(sy), clamp_row(sy + 1));
        // Keep the two horizontal rows of the last output row: consecutive output rows
        // mostly share them.
        if have0 != r0 {
            if have1 == r0 {
                std::mem::swap(&mut buf0, &mut buf1);
                std::mem::swap(&mut have0, &mut have1);
            } else {
                hresize(r0, &mut buf0);
                have0 = r0;
            }
        }
        if have1 != r1 {
            hresize(r1, &mut buf1);
            have1 = r1;
        }
        out.extend(buf0.iter().zip(&buf1).map(|(&s0, &s1)| {
            let v = (((s0 >> 4) * b0) >> 16) + (((s1 >> 4) * b1) >> 16);
            ((v + 2) >> 2).clamp(0, 255) as u8
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_size_is_a_copy() {
        let src: Vec<u8> = (0..5 * 7 * 3).map(|i| (i * 37 % 256) as u8).collect();
        assert_eq!(resize_linear(&src, 5, 7, 3, 5, 7), src);
    }

    #[test]
    fn halving_averages_each_two_by_two_block_rounding_half_up() {
        let src = [0u8, 1, 2, 3, 10, 20, 30, 40];
        // Rows [0 1 2 3] and [10 20 30 40] → (0+1+10+20+2)/4 = 8, (2+3+30+40+2)/4 = 19.
        assert_eq!(resize_linear(&src, 2, 4, 1, 1, 2), vec![8, 19]);
    }

    #[test]
    fn upscaling_a_single_pixel_repeats_it() {
        assert_eq!(
            resize_linear(&[9, 8, 7], 1, 1, 3, 2, 2),
            [9, 8, 7].repeat(4)
        );
    }
}
