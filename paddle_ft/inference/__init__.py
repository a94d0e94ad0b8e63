"""The inference side: an export folder in, answers out (`predictor`, `backends`, `tensorrt`, `classifier`,
`quantize`). It imports no training code (tests/test_architecture.py holds that)."""
