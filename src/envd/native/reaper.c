/*
 * envd's zombie reaper (N-API, ABI-stable). Node cannot waitpid(-1): libuv only waits
 * for the children it spawned, so orphans re-parented to envd (PID 1) would stay
 * zombies. JS finds zombie children in /proc and calls reap(pid) for each one that
 * envd itself does not track; reap() never touches other pids.
 * Built by scripts/build-envd.mjs: gcc -shared -fPIC -I/usr/include/node.
 */
#include <errno.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <node_api.h>

static napi_value Reap(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_value result;
  int32_t pid = 0;
  int status = 0;
  pid_t r;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 1 || napi_get_value_int32(env, argv[0], &pid) != napi_ok || pid <= 0) {
    napi_throw_type_error(env, NULL, "reap(pid): pid must be a positive integer");
    return NULL;
  }
  do {
    r = waitpid((pid_t)pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  napi_create_int32(env, r > 0 ? 1 : 0, &result);
  return result;
}

static napi_value Init(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "reap", NAPI_AUTO_LENGTH, Reap, NULL, &fn);
  napi_set_named_property(env, exports, "reap", fn);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
