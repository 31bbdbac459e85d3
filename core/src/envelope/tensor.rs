//! Tensor dtypes and the consistency check between shape, dtype and data (§4.1).
//!
//! Dtype decision: the twelve native little-endian names ([`NATIVE_DTYPES`]) are checked —
//! `data` must be exactly `product(shape) × itemsize` bytes. Any other dtype string (numpy's
//! big-endian `>i4`, `complex128`, `<U5`, …) is **kept as an opaque-dtype tensor**: shape and
//! raw bytes are passed through untouched and only the shape is checked (no negative
//! dimension, addressable size), because the itemsize is unknown. Why keep rather than refuse:
//! 1.0.4 decodes such tensors too, and a forwarding node must be able to re-publish them
//! unchanged; a node that needs typed access refuses the dtype itself.

use super::error::TensorError;
use super::proto;
use crate::value::Tensor;

/// The dtype names every decoder must support, with their item sizes in bytes (§4.1).
pub const NATIVE_DTYPES: [(&str, usize); 12] = [
    ("uint8", 1),
    ("int8", 1),
    ("uint16", 2),
    ("int16", 2),
    ("uint32", 4),
    ("int32", 4),
    ("uint64", 8),
    ("int64", 8),
    ("float16", 2),
    ("float32", 4),
    ("float64", 8),
    ("bool", 1),
];

/// The item size of one of the twelve native dtypes; `None` for any other (opaque) dtype.
pub fn dtype_itemsize(dtype: &str) -> Option<usize> {
    NATIVE_DTYPES
        .iter()
        .find(|(name, _)| *name == dtype)
        .map(|(_, size)| *size)
}

/// Checks that `shape`, `dtype` and `data` agree (see the module docs for opaque dtypes).
///
/// Why both directions use it: a decoder must refuse an inconsistent tensor (it cannot be
/// reshaped), and an encoder must never emit one.
pub fn check_tensor(shape: &[i64], dtype: &str, data_len: usize) -> Result<(), TensorError> {
    let mut elements: usize = 1;
    for &dim in shape {
        let dim = usize::try_from(dim).map_err(|_| TensorError::NegativeDimension {
            shape: shape.to_vec(),
        })?;
        elements = elements
            .checked_mul(dim)
            .ok_or_else(|| TensorError::TooLarge {
                shape: shape.to_vec(),
            })?;
    }
    let Some(itemsize) = dtype_itemsize(dtype) else {
        return Ok(());
    };
    let expected = elements
        .checked_mul(itemsize)
        .ok_or_else(|| TensorError::TooLarge {
            shape: shape.to_vec(),
        })?;
    if expected != data_len {
        return Err(TensorError::DataLength {
            dtype: dtype.to_owned(),
            shape: shape.to_vec(),
            expected,
            actual: data_len,
        });
    }
    Ok(())
}

impl Tensor {
    /// Checks this tensor with [`check_tensor`].
    pub fn check(&self) -> Result<(), TensorError> {
        check_tensor(&self.shape, &self.dtype, self.data.len())
    }
}

/// Decodes a wire tensor, refusing an inconsistent one (absent `data` reads as empty).
impl TryFrom<proto::Tensor> for Tensor {
    type Error = TensorError;

    fn try_from(t: proto::Tensor) -> Result<Self, TensorError> {
        check_tensor(&t.shape, &t.dtype, t.data.len())?;
        Ok(Tensor {
            shape: t.shape,
            dtype: t.dtype,
            data: t.data,
        })
    }
}

/// Moves a native tensor into its wire form, unchecked (encoders call [`Tensor::check`]).
impl From<Tensor> for proto::Tensor {
    fn from(t: Tensor) -> Self {
        proto::Tensor {
            shape: t.shape,
            dtype: t.dtype,
            data: t.data,
        }
    }
}

/// Copies a native tensor into its wire form after checking it.
pub(crate) fn tensor_to_proto(t: &Tensor) -> Result<proto::Tensor, TensorError> {
    t.check()?;
    Ok(proto::Tensor {
        shape: t.shape.clone(),
        dtype: t.dtype.clone(),
        data: t.data.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_dtypes_check_length() {
        assert_eq!(check_tensor(&[2, 3], "uint8", 6), Ok(()));
        assert_eq!(check_tensor(&[2, 3], "float32", 24), Ok(()));
        assert!(matches!(
            check_tensor(&[2, 3], "float32", 23),
            Err(TensorError::DataLength {
                expected: 24,
                actual: 23,
                ..
            })
        ));
        // 0-d array: one element.
        assert_eq!(check_tensor(&[], "int64", 8), Ok(()));
        // Zero-size: data absent.
        assert_eq!(check_tensor(&[0, 5], "float64", 0), Ok(()));
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert!(matches!(
            check_tensor(&[-1], "uint8", 0),
            Err(TensorError::NegativeDimension { .. })
        ));
        assert!(matches!(
            check_tensor(&[i64::MAX, i64::MAX], "uint8", 0),
            Err(TensorError::TooLarge { .. })
        ));
        assert!(matches!(
            check_tensor(&[i64::MAX], "float64", 0),
            Err(TensorError::TooLarge { .. })
        ));
    }

    #[test]
    fn opaque_dtypes_are_kept() {
        assert_eq!(dtype_itemsize(">i4"), None);
        assert_eq!(check_tensor(&[3], ">i4", 12), Ok(()));
        assert_eq!(check_tensor(&[3], "complex128", 5), Ok(()));
        assert!(check_tensor(&[-3], "complex128", 0).is_err());
    }
}
