//! Fuzz the .tern reader: open arbitrary bytes, then touch, decode and verify every tensor.
//!
//! A random mutation almost always breaks a checksum, which stops the reader at its first check.
//! So every input is also tried with its file size, section checksums, section-table checksum and
//! header checksum recomputed (`fix_checksums`): the fuzzer then reaches the section table, the
//! metadata and directory JSON and their validation. Tensor bytes are decoded directly too,
//! whatever their checksum, so the codecs see mutated payloads.
//!
//! Invariants checked beyond "no panic": every tensor of an opened file lies inside the file, and
//! a file that passes `verify()` gives every tensor and decodes it to its element count.
//!
//! Seeds (written by `tests/tests/tern_malformed.rs` with TERN_BLESS=1) and minimized crashes:
//! fuzz/regressions/tern_read/. `tests/tests/fuzz_regressions.rs` mirrors this target on stable.
#![no_main]

include!("../bodies/tern_read.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| run(data));
