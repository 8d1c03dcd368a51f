/*
 * tern quick start in C: the whole flow an app goes through, using only tern.h.
 * Compiled and run under ASan/LSan/UBSan by tests/c/run.sh (and shown in docs/app-developers.md).
 *
 *   quickstart MODEL.tern [STATE_FILE]
 *
 * log callback -> plan -> load (TERN_DEVICE_AUTO, progress) -> metadata -> tokenize/detokenize
 * -> chat with the app's own template and stop strings -> save the session -> free it -> restore
 * into a new session -> continue (same greedy tokens as the saved session would give) -> cancel.
 * Exits non-zero on any failure.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern.h"

#define TRY(call)                                                                         \
  do {                                                                                    \
    tern_status st_ = (call);                                                             \
    if (st_ != TERN_OK) {                                                                 \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,            \
              tern_status_name(st_), tern_last_error());                                  \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)
#define REQUIRE(cond)                                                                     \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "%s:%d: %s is false\n", __FILE__, __LINE__, #cond);                 \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

/* ---- callbacks ---- */

static atomic_int log_lines;

/* Called on whichever thread logs: keep it thread-safe (here: an atomic counter and stderr). */
static void on_log(int32_t level, const char *target, const char *message, void *user_data) {
  (void)user_data;
  atomic_fetch_add(&log_lines, 1);
  fprintf(stderr, "[tern %d %s] %s\n", level, target, message);
}

static void on_progress(float fraction, const char *stage, void *user_data) {
  (void)user_data;
  printf("loading: %3.0f%% (%s)\n", fraction * 100.0f, stage);
}

typedef struct {
  char text[4096];
  size_t len;
  int pieces;
  tern_session *cancel_after_3; /* cancel this session after 3 pieces */
} collected;

static int32_t on_piece(const char *piece, size_t len, void *user_data) {
  collected *c = user_data;
  if (c->len + len < sizeof c->text) {
    memcpy(c->text + c->len, piece, len);
    c->len += len;
    c->text[c->len] = '\0';
  }
  if (++c->pieces == 3 && c->cancel_after_3) tern_cancel(c->cancel_after_3); /* any thread */
  return 0; /* 0: go on */
}

static void generate(tern_session *s, const char *prompt, const char *const *stops, size_t n_stops,
                     int max_tokens, collected *out) {
  memset(out, 0, sizeof *out);
  tern_generate_options go = tern_generate_options_default();
  go.max_tokens = max_tokens;
  go.stop_strings = stops;
  go.n_stop_strings = n_stops;
  TRY(tern_generate_ex(s, prompt, NULL /* greedy */, &go, on_piece, out));
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.tern [STATE_FILE]\n", argv[0]);
    return 2;
  }
  const char *model_path = argv[1];
  const char *state_file = argc > 2 ? argv[2] : "quickstart.tstate";
  REQUIRE(tern_abi_version() == TERN_ABI_VERSION);

  /* 1. Logs: tern's records (load, device, fallbacks) reach the app. */
  TRY(tern_set_log_callback(on_log, TERN_LOG_INFO, NULL));

  /* 2. Plan: how much memory the model and a context take, before loading (nothing is loaded:
   * only the file's tensor table is read). A 512 MiB budget and a 512-token context. */
  tern_model_options po = tern_model_options_default();
  po.max_memory = 512ull << 20;
  tern_plan plan;
  memset(&plan, 0, sizeof plan);
  plan.struct_size = sizeof plan;
  TRY(tern_model_plan(model_path, &po, 512, &plan));
  printf("plan (%s): weights %llu B, scratch %llu B; %u KV formats; chosen KV %u for %llu tokens\n",
         plan.device == TERN_DEVICE_GPU ? "GPU" : "CPU", (unsigned long long)plan.weights_bytes,
         (unsigned long long)plan.scratch_bytes, plan.n_configs, plan.chosen_kv_format,
         (unsigned long long)plan.chosen_context);
  REQUIRE(plan.chosen_kv_format != TERN_PLAN_NONE && plan.chosen_context == 512);
  REQUIRE(plan.weights_bytes > 0 && plan.weights_bytes < po.max_memory);

  /* 3. Load with TERN_DEVICE_AUTO: the hardware GPU when there is one, else the CPU. */
  tern_model_options mo = tern_model_options_default(); /* device = TERN_DEVICE_AUTO */
  tern_load_options lo = tern_load_options_default();
  lo.progress = on_progress;
  tern_model *model = NULL;
  TRY(tern_model_load_ex(model_path, &mo, &lo, &model));

  /* 4. Metadata. */
  tern_model_info info = {0};
  info.struct_size = sizeof info;
  TRY(tern_model_get_info(model, &info));
  char *name = NULL, *arch = NULL, *device = NULL;
  TRY(tern_model_get_string(model, TERN_MODEL_STR_NAME, &name));
  TRY(tern_model_get_string(model, TERN_MODEL_STR_ARCHITECTURE, &arch));
  TRY(tern_model_get_string(model, TERN_MODEL_STR_DEVICE, &device));
  printf("model %s (%s): vocabulary %u, trained on %u tokens, chat template: %s\n", name, arch,
         info.n_vocab, info.n_ctx_train, info.has_chat_template ? "yes" : "no");
  printf("device: %s (%s)\n", info.device == TERN_DEVICE_GPU ? "GPU" : "CPU", device);
  const char *require_gpu = getenv("TERN_REQUIRE_GPU");
  if (require_gpu && strcmp(require_gpu, "1") == 0) REQUIRE(info.device == TERN_DEVICE_GPU);
  tern_string_free(name);
  tern_string_free(arch);
  tern_string_free(device);
  REQUIRE(atomic_load(&log_lines) > 0); /* the load was logged */

  /* 5. Tokenize and back. */
  const char *text = "Tern runs small language models on phones.";
  uint32_t *ids = NULL;
  size_t n_ids = 0;
  TRY(tern_tokenize(model, text, 0 /* add BOS/EOS */, 0 /* parse specials */, &ids, &n_ids));
  char *back = NULL;
  TRY(tern_detokenize(model, ids, n_ids, &back));
  printf("%zu tokens, round trip %s\n", n_ids, strcmp(back, text) == 0 ? "exact" : "DIFFERS");
  REQUIRE(strcmp(back, text) == 0);
  tern_string_free(back);
  tern_tokens_free(ids, n_ids);

  /* 6. Chat with the app's own template and stop strings. */
  const char *my_template =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  tern_chat_message chat[2] = {{"system", "You are a concise assistant."},
                               {"user", "Name three colours."}};
  char *prompt = NULL;
  TRY(tern_chat_apply_template(model, my_template, chat, 2, 1, &prompt));
  tern_session_options so = tern_session_options_default();
  so.n_ctx = 512;
  tern_session *session = NULL;
  TRY(tern_session_new(model, &so, &session));
  const char *stops[] = {"\n\n", "<|im_end|>"};
  collected first;
  generate(session, prompt, stops, 2, 24, &first);
  printf("assistant: %s\n", first.text);

  /* 7. Save the session (KV cache + tokens), then free it. First note what it would say next. */
  TRY(tern_session_save_file(session, state_file));
  char prompt2[8192];
  snprintf(prompt2, sizeof prompt2, "%s%s<|im_end|>\n<|im_start|>user\nAnd three animals?<|im_end|>\n<|im_start|>assistant\n",
           prompt, first.text);
  collected expected;
  generate(session, prompt2, stops, 2, 24, &expected);
  tern_session_free(session);

  /* 8. Restore into a new session and continue: the same greedy tokens, from the saved cache. */
  tern_session *restored = NULL;
  TRY(tern_session_new(model, &so, &restored));
  TRY(tern_session_restore_file(restored, state_file));
  collected again;
  generate(restored, prompt2, stops, 2, 24, &again);
  tern_generation_stats stats = {0};
  stats.struct_size = sizeof stats;
  TRY(tern_session_last_stats(restored, &stats));
  printf("after restore: %s (%u of %u prompt tokens from the saved cache)\n", again.text,
         stats.reused_tokens, stats.prompt_tokens);
  REQUIRE(strcmp(again.text, expected.text) == 0);
  REQUIRE(stats.reused_tokens > 0);
  remove(state_file);

  /* 9. Cancel: tern_cancel (from any thread; here from the piece callback) stops generation. */
  collected cancelled;
  memset(&cancelled, 0, sizeof cancelled);
  cancelled.cancel_after_3 = restored;
  tern_status st = tern_generate(restored, "Count from one to a hundred:", NULL, 200, on_piece,
                                 &cancelled);
  printf("cancel: %s after %d pieces\n", tern_status_name(st), cancelled.pieces);
  REQUIRE(st == TERN_CANCELLED && cancelled.pieces == 3);

  tern_string_free(prompt);
  tern_session_free(restored);
  tern_model_free(model);
  TRY(tern_set_log_callback(NULL, TERN_LOG_OFF, NULL));
  REQUIRE(tern_debug_live_handles() == 0);
  printf("quickstart: all steps passed (%d log lines)\n", atomic_load(&log_lines));
  return 0;
}
