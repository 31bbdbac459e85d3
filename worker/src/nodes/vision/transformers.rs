//! 1.0.4's `videoflow.processors.vision.transformers`: `ResizeImageTransformer`,
//! `CropImageTransformer`, `MaskImageTransformer`, with their parameters and inputs — the
//! image from the first parent, the size, boxes or mask from the second.
//!
//! Where ours accepts more (docs/COMPATIBILITY.md): the image may be a reader's
//! `(index, frame)` tuple; the resize size and the crop boxes may be given once as a
//! parameter, so the node also runs with the image as its only parent.

use videoflow_core::envelope::Payload;
use videoflow_core::errors::VfError;
use videoflow_core::value::Value;

use super::array::{Image, Numbers, image, numbers, numbers_of};
use super::resize::resize_linear;
use crate::nodes::convert::{arity_error, schema_error};
use crate::nodes::params::Params;
use crate::nodes::{Input, NodeContext, Processor};

const RESIZE: &str = "ResizeImageTransformer";
const CROP: &str = "CropImageTransformer";
const MASK: &str = "MaskImageTransformer";

/// The parents a node with an optional second input may have: 2, or 1 when the parameter
/// stands in for the second.
fn one_or_two(node: &str, parents: usize, param_set: bool) -> Result<(), VfError> {
    match parents {
        2 => Ok(()),
        1 if param_set => Ok(()),
        _ => Err(arity_error(node, 2, parents)),
    }
}

/// `videoflow.processors.vision.transformers.ResizeImageTransformer(maintain_ratio=False)`:
/// `process(im, new_size)` resizes `im` to `new_size = (height, width)` with OpenCV's
/// bilinear interpolation; with `maintain_ratio`, scales it to fit the shorter target side
/// and pads the rest with black at the bottom and right, as 1.0.4's `resize_add_padding`.
/// Ours also takes `new_size` as a parameter, the default when the second input is absent.
#[derive(Debug, Clone, PartialEq)]
pub struct ResizeImageTransformer {
    maintain_ratio: bool,
    new_size: Option<(i64, i64)>,
}

/// `(height, width)` out of a two-number array.
fn size_of(n: &Numbers) -> Option<(i64, i64)> {
    match n.values.as_slice() {
        [h, w] if h.fract() == 0.0 && w.fract() == 0.0 => Some((*h as i64, *w as i64)),
        _ => None,
    }
}

impl ResizeImageTransformer {
    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        let maintain_ratio = p.bool("maintain_ratio", false)?;
        let new_size = match p.opt_json("new_size") {
            None => None,
            Some(j) => {
                let v = serde_json::from_value::<Vec<i64>>(j.clone()).ok();
                match v.as_deref() {
                    Some([h, w]) if *h > 0 && *w > 0 => Some((*h, *w)),
                    _ => {
                        return Err(p.bad(
                            "new_size",
                            "a list [height, width] of two positive integers",
                            j,
                        ));
                    }
                }
            }
        };
        Ok(ResizeImageTransformer {
            maintain_ratio,
            new_size,
        })
    }

    fn resize(&self, im: &Image, height: i64, width: i64) -> Result<Image, VfError> {
        if height < 0 || width < 0 {
            return Err(schema_error(
                RESIZE,
                "One of `width` or `height` is a negative value",
            ));
        }
        if !self.maintain_ratio {
            return scaled(im, height, width);
        }
        // 1.0.4's resize_add_padding: the ratio of the shorter target side to the same
        // side of the image; the result must fit the target.
        let (target, side) = if height <= width {
            (height, im.height)
        } else {
            (width, im.width)
        };
        let ratio = target as f64 / side as f64;
        let rh = (im.height as f64 * ratio) as i64;
        let rw = (im.width as f64 * ratio) as i64;
        if rh > height || rw > width {
            return Err(schema_error(
                RESIZE,
                format!(
                    "with maintain_ratio, a {}x{} image scaled to ({height}, {width}) is \
                     {rh}x{rw}, larger than the target (1.0.4 fails the same way)",
                    im.height, im.width
                ),
            ));
        }
        let inner = scaled(im, rh, rw)?;
        let mut out = Image::zeros(height as usize, width as usize, im.channels, im.two_d);
        let (c, ow) = (im.channels, width as usize);
        for (y, row) in inner.data.chunks_exact(inner.width * c).enumerate() {
            out.data[y * ow * c..y * ow * c + row.len()].copy_from_slice(row);
        }
        Ok(out)
    }
}

/// `cv2.resize` to `height × width`.
fn scaled(im: &Image, height: i64, width: i64) -> Result<Image, VfError> {
    if height == 0 || width == 0 || im.height == 0 || im.width == 0 {
        return Err(schema_error(
            RESIZE,
            format!(
                "cannot resize a {}x{} image to ({height}, {width}): both sizes must be \
                 positive",
                im.height, im.width
            ),
        ));
    }
    let (h, w) = (height as usize, width as usize);
    let data = resize_linear(&im.data, im.height, im.width, im.channels, h, w);
    Ok(Image {
        height: h,
        width: w,
        channels: im.channels,
        two_d: im.two_d,
        data,
    })
}

impl Processor for ResizeImageTransformer {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        one_or_two(RESIZE, parents, self.new_size.is_some())
    }

    fn process(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        let (im, size) = match inputs {
            [im] => (im, None),
            [im, size] => (im, numbers(RESIZE, "new_size", size)?),
            _ => return Err(arity_error(RESIZE, 2, inputs.len())),
        };
        let im = image(RESIZE, "im", im)?;
        let (h, w) = match size {
            Some(n) => size_of(&n).ok_or_else(|| {
                schema_error(
                    RESIZE,
                    format!(
                        "new_size must be (new_height, new_width), two integers, got {} \
                         number(s)",
                        n.values.len()
                    ),
                )
            })?,
            None => self.new_size.ok_or_else(|| {
                schema_error(
                    RESIZE,
                    "new_size is None and the node has no new_size parameter",
                )
            })?,
        };
        self.resize(&im, h, w).map(Image::into_payload)
    }

    fn may_block(&self) -> bool {
        false
    }
}

/// `videoflow.processors.vision.transformers.CropImageTransformer(crop_dimensions=None)`:
/// `process(im, crop_dimensions)` returns the list of crops of `im`, one per row
/// `[ymin, xmin, ymax, xmax]` of `crop_dimensions` (the parameter's when the input is
/// `None`). A negative value or a reversed box fails the message, as in 1.0.4; a box
/// reaching past the image is cut at its edge, as numpy slicing does.
#[derive(Debug, Clone, PartialEq)]
pub struct CropImageTransformer {
    crop_dimensions: Option<Numbers>,
}

impl CropImageTransformer {
    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        let crop_dimensions = match p.opt_json("crop_dimensions") {
            None => None,
            Some(j) => {
                let boxes = serde_json::from_value::<Vec<Vec<f64>>>(j.clone())
                    .ok()
                    .filter(|rows| rows.iter().all(|r| r.len() == 4))
                    .map(|rows| {
                        Value::List(
                            rows.into_iter()
                                .map(|r| Value::List(r.into_iter().map(Value::Double).collect()))
                                .collect(),
                        )
                    })
                    .and_then(|v| numbers_of(&v));
                let Some(boxes) = boxes else {
                    return Err(p.bad(
                        "crop_dimensions",
                        "a list of [ymin, xmin, ymax, xmax] boxes",
                        j,
                    ));
                };
                if let Err(e) = check_boxes(&boxes) {
                    return Err(p.bad("crop_dimensions", &e, j));
                }
                Some(boxes)
            }
        };
        Ok(CropImageTransformer { crop_dimensions })
    }
}

/// 1.0.4's `_check_crop_dimensions`: non-negative, `ymin <= ymax`, `xmin <= xmax`.
/// 1.0.4's checks of the boxes: rows of at least `[ymin, xmin, ymax, xmax]` (further
/// columns — a detector's class and score — are carried along, as numpy's column indexing
/// lets them be), nothing negative anywhere in the array, no reversed box.
fn check_boxes(boxes: &Numbers) -> Result<(), String> {
    if boxes.shape.len() != 2 || (boxes.shape[0] > 0 && boxes.shape[1] < 4) {
        return Err(format!(
            "crop_dimensions must have shape (nb_boxes, 4) or more columns, got {:?}",
            boxes.shape
        ));
    }
    if boxes.values.iter().any(|v| *v < 0.0 || v.is_nan()) {
        return Err("One of the crop values is less than 0".to_owned());
    }
    for i in 0..boxes.shape[0] {
        let b = boxes.row(i);
        if b[0] > b[2] || b[1] > b[3] {
            return Err("ymin > ymax or xmin > xmax".to_owned());
        }
    }
    Ok(())
}

impl Processor for CropImageTransformer {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        one_or_two(CROP, parents, self.crop_dimensions.is_some())
    }

    fn process(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        let (im, given) = match inputs {
            [im] => (im, None),
            [im, boxes] => (im, numbers(CROP, "crop_dimensions", boxes)?),
            _ => return Err(arity_error(CROP, 2, inputs.len())),
        };
        let im = image(CROP, "im", im)?;
        let boxes = match given.as_ref().or(self.crop_dimensions.as_ref()) {
            Some(b) => b,
            None => return Err(schema_error(CROP, "Crop dimensions were not specified")),
        };
        check_boxes(boxes).map_err(|e| schema_error(CROP, e))?;
        if im.two_d {
            return Err(schema_error(CROP, "im must have shape (h, w, channels)"));
        }
        let c = im.channels;
        let mut crops = Vec::with_capacity(boxes.shape[0]);
        for i in 0..boxes.shape[0] {
            let b = boxes.row(i);
            let (ymin, xmin) = (b[0] as usize, b[1] as usize);
            if ymin > im.height || xmin > im.width {
                return Err(schema_error(
                    CROP,
                    format!(
                        "One of the crop indexes is out of bounds: box {i} starts at \
                         ({ymin}, {xmin}), outside the {}x{} image",
                        im.height, im.width
                    ),
                ));
            }
            let ymax = (b[2] as usize).min(im.height);
            let xmax = (b[3] as usize).min(im.width);
            let (h, w) = (ymax - ymin, xmax - xmin);
            let mut out = Image::zeros(h, w, c, false);
            for y in 0..h {
                let from = ((ymin + y) * im.width + xmin) * c;
                out.data[y * w * c..(y + 1) * w * c].copy_from_slice(&im.data[from..from + w * c]);
            }
            crops.push(Value::Tensor(out.into_tensor()));
        }
        Ok(Payload::Value(Value::List(crops)))
    }

    fn may_block(&self) -> bool {
        false
    }
}

/// `videoflow.processors.vision.transformers.MaskImageTransformer`: `process(im, mask)`
/// multiplies each channel of `im` by the `(h, w)` mask (values between 0 and 1) in double
/// precision and truncates to `uint8`, as 1.0.4's `cv2.multiply` and `astype(np.uint8)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MaskImageTransformer;

impl Processor for MaskImageTransformer {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        one_or_two(MASK, parents, false)
    }

    fn process(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<Payload, VfError> {
        let [im, mask] = inputs else {
            return Err(arity_error(MASK, 2, inputs.len()));
        };
        let mut im = image(MASK, "im", im)?;
        let Some(mask) = numbers(MASK, "mask", mask)? else {
            return Err(schema_error(MASK, "mask is None"));
        };
        let same = match mask.shape.as_slice() {
            [h, w] | [h, w, 1] => *h == im.height && *w == im.width,
            _ => false,
        };
        if !same {
            return Err(schema_error(
                MASK,
                format!(
                    "`mask` does not have same dimensions as `im` ({:?} vs {}x{})",
                    mask.shape, im.height, im.width
                ),
            ));
        }
        if im.channels != 3 || im.two_d {
            return Err(schema_error(MASK, "im must have 3 channels"));
        }
        for (px, m) in im.data.chunks_exact_mut(3).zip(&mask.values) {
            for v in px {
                // `as u8` truncates toward zero and saturates (NaN → 0).
                *v = (f64::from(*v) * m) as u8;
            }
        }
        Ok(im.into_payload())
    }

    fn may_block(&self) -> bool {
        false
    }
}
