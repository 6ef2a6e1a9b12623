/*
 * envd's privileges (N-API, ABI-stable).
 *
 * makeUndumpable(): PR_SET_DUMPABLE 0. The sandbox's root has no CAP_SYS_PTRACE, and
 * without it the kernel refuses ptrace attach and /proc/1/mem, /proc/1/environ and the
 * like of a non-dumpable process even to the same uid: envd's memory (its access token,
 * the sandbox's env vars) is out of reach, and nobody can stop it.
 *
 * asUser(uid, gid, groups, fn): file operations with the requesting user's rights. It sets the calling thread's filesystem uid and gid and its
 * supplementary groups, calls fn, and restores them, also when fn throws. The kernel
 * then checks every path lookup, open, mkdir, rename and unlink as that user (and drops
 * CAP_DAC_OVERRIDE and the other filesystem capabilities while fsuid is not 0), and new
 * files belong to that user. Only this thread changes: the raw syscalls are used, not
 * glibc's setgroups(), which would change every thread of the process. So fn must do
 * synchronous I/O on the main thread (libuv's pool threads keep root's credentials).
 * Built by scripts/build-envd.mjs: gcc -shared -fPIC -I/usr/include/node.
 */
#include <errno.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>
#include <node_api.h>

#define MAX_GROUPS 256

static long fsuid(long id) { return syscall(SYS_setfsuid, id); }
static long fsgid(long id) { return syscall(SYS_setfsgid, id); }

static napi_value AsUser(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4], global, result = NULL;
  uint32_t uid, gid, n = 0;
  gid_t groups[MAX_GROUPS], saved[MAX_GROUPS];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 4 || napi_get_value_uint32(env, argv[0], &uid) != napi_ok || napi_get_value_uint32(env, argv[1], &gid) != napi_ok ||
      napi_get_array_length(env, argv[2], &n) != napi_ok || n > MAX_GROUPS) {
    napi_throw_type_error(env, NULL, "asUser(uid, gid, groups[<=256], fn)");
    return NULL;
  }
  for (uint32_t i = 0; i < n; i++) {
    napi_value v;
    uint32_t g;
    if (napi_get_element(env, argv[2], i, &v) != napi_ok || napi_get_value_uint32(env, v, &g) != napi_ok) {
      napi_throw_type_error(env, NULL, "asUser: groups must be numbers");
      return NULL;
    }
    groups[i] = (gid_t)g;
  }
  long nsaved = syscall(SYS_getgroups, MAX_GROUPS, saved);
  if (nsaved < 0) {
    napi_throw_error(env, NULL, strerror(errno));
    return NULL;
  }
  if (syscall(SYS_setgroups, (size_t)n, groups) != 0) {
    napi_throw_error(env, "EPERM", "asUser: setgroups refused (envd lacks CAP_SETGID)");
    return NULL;
  }
  long prev_gid = fsgid(gid);
  long prev_uid = fsuid(uid);
  /* setfsuid reports no error: read the ids back. */
  if (fsuid(-1) != (long)uid || fsgid(-1) != (long)gid) {
    fsuid(prev_uid);
    fsgid(prev_gid);
    syscall(SYS_setgroups, (size_t)nsaved, saved);
    napi_throw_error(env, "EPERM", "asUser: setfsuid/setfsgid refused (envd lacks CAP_SETUID/CAP_SETGID)");
    return NULL;
  }
  napi_get_global(env, &global);
  napi_status st = napi_call_function(env, global, argv[3], 0, NULL, &result);
  fsuid(prev_uid);
  fsgid(prev_gid);
  syscall(SYS_setgroups, (size_t)nsaved, saved);
  /* A throw in fn stays pending and reaches the caller. */
  return st == napi_ok ? result : NULL;
}

static napi_value MakeUndumpable(napi_env env, napi_callback_info info) {
  napi_value result;
  (void)info;
  napi_get_boolean(env, prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 && prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0, &result);
  return result;
}

static napi_value Init(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "asUser", NAPI_AUTO_LENGTH, AsUser, NULL, &fn);
  napi_set_named_property(env, exports, "asUser", fn);
  napi_create_function(env, "makeUndumpable", NAPI_AUTO_LENGTH, MakeUndumpable, NULL, &fn);
  napi_set_named_property(env, exports, "makeUndumpable", fn);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
