/*
 * Extended attributes for envd (N-API, ABI-stable): Node has no xattr API, and E2B's
 * envd keeps file metadata as `user.e2b.*` xattrs. Paths follow symlinks, as E2B's do.
 *   list(path) -> string[]            listxattr
 *   get(path, name) -> Buffer|null    getxattr (null when the attribute is absent)
 *   set(path, name, value: Buffer)    setxattr
 *   remove(path, name)                removexattr (absent is not an error)
 * Errors are thrown with `code` set to the errno name (ENOTSUP, ENOENT, ENOSPC, ...).
 * Built by scripts/build-envd.mjs: gcc -shared -fPIC -I/usr/include/node.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/xattr.h>
#include <node_api.h>

#define MAX_PATH 4096
#define MAX_NAME 256

static const char *errno_code(int e) {
  switch (e) {
    case ENOENT: return "ENOENT";
    case ENOTDIR: return "ENOTDIR";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOTSUP: return "ENOTSUP";
    case ENOSPC: return "ENOSPC";
    case EDQUOT: return "EDQUOT";
    case E2BIG: return "E2BIG";
    case ERANGE: return "ERANGE";
    case ELOOP: return "ELOOP";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case EROFS: return "EROFS";
    case EINVAL: return "EINVAL";
    default: return "EIO";
  }
}

static napi_value throw_errno(napi_env env, const char *op, int e) {
  char msg[128];
  snprintf(msg, sizeof msg, "%s: %s", op, strerror(e));
  napi_throw_error(env, errno_code(e), msg);
  return NULL;
}

static int string_arg(napi_env env, napi_value v, char *buf, size_t cap) {
  size_t len = 0;
  if (napi_get_value_string_utf8(env, v, buf, cap, &len) != napi_ok || len == 0 || len >= cap - 1) return 0;
  return strlen(buf) == len; /* no NUL inside */
}

static int args(napi_env env, napi_callback_info info, size_t want, napi_value *argv) {
  size_t argc = want;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  return argc >= want;
}

static napi_value List(napi_env env, napi_callback_info info) {
  napi_value argv[1], out;
  char path[MAX_PATH];
  if (!args(env, info, 1, argv) || !string_arg(env, argv[0], path, sizeof path)) {
    napi_throw_type_error(env, NULL, "list(path): path must be a non-empty string");
    return NULL;
  }
  ssize_t n;
  char *buf = NULL;
  for (;;) {
    n = listxattr(path, NULL, 0);
    if (n < 0) return throw_errno(env, "listxattr", errno);
    free(buf);
    buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf) return throw_errno(env, "listxattr", ENOMEM);
    n = listxattr(path, buf, (size_t)n);
    if (n >= 0) break;
    if (errno != ERANGE) {
      int e = errno;
      free(buf);
      return throw_errno(env, "listxattr", e);
    }
  }
  napi_create_array(env, &out);
  uint32_t i = 0;
  for (ssize_t off = 0; off < n;) {
    size_t len = strnlen(buf + off, (size_t)(n - off));
    if (len > 0) {
      napi_value s;
      napi_create_string_utf8(env, buf + off, len, &s);
      napi_set_element(env, out, i++, s);
    }
    off += (ssize_t)len + 1;
  }
  free(buf);
  return out;
}

static napi_value Get(napi_env env, napi_callback_info info) {
  napi_value argv[2], out;
  char path[MAX_PATH], name[MAX_NAME];
  if (!args(env, info, 2, argv) || !string_arg(env, argv[0], path, sizeof path) || !string_arg(env, argv[1], name, sizeof name)) {
    napi_throw_type_error(env, NULL, "get(path, name): path and name must be non-empty strings");
    return NULL;
  }
  for (;;) {
    ssize_t n = getxattr(path, name, NULL, 0);
    if (n < 0) {
      if (errno == ENODATA) {
        napi_get_null(env, &out);
        return out;
      }
      return throw_errno(env, "getxattr", errno);
    }
    void *data = NULL;
    napi_create_buffer(env, (size_t)n, &data, &out);
    ssize_t m = n > 0 ? getxattr(path, name, data, (size_t)n) : 0;
    if (m == n) return out;
    if (m < 0 && errno != ERANGE) return throw_errno(env, "getxattr", errno);
    /* The value changed size between the two calls: read it again. */
  }
}

static napi_value Set(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  char path[MAX_PATH], name[MAX_NAME];
  void *data = NULL;
  size_t len = 0;
  bool isBuffer = false;
  if (!args(env, info, 3, argv) || !string_arg(env, argv[0], path, sizeof path) || !string_arg(env, argv[1], name, sizeof name) ||
      napi_is_buffer(env, argv[2], &isBuffer) != napi_ok || !isBuffer) {
    napi_throw_type_error(env, NULL, "set(path, name, value): path and name must be non-empty strings, value a Buffer");
    return NULL;
  }
  napi_get_buffer_info(env, argv[2], &data, &len);
  if (setxattr(path, name, len ? data : "", len, 0) != 0) return throw_errno(env, "setxattr", errno);
  return NULL;
}

static napi_value Remove(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  char path[MAX_PATH], name[MAX_NAME];
  if (!args(env, info, 2, argv) || !string_arg(env, argv[0], path, sizeof path) || !string_arg(env, argv[1], name, sizeof name)) {
    napi_throw_type_error(env, NULL, "remove(path, name): path and name must be non-empty strings");
    return NULL;
  }
  if (removexattr(path, name) != 0 && errno != ENODATA) return throw_errno(env, "removexattr", errno);
  return NULL;
}

static void export_fn(napi_env env, napi_value exports, const char *name, napi_callback cb) {
  napi_value fn;
  napi_create_function(env, name, NAPI_AUTO_LENGTH, cb, NULL, &fn);
  napi_set_named_property(env, exports, name, fn);
}

static napi_value Init(napi_env env, napi_value exports) {
  export_fn(env, exports, "list", List);
  export_fn(env, exports, "get", Get);
  export_fn(env, exports, "set", Set);
  export_fn(env, exports, "remove", Remove);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
