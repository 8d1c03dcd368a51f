//! `tern chat` in a real terminal (a pseudo-terminal driven by rexpect, as a person types): a
//! question answered with the default sampling (not a repeated-token loop), `/help` and an
//! unknown command, Ctrl-C in the middle of a reply (the reply stops, the chat goes on), `/reset`,
//! a conversation that outgrows a tiny context (the oldest turns are dropped, the chat goes on),
//! `/quit`. CPU device, SmolLM2-135M-Instruct from the cache (`tern fetch-default`).

use std::path::PathBuf;
use std::process::Command;

use rexpect::session::PtySession;

fn model() -> Option<PathBuf> {
    let p = tern_import::fetch::cache_dir().join("SmolLM2-135M-Instruct.tern");
    p.is_file().then_some(p)
}

/// The tests crate's rule: a missing model fails under CI=true and skips elsewhere.
fn skip(why: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}");
    }
    eprintln!("skipped: {why}");
}

/// Text without terminal escape sequences (the line editor's cursor moves and colours).
fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\x1b' {
            if it.peek() == Some(&'[') {
                it.next();
                for d in it.by_ref() {
                    if d.is_ascii_alphabetic() || d == '~' {
                        break;
                    }
                }
            }
            continue;
        }
        if c != '\r' {
            out.push(c);
        }
    }
    out
}

/// The fraction of 4-grams that repeat an earlier one.
fn repeated_4grams(ids: &[u32]) -> f64 {
    let grams: Vec<&[u32]> = ids.windows(4).collect();
    if grams.is_empty() {
        return 0.0;
    }
    let distinct: std::collections::HashSet<&[u32]> = grams.iter().copied().collect();
    1.0 - distinct.len() as f64 / grams.len() as f64
}

/// Wait for the prompt; the line editor asks the terminal for the cursor position first (and
/// waits up to 100 ms for an answer that a bare pty never gives), so type after that.
fn prompt(p: &mut PtySession) {
    p.exp_string("> ").expect("the prompt");
    std::thread::sleep(std::time::Duration::from_millis(300));
}

#[test]
fn chat_in_a_terminal() {
    let Some(m) = model() else {
        skip("the default model is not in the cache (run `tern fetch-default`)");
        return;
    };
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tern"));
    cmd.args(["chat", m.to_str().unwrap_or_default(), "--device", "cpu"])
        .args(["-c", "320", "-n", "128"])
        .env("TERM", "xterm-256color");
    let mut p = rexpect::session::spawn_command(cmd, Some(300_000)).expect("spawn tern chat");
    p.exp_string("chatting with").expect("the banner");
    let banner = p.exp_string("flags over").expect("the sampling line");
    assert!(
        banner.contains("temp 0.8, top-k 40, top-p 0.95, min-p 0.05"),
        "llama.cpp's defaults: {banner}"
    );

    // /help, and an unknown command is not sent to the model.
    prompt(&mut p);
    p.send_line("/help").expect("send");
    p.exp_string("forget the conversation")
        .expect("the help text");
    prompt(&mut p);
    p.send_line("/frobnicate").expect("send");
    p.exp_string("unknown command /frobnicate")
        .expect("the unknown command message");

    // A question, answered with the default sampling: not a loop.
    let question = "Give me three tips for learning to cook.";
    prompt(&mut p);
    p.send_line(question).expect("send");
    let (before, speed) = p
        .exp_regex(r"\[\d+ tokens at [0-9.]+ t/s")
        .expect("the reply and its speed line");
    assert!(speed.contains("t/s"), "{speed}");
    let text = strip_ansi(&before);
    let reply = text
        .rsplit_once(question)
        .map(|(_, r)| r.trim().to_string())
        .unwrap_or(text.clone());
    let model = tern_engine::Model::open(&m).expect("open the model");
    let ids = model.tokenize(&reply, false).expect("tokenize the reply");
    let first: Vec<u32> = ids.iter().copied().take(128).collect();
    let rep = repeated_4grams(&first);
    eprintln!(
        "reply ({} tokens, {:.1}% repeated 4-grams):\n{reply}",
        ids.len(),
        100.0 * rep
    );
    assert!(first.len() >= 32, "a real answer: {reply:?}");
    assert!(
        rep < 0.30,
        "{:.1}% repeated 4-grams: {reply:?}",
        100.0 * rep
    );

    // Ctrl-C in the middle of a reply stops it; the session goes on.
    prompt(&mut p);
    p.send_line("Write a long story about a dragon who learns to cook.")
        .expect("send");
    // Past the line editor's echo of the message, some of the reply is out (the story starts
    // streaming), then Ctrl-C.
    p.exp_string("learns to cook.")
        .expect("the echo of the message");
    p.exp_regex(r"[A-Za-z]{3,}[ ,.][A-Za-z]{2,}")
        .expect("the reply starts");
    p.send_control('c').expect("Ctrl-C");
    p.exp_string("reply stopped (Ctrl-C)")
        .expect("the reply stops, the chat stays");
    prompt(&mut p);
    p.send_line("What did you write about?").expect("send");
    p.exp_regex(r"\[\d+ tokens at")
        .expect("a reply after Ctrl-C");

    // /reset confirms.
    prompt(&mut p);
    p.send_line("/reset").expect("send");
    p.exp_string("conversation cleared")
        .expect("/reset confirms");

    // A conversation longer than the context: the oldest turns go, the chat goes on.
    let mut dropped = false;
    for q in [
        "Tell me about the history of bread in a few paragraphs.",
        "Now tell me about the history of cheese.",
        "And the history of wine?",
        "And of olive oil?",
    ] {
        prompt(&mut p);
        p.send_line(q).expect("send");
        let (before, _) = p
            .exp_regex(r"\[\d+ tokens at")
            .expect("a reply in a full context");
        if before.contains("dropped the oldest") {
            dropped = true;
            break;
        }
    }
    assert!(dropped, "the context of 320 tokens never filled");

    // /quit ends it with status 0.
    prompt(&mut p);
    p.send_line("/quit").expect("send");
    p.exp_eof().expect("the end");
    match p.process().wait() {
        Ok(rexpect::process::WaitStatus::Exited(_, code)) => assert_eq!(code, 0),
        other => panic!("tern chat ended as {other:?}"),
    }
}

#[test]
fn repeated_4grams_counts_loops() {
    assert_eq!(repeated_4grams(&[1, 2, 3, 4, 5, 6]), 0.0);
    let lp = [7u32; 20];
    assert!(repeated_4grams(&lp) > 0.9);
}
