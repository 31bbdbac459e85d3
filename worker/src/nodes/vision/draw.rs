//! OpenCV's `cv2.rectangle(im, (x0, y0), (x1, y1), color, thickness)` with its default
//! 8-connected lines, reproduced exactly for what a box annotator draws.
//!
//! What OpenCV draws, and this does: thickness ≤ 1 — the four one-pixel edges; thickness
//! `t` > 1 — each edge as a band reaching `(t + 1) / 2` pixels either side of it, and a
//! filled circle of that radius (OpenCV's midpoint circle) at every corner; a negative
//! thickness — the filled rectangle. Everything is clipped to the image.

/// An 8-bit image being drawn on.
pub struct Canvas<'a> {
    /// Packed pixels, `height × width × channels`.
    pub data: &'a mut [u8],
    /// Rows.
    pub height: usize,
    /// Pixels per row.
    pub width: usize,
    /// Channels per pixel.
    pub channels: usize,
}

impl Canvas<'_> {
    /// Paints the inclusive span `x0..=x1` of row `y`, clipped.
    fn hline(&mut self, y: i64, x0: i64, x1: i64, color: &[u8]) {
        if y < 0 || y >= self.height as i64 {
            return;
        }
        let (a, b) = (x0.max(0), x1.min(self.width as i64 - 1));
        if a > b {
            return;
        }
        let c = self.channels;
        let row = y as usize * self.width * c;
        for x in a as usize..=b as usize {
            let px = &mut self.data[row + x * c..row + (x + 1) * c];
            for (k, v) in px.iter_mut().enumerate() {
                *v = color.get(k).copied().unwrap_or(0);
            }
        }
    }

    /// The inclusive rectangle between two corners, filled and clipped.
    fn fill(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, color: &[u8]) {
        let (ya, yb) = (y0.min(y1), y0.max(y1));
        // Rows far outside the image paint nothing; bound the loop to the image.
        for y in ya.max(-1)..=yb.min(self.height as i64) {
            self.hline(y, x0.min(x1), x0.max(x1), color);
        }
    }

    /// OpenCV's filled `Circle` (midpoint algorithm) of `radius` around `(cx, cy)`.
    fn disc(&mut self, cx: i64, cy: i64, radius: i64, color: &[u8]) {
        let (mut err, mut dx, mut dy, mut plus, mut minus) =
            (0i64, radius, 0i64, 1i64, 2 * radius - 1);
        while dx >= dy {
            self.hline(cy - dy, cx - dx, cx + dx, color);
            self.hline(cy + dy, cx - dx, cx + dx, color);
            self.hline(cy - dx, cx - dy, cx + dy, color);
            self.hline(cy + dx, cx - dy, cx + dy, color);
            dy += 1;
            err += plus;
            plus += 2;
            let mask = if err <= 0 { 0 } else { -1 };
            err -= minus & mask;
            dx += mask;
            minus -= mask & 2;
        }
    }

    /// `cv2.rectangle` between corners `(x0, y0)` and `(x1, y1)`.
    pub fn rectangle(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, color: &[u8], thickness: i64) {
        if thickness < 0 {
            self.fill(x0, y0, x1, y1, color);
            return;
        }
        let corners = [(x0, y0), (x1, y0), (x1, y1), (x0, y1)];
        if thickness <= 1 {
            for i in 0..4 {
                let (a, b) = (corners[i], corners[(i + 1) % 4]);
                self.fill(a.0, a.1, b.0, b.1, color);
            }
            return;
        }
        let r = (thickness + 1) / 2;
        for i in 0..4 {
            let (a, b) = (corners[i], corners[(i + 1) % 4]);
            // A zero-length edge has no band (OpenCV skips its polygon), only the corner.
            if a != b {
                if a.1 == b.1 {
                    self.fill(a.0, a.1 - r, b.0, b.1 + r, color);
                } else {
                    self.fill(a.0 - r, a.1, b.0 + r, b.1, color);
                }
            }
            self.disc(b.0, b.1, r, color);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draw(t: i64) -> Vec<String> {
        let mut data = vec![0u8; 20 * 24];
        let mut c = Canvas {
            data: &mut data,
            height: 20,
            width: 24,
            channels: 1,
        };
        c.rectangle(5, 4, 15, 12, &[1], t);
        data.chunks(24)
            .map(|r| r.iter().map(|&v| if v == 1 { '#' } else { '.' }).collect())
            .collect()
    }

    /// What `cv2.rectangle(im, (5, 4), (15, 12), 255, 3)` draws (OpenCV 5.0).
    #[test]
    fn thickness_three_has_round_corners_of_radius_two() {
        let rows = draw(3);
        assert_eq!(rows[1], "........................");
        assert_eq!(rows[2], ".....###########........");
        assert_eq!(rows[3], "....#############.......");
        assert_eq!(rows[4], "...###############......");
        assert_eq!(rows[7], "...#####.....#####......");
        assert_eq!(rows[14], ".....###########........");
        assert_eq!(draw(4), rows);
    }

    #[test]
    fn thickness_one_is_the_outline() {
        let rows = draw(1);
        assert_eq!(rows[4], ".....###########........");
        assert_eq!(rows[5], ".....#.........#........");
        assert_eq!(rows[12], ".....###########........");
        assert_eq!(rows[13], "........................");
    }
}
