//! Fuzz the `.ternd` delta decoder (`tern_format::delta::fuzz_input`): the first byte picks the
//! chunk decoders (FM-Delta 16/32, sparse bytes, ternary codes, ggml blocks, against a fixed base)
//! or the whole-file path (header, index, payload checksums, chunk tables, then every record
//! decoded against a zero base). Nothing may panic; errors are fine.
//! Seeds and minimized crashes: fuzz/regressions/delta_decode/ (seeds written by
//! `tests/tests/delta.rs::fuzz_seeds` with TERN_BLESS=1).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tern_format::delta::fuzz_input(data);
});
