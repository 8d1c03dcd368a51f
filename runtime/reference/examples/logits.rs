//! Logits of every position for a token sequence, as raw little-endian f32 `[n][n_vocab]`.
//!
//! `cargo run --release -p tern-reference --example logits -- MODEL.tern OUT.f32 [--llama] TOKEN...`

use tern_reference::{ForwardOptions, KvCache, LogitsWanted, Model};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (model_path, out) = (
        args.first()
            .ok_or("usage: logits MODEL OUT [--llama] TOKEN...")?,
        args.get(1).ok_or("missing OUT")?,
    );
    let file = tern_format::TernFile::open(model_path.as_ref())?;
    let mut model = Model::load(&file)?;
    if args.iter().any(|a| a == "--llama") {
        model.set_options(ForwardOptions::llama_cpp_like());
    }
    let tokens: Vec<u32> = args[2..]
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let mut cache = KvCache::new(&model, tokens.len())?;
    let y = model.forward(&tokens, &mut cache, LogitsWanted::All)?;
    std::fs::write(
        out,
        y.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>(),
    )?;
    Ok(())
}
