'''
Placeholder for OpenCV on the interop tests' reference workers (worker/tests/interop_*.rs).

videoflow 1.0.4's `videoflow.producers` package imports `videoflow.producers.video` from its
`__init__`, which imports `cv2` at module scope — so `videoflow.producers.basic.IntProducer`
cannot be imported without OpenCV, which only the reference's `video`/`vision`/`all` extras
install. The reference virtualenv has the `distributed` and `blob` extras only
(scripts/reference-requirements.txt). This module lets the import succeed; any actual use of
OpenCV fails loudly. The interop flows use no video node.
'''


def __getattr__(name):
    raise ImportError(f'cv2.{name}: OpenCV is not installed in the reference virtualenv '
                      '(the interop tests run no video node).')
