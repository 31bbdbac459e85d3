"""Makes the input of the people-detector sample: an H.264 MP4 of two walking figures
(drawn standing-person silhouettes, in proportions OpenCV's HOG people detector finds) on a
noisy grey background, and a stretch with nobody in it — drawn with OpenCV, encoded by the
``ffmpeg`` command-line tool (libx264), so nothing is downloaded.

    python3 -m videoflow_sdk.examples.people_clip OUT.mp4 [--frames 48] [--size 960x540]
                                                  [--nobody]

The last quarter of the frames is empty, so a detector that boxes everything, or nothing,
fails the sample's self-check; ``--nobody`` leaves every frame empty (the tests use it to
see that check fail).
"""

import argparse
import subprocess
import sys

import numpy as np


def person(im, cx, top, height, color, phase):
    import cv2

    u = height / 8.0
    cv2.circle(im, (cx, int(top + u * 0.6)), int(u * 0.55), color, -1)
    cv2.rectangle(im, (int(cx - u * 0.85), int(top + u * 1.5)),
                  (int(cx + u * 0.85), int(top + u * 4.3)), color, -1)
    cv2.line(im, (int(cx - u * 0.3), int(top + u * 1.1)), (int(cx + u * 0.3), int(top + u * 1.1)),
             color, int(u * 0.5))
    swing = int(u * 0.25 * np.sin(phase))
    for side in (-1, 1):
        cv2.line(im, (int(cx + side * u * 0.85), int(top + u * 1.7)),
                 (int(cx + side * u * 1.15) + side * swing, int(top + u * 4.4)), color, int(u * 0.45))
        cv2.line(im, (int(cx + side * u * 0.45), int(top + u * 4.2)),
                 (int(cx + side * u * 0.6) + side * swing, int(top + u * 7.9)), color, int(u * 0.6))


def frames(count, width, height, nobody=False):
    import cv2

    rng = np.random.default_rng(7)
    base = np.clip(195 + rng.integers(-20, 20, (height, width, 3)), 0, 255).astype(np.uint8)
    base = cv2.GaussianBlur(base, (3, 3), 0)
    tall = int(height * 0.45)
    for i in range(count):
        im = base.copy()
        if i < count * 3 // 4 and not nobody:
            t = i / max(count, 1)
            person(im, int(width * (0.2 + 0.25 * t)), int(height * 0.15), tall, (40, 40, 40), i * 0.6)
            person(im, int(width * (0.75 - 0.2 * t)), int(height * 0.22), tall, (50, 35, 30), i * 0.6 + 1)
        yield im


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--size", default="960x540")
    parser.add_argument("--ffmpeg", default="ffmpeg")
    parser.add_argument("--nobody", action="store_true")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.split("x"))
    cmd = [args.ffmpeg, "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "bgr24",
           "-s", "%dx%d" % (width, height), "-r", "24", "-i", "-", "-c:v", "libx264",
           "-preset", "veryfast", "-crf", "20", "-pix_fmt", "yuv420p", args.out]
    try:
        enc = subprocess.Popen(cmd, stdin=subprocess.PIPE)
    except OSError as e:
        sys.exit("cannot start %s (install FFmpeg: ./scripts/install-deps --demo): %s" % (args.ffmpeg, e))
    for im in frames(args.frames, width, height, args.nobody):
        enc.stdin.write(im.tobytes())
    enc.stdin.close()
    if enc.wait() != 0:
        sys.exit("ffmpeg failed to encode %s" % args.out)


if __name__ == "__main__":
    main()
