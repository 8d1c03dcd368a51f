// llama.cpp's logits for a token sequence (one batch, all positions), CPU backend, default context
// settings (flash attention auto, f16 KV cache), written as raw little-endian f32 [n][n_vocab].
//   logits MODEL.gguf OUT.f32 TOKEN...
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char ** argv) {
    if (argc < 4) { fprintf(stderr, "usage: logits MODEL OUT TOKEN...\n"); return 2; }
    llama_log_set([](enum ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) return 1;
    auto cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    llama_context * ctx = llama_init_from_model(model, cp);
    std::vector<llama_token> toks;
    for (int i = 3; i < argc; i++) toks.push_back(atoi(argv[i]));
    llama_batch b = llama_batch_init(toks.size(), 0, 1);
    for (size_t i = 0; i < toks.size(); i++) {
        b.token[i] = toks[i]; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1;
    }
    b.n_tokens = toks.size();
    if (llama_decode(ctx, b)) return 1;
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE * f = fopen(argv[2], "wb");
    for (size_t i = 0; i < toks.size(); i++) fwrite(llama_get_logits_ith(ctx, i), 4, n_vocab, f);
    fclose(f);
    return 0;
}
