// Greedy decoding with llama.cpp's own library (the CPU backend, default context settings:
// flash attention auto, f16 KV cache): the prompt in one batch, then one token per decode, argmax
// of the logits each step (what `llama-completion --temp 0` samples). Prints the token ids.
//   greedy MODEL.gguf N_PREDICT PROMPT
// Build: see make_greedy.py (links the vendored build's static libllama / libggml).
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char ** argv) {
    if (argc < 4) { fprintf(stderr, "usage: greedy MODEL N PROMPT\n"); return 2; }
    llama_log_set([](enum ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) return 1;
    const int n_predict = atoi(argv[2]);
    auto cp = llama_context_default_params();
    cp.n_ctx = 4096;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    llama_context * ctx = llama_init_from_model(model, cp);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const char * text = argv[3];
    std::vector<llama_token> toks(strlen(text) + 16);
    int n = llama_tokenize(vocab, text, strlen(text), toks.data(), toks.size(), true, true);
    if (n < 0) return 1;
    toks.resize(n);
    printf("prompt");
    for (auto t : toks) printf(" %d", t);
    printf("\ngen");
    llama_batch b = llama_batch_get_one(toks.data(), toks.size());
    const int n_vocab = llama_vocab_n_tokens(vocab);
    for (int i = 0; i < n_predict; i++) {
        if (llama_decode(ctx, b)) return 1;
        const float * logits = llama_get_logits_ith(ctx, -1);
        llama_token best = 0;
        for (int v = 1; v < n_vocab; v++) if (logits[v] > logits[best]) best = v;
        printf(" %d", best);
        static llama_token next;
        next = best;
        b = llama_batch_get_one(&next, 1);
    }
    printf("\n");
    return 0;
}
