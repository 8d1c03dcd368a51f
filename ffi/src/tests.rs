//! Unit tests of the pieces that need no model (the C test in tests/c covers the model paths).
