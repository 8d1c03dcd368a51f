//! Prefill and decode speed of the reference forward pass on a `.tern` file, llama-bench style.
//!
//! `cargo run --release -p tern-reference --example bench -- MODEL.tern [n_prompt=64] [n_gen=32] [--serial] [--llama]`

use std::time::Instant;

use tern_reference::{ForwardOptions, KvCache, LogitsWanted, MatmulOptions, Model};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .ok_or("usage: bench MODEL.tern [n_prompt] [n_gen] [--serial]")?;
    let n_prompt: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    let n_gen: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(32);
    let serial = args.iter().any(|a| a == "--serial");
    let file = tern_format::TernFile::open(path.as_ref())?;
    let t = Instant::now();
    let mut model = Model::load(&file)?;
    println!("load: {:.2} s", t.elapsed().as_secs_f64());
    if args.iter().any(|a| a == "--llama") {
        model.set_options(ForwardOptions::llama_cpp_like());
    }
    if serial {
        model.set_options(ForwardOptions {
            matmul: MatmulOptions {
                parallel: false,
                ..Default::default()
            },
            kv_f16: false,
            llama_cpp_ops: false,
        });
    }
    let n_vocab = model.hparams().n_vocab;
    let prompt: Vec<u32> = (0..n_prompt as u32)
        .map(|i| (i * 7919 + 13) % n_vocab)
        .collect();
    let mut cache = KvCache::new(&model, n_prompt + n_gen)?;
    let t = Instant::now();
    let mut logits = model.forward(&prompt, &mut cache, LogitsWanted::Last)?;
    let pp = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for _ in 0..n_gen {
        let next = logits
            .iter()
            .enumerate()
            .fold(
                (0, f32::NEG_INFINITY),
                |b, (i, &x)| if x > b.1 { (i, x) } else { b },
            )
            .0;
        logits = model.forward(&[next as u32], &mut cache, LogitsWanted::Last)?;
    }
    let tg = t.elapsed().as_secs_f64();
    let threads = if serial {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    };
    println!(
        "pp{n_prompt}: {:.1} tok/s   tg{n_gen}: {:.1} tok/s   ({threads} threads)",
        n_prompt as f64 / pp,
        n_gen as f64 / tg
    );
    Ok(())
}
