//! Fuzz the `.ternd` delta decoder (`tern_format::delta::fuzz_input`): the first byte picks the
//! chunk decoders (FM-Delta 16/32, sparse bytes, ternary codes, ggml blocks, against a fixed base)
//! or the whole-file path (header, index, payload checksums, chunk tables, then every record
//! decoded against a zero base). Nothing may panic; errors are fine.
//! Seeds and minimized crashes: fuzz/regressions/delta_decode/ (seeds written by
//! `tests/tests/delta.rs::fuzz_seeds` with TERN_BLESS=1).
//! `tests/tests/fuzz_regressions.rs` mirrors this target on stable.
#![no_main]

include!("../bodies/delta_decode.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| run(data));
