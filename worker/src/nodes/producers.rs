//! Built-in producers: the reference's `IntProducer` and our synthetic frame source.

use std::time::{Duration, Instant};

use videoflow_core::envelope::Payload;
use videoflow_core::errors::VfError;
use videoflow_core::value::{Tensor, Value};

use super::convert::unclassified;
use super::params::Params;
use super::{NodeContext, Producer};

/// `videoflow.producers.basic.IntProducer`: the integers `start_value, start_value + 1, …`
/// up to and including `end_value` (forever when it is `None`), sleeping
/// `wait_time_in_seconds` in every `next()` that yields; `fps > 0` overrides the wait with
/// `1 / fps`. Same parameters and outputs as 1.0.4 (ints, published as `Value` ints).
#[derive(Debug, Clone, PartialEq)]
pub struct IntProducer {
    start_value: i64,
    next_value: Option<i64>,
    end_value: Option<i64>,
    wait: Duration,
}

impl IntProducer {
    /// A producer of `start..=end` (unbounded when `end` is `None`) waiting `wait` per item.
    pub fn new(start: i64, end: Option<i64>, wait: Duration) -> Self {
        IntProducer {
            start_value: start,
            next_value: Some(start),
            end_value: end,
            wait,
        }
    }

    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        let start = p.int("start_value", 0)?;
        let end = p.opt_int("end_value")?;
        let wait = p.float("wait_time_in_seconds", 0.0)?;
        // 1.0.4 fails later, in the first next() (`sleep length must be non-negative`).
        let wait = p.seconds_value("wait_time_in_seconds", wait)?;
        let wait = p.fps_period("fps")?.unwrap_or(wait);
        Ok(IntProducer::new(start, end, wait))
    }
}

impl Producer for IntProducer {
    fn next(&mut self, _ctx: &mut NodeContext) -> Result<Option<Payload>, VfError> {
        let Some(value) = self.next_value else {
            // Python's ints are unbounded; ours stop being representable on the wire here.
            return Err(unclassified(
                "OverflowError",
                "IntProducer passed the largest 64-bit integer",
            ));
        };
        if self.end_value.is_some_and(|end| value > end) {
            return Ok(None);
        }
        self.next_value = value.checked_add(1);
        if !self.wait.is_zero() {
            std::thread::sleep(self.wait);
        }
        Ok(Some(Payload::Value(Value::Int(value))))
    }

    /// Only its wait blocks.
    fn may_block(&self) -> bool {
        !self.wait.is_zero()
    }

    /// Item `n` (1-based) is `start_value + n - 1`, so a source is its own position.
    fn replayable(&self) -> bool {
        true
    }

    fn seek(&mut self, offset: u64) -> Result<(), VfError> {
        self.next_value = i64::try_from(offset)
            .ok()
            .and_then(|o| self.start_value.checked_add(o));
        Ok(())
    }
}

/// Largest frame the synthetic source builds (bytes): a guard against a typo'd size.
pub const MAX_SYNTHETIC_FRAME_BYTES: u64 = 256 * 1024 * 1024;

/// `videoflow.rs.producers.SyntheticFrameProducer` (ours): `count` frames (forever when
/// absent) as `uint8` tensors of shape `[height, width, channels]` whose bytes derive from
/// the frame index ([`synthetic_frame`]), so any sink can check what it got. With `fps > 0`
/// frame `n` is released at `start + n / fps` (no drift), else as fast as asked.
#[derive(Debug, Clone)]
pub struct SyntheticFrameProducer {
    width: u32,
    height: u32,
    channels: u32,
    count: Option<u64>,
    period: Option<Duration>,
    index: u64,
    /// When pacing began, and at which index (a resumed source paces from its offset).
    started: Option<(Instant, u64)>,
}

impl SyntheticFrameProducer {
    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        let width = dim(p, "width", 64)?;
        let height = dim(p, "height", 48)?;
        let channels = dim(p, "channels", 3)?;
        let count = match p.opt_int("count")? {
            None => None,
            Some(c) => Some(
                u64::try_from(c)
                    .map_err(|_| p.bad("count", "a non-negative integer", &serde_json::json!(c)))?,
            ),
        };
        let period = p.fps_period("fps")?;
        let bytes = u64::from(width) * u64::from(height) * u64::from(channels);
        if bytes > MAX_SYNTHETIC_FRAME_BYTES {
            return Err(p.bad(
                "width",
                &format!("small enough for a frame of at most {MAX_SYNTHETIC_FRAME_BYTES} bytes"),
                &serde_json::json!(width),
            ));
        }
        Ok(SyntheticFrameProducer {
            width,
            height,
            channels,
            count,
            period,
            index: 0,
            started: None,
        })
    }
}

/// A positive `u32` parameter (a frame dimension).
fn dim(p: &mut Params<'_>, name: &'static str, default: i64) -> Result<u32, VfError> {
    let v = p.int(name, default)?;
    u32::try_from(v)
        .ok()
        .filter(|v| *v >= 1)
        .ok_or_else(|| p.bad(name, "a positive integer", &serde_json::json!(v)))
}

impl Producer for SyntheticFrameProducer {
    fn next(&mut self, _ctx: &mut NodeContext) -> Result<Option<Payload>, VfError> {
        if self.count.is_some_and(|c| self.index >= c) {
            return Ok(None);
        }
        if let Some(period) = self.period {
            let index = self.index;
            let (start, first) = *self.started.get_or_insert_with(|| (Instant::now(), index));
            let n = u32::try_from(self.index - first).unwrap_or(u32::MAX);
            let due = start + period.saturating_mul(n);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        let frame = synthetic_frame(self.index, self.width, self.height, self.channels);
        self.index += 1;
        Ok(Some(Payload::Tensor(frame)))
    }

    /// Only its pacing (`fps`) blocks.
    fn may_block(&self) -> bool {
        self.period.is_some()
    }

    /// Item `n` (1-based) is frame `n - 1`.
    fn replayable(&self) -> bool {
        true
    }

    fn seek(&mut self, offset: u64) -> Result<(), VfError> {
        self.index = offset;
        self.started = None;
        Ok(())
    }
}

/// The frame of index `index`: `uint8` `[height, width, channels]`; bytes 0..8 hold the index
/// little-endian (cut short for tinier frames), byte `i ≥ 8` is `(index + i) mod 256`.
pub fn synthetic_frame(index: u64, width: u32, height: u32, channels: u32) -> Tensor {
    let len = width as usize * height as usize * channels as usize;
    let le = index.to_le_bytes();
    let data = (0..len)
        .map(|i| match le.get(i) {
            Some(b) => *b,
            None => (index as u8).wrapping_add(i as u8),
        })
        .collect();
    Tensor {
        shape: vec![i64::from(height), i64::from(width), i64::from(channels)],
        dtype: "uint8".to_owned(),
        data,
    }
}

/// The index a frame of [`synthetic_frame`] was built for, if `t` is exactly such a frame
/// (shape, dtype and every byte checked); what a sink uses to verify end-to-end integrity.
pub fn verify_synthetic_frame(t: &Tensor) -> Option<u64> {
    let [h, w, c] = t.shape.as_slice() else {
        return None;
    };
    let dims = |d: &i64| u32::try_from(*d).ok();
    let (h, w, c) = (dims(h)?, dims(w)?, dims(c)?);
    if t.dtype != "uint8" || t.data.len() < 8 {
        return None;
    }
    let mut le = [0u8; 8];
    le.copy_from_slice(&t.data[..8]);
    let index = u64::from_le_bytes(le);
    (synthetic_frame(index, w, h, c) == *t).then_some(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(p: &mut dyn Producer) -> Vec<Payload> {
        let mut ctx = NodeContext::default();
        let mut out = Vec::new();
        while let Ok(Some(item)) = p.next(&mut ctx) {
            out.push(item);
        }
        out
    }

    #[test]
    fn int_producer_is_inclusive_of_end() {
        let mut p = IntProducer::new(3, Some(5), Duration::ZERO);
        let got = drain(&mut p);
        let want: Vec<Payload> = (3..=5).map(|i| Payload::Value(Value::Int(i))).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn int_producer_end_below_start_yields_nothing() {
        let mut p = IntProducer::new(3, Some(2), Duration::ZERO);
        assert!(drain(&mut p).is_empty());
    }

    #[test]
    fn msgid_6_int_producer_resumes_after_an_offset() {
        let mut p = IntProducer::new(3, Some(9), Duration::ZERO);
        assert!(p.replayable());
        p.seek(4).expect("seek");
        let want: Vec<Payload> = (7..=9).map(|i| Payload::Value(Value::Int(i))).collect();
        assert_eq!(drain(&mut p), want, "item 5 onwards");
        let mut past_end = IntProducer::new(3, Some(9), Duration::ZERO);
        past_end.seek(7).expect("seek");
        assert!(drain(&mut past_end).is_empty());
    }

    #[test]
    fn msgid_6_synthetic_frames_resume_at_their_index_without_waiting_for_the_skipped() {
        let mut params = serde_json::Map::new();
        params.insert("count".into(), serde_json::json!(5));
        params.insert("fps".into(), serde_json::json!(10));
        params.insert("width".into(), serde_json::json!(4));
        params.insert("height".into(), serde_json::json!(2));
        let mut reader = Params::new("SyntheticFrameProducer", &params);
        let mut p = SyntheticFrameProducer::from_params(&mut reader).expect("builds");
        p.seek(3).expect("seek");
        let got: Vec<Option<u64>> = drain(&mut p)
            .iter()
            .map(|item| match item {
                Payload::Tensor(t) => verify_synthetic_frame(t),
                _ => None,
            })
            .collect();
        assert_eq!(got, [Some(3), Some(4)]);
        // Paced from the resume point (frame 4 due 0.1 s after frame 3), not from a frame 0
        // that this process never produced.
        assert_eq!(p.started.map(|(_, first)| first), Some(3));
    }

    #[test]
    fn synthetic_frames_verify_and_differ() {
        let a = synthetic_frame(7, 4, 3, 3);
        let b = synthetic_frame(8, 4, 3, 3);
        assert_eq!(a.shape, vec![3, 4, 3]);
        assert_eq!(a.data.len(), 36);
        assert_eq!(verify_synthetic_frame(&a), Some(7));
        assert_eq!(verify_synthetic_frame(&b), Some(8));
        let mut bad = a.clone();
        let mut data = bad.data.to_vec();
        data[20] ^= 1;
        bad.data = data.into();
        assert_eq!(verify_synthetic_frame(&bad), None);
    }
}
