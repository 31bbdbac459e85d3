//! The conversion one pixel at a time, step for step as the fast path computes it on
//! 16-bit lanes.

use crate::{Coefficients, Order};

/// The high 16 bits of a signed 16 × 16 product (`pmulhw`).
fn mulhi(a: i16, b: i16) -> i16 {
    ((i32::from(a) * i32::from(b)) >> 16) as i16
}

/// A 16-bit result clamped to a byte (`packuswb`).
fn clamp(x: i16) -> u8 {
    x.clamp(0, 255) as u8
}

/// Converts the pixels `from..` of one row: luma `y`, the chroma samples `u`, `v` it shares
/// (one per two pixels), into `out` (3 bytes a pixel). `from` is even.
pub fn row_from(
    from: usize,
    y: &[u8],
    u: &[u8],
    v: &[u8],
    out: &mut [u8],
    order: Order,
    c: &Coefficients,
) {
    for x in from..y.len() {
        let us = (i16::from(u[x / 2]) << 3).saturating_sub(c.uv_offset);
        let vs = (i16::from(v[x / 2]) << 3).saturating_sub(c.uv_offset);
        let g_uv = mulhi(us, c.u_to_g).saturating_add(mulhi(vs, c.v_to_g));
        let b_uv = mulhi(us, c.u_to_b);
        let r_uv = mulhi(vs, c.v_to_r);
        let luma = mulhi((i16::from(y[x]) << 3).wrapping_sub(c.y_offset), c.y);
        let (b, g, r) = (
            clamp(luma.saturating_add(b_uv)),
            clamp(luma.saturating_add(g_uv)),
            clamp(luma.saturating_add(r_uv)),
        );
        let px = &mut out[x * 3..x * 3 + 3];
        match order {
            Order::Bgr => px.copy_from_slice(&[b, g, r]),
            Order::Rgb => px.copy_from_slice(&[r, g, b]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(y: u8, u: u8, v: u8) -> [u8; 3] {
        let mut out = [0; 3];
        row_from(
            0,
            &[y],
            &[u],
            &[v],
            &mut out,
            Order::Bgr,
            &Coefficients::bt601_limited(),
        );
        out
    }

    /// Limited-range black, white and grey are themselves; pure colours saturate.
    #[test]
    fn reference_colours() {
        assert_eq!(one(16, 128, 128), [0, 0, 0]);
        assert_eq!(one(235, 128, 128), [255, 255, 255]);
        let grey = one(126, 128, 128);
        assert!(grey.iter().all(|&c| c == grey[0]) && (127..=129).contains(&grey[0]));
        assert_eq!(one(255, 255, 255)[0], 255);
        assert_eq!(one(0, 0, 0), [0, 135, 0]);
    }
}
