#!/usr/bin/env python3
"""Golden token ids from llama.cpp's tokenizer for the Gemma 3 270M GGUF: the 271 strings of
tests/golden/tokenizer/strings.json plus Gemma-specific ones made here (its special tokens, whitespace
runs, many scripts), each tokenized with special-token parsing and without, add_special = true (what
`llama-tokenize -f FILE --no-escape [--no-parse-special]` returns), by tokenize_all.cpp (libllama
`llama_tokenize`, one vocab-only load for all strings; the bytes arrive unchanged).

Usage: python3 make_gemma_tokenizer_golden.py [GEMMA.gguf]
Defaults: ~/.cache/tern/gemma3-270m/gemma-3-270m-q4_k_m.gguf (`tern fetch gemma3-270m`);
LLAMA_SRC: the llama.cpp tree with build/. Writes gemma_tokenizer.json here.
"""
import hashlib, json, os, subprocess, sys, tempfile

here = os.path.dirname(os.path.abspath(__file__))
model = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser(
    "~/.cache/tern/gemma3-270m/gemma-3-270m-q4_k_m.gguf")
LLAMA = os.environ.get("LLAMA_SRC", "/work/llama/src/llama_cpp_python-0.3.36/vendor/llama.cpp")

strings = json.load(open(os.path.join(here, "..", "tokenizer", "strings.json"), encoding="utf-8"))
extra = []
add = extra.append
# Gemma's control and turn tokens, alone, glued and spaced
for t in ["<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>",
          "[multimodal]", "<start_of_image>", "<end_of_image>"]:
    add(t); add("x" + t + "y"); add(" " + t + " "); add(t + t); add(t + "\n")
add("<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n")
add("<bos><start_of_turn>user\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\nWaves")
add("<start_of_turn>system\nYou are terse.<end_of_turn>")
# whitespace runs (Gemma has tokens for runs of spaces, tabs and newlines)
for n in [1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 64]:
    add(" " * n); add("a" + " " * n + "b"); add("\t" * (n % 9 + 1) + "x"); add("\n" * (n % 12 + 1))
    add(" " * n + "\n" + " " * n + "def f():")
add(" \t \n \r\n  \u00a0 \u3000 x"); add("\r\n\r\n"); add("line1\r\nline2\rline3\n")
# scripts and languages
langs = [
    "Die Würde des Menschen ist unantastbar.", "L'été dernier, nous sommes allés à la plage.",
    "¿Dónde está la biblioteca? ¡Aquí!", "Съешь же ещё этих мягких французских булок.",
    "Γαζέες καὶ μυρτιὲς δὲν θὰ βρῶ πιὰ στὸ χρυσαφὶ ξέφωτο.", "שלום עולם, מה שלומך?",
    "مرحبا بالعالم، كيف حالك اليوم؟", "नमस्ते दुनिया, आप कैसे हैं?", "স্বাগতম বাংলা ভাষায়",
    "வணக்கம் உலகம்", "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง", "ສະບາຍດີ", "မင်္ဂလာပါ",
    "こんにちは世界、今日はいい天気ですね。", "カタカナとひらがなと漢字", "你好，世界！今天天气很好。",
    "繁體中文與简体中文", "안녕하세요 세계, 한국어 문장입니다.", "Xin chào thế giới, tiếng Việt có dấu.",
    "Merhaba dünya, İstanbul'da ılık bir gün.", "Witaj świecie, zażółć gęślą jaźń.",
    "Ahoj světe, příliš žluťoučký kůň.", "Helló világ, árvíztűrő tükörfúrógép.",
    "Բարեւ աշխարհ", "გამარჯობა მსოფლიო", "ሰላም ለዓለም", "Sawubona mhlaba", "Habari dunia",
    "Kia ora te ao", "Olá mundo, ação e coração.", "Hej världen, smörgåsbord.", "Hallo wereld",
    "Привіт, світе! Ґанок і їжак.", "Здравей свят", "Сайн уу", "ᐊᐃᓐᖓᐃ", "ꦲꦤꦕꦫꦏ",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 ∀x∈ℝ: x²≥0 ∑ᵢ αᵢ", "emoji 😀😃😄😁 👩‍👩‍👧‍👦 🇫🇷🇯🇵 🏳️‍🌈 ✊🏿",
    "ZWJ a\u200db\u200cc\u200bd\ufeffe", "combining e\u0301 a\u0308 n\u0303 vs é ä ñ",
    "fullwidth ＡＢＣ１２３！", "arrows → ← ↑ ↓ ⇒ ∞ ≠ ≤ ≥ ± × ÷", "box ┌─┐│└┘ ░▒▓█",
    "math: ∫₀^∞ e^{-x²} dx = √π/2", "currency: $5 €10 £3 ¥100 ₹50 ₿0.1",
]
for s in langs:
    add(s); add(" " + s); add(s.upper()); add(s + "\n" + s)
# code and numbers
code = [
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
    "fn main() { println!(\"{}\", 1_000_000u64.pow(2)); }",
    "x = 3.14159265358979; y = 2.71828; z = 1e-12", "1234567890 12345678901234567890",
    "phone: +1 (555) 123-4567, date: 2026-11-27T22:30:00Z", "IPv6 2001:0db8:85a3::8a2e:0370:7334",
    "https://example.com/path?query=1&b=two#frag", "user@example.com", "C:\\Windows\\System32",
    "$ tern run gemma3-270m -p 'Hello'", "a+b=c; a-b=d; a*b=e; a/b=f; a%b=g; a^b", "!!!???...,,,;;;:::",
]
for s in code:
    add(s); add(" " + s)
for n in range(0, 1000, 37):
    add(str(n) + " " + str(n * 1001) + "." + str(n % 7))
cases_text = strings + extra


with tempfile.TemporaryDirectory() as d:
    b = f"{LLAMA}/build"
    libs = [subprocess.run(["find", b, "-name", n], capture_output=True, text=True).stdout.split()[0]
            for n in ["libllama.a", "libggml.a", "libggml-cpu.a", "libggml-base.a"]]
    exe = os.path.join(d, "tokenize_all")
    subprocess.run(["g++", "-O2", "-std=c++17", "-o", exe, os.path.join(here, "tokenize_all.cpp"),
                    f"-I{LLAMA}/include", f"-I{LLAMA}/ggml/include", *libs, "-fopenmp", "-lpthread",
                    "-ldl"], check=True)
    inp = os.path.join(d, "strings.bin")
    with open(inp, "wb") as f:
        for s in cases_text:
            b8 = s.encode("utf-8")
            f.write(len(b8).to_bytes(4, "little") + b8)
    out = subprocess.run([exe, model, inp], check=True, capture_output=True, text=True).stdout.splitlines()
assert len(out) == 2 * len(cases_text), (len(out), len(cases_text))
ids = lambda line: [int(x) for x in line.split()[1:]]
cases = [{"text": s, "special": ids(out[2 * i]), "no_special": ids(out[2 * i + 1])}
         for i, s in enumerate(cases_text)]
commit = subprocess.run(["git", "-C", LLAMA, "rev-parse", "--short", "HEAD"], capture_output=True,
                        text=True).stdout.strip() or "0c1e570 (llama_cpp_python 0.3.36 sdist)"
sha = hashlib.sha256(open(model, "rb").read()).hexdigest()
lines = [json.dumps(c, ensure_ascii=False) for c in cases]
head = json.dumps({"model": os.path.basename(model), "model_sha256": sha,
                   "tool": "tokenize_all.cpp: libllama llama_tokenize, vendored llama.cpp " + commit})
with open(os.path.join(here, "gemma_tokenizer.json"), "w", encoding="utf-8") as f:
    f.write(head[:-1] + ', "cases": [\n' + ",\n".join(lines) + "\n]}\n")
print(len(cases), "cases")
