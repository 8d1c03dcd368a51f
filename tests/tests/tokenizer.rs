//! Tokenizer and chat templates against llama.cpp, on the real SmolLM2 GGUF.
//!
//! Golden data (tests/golden/tokenizer, see PROVENANCE.md): `expected.json` holds llama-tokenize's ids
//! for 271 strings, with and without special-token parsing; `chat_expected.json` holds prompts
//! rendered by llama.cpp's Jinja engine and llama.cpp's special-token roles for this model.

use std::sync::OnceLock;

use serde::Deserialize;
use tern_engine::chat::{render_chat, render_chat_with, ChatError, ChatMessage, ChatOptions};
use tern_engine::tokenizer::{
    llama_cpp_default_add_bos, PreTokenizer, StreamDecoder, Tokenizer, TokenizerError,
};
use tern_format::{TokenizerKind, TokenizerSpec};
use tern_import::gguf::GgufFile;

fn smollm2_spec() -> &'static TokenizerSpec {
    static SPEC: OnceLock<TokenizerSpec> = OnceLock::new();
    SPEC.get_or_init(|| {
        let g = GgufFile::open(tern_tests::smollm2_gguf()).expect("open SmolLM2 GGUF");
        tern_import::gguf_meta::tokenizer_spec(&g)
            .expect("tokenizer metadata")
            .expect("SmolLM2 has a tokenizer")
    })
}

fn smollm2() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| Tokenizer::from_spec(smollm2_spec()).expect("build tokenizer"))
}

#[derive(Deserialize)]
struct Golden {
    model_sha256: String,
    cases: Vec<GoldenCase>,
}

#[derive(Deserialize)]
struct GoldenCase {
    text: String,
    special: Vec<u32>,
    no_special: Vec<u32>,
}

fn golden() -> Golden {
    let path = tern_tests::golden("tokenizer/expected.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn smollm2_spec_is_what_llama_cpp_sees() {
    let spec = smollm2_spec();
    assert_eq!(spec.kind, TokenizerKind::Gpt2);
    assert_eq!(spec.pre.as_deref(), Some("smollm"));
    let tok = smollm2();
    assert_eq!(tok.pre_tokenizer(), Some(PreTokenizer::Smollm));
    assert_eq!(tok.n_vocab(), 49152);
    assert!(!tok.add_bos());
    assert_eq!((tok.bos(), tok.eos()), (Some(1), Some(2)));
}

#[test]
fn smollm2_token_exact_against_llama_tokenize() {
    let g = golden();
    assert!(g.cases.len() >= 200, "{} golden strings", g.cases.len());
    let tok = smollm2();
    let mut failures = Vec::new();
    for c in &g.cases {
        for (parse_special, want) in [(true, &c.special), (false, &c.no_special)] {
            let got = tok.encode(&c.text, parse_special).unwrap();
            if &got != want {
                failures.push(format!("{:?} (parse_special={parse_special}):\n  llama.cpp {want:?}\n  tern      {got:?}", c.text));
            }
        }
    }
    // Both parse modes must actually be exercised by the golden set.
    assert!(g.cases.iter().filter(|c| c.special != c.no_special).count() >= 10);
    assert!(
        failures.is_empty(),
        "{} of {} encodings differ (model sha256 {}):\n{}",
        failures.len(),
        2 * g.cases.len(),
        g.model_sha256,
        failures.join("\n")
    );
}

#[test]
fn smollm2_decode_round_trips() {
    let tok = smollm2();
    for c in golden().cases {
        for ids in [&c.special, &c.no_special] {
            assert_eq!(tok.decode(ids).unwrap(), c.text, "ids {ids:?}");
            // Token-by-token streaming gives the same text.
            let mut sd = StreamDecoder::new();
            let mut s = String::new();
            for &id in ids.iter() {
                s.push_str(&sd.push(tok, id).unwrap());
            }
            s.push_str(&sd.flush());
            assert_eq!(s, c.text);
        }
    }
}

#[test]
fn stream_decoder_holds_back_split_characters() {
    let tok = smollm2();
    // "👋" is 4 UTF-8 bytes; SmolLM2 spells it with byte tokens that split the character.
    let ids = tok.encode("👋", false).unwrap();
    assert!(ids.len() > 1, "{ids:?}");
    let mut sd = StreamDecoder::new();
    let pieces: Vec<String> = ids.iter().map(|&id| sd.push(tok, id).unwrap()).collect();
    assert!(
        pieces[..pieces.len() - 1].iter().all(String::is_empty),
        "{pieces:?}"
    );
    assert_eq!(pieces.last().unwrap(), "👋");
    // A dangling partial character is flushed as U+FFFD.
    let mut sd = StreamDecoder::new();
    assert_eq!(sd.push(tok, ids[0]).unwrap(), "");
    assert_eq!(sd.flush(), "\u{FFFD}");
}

#[test]
fn special_tokens_and_end_of_generation_match_llama_cpp() {
    let tok = smollm2();
    let chat = chat_golden();
    let v = &chat["vocab"];
    assert_eq!(tok.n_vocab() as u64, v["n_tokens"].as_u64().unwrap());
    assert_eq!(tok.bos().map(i64::from), v["bos"].as_i64());
    assert_eq!(tok.eos().map(i64::from), v["eos"].as_i64());
    assert_eq!(tok.add_bos(), v["add_bos"].as_bool().unwrap());
    let eog: Vec<u32> = serde_json::from_value(v["eog"].clone()).unwrap();
    assert_eq!(tok.eog_ids(), &eog[..], "end-of-generation set");
    for id in 0..tok.n_vocab() as u32 {
        assert_eq!(tok.is_eog(id), eog.contains(&id));
    }
    // llama.cpp's EOT comes from unordered_map iteration order (<|endoftext|> on this build); tern
    // takes the first of llama.cpp's candidates that exists (<|im_end|>). Both are EOG.
    assert!(tok.is_eog(tok.eot().unwrap()));
    assert_eq!(tok.token_text(2).unwrap(), "<|im_end|>");
    assert!(tok.is_control(2));
}

#[test]
fn bad_input_gives_typed_errors() {
    let tok = smollm2();
    match tok.encode_bytes(b"ok \xff\xfe bad", true) {
        Err(TokenizerError::InvalidUtf8 { offset: 3 }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(
        tok.encode_bytes("héllo".as_bytes(), true).unwrap(),
        tok.encode("héllo", true).unwrap()
    );
    match tok.decode(&[19556, 49152]) {
        Err(TokenizerError::UnknownToken {
            id: 49152,
            n_vocab: 49152,
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        tok.token_bytes(u32::MAX),
        Err(TokenizerError::UnknownToken { .. })
    ));
    let mut sd = StreamDecoder::new();
    assert!(sd.push(tok, 1 << 20).is_err());
    // Metadata problems are typed too.
    let mut spec = smollm2_spec().clone();
    spec.pre = Some("no-such-pre".into());
    assert!(matches!(
        Tokenizer::from_spec(&spec),
        Err(TokenizerError::UnsupportedPreTokenizer(_))
    ));
    spec.pre = Some("smollm".into());
    spec.token_types.pop();
    assert!(matches!(
        Tokenizer::from_spec(&spec),
        Err(TokenizerError::InvalidSpec(_))
    ));
}

#[test]
fn add_bos_defaults_follow_llama_cpp() {
    assert!(llama_cpp_default_add_bos(TokenizerKind::Llama, None));
    assert!(llama_cpp_default_add_bos(
        TokenizerKind::Gpt2,
        Some("llama-bpe")
    ));
    assert!(!llama_cpp_default_add_bos(
        TokenizerKind::Gpt2,
        Some("smollm")
    ));
    assert!(!llama_cpp_default_add_bos(
        TokenizerKind::Gpt2,
        Some("gpt-2")
    ));
    // With add_bos/add_eos set, encode adds them like llama_tokenize(add_special = true).
    let mut spec = smollm2_spec().clone();
    spec.add_bos = true;
    spec.add_eos = true;
    let tok = Tokenizer::from_spec(&spec).unwrap();
    assert_eq!(tok.encode("Hello", true).unwrap(), vec![1, 19556, 2]);
    assert_eq!(tok.encode_with("Hello", false, true).unwrap(), vec![19556]);
    assert_eq!(tok.encode("", true).unwrap(), vec![1, 2]);
}

// ---------------------------------------------------------------------------------------------
// Chat templates

fn chat_golden() -> serde_json::Value {
    let path = tern_tests::golden("tokenizer/chat_expected.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn chat_templates_render_like_llama_cpp() {
    let golden = chat_golden();
    let cases = golden["cases"].as_array().unwrap();
    assert!(cases.len() >= 6);
    let tok = smollm2();
    for c in cases {
        let name = c["name"].as_str().unwrap();
        let messages: Vec<ChatMessage> = serde_json::from_value(c["messages"].clone()).unwrap();
        let (template, bos, eos) = match c["template"].as_str().unwrap() {
            // The model's own template, with its BOS/EOS texts as llama.cpp passes them.
            "model" => (
                tok.chat_template()
                    .expect("SmolLM2 ships a chat template")
                    .to_string(),
                tok.token_string(tok.bos().unwrap()).unwrap(),
                tok.token_string(tok.eos().unwrap()).unwrap(),
            ),
            file => (
                std::fs::read_to_string(tern_tests::golden(&format!("tokenizer/{file}"))).unwrap(),
                c["bos"].as_str().unwrap().to_string(),
                c["eos"].as_str().unwrap().to_string(),
            ),
        };
        let opts = ChatOptions {
            add_generation_prompt: c["add_generation_prompt"].as_bool().unwrap(),
            bos_token: bos,
            eos_token: eos,
            now: None,
            extra: c
                .get("kwargs")
                .and_then(|k| k.as_object())
                .cloned()
                .unwrap_or_default(),
        };
        let got =
            render_chat_with(&template, &messages, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, c["jinja"].as_str().unwrap(), "case {name}");
    }
}

#[test]
fn smollm2_chat_prompt_tokenizes_with_special_tokens() {
    let tok = smollm2();
    let msgs = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi"),
        ChatMessage::new("assistant", "Hello!"),
    ];
    let prompt = render_chat(
        tok.chat_template().unwrap(),
        &msgs,
        false,
        "<|im_start|>",
        "<|im_end|>",
    )
    .unwrap();
    assert_eq!(prompt, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n");
    let ids = tok.encode(&prompt, true).unwrap();
    assert_eq!(
        ids.iter().filter(|&&i| i == 1).count(),
        3,
        "<|im_start|> parsed as a token"
    );
    assert_eq!(
        ids.iter().filter(|&&i| i == 2).count(),
        3,
        "<|im_end|> parsed as a token"
    );
    assert_eq!(tok.decode(&ids).unwrap(), prompt);
}

#[test]
fn llama3_template_strftime_and_errors() {
    let t =
        std::fs::read_to_string(tern_tests::golden("tokenizer/llama3.2-instruct.jinja")).unwrap();
    let opts = ChatOptions {
        add_generation_prompt: true,
        bos_token: "<|begin_of_text|>".into(),
        eos_token: "<|eot_id|>".into(),
        // 2024-07-26 12:00:00 UTC
        now: Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_721_995_200)),
        extra: Default::default(),
    };
    let out = render_chat_with(&t, &[ChatMessage::new("user", "Hello")], &opts).unwrap();
    assert!(out.contains("Today Date: 26 Jul 2024\n"), "{out}");
    // Gemma's template rejects a system turn through raise_exception.
    let gemma = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{{ message['content'] }}{% endfor %}";
    let err = render_chat(gemma, &[ChatMessage::new("system", "x")], true, "", "").unwrap_err();
    assert!(
        matches!(err, ChatError::Raised(ref m) if m == "System role not supported"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// SentencePiece (GGUF tokenizer model "llama")

/// A tiny hand-made SPM vocabulary: control tokens, byte fallback, and scored pieces.
fn tiny_spm(add_space_prefix: bool) -> TokenizerSpec {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0, 0.0, 0.0];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (piece, score) in [
        ("▁", -1.0),
        ("h", -2.0),
        ("e", -2.0),
        ("l", -2.0),
        ("o", -2.0),
        ("w", -2.0),
        ("r", -2.0),
        ("d", -2.0),
        ("▁h", -3.0),
        ("▁he", -3.1),
        ("▁hell", -3.3),
        ("▁hello", -3.4),
        ("he", -3.5),
        ("ll", -3.0),
        ("llo", -4.0),
        ("hello", -4.5),
        ("▁w", -3.0),
        ("or", -3.0),
        ("ld", -3.0),
        ("▁wor", -6.0),
        ("▁world", -5.5),
        ("é", -2.0),
        ("a", -2.0),
        ("b", -2.0),
        ("c", -2.0),
        ("ab", -5.0),
        ("bc", -1.0),
    ] {
        tokens.push(piece.into());
        types.push(1);
        scores.push(score);
    }
    TokenizerSpec {
        kind: TokenizerKind::Llama,
        pre: None,
        token_types: types,
        merges: vec![],
        scores,
        bos: Some(1),
        eos: Some(2),
        unk: Some(0),
        pad: None,
        eot: None,
        add_bos: true,
        add_eos: false,
        add_space_prefix,
        chat_template: None,
        tokens,
    }
}

#[test]
fn sentencepiece_tiny_vocab() {
    let spec = tiny_spm(true);
    let tok = Tokenizer::from_spec(&spec).unwrap();
    let id = |s: &str| tok.token_id(s).unwrap();
    // " hello world" → ▁hello ▁world, BOS first.
    assert_eq!(
        tok.encode("hello world", true).unwrap(),
        vec![1, id("▁hello"), id("▁world")]
    );
    // Unknown characters fall back to bytes: "✓" = E2 9C 93.
    assert_eq!(
        tok.encode_with("hello✓", false, false).unwrap(),
        vec![id("▁hello"), id("<0xE2>"), id("<0x9C>"), id("<0x93>")]
    );
    // Merges go through pieces that are in the vocabulary: ▁w + or → ▁wor, + ld → ▁world.
    assert_eq!(
        tok.encode_with("world", false, false).unwrap(),
        vec![id("▁world")]
    );
    assert_eq!(
        tok.encode_with("wor", false, false).unwrap(),
        vec![id("▁wor")]
    );
    // Special tokens split the text; llama.cpp prefixes a space after each one.
    assert_eq!(
        tok.encode_with("hello</s>hello", false, true).unwrap(),
        vec![id("▁hello"), 2, id("▁hello")]
    );
    assert_eq!(
        tok.encode_with("hello</s>", false, false).unwrap()[..1],
        [id("▁hello")],
        "without special parsing </s> is text"
    );
    // Round trips, including bytes and specials.
    for s in [
        "hello world",
        "hello✓ é",
        "  two  spaces ",
        "hello</s>world",
        "",
        "ünïcödé ✓✓",
    ] {
        let ids = tok.encode(s, true).unwrap();
        assert_eq!(
            tok.decode(&ids).unwrap(),
            format!("<s>{s}"),
            "{s:?} -> {ids:?}"
        );
        let ids = tok.encode_with(s, false, true).unwrap();
        assert_eq!(tok.decode(&ids).unwrap(), s, "{s:?} -> {ids:?}");
    }
    assert_eq!(tok.token_bytes(id("<0xE2>")).unwrap(), &[0xE2]);
    assert!(tok.is_eog(2));

    let no_prefix = Tokenizer::from_spec(&tiny_spm(false)).unwrap();
    assert_eq!(
        no_prefix.encode_with("hello", false, false).unwrap(),
        vec![id("hello")]
    );
    // The highest score wins, not the leftmost pair: "bc" (-1) beats "ab" (-5).
    assert_eq!(
        no_prefix.encode_with("abc", false, false).unwrap(),
        vec![id("a"), id("bc")]
    );
}

#[test]
fn sentencepiece_with_dummy_vocab_never_fails() {
    // BitNet-2B4T-shaped synthetic models carry tokenizer model "llama" with placeholder tokens and
    // no byte tokens: text must still tokenize (unrepresentable bytes → <unk>) and decode.
    let n = 1000;
    let spec = TokenizerSpec {
        kind: TokenizerKind::Llama,
        pre: None,
        tokens: (0..n).map(|i| format!("<dummy{i:04}>")).collect(),
        token_types: vec![1; n],
        merges: vec![],
        scores: vec![0.0; n],
        bos: Some(1),
        eos: Some(2),
        unk: Some(0),
        pad: None,
        eot: None,
        add_bos: true,
        add_eos: false,
        add_space_prefix: true,
        chat_template: None,
    };
    let tok = Tokenizer::from_spec(&spec).unwrap();
    let ids = tok.encode("Hello, wörld! 👋", true).unwrap();
    assert_eq!(ids[0], 1);
    assert!(ids[1..].iter().all(|&i| i == 0), "{ids:?}");
    assert!(tok.decode(&ids).is_ok());
}
