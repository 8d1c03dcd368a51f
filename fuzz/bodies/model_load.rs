// The body of fuzz target `model_load`, shared by fuzz/fuzz_targets/model_load.rs (via include!)
// and the stable corpus replay in tests/tests/fuzz_regressions.rs, so the two cannot drift apart.
use tern_engine::{Model, Session};

/// Write `data` to a temporary file, open it as a model on the CPU, and when that succeeds run a
/// 64-token session over two tokens. Errors are fine; a panic or an abort (an allocation sized
/// from unchecked hyperparameters) is the bug.
pub fn run(data: &[u8]) {
    let path = std::env::temp_dir().join(format!(
        "tern_fuzz_model_load_{}_{:?}.tern",
        std::process::id(),
        std::thread::current().id()
    ));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let opened = Model::open(&path);
    let _ = std::fs::remove_file(&path);
    let Ok(model) = opened else {
        return;
    };
    let Ok(mut session) = Session::new(&model, 64) else {
        return;
    };
    let last = model.n_vocab().saturating_sub(1) as u32;
    let _ = session.eval(&[0, last.min(1)]);
}
