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
