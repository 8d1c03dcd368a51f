//! Fuzz the NeuZip decoder: `decode`, `decode_rows` with row ranges derived from the input,
//! `stats`, and the scalar per-lane reference decoder. Nothing may panic, loop forever or allocate
//! beyond the blob's bound; errors are fine. When the whole blob decodes, every other path must
//! agree with it. Also round-trips the input as raw bf16/f16 elements through `encode`.
//! Seeds (valid blobs written by `tern-format`'s `neuzip::tests::fuzz_seeds` with TERN_BLESS=1)
//! and minimized crashes: fuzz/regressions/rans_decode/.
#![no_main]

include!("../bodies/rans_decode.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| run(data));
