//! swscale's YUV→RGB table for its fast path: six 16-bit factors and offsets, each applied
//! to a sample scaled by 8 so that a product's high 16 bits is the 8-bit result.
//!
//! Derived the way swscale derives it (`ff_yuv2rgb_c_init_tables`) from a colourspace's
//! inverse matrix `{crv, cbu, cgu, cgv}` in 16.16 fixed point, the range, and brightness 0,
//! contrast and saturation 1 — what a context gets when nobody calls
//! `sws_setColorspaceDetails`, as OpenCV and the video reader do not.

/// The factors of one conversion, as the fast path holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coefficients {
    /// Subtracted from `Y << 3`: the black level.
    pub y_offset: i16,
    /// Luma gain.
    pub y: i16,
    /// Subtracted (saturating) from `U << 3` and `V << 3`: 128 scaled by 8.
    pub uv_offset: i16,
    /// `V` → red.
    pub v_to_r: i16,
    /// `U` → blue.
    pub u_to_b: i16,
    /// `U` → green (negative).
    pub u_to_g: i16,
    /// `V` → green (negative).
    pub v_to_g: i16,
}

/// `{crv, cbu, cgu, cgv}` of ITU-R BT.601 (SMPTE 170M), swscale's default colourspace.
pub const BT601: [i64; 4] = [104_597, 132_201, 25_675, 53_279];

/// The nearest 16-bit integer to `f / 65536`, saturated.
const fn round_to_i16(f: i64) -> i16 {
    let r = (f + (1 << 15)) >> 16;
    if r > i16::MAX as i64 {
        i16::MAX
    } else if r < i16::MIN as i64 {
        i16::MIN
    } else {
        r as i16
    }
}

impl Coefficients {
    /// The table for a colourspace's inverse matrix (`{crv, cbu, cgu, cgv}`, 16.16) and a
    /// range: limited (Y 16..=235) or full.
    pub const fn new(inverse: [i64; 4], full_range: bool) -> Self {
        let (mut crv, mut cbu, mut cgu, mut cgv) =
            (inverse[0], inverse[1], -inverse[2], -inverse[3]);
        let (mut cy, mut oy) = (1i64 << 16, 0i64);
        if full_range {
            crv = crv * 224 / 255;
            cbu = cbu * 224 / 255;
            cgu = cgu * 224 / 255;
            cgv = cgv * 224 / 255;
        } else {
            cy = cy * 255 / 219;
            oy = 16 << 16;
        }
        // Contrast and saturation 1.0 (1 << 16 each), brightness 0.
        let (contrast, saturation) = (1i64 << 16, 1i64 << 16);
        cy = (cy * contrast) >> 16;
        crv = (crv * contrast * saturation) >> 32;
        cbu = (cbu * contrast * saturation) >> 32;
        cgu = (cgu * contrast * saturation) >> 32;
        cgv = (cgv * contrast * saturation) >> 32;
        Coefficients {
            y_offset: round_to_i16(oy * 8),
            y: round_to_i16(cy * 8192),
            uv_offset: 0x0400,
            v_to_r: round_to_i16(crv * 8192),
            u_to_b: round_to_i16(cbu * 8192),
            u_to_g: round_to_i16(cgu * 8192),
            v_to_g: round_to_i16(cgv * 8192),
        }
    }

    /// What swscale uses for a limited-range `yuv420p` picture by default (BT.601).
    pub const fn bt601_limited() -> Self {
        Coefficients::new(BT601, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The factors are the matrix's, scaled: 1.164 for luma over 219 levels, 1.596 V→R,
    /// 2.017 U→B, −0.391 U→G, −0.813 V→G, each × 8192.
    #[test]
    fn bt601_limited_is_the_familiar_matrix() {
        let c = Coefficients::bt601_limited();
        let f = |x: i16| f64::from(x) / 8192.0;
        assert!((f(c.y) - 255.0 / 219.0).abs() < 1e-3, "{c:?}");
        assert!((f(c.v_to_r) - 1.596).abs() < 2e-3, "{c:?}");
        assert!((f(c.u_to_b) - 2.017).abs() < 2e-3, "{c:?}");
        assert!((f(c.u_to_g) + 0.392).abs() < 2e-3, "{c:?}");
        assert!((f(c.v_to_g) + 0.813).abs() < 2e-3, "{c:?}");
        assert_eq!((c.y_offset, c.uv_offset), (128, 1024));
    }

    #[test]
    fn full_range_has_unit_luma_gain_and_no_black_level() {
        let c = Coefficients::new(BT601, true);
        assert_eq!((c.y, c.y_offset), (8192, 0));
    }
}
