//! Compare the reference forward pass with a `llama-perplexity --kl-divergence-base` file (full
//! log-softmax of every scored position): top-1 agreement and mean/max KL(llama ‖ tern).
//!
//! `cargo run --release -p tern-reference --example kld_compare -- MODEL.tern BASE.kld
//!  [--mode f32|llama] [--chunks N]`

use std::time::Instant;

use tern_reference::{ForwardOptions, KvCache, LogitsWanted, Model};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (model_path, kld_path) = (&args[0], &args[1]);
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let mode = opt("--mode").unwrap_or_else(|| "f32".into());
    let raw = std::fs::read(kld_path)?;
    assert_eq!(&raw[..8], b"_logits_");
    let rd = |o: usize| i32::from_le_bytes(raw[o..o + 4].try_into().unwrap());
    let (n_ctx, n_vocab, n_chunk) = (rd(8) as usize, rd(12) as usize, rd(16) as usize);
    let chunks: usize = opt("--chunks")
        .and_then(|s| s.parse().ok())
        .unwrap_or(n_chunk)
        .min(n_chunk);
    let tok_off = 20;
    let mut off = tok_off + 4 * n_ctx * n_chunk;
    let nv = 2 * n_vocab.div_ceil(2) + 4;
    let first = n_ctx / 2;
    let n_pos = n_ctx - 1 - first;

    let file = tern_format::TernFile::open(model_path.as_ref())?;
    let mut model = Model::load(&file)?;
    match mode.as_str() {
        "llama" => model.set_options(ForwardOptions::llama_cpp_like()),
        "llama-f32kv" => {
            let mut o = ForwardOptions::llama_cpp_like();
            o.kv_f16 = false;
            model.set_options(o)
        }
        _ => {}
    }
    let n_embd = model.hparams().n_embd as usize;
    let (mut agree, mut total, mut kl_sum, mut kl_max) = (0usize, 0usize, 0.0f64, 0.0f64);
    let t0 = Instant::now();
    for c in 0..chunks {
        let tokens: Vec<u32> = (0..n_ctx)
            .map(|i| rd(tok_off + 4 * (c * n_ctx + i)) as u32)
            .collect();
        let mut cache = KvCache::new(&model, n_ctx)?;
        let tf = Instant::now();
        let hidden = model.forward_hidden(&tokens, &mut cache, LogitsWanted::All)?;
        let tl = Instant::now();
        let logits = model.logits(&hidden[first * n_embd..(first + n_pos) * n_embd])?;
        eprintln!(
            "forward {:.2} s, head {:.2} s",
            (tl - tf).as_secs_f64(),
            tl.elapsed().as_secs_f64()
        );
        let (mut ca, mut ck) = (0usize, 0.0f64);
        for j in 0..n_pos {
            let row = &raw[off..off + 2 * nv];
            off += 2 * nv;
            let f = |i: usize| f32::from_le_bytes(row[4 * i..4 * i + 4].try_into().unwrap());
            let (scale, min_lp) = (f(0) as f64, f(1) as f64);
            let lp: Vec<f64> = (0..n_vocab)
                .map(|i| {
                    let q = u16::from_le_bytes(row[8 + 2 * i..10 + 2 * i].try_into().unwrap());
                    min_lp + scale * q as f64
                })
                .collect();
            let ours = &logits[j * n_vocab..(j + 1) * n_vocab];
            let m = ours.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
            let lse = m + ours.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln();
            let am = |v: &mut dyn Iterator<Item = f64>| {
                v.enumerate()
                    .fold(
                        (0, f64::NEG_INFINITY),
                        |b, (i, x)| if x > b.1 { (i, x) } else { b },
                    )
                    .0
            };
            let a_l = am(&mut lp.iter().cloned());
            let a_o = am(&mut ours.iter().map(|&x| x as f64));
            // KL over llama.cpp's top-32 plus one bucket for the rest (the base file clips
            // log-probs at max - 16, so the tail of the file is not a distribution)
            let mut idx: Vec<usize> = (0..n_vocab).collect();
            idx.sort_by(|&a, &b| lp[b].partial_cmp(&lp[a]).unwrap());
            let (mut kl, mut pt, mut qt) = (0.0f64, 0.0f64, 0.0f64);
            for &i in &idx[..32] {
                let q = ours[i] as f64 - lse;
                kl += lp[i].exp() * (lp[i] - q);
                pt += lp[i].exp();
                qt += q.exp();
            }
            let (pr, qr) = ((1.0 - pt).max(1e-12), (1.0 - qt).max(1e-12));
            kl += pr * (pr.ln() - qr.ln());
            ca += (a_l == a_o) as usize;
            ck += kl;
            kl_max = kl_max.max(kl);
        }
        agree += ca;
        total += n_pos;
        kl_sum += ck;
        eprintln!(
            "chunk {c}: top1 {ca}/{n_pos} mean KL {:.6}  ({:.1} s)",
            ck / n_pos as f64,
            t0.elapsed().as_secs_f64()
        );
    }
    println!(
        "mode {mode}: {total} positions, top-1 {agree}/{total} = {:.4}, mean KL {:.6}, max KL {:.5}",
        agree as f64 / total as f64,
        kl_sum / total as f64,
        kl_max
    );
    Ok(())
}
