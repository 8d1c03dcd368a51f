//! The engine on the real default model: generation, stop strings, streaming, cancellation, and
//! clear errors on bad input.

use std::sync::OnceLock;

use tern_engine::{EngineError, GenerateOptions, Model, SamplingParams, Session, StopReason};

fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| {
        let gguf = tern_tests::smollm2_gguf();
        let out = tern_tests::scratch("engine_session").join("smol.tern");
        tern_import::import_path(&gguf, &out, &Default::default(), &mut |_, _, _| {}).unwrap();
        Model::open(&out).unwrap()
    })
}

fn gen(prompt: &str, n: usize, stop: &[&str]) -> (String, StopReason, Vec<String>) {
    let m = model();
    let mut s = Session::new(m, 256).unwrap();
    let ids = m.tokenize(prompt, true).unwrap();
    let opts = GenerateOptions {
        max_tokens: n,
        stop_tokens: vec![],
        stop_strings: stop.iter().map(|s| s.to_string()).collect(),
    };
    let mut pieces = Vec::new();
    let r = s
        .generate(&ids, &SamplingParams::greedy(), &opts, &mut |p| {
            pieces.push(p.to_string());
            true
        })
        .unwrap();
    (r.text, r.stop, pieces)
}

#[test]
fn greedy_generation_is_deterministic_and_streams_the_same_text() {
    let (a, stop, pieces) = gen("The capital of France is", 12, &[]);
    let (b, _, _) = gen("The capital of France is", 12, &[]);
    assert_eq!(a, b);
    assert_eq!(stop, StopReason::MaxTokens);
    assert_eq!(pieces.concat(), a);
    assert!(a.contains("Paris"), "{a:?}");
}

#[test]
fn stop_strings_cut_the_text_and_are_never_streamed() {
    let (full, _, _) = gen("The capital of France is", 12, &[]);
    // Stop at the first occurrence of a substring of the greedy continuation.
    let stop = "Paris";
    let at = full.find(stop).unwrap();
    let (cut, reason, pieces) = gen("The capital of France is", 12, &[stop]);
    assert_eq!(reason, StopReason::StopString);
    assert_eq!(cut, full[..at]);
    assert_eq!(pieces.concat(), cut);
}

#[test]
fn callback_can_stop_and_cancel_flag_cancels() {
    let m = model();
    let mut s = Session::new(m, 128).unwrap();
    let ids = m.tokenize("Once upon a time", true).unwrap();
    let opts = GenerateOptions {
        max_tokens: 50,
        ..Default::default()
    };
    let mut n = 0;
    let r = s
        .generate(&ids, &SamplingParams::greedy(), &opts, &mut |_| {
            n += 1;
            n < 3
        })
        .unwrap();
    assert_eq!(r.stop, StopReason::Callback);
    assert!(r.tokens.len() < 10);

    s.reset();
    let cancel = s.cancel_handle();
    let r = s.generate(&ids, &SamplingParams::greedy(), &opts, &mut |_| {
        cancel.store(true, std::sync::atomic::Ordering::SeqCst);
        true
    });
    assert!(matches!(r, Err(EngineError::Cancelled)), "{r:?}");
}

#[test]
fn bad_input_gives_clear_errors() {
    let m = model();
    let mut s = Session::new(m, 16).unwrap();
    let opts = GenerateOptions {
        max_tokens: 4,
        ..Default::default()
    };
    let g = SamplingParams::greedy();
    // Unknown token id.
    let e = s
        .generate(&[1, 49152], &g, &opts, &mut |_| true)
        .unwrap_err();
    assert!(
        e.to_string().contains("49152") && e.to_string().contains("vocabulary"),
        "{e}"
    );
    // Empty prompt.
    let e = s.generate(&[], &g, &opts, &mut |_| true).unwrap_err();
    assert!(e.to_string().contains("empty prompt"), "{e}");
    // Prompt longer than the context.
    let long: Vec<u32> = (0..40).map(|i| 100 + i).collect();
    let e = s.generate(&long, &g, &opts, &mut |_| true).unwrap_err();
    assert!(
        matches!(
            e,
            EngineError::PromptTooLong {
                prompt: 40,
                ctx: 16
            }
        ),
        "{e}"
    );
    // The session survives all of that.
    let ids = m.tokenize("Hi", true).unwrap();
    assert!(s.generate(&ids, &g, &opts, &mut |_| true).is_ok());
    // Non-UTF-8 text.
    let e = m
        .tokenizer()
        .unwrap()
        .encode_bytes(b"abc\xff\xfe", true)
        .unwrap_err();
    assert!(e.to_string().to_lowercase().contains("utf-8"), "{e}");
    // Bad sampling parameters.
    let bad = SamplingParams {
        temperature: -1.0,
        ..SamplingParams::greedy()
    };
    assert!(matches!(
        s.generate(&ids, &bad, &opts, &mut |_| true),
        Err(EngineError::InvalidArgument(_))
    ));
}

#[test]
fn model_without_tokenizer_refuses_text() {
    // The tiny TQ2_0 model's GGUF has a dummy SentencePiece vocabulary; drop it to get a model
    // without a tokenizer.
    let src = tern_tests::golden("ggml/tiny-tq2_0.gguf");
    let g = tern_import::gguf::GgufFile::open(&src).unwrap();
    let mut meta = tern_import::gguf_meta::model_meta(&g, None).unwrap();
    meta.tokenizer = None;
    let f = tern_tests::scratch("no_tokenizer").join("m.tern");
    let mut w = tern_format::TernWriter::create(&f, meta).unwrap();
    let tmp = tern_tests::scratch("no_tokenizer_src").join("m.tern");
    tern_import::import_path(&src, &tmp, &Default::default(), &mut |_, _, _| {}).unwrap();
    let full = tern_format::TernFile::open(&tmp).unwrap();
    for t in full.tensors() {
        let v = full.tensor(&t.name).unwrap();
        w.add_tensor(&t.name, &t.shape, t.encoding.clone(), v.bytes)
            .unwrap();
    }
    w.finish().unwrap();
    let m = Model::open(&f).unwrap();
    let e = m.tokenize("hello", true).unwrap_err();
    assert!(matches!(e, EngineError::NoTokenizer), "{e}");
    assert!(e.to_string().contains("--tokens"), "{e}");
    // Token ids still work.
    let mut s = Session::new(&m, 32).unwrap();
    let opts = GenerateOptions {
        max_tokens: 3,
        ..Default::default()
    };
    let r = s
        .generate(&[1, 2, 3], &SamplingParams::greedy(), &opts, &mut |_| true)
        .unwrap();
    assert_eq!(r.tokens.len(), 3);
}

/// Greedy tokens after what `s` holds (token by token, through `Session::eval`).
fn greedy_after(s: &mut Session<'_>, last_logits: Vec<f32>, n: usize) -> Vec<u32> {
    let mut logits = last_logits;
    let mut out = Vec::new();
    for _ in 0..n {
        let t = logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i as u32)
            .unwrap();
        out.push(t);
        logits = s.eval(&[t]).unwrap();
    }
    out
}

/// A long prompt of real text: `n` tokens of a repeated paragraph.
fn long_prompt(m: &Model, n: usize) -> Vec<u32> {
    let para = "The history of the city goes back two thousand years, to a settlement on the \
                river where traders met to exchange salt, grain and cloth. ";
    let ids = m.tokenize(&para.repeat(n / 20 + 1), false).unwrap();
    ids[..n].to_vec()
}

/// Set `flag` after `delay` on another thread; returns when it was set.
fn cancel_after(
    flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
    delay: std::time::Duration,
) -> std::thread::JoinHandle<std::time::Instant> {
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        let at = std::time::Instant::now();
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        at
    })
}

#[test]
fn cancel_during_a_long_prefill_is_prompt_and_rolls_the_session_back() {
    let m = model();
    let start = m.tokenize("The capital of France is", true).unwrap();
    let prompt = long_prompt(m, 1000);
    let mut s = Session::new(m, 1100).unwrap();
    s.eval(&start).unwrap();
    let len0 = s.history().len();

    // A 1000-token prompt takes seconds on the CPU; cancel it 300 ms in.
    let setter = cancel_after(s.cancel_handle(), std::time::Duration::from_millis(300));
    let r = s.eval(&prompt);
    let ended = std::time::Instant::now();
    let sent = setter.join().unwrap();
    assert!(matches!(r, Err(EngineError::Cancelled)), "{r:?}");
    let latency = ended.saturating_duration_since(sent);
    // One layer of a 1000-token batch of SmolLM2-135M (30 layers) is ~0.1-0.3 s on 2 cores: the
    // bound leaves room for a loaded CI machine, but not for the rest of the prompt.
    eprintln!("CPU prefill of 1000 tokens cancelled: returned {latency:?} after the flag");
    assert!(latency < std::time::Duration::from_secs(4), "{latency:?}");

    // The session is where it was before the cancelled call, and generates as if nothing happened.
    assert_eq!(s.history(), &start[..]);
    assert_eq!(s.history().len(), len0);
    let logits = s.eval(&prompt[..8]).unwrap();
    let after = greedy_after(&mut s, logits, 6);
    let mut fresh = Session::new(m, 64).unwrap();
    let mut both = start.clone();
    both.extend_from_slice(&prompt[..8]);
    let logits = fresh.eval(&both).unwrap();
    assert_eq!(after, greedy_after(&mut fresh, logits, 6));
}

#[test]
fn cancel_during_scoring_is_prompt_and_leaves_an_empty_session() {
    let m = model();
    let text = long_prompt(m, 1000);
    let mut s = Session::new(m, 1100).unwrap();
    s.eval(&text[..5]).unwrap();
    let setter = cancel_after(s.cancel_handle(), std::time::Duration::from_millis(300));
    let r = s.score(&text);
    let ended = std::time::Instant::now();
    let sent = setter.join().unwrap();
    assert!(matches!(r, Err(EngineError::Cancelled)), "{r:?}");
    let latency = ended.saturating_duration_since(sent);
    eprintln!("CPU score of 1000 tokens cancelled: returned {latency:?} after the flag");
    assert!(latency < std::time::Duration::from_secs(4), "{latency:?}");
    assert!(s.history().is_empty());
    // Usable afterwards: a short score equals a fresh session's.
    let short = &text[..12];
    assert_eq!(
        s.score(short).unwrap(),
        Session::new(m, 64).unwrap().score(short).unwrap()
    );
}

#[test]
fn a_failed_eval_leaves_the_session_at_its_last_good_position() {
    let m = model();
    let start = m.tokenize("Once upon a time", true).unwrap();
    let mut s = Session::new(m, 16).unwrap();
    s.eval(&start).unwrap();
    let len0 = s.history().len();
    // Too long for the context, and a bad token id: refused, nothing changes.
    assert!(s.eval(&vec![1u32; 16]).is_err());
    assert!(s.eval(&[u32::MAX]).is_err());
    assert_eq!(s.history().len(), len0);
    let logits = s.eval(&[28u32]).unwrap();
    let got = greedy_after(&mut s, logits, 4);
    let mut fresh = Session::new(m, 16).unwrap();
    let mut both = start.clone();
    both.push(28);
    let logits = fresh.eval(&both).unwrap();
    assert_eq!(got, greedy_after(&mut fresh, logits, 4));
}
