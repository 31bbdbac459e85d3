//! The reference's image transformers and annotators, in plain Rust over the wire's tensors.
//!
//! - [`resize`] — OpenCV's `INTER_LINEAR` resize of 8-bit images, fixed point and border
//!   rules included, so `ResizeImageTransformer` matches 1.0.4 byte for byte.
//! - [`draw`] — OpenCV's `rectangle` (8-connected lines, round-cornered thick lines, filled)
//!   for `BoundingBoxAnnotator`.
//! - [`transformers`] — `ResizeImageTransformer`, `CropImageTransformer`,
//!   `MaskImageTransformer`.
//! - [`annotators`] — `BoundingBoxAnnotator`.
//! - [`array`] — reading images and numeric arrays out of inputs.
//!
//! Why not behind the `video` feature: nothing here links a library, so the statically
//! linked worker runs these nodes too.

pub mod annotators;
pub(crate) mod array;
pub mod draw;
pub mod resize;
pub mod transformers;
