// Renders chat templates with llama.cpp's own Jinja engine (common_chat_templates_apply, the path of
// llama-cli/llama-server with --jinja) and with the legacy llama_chat_apply_template, and dumps the
// model's special-token roles (BOS/EOS/EOT and the end-of-generation set) as llama.cpp loads them.
// Built and run by make_chat_golden.sh. Usage: chat_golden MODEL.gguf CASES.json > OUT.json
#include "chat.h"
#include "llama.h"
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

using json = nlohmann::ordered_json;

static std::string read_file(const std::string & p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

int main(int argc, char ** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf CASES.json\n", argv[0]);
        return 1;
    }
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "cannot load model\n"); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);

    json out;
    json eog = json::array();
    for (int i = 0; i < llama_vocab_n_tokens(vocab); i++) {
        if (llama_vocab_is_eog(vocab, i)) eog.push_back(i);
    }
    out["vocab"] = {{"n_tokens", llama_vocab_n_tokens(vocab)}, {"bos", llama_vocab_bos(vocab)}, {"eos", llama_vocab_eos(vocab)},
                    {"eot", llama_vocab_eot(vocab)}, {"add_bos", llama_vocab_get_add_bos(vocab)}, {"eog", eog}};

    json cases = json::parse(read_file(argv[2]));
    const std::string dir = std::string(argv[2]).substr(0, std::string(argv[2]).find_last_of('/') + 1);
    json results = json::array();
    for (auto & c : cases) {
        std::string src = c["template"] == "model" ? "" : read_file(dir + c["template"].get<std::string>());
        // With a model, llama.cpp takes bos_token/eos_token from its vocabulary; a template given as a
        // file is rendered without one so that the case's bos/eos strings are used.
        auto tmpls = common_chat_templates_init(src.empty() ? model : nullptr, src, c.value("bos", ""), c.value("eos", ""));
        common_chat_templates_inputs in;
        in.use_jinja = true;
        in.add_generation_prompt = c["add_generation_prompt"];
        if (c.contains("kwargs")) {
            for (auto & kv : c["kwargs"].items()) in.chat_template_kwargs[kv.key()] = kv.value().dump();
        }
        std::vector<llama_chat_message> legacy;
        for (auto & m : c["messages"]) {
            common_chat_msg msg;
            msg.role = m["role"];
            msg.content = m["content"];
            in.messages.push_back(msg);
        }
        for (auto & m : in.messages) legacy.push_back({m.role.c_str(), m.content.c_str()});
        json r = c;
        try {
            r["jinja"] = common_chat_templates_apply(tmpls.get(), in).prompt;
        } catch (const std::exception & e) {
            r["jinja_error"] = e.what();
        }
        std::string tsrc = src.empty() ? common_chat_templates_source(tmpls.get()) : src;
        std::vector<char> buf(1 << 16);
        int n = llama_chat_apply_template(tsrc.c_str(), legacy.data(), legacy.size(), in.add_generation_prompt, buf.data(), buf.size());
        if (n >= 0 && n <= (int) buf.size()) r["legacy"] = std::string(buf.data(), n);
        results.push_back(r);
    }
    out["cases"] = results;
    std::cout << out.dump(1) << std::endl;
    llama_model_free(model);
    return 0;
}
