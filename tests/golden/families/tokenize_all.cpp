// llama_tokenize on many strings with one model load (what llama-tokenize does per string:
// add_special = true, i.e. the model's add_bos; parse_special as given). Input: a file of
// u32-length-prefixed UTF-8 strings; output: one line of ids per string and mode
// ("S ids..." with special parsing, "N ids..." without).
//   tokenize_all MODEL.gguf STRINGS.bin
// Build: see make_gemma_tokenizer_golden.py (links the vendored build's static libllama / libggml).
#include "llama.h"
#include <cstdio>
#include <cstdint>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    if (argc < 3) { fprintf(stderr, "usage: tokenize_all MODEL STRINGS.bin\n"); return 2; }
    llama_log_set([](enum ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    const llama_vocab * vocab = llama_model_get_vocab(model);
    FILE * f = fopen(argv[2], "rb");
    if (!f) return 1;
    uint32_t len;
    while (fread(&len, 4, 1, f) == 1) {
        std::string s(len, '\0');
        if (len && fread(&s[0], 1, len, f) != len) return 1;
        for (int special = 1; special >= 0; special--) {
            std::vector<llama_token> toks(s.size() + 16);
            int n = llama_tokenize(vocab, s.data(), s.size(), toks.data(), toks.size(), true, special);
            if (n < 0) return 1;
            printf("%c", special ? 'S' : 'N');
            for (int i = 0; i < n; i++) printf(" %d", toks[i]);
            printf("\n");
        }
    }
    return 0;
}
