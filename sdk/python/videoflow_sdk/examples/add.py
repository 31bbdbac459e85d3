"""A plain function processor: ``x + operand``, optionally taking ``sleep_ms`` per input.

Run by the worker: ``command: [python3, -m, videoflow_sdk.examples.add]`` with params
``{operand: 1000, sleep_ms: 5}``.
"""

import time

from videoflow_sdk import Poison, processor, run


@processor
def add(x, operand=0, sleep_ms=0):
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise Poison("expected a number, got %r" % (x,))
    if sleep_ms:
        time.sleep(sleep_ms / 1000.0)
    return x + operand


if __name__ == "__main__":
    run(add)
