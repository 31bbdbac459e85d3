//! The AVX2 conversion gives the bytes of the one-pixel-at-a-time definition: for every
//! (Y, U, V) there is, at every position of a 32-pixel block and of a row's tail, in both
//! byte orders, with padded strides.

use proptest::prelude::*;
use videoflow_yuv::calibration::{self, SIZE};
use videoflow_yuv::{
    Coefficients, Order, Packed, Path, Picture, ShortBuffer, convert, convert_scalar,
};

/// Calibration picture `part`: planes packed, `SIZE` × `SIZE`.
fn every_triple(part: u8) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let (mut y, mut u, mut v) = (
        vec![0; SIZE * SIZE],
        vec![0; SIZE * SIZE / 4],
        vec![0; SIZE * SIZE / 4],
    );
    calibration::fill(part, &mut y, SIZE, &mut u, SIZE / 2, &mut v, SIZE / 2);
    (y, u, v)
}

/// The calibration pictures hold every triple exactly once.
#[test]
fn the_calibration_pictures_hold_every_triple_once() {
    let mut seen = vec![false; 1 << 24];
    for part in 0..calibration::PARTS {
        let (y, u, v) = every_triple(part);
        for row in 0..SIZE {
            for col in 0..SIZE {
                let c = (row / 2) * (SIZE / 2) + col / 2;
                let t = usize::from(y[row * SIZE + col]) << 16
                    | usize::from(u[c]) << 8
                    | usize::from(v[c]);
                assert!(!seen[t], "triple {t:06x} twice");
                seen[t] = true;
            }
        }
    }
    assert!(seen.iter().all(|&s| s));
}

#[test]
fn every_yuv_triple_converts_as_the_definition() {
    let c = Coefficients::bt601_limited();
    let full = Coefficients::new(videoflow_yuv::coefficients::BT601, true);
    for part in 0..calibration::PARTS {
        let (y, u, v) = every_triple(part);
        let planes = Picture {
            width: SIZE,
            height: SIZE,
            y: &y,
            y_stride: 1024,
            u: &u,
            u_stride: 512,
            v: &v,
            v_stride: 512,
        };
        for (coeffs, order) in [(&c, Order::Bgr), (&c, Order::Rgb), (&full, Order::Bgr)] {
            let (mut fast, mut slow) = (vec![0; 1024 * 1024 * 3], vec![1; 1024 * 1024 * 3]);
            let packed = |bytes| Packed {
                bytes,
                stride: SIZE * 3,
                order,
            };
            let path =
                convert(&planes, &mut packed(&mut fast), coeffs).unwrap_or_else(|e| panic!("{e}"));
            convert_scalar(&planes, &mut packed(&mut slow), coeffs)
                .unwrap_or_else(|e| panic!("{e}"));
            if videoflow_yuv::accelerated() {
                assert_eq!(path, Path::Avx2);
            }
            assert!(fast == slow, "Y {}..: {order:?} differs", part * 16);
        }
    }
}

proptest! {
    /// Any size (tails, odd widths and heights), any padding, random samples.
    #[test]
    fn any_picture_converts_as_the_definition(
        width in 1usize..100, height in 1usize..7, pad in 0usize..40, seed in any::<u64>(),
        rgb in any::<bool>(),
    ) {
        let mut x = seed | 1;
        let mut bytes = |n: usize| -> Vec<u8> {
            (0..n).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x as u8 }).collect()
        };
        let (cw, ch) = (width.div_ceil(2), height.div_ceil(2));
        let (ys, cs, os) = (width + pad, cw + pad / 2, width * 3 + pad);
        let (y, u, v) = (bytes(ys * height), bytes(cs * ch), bytes(cs * ch));
        let planes = Picture { width, height, y: &y, y_stride: ys, u: &u, u_stride: cs, v: &v, v_stride: cs };
        let order = if rgb { Order::Rgb } else { Order::Bgr };
        let c = Coefficients::bt601_limited();
        let (mut fast, mut slow) = (vec![7; os * height], vec![7; os * height]);
        convert(&planes, &mut Packed { bytes: &mut fast, stride: os, order }, &c)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        convert_scalar(&planes, &mut Packed { bytes: &mut slow, stride: os, order }, &c)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(fast, slow);
    }
}

#[test]
fn a_short_plane_is_refused_naming_it() {
    let (y, u, v) = (vec![0; 64 * 2], vec![0; 32], vec![0; 31]);
    let planes = Picture {
        width: 64,
        height: 2,
        y: &y,
        y_stride: 64,
        u: &u,
        u_stride: 32,
        v: &v,
        v_stride: 32,
    };
    let mut out = vec![0; 64 * 3 * 2];
    let c = Coefficients::bt601_limited();
    let e = convert(&planes, &mut bgr_rows(&mut out), &c);
    assert_eq!(
        e,
        Err(ShortBuffer {
            buffer: "v",
            needed: 32,
            len: 31
        })
    );
    let e = convert(
        &Picture { v: &u, ..planes },
        &mut bgr_rows(&mut out[..100]),
        &c,
    );
    assert!(
        matches!(
            e,
            Err(ShortBuffer {
                buffer: "output",
                ..
            })
        ),
        "{e:?}"
    );
}

/// 64-pixel BGR rows, packed.
fn bgr_rows(bytes: &mut [u8]) -> Packed<'_> {
    Packed {
        bytes,
        stride: 64 * 3,
        order: Order::Bgr,
    }
}
