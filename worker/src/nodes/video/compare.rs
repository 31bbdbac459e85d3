//! One video file decoded twice by `VideoFileReader`'s own path — as a CPU node, and as a
//! node placed by the GPU grant check — and the two compared frame by frame.
//!
//! Why: on a GPU machine this is the check that our reader decodes on NVDEC (or says why
//! not), and that its frames are the CPU's in count and size (and whether byte for byte),
//! without a flow around it (`videoflow-worker gpu --decode FILE`, `scripts/gpu-check`).
//! Both decodings run in lockstep, so memory stays a few frames.

use serde_json::{Value as Json, json};

use super::decoding::{DecodedFrame, Decoding};
use super::media::Damage;
use crate::nodes::GpuPlacement;

/// What one decoding delivered.
#[derive(Default)]
struct Side {
    frames: u64,
    size: Option<[u32; 2]>,
    sizes_vary: bool,
    end: Option<String>,
}

impl Side {
    fn take(&mut self, read: Result<Option<DecodedFrame>, Damage>) -> Option<DecodedFrame> {
        match read {
            Ok(Some(f)) => {
                self.frames += 1;
                match self.size {
                    None => self.size = Some([f.height, f.width]),
                    Some(s) if s != [f.height, f.width] => self.sizes_vary = true,
                    Some(_) => {}
                }
                Some(f)
            }
            Ok(None) => {
                self.end.get_or_insert_with(|| "end of file".to_owned());
                None
            }
            Err(d) => {
                self.end.get_or_insert(d.reason);
                None
            }
        }
    }
}

/// The report: each decoding's decoder, frame count, size and how it ended; whether count
/// and size agree; whether every frame's bytes do, the first frame that differs and the
/// largest difference of a byte in it.
pub fn decode_twice(path: &str, gpu: &GpuPlacement) -> Json {
    let open = |placement: &GpuPlacement| Decoding::start(path, false, 0, placement);
    let (mut cpu, mut granted) = match (open(&GpuPlacement::Cpu), open(gpu)) {
        (Ok(c), Ok(g)) => (c, g),
        (Err(e), _) | (_, Err(e)) => {
            return json!({"file": path, "error": format!("cannot open: {e:?}")});
        }
    };
    let (mut a, mut b) = (Side::default(), Side::default());
    let mut differing = 0u64;
    let mut first_difference: Option<(u64, u8)> = None;
    loop {
        let x = if a.end.is_none() {
            a.take(cpu.next_frame())
        } else {
            None
        };
        let y = if b.end.is_none() {
            b.take(granted.next_frame())
        } else {
            None
        };
        match (&x, &y) {
            (Some(x), Some(y)) if x.data != y.data => {
                differing += 1;
                if first_difference.is_none() {
                    let most = x
                        .data
                        .iter()
                        .zip(y.data.iter())
                        .map(|(p, q)| p.abs_diff(*q))
                        .max()
                        .unwrap_or(u8::MAX);
                    first_difference = Some((a.frames, most));
                }
            }
            (None, None) => break,
            _ => {}
        }
    }
    let cpu_decoder = cpu.decoder().clone();
    let granted_decoder = granted.decoder().clone();
    cpu.stop();
    granted.stop();
    let side = |s: &Side, d: &super::nvdec::DecoderInUse| {
        json!({
            "decoder": d.decoder,
            "codec": d.codec,
            "hardware": if d.gpu { "gpu" } else { "cpu" },
            "fallback": d.fallback().map(|(reason, detail)| json!({"reason": reason, "detail": detail})),
            "frames": s.frames,
            "size": s.size,
            "sizes_vary": s.sizes_vary,
            "end": s.end,
        })
    };
    let same_frames = a.frames == b.frames && a.frames > 0 && a.size == b.size;
    json!({
        "file": path,
        "cpu": side(&a, &cpu_decoder),
        "granted": side(&b, &granted_decoder),
        "same_frames": same_frames,
        "bytes_match": same_frames && differing == 0,
        "frames_differing": differing,
        "first_difference": first_difference.map(|(frame, most)| json!({"frame": frame, "max_byte_difference": most})),
    })
}
