/* Issue 12: hostile model files through the C ABI. Each file in DIR (the committed seeds of the
 * `model_load` fuzz target, fuzz/regressions/model_load/: tiny models whose metadata lies about
 * the layer count, widths, vocabulary, head counts, RoPE or context) goes through
 * tern_model_load + tern_session_new (n_ctx 0 = default context) on the default device (no
 * generation: the seeds have no tokenizer). A lie must be TERN_CORRUPT_FILE with a message naming
 * the problem; a file whose only oddity is a huge training context loads and gets a session with
 * the capped default context. Run
 * under ASan/LSan by tests/c/run.sh: a crash or a leak fails it, and the process must reach the
 * end and return 0.
 *
 *   test_hostile DIR
 *
 * Issue 29 adds two modes:
 *   test_hostile --templates DIR   every DIR/<name>.tern (tests/hostile/templates: a tiny model whose
 *                                  chat template sizes an output from a huge argument, doubles a
 *                                  string, builds a list quadratically, ...) through
 *                                  tern_chat_apply: TERN_TEMPLATE naming the limit, quickly, no
 *                                  abort (the host process survives).
 *   test_hostile --kv MODEL        tern_session_new with an n_ctx whose KV cache is twice the
 *                                  machine's MemAvailable: TERN_OUT_OF_MEMORY before any page is
 *                                  touched (no OOM kill of the host).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tern.h"

static int passed, failed;

/* Files that are valid apart from a number the runtime must not trust blindly. */
static int must_load(const char *name) {
  return strcmp(name, "valid.tern") == 0 || strcmp(name, "n_ctx_train_max.tern") == 0;
}

/* A word the error message must contain for each lie (the file names say which lie). */
static const char *expected_word(const char *name) {
  if (strncmp(name, "n_layer", 7) == 0) return "n_layer";
  if (strncmp(name, "n_vocab", 7) == 0) return "n_vocab";
  if (strncmp(name, "n_embd", 6) == 0) return "n_embd";
  if (strncmp(name, "n_ff", 4) == 0) return "n_ff";
  if (strncmp(name, "rope", 4) == 0) return "rope";
  if (strncmp(name, "n_head", 6) == 0 || strncmp(name, "head_dim", 8) == 0) return "head";
  return "";
}

static void check_file(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  tern_model *m = NULL;
  enum tern_status st = tern_model_load(path, NULL, &m);
  if (must_load(name)) {
    tern_session *s = NULL;
    tern_session_options so = tern_session_options_default();
    enum tern_status ss = st == TERN_OK ? tern_session_new(m, &so, &s) : st;
    /* The seeds carry no tokenizer, so nothing can be generated through the C ABI; the Rust test
       (tests/tests/hostile_hparams.rs) runs an eval on them. */
    enum tern_status gs = ss;
    if (gs == TERN_OK) {
      passed++;
    } else {
      failed++;
      fprintf(stderr, "FAIL %s: expected to run, got %s: %s\n", name, tern_status_name(gs),
              tern_last_error());
    }
    tern_session_free(s);
    tern_model_free(m);
    return;
  }
  const char *msg = tern_last_error();
  const char *word = expected_word(name);
  if (st == TERN_CORRUPT_FILE && m == NULL && strstr(msg, word) != NULL) {
    passed++;
    printf("  %-24s %s: %s\n", name, tern_status_name(st), msg);
  } else {
    failed++;
    fprintf(stderr, "FAIL %s: expected TERN_CORRUPT_FILE naming '%s', got %s: %s\n", name, word,
            tern_status_name(st), msg);
    tern_model_free(m);
  }
}

static int check_templates(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    perror(dir);
    return 2;
  }
  struct dirent *e;
  int seen = 0;
  tern_model_options mo = tern_model_options_default();
  mo.device = TERN_DEVICE_CPU;
  tern_chat_message msgs[2] = {{"user", "Hello"}, {"assistant", "Hi"}};
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 5, ".tern") != 0) continue;
    seen++;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    tern_model *m = NULL;
    enum tern_status st = tern_model_load(path, &mo, &m);
    if (st != TERN_OK) {
      failed++;
      fprintf(stderr, "FAIL %s: load: %s: %s\n", e->d_name, tern_status_name(st), tern_last_error());
      continue;
    }
    char *out = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    st = tern_chat_apply(m, msgs, 2, 1, &out);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    const char *msg = tern_last_error();
    if (st == TERN_TEMPLATE && out == NULL && strstr(msg, "limit") != NULL && secs < 20.0) {
      passed++;
      printf("  %-24s %s in %.2fs: %s\n", e->d_name, tern_status_name(st), secs, msg);
    } else {
      failed++;
      fprintf(stderr, "FAIL %s: expected TERN_TEMPLATE naming a limit, got %s in %.2fs: %s\n",
              e->d_name, tern_status_name(st), secs, msg);
    }
    tern_string_free(out);
    tern_model_free(m);
  }
  closedir(d);
  if (seen < 5) {
    fprintf(stderr, "FAIL: only %d hostile templates in %s\n", seen, dir);
    failed++;
  }
  printf("%d passed, %d failed (hostile chat templates through tern_chat_apply)\n", passed, failed);
  return failed ? 1 : 0;
}

/* MemAvailable in bytes, 0 when /proc/meminfo does not say. */
static unsigned long long mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  }
  fclose(f);
  return kb * 1024ULL;
}

static int check_kv(const char *model) {
  unsigned long long avail = mem_available();
  if (avail == 0) {
    printf("no MemAvailable here: KV overcommit check skipped\n");
    return 0;
  }
  /* n_ctx_train_max.tern: 2 layers, 1 KV head of 8 dims, f32 K and V: 128 bytes per position. */
  unsigned long long want = 2ULL * avail / 128ULL;
  uint32_t n_ctx = want > 4294967294ULL ? 4294967294U : (uint32_t)want;
  if ((unsigned long long)n_ctx * 128ULL <= avail) {
    printf("this machine has more memory than a u32 context can ask for: skipped\n");
    return 0;
  }
  tern_model_options mo = tern_model_options_default();
  mo.device = TERN_DEVICE_CPU;
  tern_model *m = NULL;
  enum tern_status st = tern_model_load(model, &mo, &m);
  if (st != TERN_OK) {
    fprintf(stderr, "FAIL load %s: %s: %s\n", model, tern_status_name(st), tern_last_error());
    return 1;
  }
  tern_session_options so = tern_session_options_default();
  so.n_ctx = n_ctx;
  so.kv_format = TERN_KV_F32; /* the 128 bytes per position above (the default q8 is smaller) */
  tern_session *s = NULL;
  st = tern_session_new(m, &so, &s);
  const char *msg = tern_last_error();
  int ok = st == TERN_OUT_OF_MEMORY && s == NULL && strstr(msg, "available") != NULL;
  if (ok) {
    printf("  n_ctx %u: %s: %s\n", n_ctx, tern_status_name(st), msg);
  } else {
    fprintf(stderr, "FAIL n_ctx %u: expected TERN_OUT_OF_MEMORY naming the memory available, got %s: %s\n",
            n_ctx, tern_status_name(st), msg);
  }
  tern_session_free(s);
  tern_model_free(m);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--templates") == 0) return check_templates(argv[2]);
  if (argc == 3 && strcmp(argv[1], "--kv") == 0) return check_kv(argv[2]);
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  DIR *d = opendir(argv[1]);
  if (!d) {
    perror(argv[1]);
    return 2;
  }
  struct dirent *e;
  int seen = 0;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 5, ".tern") != 0) continue;
    seen++;
    check_file(argv[1], e->d_name);
  }
  closedir(d);
  if (seen < 10) {
    fprintf(stderr, "FAIL: only %d hostile files in %s\n", seen, argv[1]);
    failed++;
  }
  printf("%d passed, %d failed (hostile files through tern_model_load + tern_session_new)\n",
         passed, failed);
  return failed ? 1 : 0;
}
