"""A people detector: OpenCV's HOG + linear SVM pedestrian model (Dalal & Triggs), which
ships inside ``opencv-python-headless`` 4.x, so nothing is downloaded at run time.

Input: a uint8 frame ``(h, w, 3)`` (BGR, as ``VideoFileReader`` and
``ResizeImageTransformer`` give it; a reader's ``(index, frame)`` tuple is taken too).
Output: the detections as 1.0.4's ``BoundingBoxAnnotator`` takes them, a float64 array
``(nb_boxes, 6)`` of ``[ymin, xmin, ymax, xmax, class_index, score]`` with class 1
("person") and the SVM's margin squashed to ``0..1`` as the score.

Params: ``min_score`` (SVM margin to keep a box, default 0.5), ``win_stride`` (pixels,
default 8), ``scale`` (pyramid step, default 1.05).

Run by the worker: ``command: [python3, -m, videoflow_sdk.examples.hog_people]``.
"""

import numpy as np

from videoflow_sdk import Poison, Processor, run


class HogPeople(Processor):
    def __init__(self, min_score=0.5, win_stride=8, scale=1.05):
        import cv2  # here, so a missing OpenCV fails the component's start with its reason

        if not hasattr(cv2, "HOGDescriptor"):
            raise RuntimeError(
                "this OpenCV (%s) has no HOGDescriptor; install opencv-python-headless<5 "
                "(./scripts/install-deps --demo config/samples/people.yaml)" % cv2.__version__
            )
        self.hog = cv2.HOGDescriptor()
        self.hog.setSVMDetector(cv2.HOGDescriptor_getDefaultPeopleDetector())
        self.min_score = float(min_score)
        self.win_stride = int(win_stride)
        self.scale = float(scale)

    def process(self, frame):
        if isinstance(frame, tuple) and len(frame) == 2:
            frame = frame[1]
        if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or frame.ndim != 3:
            raise Poison("expected a uint8 (h, w, 3) frame, got %r" % type(frame).__name__)
        s = self.win_stride
        rects, weights = self.hog.detectMultiScale(
            frame, winStride=(s, s), padding=(8, 8), scale=self.scale
        )
        boxes = []
        for (x, y, w, h), margin in zip(rects, np.ravel(weights)):
            if margin < self.min_score:
                continue
            score = 1.0 - float(np.exp(-float(margin)))
            boxes.append([y, x, y + h, x + w, 1, score])
        return np.array(boxes, dtype=np.float64).reshape(-1, 6)


if __name__ == "__main__":
    run(HogPeople)
