"""Example components: ``python -m videoflow_sdk.examples.invert`` (a numpy frame processor)
and ``python -m videoflow_sdk.examples.add`` (a plain function processor)."""
