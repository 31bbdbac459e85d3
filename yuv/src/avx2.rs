//! The conversion 32 pixels at a time on 256-bit lanes: the steps of [`crate::scalar`] on
//! sixteen 16-bit lanes each, even and odd pixels apart (they share chroma), then packed to
//! bytes and interleaved to 3 bytes a pixel with byte shuffles.
//!
//! AVX2's byte shuffles and packs work within each 128-bit half, so the lanes are arranged
//! for that: the low half of every register carries pixels 0..16 of the block, the high half
//! pixels 16..32, and each half is packed to 48 output bytes on its own.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m256i, _mm_loadu_si128, _mm256_adds_epi16, _mm256_and_si256, _mm256_cvtepu8_epi16,
    _mm256_loadu_si256, _mm256_mulhi_epi16, _mm256_or_si256, _mm256_packus_epi16,
    _mm256_permute2x128_si256, _mm256_set1_epi16, _mm256_shuffle_epi8, _mm256_slli_epi16,
    _mm256_srli_epi16, _mm256_srli_si256, _mm256_storeu_si256, _mm256_sub_epi16, _mm256_subs_epi16,
    _mm256_unpacklo_epi8,
};

use crate::{Coefficients, Order};

/// Pixels per step.
const BLOCK: usize = 32;

/// The `pshufb` control that places plane `plane`'s bytes (0, 1, 2: the first, second and
/// third byte of a packed pixel) into output chunk `chunk` (0, 1, 2: bytes 0..16, 16..32,
/// 32..48 of 16 packed pixels); the other positions get 0 (`-128`: the high bit set).
const fn shuffle(chunk: usize, plane: usize) -> [i8; 32] {
    let mut m = [-128i8; 32];
    let mut i = 0;
    while i < 16 {
        let k = chunk * 16 + i;
        if k % 3 == plane {
            m[i] = (k / 3) as i8;
            m[i + 16] = (k / 3) as i8;
        }
        i += 1;
    }
    m
}

const SHUFFLES: [[[i8; 32]; 3]; 3] = [
    [shuffle(0, 0), shuffle(0, 1), shuffle(0, 2)],
    [shuffle(1, 0), shuffle(1, 1), shuffle(1, 2)],
    [shuffle(2, 0), shuffle(2, 1), shuffle(2, 2)],
];

/// Converts the leading whole blocks of a row (see [`crate::scalar::row_from`] for the
/// arguments) and returns how many pixels it converted; the caller converts the rest.
/// Returns 0 on a CPU without AVX2.
pub(crate) fn row(
    y: &[u8],
    u: &[u8],
    v: &[u8],
    out: &mut [u8],
    order: Order,
    c: &Coefficients,
) -> usize {
    if !std::arch::is_x86_feature_detected!("avx2") {
        return 0;
    }
    let blocks = (y.len() / BLOCK)
        .min(u.len() / (BLOCK / 2))
        .min(v.len() / (BLOCK / 2))
        .min(out.len() / (BLOCK * 3));
    // SAFETY: AVX2 was detected above, and `blocks` whole blocks fit in every slice: each
    // block reads 32 bytes of `y` and 16 of `u` and `v`, and writes 96 bytes of `out`.
    unsafe { blocks_avx2(y, u, v, out, blocks, order, c) };
    blocks * BLOCK
}

/// The caller guarantees AVX2 and that `blocks` blocks fit in each slice.
#[target_feature(enable = "avx2")]
unsafe fn blocks_avx2(
    y: &[u8],
    u: &[u8],
    v: &[u8],
    out: &mut [u8],
    blocks: usize,
    order: Order,
    c: &Coefficients,
) {
    let y_offset = _mm256_set1_epi16(c.y_offset);
    let y_coeff = _mm256_set1_epi16(c.y);
    let uv_offset = _mm256_set1_epi16(c.uv_offset);
    let v_to_r = _mm256_set1_epi16(c.v_to_r);
    let u_to_b = _mm256_set1_epi16(c.u_to_b);
    let u_to_g = _mm256_set1_epi16(c.u_to_g);
    let v_to_g = _mm256_set1_epi16(c.v_to_g);
    let low_bytes = _mm256_set1_epi16(0x00ff);
    // SAFETY (every load and store below): block `b` reads y[32b..32b+32], u and v
    // [16b..16b+16] and writes out[96b..96b+96], all within the slices by the caller's
    // guarantee; the loads and stores are unaligned ones.
    let masks =
        unsafe { SHUFFLES.map(|chunk| chunk.map(|m| _mm256_loadu_si256(m.as_ptr().cast()))) };
    for b in 0..blocks {
        let luma = unsafe { _mm256_loadu_si256(y.as_ptr().add(b * BLOCK).cast()) };
        // Chroma sample i serves pixels 2i and 2i+1: lane i of the even and odd luma.
        let us = _mm256_cvtepu8_epi16(unsafe { _mm_loadu_si128(u.as_ptr().add(b * 16).cast()) });
        let vs = _mm256_cvtepu8_epi16(unsafe { _mm_loadu_si128(v.as_ptr().add(b * 16).cast()) });
        let us = _mm256_subs_epi16(_mm256_slli_epi16::<3>(us), uv_offset);
        let vs = _mm256_subs_epi16(_mm256_slli_epi16::<3>(vs), uv_offset);
        let even = _mm256_sub_epi16(
            _mm256_slli_epi16::<3>(_mm256_and_si256(luma, low_bytes)),
            y_offset,
        );
        let odd = _mm256_sub_epi16(
            _mm256_slli_epi16::<3>(_mm256_srli_epi16::<8>(luma)),
            y_offset,
        );
        let even = _mm256_mulhi_epi16(even, y_coeff);
        let odd = _mm256_mulhi_epi16(odd, y_coeff);
        let g_uv = _mm256_adds_epi16(
            _mm256_mulhi_epi16(us, u_to_g),
            _mm256_mulhi_epi16(vs, v_to_g),
        );
        let b_uv = _mm256_mulhi_epi16(us, u_to_b);
        let r_uv = _mm256_mulhi_epi16(vs, v_to_r);
        let blue = interleave(_mm256_adds_epi16(even, b_uv), _mm256_adds_epi16(odd, b_uv));
        let green = interleave(_mm256_adds_epi16(even, g_uv), _mm256_adds_epi16(odd, g_uv));
        let red = interleave(_mm256_adds_epi16(even, r_uv), _mm256_adds_epi16(odd, r_uv));
        let planes = match order {
            Order::Bgr => [blue, green, red],
            Order::Rgb => [red, green, blue],
        };
        // Per 128-bit half: three 16-byte chunks of 16 packed pixels.
        let chunk = |k: usize| {
            let [m0, m1, m2] = masks[k];
            _mm256_or_si256(
                _mm256_or_si256(
                    _mm256_shuffle_epi8(planes[0], m0),
                    _mm256_shuffle_epi8(planes[1], m1),
                ),
                _mm256_shuffle_epi8(planes[2], m2),
            )
        };
        let (c0, c1, c2) = (chunk(0), chunk(1), chunk(2));
        // Pixels 0..16 are the low halves of c0, c1, c2; pixels 16..32 the high halves.
        let first = _mm256_permute2x128_si256::<0x20>(c0, c1);
        let second = _mm256_permute2x128_si256::<0x30>(c2, c0);
        let third = _mm256_permute2x128_si256::<0x31>(c1, c2);
        let at = out.as_mut_ptr().wrapping_add(b * BLOCK * 3);
        unsafe {
            _mm256_storeu_si256(at.cast(), first);
            _mm256_storeu_si256(at.add(32).cast(), second);
            _mm256_storeu_si256(at.add(64).cast(), third);
        }
    }
}

/// Even- and odd-pixel 16-bit results, clamped to bytes, in pixel order within each
/// 128-bit half.
#[target_feature(enable = "avx2")]
fn interleave(even: __m256i, odd: __m256i) -> __m256i {
    // Per half: the 8 even pixels' bytes, then the 8 odd ones'.
    let packed = _mm256_packus_epi16(even, odd);
    _mm256_unpacklo_epi8(packed, _mm256_srli_si256::<8>(packed))
}
