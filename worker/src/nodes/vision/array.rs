//! Images and numeric arrays out of node inputs, as 1.0.4 nodes receive numpy arrays.

use videoflow_core::envelope::Payload;
use videoflow_core::errors::VfError;
use videoflow_core::value::{Tensor, Value};

use crate::nodes::Input;
use crate::nodes::convert::schema_error;

/// An 8-bit image, packed rows: `height × width × channels` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Rows.
    pub height: usize,
    /// Pixels per row.
    pub width: usize,
    /// Channels per pixel; 1 for a 2-d array.
    pub channels: usize,
    /// Whether it came as a 2-d array (kept so the output has the input's rank).
    pub two_d: bool,
    /// The pixels.
    pub data: Vec<u8>,
}

impl Image {
    /// A black image of the given size.
    pub fn zeros(height: usize, width: usize, channels: usize, two_d: bool) -> Image {
        Image {
            height,
            width,
            channels,
            two_d,
            data: vec![0; height * width * channels],
        }
    }

    /// The image as a `uint8` tensor payload (what 1.0.4 publishes for an ndarray).
    pub fn into_payload(self) -> Payload {
        Payload::Tensor(self.into_tensor())
    }

    /// The image as a `uint8` tensor.
    pub fn into_tensor(self) -> Tensor {
        let mut shape = vec![self.height as i64, self.width as i64];
        if !self.two_d {
            shape.push(self.channels as i64);
        }
        Tensor::new(shape, "uint8", self.data)
    }
}

/// The tensor a parent sent for an image: a bare array, or the frame of a reader's
/// `(index, frame)` tuple.
fn image_tensor(input: &Input) -> Option<&Tensor> {
    match input {
        Input::Present(Payload::Tensor(t)) | Input::Present(Payload::Value(Value::Tensor(t))) => {
            Some(t)
        }
        Input::Present(Payload::Value(Value::List(items))) => match items.as_slice() {
            [Value::Int(_), Value::Tensor(t)] => Some(t),
            _ => None,
        },
        _ => None,
    }
}

/// The image in `input`: a `uint8` array of shape `(h, w)` or `(h, w, c)` — or a reader's
/// `(index, frame)` tuple, whose frame is taken. Anything else is `VF_POISON_SCHEMA`.
pub(crate) fn image(node: &str, what: &str, input: &Input) -> Result<Image, VfError> {
    let Some(t) = image_tensor(input) else {
        return Err(schema_error(
            node,
            format!(
                "{what} must be an image (a uint8 array of shape (h, w, 3), or a reader's \
                 (index, frame) tuple), got {}",
                describe(input)
            ),
        ));
    };
    if t.dtype != "uint8" {
        return Err(schema_error(
            node,
            format!("{what} must be a uint8 image, got dtype {}", t.dtype),
        ));
    }
    let dims: Vec<usize> = t
        .shape
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<_>>()
        .unwrap_or_default();
    let (height, width, channels, two_d) = match dims.as_slice() {
        [h, w] => (*h, *w, 1, true),
        [h, w, c] if *c >= 1 => (*h, *w, *c, false),
        _ => {
            return Err(schema_error(
                node,
                format!(
                    "{what} must have shape (h, w) or (h, w, channels), got {:?}",
                    t.shape
                ),
            ));
        }
    };
    let expected = height
        .checked_mul(width)
        .and_then(|n| n.checked_mul(channels));
    if expected != Some(t.data.len()) {
        return Err(schema_error(
            node,
            format!(
                "{what} of shape {:?} carries {} bytes",
                t.shape,
                t.data.len()
            ),
        ));
    }
    Ok(Image {
        height,
        width,
        channels,
        two_d,
        data: t.data.to_vec(),
    })
}

/// A numeric array: its shape and its elements as `f64`, C order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Numbers {
    pub shape: Vec<usize>,
    pub values: Vec<f64>,
    /// Whether the source was a floating-point array (or held a float).
    pub float: bool,
}

impl Numbers {
    /// Row `i` of a 2-d array.
    pub(crate) fn row(&self, i: usize) -> &[f64] {
        let cols = self.shape.get(1).copied().unwrap_or(0);
        &self.values[i * cols..(i + 1) * cols]
    }
}

fn decode_elements(t: &Tensor) -> Option<(Vec<f64>, bool)> {
    macro_rules! read {
        ($ty:ty, $float:expr) => {{
            const N: usize = std::mem::size_of::<$ty>();
            if !t.data.len().is_multiple_of(N) {
                return None;
            }
            let v = t
                .data
                .chunks_exact(N)
                .map(|c| {
                    let mut b = [0u8; N];
                    b.copy_from_slice(c);
                    <$ty>::from_le_bytes(b) as f64
                })
                .collect();
            Some((v, $float))
        }};
    }
    match t.dtype.trim_start_matches(['<', '=', '|']) {
        "uint8" => read!(u8, false),
        "int8" => read!(i8, false),
        "uint16" => read!(u16, false),
        "int16" => read!(i16, false),
        "uint32" => read!(u32, false),
        "int32" => read!(i32, false),
        "uint64" => read!(u64, false),
        "int64" => read!(i64, false),
        "float32" => read!(f32, true),
        "float64" => read!(f64, true),
        "bool" => Some((t.data.iter().map(|&b| f64::from(b != 0)).collect(), false)),
        _ => None,
    }
}

fn flatten(
    v: &Value,
    depth: usize,
    shape: &mut Vec<usize>,
    out: &mut Vec<f64>,
    float: &mut bool,
) -> bool {
    match v {
        Value::Int(i) => {
            out.push(*i as f64);
            depth == shape.len()
        }
        Value::Double(d) => {
            *float = true;
            out.push(*d);
            depth == shape.len()
        }
        Value::Bool(b) => {
            out.push(f64::from(u8::from(*b)));
            depth == shape.len()
        }
        Value::List(items) => {
            if depth == shape.len() {
                shape.push(items.len());
            } else if shape.get(depth) != Some(&items.len()) {
                return false;
            }
            items
                .iter()
                .all(|i| flatten(i, depth + 1, shape, out, float))
        }
        _ => false,
    }
}

/// The numeric array in `value` (a numeric tensor, or nested lists of numbers of a regular
/// shape); `None` when it is neither.
pub(crate) fn numbers_of(value: &Value) -> Option<Numbers> {
    match value {
        Value::Tensor(t) => {
            let shape: Vec<usize> = t
                .shape
                .iter()
                .map(|&d| usize::try_from(d).ok())
                .collect::<Option<_>>()?;
            let (values, float) = decode_elements(t)?;
            (values.len() == shape.iter().product::<usize>()).then_some(Numbers {
                shape,
                values,
                float,
            })
        }
        other => {
            let (mut shape, mut values, mut float) = (Vec::new(), Vec::new(), false);
            if !flatten(other, 0, &mut shape, &mut values, &mut float) {
                return None;
            }
            // An empty list is a (0, 0)-shaped table for the row-wise readers.
            if shape == [0] {
                shape.push(0);
            }
            Some(Numbers {
                shape,
                values,
                float,
            })
        }
    }
}

/// The numeric array a parent sent; `None` for a missing parent or Python `None`.
pub(crate) fn numbers(node: &str, what: &str, input: &Input) -> Result<Option<Numbers>, VfError> {
    let value = match input {
        Input::Missing | Input::Present(Payload::None) => return Ok(None),
        Input::Present(Payload::Value(Value::Null)) => return Ok(None),
        Input::Present(Payload::Tensor(t)) => Value::Tensor(t.clone()),
        Input::Present(Payload::Value(v)) => v.clone(),
        other => {
            return Err(schema_error(
                node,
                format!("{what} must be a numeric array, got {}", describe(other)),
            ));
        }
    };
    numbers_of(&value).map(Some).ok_or_else(|| {
        schema_error(
            node,
            format!(
                "{what} must be a numeric array of a regular shape, got a {}",
                value.kind_name()
            ),
        )
    })
}

/// A short description of what an input holds, for error texts.
pub(crate) fn describe(input: &Input) -> String {
    match input {
        Input::Missing => "no input (a missing parent)".to_owned(),
        Input::Collected(items) => format!("a list of {} collected inputs", items.len()),
        Input::Present(Payload::Tensor(t)) => {
            format!("a {} array of shape {:?}", t.dtype, t.shape)
        }
        Input::Present(Payload::Value(v)) => format!("a {}", v.kind_name()),
        Input::Present(other) => other.payload_type().unwrap_or("message").to_owned(),
    }
}
