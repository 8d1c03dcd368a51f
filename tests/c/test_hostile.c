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
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(int argc, char **argv) {
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
