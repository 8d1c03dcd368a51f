//! Perplexity of many KV-cache settings in one process, on the CPU, as `tern perplexity` computes
//! it (windows of `c` tokens, BOS first, the second half of each window scored), plus the
//! MiniCache retention rule (which the CLI does not expose): the measurements behind the
//! MiniCache defaults (`tern_reference::kv`, docs/measurements.md).
//!
//! `cargo run --release -p tern-engine --example kv_sweep -- MODEL TEXT C[:BATCH] CHUNKS SETTING...`
//! where SETTING is `kv[/minicache[/rule]]`, e.g. `f16`, `q4/15,0.5,0.3`, `f16/15,0.5,0.1/similar`.
//! Prints one JSON line per setting.

use std::path::PathBuf;

use tern_engine::session::Model;
use tern_engine::{Kivi, KvOptions, KvQuant, KvSpec, MiniCacheMode, NoObserver, ScoreOptions};
use tern_reference::{KvCache, Retention};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, text, c, chunks, settings @ ..] = args.as_slice() else {
        return Err("usage: kv_sweep MODEL TEXT C CHUNKS SETTING...".into());
    };
    let model = Model::open(&PathBuf::from(model))?;
    let text = std::fs::read_to_string(text)?;
    // C or C:BATCH (tokens per forward call; default min(C, 512)).
    let (c, batch) = match c.split_once(':') {
        Some((c, b)) => (c.parse::<usize>()?, b.parse::<usize>()?),
        None => (c.parse::<usize>()?, 0),
    };
    let score_opts = ScoreOptions {
        batch,
        ..Default::default()
    };
    let chunks: usize = chunks.parse()?;
    let tokens = model.perplexity_tokens(&text)?;
    // As `tern perplexity`: the first token of each window becomes BOS only when the model adds
    // one (SmolLM2 does not).
    let tok = model.tokenizer()?;
    let bos = if tok.add_bos() { tok.bos() } else { None };
    let hp = model.meta().hparams.clone();
    if settings.first().map(String::as_str) == Some("stats") {
        // Angular distance d = θ/π between adjacent layers' K (and V) head vectors, f32 cache.
        let mut win = tokens[..c].to_vec();
        if let Some(b) = bos {
            win[0] = b;
        }
        let mut cache = KvCache::for_hparams(&hp, c - 1)?;
        model.score_in_cache(&mut cache, &win, &ScoreOptions::default(), &mut NoObserver)?;
        let hd = hp.head_dim as usize;
        let row = hp.n_head_kv as usize * hd;
        for l in 1..hp.n_layer as usize {
            let (ka, va) = cache.layer(l - 1);
            let (kb, vb) = cache.layer(l);
            let mut line = format!("pair ({}, {l}):", l - 1);
            for (name, a, b) in [("K", ka, kb), ("V", va, vb)] {
                let mut d = Vec::new();
                for p in 0..c - 1 {
                    for h in 0..hp.n_head_kv as usize {
                        let o = p * row + h * hd;
                        let m = tern_reference::kv_merge::slerp_merge(
                            &a[o..o + hd],
                            &b[o..o + hd],
                            0.5,
                        );
                        d.push(m.distance);
                    }
                }
                d.sort_by(f32::total_cmp);
                let q = |f: f64| d[((d.len() - 1) as f64 * f) as usize];
                line += &format!(
                    " {name} d p10 {:.3} p50 {:.3} p90 {:.3};",
                    q(0.1),
                    q(0.5),
                    q(0.9)
                );
            }
            println!("{line}");
        }
        return Ok(());
    }
    for setting in settings {
        let mut parts = setting.split('/');
        let kv = parts.next().unwrap_or("f32");
        let mc = parts.next().unwrap_or("off");
        let rule = match parts.next() {
            Some("similar") => Retention::Similar,
            _ => Retention::Distinct,
        };
        let (group, window) = match parts.next() {
            Some(gr) => {
                let mut it = gr.split(',');
                (
                    it.next().and_then(|v| v.parse().ok()),
                    it.next().and_then(|v| v.parse().ok()),
                )
            }
            None => (None, None),
        };
        let d = Kivi::default();
        let spec = KvOptions {
            format: KvQuant::parse(kv)?,
            kivi: Kivi {
                group: group.unwrap_or(d.group),
                residual: window.unwrap_or(d.residual),
            },
            minicache: if mc == "on" {
                MiniCacheMode::On
            } else {
                KvSpec::parse_minicache_explicit(mc)?
                    .map_or(MiniCacheMode::Off, MiniCacheMode::Custom)
            },
        }
        .validate(&hp)?;
        let t0 = std::time::Instant::now();
        let (mut nll, mut count, mut per_tok, mut retained) = (0.0f64, 0usize, 0.0f64, 0usize);
        let windows = (tokens.len() / c).min(chunks);
        for w in 0..windows {
            let mut win = tokens[w * c..(w + 1) * c].to_vec();
            if let Some(b) = bos {
                win[0] = b;
            }
            let mut cache = KvCache::for_spec(&hp, c - 1, &spec)?;
            cache.set_retention(rule);
            let lp = model.score_in_cache(&mut cache, &win, &score_opts, &mut NoObserver)?;
            let second = &lp[c / 2..];
            nll -= second.iter().map(|&v| v as f64).sum::<f64>();
            count += second.len();
            per_tok += cache.kv_bytes_per_token();
            retained += cache.retained();
        }
        let positions = windows * (c - 1);
        let slots = spec
            .minicache
            .map_or(0, |m| m.pairs(hp.n_layer).len() * 2 * hp.n_head_kv as usize);
        println!(
            "{{\"setting\": \"{setting}\", \"ppl_second_half\": {:.5}, \"kv_bytes_per_token\": {:.1}, \"retained_fraction\": {:.4}, \"windows\": {windows}, \"seconds\": {:.0}}}",
            (nll / count as f64).exp(),
            per_tok / windows as f64,
            if slots > 0 { retained as f64 / (positions * slots) as f64 } else { 0.0 },
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
