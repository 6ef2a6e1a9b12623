/*
 * nft scripts run by libnftables in this process instead of an `nft -f -` process each
 * (~4.5 ms of CPU per process on this 2-core machine, two per network slot): the library
 * the nft command is a thin shell around, loaded with dlopen (libnftables1, which the
 * nftables package depends on), so building needs no headers of it.
 *
 * run(script, netns) -> Promise<void>: the script as one transaction, as `nft -f -` runs
 * it; in the network namespace whose file is `netns` when it is a string (a thread of its
 * own joins it: a namespace is per thread, and libuv's pool threads are shared). Rejects
 * with an Error carrying nft's own message. Calls run one at a time (a context is not
 * thread-safe and the library keeps some state of its own), on libuv's thread pool.
 * available -> whether the library loaded (else the caller runs the nft command).
 * Built by scripts/build-envd.mjs into dist/node/nftables.node (N-API, ABI-stable).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <node_api.h>

struct nft_ctx;
static struct {
  struct nft_ctx *(*ctx_new)(uint32_t flags);
  void (*ctx_free)(struct nft_ctx *ctx);
  int (*buffer_output)(struct nft_ctx *ctx);
  int (*buffer_error)(struct nft_ctx *ctx);
  const char *(*get_error_buffer)(struct nft_ctx *ctx);
  int (*run_cmd_from_buffer)(struct nft_ctx *ctx, const char *buf);
} lib;
static int loaded;
static pthread_mutex_t one_at_a_time = PTHREAD_MUTEX_INITIALIZER;

struct work {
  napi_async_work async;
  napi_deferred deferred;
  char *script;
  char *netns;
  int ok;
  char error[2048];
};

static void run_script(struct work *w) {
  struct nft_ctx *ctx = lib.ctx_new(0);
  if (!ctx) {
    snprintf(w->error, sizeof w->error, "nft: cannot create a libnftables context");
    return;
  }
  lib.buffer_output(ctx);
  lib.buffer_error(ctx);
  if (lib.run_cmd_from_buffer(ctx, w->script) == 0) w->ok = 1;
  else {
    const char *e = lib.get_error_buffer(ctx);
    snprintf(w->error, sizeof w->error, "%s", e && *e ? e : "nft: the script failed");
  }
  lib.ctx_free(ctx);
}

static void *in_netns(void *p) {
  struct work *w = p;
  int fd = open(w->netns, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) snprintf(w->error, sizeof w->error, "nft: joining the namespace %s: %s", w->netns, strerror(errno));
  else run_script(w);
  if (fd >= 0) close(fd);
  return NULL;
}

static void execute(napi_env env, void *data) {
  struct work *w = data;
  (void)env;
  pthread_mutex_lock(&one_at_a_time);
  if (!w->netns) run_script(w);
  else {
    pthread_t t;
    int e = pthread_create(&t, NULL, in_netns, w);
    if (e) snprintf(w->error, sizeof w->error, "nft: cannot start a thread: %s", strerror(e));
    else pthread_join(t, NULL);
  }
  pthread_mutex_unlock(&one_at_a_time);
}

static void complete(napi_env env, napi_status status, void *data) {
  struct work *w = data;
  napi_value v, text;
  if (status == napi_ok && w->ok) {
    napi_get_undefined(env, &v);
    napi_resolve_deferred(env, w->deferred, v);
  } else {
    napi_create_string_utf8(env, w->error[0] ? w->error : "nft: the script did not run", NAPI_AUTO_LENGTH, &text);
    napi_create_error(env, NULL, text, &v);
    napi_reject_deferred(env, w->deferred, v);
  }
  napi_delete_async_work(env, w->async);
  free(w->script);
  free(w->netns);
  free(w);
}

static char *string_arg(napi_env env, napi_value v) {
  size_t len;
  char *s;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok || !(s = malloc(len + 1))) return NULL;
  napi_get_value_string_utf8(env, v, s, len + 1, &len);
  return s;
}

static napi_value Run(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], promise, name;
  napi_valuetype t = napi_undefined;
  struct work *w = calloc(1, sizeof *w);
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc > 1) napi_typeof(env, argv[1], &t);
  if (!w || argc < 1 || !loaded || !(w->script = string_arg(env, argv[0])) || (t == napi_string && !(w->netns = string_arg(env, argv[1])))) {
    if (w) free(w->script);
    free(w);
    napi_throw_type_error(env, NULL, loaded ? "run(script, netns): a string and a string or null" : "run: libnftables did not load");
    return NULL;
  }
  napi_create_promise(env, &w->deferred, &promise);
  napi_create_string_utf8(env, "nft", NAPI_AUTO_LENGTH, &name);
  napi_create_async_work(env, NULL, name, execute, complete, w, &w->async);
  napi_queue_async_work(env, w->async);
  return promise;
}

static void load(void) {
  void *h = dlopen("libnftables.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return;
  *(void **)&lib.ctx_new = dlsym(h, "nft_ctx_new");
  *(void **)&lib.ctx_free = dlsym(h, "nft_ctx_free");
  *(void **)&lib.buffer_output = dlsym(h, "nft_ctx_buffer_output");
  *(void **)&lib.buffer_error = dlsym(h, "nft_ctx_buffer_error");
  *(void **)&lib.get_error_buffer = dlsym(h, "nft_ctx_get_error_buffer");
  *(void **)&lib.run_cmd_from_buffer = dlsym(h, "nft_run_cmd_from_buffer");
  loaded = lib.ctx_new && lib.ctx_free && lib.buffer_output && lib.buffer_error && lib.get_error_buffer && lib.run_cmd_from_buffer;
}

static napi_value Init(napi_env env, napi_value exports) {
  napi_value fn, available;
  load();
  napi_create_function(env, "run", NAPI_AUTO_LENGTH, Run, NULL, &fn);
  napi_set_named_property(env, exports, "run", fn);
  napi_get_boolean(env, loaded, &available);
  napi_set_named_property(env, exports, "available", available);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
