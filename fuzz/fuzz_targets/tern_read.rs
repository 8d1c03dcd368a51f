//! Fuzz the .tern reader: open arbitrary bytes, then touch and verify every tensor.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = tern_format::TernFile::from_bytes(data.to_vec()) {
        for i in 0..f.tensors().len() {
            if let Ok(v) = f.tensor_at(i) {
                let _ = v.to_f32();
            }
        }
        let _ = f.verify();
    }
});
