//! Fuzz model loading: arbitrary bytes written to a file and opened with `tern_engine::Model::open`
//! (CPU reference), then, when that succeeds, a 64-token session and a 2-token eval. Nothing may
//! panic or abort: hyperparameters that disagree with the tensors (`n_layer = 4294967295`, a huge
//! `n_embd`, a mismatched `n_vocab`, `n_ctx_train = 4294967295`) must be typed errors before
//! anything is allocated from them.
//!
//! Seeds (written by `tests/tests/hostile_hparams.rs` with TERN_BLESS=1) and minimized crashes:
//! fuzz/regressions/model_load/. `tests/tests/fuzz_regressions.rs` mirrors this target on stable.
#![no_main]

include!("../bodies/model_load.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| run(data));
